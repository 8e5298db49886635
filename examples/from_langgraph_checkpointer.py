"""Move a LangGraph thread's messages from a checkpointer into memory-adapters.

A LangGraph agent with a checkpointer (``InMemorySaver`` here; ``SqliteSaver`` and
``PostgresSaver`` answer the same calls) keeps each thread's messages in its checkpoints.
LangChain has no exporter from a checkpointer to a chat history, so this reads each thread's
latest state (``graph.get_state``), finds the threads with ``checkpointer.list(None)``, and
appends the messages to a memory-adapters conversation of the same id, one turn per human
message, each under an idempotency key (running it again stores nothing twice). The agent then
runs with ``MemoryMiddleware`` and no checkpointer, and its model is shown the moved history.

Store: argv[1] (a URL or a file path), ``$MEMORY_ADAPTERS_URL`` or
``sqlite:///memory_adapters_demo.db``. Offline: the models are scripted.

    pip install ".[langchain,offline]" && python examples/from_langgraph_checkpointer.py

Needs: pip install ".[langchain,offline]"
"""

from __future__ import annotations

import os
import sys
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from memory_adapters import Memory
from memory_adapters.langchain import MemoryMiddleware, to_messages
from memory_adapters.testing.langchain import ScriptedChatModel

DEFAULT_URL = "sqlite:///memory_adapters_demo.db"


def threads(checkpointer: InMemorySaver) -> list[str]:
    """The thread ids the checkpointer holds checkpoints of, in the order first seen."""
    seen: dict[str, None] = {}
    for saved in checkpointer.list(None):
        seen.setdefault(str(saved.config["configurable"]["thread_id"]), None)
    return list(seen)


def copy_thread(graph: Any, thread_id: str, memory: Memory, *, user_id: str) -> int:
    """Append the thread's messages (its latest checkpoint) to the conversation ``thread_id``
    of ``user_id``, one turn per human message; returns how many were appended (0 when this
    thread was copied already)."""
    messages: list[BaseMessage] = graph.get_state(
        {"configurable": {"thread_id": thread_id}}
    ).values.get("messages", [])
    turns: list[list[BaseMessage]] = []
    for message in messages:
        if isinstance(message, HumanMessage) or not turns:
            turns.append([])
        turns[-1].append(message)
    appended = 0
    with memory.session(user_id=user_id, conversation_id=thread_id):
        for n, turn in enumerate(turns):
            result = memory.conversation.append(to_messages(turn), idempotency_key=f"langgraph-{n}")
            if not result.duplicate:
                appended += result.last_seq - result.first_seq + 1
    return appended


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else os.environ.get("MEMORY_ADAPTERS_URL") or DEFAULT_URL
    memory = Memory(
        url if "://" in url else f"sqlite:///{url}", namespace="from_langgraph_checkpointer"
    )

    # Before: an agent whose history lives in a checkpointer.
    checkpointer = InMemorySaver()
    before = create_agent(
        ScriptedChatModel([AIMessage("Oolong it is."), AIMessage("Enjoy Taipei!")]),
        tools=[],
        checkpointer=checkpointer,
    )
    config: Any = {"configurable": {"thread_id": "trip-1"}}
    for text in ("My favourite tea is oolong.", "I am off to Taipei next week."):
        before.invoke({"messages": [HumanMessage(text)]}, config)

    # The move: every thread of the checkpointer, into memory-adapters.
    for thread_id in threads(checkpointer):
        copied = copy_thread(before, thread_id, memory, user_id="ada")
        print(f"thread {thread_id}: copied {copied} messages")

    # After: the same agent with memory instead of a checkpointer.
    model = ScriptedChatModel([AIMessage("You like oolong, and Taipei is next week.")])
    after = create_agent(model, tools=[], middleware=[MemoryMiddleware(memory, tools=False)])
    with memory.session(user_id="ada", conversation_id="trip-1"):
        reply = after.invoke({"messages": [HumanMessage("What do you know about my trip?")]})
    shown = [m.text for m in model.calls[-1] if isinstance(m, HumanMessage)]
    print("the model was shown:", shown)
    print("model:", reply["messages"][-1].text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
