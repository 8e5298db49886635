"""Memory: construction, sessions and scope, the public contract."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import memory_adapters
from memory_adapters import InvalidInput, Memory, Message, NoScope, Scope


def test_public_contract_names() -> None:
    assert callable(memory_adapters.hookimpl)
    assert memory_adapters.Memory is Memory


def test_default_url_is_the_embedded_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMORY_ADAPTERS_URL", raising=False)
    assert type(Memory().store).__name__ == "SQLiteStore"
    assert (tmp_path / "memory_adapters.db").exists()
    monkeypatch.setenv("MEMORY_ADAPTERS_URL", "memory://")
    assert type(Memory().store).__name__ == "InMemoryStore"


def test_store_or_url_not_both() -> None:
    store = Memory("memory://").store
    with pytest.raises(InvalidInput):
        Memory("memory://", store=store)
    with pytest.raises(InvalidInput):
        Memory(store=object())  # type: ignore[arg-type]


def test_sessions_nest_and_restore(memory: Memory) -> None:
    assert memory.scope == Scope()
    with memory.session(user_id="alice", conversation_id="c1") as outer:
        assert outer.user_id == "alice"
        with memory.session(conversation_id="c2") as inner:
            assert (inner.user_id, inner.conversation_id) == ("alice", "c2")
            assert memory.scope is inner
        assert memory.scope.conversation_id == "c1"
    assert memory.scope.conversation_id is None


def test_sessions_follow_async_tasks_and_do_not_leak(memory: Memory) -> None:
    async def task(user: str) -> list[str]:
        async with memory.session(user_id=user, conversation_id="shared-id"):
            await asyncio.sleep(0.01)
            await memory.conversation.aappend([Message.user(f"from {user}")])
            await asyncio.sleep(0.01)
            return [m.text for m in await memory.conversation.amessages()]

    async def main() -> list[list[str]]:
        return list(await asyncio.gather(task("alice"), task("bob")))

    assert asyncio.run(main()) == [["from alice"], ["from bob"]]
    assert memory.scope.user_id is None


def test_sessions_are_per_thread(memory: Memory) -> None:
    seen: dict[str, str | None] = {}

    def other() -> None:
        seen["thread"] = memory.scope.user_id

    with memory.session(user_id="alice"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == {"thread": None}


def test_one_session_object_entered_twice_restores_what_was_before(memory: Memory) -> None:
    session = memory.session(user_id="alice", conversation_id="c")
    other = memory.session(user_id="bob")
    with session:
        with session:
            assert memory.scope.user_id == "alice"
        assert memory.scope.user_id == "alice"  # the outer entry is still in force
        with other, session:
            assert memory.scope.user_id == "alice"
        assert memory.scope.user_id == "alice"
    assert memory.scope == Scope()  # nothing left in force after both blocks


def test_one_session_object_in_many_threads_and_tasks_at_once(memory: Memory) -> None:
    session = memory.session(user_id="alice")
    barrier = threading.Barrier(6)
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            with session:
                barrier.wait(10)  # all six inside at once
                assert memory.scope.user_id == "alice"
            assert memory.scope == Scope()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []

    async def task(delay: float) -> None:
        async with session:
            await asyncio.sleep(delay)  # they exit in another order than they entered
            assert memory.scope.user_id == "alice"
        assert memory.scope == Scope()

    async def main() -> None:
        await asyncio.gather(*(task(0.03 - 0.01 * i) for i in range(3)))

    asyncio.run(main())
    with pytest.raises(InvalidInput):  # exited where it was never entered
        session.__exit__(None, None, None)


def test_two_memories_have_separate_sessions() -> None:
    a, b = Memory("memory://"), Memory("memory://")
    with a.session(user_id="alice"):
        assert b.scope.user_id is None


def test_a_run_with_no_conversation_is_a_clear_error(memory: Memory) -> None:
    with (
        memory.session(user_id="alice"),
        pytest.raises(NoScope, match=r"memory.session\(conversation_id"),
    ):
        memory.conversation.window()
    with pytest.raises(LookupError):
        memory.facts.all()


def test_conversation_keys_cannot_collide() -> None:
    a = Scope(user_id="a:b", conversation_id="c")
    b = Scope(user_id="a", conversation_id="b:c")
    assert a.conversation_key != b.conversation_key
    assert Scope(user_id="x").fact_scope != Scope(user_id="x", agent_id="y").fact_scope


def test_memory_tools_have_no_scope_parameters() -> None:
    for spec in memory_adapters.MEMORY_TOOLS:
        props = spec.parameters["properties"]
        assert not {"user", "user_id", "scope", "namespace", "conversation_id", "agent_id"} & set(
            props
        )
    assert "save_memory" in memory_adapters.TOOL_INSTRUCTIONS


def test_async_tools(memory: Memory) -> None:
    async def go() -> str:
        async with memory.session(user_id="alice"):
            await memory.tools.acall(
                "save_memory", {"key": "tea", "value": "oolong", "importance": 0.9}
            )
            return await memory.tools.acall("search_memory", {"query": "oolong"})

    assert '"tea"' in asyncio.run(go())


def test_context_manager_closes(tmp_path: Path) -> None:
    with Memory(f"sqlite:///{tmp_path / 'x.db'}") as m, m.session(conversation_id="c"):
        m.conversation.append([Message.user("x")])

    async def go() -> None:
        async with Memory("memory://") as m2, m2.session(conversation_id="c"):
            await m2.conversation.aappend([Message.user("x")])

    asyncio.run(go())


def test_max_messages_adds_to_the_token_budget() -> None:
    memory = Memory("memory://", history_tokens=30)
    with memory.session(conversation_id="c"):
        for i in range(10):
            memory.conversation.append([Message.user(f"q{i}"), Message.assistant(f"a{i}")])
        assert memory.conversation.window(max_messages=8).tokens <= 30
        assert len(memory.conversation.window(max_messages=8, max_tokens=None).records) == 8
        assert len(memory.conversation.window(max_tokens=None, max_messages=4).records) == 4
        with pytest.raises(InvalidInput):
            memory.conversation.window(max_tokens=None)


def test_tool_arguments_are_checked_against_the_schema(memory: Memory) -> None:
    from memory_adapters import ToolArgumentError

    cases: list[tuple[str, dict[str, Any]]] = [
        ("save_memory", {"key": "k", "value": "v", "importance": 7}),
        ("save_memory", {"key": "k", "value": "v", "importance": True}),
        ("save_memory", {"key": "k" * 300, "value": "v"}),
        ("save_memory", {"key": "k"}),
        ("search_memory", {"query": "x", "limit": 1000}),
        ("search_memory", {"query": 5}),
        ("list_memories", {"limit": 0}),
        ("list_memories", {"namespace": "other"}),
        ("recall_memory", {"key": "", "scope": "bob"}),
        ("drop_tables", {}),
    ]
    with memory.session(user_id="alice"):
        for name, args in cases:
            with pytest.raises(ToolArgumentError):
                memory.tools.call(name, args)
        assert memory.facts.all() == []


def test_load_entrypoints_false_keeps_the_builtin_stores() -> None:
    memory = Memory("memory://", load_entrypoints=False)
    assert {"memory", "sqlite", "postgresql", "postgres"} <= set(memory.schemes)
