"""The PostgreSQL store against a real server the tests start themselves."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from memory_adapters_postgres import PostgresStore
from memory_adapters_postgres.schema import SCHEMA_VERSION
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from memory_adapters import InvalidId, Memory, Message, StoreUnavailable
from memory_adapters.store import Store
from memory_adapters.testing import MultiProcessConformance, StoreConformance
from memory_adapters.testing.conformance import _append_worker, check_log
from memory_adapters.testing.postgres_server import TemporaryPostgres


def _schema() -> str:
    return "t_" + uuid.uuid4().hex[:12]


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class TestPostgresStore(StoreConformance, MultiProcessConformance):
    """The conformance kit; every test gets its own schema on the shared server."""

    @pytest.fixture
    def schema(self, postgres_url: str) -> Iterator[str]:
        name = _schema()
        yield name
        _drop(postgres_url, name)

    @pytest.fixture
    def store(self, postgres_url: str, schema: str) -> Iterator[PostgresStore]:
        s = PostgresStore(postgres_url, schema=schema)
        yield s
        s.close()

    @pytest.fixture
    def store_factory(self, postgres_url: str, schema: str) -> Callable[[], Store]:
        return functools.partial(PostgresStore, postgres_url, schema=schema)


class TestPostgresStoreFromPool(StoreConformance):
    """The same kit over an application's own pool (``PostgresStore.from_pool``)."""

    @pytest.fixture
    def store(self, postgres_url: str) -> Iterator[PostgresStore]:
        schema = _schema()
        pool = ConnectionPool(
            postgres_url, min_size=1, max_size=10, kwargs={"autocommit": True}, open=True
        )
        s = PostgresStore.from_pool(pool, schema=schema)
        yield s
        pool.close()
        _drop(postgres_url, schema)


def test_native_async_pool_round_trip(postgres_url: str) -> None:
    schema = _schema()

    async def main() -> list[str]:
        pool = ConnectionPool(postgres_url, min_size=1, kwargs={"autocommit": True}, open=True)
        apool = AsyncConnectionPool(
            postgres_url, min_size=1, kwargs={"autocommit": True}, open=False
        )
        await apool.open()
        try:
            store = PostgresStore.from_pool(pool, async_pool=apool, schema=schema)
            memory = Memory(store=store)
            async with memory.session(user_id="u", conversation_id="c"):
                await asyncio.gather(
                    *(memory.conversation.aappend([Message.user(f"m{i}")]) for i in range(20))
                )
                await memory.facts.aput("tea", "oolong")
                assert [f.key for f in await memory.facts.asearch("oolong")] == ["tea"]
                return [m.text for m in await memory.conversation.amessages()]
        finally:
            await apool.close()
            pool.close()

    try:
        texts = asyncio.run(main())
        assert sorted(texts) == sorted(f"m{i}" for i in range(20))
    finally:
        _drop(postgres_url, schema)


def test_memory_resolves_both_schemes(postgres_url: str) -> None:
    schema = _schema()
    try:
        for url in (postgres_url, postgres_url.replace("postgresql://", "postgres://", 1)):
            memory = Memory(url, store_options={"schema": schema})
            assert isinstance(memory.store, PostgresStore)
            with memory.session(conversation_id="c"):
                memory.conversation.append([Message.user("hi")])
            memory.close()
        with (
            Memory(postgres_url, store_options={"schema": schema}) as memory,
            memory.session(conversation_id="c"),
        ):
            assert memory.conversation.last_seq() == 2
    finally:
        _drop(postgres_url, schema)


@pytest.mark.parametrize("name", ["", "Bad", "a-b", 'x"; DROP TABLE y; --', "a" * 64, "1abc"])
def test_schema_names_must_be_identifiers(postgres_url: str, name: str) -> None:
    with pytest.raises(InvalidId):
        PostgresStore(postgres_url, schema=name)


def test_nul_characters_are_stored_exactly(postgres_url: str) -> None:
    schema = _schema()
    try:
        with (
            Memory(postgres_url, store_options={"schema": schema}) as memory,
            memory.session(user_id="u", conversation_id="c"),
        ):
            text = "before\x00after \x00\x00 end"
            memory.conversation.append(
                [Message.user(text), Message("assistant", "ok", raw={"k\x00": "v\x00"})]
            )
            back = memory.conversation.read()
            assert back[0].message.text == text and len(back[0].message.text) == len(text)
            assert back[1].message.raw == {"k\x00": "v\x00"}
            memory.facts.put("nul", {"v": "a\x00b"})
            fact = memory.facts.get("nul")
            assert fact is not None and fact.value == {"v": "a\x00b"}
            memory.working.set("nul", "x\x00y")
            assert memory.working.get("nul") == "x\x00y"
    finally:
        _drop(postgres_url, schema)


def test_concurrent_migrations_are_safe(postgres_url: str) -> None:
    schema = _schema()
    ctx = multiprocessing.get_context("spawn")
    try:
        procs = [ctx.Process(target=_open_and_close, args=(postgres_url, schema)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        with psycopg.connect(postgres_url) as conn:
            rows = conn.execute(f'SELECT version FROM "{schema}".schema_version').fetchall()
        assert sorted(rows) == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    finally:
        _drop(postgres_url, schema)


def _open_and_close(url: str, schema: str) -> None:
    PostgresStore(url, schema=schema).close()


@pytest.mark.processes
def test_eight_processes_append_2000_turns_to_one_conversation(postgres_url: str) -> None:
    """8 writer processes x 250 turns: exactly 2,000 contiguous batches, gapless seq."""
    schema = _schema()
    try:
        factory = functools.partial(PostgresStore, postgres_url, schema=schema)
        ctx = multiprocessing.get_context("spawn")
        procs = [
            ctx.Process(target=_append_worker, args=(factory, "busy", w, 250)) for w in range(8)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(300)
            assert p.exitcode == 0
        store = factory()
        records = store.read("busy")
        assert len({r.batch for r in records}) == 2000
        check_log(records, 8, 250, 3)
        store.close()
    finally:
        _drop(postgres_url, schema)


def test_a_server_that_goes_away_mid_run_gives_a_clear_error_and_recovers() -> None:
    """Stop the server with ``pg_ctl stop -m immediate`` in the middle of a conversation:
    the next call fails with StoreUnavailable; once the server is back the next call works,
    with every committed turn intact."""
    with TemporaryPostgres() as server:
        memory = Memory(server.url, store_options={"timeout": 2.0})
        with memory.session(user_id="u", conversation_id="c"):
            for i in range(10):
                memory.conversation.append([Message.user(f"q{i}"), Message.assistant(f"a{i}")])
            memory.facts.put("k", "v")
            server.stop("immediate")
            with pytest.raises(StoreUnavailable):
                memory.conversation.append([Message.user("lost")])
            with pytest.raises(ConnectionError):
                memory.conversation.window()
            server.start()
            # The pool reconnects in the background with a growing back-off, so the first
            # call after the restart may still find no connection ready: retry it, under an
            # idempotency key, until the pool has one (bounded; no timing is asserted).
            for attempt in range(30):
                try:
                    memory.conversation.append(
                        [Message.user("q10"), Message.assistant("a10")], idempotency_key="q10"
                    )
                    break
                except StoreUnavailable:
                    if attempt == 29:
                        raise
                    time.sleep(1)
            records = memory.conversation.read()
            assert [r.message.text for r in records] == [
                t for i in range(11) for t in (f"q{i}", f"a{i}")
            ]
            assert [r.seq for r in records] == list(range(1, 23))
            fact = memory.facts.get("k")
            assert fact is not None and fact.value == "v"
        memory.close()


def test_an_unreachable_server_is_a_clear_error_quickly() -> None:
    with pytest.raises(StoreUnavailable, match=r"no PostgreSQL server at 127\.0\.0\.1:1 "):
        Memory("postgresql://postgres@127.0.0.1:1/none", store_options={"timeout": 1.0})


def test_scope_listing_is_an_index_skip_scan(postgres_url: str) -> None:
    """Listing the scopes under a prefix seeks each distinct scope in the index
    ``(namespace, scope COLLATE "C")``, whatever the database's collation."""
    schema = _schema()
    try:
        store = PostgresStore(postgres_url, schema=schema)
        for i in range(300):
            for key in ("a", "b"):
                store.put_fact("ns", f"user:{i:03d}", key, '"v"', text="v")
        assert store.list_fact_scopes("ns", "user:01") == [f"user:{i:03d}" for i in range(10, 20)]
        step = next(store._list_fact_scopes("ns", "user:01"))
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'ANALYZE "{schema}".facts')
            rows: list[Any] = conn.execute("EXPLAIN " + step.sql, step.params).fetchall()
        plan = "\n".join(r[0] for r in rows)
        assert "Index Only Scan using facts_by_scope" in plan, plan
        assert "Seq Scan" not in plan, plan
        store.close()
    finally:
        _drop(postgres_url, schema)


def test_window_reads_are_index_range_scans(postgres_url: str) -> None:
    """The tail query, even as a generic cached plan (parameters unknown to the planner), is
    an index range scan with no sort: its cost follows the window, not the conversation."""
    schema = _schema()
    try:
        store = PostgresStore(postgres_url, schema=schema)
        memory = Memory(store=store)
        with memory.session(conversation_id="long"):
            for i in range(1000):
                memory.conversation.append([Message.user(f"q{i}"), Message.assistant(f"a{i}")])
            window = memory.conversation.window(max_tokens=100)
        assert window.records and window.tokens <= 100
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'ANALYZE "{schema}".messages')
            conn.execute("SET plan_cache_mode = force_generic_plan")
            conn.execute(
                "PREPARE tail(text, bigint, bigint, bigint) AS "
                "SELECT m.seq, m.data, m.tokens, m.batch FROM "
                f'"{schema}".messages m WHERE m.conversation = $1 AND m.start_tokens '
                "BETWEEN $2 AND $3 ORDER BY m.start_tokens DESC, m.seq DESC LIMIT $4"
            )
            plan: list[Any] = conn.execute(
                "EXPLAIN EXECUTE tail('default::long', 5000, 6000, NULL)"
            ).fetchall()
        text = "\n".join(r[0] for r in plan)
        assert "Index Scan Backward using messages_by_tokens" in text, text
        assert "Sort" not in text and "Seq Scan" not in text, text
        store.close()
    finally:
        _drop(postgres_url, schema)
