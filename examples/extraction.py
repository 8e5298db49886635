"""Memories that form themselves: an agent that never calls ``save_memory`` still remembers.

    pip install ".[pydantic-ai,offline]" && python examples/extraction.py

Needs: pip install ".[pydantic-ai,offline]"

Two child processes share one store. In the first, a pydantic-ai agent, wrapped with
``memory.wrap(agent)``, chats with alice; its model never calls a memory tool. The ``Memory``
has an extractor (``Memory(extractor=...)``): after each turn is stored, in the background,
another model reads the new messages and the facts alice already has, and proposes
operations, which the library applies: "I moved to Porto" updates ``home_city``, the old
value kept in its history, written by the extractor. In the second process, a new
conversation, the agent finds what the first one was told, with ``search_memory``.

No server and no API key: both models are ``FunctionModel`` s playing models offline (the
extractor answers through pydantic-ai's structured output, as a real model would). With
``OPENAI_API_KEY`` set (and ``pip install "pydantic-ai-slim[openai]"``) the extractor is
``openai:gpt-4o-mini`` instead.

    python examples/extraction.py                 # sqlite:///memory_adapters_demo.db (cwd)
    python examples/extraction.py /tmp/demo.db    # a file path, or any store URL

Run it twice: the facts are still there, and the second run's extraction, proposing them
again, adds no duplicate (the history grows only where something changed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

DEFAULT_URL = "sqlite:///memory_adapters_demo.db"
TOLD = (
    "Hi! My favourite tea is oolong.",
    "I live in Lisbon, near the river.",
    "Big news: I moved to Porto last week.",
)
ASKED = ("Where do I live?", "Which tea is my favourite?")


def store_url(argv: list[str]) -> str:
    """The store URL from argv[1] (a URL or a file path), $MEMORY_ADAPTERS_URL, or the default."""
    if len(argv) > 1:
        arg = argv[1]
        return arg if "://" in arg else "sqlite:///" + arg
    return os.environ.get("MEMORY_ADAPTERS_URL") or DEFAULT_URL


# -- the models -----------------------------------------------------------------------------------


def extractor_model(messages: list[Any], info: Any) -> Any:
    """Plays the extracting model: reads the prompt the library wrote (the remembered facts,
    the new messages) and answers with operations through the output tool."""
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    prompt = str(messages[-1].parts[-1].content)
    known = {line[2:].split(": ", 1)[0] for line in prompt.splitlines() if line.startswith("- ")}
    ops: list[dict[str, Any]] = []
    for line in prompt.splitlines():
        if not line.startswith("user: "):
            continue
        liked = re.search(r"favourite (\w+) is (\w+)", line)
        if liked:
            key = f"favourite_{liked[1]}"
            ops.append({"op": "add", "key": key, "value": f"{liked[2]} {liked[1]}"})
        place = re.search(r"(?:live in|moved to) (\w+)", line)
        if place:
            op = "update" if "home_city" in known else "add"
            ops.append({"op": op, "key": "home_city", "value": f"lives in {place[1]}"})
            known.add("home_city")
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"operations": ops})])


def chat_model(messages: list[Any], info: Any) -> Any:
    """Plays the agent's model: it never saves anything; asked a question, it searches memory
    once and answers with the best fact found."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart

    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if returns:
        found = json.loads(str(returns[0].content))
        if found:
            return ModelResponse(parts=[TextPart(f"From memory: {found[0]['value']}.")])
        return ModelResponse(parts=[TextPart("I don't know yet.")])
    prompt = next(str(p.content) for p in reversed(last.parts) if p.part_kind == "user-prompt")
    if prompt.endswith("?"):
        return ModelResponse(parts=[ToolCallPart("search_memory", {"query": prompt}, "s1")])
    return ModelResponse(parts=[TextPart("Good to know!")])


def make_extractor() -> Any:
    """The offline extracting model, or a real one when an API key is set."""
    from pydantic_ai.models.function import FunctionModel

    if os.environ.get("OPENAI_API_KEY"):
        try:
            from pydantic_ai.models import infer_model

            return infer_model("openai:gpt-4o-mini")
        except Exception as exc:  # the provider's package is missing, for example
            print(f"(cannot use openai:gpt-4o-mini: {exc}; offline)", file=sys.stderr)
    return FunctionModel(extractor_model, model_name="offline-extractor")


# -- one process ----------------------------------------------------------------------------------


def child(url: str, what: str) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from memory_adapters import Memory

    memory = Memory(url, namespace="extraction", embed=False, extractor=make_extractor())
    agent = memory.wrap(Agent(FunctionModel(chat_model)))
    pid = os.getpid()
    if what == "tell":
        with memory.session(user_id="alice", conversation_id="monday"):
            for text in TOLD:
                print(f"[process {pid}] alice: {text}")
                print(f"[process {pid}] agent: {agent.run_sync(text).output}")
            assert memory.extraction is not None
            memory.extraction.wait()  # read-your-writes, to print what was extracted
            calls = memory.extraction.calls
            print(f"[process {pid}] extractor calls: {calls} (after the turns, in the background)")
            for fact in memory.facts.all():
                print(f"[process {pid}] fact {fact.key} = {fact.value!r} (version {fact.version})")
            for change in reversed(memory.facts.history("home_city")):
                w = change.writer
                print(
                    f"[process {pid}]   home_city was {change.value!r}: written by the {w.kind} "
                    f"{w.model}, from messages {w.start_seq}..{w.end_seq}"
                )
    else:
        for i, question in enumerate(ASKED):
            with memory.session(user_id="alice", conversation_id=f"tuesday-{i}"):
                print(f"[process {pid}] alice: {question}")
                print(f"[process {pid}] agent: {agent.run_sync(question).output}")
    memory.close()


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == "--child":
        child(argv[2], argv[3])
        return 0
    url = store_url(argv)
    print(f"store: {url}\n")
    for what in ("tell", "ask"):
        done = subprocess.run(
            [sys.executable, __file__, "--child", url, what], capture_output=True, text=True
        )
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return done.returncode
        print(done.stdout)
    print("The agent never called save_memory: the extractor formed those memories.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
