"""A process running a LangChain ``create_agent`` agent with memory over a PostgreSQL
checkpointer, for ``tests/test_durable_langgraph.py``.

``CRASH=<crash> python durable_langgraph_child.py start <durability> <thread>`` runs one turn on
the thread and dies (``os._exit``) where ``crash`` says: ``tool`` inside the second tool call,
``saved`` once memory has stored the turn (in ``run_finished``). ``python
durable_langgraph_child.py resume <durability> <thread>...`` resumes each thread from its last
checkpoint (``invoke(None, ...)``), or, under durability ``"exit"`` (nothing was checkpointed
before the crash), runs the turn again.

Environment: ``PG`` (the checkpointer's database), ``URL`` (the memory store), ``LOG`` (the
model logs the messages of every call, with the thread, as JSON lines).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from memory_adapters_langchain import MemoryMiddleware

from memory_adapters import Memory, hookimpl
from memory_adapters.run import Run
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool

PROMPT = "My favourite tea is oolong"
CRASH = os.environ.get("CRASH", "")
THREAD = {"current": ""}


def shape(messages: list[BaseMessage]) -> list[list[Any]]:
    """What the model was shown, its system message left out."""
    return [
        [m.type, m.text, [c["name"] for c in getattr(m, "tool_calls", [])]]
        for m in messages
        if not isinstance(m, SystemMessage)
    ]


def script(messages: list[BaseMessage]) -> AIMessage:
    with open(os.environ["LOG"], "a") as log:
        log.write(json.dumps({"thread": THREAD["current"], "messages": shape(messages)}) + "\n")
    last = messages[-1]
    if isinstance(last, ToolMessage) and last.name == "save_memory":
        return call_tool("checkpoint")
    if isinstance(last, ToolMessage):
        return AIMessage("Noted: oolong.")
    return call_tool("save_memory", key="tea", value="oolong")


def checkpoint() -> str:
    """A tool step: kills the process, under the ``tool`` crash."""
    if CRASH == "tool":
        os._exit(3)
    return "ok"


class DieAfterSaving:
    """Kills the process once memory has stored the turn (under the ``saved`` crash)."""

    @hookimpl
    def run_finished(self, run: Run, messages: list[Any]) -> None:
        if CRASH == "saved":
            os._exit(3)


def main(command: str, durability: Any, threads: list[str]) -> None:
    memory = Memory(os.environ["URL"], plugins=[DieAfterSaving()])
    with PostgresSaver.from_conn_string(os.environ["PG"]) as saver:
        saver.setup()
        agent = create_agent(
            ScriptedChatModel([script] * 10),
            tools=[checkpoint],
            middleware=[MemoryMiddleware(memory)],
            checkpointer=saver,
        )
        for thread in threads:
            THREAD["current"] = thread
            config: Any = {"configurable": {"thread_id": thread, "user_id": f"user-{thread}"}}
            again = command == "start" or durability == "exit"
            turn: Any = {"messages": [("user", PROMPT)]} if again else None
            agent.invoke(turn, config, durability=durability)
    memory.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
