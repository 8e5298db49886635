"""The lifecycle hooks fire, may transform, may be async, and cost nothing when unused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memory_adapters import Fact, Memory, Message, PluginWarning, Record, Scope, hookimpl
from memory_adapters.tracing import Operation
from memory_adapters.window import Window
from memory_adapters.working import MergeReport


class Redact:
    """Masks a secret before it is stored (a before_save transform)."""

    @hookimpl
    def before_save(self, scope: Scope, messages: list[Message]) -> None:
        for m in messages:
            m.text = m.text.replace("hunter2", "*******")
        messages.append(Message.assistant("(redacted by policy)"))


class Audit:
    """Records every event it sees; half its implementations are async."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    @hookimpl
    def after_save(self, scope: Scope, records: list[Record]) -> Any:
        async def log() -> None:
            await asyncio.sleep(0)
            self.events.append(("after_save", [r.seq for r in records]))

        return log()

    @hookimpl
    def fact_stored(self, scope: Scope, fact: Fact) -> None:
        self.events.append(("fact_stored", (scope.user_id, fact.key, fact.version)))

    @hookimpl
    def fact_recalled(self, key: str, fact: Fact | None) -> None:
        self.events.append(("fact_recalled", (key, fact is not None)))

    @hookimpl
    def facts_searched(self, query: str, results: list[Fact]) -> None:
        self.events.append(("facts_searched", (query, [f.key for f in results])))

    @hookimpl
    def fact_forgotten(self, key: str, deleted: bool) -> None:
        self.events.append(("fact_forgotten", (key, deleted)))

    @hookimpl
    def working_written(self, path: str, key: str, value: Any, deleted: bool) -> None:
        self.events.append(("working_written", (path.rsplit("/", 1)[-1], key, value, deleted)))

    @hookimpl
    def working_forked(self, parent: str, child: str) -> None:
        self.events.append(("working_forked", child.rsplit("/", 1)[-1]))

    @hookimpl
    def working_merged(self, child: str, parent: str, report: MergeReport) -> None:
        self.events.append(("working_merged", report.applied))

    @hookimpl
    def history_loaded(self, window: Window) -> None:
        window.records = [r for r in window.records if "skip me" not in r.message.text]


def test_before_save_transforms_what_is_stored(memory: Memory) -> None:
    memory.register(Redact())
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("my password is hunter2")])
        stored = memory.conversation.read()
    assert [r.message.text for r in stored] == ["my password is *******", "(redacted by policy)"]


def test_events_fire_with_async_implementations(memory: Memory) -> None:
    audit = Audit()
    memory.register(audit)
    with memory.session(user_id="alice", conversation_id="c"):
        memory.conversation.append([Message.user("hello"), Message.assistant("hi")])
        memory.conversation.append([Message.user("skip me"), Message.assistant("ok")])
        memory.facts.put("tea", "oolong")
        memory.facts.get("tea")
        memory.facts.get("coffee")
        memory.facts.search("oolong")
        memory.facts.forget("tea")
        memory.working.set("goal", "g")
        fork = memory.working.fork("sub")
        fork.set("x", 1)
        fork.merge()
        texts = [m.text for m in memory.conversation.messages()]
    assert texts == ["hello", "hi", "ok"]  # history_loaded rewrote the window
    assert audit.events == [
        ("after_save", [1, 2]),
        ("after_save", [3, 4]),
        ("fact_stored", ("alice", "tea", 1)),
        ("fact_recalled", ("tea", True)),
        ("fact_recalled", ("coffee", False)),
        ("facts_searched", ("oolong", ["tea"])),
        ("fact_forgotten", ("tea", True)),
        ("working_written", ("default:alice:c", "goal", "g", False)),
        ("working_forked", "sub"),
        ("working_written", ("sub", "x", 1, False)),
        ("working_written", ("default:alice:c", "x", 1, False)),
        ("working_merged", ["x"]),
    ]


def test_async_hooks_are_awaited_on_the_callers_loop(memory: Memory) -> None:
    audit = Audit()
    memory.register(audit)

    async def go() -> asyncio.AbstractEventLoop:
        async with memory.session(conversation_id="c"):
            await memory.conversation.aappend([Message.user("a")])
        return asyncio.get_running_loop()

    asyncio.run(go())
    assert audit.events == [("after_save", [1])]


def test_sync_calls_inside_a_running_loop_still_resolve_async_hooks(memory: Memory) -> None:
    audit = Audit()
    memory.register(audit)

    async def go() -> None:
        with memory.session(conversation_id="c"):
            memory.conversation.append([Message.user("sync call from async code")])

    asyncio.run(go())
    assert audit.events == [("after_save", [1])]


def test_unimplemented_hooks_are_never_called(memory: Memory) -> None:
    called: list[str] = []
    undo = memory.pm.add_hookcall_monitoring(
        lambda name, impls, kwargs: called.append(name), lambda *args: None
    )
    with memory.session(user_id="u", conversation_id="c"):
        memory.conversation.append([Message.user("x")])
        memory.conversation.window()
        memory.facts.put("k", 1)
        memory.facts.get("k")
    undo()
    assert called == ["count_tokens", "select_window"]  # only hooks that have implementations
    assert "before_save" not in memory.pm.implemented
    memory.register(Redact(), name="redact")
    assert "before_save" in memory.pm.implemented
    memory.unregister(name="redact")
    assert "before_save" not in memory.pm.implemented


class Idle:
    """Observes operations only while ``active`` (as the OpenTelemetry plugin does while a
    tracer provider is configured): ``memory_adapters_active()`` is asked before each call."""

    def __init__(self, active: bool = False) -> None:
        self.active = active
        self.asked = 0
        self.events: list[tuple[str, str]] = []

    def memory_adapters_active(self) -> bool:
        self.asked += 1
        return self.active

    @hookimpl
    def operation_started(self, operation: Operation) -> None:
        self.events.append(("started", operation.name))

    @hookimpl
    def operation_finished(self, operation: Operation) -> None:
        self.events.append(("finished", operation.name))

    @hookimpl
    def after_save(self, records: list[Record]) -> None:
        self.events.append(("after_save", str(len(records))))


class Watch:
    """Observes operations always: it has no ``memory_adapters_active()``."""

    def __init__(self) -> None:
        self.events: list[str] = []

    @hookimpl
    def operation_started(self, operation: Operation) -> None:
        self.events.append(operation.name)


def test_an_idle_plugins_hooks_are_not_called_until_it_says_it_is_active(memory: Memory) -> None:
    idle = Idle()
    memory.register(idle)
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("x")])
        assert not memory.hooks.observes_operations
        assert idle.events == [] and idle.asked > 0
        idle.active = True  # asked at each operation: nothing about it is cached
        assert memory.hooks.observes_operations
        memory.conversation.append([Message.user("y")])
        idle.active = False
        memory.conversation.window()
    assert idle.events == [("started", "append"), ("after_save", "1"), ("finished", "append")]


def test_an_idle_plugin_that_started_an_operation_sees_it_finish(memory: Memory) -> None:
    idle = Idle(active=True)

    class GoIdle:
        @hookimpl
        def before_save(self) -> None:  # inside the append, after operation_started
            idle.active = False

    memory.register(idle)
    memory.register(GoIdle())
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("x")])
    assert idle.events == [("started", "append"), ("finished", "append")]


def test_an_idle_plugins_hooks_are_called_with_an_always_active_ones(memory: Memory) -> None:
    idle, watch = Idle(), Watch()
    memory.register(idle)
    memory.register(watch)
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("x")])
    assert watch.events == ["append"]
    assert idle.events[0] == ("started", "append")  # the call goes to every implementation


def test_an_active_check_that_raises_counts_as_active_and_warns(memory: Memory) -> None:
    class Broken(Idle):
        def memory_adapters_active(self) -> bool:
            raise RuntimeError("cannot tell")

    broken = Broken()
    memory.register(broken)
    with (
        memory.session(conversation_id="c"),
        pytest.warns(PluginWarning, match="cannot tell"),
    ):
        memory.conversation.append([Message.user("x")])
    assert ("started", "append") in broken.events


class FixedCounter:
    @hookimpl
    def count_tokens(self, texts: list[str], model: str | None) -> list[int]:
        return [100 for _ in texts]


def test_a_plugin_replaces_the_token_counter(memory: Memory) -> None:
    memory.register(FixedCounter())
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("a"), Message.assistant("b")])
        assert [r.tokens for r in memory.conversation.read()] == [104, 104]
        assert len(memory.conversation.window(max_tokens=150).records) == 0
    assert memory.count_tokens(["anything"]) == [100]


class KeepLastTwo:
    @hookimpl
    def select_window(self, records: list[Record]) -> list[Record]:
        return records[-2:]


def test_a_plugin_replaces_the_window_strategy(memory: Memory) -> None:
    memory.register(KeepLastTwo())
    with memory.session(conversation_id="c"):
        for i in range(3):
            memory.conversation.append([Message.user(f"q{i}"), Message.assistant(f"a{i}")])
        assert [m.text for m in memory.conversation.messages()] == ["q2", "a2"]


def test_before_save_changes_copies_not_the_callers_messages(memory: Memory) -> None:
    memory.register(Redact())
    mine = [Message.user("hunter2")]
    with memory.session(conversation_id="c"):
        memory.conversation.append(mine)
    assert mine[0].text == "hunter2" and len(mine) == 1


class Emptying:
    @hookimpl
    def before_save(self, messages: list[Message]) -> None:
        messages.clear()


def test_a_before_save_hook_cannot_store_an_empty_turn(memory: Memory) -> None:
    from memory_adapters import InvalidInput

    memory.register(Emptying())
    with memory.session(conversation_id="c"), pytest.raises(InvalidInput, match="removed every"):
        memory.conversation.append([Message.user("x")])


class FailingAudit:
    @hookimpl
    def after_save(self) -> None:
        raise RuntimeError("audit sink down")

    @hookimpl
    def fact_stored(self) -> Any:
        async def fail() -> None:
            raise RuntimeError("async audit sink down")

        return fail()


def test_a_failing_after_hook_warns_and_the_write_stands(memory: Memory) -> None:
    from memory_adapters import HookErrorWarning

    memory.register(FailingAudit())
    with memory.session(user_id="u", conversation_id="c"):
        with pytest.warns(HookErrorWarning, match="audit sink down"):
            result = memory.conversation.append([Message.user("x")])
        assert result.last_seq == 1 and memory.conversation.last_seq() == 1
        with pytest.warns(HookErrorWarning, match="async audit sink down"):
            memory.facts.put("k", 1)
        assert memory.facts.get("k") is not None

    async def go() -> None:
        async with memory.session(user_id="u", conversation_id="c"):
            with pytest.warns(HookErrorWarning):
                await memory.conversation.aappend([Message.user("y")])

    asyncio.run(go())


def test_async_fork_runs_async_hooks_on_the_callers_loop(memory: Memory) -> None:
    seen: list[object] = []

    class Watcher:
        @hookimpl
        def working_forked(self, child: str) -> Any:
            async def note() -> None:
                seen.append(asyncio.get_running_loop())

            return note()

    memory.register(Watcher())

    async def go() -> object:
        async with memory.session(conversation_id="c"):
            fork = await memory.working.afork("sub")
            await fork.aset("x", 1)
            assert await fork.anote("x") is not None
        return asyncio.get_running_loop()

    loop = asyncio.run(go())
    assert seen == [loop]


def test_an_over_long_summary_is_cut_to_its_budget(memory: Memory) -> None:
    class Verbose:
        @hookimpl
        def summarize(self) -> str:
            return "blah " * 2000

    memory.register(Verbose())
    memory.history_tokens, memory.summary_tokens = 120, 40
    with memory.session(conversation_id="c"):
        for i in range(30):
            memory.conversation.append([Message.user(f"q{i}"), Message.assistant(f"a{i}")])
        w = memory.conversation.window()
    assert w.summary is not None and w.summary.tokens <= 40
    assert w.records and w.records[-1].message.text == "a29"
    assert w.tokens <= 120
