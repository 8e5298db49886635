"""The SQLite store passes the conformance kit, across threads and processes."""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from memory_adapters_sqlite import SQLiteStore
from memory_adapters_sqlite.facts import scopes_sql
from stores import in_forked_child

from memory_adapters import InvalidURL, Memory, Message, StoreUnavailable
from memory_adapters.embedders import Embedding
from memory_adapters.messages import Entry
from memory_adapters.store import Store
from memory_adapters.testing import MultiProcessConformance, StoreConformance

TABLES = (
    "ma_conversations",
    "ma_messages",
    "ma_summaries",
    "ma_facts",
    "ma_fact_vectors",
    "ma_fact_history",
    "ma_fact_terms",
    "ma_fact_stats",
)


def dump(store: SQLiteStore) -> dict[str, list[str]]:
    """Every row of every table of the store (the conformance kit's ``store_dump``)."""
    out: dict[str, list[str]] = {}
    with store._connection() as db:
        names = {
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'ma%'"
            )
        }
        assert set(TABLES) <= names, "a table the dump does not know"
        for table in TABLES:
            rows = db.execute(f"SELECT * FROM {table}").fetchall()
            out[table] = sorted(repr(r) for r in rows)
    return out


class TestSQLiteStore(StoreConformance, MultiProcessConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SQLiteStore]:
        s = SQLiteStore(tmp_path / "memory.db")
        yield s
        s.close()

    @pytest.fixture
    def store_dump(self, store: SQLiteStore) -> Callable[[], dict[str, list[str]]]:
        return lambda: dump(store)

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> Callable[[], Store]:
        return functools.partial(SQLiteStore, tmp_path / "shared.db")


class TestSQLiteInMemoryDatabase(StoreConformance):
    """``sqlite://`` with no path: one private in-memory database, shared by threads."""

    @pytest.fixture
    def store(self) -> SQLiteStore:
        return SQLiteStore(":memory:")

    @pytest.fixture
    def store_dump(self, store: SQLiteStore) -> Callable[[], dict[str, list[str]]]:
        return lambda: dump(store)


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


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            "sqlite://memory.db",
            "sqlite://memory.db has two slashes, and SQLite URLs have no host: write "
            "sqlite:///memory.db for a file relative to the current directory, or "
            "sqlite:////absolute/path/memory.db for an absolute path",
        ),
        ("sqlite://db/m.db", "write sqlite:///db/m.db for a file relative"),
        ("sqlite://:memory:", "write sqlite:///:memory: (or sqlite://) for a private in-memory"),
    ],
)
def test_two_slashes_are_an_error_naming_the_right_forms(
    url: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidURL) as caught:
        Memory(url)
    assert says in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert list(tmp_path.iterdir()) == []  # no file was made


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


def test_a_turn_s_async_calls_run_on_the_event_loop_and_wait_for_a_lock_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Async reads and writes of a turn are made on the event loop (no worker thread) while
    nothing holds the database; while another connection holds its write lock, a write
    waits for it in a worker thread, the event loop running meanwhile, and lands once."""
    path = tmp_path / "inline.db"
    # no indexing on the worker: its writes would hold the database while the test says
    # nothing does
    memory = Memory(store=SQLiteStore(path, timeout=30), index_conversations=False)
    hops: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    async def main() -> None:
        with memory.session(conversation_id="c"):
            await memory.conversation.aappend([Message.user("q1"), Message.assistant("a1")])
            await memory.conversation.awindow()
            hops.clear()
            await memory.conversation.aappend([Message.user("q2")])
            window = await memory.conversation.awindow()
            assert [m.text for m in window.messages()] == ["q1", "a1", "q2"]
            assert hops == []  # all on the event loop

            other.execute("BEGIN IMMEDIATE")  # another writer holds the database
            window = await memory.conversation.awindow()  # a read does not wait (WAL)
            assert [m.text for m in window.messages()] == ["q1", "a1", "q2"]
            ticks = 0
            append = asyncio.ensure_future(memory.conversation.aappend([Message.user("q3")]))
            while not hops:  # the append tried on the loop, found the lock, went to a thread
                await asyncio.sleep(0.01)
            while ticks < 5:  # the event loop runs while the append waits
                ticks += 1
                await asyncio.sleep(0.01)
            assert not append.done()
            other.execute("COMMIT")
            await append
            assert hops == ["append"]
            assert [r.message.text for r in await memory.conversation.aread()] == [
                *("q1", "a1", "q2", "q3")
            ]
            assert [r.seq for r in await memory.conversation.aread()] == [1, 2, 3, 4]

    try:
        asyncio.run(main())
    finally:
        other.close()
        memory.close()


def test_only_calls_that_did_nothing_when_locked_run_on_the_event_loop() -> None:
    """A batch of several writes, a whole conversation or every fact of a scope go to a
    worker thread: the first could have written before the lock was found, and the others
    are not kept on the event loop."""
    from memory_adapters_sqlite.store import _quick

    from memory_adapters.messages import Entry
    from memory_adapters.steps import StoreCall

    entries = [Entry("user", '{"role":"user"}', 1)]
    append = StoreCall("append", ("c", entries), {})
    steps = [
        StoreCall("append", ("c", entries), {"run_id": "r", "idempotency_key": f"k{i}"})
        for i in range(2)
    ]
    window = StoreCall("head_and_tail", ("c",), {"head": 1, "max_tokens": 100})
    working = StoreCall("list_facts", ("ns#working", "s"), {})
    assert _quick("append", ("c", entries), {})
    assert _quick("batch", (steps,), {})  # a run's steps: one transaction
    assert _quick("batch", ([window, working],), {})
    assert _quick("batch", ([append],), {})
    assert not _quick("batch", ([append, append],), {})
    assert not _quick("batch", ([window, append],), {})
    assert not _quick("read", ("c",), {})
    assert not _quick("tail", ("c",), {})
    assert not _quick("list_facts", ("ns", "s"), {})
    assert not _quick("match_terms", ("ns", "s", ["q"]), {})
    assert not _quick("erase", ("ns", "u"), {})


def test_closed_store_is_a_clear_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "closed.db")
    store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        store.last_seq("c")


# -- a database file deleted or replaced while open --------------------------------------------


def _every_call(memory: Memory) -> list[tuple[str, Callable[[], object]]]:
    """One call of every kind, reads and writes, sync and async, in the current session."""
    store = memory.store

    def run(coro: Callable[[], Coroutine[Any, Any, object]]) -> Callable[[], object]:
        return lambda: asyncio.run(coro())

    return [
        ("append", lambda: memory.conversation.append([Message.user("lost?")])),
        ("aappend", run(lambda: memory.conversation.aappend([Message.user("lost?")]))),
        ("window", lambda: memory.conversation.window()),
        ("awindow", run(lambda: memory.conversation.awindow())),
        ("read", lambda: memory.conversation.read()),
        ("last_seq", lambda: memory.conversation.last_seq()),
        ("clear", lambda: memory.conversation.clear()),
        ("put", lambda: memory.facts.put("lost", "value")),
        ("aput", run(lambda: memory.facts.aput("lost", "value"))),
        ("get", lambda: memory.facts.get("tea")),
        ("all", lambda: memory.facts.all()),
        ("search", lambda: memory.facts.search("tea")),
        ("forget", lambda: memory.facts.forget("tea")),
        ("working set", lambda: memory.working.set("lost", 1)),
        ("working items", lambda: memory.working.items()),
        ("tool", lambda: memory.tools.call("save_memory", {"key": "lost", "value": "v"})),
        ("prune", store.prune),
        ("list scopes", lambda: store.list_fact_scopes("default", "")),
    ]


def _refuses_everything(memory: Memory) -> int:
    """Assert every call raises StoreUnavailable naming the cause; return how many."""
    calls = _every_call(memory)
    for name, call in calls:
        with pytest.raises(StoreUnavailable, match="deleted or replaced") as info:
            call()
        assert "new store" in str(info.value), name
    # from a thread that never had a connection: no new, empty database is created either
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            memory.store.last_seq("c")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1 and isinstance(errors[0], StoreUnavailable), errors
    return len(calls) + 1


def _seed(path: Path) -> Memory:
    memory = Memory(store=SQLiteStore(path), load_entrypoints=False)
    with memory.session(user_id="alice", conversation_id="c"):
        memory.conversation.append([Message.user("my tea is oolong"), Message.assistant("ok")])
        memory.facts.put("tea", "oolong")
    return memory


def test_a_deleted_database_file_is_an_error_not_a_silent_loss(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    memory = _seed(path)
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)
    with memory.session(user_id="alice", conversation_id="c"):
        assert _refuses_everything(memory) >= 15
        assert not path.exists(), "the store created a new database under the old one"
        # a new database at the path does not bring the old store back
        with Memory(f"sqlite:///{path}") as fresh, fresh.session(user_id="alice"):
            assert fresh.facts.all() == []
            fresh.facts.put("new", "file")
        _refuses_everything(memory)
    memory.close()
    with Memory(f"sqlite:///{path}") as fresh, fresh.session(user_id="alice", conversation_id="c"):
        assert [f.key for f in fresh.facts.all()] == ["new"]
        assert fresh.conversation.read() == []


def test_a_replaced_database_file_is_an_error_and_the_new_file_is_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "live.db"
    memory = _seed(path)
    # another database, complete on disk (its log checkpointed), moved over the live file;
    # the live file's log is checkpointed first, so that only the main files differ
    other_path = tmp_path / "other.db"
    other = _seed(other_path)
    with other.session(user_id="alice", conversation_id="c"):
        other.facts.put("tea", "from the other file")
    other.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.replace(other_path, path)
    with memory.session(user_id="alice", conversation_id="c"):
        tried = _refuses_everything(memory)
        assert tried >= 15
    fresh = Memory(f"sqlite:///{path}", load_entrypoints=False)
    with fresh.session(user_id="alice", conversation_id="c"):
        expected_log = [r.message.text for r in fresh.conversation.read()]
        assert expected_log == ["my tea is oolong", "ok"]
        got = fresh.facts.get("tea")
        assert got is not None and got.value == "from the other file"
        assert [f.key for f in fresh.facts.all()] == ["tea"]  # none of the refused writes
        fresh.facts.put("written", "after the replacement")
        # the old store keeps refusing, and closing it leaves the new file's data alone
        with memory.session(user_id="alice", conversation_id="c"):
            _refuses_everything(memory)
        memory.close()
        assert fresh.facts.get("written") is not None
    fresh.close()
    with Memory(f"sqlite:///{path}") as again, again.session(user_id="alice", conversation_id="c"):
        assert sorted(f.key for f in again.facts.all()) == ["tea", "written"]
        assert [r.message.text for r in again.conversation.read()] == expected_log


def test_a_moved_working_directory_does_not_look_like_a_replaced_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative path is resolved once, when the store opens it."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    memory = Memory("sqlite:///rel.db", load_entrypoints=False)
    with memory.session(user_id="alice", conversation_id="c"):
        memory.facts.put("tea", "oolong")
        monkeypatch.chdir(tmp_path / "b")
        assert memory.facts.get("tea") is not None
        errors: list[BaseException] = []
        key = memory.conversation.key

        def other_thread() -> None:  # a new connection opens the same file
            try:
                assert memory.store.last_seq(key) == 0
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert errors == []
    memory.close()
    assert not (tmp_path / "b" / "rel.db").exists()


# -- semantic recall: fact vectors ------------------------------------------------------------


def _unit(*values: float) -> list[float]:
    from memory_adapters.embedders import normalized

    return normalized(values)


def _emb(model: str, **fields: list[float]) -> Embedding:
    dims = len(next(iter(fields.values()))) if fields else 0
    return Embedding(model, dims, fields)


def _put(store: Store, key: str, embedding: Embedding | None, scope: str = "u", **kw: Any) -> None:
    store.put_fact("ns", scope, key, f'"{key}"', text=key, embedding=embedding, **kw)


def _keys(
    store: Store, vector: list[float], model: str = "m", scope: str = "u", n: int = 10
) -> list[str]:
    return [f.key for f in store.search_fact_vectors("ns", scope, vector, model=model, limit=n)]


def test_vectors_by_field_model_dims_and_scope(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "v.db")
    _put(store, "two", _emb("m", a=_unit(0, 1, 0), b=_unit(1, 0, 0)))
    _put(store, "one", _emb("m", **{"$": _unit(1, 0.5, 0)}))
    _put(store, "other", _emb("m2", **{"$": _unit(1, 0, 0)}))
    _put(store, "flat", _emb("m", **{"$": _unit(1, 0)}))
    assert _keys(store, _unit(1, 0, 0)) == ["two", "one"]
    assert _keys(store, _unit(1, 0)) == ["flat"]
    assert _keys(store, _unit(1, 0, 0), model="m2") == ["other"]
    for i in range(60):  # many scopes, one vector each: each search sees its own
        _put(store, f"k{i}", _emb("m", **{"$": _unit(1, i, 0)}), scope=f"s{i}")
    for i in range(60):
        assert _keys(store, _unit(1, 0, 0), scope=f"s{i}") == [f"k{i}"]
    _put(store, "two", None)  # rewritten without an embedding: its vectors go
    assert _keys(store, _unit(1, 0, 0)) == ["one"]
    assert [f.key for f in store.facts_to_embed("ns", "u", "m")] == ["other", "two"]
    db = sqlite3.connect(tmp_path / "v.db")
    fact_ids = {r[0] for r in db.execute("SELECT id FROM ma_facts")}
    vector_ids = {r[0] for r in db.execute("SELECT fact_id FROM ma_fact_vectors")}
    assert vector_ids <= fact_ids
    store.close()


def test_set_fact_embedding_keeps_version_and_times(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "v.db")
    _put(store, "k", None)
    _put(store, "k", None)
    before = store.get_fact("ns", "u", "k")
    assert before is not None and before.version == 2
    assert not store.set_fact_embedding("ns", "u", "k", 1, _emb("m", **{"$": _unit(1, 0)}))
    assert store.set_fact_embedding("ns", "u", "k", 2, _emb("m", **{"$": _unit(1, 0)}))
    after = store.get_fact("ns", "u", "k")
    assert after == before
    assert _keys(store, _unit(1, 0)) == ["k"]
    assert store.set_fact_embedding("ns", "u", "k", 2, _emb("m"))  # unindexed on purpose
    assert _keys(store, _unit(1, 0)) == [] and store.facts_to_embed("ns", "u", "m") == []
    store.close()


def test_expired_facts_vectors_are_hidden_then_pruned(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "v.db")
    _put(store, "soon", _emb("m", **{"$": _unit(1, 0)}), expires_at=time.time() + 0.2)
    _put(store, "stays", _emb("m", **{"$": _unit(0, 1)}))
    assert _keys(store, _unit(1, 0)) == ["soon", "stays"]
    time.sleep(0.3)
    assert _keys(store, _unit(1, 0)) == ["stays"]
    assert not store.set_fact_embedding("ns", "u", "soon", 1, _emb("m", **{"$": _unit(1, 0)}))
    assert store.prune() == 1
    db = sqlite3.connect(tmp_path / "v.db")
    assert db.execute("SELECT count(*) FROM ma_fact_vectors").fetchone() == (1,)
    store.close()


def test_numpy_and_pure_python_rank_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    from memory_adapters import exact_vectors

    rnd = random.Random(7)
    store = SQLiteStore(tmp_path / "v.db")
    for i in range(400):
        fields = {f"f{j}": _unit(*(rnd.gauss(0, 1) for _ in range(16))) for j in range(i % 3 + 1)}
        _put(store, f"k{i:03d}", _emb("m", **fields), importance=float(i % 2))
    for i in range(20):  # exact ties: broken by importance, recency, key
        _put(store, f"tie{i:02d}", _emb("m", **{"$": _unit(*([1.0] * 16))}), importance=i % 3)
    queries = [_unit(*(rnd.gauss(0, 1) for _ in range(16))) for _ in range(10)]
    queries.append(_unit(*([1.0] * 16)))

    def results() -> list[list[tuple[str, float | None]]]:
        return [
            [(f.key, f.score) for f in store.search_fact_vectors("ns", "u", q, model="m", limit=15)]
            for q in queries
        ]

    with_numpy = results()
    monkeypatch.setattr(exact_vectors, "_numpy", lambda: None)
    assert results() == with_numpy  # same keys, same order, same scores to the last bit
    assert [k for k, _ in with_numpy[-1]][:7] == [
        "tie17",
        "tie14",
        "tie11",
        "tie08",
        "tie05",
        "tie02",
        "tie19",
    ]
    store.close()


V1_SCHEMA_FACT = (
    "INSERT INTO ma_facts (namespace, scope, key, data, version, importance, created_at, "
    "updated_at) VALUES ('ns', 'u', 'old', '\"oolong\"', 3, 0, 1, 2)"
)


def test_a_version_1_database_upgrades(tmp_path: Path) -> None:
    from memory_adapters_sqlite.schema import MIGRATIONS, SCHEMA_VERSION, statements

    path = tmp_path / "v1.db"
    db = sqlite3.connect(path, isolation_level=None)
    for statement in statements(MIGRATIONS[0]):
        db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.execute(V1_SCHEMA_FACT)
    db.execute("INSERT INTO ma_facts_fts (rowid, owner, text) SELECT id, 'x', 'old' FROM ma_facts")
    db.close()
    store = SQLiteStore(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    old = store.get_fact("ns", "u", "old")
    assert old is not None and old.value == "oolong" and old.version == 3
    assert [f.key for f in store.facts_to_embed("ns", "u", "m")] == ["old"]
    assert store.set_fact_embedding("ns", "u", "old", 3, _emb("m", **{"$": _unit(1, 0)}))
    assert _keys(store, _unit(1, 0)) == ["old"]
    assert [h.key for h in store.match_terms("ns", "u", ["oolong"]).hits] == ["old"]
    assert store.delete_fact("ns", "u", "old")
    assert sqlite3.connect(path).execute("SELECT count(*) FROM ma_fact_vectors").fetchone() == (0,)
    store.close()
    SQLiteStore(path).close()  # a current database is opened as it is


def test_a_version_2_database_upgrades_with_conversation_activity(tmp_path: Path) -> None:
    """Opening a database of the previous release adds the operations columns: existing
    conversations take the times of their first and newest message, and are listed."""
    from memory_adapters_sqlite.schema import MIGRATIONS, SCHEMA_VERSION, statements

    path = tmp_path / "v2.db"
    db = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:2]:
        for statement in statements(script):
            db.execute(statement)
    db.execute("PRAGMA user_version = 2")
    db.execute("INSERT INTO ma_conversations (key, last_seq, total_tokens) VALUES ('n:u:c', 2, 7)")
    for seq, at in ((1, 100.0), (2, 250.0)):
        db.execute(
            "INSERT INTO ma_messages (conversation, seq, batch, start_tokens, tokens, role, data, "
            "created_at) VALUES ('n:u:c', ?, ?, 0, 3, 'user', '{\"role\": \"user\"}', ?)",
            (seq, seq, at),
        )
    db.close()
    store = SQLiteStore(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    (info,) = store.list_conversations("n:")
    assert (info.user_id, info.messages, info.tokens) == ("u", 2, 7)
    assert (info.created_at, info.last_activity) == (100.0, 250.0)
    assert store.delete_idle_conversations("n:", 200.0) == 0
    assert store.delete_idle_conversations("n:", 300.0) == 1
    store.close()


def _v4_database(path: Path, facts: Sequence[tuple[str, str, str, Any, float | None]]) -> None:
    """A database of schema version 4 (before keyword search moved to the core), its facts
    (namespace, scope, key, value, expires_at) indexed in FTS5 as that version did."""
    import json

    from memory_adapters_sqlite.schema import MIGRATIONS, statements

    from memory_adapters.facts import search_text

    db = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:4]:
        for statement in statements(script):
            db.execute(statement)
    db.execute("PRAGMA user_version = 4")
    db.execute("BEGIN")
    for namespace, scope, key, value, expires_at in facts:
        fact_id = db.execute(
            "INSERT INTO ma_facts (namespace, scope, key, data, version, importance, "
            "created_at, updated_at, expires_at) VALUES (?, ?, ?, ?, 2, 0.5, 1, 2, ?)",
            (namespace, scope, key, json.dumps(value), expires_at),
        ).lastrowid
        db.execute(
            "INSERT INTO ma_facts_fts (rowid, owner, text) VALUES (?, 'o', ?)",
            (fact_id, search_text(key, value)),
        )
    db.execute("COMMIT")
    db.close()


def test_a_version_4_database_indexes_its_facts_terms_when_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening a database of the previous release drops the FTS5 table and computes the
    terms of every existing fact in Python (the core's analyzer), in batches: keyword search
    then finds the old facts with exact counts and statistics; opening again does nothing."""
    import memory_adapters_sqlite.facts as sqlite_facts
    from memory_adapters_sqlite.schema import SCHEMA_VERSION

    from memory_adapters.facts import index_text

    monkeypatch.setattr(sqlite_facts, "OLD_FACTS_BATCH", 3)  # several batches
    path = tmp_path / "v4.db"
    old: list[tuple[str, str, str, Any, float | None]] = [
        ("ns", "u", f"k{i}", f"I drink tea {i}, tea again", None) for i in range(7)
    ]
    old += [
        ("ns", "u", "city", {"home": "Lisbon"}, None),
        ("ns", "u", "gone", "tea that expired", time.time() - 10),
        ("ns", "v", "other", "tea tea tea", None),
    ]
    _v4_database(path, old)
    store = SQLiteStore(path)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    assert (
        db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'ma_facts_fts%'").fetchall()
        == []
    )
    assert db.execute("SELECT count(*) FROM ma_facts WHERE length IS NULL").fetchone() == (0,)
    matches = store.match_terms("ns", "u", ["tea", "lisbon"])
    live = [(k, v) for ns, sc, k, v, exp in old if sc == "u" and exp is None]
    assert matches.documents == len(live) == 8
    assert matches.total_length == sum(len(index_text(k, v).split()) for k, v in live)
    found = {h.key: (h.length, h.counts, h.importance, h.updated_at) for h in matches.hits}
    assert found == {
        **{
            f"k{i}": (len(index_text(f"k{i}", old[i][3]).split()), (2, 0), 0.5, 2.0)
            for i in range(7)
        },
        "city": (len(index_text("city", {"home": "Lisbon"}).split()), (0, 1), 0.5, 2.0),
    }
    assert [h.counts for h in store.match_terms("ns", "v", ["tea"]).hits] == [(3,)]
    postings = db.execute("SELECT count(*) FROM ma_fact_terms").fetchone()
    store.close()
    db.close()
    again = SQLiteStore(path)
    assert again._index_old_facts() == 0
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM ma_fact_terms").fetchone() == postings
    again.close()


def test_stores_opening_an_old_database_at_once_index_each_fact_once(tmp_path: Path) -> None:
    """Several stores opening a version 4 database together: each batch takes the write
    lock and reads only facts still unindexed, so every fact gets its postings once."""
    path = tmp_path / "v4.db"
    _v4_database(path, [("ns", "u", f"k{i}", f"tea {i}", None) for i in range(1200)])
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            barrier.wait()
            SQLiteStore(path).close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store = SQLiteStore(path)
    matches = store.match_terms("ns", "u", ["tea"])
    assert matches.documents == 1200 and len(matches.hits) == 1200
    assert {h.counts for h in matches.hits} == {(1,)}
    with sqlite3.connect(path) as db:
        # "tea" and the number: two postings a fact (a key with digits is not indexed)
        assert db.execute("SELECT count(*) FROM ma_fact_terms").fetchone() == (2400,)
    store.close()


def _plan_of(db: sqlite3.Connection, sql: str, params: Sequence[object]) -> str:
    return " | ".join(row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params))


def test_keyword_candidates_and_statistics_are_the_scope_s_own_index_ranges(
    tmp_path: Path,
) -> None:
    """A term's candidates are one range of the postings' primary key (owner, term), then one
    lookup per fact; the statistics a row of ma_fact_stats and a range of the expiring
    facts. Nothing scans the scope's facts, let alone every fact."""
    import json

    from memory_adapters_sqlite.facts import MATCH_SQL, STATS_SQL, filter_sql, term_owner

    from memory_adapters.facts import FactFilter

    store = SQLiteStore(tmp_path / "plan.db")
    for i in range(200):
        scope = f"u{i % 4}"
        expires = time.time() + 100 if i % 2 else None
        store.put_fact("ns", scope, f"k{i}", '"v"', text=f"tea t{i}", expires_at=expires)
    db = sqlite3.connect(tmp_path / "plan.db")
    db.execute("ANALYZE")
    condition, params = filter_sql(FactFilter((("n", 1),), since=0.0, until=1e12))
    match = _plan_of(
        db,
        MATCH_SQL + condition,
        (term_owner("ns", "u1"), json.dumps(["tea", "x"]), "ns", "u1", 0.0, *params),
    )
    assert "SEARCH t USING PRIMARY KEY (owner=? AND term=?)" in match, match
    assert "SEARCH f USING INTEGER PRIMARY KEY" in match, match
    assert "SCAN t" not in match and "SCAN f" not in match, match
    stats = _plan(db, STATS_SQL, {"ns": "ns", "sc": "u1", "now": time.time()})
    assert "USING COVERING INDEX ma_facts_expiring (namespace=? AND scope=?" in stats, stats
    assert "SEARCH ma_fact_stats USING PRIMARY KEY" in stats, stats
    assert "SCAN" not in stats, stats
    db.close()
    store.close()


def test_postings_and_statistics_follow_every_write_and_delete(tmp_path: Path) -> None:
    """After puts, replacements, deletes, expiry (hidden, then pruned), restores, erase and
    retention, the statistics equal a recount of the facts and no posting outlives its
    fact; an emptied scope keeps no statistics row."""
    from memory_adapters.facts import Fact, index_text
    from memory_adapters.operations import user_keys

    store = SQLiteStore(tmp_path / "s.db")
    keys = user_keys("ns", "ann")
    scopes = [keys.user_scope, "bob", "carl"]
    for i in range(60):
        scope = scopes[i % 3]
        value = f"tea {'coffee ' * (i % 4)}{i}"
        expires = time.time() - 1 if i % 7 == 0 else None
        store.put_fact(
            "ns", scope, f"k{i % 25}", f'"{value}"', text=index_text("k", value), expires_at=expires
        )
    for i in range(0, 25, 4):
        store.delete_fact("ns", "bob", f"k{i}")
    store.restore_fact("ns", "carl", Fact("r", "tea restored", 4, 0.0, 1.0, 2.0))
    store.restore_fact("ns", "carl", Fact("r", "coffee restored again", 5, 0.0, 1.0, 3.0))
    store.put_fact("ns#working", keys.conversation_prefix + "c", "note", '"tea"', text="tea note")

    def check() -> None:
        with store._connection() as db:
            stats = db.execute(
                "SELECT namespace, scope, documents, total_length FROM ma_fact_stats"
            ).fetchall()
            recount = db.execute(
                "SELECT namespace, scope, count(*), sum(length) FROM ma_facts "
                "GROUP BY namespace, scope"
            ).fetchall()
            orphans = db.execute(
                "SELECT count(*) FROM ma_fact_terms WHERE fact_id NOT IN (SELECT id FROM ma_facts)"
            ).fetchone()
            per_fact = db.execute(
                "SELECT count(*) FROM ma_facts AS f WHERE length <> "
                "(SELECT coalesce(sum(tf), 0) FROM ma_fact_terms WHERE fact_id = f.id)"
            ).fetchone()
        assert sorted(stats) == sorted(recount)
        assert orphans == (0,) and per_fact == (0,)

    check()
    for scope in scopes:
        live = store.list_facts("ns", scope)
        matches = store.match_terms("ns", scope, ["tea"])
        assert matches.documents == len(live)
        with store._connection() as db:
            (total,) = db.execute(
                "SELECT coalesce(sum(length), 0) FROM ma_facts WHERE namespace = 'ns' "
                "AND scope = ? AND expires_at IS NULL",
                (scope,),
            ).fetchone()
        assert matches.total_length == total
    assert store.prune() > 0
    check()
    store.erase("ns", "ann")
    store.append(keys.conversation_prefix + "c", _entries("hi"))
    store.delete_idle_conversations("ns:", time.time() + 1)
    check()
    with store._connection() as db:
        left = {r[0] for r in db.execute("SELECT scope FROM ma_fact_stats")}
    assert left == {"bob", "carl"}
    store.close()


def test_a_metadata_filter_key_must_be_a_plain_name(tmp_path: Path) -> None:
    from memory_adapters.errors import InvalidInput
    from memory_adapters.facts import FactFilter

    store = SQLiteStore(tmp_path / "f.db")
    store.put_fact("ns", "u", "k", '"tea"', text="tea", metadata='{"a-b": 1, "a": {"b": 2}}')
    assert len(store.match_terms("ns", "u", ["tea"], where=FactFilter((("a-b", 1),))).hits) == 1
    assert store.match_terms("ns", "u", ["tea"], where=FactFilter((("a", 2),))).hits == []
    with pytest.raises(InvalidInput):
        store.match_terms("ns", "u", ["tea"], where=FactFilter((('a".b', 2),)))
    store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def _entries(text: str) -> list[Entry]:
    """One user message as a store takes it."""
    return [Entry.of(Message.user(text), 3, 1 << 20)]


def test_a_forked_child_uses_connections_of_its_own(tmp_path: Path) -> None:
    """A child forked after the store was used (a pre-forking server, ``multiprocessing``'s
    fork start method) never uses a connection it inherited: the idle ones are closed in the
    child, one another thread was using at the fork is left alone (neither used nor closed:
    closing could undo the parent's work in the shared WAL index), and the child's calls
    open connections of its own. Parent and child both write; nothing is lost or torn."""
    import memory_adapters_sqlite.store as sqlite_store

    store = SQLiteStore(tmp_path / "forked.db")
    store.append("c", _entries("parent, main thread"))
    other = threading.Thread(target=store.append, args=("c", _entries("parent, thread")))
    other.start()
    other.join()
    in_use = threading.Event()
    release = threading.Event()
    held: list[sqlite3.Connection] = []

    def busy() -> None:
        with store._connection() as db:
            held.append(db)
            in_use.set()
            release.wait(30)

    user = threading.Thread(target=busy)
    user.start()
    assert in_use.wait(30)
    inherited = list(store._all)  # kept alive here, so no new connection takes their ids
    assert len(inherited) == 3

    def in_the_child() -> None:
        idle = [db for db in inherited if db is not held[0]]
        for db in idle:
            with pytest.raises(sqlite3.ProgrammingError):
                db.execute("SELECT 1")  # closed in the child
        assert held[0] in sqlite_store._carried
        assert held[0].in_transaction is False  # open (a closed one raises), never used
        result = store.append("c", _entries("child"))
        assert (result.first_seq, result.last_seq) == (3, 3)
        assert all(db is not mine for db in inherited for mine in store._all)
        texts = [r.message.text for r in store.read("c")]
        assert texts == ["parent, main thread", "parent, thread", "child"]

    try:
        assert in_forked_child(in_the_child) == 0
    finally:
        release.set()
        user.join()
    # the parent's own connections are as they were: each thread goes on with its own
    store.append("c", _entries("parent, after"))
    texts = [r.message.text for r in store.read("c")]
    assert texts == ["parent, main thread", "parent, thread", "child", "parent, after"]
    assert [r.seq for r in store.read("c")] == [1, 2, 3, 4]
    with store._connection() as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_has_its_own_copy_of_an_in_memory_database() -> None:
    store = SQLiteStore(":memory:")
    store.append("c", _entries("before the fork"))

    def in_the_child() -> None:
        store.append("c", _entries("child only"))
        assert [r.message.text for r in store.read("c")] == ["before the fork", "child only"]

    assert in_forked_child(in_the_child) == 0
    assert [r.message.text for r in store.read("c")] == ["before the fork"]
    store.close()


def _pool_turn(url: str, n: int) -> list[int]:
    memory = _forked_memory[url]
    with memory.session(user_id="u", conversation_id=f"worker-{n % 2}"):
        result = memory.conversation.append(
            [Message.user(f"question {n}"), Message.assistant(f"answer {n}")]
        )
    return [result.first_seq, result.last_seq]


_forked_memory: dict[str, Memory] = {}
"""The ``Memory`` the pool's forked workers inherit (by URL: a module global is what a
forked worker sees)."""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_memory_opened_before_a_fork_pool_serves_its_workers(tmp_path: Path) -> None:
    """As a user would: a ``Memory`` opened and used in the parent, then a ``multiprocessing``
    pool with the fork start method whose workers write through the ``Memory`` they
    inherited; every turn lands once, gapless, whichever worker wrote it."""
    import multiprocessing

    url = f"sqlite:///{tmp_path / 'pool.db'}"
    memory = _forked_memory[url] = Memory(url)
    try:
        for c in ("worker-0", "worker-1"):
            with memory.session(user_id="u", conversation_id=c):
                memory.conversation.append([Message.user("opening")])
        # the parent's worker done with its writes before the fork: a store call in flight on
        # another thread at a fork is a hazard of forking itself (not this test's subject)
        memory.worker.wait()
        with multiprocessing.get_context("fork").Pool(2) as pool:
            seqs = pool.starmap(_pool_turn, [(url, n) for n in range(20)])
        assert sorted(s for pair in seqs for s in pair) == sorted([*range(2, 22), *range(2, 22)])
        for c in ("worker-0", "worker-1"):
            with memory.session(user_id="u", conversation_id=c):
                records = memory.conversation.read()
            assert [r.seq for r in records] == list(range(1, 22))
            asked = sorted(r.message.text for r in records[1:] if r.message.role == "user")
            assert asked == sorted(f"question {n}" for n in range(20) if f"worker-{n % 2}" == c)
    finally:
        del _forked_memory[url]
        memory.close()


def test_concurrent_first_async_calls_share_one_loop_connection(tmp_path: Path) -> None:
    """Many async calls at once on a fresh loop each found no loop connection and opened
    one, keeping every one open: 40,000 concurrent calls (LangGraph's
    ``test_large_batches_async``) ran out of file descriptors. The losers now close theirs."""
    store = SQLiteStore(str(tmp_path / "m.db"))
    store.put_fact("ns", "s", "k", '"v"', text="k")

    async def go() -> None:
        found = await asyncio.gather(*(store.aget_fact("ns", "s", "k") for _ in range(300)))
        assert all(f is not None for f in found)

    asyncio.run(go())
    # this thread's connection, the loop's, and one per worker thread at most
    assert len(store._all) <= 2 + (os.cpu_count() or 1) + 4
    store.close()
