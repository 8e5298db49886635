"""Runs that go wrong, with real pydantic-ai agents on every store: a tool that raises, call
ids reused across runs, a run retried under the same run id, a model that puts ``NaN`` in
tool arguments, sub-agents that fail or run side by side. Memory never fails a run, never
loses a turn and never hands the model a history its API would refuse."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from memory_adapters_pydantic_ai import to_messages
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    SYNTHESIZED_TOOL_RETURN_METADATA_KEY,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel
from stores import on_sync_loop
from test_pydantic_ai import Script
from test_pydantic_ai_store import STORES, open_memory

from memory_adapters import Memory, Message, RunCompleted, hookimpl
from memory_adapters.run import active_run
from memory_adapters.testing.windows import api_problems


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


class Broken(Exception):
    pass


def stored(memory: Memory, conversation_id: str) -> list[Message]:
    with memory.session(conversation_id=conversation_id):
        return [r.message for r in memory.conversation.read()]


def valid_for_models(messages: list[ModelMessage]) -> None:
    """What a model was given: every call answered right after it, every result answering a
    call, and nothing pydantic-ai had to repair."""
    assert api_problems(to_messages(messages)) == []
    for m in messages:
        for p in m.parts:
            metadata = getattr(p, "metadata", None) or {}
            assert not metadata.get(SYNTHESIZED_TOOL_RETURN_METADATA_KEY), "history repaired"


def answered(messages: list[ModelMessage]) -> bool:
    return isinstance(messages[-1], ModelRequest) and any(
        isinstance(p, ToolReturnPart) for p in messages[-1].parts
    )


def test_a_raising_tool_then_three_runs_reusing_its_call_id_all_succeed(memory: Memory) -> None:
    """Providers number calls per response (``call_0``...): the failed run's call, left
    unanswered, must never be taken as answered by a later run's result."""
    tool = {"name": "explode"}

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if answered(messages):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(tool["name"], {"q": "x"}, "call_0")])

    script = Script(reply)
    agent = Agent(script.model)

    @agent.tool_plain
    def explode(q: str) -> str:
        raise Broken(q)

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f"found {q}"

    wrapped = memory.wrap(agent)
    with memory.session(conversation_id="faults"):
        with pytest.raises(Broken):
            wrapped.run_sync("first")
        tool["name"] = "lookup"
        for i in range(3):
            assert wrapped.run_sync(f"again {i}").output == "done"
    for request in script.requests:
        valid_for_models(request)
    # the last run saw the three earlier prompts, the failed one's call left out
    seen = script.requests[-1]
    assert [p for p in seen[-1].parts if hasattr(p, "content")]
    calls = [p.tool_call_id for m in seen for p in m.parts if isinstance(p, ToolCallPart)]
    returns = [p.tool_call_id for m in seen for p in m.parts if isinstance(p, ToolReturnPart)]
    assert calls == returns == ["call_0"] * 3
    assert [m.text for m in stored(memory, "faults") if m.role == "assistant" and m.text] == [
        "done"
    ] * 3


def test_test_models_reused_ids_after_a_failed_run(memory: Memory) -> None:
    """pydantic-ai's ``TestModel`` calls every tool with the same id in every run."""
    failing = Agent(TestModel(call_tools=["explode"]))

    @failing.tool_plain
    def explode(q: str) -> str:
        raise Broken(q)

    working = Agent(TestModel(call_tools=["explode"]))

    @working.tool_plain(name="explode")
    def fine(q: str) -> str:
        return "fine"

    with memory.session(conversation_id="test-model"):
        with pytest.raises(Broken):
            memory.wrap(failing, tools=False).run_sync("first")
        for i in range(3):
            result = memory.wrap(working, tools=False).run_sync(f"again {i}")
            assert "fine" in result.output
            valid_for_models(result.all_messages())


def test_a_failed_run_retried_under_its_run_id_stores_the_answer_once(memory: Memory) -> None:
    attempts = {"n": 0}

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not answered(messages):
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": "tea"}, "call_0")])
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise Broken("the provider went away")
        return ModelResponse(parts=[TextPart("oolong")])

    script = Script(reply)
    agent = Agent(script.model)

    @agent.tool_plain
    def lookup(q: str) -> str:
        return "oolong"

    wrapped = memory.wrap(agent)
    with memory.session(conversation_id="retry"):
        with pytest.raises(Broken):
            wrapped.run_sync("which tea?", run_id="run-7")
        failed = stored(memory, "retry")
        assert all(m.meta.get("failed") for m in failed) and failed
        assert wrapped.run_sync("which tea?", run_id="run-7").output == "oolong"
        # the retry started from the history the first attempt started from
        assert script.requests[-2][0].parts[-1].content == "which tea?"  # type: ignore[union-attr]
        assert len([m for m in script.requests[-2] if isinstance(m, ModelRequest)]) == 1
        # once completed, the run id is spent: another run under it is refused, unrun
        asked = len(script.requests)
        with pytest.raises(RunCompleted):
            wrapped.run_sync("which tea?", run_id="run-7")
        assert len(script.requests) == asked
    after = stored(memory, "retry")
    assert [m.text for m in after if m.role == "assistant" and m.text] == ["oolong"]
    assert after[: len(failed)] == failed  # what the failed attempt stored stays, marked failed
    assert not any(m.meta.get("failed") for m in after[len(failed) :])


def saves_then_answers(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model of issue 27's retried run: ``save_memory``, then the answer ``done``."""
    if answered(messages):
        return ModelResponse(parts=[TextPart("done")])
    return ModelResponse(parts=[ToolCallPart("save_memory", {"key": "k", "value": "v"})])


class Ends:
    """Records how each run ended, by hook."""

    def __init__(self) -> None:
        self.ends: list[tuple[str, str]] = []

    @hookimpl
    def run_finished(self, run: Any, messages: Any) -> None:
        self.ends.append(("finished", run.run_id))

    @hookimpl
    def run_failed(self, run: Any, error: BaseException, messages: Any) -> None:
        self.ends.append((type(error).__name__, run.run_id))


@pytest.mark.parametrize("history", [True, False])
@pytest.mark.parametrize("how", ["sync", "async", "stream"])
def test_a_completed_run_retried_under_its_run_id_is_refused_before_the_model_is_called(
    memory: Memory, history: bool, how: str
) -> None:
    """A client that retries after a timeout, the server having finished: the retry, under
    the same run id, would run ``save_memory`` again and store the turn twice."""
    script = Script(saves_then_answers)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        response = script._answer(messages, info)
        for part in response.parts:
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                yield {0: DeltaToolCall(part.tool_name, part.args_as_json_str())}

    ends = Ends()
    memory.pm.register(ends)
    model = FunctionModel(script._answer, stream_function=stream)
    agent = memory.wrap(Agent(model), history=history)

    async def arun(prompt: str, run_id: str) -> Any:
        if how == "stream":
            async with agent.run_stream(prompt, run_id=run_id) as streamed:
                return await streamed.get_output()
        return (await agent.run(prompt, run_id=run_id)).output

    def run(prompt: str, run_id: str) -> Any:
        if how == "sync":
            return agent.run_sync(prompt, run_id=run_id).output
        return on_sync_loop(arun(prompt, run_id))

    with memory.session(user_id="u", conversation_id="c"):
        assert run("hello", "r-1") == "done"
        stored_before = memory.conversation.last_seq()
        asked = len(script.requests)
        with pytest.raises(RunCompleted) as refused:
            run("hello", "r-1")
        assert len(script.requests) == asked  # the model was not called again
        assert memory.conversation.last_seq() == stored_before  # nothing stored twice
        assert refused.value.run_id == "r-1" and refused.value.seq == stored_before
        assert refused.value.answer.text == "done"
        assert memory.facts.get("k").version == 1  # type: ignore[union-attr]
        assert ends.ends == [("finished", "r-1"), ("RunCompleted", "r-1")]
        # a new run id runs as ever
        assert run("hello", "r-2") == "done"
        assert memory.conversation.last_seq() == 2 * stored_before


@pytest.mark.parametrize("args", ['{"x": NaN, "y": Infinity, "z": -Infinity}', "parsed"])
def test_a_model_that_puts_nan_in_tool_arguments_gets_its_turn_stored(
    memory: Memory, args: str
) -> None:
    given: Any = (
        {"x": float("nan"), "y": float("inf"), "z": float("-inf")} if args == "parsed" else args
    )

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if answered(messages):
            return ModelResponse(parts=[TextPart("measured")])
        return ModelResponse(parts=[ToolCallPart("measure", given, "m1")])

    script = Script(reply)
    agent = Agent(script.model)
    got: list[float] = []

    @agent.tool_plain
    def measure(x: float, y: float, z: float) -> str:
        got.extend([x, y, z])
        return "ok"

    wrapped = memory.wrap(agent)
    with memory.session(conversation_id="nan"):
        assert wrapped.run_sync("measure").output == "measured"
        assert wrapped.run_sync("and again").output == "measured"
    assert got[1] == float("inf")  # the tool got what the model sent
    calls = [c for m in stored(memory, "nan") for c in m.tool_calls]
    assert calls[0].args == {"x": "NaN", "y": "Infinity", "z": "-Infinity"}
    valid_for_models(script.requests[-1])
    # the second run saw the first one whole: its call, its answer, then its own call
    assert len([r for r in script.requests[-1] if isinstance(r, ModelResponse)]) == 3


# -- sub-agents -----------------------------------------------------------------------------------


def researcher(memory: Memory, fail: dict[str, bool], barrier: dict[str, Any]) -> Any:
    """A sub-agent whose tool writes a note, waits for its sibling (when ``barrier`` holds
    one), reads the note back and fails when ``fail["now"]``."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if answered(messages):
            part = messages[-1].parts[-1]
            return ModelResponse(parts=[TextPart(str(getattr(part, "content", "")))])
        task = str(getattr(messages[-1].parts[-1], "content", ""))
        return ModelResponse(parts=[ToolCallPart("note", {"value": task}, "n1")])

    sub = Agent(Script(reply).model, name="researcher")

    @sub.tool_plain
    async def note(value: str) -> str:
        memory.working.set("finding", value)
        memory.working.set(f"draft {value}", True)  # a note only this task writes
        if "event" in barrier:
            barrier["waiting"] += 1
            if barrier["waiting"] == 2:
                barrier["event"].set()
            await asyncio.wait_for(barrier["event"].wait(), 10)
        read_back = memory.working.get("finding")
        if fail["now"]:
            raise Broken("research failed")
        return str(read_back)

    return memory.wrap(sub)


def lead(memory: Memory, sub: Any, tasks: list[str], seen: dict[str, Any]) -> Any:
    """A lead agent whose tool delegates ``tasks`` to ``sub`` at once and records the answers
    (or the errors)."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if answered(messages):
            return ModelResponse(parts=[TextPart("delegated")])
        return ModelResponse(parts=[ToolCallPart("delegate", {}, "d1")])

    parent = Agent(Script(reply).model)

    @parent.tool
    async def delegate(ctx: RunContext[Any]) -> str:
        async def one(task: str) -> str:
            try:
                return str((await sub.run(task, usage=ctx.usage)).output)
            except Broken as exc:
                return f"error: {exc}"

        seen["answers"] = await asyncio.gather(*(one(t) for t in tasks))
        seen["parent_run"] = active_run(memory)
        return "ok"

    return memory.wrap(parent)


def test_a_failed_sub_agent_runs_notes_never_reach_the_parent(memory: Memory) -> None:
    fail = {"now": True}
    seen: dict[str, Any] = {}
    sub = researcher(memory, fail, {})
    with memory.session(user_id="alice", conversation_id="lead"):
        lead(memory, sub, ["wrong lead"], seen).run_sync("research")
        assert seen["answers"] == ["error: research failed"]
        assert memory.working.get("finding") is None  # the failed run's note stayed apart
        fail["now"] = False
        lead(memory, sub, ["right lead"], seen).run_sync("research again")
        assert seen["answers"] == ["right lead"]
        # only the successful run's notes: the next run of the same sub-agent merged its own
        assert memory.working.get("finding") == "right lead"
        assert memory.working.get("draft right lead") is True
        assert memory.working.get("draft wrong lead") is None


def test_two_same_name_sub_agents_at_once_never_see_each_others_notes(memory: Memory) -> None:
    seen: dict[str, Any] = {}

    async def go() -> None:
        barrier = {"event": asyncio.Event(), "waiting": 0}
        sub = researcher(memory, {"now": False}, barrier)
        async with memory.session(user_id="alice", conversation_id="lead"):
            await lead(memory, sub, ["alpha", "beta"], seen).run("research both")

    asyncio.run(go())
    # each read back its own note, though both wrote "finding" before either read
    assert seen["answers"] == ["alpha", "beta"]
    with memory.session(user_id="alice", conversation_id="lead"):
        assert memory.working.get("finding") in ("alpha", "beta")  # both merged, one won
