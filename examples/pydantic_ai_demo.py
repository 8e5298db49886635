"""The demo: a pydantic-ai agent that remembers, across processes, on the embedded SQLite store.

    pip install ".[pydantic-ai,offline,embeddings]" && python examples/pydantic_ai_demo.py

Needs: pip install ".[pydantic-ai,offline,embeddings]"

Two child processes run the same agent, wrapped with ``memory.wrap(agent)``. The first tells
it something in one conversation; the second, a new process in a new conversation, asks, and
the answer shows what the first one left: the fact it saved with the memory tools, found by
meaning — "Which drink do I prefer?" shares no word with "favourite tea: oolong"; the
``embeddings`` extra's offline model (all-MiniLM-L6-v2, no download) makes the search semantic.
No server and no API key: the model is a ``FunctionModel`` that plays a model offline (it
calls the memory tools the way a model would). With
``OPENAI_API_KEY`` set (and ``pip install "pydantic-ai-slim[openai]"``) the agent uses
``openai:gpt-4o-mini`` instead, or the model named by ``MEMORY_ADAPTERS_DEMO_MODEL``.

    python examples/pydantic_ai_demo.py                 # sqlite:///memory_adapters_demo.db (cwd)
    python examples/pydantic_ai_demo.py /tmp/demo.db    # a file path, or any store URL
    MEMORY_ADAPTERS_URL=sqlite:////tmp/demo.db python examples/pydantic_ai_demo.py

Run it twice: the facts and conversations of the first run are still there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

DEFAULT_URL = "sqlite:///memory_adapters_demo.db"
TURNS = (
    ("tea-chat-1", "Hi! My favourite tea is oolong."),
    ("tea-chat-2", "Which drink do I prefer?"),
)


def store_url(argv: list[str]) -> str:
    """The store URL from argv[1] (a URL or a file path), $MEMORY_ADAPTERS_URL, or the default."""
    if len(argv) > 1:
        arg = argv[1]
        return arg if "://" in arg else "sqlite:///" + arg
    return os.environ.get("MEMORY_ADAPTERS_URL") or DEFAULT_URL


# -- the model ------------------------------------------------------------------------------------


def offline_model(messages: list[Any], info: Any) -> Any:
    """Plays a tool-calling model: saves what the user says they like, searches memory to
    answer a question, and answers from what the tools returned."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart

    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if returns:
        result = returns[0]
        if result.tool_name == "save_memory":
            return ModelResponse(parts=[TextPart("Noted. I'll remember that.")])
        content = result.content
        found: list[dict[str, Any]] = json.loads(content) if isinstance(content, str) else []
        if found:
            fact = found[0]
            return ModelResponse(
                parts=[TextPart(f"You told me before: {fact['value']} (from my memory)")]
            )
        return ModelResponse(parts=[TextPart("I don't know yet; tell me!")])
    prompt = next(
        (str(p.content) for p in reversed(last.parts) if p.part_kind == "user-prompt"), ""
    )
    liked = re.search(r"favourite (\w+) is (\w+)", prompt, re.IGNORECASE)
    if liked:
        args = {
            "key": f"favourite_{liked[1].lower()}",
            "value": f"your favourite {liked[1]} is {liked[2]}",
        }
        return ModelResponse(parts=[ToolCallPart("save_memory", args, "call-save")])
    if prompt.rstrip().endswith("?"):
        query = {"query": prompt}
        return ModelResponse(parts=[ToolCallPart("search_memory", query, "call-search")])
    return ModelResponse(parts=[TextPart("OK.")])


def make_model() -> Any:
    """The offline model, or a real one when an API key is set."""
    from pydantic_ai.models.function import FunctionModel

    name = os.environ.get("MEMORY_ADAPTERS_DEMO_MODEL")
    if name is None and os.environ.get("OPENAI_API_KEY"):
        name = "openai:gpt-4o-mini"
    if name:
        try:
            from pydantic_ai.models import infer_model

            return infer_model(name)
        except Exception as exc:  # the provider's package is missing, for example
            print(f"(cannot use {name}: {exc}; using the offline model)", file=sys.stderr)
    return FunctionModel(offline_model)


# -- one process ----------------------------------------------------------------------------------


def child(url: str, conversation: str, prompt: str) -> None:
    """One process: the wrapped agent answers one prompt for alice, in ``conversation``."""
    from pydantic_ai import Agent

    from memory_adapters import Memory

    agent = Agent(make_model(), instructions="You are a friendly tea shop assistant. Be brief.")
    with Memory(
        url, namespace="pydantic_ai_demo"
    ) as memory:  # the embeddings extra's offline model: semantic recall
        agent_with_memory = memory.wrap(agent)
        with memory.session(user_id="alice", conversation_id=conversation):
            result = agent_with_memory.run_sync(prompt)
            stored = memory.conversation.last_seq()
    pid = os.getpid()
    print(f"[process {pid}] alice ({conversation}): {prompt}")
    print(f"[process {pid}] agent: {result.output}")
    print(f"[process {pid}] ({stored} messages stored in {conversation})")


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == "--child":
        child(*argv[2:5])
        return 0
    url = store_url(argv)
    print(f"store: {url}\n")
    for conversation, prompt in TURNS:
        done = subprocess.run(
            [sys.executable, __file__, "--child", url, conversation, prompt],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return done.returncode
        print(done.stdout)
    print("The second process answered from what the first one stored.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
