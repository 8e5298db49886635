"""The durable-execution seam (:mod:`memory_adapters.durable`), in process: an engine that
journals steps by position, as DBOS, Prefect's task cache and Temporal's history do, and a
pydantic-ai agent with memory replayed under it. (DBOS end to end, killed and recovered in
other processes: ``test_durable_dbos.py``; LangGraph: ``test_durable_langgraph.py``.)"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from memory_adapters_pydantic_ai import MemoryCapability
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import InvalidInput, Memory, Message, durable
from memory_adapters.durable import _ranges

T = TypeVar("T")


class Journal:
    """A durable engine for tests: step ``n`` of a run is replayed from the journal when it
    holds one (``replay()`` starts the run over), and run for real otherwise."""

    name = "journal"

    def __init__(self) -> None:
        self.steps: dict[int, tuple[str, Any]] = {}
        self.position = 0

    def active(self) -> bool:
        return True

    def replay(self) -> None:
        self.position = 0

    def _recorded(self, name: str) -> tuple[int, bool]:
        position, self.position = self.position, self.position + 1
        if position in self.steps:
            assert self.steps[position][0] == name, "the replay took another path"
            return position, True
        return position, False

    def record(self, name: str, fn: Callable[[], T]) -> T:
        position, known = self._recorded(name)
        if not known:
            self.steps[position] = (name, fn())
        result: T = self.steps[position][1]
        return result

    async def arecord(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        position, known = self._recorded(name)
        if not known:
            self.steps[position] = (name, await fn())
        result: T = self.steps[position][1]
        return result


@pytest.fixture
def journal(monkeypatch: pytest.MonkeyPatch) -> Iterator[Journal]:
    engine = Journal()
    monkeypatch.setattr(durable, "_ENGINES", [engine])
    yield engine


def scripted(shown: list[list[str]]) -> FunctionModel:
    """Saves a fact, then answers; ``shown`` gets the texts of each call's messages."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        shown.append([str(getattr(p, "content", "")) for m in messages for p in m.parts])
        if any(getattr(p, "tool_name", None) == "save_memory" for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("Noted.")])
        return ModelResponse(
            parts=[ToolCallPart("save_memory", {"key": "tea", "value": "oolong"}, "call-1")]
        )

    return FunctionModel(reply)


def test_a_replayed_run_sees_its_first_window_and_writes_nothing_twice(
    memory: Memory, journal: Journal
) -> None:
    shown: list[list[str]] = []
    agent = Agent(scripted(shown), capabilities=[MemoryCapability(memory, user_id="alice")])
    with memory.session(conversation_id="c", user_id="alice"):
        memory.conversation.append([Message.user("I live in Lisbon"), Message.assistant("Ok.")])
        agent.run_sync("My favourite tea is oolong", conversation_id="c")
        memory.conversation.append([Message.user("elsewhere"), Message.assistant("Ok.")])
        journal.replay()  # recovery: the same run again, under a new pydantic-ai run id
        agent.run_sync("My favourite tea is oolong", conversation_id="c")
        stored = [m.text for m in memory.conversation.messages()]
        fact = memory.facts.get("tea")
    assert shown[2:] == shown[:2]  # the replay's model calls are shown what the first run's were
    assert "elsewhere" not in json.dumps(shown)
    assert stored.count("My favourite tea is oolong") == 1
    assert fact is not None and fact.version == 1
    assert [name for name, _ in journal.steps.values()] == [
        durable.OPEN_STEP,
        durable.TOOL_STEP.format(name="save_memory"),
    ]


def test_a_tool_call_that_wrote_but_was_not_recorded_does_not_write_again(
    memory: Memory, journal: Journal
) -> None:
    """The process died after ``save_memory`` wrote and before its step was recorded: the
    call runs again, finds its own change, and returns what it returned the first time."""
    check_replayed_tool_call(memory)


def test_the_tool_call_of_a_change_is_kept_by_postgres(postgres_url: str) -> None:
    import uuid

    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    try:
        with Memory(postgres_url, store_options={"schema": schema}) as memory:
            check_replayed_tool_call(memory)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def check_replayed_tool_call(memory: Memory) -> None:
    with memory.session(conversation_id="c", user_id="alice"):
        from memory_adapters.run import RunLifecycle

        lifecycle = RunLifecycle(memory, memory.scope, framework="test")
        with lifecycle.activate(), durable.replayable_call("c", "call-7"):
            first = memory.tools.call("save_memory", {"key": "tea", "value": "oolong"})
            again = memory.tools.call("save_memory", {"key": "tea", "value": "oolong"})
        with lifecycle.activate(), durable.replayable_call("c", "call-8"):
            other = memory.tools.call("save_memory", {"key": "tea", "value": "sencha"})
        assert first == again == json.dumps({"saved": "tea", "version": 1})
        assert json.loads(other)["version"] == 2
        assert [c.writer.call_id for c in memory.facts.history("tea")] == ["c:call-8", "c:call-7"]


def test_outside_a_durable_run_nothing_is_recorded(memory: Memory) -> None:
    assert durable.current() is None  # no workflow runs here (dbos may be imported)
    shown: list[list[str]] = []
    agent = Agent(scripted(shown), capabilities=[MemoryCapability(memory, user_id="alice")])
    with memory.session(conversation_id="c", user_id="alice"):
        agent.run_sync("My favourite tea is oolong")
        agent.run_sync("My favourite tea is oolong")
        assert memory.facts.get("tea").version == 2  # type: ignore[union-attr]


def test_an_engine_must_have_the_methods_memory_calls() -> None:
    with pytest.raises(InvalidInput, match="durable engine"):
        durable.register(object())  # type: ignore[arg-type]


@given(st.sets(st.integers(min_value=1, max_value=500)))
def test_a_window_mark_holds_exactly_its_seqs(seqs: set[int]) -> None:
    ranges = _ranges(sorted(seqs))
    assert [s for start, end in ranges for s in range(start, end + 1)] == sorted(seqs)
    assert all(b[0] > a[1] + 1 for a, b in itertools.pairwise(ranges))
