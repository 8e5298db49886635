"""The SQLite store passes the conformance kit, across threads and processes."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from memory_adapters_sqlite import SQLiteStore
from memory_adapters_sqlite.store import scopes_sql

from memory_adapters import Memory, Message, StoreUnavailable
from memory_adapters.store import Store
from memory_adapters.testing import MultiProcessConformance, StoreConformance


class TestSQLiteStore(StoreConformance, MultiProcessConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SQLiteStore]:
        s = SQLiteStore(tmp_path / "memory.db")
        yield s
        s.close()

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> Callable[[], Store]:
        return functools.partial(SQLiteStore, tmp_path / "shared.db")


class TestSQLiteInMemoryDatabase(StoreConformance):
    """``sqlite://`` with no path: one private in-memory database, shared by threads."""

    @pytest.fixture
    def store(self) -> SQLiteStore:
        return SQLiteStore(":memory:")


def test_memory_survives_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with Memory(url) as first, first.session(user_id="alice", conversation_id="c"):
        first.conversation.append([Message.user("My tea is oolong"), Message.assistant("Noted")])
        first.facts.put("tea", "oolong")
    with Memory(url) as second, second.session(user_id="alice", conversation_id="c"):
        assert [m.text for m in second.conversation.messages()] == ["My tea is oolong", "Noted"]
        fact = second.facts.get("tea")
        assert fact is not None and fact.value == "oolong"


def test_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rel = Memory("sqlite:///rel.db")
    assert isinstance(rel.store, SQLiteStore) and rel.store.path == "rel.db"
    absolute = Memory(f"sqlite:///{tmp_path / 'abs.db'}")
    assert isinstance(absolute.store, SQLiteStore) and absolute.store.path == str(
        tmp_path / "abs.db"
    )
    for url in ("sqlite://", "sqlite:///:memory:"):
        mem = Memory(url)
        assert isinstance(mem.store, SQLiteStore) and mem.store.path == ":memory:"
    assert (tmp_path / "rel.db").exists()


def _plan(db: sqlite3.Connection, sql: str, params: dict[str, object]) -> str:
    return " | ".join(row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params))


def test_window_reads_are_index_range_scans(tmp_path: Path) -> None:
    """The tail within a budget never scans the conversation: it searches an index."""
    store = SQLiteStore(tmp_path / "plan.db")
    db = sqlite3.connect(tmp_path / "plan.db")
    token_plan = _plan(
        db,
        "SELECT seq FROM ma_messages WHERE conversation = :c AND start_tokens >= "
        "(SELECT total_tokens FROM ma_conversations WHERE key = :c) - :budget "
        "ORDER BY start_tokens DESC, seq DESC LIMIT :n",
        {"c": "x", "budget": 10, "n": -1},
    )
    assert "SEARCH ma_messages USING" in token_plan and "start_tokens>?" in token_plan, token_plan
    assert "TEMP B-TREE" not in token_plan, token_plan
    count_plan = _plan(
        db,
        "SELECT seq FROM ma_messages WHERE conversation = :c ORDER BY seq DESC LIMIT :n",
        {"c": "x", "n": 5},
    )
    assert "SEARCH ma_messages USING PRIMARY KEY" in count_plan, count_plan
    assert "TEMP B-TREE" not in count_plan, count_plan
    store.close()


def test_scope_listing_is_an_index_skip_scan(tmp_path: Path) -> None:
    """Listing the scopes under a prefix seeks each distinct scope in the unique index;
    it never scans the facts."""
    store = SQLiteStore(tmp_path / "scopes.db")
    for i in range(50):
        for key in ("a", "b", "c"):
            store.put_fact("ns", f"user:{i:02d}", key, '"v"', text="v")
    assert store.list_fact_scopes("ns", "user:1") == [f"user:{i}" for i in range(10, 20)]
    db = sqlite3.connect(tmp_path / "scopes.db")
    params = {"ns": "ns", "lo": "user:1", "hi": "user:2", "now": 0.0, "n": -1}
    for bounded in (True, False):
        plan = _plan(db, scopes_sql(bounded=bounded), params)
        assert "USING COVERING INDEX sqlite_autoindex_ma_facts_1 (namespace=? AND scope>?" in (
            plan
        ), plan
        assert "SCAN ma_facts" not in plan and "SCAN f" not in plan, plan
    store.close()


def test_unopenable_database_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="cannot open SQLite database"):
        SQLiteStore(tmp_path / "no" / "such" / "dir" / "m.db")
    with pytest.raises(ConnectionError):  # the typed error is also a ConnectionError
        Memory(f"sqlite:///{tmp_path / 'missing-dir' / 'm.db'}")


def test_a_locked_database_fails_cleanly_and_recovers(tmp_path: Path) -> None:
    """Another process holding the write lock past the timeout: a clear error, nothing
    half-written, and the next call works once the lock is gone."""
    path = tmp_path / "locked.db"
    memory = Memory(store=SQLiteStore(path, timeout=0.2))
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("before")])
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable, match="locked"):
            memory.conversation.append([Message.user("during")])
        other.execute("ROLLBACK")
        other.close()
        memory.conversation.append([Message.user("after")])
        assert [r.message.text for r in memory.conversation.read()] == ["before", "after"]
        assert [r.seq for r in memory.conversation.read()] == [1, 2]


def test_closed_store_is_a_clear_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "closed.db")
    store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        store.last_seq("c")
