"""Move LangChain chat histories into memory-adapters: a one-off copy, then the same code.

An application built on ``RunnableWithMessageHistory`` keeps each session's messages in a
``BaseChatMessageHistory`` (here LangChain's in-memory ``InMemoryChatMessageHistory``, the
``ChatMessageHistory`` of its docs; langchain-postgres' ``PostgresChatMessageHistory``, Redis,
files: any of them). ``copy_history`` copies one session into a memory-adapters conversation,
turn by turn (a turn starts at each human message), each turn appended under an idempotency
key, so a copy that is interrupted and run again, or run twice, stores every turn once. After
the copy, the runnable's ``get_session_history`` returns a ``MemoryChatMessageHistory`` over
the same conversation and the chain goes on where it was, now with a budgeted window.

Store: argv[1] (a URL or a file path), ``$MEMORY_ADAPTERS_URL`` or
``sqlite:///memory_adapters_demo.db``. Offline: the chat model is LangChain's
``FakeListChatModel``.

    pip install ".[langchain,offline]" && python examples/from_langchain_history.py

Needs: pip install ".[langchain,offline]"
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence

from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from memory_adapters import Memory
from memory_adapters.langchain import MemoryChatMessageHistory, to_messages

DEFAULT_URL = "sqlite:///memory_adapters_demo.db"

# LangChain deprecates RunnableWithMessageHistory and its in-memory history in favour of
# LangGraph persistence; this example is for the applications that still use them.
warnings.filterwarnings(
    "ignore", r".*(RunnableWithMessageHistory|InMemoryChatMessageHistory)", DeprecationWarning
)


def turns(messages: Sequence[BaseMessage]) -> list[list[BaseMessage]]:
    """``messages`` cut into turns, each starting at a human message (what came before the
    first human message, a system message say, is a turn of its own)."""
    out: list[list[BaseMessage]] = []
    for message in messages:
        if isinstance(message, HumanMessage) or not out:
            out.append([])
        out[-1].append(message)
    return out


def copy_history(
    source: BaseChatMessageHistory,
    memory: Memory,
    *,
    conversation_id: str,
    user_id: str | None = None,
    key: str = "import",
) -> int:
    """Copy ``source``'s messages into the conversation ``conversation_id`` of ``memory`` (for
    ``user_id``), one append per turn, each under the idempotency key ``<key>-<n>``: running it
    again stores nothing twice. Returns how many messages the copy appended."""
    appended = 0
    with memory.session(user_id=user_id, conversation_id=conversation_id):
        for n, turn in enumerate(turns(source.messages)):
            result = memory.conversation.append(to_messages(turn), idempotency_key=f"{key}-{n}")
            if not result.duplicate:
                appended += result.last_seq - result.first_seq + 1
    return appended


def old_sessions() -> dict[str, InMemoryChatMessageHistory]:
    """The application before the move: its sessions in LangChain's in-memory history."""
    history = InMemoryChatMessageHistory()
    history.add_messages(
        [
            HumanMessage("Hi, I'm Ada. My favourite tea is oolong."),
            AIMessage("Nice to meet you, Ada. Oolong noted."),
            HumanMessage("I am planning a trip to Taipei."),
            AIMessage("Taipei has wonderful tea houses."),
        ]
    )
    return {"ada-1": history}


def chain(memory: Memory, replies: list[str]) -> RunnableWithMessageHistory:
    """The application's runnable, its history now kept by memory-adapters."""
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You are a helpful assistant."),
            MessagesPlaceholder("history"),
            ("human", "{input}"),
        ]
    )
    model = FakeListChatModel(responses=replies)
    return RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: MemoryChatMessageHistory(memory, conversation_id=session_id),
        input_messages_key="input",
        history_messages_key="history",
    )


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else os.environ.get("MEMORY_ADAPTERS_URL") or DEFAULT_URL
    memory = Memory(url if "://" in url else f"sqlite:///{url}", namespace="from_langchain_history")
    with memory.session(user_id="ada"):
        for session_id, history in old_sessions().items():
            copied = copy_history(history, memory, conversation_id=session_id, user_id="ada")
            print(f"{session_id}: copied {copied} of {len(history.messages)} messages")
        runnable = chain(memory, ["You told me: oolong."])
        answer = runnable.invoke(
            {"input": "Which tea do I like?"}, {"configurable": {"session_id": "ada-1"}}
        )
        print("model:", answer.content)
        with memory.session(conversation_id="ada-1"):
            stored = memory.conversation.read()
        print(f"ada-1 now holds {len(stored)} messages; the first: {stored[0].message.text!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
