"""Every entry point with every kind of output, through both surfaces (``MemoryMiddleware`` and
``memory.wrap``), on every store: each run is stored exactly once, whole (a structured-output
tool call with its ``ToolMessage``), and the next run's model is shown the turns before it,
every tool call with its result. One conversation per cell goes through all the entry points in
turn, so each run is the "next run" of the one before; a last run in another process checks
that the store, not the process, is what remembers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents.structured_output import ProviderStrategy, ToolStrategy
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from memory_adapters_langchain import MemoryMiddleware, from_messages
from pydantic import BaseModel
from stores import STORES, open_memory
from test_langchain import check_pairs, make_agent, stored, weather

from memory_adapters import Memory, Message
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool


class Weather(BaseModel):
    """The weather in a city."""

    city: str
    sunny: bool


class Forecast(BaseModel):
    """A forecast for a city."""

    city: str
    days: int


KINDS: dict[str, Any] = {
    "text": None,
    "tool-strategy": ToolStrategy(Weather),
    "provider-strategy": ProviderStrategy(Weather),
    "union": ToolStrategy(Weather | Forecast),
}
"""What the agent answers with: plain text, or a structured response (``response_format=``)."""


def final(kind: str, question: str) -> AIMessage:
    """The model's last message of a run, for the kind of output the agent was built for."""
    if kind == "text":
        return AIMessage(f"answer to {question}")
    if kind == "provider-strategy":  # the provider's JSON mode: the answer is JSON text
        return AIMessage(json.dumps({"city": question, "sunny": True}))
    if kind == "union" and question.endswith(("1", "3", "5", "7")):
        return call_tool("Forecast", city=question, days=3)
    return call_tool("Weather", city=question, sunny=True)


def expected_response(kind: str, question: str) -> Any:
    if kind == "text":
        return None
    if kind == "union" and question.endswith(("1", "3", "5", "7")):
        return Forecast(city=question, days=3)
    return Weather(city=question, sunny=True)


def model_for(kind: str) -> ScriptedChatModel:
    """Each run: a call of the ``weather`` tool, then the final answer."""

    def reply(messages: list[BaseMessage]) -> AIMessage:
        question = next(m.text for m in reversed(messages) if isinstance(m, HumanMessage))
        if isinstance(messages[-1], HumanMessage):
            return call_tool("weather", city=question)
        return final(kind, question)

    return ScriptedChatModel([reply])


def build(
    memory: Memory, surface: str, kind: str, model: ScriptedChatModel, **memory_options: Any
) -> Any:
    options: dict[str, Any] = {"tools": [weather]}
    if KINDS[kind] is not None:
        options["response_format"] = KINDS[kind]
    if surface == "middleware":
        middleware = MemoryMiddleware(memory, tools=False, **memory_options)
        return make_agent(model, middleware=[middleware], **options)
    return memory.wrap(make_agent(model, **options), **memory_options)


def last_values(chunks: list[Any]) -> Any:
    return chunks[-1] if chunks else None


async def consume(stream: Any) -> list[Any]:
    return [part async for part in stream]


Entry = Callable[[Any, dict[str, Any], dict[str, Any]], Any]
"""Runs the agent once through one entry point; returns the final state when it gives one."""

ENTRY_POINTS: dict[str, Entry] = {
    "invoke": lambda agent, given, config: agent.invoke(given, config),
    "ainvoke": lambda agent, given, config: asyncio.run(agent.ainvoke(given, config)),
    "stream-updates": lambda agent, given, config: (
        [*agent.stream(given, config, stream_mode="updates")] and None
    ),
    "stream-values": lambda agent, given, config: last_values(
        [*agent.stream(given, config, stream_mode="values")]
    ),
    "astream-updates": lambda agent, given, config: (
        asyncio.run(consume(agent.astream(given, config, stream_mode="updates"))) and None
    ),
    "astream-values": lambda agent, given, config: last_values(
        asyncio.run(consume(agent.astream(given, config, stream_mode="values")))
    ),
    "stream-messages": lambda agent, given, config: (
        [*agent.stream(given, config, stream_mode="messages")] and None
    ),
    "invoke-v2": lambda agent, given, config: agent.invoke(given, config, version="v2").value,
    "astream-events": lambda agent, given, config: (
        asyncio.run(consume(agent.astream_events(given, config, version="v2"))) and None
    ),
    "batch": lambda agent, given, config: agent.batch([given], config)[0],
    "abatch": lambda agent, given, config: asyncio.run(agent.abatch([given], config))[0],
}


def turn(kind: str, question: str) -> list[tuple[str, str, list[str]]]:
    """What one run stores: role, text and tool-call names of each message."""
    out = [("user", question, []), ("assistant", "", ["weather"]), ("tool", "", [])]
    answer = final(kind, question)
    if answer.tool_calls:  # ToolStrategy: a call of the structured-output tool, and its result
        out += [("assistant", "", [answer.tool_calls[0]["name"]]), ("tool", "", [])]
    else:
        out.append(("assistant", str(answer.text), []))
    return out


def shape(messages: list[Message]) -> list[tuple[str, str, list[str]]]:
    return [(m.role, m.text, [c.name for c in m.tool_calls]) for m in messages]


def seen_shape(messages: list[BaseMessage]) -> list[tuple[str, str, list[str]]]:
    return [(m.type, m.text, [c["name"] for c in getattr(m, "tool_calls", [])]) for m in messages]


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("surface", ["middleware", "wrap"])
def test_every_entry_point_and_output_persists_once_and_is_remembered(
    memory: Memory, surface: str, kind: str
) -> None:
    model = model_for(kind)
    agent = build(memory, surface, kind, model)
    config = {"configurable": {"thread_id": "matrix", "user_id": "alice"}}
    expected: list[tuple[str, str, list[str]]] = []
    for i, (name, entry) in enumerate(ENTRY_POINTS.items()):
        question = f"{name} {i}"
        calls_before = len(model.calls)
        before = stored(memory, "matrix", "alice")
        state = entry(agent, {"messages": [("user", question)]}, config)
        # stored exactly once, whole
        expected += turn(kind, question)
        log = stored(memory, "matrix", "alice")
        assert shape(log) == expected, name
        if KINDS[kind] is not None and state is not None:
            assert state["structured_response"] == expected_response(kind, question), name
        # the run's first model call was shown every earlier turn, then its prompt
        shown = [m for m in model.calls[calls_before] if not isinstance(m, SystemMessage)]
        check_pairs(shown)
        assert seen_shape(shown) == seen_shape([*from_messages(before), HumanMessage(question)])
        for later in model.calls[calls_before:]:
            check_pairs([m for m in later if not isinstance(m, SystemMessage)])


@pytest.mark.parametrize("kind", ["tool-strategy", "union"])
@pytest.mark.parametrize("surface", ["middleware", "wrap"])
def test_a_short_window_keeps_structured_output_calls_with_their_results(
    memory: Memory, surface: str, kind: str
) -> None:
    model = model_for(kind)
    agent = build(memory, surface, kind, model, history_tokens=150)
    config = {"configurable": {"thread_id": "short"}}
    for i in range(6):
        before = from_messages(stored(memory, "short"))
        calls_before = len(model.calls)
        agent.invoke({"messages": [("user", f"question {i}")]}, config)
        shown = [m for m in model.calls[calls_before] if not isinstance(m, SystemMessage)]
        check_pairs(shown)
        assert isinstance(shown[0], HumanMessage)
        window = seen_shape(shown[:-1])
        assert window == seen_shape(before)[len(before) - len(window) :]  # the newest turns
        if i >= 3:
            assert len(window) < len(before)  # the budget left the oldest turns out
    assert len(stored(memory, "short")) == 6 * 5


NEXT = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, os.environ["TESTS"])
    from memory_adapters import Memory
    from test_langchain_matrix import build, model_for

    memory = Memory(os.environ["URL"], store_options=json.loads(os.environ["OPTIONS"]))
    model = model_for(os.environ["KIND"])
    agent = build(memory, os.environ["SURFACE"], os.environ["KIND"], model)
    config = {"configurable": {"thread_id": "matrix", "user_id": "alice"}}
    agent.invoke({"messages": [("user", "next 9")]}, config)
    shown = [m for m in model.calls[0] if m.type != "system"]
    print(json.dumps([[m.type, m.text, [c["name"] for c in getattr(m, "tool_calls", [])]]
                      for m in shown]))
    memory.close()
    """
)


@pytest.mark.processes
@pytest.mark.parametrize("surface", ["middleware", "wrap"])
def test_the_next_run_in_another_process_is_shown_the_structured_turn(
    shared_store: tuple[str, dict[str, Any]], surface: str
) -> None:
    url, options = shared_store
    kind = "union"
    memory = Memory(url, store_options=options)
    try:
        agent = build(memory, surface, kind, model_for(kind))
        config = {"configurable": {"thread_id": "matrix", "user_id": "alice"}}
        for entry, question in (("stream-updates", "stream 1"), ("invoke", "invoke 2")):
            ENTRY_POINTS[entry](agent, {"messages": [("user", question)]}, config)
        before = stored(memory, "matrix", "alice")
        env = {
            **os.environ,
            "TESTS": str(Path(__file__).parent),
            "URL": url,
            "OPTIONS": json.dumps(options),
            "SURFACE": surface,
            "KIND": kind,
        }
        done = subprocess.run(
            [sys.executable, "-c", NEXT], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        shown = [tuple(m) for m in json.loads(done.stdout)]
        expected = [
            (t, text, list(calls))
            for t, text, calls in seen_shape([*from_messages(before), HumanMessage("next 9")])
        ]
        assert [(t, text, list(calls)) for t, text, calls in shown] == expected
        assert shape(stored(memory, "matrix", "alice")) == [
            *turn(kind, "stream 1"),
            *turn(kind, "invoke 2"),
            *turn(kind, "next 9"),
        ]
    finally:
        memory.close()
