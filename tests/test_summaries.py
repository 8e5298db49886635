"""Summaries out of the box (issue 15): ``Memory(summarizer=...)`` with the model the user
already has, computed in the background after a turn, claimed once per range across
processes, cut to its budget, shown to the model by both adapters; a failing or hanging
summarizer never fails or delays a run."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from memory_adapters_inmemory import InMemoryStore
from memory_adapters_langchain import MemoryMiddleware
from memory_adapters_langchain.summarizer import LangChainSummarizer
from memory_adapters_pydantic_ai.summarizer import PydanticAISummarizer
from memory_adapters_sqlite import SQLiteStore
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, SystemPromptPart, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import (
    InvalidInput,
    Memory,
    Message,
    Summarizer,
    Summary,
    SummaryWarning,
    hookimpl,
)
from memory_adapters.steps import StoreCall
from memory_adapters.summaries import CallableSummarizer, SummaryDue, render_messages
from memory_adapters.testing.langchain import ScriptedChatModel
from memory_adapters.window import SUMMARY_PREFIX, Window

TURNS = 200
BUDGET = 300
SUMMARY = 60


class Windows:
    """A plugin recording every window a run was given."""

    def __init__(self) -> None:
        self.seen: list[Window] = []

    @hookimpl
    def history_loaded(self, run: Any, window: Window) -> None:
        self.seen.append(window)


class Spy(InMemoryStore):
    """An in-memory store recording the store calls made, and each batch as one round trip."""

    def __init__(self) -> None:
        super().__init__()
        self.trips: list[list[str]] = []
        self.puts: list[int] = []

    def batch(self, calls: Any) -> list[Any]:
        self.trips.append([c.method for c in calls])
        return [getattr(InMemoryStore, c.method)(self, *c.args, **c.kwargs) for c in calls]

    def latest_summary(self, conversation: str) -> Any:
        self.trips.append(["latest_summary"])
        return super().latest_summary(conversation)

    def put_summary(self, conversation: str, summary: Any) -> None:
        self.puts.append(summary.end_seq)
        super().put_summary(conversation, summary)


class Recorder:
    """A summarizer function: records the messages it was given (each must be summarized
    once), answers more than the budget (it must be cut)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.calls = 0

    def __call__(self, previous: str | None, messages: list[Message]) -> str:
        self.calls += 1
        self.seen.extend(m.text for m in messages if m.text)
        return f"{previous or ''} | summary {self.calls}: " + " ".join(
            m.text for m in messages if m.role == "user"
        )


def check_windows(windows: list[Window]) -> int:
    """Every window within its budget, the summary included; how many showed a summary."""
    shown = 0
    for w in windows:
        assert w.tokens <= BUDGET
        if w.summary is not None:
            shown += 1
            assert w.summary.tokens <= SUMMARY
            assert w.messages()[0].text == SUMMARY_PREFIX + w.summary.text
            assert not w.records or w.summary.end_seq < w.records[0].seq
    return shown


def check_bounded(name: str, calls: int, stored: list[int], summarized: list[str]) -> None:
    """Calls bounded by the evicted ranges: one stored summary per call, each range once, no
    message summarized twice."""
    print(f"{name}: {calls} summarizer calls over {TURNS} turns, {len(stored)} summaries")
    assert 0 < calls == len(stored)
    assert stored == sorted(set(stored)), "each range is summarized once"
    assert not [t for t, n in Counter(summarized).items() if n > 1]
    # a summary is due once the tail has moved on by about half of what it leaves
    assert calls <= TURNS // 3


# -- resolution --------------------------------------------------------------------------------


def test_summarizers_are_resolved_like_embedders() -> None:
    def sync(previous: str | None, messages: list[Message]) -> str:
        return "s"

    async def coro(previous: str | None, messages: list[Message]) -> str:
        return "a"

    class Mine(Summarizer):
        name = "mine"

        def summarize(self, previous: str | None, messages: list[Message], n: int) -> str:
            return "m"

    mine = Mine()
    for spec, cls in (
        (sync, CallableSummarizer),
        (coro, CallableSummarizer),
        (mine, Mine),
        (FunctionModel(lambda m, i: ModelResponse([TextPart("p")])), PydanticAISummarizer),
        (Agent(FunctionModel(lambda m, i: ModelResponse([TextPart("p")]))), PydanticAISummarizer),
        (ScriptedChatModel(["l"]), LangChainSummarizer),
    ):
        memory = Memory("memory://", summary_tokens=50, summarizer=spec)
        assert memory.summaries is not None
        assert isinstance(memory.summaries.summarizer, cls)
        memory.close()
    memory = Memory("memory://", summary_tokens=50, summarizer=mine)
    assert memory.summaries is not None and memory.summaries.summarizer is mine
    expected: dict[str, object] = {"s": sync, "a": coro, "m": mine}
    for text, chosen in expected.items():
        made = Memory("memory://", summary_tokens=5, summarizer=chosen).summaries
        assert made is not None
        assert made.summarizer.summarize(None, [], 5) == text
        assert asyncio.run(made.summarizer.asummarize(None, [], 5)) == text


def test_bad_summarizers_are_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="no installed plugin makes a summarizer of 42"):
        Memory("memory://", summary_tokens=50, summarizer=42)
    with pytest.raises(InvalidInput, match="summary_tokens"):
        Memory("memory://", summarizer=lambda p, m: "s")


def test_the_prompt_shows_tool_calls_and_results_briefly() -> None:
    from memory_adapters import ToolCall, ToolResult

    call = Message("assistant", "", tool_calls=[ToolCall("c1", "lookup", {"q": "x" * 500})])
    result = Message("tool", "", tool_results=[ToolResult("c1", "y" * 500, "lookup")])
    text = render_messages([Message.user("hi"), call, result])
    assert text.splitlines()[0] == "user: hi"
    assert 'assistant called lookup({"q": "xxx' in text and "tool result: yyy" in text
    assert all(len(line) < 260 for line in text.splitlines())


# -- the hot path --------------------------------------------------------------------------------


def test_summaries_off_cost_nothing_and_on_cost_no_round_trip() -> None:
    off = Spy()
    memory = Memory(store=off, history_tokens=BUDGET)
    with memory.session(conversation_id="c"):
        for i in range(30):
            memory.conversation.append([Message.user(f"q{i} " * 10), Message.assistant("a")])
            memory.conversation.window()
    assert all("latest_summary" not in trip for trip in off.trips)

    on = Spy()
    memory = Memory(store=on, history_tokens=BUDGET, summary_tokens=SUMMARY, summarizer=Recorder())
    with memory.session(conversation_id="c"):
        for i in range(30):
            memory.conversation.append([Message.user(f"q{i} " * 10), Message.assistant("a")])
            assert memory.summaries is not None
            memory.summaries.wait()
            on.trips.clear()
            memory.conversation.window()
            # the summary is read with the window's messages, in the same round trip (what
            # follows, if anything, is the background summary's work)
            assert on.trips[0] == ["latest_summary", "head_and_tail"]
    assert on.puts


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(st.integers(1, 40), min_size=1, max_size=40),
    budget=st.integers(20, 200),
    summary=st.integers(1, 80),
)
def test_every_window_stays_valid_and_within_budget(
    turns: list[int], budget: int, summary: int
) -> None:
    """Whatever the stored summary covers (behind, caught up), the window holds its rules."""
    memory = Memory(
        "memory://", history_tokens=budget, summary_tokens=summary, summarizer=Recorder()
    )
    seen = Windows()
    memory.register(seen)
    with memory.session(conversation_id="c"):
        for i, words in enumerate(turns):
            memory.conversation.append([Message.user("w " * words), Message.assistant(f"a{i}")])
            memory.conversation.window()
            if i % 3 == 0:  # sometimes the summary lags behind
                assert memory.summaries is not None
                memory.summaries.wait()
    memory.close()
    for w in seen.seen:
        assert w.tokens <= budget
        if w.summary is not None:
            assert w.summary.tokens <= summary
            assert not w.records or w.summary.end_seq < w.records[0].seq
        if w.records:
            assert w.records[0].message.role == "user" or (
                w.records[0].seq == (w.summary.end_seq if w.summary else 0) + 1
            )


# -- 200 turns through each adapter --------------------------------------------------------------


def test_200_turns_through_pydantic_ai() -> None:
    store = Spy()
    summarizing: list[str] = []

    def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = str(messages[-1].parts[-1].content)  # type: ignore[union-attr]
        summarizing.append(prompt)
        return ModelResponse([TextPart("the user counted " + "and counted " * 100)])

    saw_summary: list[bool] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [p for m in messages for p in m.parts if isinstance(p, SystemPromptPart)]
        saw_summary.append(any(p.content.startswith(SUMMARY_PREFIX) for p in parts))
        return ModelResponse([TextPart("noted, " + "fine " * 8)])

    memory = Memory(
        store=store,
        history_tokens=BUDGET,
        summary_tokens=SUMMARY,
        summarizer=FunctionModel(summarize, model_name="summarizer"),
    )
    windows = Windows()
    memory.register(windows)
    agent = memory.wrap(Agent(FunctionModel(answer)))
    with memory.session(conversation_id="pyd"):
        for i in range(TURNS):
            agent.run_sync(f"turn {i}: " + "words " * 6)
            assert memory.summaries is not None
            memory.summaries.wait()
        latest = store.latest_summary(memory.conversation.key)
    memory.close()
    assert latest is not None and latest.model == "function:summarizer"
    shown = check_windows(windows.seen)
    assert shown > TURNS // 2
    assert sum(saw_summary) == shown  # the model saw every summary the window held
    summarized = [line for p in summarizing for line in p.splitlines() if line.startswith("user:")]
    check_bounded("pydantic-ai", len(summarizing), store.puts, summarized)


def test_200_turns_through_langchain() -> None:
    store = Spy()
    summarizing: list[list[BaseMessage]] = []

    def summarize(messages: list[BaseMessage]) -> str:
        summarizing.append(messages)
        return "the user counted " + "and counted " * 100

    summarizer = ScriptedChatModel([summarize], model_name="summarizer")
    saw_summary: list[bool] = []

    def answer(messages: list[BaseMessage]) -> AIMessage:
        system = messages[0] if isinstance(messages[0], SystemMessage) else None
        saw_summary.append(system is not None and SUMMARY_PREFIX in system.text)
        return AIMessage("noted, " + "fine " * 8)

    memory = Memory(
        store=store, history_tokens=BUDGET, summary_tokens=SUMMARY, summarizer=summarizer
    )
    windows = Windows()
    memory.register(windows)
    agent: Any = create_agent(
        ScriptedChatModel([answer]), middleware=[MemoryMiddleware(memory, tools=False)]
    )
    config: Any = {"configurable": {"thread_id": "lc"}}
    for i in range(TURNS):
        agent.invoke({"messages": [("user", f"turn {i}: " + "words " * 6)]}, config)
        assert memory.summaries is not None
        memory.summaries.wait()
    memory.close()
    shown = check_windows(windows.seen)
    assert shown > TURNS // 2
    assert sum(saw_summary) == shown  # the summary joined the system message every time
    summarized = [
        line
        for call in summarizing
        for line in call[-1].text.splitlines()
        if line.startswith("user:")
    ]
    check_bounded("langchain", len(summarizing), store.puts, summarized)


# -- two processes -----------------------------------------------------------------------------


def two_memories(path: Path, a: Any, b: Any) -> tuple[Memory, Memory]:
    url = f"sqlite:///{path / 'shared.db'}"
    return (
        Memory(url, history_tokens=BUDGET, summary_tokens=SUMMARY, summarizer=a),
        Memory(url, history_tokens=BUDGET, summary_tokens=SUMMARY, summarizer=b),
    )


def test_two_processes_make_each_summary_once(tmp_path: Path) -> None:
    """Two workers drive one conversation, turn about, without waiting for their summaries:
    no range is summarized twice, no message is given to a summarizer twice."""
    ra, rb = Recorder(), Recorder()
    first, second = two_memories(tmp_path, ra, rb)
    agents = []
    for memory in (first, second):
        model = FunctionModel(lambda m, i: ModelResponse([TextPart("ok " * 10)]))
        agents.append((memory, memory.wrap(Agent(model))))
    for i in range(TURNS):
        memory, agent = agents[i % 2]
        with memory.session(conversation_id="shared"):
            agent.run_sync(f"turn {i}: " + "words " * 6)
    first.close()
    second.close()
    print(f"two processes: {ra.calls} + {rb.calls} summarizer calls over {TURNS} turns")
    assert 0 < ra.calls + rb.calls <= TURNS // 3
    summarized = [t for t in ra.seen + rb.seen if t.startswith("turn")]
    assert not [t for t, n in Counter(summarized).items() if n > 1]


WORKER = """
import json, sys
from memory_adapters import Memory, Message

url, name, out = sys.argv[1:4]
seen = []


def summarize(previous, messages):
    seen.extend(m.text for m in messages if m.role == "user")
    return (previous or "") + " + " + str(len(messages))


memory = Memory(url, history_tokens=300, summary_tokens=60, summarizer=summarize)
with memory.session(conversation_id="shared"):
    for i in range(60):
        turn = [Message.user(f"{name} {i} " + "words " * 8), Message.assistant("ok")]
        memory.conversation.append(turn)
        memory.conversation.window()
memory.close()
with open(out, "w") as f:
    json.dump(seen, f)
"""


def test_two_real_processes_summarize_each_message_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, url, name, str(out)])
        for name, out in zip("ab", outs, strict=True)
    ]
    assert [w.wait() for w in workers] == [0, 0]
    seen = [json.loads(out.read_text()) for out in outs]
    print(f"two real processes: {len(seen[0])} + {len(seen[1])} user messages summarized")
    everything = seen[0] + seen[1]
    assert everything
    assert not [t for t, n in Counter(everything).items() if n > 1]


def test_a_claimed_range_is_not_summarized_by_another_process(tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow(previous: str | None, messages: list[Message]) -> str:
        calls.append("a")
        entered.set()
        release.wait()
        return "from a"

    def other(previous: str | None, messages: list[Message]) -> str:
        calls.append("b")
        return "from b"

    first, second = two_memories(tmp_path, slow, other)
    with first.session(conversation_id="c"):
        for i in range(40):
            first.conversation.append([Message.user(f"q{i} " * 10), Message.assistant("a")])
        assert first.conversation.window().summary_due is not None
    entered.wait()  # a claimed the range and is summarizing it
    with second.session(conversation_id="c"):
        due = second.conversation.window().summary_due
        assert due is not None
        key = second.conversation.key
        assert second.summaries is not None
        second.summaries.wait()
    assert calls == ["a"]  # b found the range claimed: its summarizer was not called
    release.set()
    first.close()
    second.close()
    store = SQLiteStore(str(tmp_path / "shared.db"))
    latest = store.latest_summary(key)
    assert latest is not None and latest.text == "from a"
    store.close()


# -- failing and slow summarizers ---------------------------------------------------------------


def test_a_slow_summarizer_never_delays_a_run() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(previous: str | None, messages: list[Message]) -> str:
        entered.set()
        release.wait()  # set only after the runs below returned
        return "late but good"

    memory = Memory("memory://", history_tokens=BUDGET, summary_tokens=SUMMARY, summarizer=slow)
    agent = memory.wrap(Agent(FunctionModel(lambda m, i: ModelResponse([TextPart("ok " * 10)]))))
    with memory.session(conversation_id="slow"):
        for i in range(40):
            agent.run_sync(f"turn {i}: " + "words " * 6)
        entered.wait()
        for i in range(5):  # the summarizer hangs: runs go on, without the summary
            result = agent.run_sync(f"more {i}")
            assert result.output.startswith("ok")
        assert memory.conversation.window().summary is None
        release.set()
        assert memory.summaries is not None
        memory.summaries.wait()
        window = memory.conversation.window()
        assert window.summary is not None and window.summary.text == "late but good"
        assert window.messages()[0].text == SUMMARY_PREFIX + "late but good"
    memory.close()


def test_close_gives_up_on_a_hung_summarizer_and_names_what_it_abandoned(tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    def hung(previous: str | None, messages: list[Message]) -> str:
        entered.set()
        release.wait()  # set only after close() returned
        return "too late"

    url = f"sqlite:///{tmp_path / 'hung.db'}"
    memory = Memory(url, history_tokens=BUDGET, summary_tokens=SUMMARY, summarizer=hung)
    agent = memory.wrap(Agent(FunctionModel(lambda m, i: ModelResponse([TextPart("ok " * 10)]))))
    for conversation in ("hung-a", "hung-b"):  # a's summary hangs; b's waits behind it
        with memory.session(conversation_id=conversation):
            for i in range(40):
                agent.run_sync(f"turn {i}: " + "words " * 6)
        assert entered.wait(10)
    closed = threading.Event()
    caught: list[warnings.WarningMessage] = []

    def close() -> None:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            memory.close(timeout=0.5)
        caught.extend(seen)
        closed.set()

    threading.Thread(target=close, daemon=True).start()
    try:
        assert closed.wait(10), "Memory.close() waited on the hung summarizer"
    finally:
        release.set()
    [warning] = [w for w in caught if issubclass(w.category, SummaryWarning)]
    text = str(warning.message)
    assert "abandoned 2 summaries" in text and ".hung'" in text, text
    assert "hung-a (seqs" in text and "hung-b (seqs" in text, text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the hung call's late answer is dropped, not an error
        time.sleep(0.3)
    with Memory(url, history_tokens=BUDGET, summary_tokens=SUMMARY) as reopened:
        for conversation in ("hung-a", "hung-b"):
            with reopened.session(conversation_id=conversation):
                assert reopened.conversation.window().summary is None  # nothing half-stored


def test_close_without_a_timeout_waits_for_the_summaries() -> None:
    def slowish(previous: str | None, messages: list[Message]) -> str:
        time.sleep(0.5)
        return "waited for"

    memory = Memory("memory://", history_tokens=BUDGET, summary_tokens=SUMMARY, summarizer=slowish)
    agent = memory.wrap(Agent(FunctionModel(lambda m, i: ModelResponse([TextPart("ok " * 10)]))))
    with memory.session(conversation_id="slowish"):
        for i in range(40):
            agent.run_sync(f"turn {i}: " + "words " * 6)
    summaries = memory.summaries
    assert summaries is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert summaries.close(timeout=None) == []
    # one summary, or more when the turns outlast the first (a slow machine): none abandoned
    assert summaries.calls >= 1 and summaries.failures == 0
    assert not memory.worker.busy_with(SummaryDue)
    memory.close()


def test_a_failing_summarizer_never_fails_a_run() -> None:
    def failing(previous: str | None, messages: list[Message]) -> str:
        raise RuntimeError("provider down")

    memory = Memory("memory://", history_tokens=BUDGET, summary_tokens=SUMMARY, summarizer=failing)
    agent = memory.wrap(Agent(FunctionModel(lambda m, i: ModelResponse([TextPart("ok " * 10)]))))
    with (
        pytest.warns(SummaryWarning, match="provider down"),
        memory.session(conversation_id="fail"),
    ):
        for i in range(40):
            assert agent.run_sync(f"turn {i}: " + "words " * 6).output.startswith("ok")
            assert memory.summaries is not None
            memory.summaries.wait()
        assert memory.conversation.window().summary is None
    assert memory.summaries is not None
    assert memory.summaries.failures == memory.summaries.calls == 1  # not retried every turn
    memory.close()


def test_async_runs_summarize_in_the_background_too() -> None:
    async def summarize(previous: str | None, messages: list[Message]) -> str:
        return f"{len(messages)} messages"

    memory = Memory(
        "memory://", history_tokens=BUDGET, summary_tokens=SUMMARY, summarizer=summarize
    )
    agent = memory.wrap(Agent(FunctionModel(lambda m, i: ModelResponse([TextPart("ok " * 10)]))))

    async def go() -> Window:
        with memory.session(conversation_id="async"):
            for i in range(40):
                await agent.run(f"turn {i}: " + "words " * 6)
            assert memory.summaries is not None
            await asyncio.to_thread(memory.summaries.wait)
            window = await memory.conversation.awindow()
        await memory.aclose()
        return window

    window = asyncio.run(go())  # the loop is gone: the summaries' worker has its own
    assert window.summary is not None and window.summary.text.endswith(" messages")


def test_summary_jobs_are_plans() -> None:
    """The background job claims before it calls the model: a range claimed elsewhere costs
    no model call."""
    from memory_adapters.summaries import SummaryDue, summary_job

    memory = Memory("memory://", summary_tokens=SUMMARY)
    called: list[int] = []

    def summarize(previous: str | None, messages: list[Message], max_tokens: int) -> str:
        called.append(1)
        return "s"

    job = summary_job(
        memory,
        summarize,
        "x",
        SummaryDue("c", 1, 4, None, SUMMARY, None),
        "me",
        60.0,
    )
    step = next(job)
    assert isinstance(step, StoreCall) and step.method == "claim_summary"
    with pytest.raises(StopIteration) as stop:
        job.send(False)
    assert stop.value.value is None and not called


def test_a_summary_stored_since_the_window_was_read_moves_the_cut_on_for_it() -> None:
    """Workers sharing a conversation, each summarizing in the background: a range named due by
    a window read before another worker stored a newer summary is not summarized (that summary
    moved the cut on by half of what it leaves, as this one would have; the next window names
    what is due after it). A range due after the summary the window saw is."""
    from memory_adapters.steps import drive_sync
    from memory_adapters.summaries import SummaryDue, summary_job

    memory = Memory("memory://", summary_tokens=SUMMARY)
    called: list[list[str]] = []

    def summarize(previous: str | None, messages: list[Message], max_tokens: int) -> str:
        called.append([m.text for m in messages])
        return "s"

    def job(due: SummaryDue) -> Summary | None:
        plan = summary_job(memory, summarize, "x", due, "me", 60.0)
        return drive_sync(plan, memory.store, memory.hooks)

    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user(f"m{i}") for i in range(1, 13)])
        key = memory.conversation.key
    first = job(SummaryDue(key, 1, 4, None, SUMMARY, None))
    assert first is not None and called == [["m1", "m2", "m3", "m4"]]
    # a window read before `first` was stored names 1..6: `first` moved the cut on already
    assert job(SummaryDue(key, 1, 6, None, SUMMARY, None)) is None
    # a window that saw `first` names 5..8: summarized, extending it
    second = job(SummaryDue(key, 5, 8, first, SUMMARY, None))
    assert second is not None and (second.start_seq, second.end_seq) == (1, 8)
    assert called[1:] == [["m5", "m6", "m7", "m8"]]
