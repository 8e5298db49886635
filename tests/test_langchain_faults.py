"""Runs that go wrong, with real ``create_agent`` agents on every store, through the middleware
and ``memory.wrap``: a tool that raises, call ids reused across runs, a run retried under the
same ``run_id``, a model that puts ``NaN`` in tool arguments, sub-agents that fail or run side
by side. Memory never fails a run, never loses a turn and never hands the model a history its
API would refuse."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.tools import tool
from memory_adapters_langchain import MemoryMiddleware, memory_tools
from stores import STORES, on_sync_loop, open_memory
from test_langchain import SURFACES, Surface, make_agent, stored, with_middleware

from memory_adapters import Memory, RunCompleted
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


@pytest.fixture(params=sorted(SURFACES))
def surface(request: pytest.FixtureRequest) -> Surface:
    return SURFACES[request.param]


class Broken(Exception):
    pass


def valid_for_openai(messages: list[BaseMessage]) -> None:
    """Every ``tool_call_id`` of the OpenAI form answers a call of the message right before
    it, and every call is answered."""
    open_ids: set[str] = set()
    for m in convert_to_openai_messages(messages):
        assert isinstance(m, dict)
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, f"unmatched tool_call_id {m['tool_call_id']}"
            open_ids.discard(m["tool_call_id"])
            continue
        assert not open_ids, f"calls {open_ids} left unanswered"
        open_ids = {c["id"] for c in m.get("tool_calls") or []}
    assert not open_ids, f"calls {open_ids} left unanswered at the end"


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


@tool
def explode(q: str) -> str:
    """Fails."""
    raise Broken(q)


@tool
def lookup(q: str) -> str:
    """Finds."""
    return f"found {q}"


def test_a_raising_tool_then_three_runs_reusing_its_call_id_all_succeed(
    memory: Memory, surface: Surface
) -> None:
    """Providers number calls per response (``call_0``...): the failed run's call, left
    unanswered, must never be taken as answered by a later run's result."""
    tool_name = {"name": "explode"}

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content="done")
        return call(tool_name["name"], "call_0", q="x")

    model = ScriptedChatModel([reply])
    agent = surface(memory, model, [explode, lookup])
    config = {"configurable": {"thread_id": "faults"}}
    with pytest.raises(Broken):
        agent.invoke({"messages": [("user", "first")]}, config)
    tool_name["name"] = "lookup"
    for i in range(3):
        out = agent.invoke({"messages": [("user", f"again {i}")]}, config)
        assert out["messages"][-1].text == "done"
    for seen in model.calls:
        valid_for_openai(seen)
    answers = [m.text for m in stored(memory, "faults") if m.role == "assistant" and m.text]
    assert answers == ["done"] * 3


def test_a_failed_run_retried_under_its_run_id_stores_the_answer_once(
    memory: Memory, surface: Surface
) -> None:
    attempts = {"n": 0}

    def reply(messages: list[BaseMessage]) -> AIMessage:
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise Broken("the provider went away")
        return AIMessage(content="oolong")

    model = ScriptedChatModel([reply])
    agent = surface(memory, model, [])
    run_id = uuid.uuid4()
    config: dict[str, Any] = {"configurable": {"thread_id": "retry"}, "run_id": run_id}
    with pytest.raises(Broken):
        agent.invoke({"messages": [("user", "which tea?")]}, config)
    assert (
        agent.invoke({"messages": [("user", "which tea?")]}, config)["messages"][-1].text
        == "oolong"
    )
    # the retry started from the history the first attempt started from
    assert [m.text for m in model.calls[-1] if m.type == "human"] == ["which tea?"]
    # once completed, the run id is spent: another run under it is refused, unrun
    asked = len(model.calls)
    with pytest.raises(RunCompleted):
        agent.invoke({"messages": [("user", "which tea?")]}, config)
    assert len(model.calls) == asked
    after = stored(memory, "retry")
    assert [m.text for m in after if m.role == "assistant"] == ["oolong"]
    assert len([m for m in after if m.role == "user" and not m.meta.get("failed")]) == 1


@pytest.mark.parametrize("history", [True, False])
@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream"])
def test_a_completed_run_retried_under_its_run_id_is_refused_before_the_model_is_called(
    memory: Memory, surface: Surface, history: bool, how: str
) -> None:
    """A client that retries after a timeout, the server having finished: the retry, under
    the same run id, would run ``save_memory`` again and store the turn twice."""

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content="done")
        return call("save_memory", "call_0", key="k", value="v")

    model = ScriptedChatModel([reply])
    if surface is with_middleware:
        agent = make_agent(model, tools=[], middleware=[MemoryMiddleware(memory, history=history)])
    else:
        agent = memory.wrap(make_agent(model, tools=memory_tools(memory)), history=history)

    def run(run_id: str) -> str:
        config: dict[str, Any] = {"configurable": {"thread_id": "c"}, "run_id": run_id}
        prompt = {"messages": [("user", "hello")]}
        if how == "invoke":
            out = agent.invoke(prompt, config)
        elif how == "ainvoke":
            out = on_sync_loop(agent.ainvoke(prompt, config))
        else:
            out = list(agent.stream(prompt, config, stream_mode="values"))[-1]
        return str(out["messages"][-1].text)

    first, second = uuid.uuid4(), uuid.uuid4()
    with memory.session(user_id="u"):
        assert run(str(first)) == "done"
        with memory.session(conversation_id="c"):
            stored_before = memory.conversation.last_seq()
        asked = len(model.calls)
        with pytest.raises(RunCompleted) as refused:
            run(str(first))
        assert len(model.calls) == asked  # the model was not called again
        with memory.session(conversation_id="c"):
            assert memory.conversation.last_seq() == stored_before  # nothing stored twice
            assert refused.value.seq == stored_before
            assert refused.value.answer.text == "done"
            assert memory.facts.get("k").version == 1  # type: ignore[union-attr]
        # a new run id runs as ever
        assert run(str(second)) == "done"
        with memory.session(conversation_id="c"):
            assert memory.conversation.last_seq() == 2 * stored_before


def test_a_model_that_puts_nan_in_tool_arguments_gets_its_turn_stored(
    memory: Memory, surface: Surface
) -> None:
    got: list[float] = []

    @tool
    def measure(x: float, y: float) -> str:
        """Measures."""
        got.extend([x, y])
        return "ok"

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content="measured")
        return call("measure", "m1", x=float("nan"), y=float("-inf"))

    model = ScriptedChatModel([reply])
    agent = surface(memory, model, [measure])
    config = {"configurable": {"thread_id": "nan"}}
    for prompt in ("measure", "and again"):
        assert (
            agent.invoke({"messages": [("user", prompt)]}, config)["messages"][-1].text
            == "measured"
        )
    assert got[1] == float("-inf")  # the tool got what the model sent
    calls = [c for m in stored(memory, "nan") for c in m.tool_calls]
    assert calls[0].args == {"x": "NaN", "y": "-Infinity"}
    valid_for_openai(model.calls[-1])


# -- sub-agents -----------------------------------------------------------------------------------


def researcher(
    memory: Memory, surface: Surface, fail: dict[str, bool], barrier: threading.Barrier | None
) -> Any:
    """A sub-agent whose tool writes notes, waits for its sibling (with a ``barrier``), reads
    its note back and fails when ``fail["now"]``."""

    @tool
    def note(value: str) -> str:
        """Takes a note."""
        memory.working.set("finding", value)
        memory.working.set(f"draft {value}", True)  # a note only this task writes
        if barrier is not None:
            barrier.wait(10)
        read_back = memory.working.get("finding")
        if fail["now"]:
            raise Broken("research failed")
        return str(read_back)

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content=str(messages[-1].content))
        return call_tool("note", value=str(messages[-1].content))

    return surface(memory, ScriptedChatModel([reply]), [note], name="researcher")


def lead(memory: Memory, sub: Any, tasks: list[str], answers: list[str]) -> Any:
    """A lead agent that delegates ``tasks`` to ``sub`` in one step (parallel tool calls)."""

    @tool
    def research(task: str) -> str:
        """Delegates."""
        try:
            out = sub.invoke({"messages": [("user", task)]})
        except Broken as exc:
            answers.append(f"error: {exc}")
            return "failed"
        answers.append(str(out["messages"][-1].text))
        return "ok"

    delegate = AIMessage(
        content="",
        tool_calls=[
            {"name": "research", "args": {"task": t}, "id": f"r{i}"} for i, t in enumerate(tasks)
        ],
    )
    return with_middleware(memory, ScriptedChatModel([delegate, "delegated"]), [research])


def notes(memory: Memory) -> dict[str, Any]:
    with memory.session(user_id="alice", conversation_id="lead"):
        return {k: n.value for k, n in memory.working.items().items()}


def test_a_failed_sub_agent_runs_notes_never_reach_the_parent(
    memory: Memory, surface: Surface
) -> None:
    fail = {"now": True}
    sub = researcher(memory, surface, fail, None)
    config = {"configurable": {"thread_id": "lead", "user_id": "alice"}}
    answers: list[str] = []
    lead(memory, sub, ["wrong lead"], answers).invoke({"messages": [("user", "go")]}, config)
    assert answers == ["error: research failed"]
    assert notes(memory) == {}  # the failed run's notes stayed apart
    fail["now"] = False
    lead(memory, sub, ["right lead"], answers).invoke({"messages": [("user", "go")]}, config)
    assert answers[-1] == "right lead"
    # only the successful run's notes: the next run of the same sub-agent merged its own
    assert notes(memory) == {"finding": "right lead", "draft right lead": True}


def test_two_same_name_sub_agents_at_once_never_see_each_others_notes(
    memory: Memory, surface: Surface
) -> None:
    sub = researcher(memory, surface, {"now": False}, threading.Barrier(2))
    answers: list[str] = []
    lead(memory, sub, ["alpha", "beta"], answers).invoke(
        {"messages": [("user", "go")]},
        {"configurable": {"thread_id": "lead", "user_id": "alice"}, "max_concurrency": 2},
    )
    # each read back its own note, though both wrote "finding" before either read
    assert sorted(answers) == ["alpha", "beta"]
    merged = notes(memory)
    assert merged["finding"] in ("alpha", "beta")  # both merged, one won
    assert merged["draft alpha"] is True and merged["draft beta"] is True


def test_parallel_tool_results_are_stored_in_call_order(memory: Memory, surface: Surface) -> None:
    """Parallel calls finish in any order; the log keeps them in the order of the calls, so
    that every reader (and every replay) sees one history."""
    second_done = threading.Event()

    @tool
    def slow(q: str) -> str:
        """Finishes last."""
        assert second_done.wait(10)
        return "slow"

    @tool
    def fast(q: str) -> str:
        """Finishes first."""
        second_done.set()
        return "fast"

    both = AIMessage(
        content="",
        tool_calls=[
            {"name": "slow", "args": {"q": "a"}, "id": "c-slow"},
            {"name": "fast", "args": {"q": "b"}, "id": "c-fast"},
        ],
    )
    agent = surface(memory, ScriptedChatModel([both, "done"]), [slow, fast])
    agent.invoke(
        {"messages": [("user", "go")]},
        {"configurable": {"thread_id": "order"}, "max_concurrency": 2},
    )
    results = [t.id for m in stored(memory, "order") for t in m.tool_results]
    assert results == ["c-slow", "c-fast"]
