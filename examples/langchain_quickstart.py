"""A LangChain ``create_agent`` agent with memory, on the embedded SQLite store.

    pip install ".[langchain,offline]" && python examples/langchain_quickstart.py

Needs: pip install ".[langchain,offline]"

``MemoryMiddleware(memory)`` gives the agent durable, budgeted memory. No checkpointer: the
history the model sees comes from the store. The scope comes from the run's config,
``{"configurable": {"thread_id": ..., "user_id": ...}}``: the thread is the conversation, the
user owns the long-term facts. In one conversation the agent is told something, and the next
turn's model is shown that turn; the model saves a fact with the ``save_memory`` tool; in a
later conversation it finds the fact with ``search_memory``.

Runs offline, with no API key: the model is a ``ScriptedChatModel`` that plays a tool-calling
model (see ``offline_model``). To use a real one, replace it with one line (and
``pip install langchain-openai``, ``OPENAI_API_KEY``)::

    model = init_chat_model("openai:gpt-4o-mini")  # from langchain.chat_models import ...

    python examples/langchain_quickstart.py                 # sqlite:///memory_adapters_demo.db
    python examples/langchain_quickstart.py /tmp/demo.db    # a file path, or any store URL
    MEMORY_ADAPTERS_URL=sqlite:////tmp/demo.db python examples/langchain_quickstart.py

Run it twice: the second run's conversations continue where the first one's ended.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from memory_adapters import Memory
from memory_adapters.langchain import MemoryMiddleware
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool

DEFAULT_URL = "sqlite:///memory_adapters_demo.db"
TURNS = (
    ("tea-chat-1", "Hi! My favourite tea is oolong."),
    ("tea-chat-1", "What did I just tell you?"),
    ("tea-chat-2", "Which tea do I like?"),  # a later conversation
)


def store_url(argv: list[str]) -> str:
    """The store URL from argv[1] (a URL or a file path), $MEMORY_ADAPTERS_URL, or the default."""
    if len(argv) > 1:
        arg = argv[1]
        return arg if "://" in arg else "sqlite:///" + arg
    return os.environ.get("MEMORY_ADAPTERS_URL") or DEFAULT_URL


def offline_model(messages: list[BaseMessage]) -> AIMessage | str:
    """Plays a tool-calling model: saves what the user says they like, quotes what the user said
    before, searches memory to answer a question, and answers from what the tools returned."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        if last.name == "save_memory":
            return "Noted. I'll remember that."
        found: list[dict[str, Any]] = json.loads(last.text)
        if found:
            return f"You told me before: {found[0]['value']} (from my memory)"
        return "I don't know yet; tell me!"
    prompt = str(last.text)  # message.text is a str subclass in langchain-core 1.x
    liked = re.search(r"favourite (\w+) is (\w+)", prompt, re.IGNORECASE)
    if liked:
        key, value = f"favourite_{liked[1].lower()}", f"your favourite {liked[1]} is {liked[2]}"
        return call_tool("save_memory", key=key, value=value)
    if "just tell" in prompt:
        said = [m.text for m in messages[:-1] if isinstance(m, HumanMessage)]
        return f"You said: {said[-1]!r}" if said else "Nothing yet."
    if prompt.rstrip().endswith("?"):
        return call_tool("search_memory", query=prompt)
    return "OK."


def show(new: list[BaseMessage]) -> None:
    """Print what a run added: tool calls, tool results and the answer."""
    for m in new:
        if isinstance(m, AIMessage) and m.tool_calls:
            for c in m.tool_calls:
                print(f"    the model calls {c['name']}({json.dumps(c['args'])})")
        elif isinstance(m, ToolMessage):
            print(f"    {m.name} returns {m.text}")
        elif isinstance(m, AIMessage):
            print(f"  agent: {m.text}")


def main(argv: list[str]) -> int:
    url = store_url(argv)
    print(f"store: {url}\n")
    model = ScriptedChatModel([offline_model])
    with Memory(url, namespace="langchain_quickstart") as memory:
        agent = create_agent(
            model,  # or: init_chat_model("openai:gpt-4o-mini")
            tools=[],  # your tools; the middleware adds the memory tools
            system_prompt="You are a friendly tea shop assistant. Be brief.",
            middleware=[MemoryMiddleware(memory)],
        )
        for thread, prompt in TURNS:
            config: RunnableConfig = {"configurable": {"thread_id": thread, "user_id": "alice"}}
            first_call = len(model.calls)
            result = agent.invoke({"messages": [{"role": "user", "content": prompt}]}, config)
            shown = [m for m in model.calls[first_call] if not isinstance(m, SystemMessage)]
            print(f"alice ({thread}): {prompt}")
            print(f"    (the model was shown {len(shown) - 1} earlier messages of {thread})")
            show(result["messages"][1:])
            print()
        with memory.session(user_id="alice"):
            facts = {f.key: f.value for f in memory.facts.all()}
        print(f"alice's long-term facts: {facts}")
        with memory.session(user_id="alice", conversation_id="tea-chat-1"):
            print(f"tea-chat-1 holds {memory.conversation.last_seq()} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
