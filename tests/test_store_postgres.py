"""The PostgreSQL store against a real server the tests start themselves."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import multiprocessing
import os
import random
import struct
import threading
import time
import uuid
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from memory_adapters_postgres import PostgresStore
from memory_adapters_postgres.schema import MIGRATIONS, SCHEMA_VERSION
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from stores import in_forked_child

from memory_adapters import InvalidId, Memory, Message, StoreUnavailable
from memory_adapters.embedders import Embedding, normalized
from memory_adapters.errors import InvalidInput, StoreNotReady
from memory_adapters.exact_vectors import Candidate, order, pack, slack
from memory_adapters.facts import Fact, FactFilter, index_text
from memory_adapters.messages import Entry
from memory_adapters.operations import user_keys, working_namespace_of
from memory_adapters.store import Store
from memory_adapters.testing import MultiProcessConformance, StoreConformance, windows
from memory_adapters.testing.conformance import _append_worker, check_log
from memory_adapters.testing.postgres_server import TemporaryPostgres


def _schema() -> str:
    return "t_" + uuid.uuid4().hex[:12]


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def dump(store: PostgresStore) -> dict[str, list[str]]:
    """Every row of every table in the store's schema (the conformance kit's
    ``store_dump``), but the schema version."""
    out: dict[str, list[str]] = {}
    with store.pool.connection() as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT c.relname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p') "
                "AND c.relname <> 'schema_version'",
                (store.schema,),
            )
        ]
        assert {"conversations", "messages", "facts", "fact_vectors", "fact_history"} <= set(tables)
        for table in tables:
            rows = conn.execute(f'SELECT * FROM "{store.schema}"."{table}"').fetchall()
            out[table] = sorted(repr(r) for r in rows)
    return out


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

    @pytest.fixture
    def store_dump(self, store: PostgresStore) -> Callable[[], dict[str, list[str]]]:
        return lambda: dump(store)


class TestPostgresStoreThroughPgBouncer(StoreConformance, MultiProcessConformance):
    """The conformance kit through PgBouncer in transaction pooling mode (``?pgbouncer=true``):
    no server-side prepared statements, no session state; migrations included."""

    @pytest.fixture
    def schema(self, postgres_url: str) -> Iterator[str]:
        name = _schema()
        yield name
        _drop(postgres_url, name)

    @pytest.fixture
    def store(self, fresh_pgbouncer_url: str, schema: str) -> Iterator[PostgresStore]:
        s = PostgresStore(fresh_pgbouncer_url, schema=schema)
        assert s.pgbouncer
        yield s
        s.close()

    @pytest.fixture
    def store_factory(self, fresh_pgbouncer_url: str, schema: str) -> Callable[[], Store]:
        return functools.partial(PostgresStore, fresh_pgbouncer_url, schema=schema)

    def test_every_window_is_valid_maximal_and_within_budget(self, window_memory: Memory) -> None:
        """The property-based window suite with 20 examples (CI time): its queries are the
        ones the direct suite checks with every example; here they go through the pooler."""
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(windows, "EXAMPLES", 20)
            super().test_every_window_is_valid_maximal_and_within_budget(window_memory)


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
                ns = memory.facts.namespace
                (scope,) = await store.alist_fact_scopes(ns, "")
                found = await store.amatch_terms(ns, scope, ["oolong"])
                assert [h.key for h in found.hits] == ["tea"] and found.documents == 1
                return [m.text for m in await memory.conversation.amessages()]
        finally:
            await apool.close()
            pool.close()

    try:
        texts = asyncio.run(main())
        assert sorted(texts) == sorted(f"m{i}" for i in range(20))
    finally:
        _drop(postgres_url, schema)


def _entries(text: str) -> list[Entry]:
    """One user message as a store takes it."""
    return [Entry.of(Message.user(text), 3, 1 << 20)]


def _backend(store: PostgresStore) -> int:
    with store.pool.connection() as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_talks_to_the_server_in_sessions_of_its_own(postgres_url: str) -> None:
    """A child forked from a process whose store had connections open (its pool's, and an
    async one of a live event loop) never uses them: its calls go over sessions of its own
    while the parent goes on writing over the parent's, at the same time, to the same
    conversation; every turn of both lands once, gapless; the parent's connections still
    work after the child exited (the child closed none of them)."""
    schema = _schema()
    store = PostgresStore(postgres_url, schema=schema)
    loop = asyncio.new_event_loop()
    try:
        store.append("c", _entries("opening"))
        loop.run_until_complete(store.aappend("c", _entries("async, before")))
        parents = {_backend(store) for _ in range(3)}

        def parent_turns() -> None:
            for i in range(30):
                store.append("c", _entries(f"parent {i}"))

        def in_the_child() -> None:
            assert _backend(store) not in parents
            for i in range(30):
                store.append("c", _entries(f"child {i}"))
            texts = [r.message.text for r in store.read("c")]
            assert {f"child {i}" for i in range(30)} <= set(texts)

        writer = threading.Thread(target=parent_turns)
        writer.start()
        try:
            assert in_forked_child(in_the_child) == 0
        finally:
            writer.join()
        store.append("c", _entries("sync, after"))
        loop.run_until_complete(store.aappend("c", _entries("async, after")))
        records = store.read("c")
        assert [r.seq for r in records] == list(range(1, 65))
        texts = [r.message.text for r in records]
        assert sorted(texts) == sorted(
            [
                "opening",
                "async, before",
                *(f"parent {i}" for i in range(30)),
                *(f"child {i}" for i in range(30)),
                "sync, after",
                "async, after",
            ]
        )
        assert texts[-2:] == ["sync, after", "async, after"]
    finally:
        store.close()
        loop.close()
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


# -- semantic recall: the same kit on a server with pgvector, and what is PostgreSQL's own ------


class TestPostgresStorePgvector(StoreConformance):
    """The conformance kit (semantic suite included) on a server with pgvector: vectors are
    searched in SQL and through HNSW indexes there, exactly in Python on the plain server."""

    @pytest.fixture
    def store(self, pgvector_url: str) -> Iterator[PostgresStore]:
        schema = _schema()
        s = PostgresStore(pgvector_url, schema=schema, vector_search="pgvector")
        assert s.pgvector_schema is not None
        yield s
        s.close()
        _drop(pgvector_url, schema)

    @pytest.fixture
    def store_dump(self, store: PostgresStore) -> Callable[[], dict[str, list[str]]]:
        return lambda: dump(store)


def _unit(rng: random.Random, dims: int) -> list[float]:
    return normalized([rng.gauss(0, 1) for _ in range(dims)])


def _bulk(url: str, schema: str, scope: str, count: int, dims: int, seed: int) -> None:
    """``count`` facts of ``scope`` with random unit vectors of model "m", by COPY (the same
    rows put_fact writes, much faster)."""
    rng = random.Random(seed)
    now = time.time()
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        with conn.cursor().copy(
            f'COPY "{schema}".facts (namespace, scope, key, data, version, importance, '
            "created_at, updated_at, length, embed_model) FROM STDIN"
        ) as copy:
            for i in range(count):
                copy.write_row(("ns", scope, f"{scope}{i:06d}", "1", 1, 0.0, now, now, 0, "m"))
        with conn.cursor().copy(
            f'COPY "{schema}".fact_vectors (namespace, scope, key, field, model, dims, '
            "embedding) FROM STDIN"
        ) as copy:
            for i in range(count):
                copy.write_row(("ns", scope, f"{scope}{i:06d}", "$", "m", dims, _unit(rng, dims)))
        conn.execute(f'ANALYZE "{schema}".facts, "{schema}".fact_vectors')


def _path(store: PostgresStore, scope: str, query: list[float], limit: int) -> list[str]:
    """Which way the pgvector search went for each fact found: 'hnsw' or 'exact'."""
    with store.pool.connection() as conn:
        rows = conn.execute(
            store.q(
                "SELECT path FROM {s}.vector_candidates(%s, %s, %s, %s::real[], %s, %s, %s, "
                "%s, %s, %s::text[], %s::text[], %s::text[], %s, %s, %s)"
            ),
            (
                "ns",
                scope,
                "m",
                query,
                limit,
                time.time(),
                store.hnsw_min_vectors,
                100,
                store.pgvector_schema,
                None,
                [],
                [],
                None,
                None,
                slack(len(query)),
            ),
        ).fetchall()
    return sorted({r[0] for r in rows})


@pytest.fixture
def pgvector_schema(pgvector_url: str) -> Iterator[str]:
    name = _schema()
    yield name
    _drop(pgvector_url, name)


def test_hnsw_and_exact_searches_agree(pgvector_url: str, pgvector_schema: str) -> None:
    """A scope above hnsw_min_vectors goes through the HNSW index; its answers match the exact
    search of the same rows (vector_search="exact", in Python) on this data."""
    hnsw = PostgresStore(pgvector_url, schema=pgvector_schema, hnsw_min_vectors=500)
    exact = PostgresStore(pgvector_url, schema=pgvector_schema, vector_search="exact")
    try:
        # loaded first, so that the first put builds the index over them in one go (faster
        # than growing it row by row)
        _bulk(pgvector_url, pgvector_schema, "big", 3000, 32, seed=1)
        hnsw.put_fact(
            "ns",
            "big",
            "seed",
            "1",
            text="",
            embedding=Embedding("m", 32, {"$": _unit(random.Random(0), 32)}),
        )
        rng = random.Random(2)
        agree = total = 0
        for _ in range(10):
            q = _unit(rng, 32)
            assert _path(hnsw, "big", q, 10) == ["hnsw"]
            got = hnsw.search_fact_vectors("ns", "big", q, model="m", limit=10)
            want = exact.search_fact_vectors("ns", "big", q, model="m", limit=10)
            assert len(got) == len(want) == 10
            assert got[0].key == want[0].key
            scores = {f.key: f.score for f in want}
            for f in got:
                if f.key in scores:
                    agree += 1
                    assert math.isclose(f.score or 0, scores[f.key] or 0, abs_tol=1e-12)
            total += 10
        assert agree >= 0.95 * total  # HNSW is approximate; on 3,000 vectors it finds ~all
    finally:
        hnsw.close()
        exact.close()


def test_a_small_scope_in_a_large_table_is_searched_exactly(
    pgvector_url: str, pgvector_schema: str
) -> None:
    """pgvector 0.6 filters an HNSW scan's few hundred results by scope afterwards: a scope of
    3 facts among 5,000 would mostly come back empty. It is compared in full instead (below
    hnsw_min_vectors), and even when forced through the index (hnsw_min_vectors=0) the short
    answer falls back to the full comparison."""
    store = PostgresStore(pgvector_url, schema=pgvector_schema, hnsw_min_vectors=2000)
    forced = PostgresStore(pgvector_url, schema=pgvector_schema, hnsw_min_vectors=0)
    try:
        rng = random.Random(3)
        _bulk(pgvector_url, pgvector_schema, "big", 5000, 64, seed=4)  # index built by the puts
        for key in ("a", "b", "c"):
            store.put_fact(
                "ns",
                "small",
                key,
                "1",
                text="",
                embedding=Embedding("m", 64, {"$": _unit(rng, 64)}),
            )
        assert store.pgvector_schema is not None
        for s in (store, forced):
            for _ in range(5):
                q = _unit(rng, 64)
                found = s.search_fact_vectors("ns", "small", q, model="m", limit=10)
                assert sorted(f.key for f in found) == ["a", "b", "c"]
                scores = [f.score or 0.0 for f in found]
                assert scores == sorted(scores, reverse=True)
        assert _path(store, "small", q, 10) == ["exact"]
        assert _path(forced, "small", q, 10) == ["exact"]  # the index's answer was too short
        assert _path(forced, "big", q, 10) == ["hnsw"]
    finally:
        store.close()
        forced.close()


def _ulps(x: float, n: int) -> float:
    """The float32 ``n`` steps from float32 ``x`` (towards larger magnitude for n > 0)."""
    bits = struct.unpack("<i", struct.pack("<f", x))[0]
    return float(struct.unpack("<f", struct.pack("<i", bits + n))[0])


def _nudged(rng: random.Random, base: list[float], count: int) -> list[list[float]]:
    """``count`` float32 vectors each a few float32 steps from ``base`` in a few dimensions:
    scores closer than pgvector's float32 arithmetic can tell apart."""
    out = []
    for _ in range(count):
        v = array("f", base).tolist()
        for i in rng.sample(range(len(v)), 3):
            v[i] = _ulps(v[i], rng.choice((-1, 1)) * rng.randint(1, 3))
        out.append(v)
    return out


def _copy_facts(url: str, schema: str, scope: str, vectors: dict[str, list[float]]) -> None:
    """Facts of ``scope`` with the given vectors (model "m", importance 0, one time), by COPY."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        with conn.cursor().copy(
            f'COPY "{schema}".facts (namespace, scope, key, data, version, importance, '
            "created_at, updated_at, length, embed_model) FROM STDIN"
        ) as copy:
            for key in vectors:
                copy.write_row(("ns", scope, key, "1", 1, 0.0, 1e9, 1e9, 0, "m"))
        with conn.cursor().copy(
            f'COPY "{schema}".fact_vectors (namespace, scope, key, field, model, dims, '
            "embedding) FROM STDIN"
        ) as copy:
            for key, vector in vectors.items():
                copy.write_row(("ns", scope, key, "$", "m", len(vector), vector))


def _exact(
    vectors: dict[str, list[float]], query: list[float], limit: int
) -> list[tuple[str, float]]:
    """The reference's answer: exact_vectors.order over every fact (importance and time
    equal: ties go to key order)."""
    keys = list(vectors)
    candidates = [Candidate(0.0, 1e9, k, [pack(vectors[k])]) for k in keys]
    return [(keys[i], score) for i, score in order(query, candidates, limit)]


def test_pgvector_scores_and_order_are_the_references_to_the_bit(
    pgvector_url: str, pgvector_schema: str
) -> None:
    """pgvector computes in float32: the server only screens (every fact within rounding of
    the limit-th best, ties included), and the store scores exactly. Near ties closer than
    float32 can tell, and exact ties (broken by key), come back as the reference ranks them."""
    store = PostgresStore(pgvector_url, schema=pgvector_schema, vector_search="pgvector")
    try:
        rng = random.Random(7)
        dims = 48
        query = _unit(rng, dims)
        vectors = {f"r{i:04d}": _unit(rng, dims) for i in range(600)}
        near = _nudged(rng, query, 40)
        vectors.update({f"n{i:02d}": v for i, v in enumerate(near)})
        vectors.update({f"t{i}": near[0] for i in range(3)})  # exact ties of n00
        _copy_facts(pgvector_url, pgvector_schema, "s", vectors)
        for limit in (1, 5, 10, 45, 700):
            found = store.search_fact_vectors("ns", "s", query, model="m", limit=limit)
            assert [(f.key, f.score) for f in found] == _exact(vectors, query, limit)
        assert _path(store, "s", query, 10) == ["exact"]
        # the candidates the server sends: the near ties, not the scope
        with store.pool.connection() as conn:
            (sent,) = conn.execute(
                store.q(
                    "SELECT count(*) FROM {s}.vector_candidates('ns', 's', 'm', %s::real[], "
                    "10, %s, %s, 100, %s, NULL, '{}', '{}', NULL, NULL, %s)"
                ),
                (query, time.time(), 2**31 - 2, store.pgvector_schema, slack(dims)),
            ).fetchone()
        assert 10 <= sent <= 43
        # within keys and a filter too
        keys = ["n03", "n01", "r0005", "t2", "missing"]
        found = store.search_fact_vectors("ns", "s", query, model="m", limit=3, keys=keys)
        chosen = {k: vectors[k] for k in keys if k in vectors}
        assert [(f.key, f.score) for f in found] == _exact(chosen, query, 3)
        where = FactFilter(until=2e9)
        found = store.search_fact_vectors("ns", "s", query, model="m", limit=4, where=where)
        assert [(f.key, f.score) for f in found] == _exact(vectors, query, 4)
        gone = FactFilter(until=1)
        assert store.search_fact_vectors("ns", "s", query, model="m", where=gone) == []
    finally:
        store.close()


def test_a_version_6_schema_with_pgvector_scores_exactly_once_opened(pgvector_url: str) -> None:
    """Vectors stored by the previous release: migration 7 adds the vector_candidates
    function (vector_search stays, for processes of that release), and searches score them
    exactly."""
    schema = _schema()
    try:
        _at_version(pgvector_url, schema, 6)
        vectors = {"a": normalized([1.0, 1.0, 0.0]), "b": normalized([1.0, 0.2, 0.1])}
        _copy_facts(pgvector_url, schema, "s", vectors)
        store = PostgresStore(pgvector_url, schema=schema, vector_search="pgvector")
        try:
            assert store.check() == SCHEMA_VERSION == 7
            query = normalized([1.0, 0.0, 0.0])
            found = store.search_fact_vectors("ns", "s", query, model="m")
            assert [(f.key, f.score) for f in found] == _exact(vectors, query, 10)
            with store.pool.connection() as conn:
                assert conn.execute(
                    "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                    "WHERE n.nspname = %s AND p.proname IN ('vector_search', 'vector_candidates')",
                    (schema,),
                ).fetchone() == (2,)
        finally:
            store.close()
    finally:
        _drop(pgvector_url, schema)


def test_the_hnsw_index_is_made_per_dims_on_first_write(
    pgvector_url: str, pgvector_schema: str
) -> None:
    plain = PostgresStore(pgvector_url, schema=pgvector_schema)  # exact searches: no index
    plain.put_fact(
        "ns", "s", "z", "1", text="", embedding=Embedding("m", 3, {"$": normalized([3, 2, 1])})
    )
    plain.close()
    with psycopg.connect(pgvector_url) as conn:
        assert not conn.execute(
            "SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE '%%USING hnsw%%'",
            (pgvector_schema,),
        ).fetchall()
    store = PostgresStore(pgvector_url, schema=pgvector_schema, hnsw_min_vectors=2000)
    try:
        store.put_fact(
            "ns", "s", "a", "1", text="", embedding=Embedding("m", 3, {"$": normalized([1, 2, 3])})
        )
        store.put_fact(
            "ns", "s", "b", "1", text="", embedding=Embedding("m", 2, {"$": normalized([1, 2])})
        )
        store.put_fact(
            "ns",
            "s",
            "c",
            "1",
            text="",
            embedding=Embedding("m", 2001, {"$": normalized([1.0] * 2001)}),
        )
        with psycopg.connect(pgvector_url) as conn:
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = %s "
                    "AND indexdef LIKE '%%USING hnsw%%' ORDER BY 1",
                    (pgvector_schema,),
                )
            ]
        assert names == ["fact_vectors_hnsw_2", "fact_vectors_hnsw_3"]  # HNSW stops at 2000
        found = store.search_fact_vectors("ns", "s", normalized([1.0] * 2001), model="m")
        assert [f.key for f in found] == ["c"]
    finally:
        store.close()


def test_without_pgvector_the_exact_fallback_is_used(postgres_url: str) -> None:
    schema = _schema()
    try:
        with psycopg.connect(postgres_url) as conn:
            has = conn.execute(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
        assert has is None, "this test wants the plain server, without pgvector"
        store = PostgresStore(postgres_url, schema=schema)
        assert store.pgvector_schema is None
        store.put_fact("ns", "s", "a", "1", text="", embedding=Embedding("m", 2, {"$": [1.0, 0.0]}))
        found = store.search_fact_vectors("ns", "s", [1.0, 0.0], model="m")
        assert [(f.key, f.score) for f in found] == [("a", 1.0)]
        store.close()
        with pytest.raises(StoreNotReady, match=r"CREATE EXTENSION vector|install pgvector"):
            PostgresStore(postgres_url, schema=schema, vector_search="pgvector")
    finally:
        _drop(postgres_url, schema)


def test_vector_search_option_is_checked(postgres_url: str) -> None:
    with pytest.raises(InvalidInput, match="vector_search"):
        PostgresStore(postgres_url, schema=_schema(), vector_search="fast")  # type: ignore[arg-type]


def test_exact_mode_ignores_pgvector(pgvector_url: str, pgvector_schema: str) -> None:
    store = PostgresStore(pgvector_url, schema=pgvector_schema, vector_search="exact")
    try:
        assert store.pgvector_schema is None
        store.put_fact("ns", "s", "a", "1", text="", embedding=Embedding("m", 2, {"$": [0.0, 1.0]}))
        assert [f.key for f in store.search_fact_vectors("ns", "s", [0.0, 1.0], model="m")] == ["a"]
    finally:
        store.close()


@pytest.mark.parametrize("server", ["postgres_url", "pgvector_url"])
def test_vectors_never_outlive_their_fact(request: pytest.FixtureRequest, server: str) -> None:
    """Rewritten without an embedding, deleted, or pruned: no row of fact_vectors is left."""
    url: str = request.getfixturevalue(server)
    schema = _schema()
    store = PostgresStore(url, schema=schema)
    try:
        e = Embedding("m", 2, {"a": [1.0, 0.0], "b": [0.0, 1.0]})
        for key in ("kept", "rewritten", "deleted", "expired"):
            store.put_fact("ns", "s", key, "1", text="", embedding=e)
        store.put_fact("ns", "s", "rewritten", "2", text="")
        store.put_fact(
            "ns", "s", "kept", "2", text="", embedding=Embedding("m", 2, {"a": [1.0, 0.0]})
        )
        store.delete_fact("ns", "s", "deleted")
        store.put_fact(
            "ns", "s", "expired", "1", text="", embedding=e, expires_at=time.time() + 0.2
        )
        time.sleep(0.3)
        assert [f.key for f in store.search_fact_vectors("ns", "s", [1.0, 0.0], model="m")] == [
            "kept"
        ]
        store.prune()
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                f'SELECT key, field FROM "{schema}".fact_vectors ORDER BY 1, 2'
            ).fetchall()
        assert rows == [("kept", "a")]
    finally:
        store.close()
        _drop(url, schema)


@pytest.mark.parametrize("server", ["postgres_url", "pgvector_url"])
def test_a_database_at_the_previous_schema_version_is_migrated(
    request: pytest.FixtureRequest, server: str
) -> None:
    """A schema made by the previous release (migrations 1 and 2) with facts in it: opening
    the store adds the vectors table; the old facts are there, to be embedded."""
    url: str = request.getfixturevalue(server)
    schema = _schema()
    try:
        with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
            conn.execute(f'CREATE SCHEMA "{schema}"')
            conn.execute(f'CREATE TABLE "{schema}".schema_version (version integer NOT NULL)')
            for version, statements in enumerate(MIGRATIONS[:2], 1):
                for statement in statements:
                    conn.execute(statement.replace("{s}", f'"{schema}"'))
                conn.execute(f'INSERT INTO "{schema}".schema_version VALUES ({version})')
            conn.execute(
                f"INSERT INTO \"{schema}\".facts VALUES ('ns', 's', 'old', '\"tea\"', 3, 0, "
                "1, 2, NULL, to_tsvector('simple', 'tea'))"
            )
        store = PostgresStore(url, schema=schema)
        try:
            assert store.check() == SCHEMA_VERSION == 7
            (old,) = store.facts_to_embed("ns", "s", "m")
            assert (old.key, old.value, old.version) == ("old", "tea", 3)
            assert store.set_fact_embedding(
                "ns", "s", "old", 3, Embedding("m", 2, {"$": [1.0, 0.0]})
            )
            assert store.facts_to_embed("ns", "s", "m") == []
            (found,) = store.search_fact_vectors("ns", "s", [1.0, 0.0], model="m")
            assert found.key == "old" and found.version == 3
            assert [h.key for h in store.match_terms("ns", "s", ["tea"]).hits] == ["old"]
        finally:
            store.close()
    finally:
        _drop(url, schema)


def test_native_async_vector_search_on_pgvector(pgvector_url: str, pgvector_schema: str) -> None:
    async def main() -> list[str]:
        pool = ConnectionPool(pgvector_url, min_size=1, kwargs={"autocommit": True}, open=True)
        apool = AsyncConnectionPool(
            pgvector_url, min_size=1, kwargs={"autocommit": True}, open=False
        )
        await apool.open()
        try:
            store = PostgresStore.from_pool(pool, async_pool=apool, schema=pgvector_schema)
            await store.aput_fact(
                "ns", "s", "x", "1", text="", embedding=Embedding("m", 2, {"$": [1.0, 0.0]})
            )
            await store.aput_fact("ns", "s", "y", "1", text="")
            (todo,) = await store.afacts_to_embed("ns", "s", "m")
            assert await store.aset_fact_embedding(
                "ns", "s", "y", todo.version, Embedding("m", 2, {"$": [0.0, 1.0]})
            )
            found = await store.asearch_fact_vectors("ns", "s", [0.6, 0.8], model="m")
            return [f.key for f in found]
        finally:
            await apool.close()
            pool.close()

    assert asyncio.run(main()) == ["y", "x"]


def test_the_pgbouncer_switch_turns_off_prepared_statements(
    pgbouncer_url: str, postgres_url: str
) -> None:
    schema = _schema()
    try:
        bounced = PostgresStore(pgbouncer_url, schema=schema)
        direct = PostgresStore(postgres_url, schema=schema)
        with bounced.pool.connection() as conn:
            assert conn.prepare_threshold is None
        with direct.pool.connection() as conn:
            assert conn.prepare_threshold == 5  # psycopg's default, where the server allows it
        assert bounced.pgbouncer and not direct.pgbouncer
        assert not PostgresStore(pgbouncer_url, schema=schema, pgbouncer=False).pgbouncer
        for bad in ("?pgbouncer=maybe", "?sslmode=disable&pgbouncer=2"):
            with pytest.raises(InvalidInput, match="pgbouncer"):
                PostgresStore(postgres_url + bad, schema=schema)
        bounced.close()
        direct.close()
    finally:
        _drop(postgres_url, schema)


def test_a_version_3_schema_upgrades_with_conversation_activity(postgres_url: str) -> None:
    """A schema of the previous release (migrations 1 to 3) with a conversation: opening the
    store records its first and newest message's times on the head row, and appends keep
    them up to date."""
    schema = _schema()
    try:
        with psycopg.connect(postgres_url, autocommit=True) as conn, conn.transaction():
            conn.execute(f'CREATE SCHEMA "{schema}"')
            conn.execute(f'CREATE TABLE "{schema}".schema_version (version integer NOT NULL)')
            for version, statements in enumerate(MIGRATIONS[:3], 1):
                for statement in statements:
                    conn.execute(statement.replace("{s}", f'"{schema}"'))
                conn.execute(f'INSERT INTO "{schema}".schema_version VALUES ({version})')
            conn.execute(
                f"SELECT * FROM \"{schema}\".append_batch('n:u:c', ARRAY['user'], "
                'ARRAY[\'{"role": "user"}\'], ARRAY[3], NULL, NULL, NULL, 100.0)'
            )
            conn.execute(
                f"SELECT * FROM \"{schema}\".append_batch('n:u:c', ARRAY['user'], "
                'ARRAY[\'{"role": "user"}\'], ARRAY[4], NULL, NULL, NULL, 250.0)'
            )
        store = PostgresStore(postgres_url, schema=schema)
        try:
            assert store.check() == SCHEMA_VERSION
            (info,) = store.list_conversations("n:")
            assert (info.user_id, info.messages, info.tokens) == ("u", 2, 7)
            assert (info.created_at, info.last_activity) == (100.0, 250.0)
            store.append("n:u:c", [Entry.of(Message.user("now"), 1, 1 << 20)])
            (info,) = store.list_conversations("n:u:")
            assert info.messages == 3 and info.created_at == 100.0 and info.last_activity > 250
            assert store.delete_idle_conversations("n:", 200.0) == 0
        finally:
            store.close()
    finally:
        _drop(postgres_url, schema)


def _at_version(url: str, schema: str, version: int) -> None:
    """A schema made by the release at ``version`` (its migrations), empty."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".schema_version (version integer NOT NULL)')
        for number, statements in enumerate(MIGRATIONS[:version], 1):
            for statement in statements:
                conn.execute(statement.replace("{s}", f'"{schema}"'))
            conn.execute(f'INSERT INTO "{schema}".schema_version VALUES ({number})')


def test_a_version_5_schema_indexes_its_facts_terms_when_opened(postgres_url: str) -> None:
    """Facts stored by the previous release (a tsvector, no postings): migration 6 drops the
    tsvector, and the stores opening the database (two at once here) give every fact its
    postings and length with the core's analyzer, once; match_terms then finds them as if
    they had been put now."""
    schema = _schema()
    values = {
        "tea": "I drink oolong tea, tea every morning",
        "café": "Le café de Caroline's researched dishes",
        "gone": "tea that expired",
        "empty": "",
    }
    try:
        _at_version(postgres_url, schema, 5)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for i, (key, value) in enumerate(values.items()):
                conn.execute(
                    f'INSERT INTO "{schema}".facts (namespace, scope, key, data, version, '
                    "importance, created_at, updated_at, expires_at, search) VALUES "
                    "('ns', 's', %s, %s, 2, 0.5, 1, %s, %s, to_tsvector('simple', %s))",
                    (key, json.dumps(value), 10.0 + i, 1.0 if key == "gone" else None, value),
                )
            conn.execute(
                f'INSERT INTO "{schema}".facts (namespace, scope, key, data, version, '
                "importance, created_at, updated_at, search) VALUES "
                "('ns', 'other', 'x', '\"tea\"', 1, 0, 1, 1, to_tsvector('simple', 'tea'))"
            )
        opened: list[PostgresStore] = []
        errors: list[BaseException] = []

        def open_one() -> None:
            try:
                opened.append(PostgresStore(postgres_url, schema=schema))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=open_one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        store = opened[0]
        try:
            assert store.check() == SCHEMA_VERSION
            terms = ["tea", "cafe", "research", "zebra"]
            matches = store.match_terms("ns", "s", terms)
            live = [k for k in values if k != "gone"]
            indexed = {k: index_text(k, values[k]).split() for k in live}
            lengths = {k: len(indexed[k]) for k in live}
            assert matches.documents == 3 and matches.total_length == sum(lengths.values())
            # the core's analyzer decides the counts (whether a key's words count, ...)
            assert {h.key: (h.length, h.counts) for h in matches.hits} == {
                k: (lengths[k], tuple(indexed[k].count(t) for t in terms)) for k in ("tea", "café")
            }
            assert {h.updated_at for h in matches.hits} == {10.0, 11.0}
            assert [h.key for h in store.match_terms("ns", "other", ["tea"]).hits] == ["x"]
            assert store._run(store._index_old_facts) == 0  # done once, not again
            with store.pool.connection() as conn:
                columns = conn.execute(
                    "SELECT column_name::text FROM information_schema.columns "
                    "WHERE table_schema = %s AND table_name = 'facts'",
                    (schema,),
                ).fetchall()
            assert ("search",) not in columns
            store.put_fact("ns", "s", "tea", '"coffee"', text=index_text("tea", "coffee"))
            assert [h.key for h in store.match_terms("ns", "s", ["tea"]).hits] == ["tea"]
            assert store.match_terms("ns", "s", ["oolong"]).hits == []
        finally:
            for s in opened:
                s.close()
    finally:
        _drop(postgres_url, schema)


def test_postings_follow_every_delete(postgres_url: str) -> None:
    """delete_fact, prune, erase, retention and restore leave no posting of a fact behind."""
    schema = _schema()
    store = PostgresStore(postgres_url, schema=schema)

    def postings() -> list[tuple[str, str]]:
        with store.pool.connection() as conn:
            rows = conn.execute(
                f'SELECT scope, key FROM "{schema}".fact_terms GROUP BY 1, 2 ORDER BY 1, 2'
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    try:
        put = functools.partial(store.put_fact, text="tea oolong")
        put("ns", "u1", "deleted", "1")
        put("ns", "u1", "expired", "1", expires_at=time.time() + 0.2)
        put("ns", "u1", "kept", "1")
        put("ns", "u2", "erased", "1")  # a user scope of u2 in namespace ns
        store.append("ns:u3:c", _entries("hi"))
        store.delete_fact("ns", "u1", "deleted")
        time.sleep(0.25)
        assert store.prune() == 1
        keys = user_keys("ns", "u2")
        store.put_fact(keys.working_namespace, "ns:u2:c", "w", "1", text="tea")
        store.put_fact("ns", keys.user_scope, "mine", "1", text="tea")
        store.erase("ns", "u2")
        wns = working_namespace_of("ns:u3:c")
        store.put_fact(wns, "ns:u3:c", "wm", "1", text="tea")
        assert store.delete_idle_conversations("ns:", time.time() + 1) == 1
        assert ("ns:u3:c", "wm") not in postings()
        restored = Fact("kept", 1, 5, 0.0, 1.0, 2.0)
        assert store.restore_fact("ns", "u1", restored)
        assert store.match_terms("ns", "u1", ["oolong"]).hits == []
        assert [h.key for h in store.match_terms("ns", "u1", ["kept"]).hits] == ["kept"]
        left = postings()
        assert ("u1", "kept") in left
        assert all(k not in ("deleted", "expired", "w", "mine", "wm") for _, k in left)
    finally:
        store.close()
        _drop(postgres_url, schema)


def test_keyword_candidates_come_from_the_scopes_posting_lists(postgres_url: str) -> None:
    """match_terms reads the searched scope's posting lists (the primary key of fact_terms),
    never every fact of the scope nor another scope's postings."""
    schema = _schema()
    store = PostgresStore(postgres_url, schema=schema)
    try:
        for i in range(300):
            store.put_fact("ns", f"s{i % 3}", f"k{i}", "1", text=f"common w{i}")
        with store.pool.connection() as conn:
            conn.execute(f'ANALYZE "{schema}".facts, "{schema}".fact_terms')
            conn.execute("SET enable_seqscan = off")  # as on a large table
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    store.q(
                        "EXPLAIN SELECT t.key, t.tf FROM unnest(%s::text[]) AS u(term) "
                        "JOIN {s}.fact_terms t ON t.namespace = 'ns' AND t.scope = 's1' "
                        "AND t.term = u.term"
                    ),
                    (["w4"],),
                )
            )
        assert "fact_terms_pkey" in plan
        found = store.match_terms("ns", "s1", ["w4", "common"])
        assert found.documents == 100
        assert {h.key: h.counts for h in found.hits if h.key == "k4"} == {"k4": (1, 1)}
        assert len(found.hits) == 100
    finally:
        store.close()
        _drop(postgres_url, schema)


def test_metadata_filters_compare_as_json(postgres_url: str) -> None:
    """Numbers by value (1, 1.0 and 1e0 alike), big and tiny floats exactly, a key absent
    never equal to null; metadata comes back exactly as given."""
    schema = _schema()
    store = PostgresStore(postgres_url, schema=schema)
    try:
        metas = {
            "a": '{"n": 1e0, "big": 1e300, "tiny": 1.5e-7}',
            "b": '{"n": 2, "big": 1e300}',
            "c": "{}",
        }
        for key, meta in metas.items():
            store.put_fact("ns", "s", key, "1", text="tea", metadata=meta)
        got = store.get_fact("ns", "s", "a")
        assert got is not None and got.metadata == {"n": 1.0, "big": 1e300, "tiny": 1.5e-7}
        assert isinstance(got.metadata["big"], float)

        def found(*pairs: tuple[str, Any]) -> set[str]:
            where = FactFilter(tuple(pairs))
            return {h.key for h in store.match_terms("ns", "s", ["tea"], where=where).hits}

        assert found(("n", 1)) == {"a"}
        assert found(("big", 1e300)) == {"a", "b"}
        assert found(("tiny", 1.5e-7)) == {"a"}
        assert found(("n", None)) == set()
        assert found(("missing", None)) == set()
    finally:
        store.close()
        _drop(postgres_url, schema)


def test_vector_search_within_keys_and_filters_through_hnsw(
    pgvector_url: str, pgvector_schema: str
) -> None:
    """With HNSW (hnsw_min_vectors=0), a filter is applied before the limit, on the index's
    answers, falling back to the exact search when too few pass; keys search exactly."""
    store = PostgresStore(pgvector_url, schema=pgvector_schema, hnsw_min_vectors=0)
    try:
        vectors = {"a": [1.0, 0.0], "b": [0.9, 0.1], "c": [0.5, 0.5], "d": [0.0, 1.0]}
        for key, vector in vectors.items():
            store.put_fact(
                "ns",
                "s",
                key,
                "1",
                text="",
                embedding=Embedding("m", 2, {"$": normalized(vector)}),
                metadata='{"kind": "note"}' if key in "ac" else None,
            )
        q = [1.0, 0.0]

        def keys(**kw: Any) -> list[str]:
            return [f.key for f in store.search_fact_vectors("ns", "s", q, model="m", **kw)]

        note = FactFilter((("kind", "note"),))
        assert _path(store, "s", q, 2) == ["hnsw"]
        assert keys(limit=1, where=note) == ["a"]
        assert keys(limit=10, where=note) == ["a", "c"]
        assert keys(limit=1, keys=["c", "d"]) == ["c"]
        assert keys(limit=10, keys=["b", "c"], where=note) == ["c"]
        (top,) = store.search_fact_vectors("ns", "s", q, model="m", limit=1, where=note)
        assert top.metadata == {"kind": "note"}
    finally:
        store.close()
