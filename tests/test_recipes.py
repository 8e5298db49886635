"""The recipes' copy loops against the real sources CI's example environments do not have.

``examples/from_langchain_history.py`` runs in CI on LangChain's in-memory history; its
``copy_history`` is for any ``BaseChatMessageHistory``, and docs/recipes/from-langchain-postgres.md
promises it for langchain-postgres' ``PostgresChatMessageHistory``: tested here on the tests'
own PostgreSQL server, into SQLite and PostgreSQL stores.
"""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_postgres import PostgresChatMessageHistory

from memory_adapters import Memory
from memory_adapters.langchain import from_messages

ROOT = Path(__file__).resolve().parent.parent


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CONVERSATION = [
    SystemMessage("You are a travel assistant."),
    HumanMessage("My favourite tea is oolong."),
    AIMessage(
        "",
        tool_calls=[{"name": "save_memory", "args": {"key": "tea", "value": "oolong"}, "id": "c1"}],
    ),
    ToolMessage("saved", tool_call_id="c1"),
    AIMessage("Noted."),
    HumanMessage("I am off to Taipei."),
    AIMessage("Enjoy the tea houses."),
]


def test_copy_from_postgres_chat_message_history(
    postgres_url: str, shared_store: tuple[str, dict[str, Any]]
) -> None:
    """Every message arrives once, in order, with its tool calls, one batch per turn, into a
    SQLite file and a PostgreSQL schema (``shared_store``), the copy run twice."""
    copy_history = _example("from_langchain_history").copy_history
    table = "chat_" + uuid.uuid4().hex[:8]
    session_id = str(uuid.uuid4())
    url, options = shared_store
    with psycopg.connect(postgres_url) as connection:
        PostgresChatMessageHistory.create_tables(connection, table)
        source = PostgresChatMessageHistory(table, session_id, sync_connection=connection)
        source.add_messages(CONVERSATION)
        memory = Memory(url, store_options=options)
        try:
            copied = [
                copy_history(source, memory, conversation_id=session_id, user_id="ada")
                for _ in range(2)  # an interrupted copy run again stores nothing twice
            ]
            with memory.session(user_id="ada", conversation_id=session_id):
                records = memory.conversation.read()
        finally:
            memory.close()
    assert copied == [len(CONVERSATION), 0]
    back = from_messages([r.message for r in records])
    assert [(type(m), m.text) for m in back] == [(type(m), m.text) for m in CONVERSATION]
    assert isinstance(back[2], AIMessage)
    assert back[2].tool_calls[0]["args"] == {"key": "tea", "value": "oolong"}
    # one batch per turn: the system message, then each turn from its human message
    assert sorted({r.batch for r in records}) == [1, 2, 6]
