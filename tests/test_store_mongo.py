"""The MongoDB store passes the conformance kit, in-process and against a real server.

In-process, with no server: the sync path runs on mongomock and the native async path on
mongomock-motor, over the same data. mongomock is not thread-safe where a server is atomic
(its ``insert_one`` stores a document, then checks the unique indexes and rolls back, so a
concurrent reader can see a document that is then withdrawn); :class:`Locked` serializes its
calls, giving it a server's per-operation atomicity for the many-writer tests.

Against a real server: set ``MEMORY_ADAPTERS_MONGODB_URL`` (for example
``mongodb://localhost:27017/ma_test``) and the kit runs again on it, with the store's own
clients; every test gets a fresh database, dropped afterwards.
Without the variable those classes are not defined at all (nothing is skipped).
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import mongomock
import pymongo
import pytest
from memory_adapters_mongo import MongoStore, open_store
from memory_adapters_mongo import facts as facts_plans
from memory_adapters_mongo import log as mongo_log
from memory_adapters_mongo import terms as term_plans
from memory_adapters_mongo.clients import DEFAULT_DATABASE, database_from_url
from memory_adapters_mongo.ops import BATCHES, COLLECTIONS, FACTS, HEADS, Op, Sleep
from mongomock_motor import AsyncMongoMockClient
from pymongo import errors

from memory_adapters import (
    InvalidInput,
    Memory,
    Message,
    MissingExtra,
    StoreUnavailable,
    ValueTooLarge,
    hookimpl,
)
from memory_adapters.embedders import Embedding, normalized
from memory_adapters.facts import FactFilter
from memory_adapters.messages import Entry
from memory_adapters.ranking import TermHit, TermMatches
from memory_adapters.store import Store
from memory_adapters.testing import MultiProcessConformance, StoreConformance
from memory_adapters.testing.conformance import _entries, check_log, turn

SERVER_URL = os.environ.get("MEMORY_ADAPTERS_MONGODB_URL")
if not SERVER_URL:
    warnings.warn(
        "MEMORY_ADAPTERS_MONGODB_URL is not set: the MongoDB store is tested in-process only "
        "(mongomock); set it to also run the conformance kit against a real server",
        stacklevel=1,
    )


# -- mongomock with a server's per-operation atomicity ------------------------------------------


class Locked:
    """A proxy of a mongomock client, database or collection whose calls hold one lock."""

    def __init__(self, target: Any, lock: threading.RLock | None = None) -> None:
        self._target = target
        self._lock = lock or threading.RLock()

    def get_database(self, name: str, **options: Any) -> Locked:
        return Locked(self._target.get_database(name, **options), self._lock)

    def get_collection(self, name: str, **options: Any) -> Locked:
        return Locked(self._target.get_collection(name, **options), self._lock)

    def find(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with self._lock:
            return iter(list(self._target.find(*args, **kwargs)))

    def close(self) -> None:
        self._target.close()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._target, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return method(*args, **kwargs)

        return call


def mock_client() -> Any:
    """A fresh, empty mongomock client."""
    return mongomock.MongoClient()


def mock_store(**options: Any) -> MongoStore:
    """A store over a fresh mongomock client: sync calls only (async ones in threads)."""
    return MongoStore(client=Locked(mock_client()), database="ma_test", **options)


def mock_async_store(**options: Any) -> tuple[MongoStore, Any]:
    """A store whose async calls run natively on mongomock-motor, over the same data."""
    raw = mock_client()
    store = MongoStore(
        client=Locked(raw),
        async_client=AsyncMongoMockClient(mock_mongo_client=raw),
        database="ma_test",
        **options,
    )
    return store, raw


def only_op(step: Op | Sleep) -> Op:
    """The step, which must be a driver call."""
    assert isinstance(step, Op), step
    return step


def entries(*texts: str) -> list[Entry]:
    return [Entry.of(Message.user(t), 5, 1 << 20) for t in texts]


def dump(store: MongoStore) -> dict[str, list[str]]:
    """Every document of every collection of the store's database (the conformance kit's
    ``store_dump``)."""
    db = store._clients.sync().db
    names = set(db.list_collection_names())
    assert names <= set(COLLECTIONS), f"collections the dump does not know: {names}"
    return {name: sorted(repr(d) for d in db.get_collection(name).find()) for name in COLLECTIONS}


# -- the conformance kit, in-process ------------------------------------------------------------


class TestMongoStoreSync(StoreConformance):
    """The sync path on mongomock; async twins run it in worker threads."""

    @pytest.fixture
    def store(self) -> Iterator[MongoStore]:
        s = mock_store()
        yield s
        s.close()

    @pytest.fixture
    def store_dump(self, store: MongoStore) -> Callable[[], dict[str, list[str]]]:
        return lambda: dump(store)


class TestMongoStoreAsync(StoreConformance):
    """Sync calls on mongomock, async calls natively on mongomock-motor, one database."""

    @pytest.fixture
    def store(self) -> Iterator[MongoStore]:
        s, _ = mock_async_store()
        yield s
        s.close()

    @pytest.fixture
    def store_dump(self, store: MongoStore) -> Callable[[], dict[str, list[str]]]:
        return lambda: dump(store)


# -- the conformance kit, against a real server (only when one is configured) -----------------

if SERVER_URL:
    _server_url: str = SERVER_URL

    def _drop(name: str) -> None:
        admin: pymongo.MongoClient[dict[str, Any]]
        with pymongo.MongoClient(_server_url, serverSelectionTimeoutMS=5000) as admin:
            admin.drop_database(name)

    @pytest.fixture
    def server_database() -> Iterator[str]:
        """A fresh database on the server, dropped afterwards."""
        base = database_from_url(_server_url) or DEFAULT_DATABASE
        name = f"{base}_{uuid.uuid4().hex[:12]}"
        yield name
        _drop(name)

    class _ServerKit(StoreConformance, MultiProcessConformance):
        """The kit on the server, with the store's own clients (a MongoClient, and an
        AsyncMongoClient per event loop), shared by several processes too."""

        options: dict[str, Any] = {}

        @pytest.fixture
        def store(self, server_database: str) -> Iterator[MongoStore]:
            s = MongoStore(_server_url, database=server_database, **self.options)
            yield s
            s.close()

        @pytest.fixture
        def store_factory(self, server_database: str) -> Callable[[], Store]:
            return functools.partial(
                MongoStore, _server_url, database=server_database, **self.options
            )

        @pytest.fixture
        def store_dump(self, store: MongoStore) -> Callable[[], dict[str, list[str]]]:
            return lambda: dump(store)

    class TestMongoStoreServer(_ServerKit):
        """The kit, and the query plans, on the server."""

        def test_keyword_candidates_are_a_range_of_the_scopes_postings(
            self, store: MongoStore
        ) -> None:
            for i in range(300):
                store.put_fact("ns", f"s{i % 3}", f"k{i}", '"v"', text=f"tea w{i}")
            db: Any = pymongo.MongoClient(_server_url)[store.database]
            try:
                plan_of = only_op(next(term_plans.match("ns", "s1", ["w4"], None)))
                assert plan_of.method == "aggregate"
                stats = str(
                    db.command(
                        "explain",
                        {"aggregate": FACTS, "pipeline": plan_of.args[0], "cursor": {}},
                        verbosity="queryPlanner",
                    )
                )
                assert "IXSCAN" in stats and "COLLSCAN" not in stats, stats
                query = {
                    "scope": "s1",
                    "namespace": "ns",
                    "terms": {"$in": ["w4", "w7"]},
                    "expires_at": term_plans.live(time.time()),
                }
                plan = str(db[FACTS].find(query).explain()["queryPlanner"]["winningPlan"])
                assert "IXSCAN" in plan and "ma_facts_terms" in plan, plan
            finally:
                db.client.close()
            found = store.match_terms("ns", "s1", ["w4", "w7", "tea"])
            assert found.documents == 100 and {h.key for h in found.hits if h.counts[0]} == {"k4"}

        def test_window_reads_are_index_ranges(self, store: MongoStore) -> None:
            for i in range(50):
                store.append("plan", entries(f"m{i}a", f"m{i}b"))
            db: Any = pymongo.MongoClient(_server_url)[store.database]
            try:
                cursor = (
                    db[BATCHES]
                    .find({"conversation": "plan", "end_tokens": {"$gte": 400}})
                    .sort([("end_tokens", -1), ("first_seq", -1)])
                )
                plan = str(cursor.explain()["queryPlanner"]["winningPlan"])
                assert "IXSCAN" in plan and "ma_batches_tokens" in plan, plan
                assert "'SORT'" not in plan, plan
            finally:
                db.client.close()

    def test_server_with_the_applications_clients(server_database: str) -> None:
        """An application's AsyncMongoClient, and its Motor client where Motor is installed."""
        clients: list[Any] = [pymongo.AsyncMongoClient(_server_url)]
        try:
            from motor.motor_asyncio import AsyncIOMotorClient

            clients.append(AsyncIOMotorClient(_server_url))
        except ImportError:  # pragma: no cover - the dev extra installs Motor
            pass
        for n, client in enumerate(clients):
            store = MongoStore(client=client, database=server_database)
            conversation = f"c{n}"
            store.append(conversation, entries("sync"))

            async def go(
                store: MongoStore = store, conversation: str = conversation, client: Any = client
            ) -> list[str]:
                await store.aappend(conversation, entries("async"))
                texts = [r.message.text for r in await store.aread(conversation)]
                closed = client.close()  # on the loop the client ran on
                if asyncio.iscoroutine(closed):
                    await closed
                return texts

            assert asyncio.run(go()) == ["sync", "async"]
            store.close()


# -- the plugin: URL, entry point, options, missing extra -------------------------------------


def test_memory_resolves_mongodb_urls_through_the_entry_point() -> None:
    mem = Memory(
        "mongodb://db.example:27017/ma_app",
        store_options={"client": Locked(mock_client())},
    )
    assert isinstance(mem.store, MongoStore) and mem.store.database == "ma_app"
    assert {"mongodb", "mongodb+srv"} <= set(mem.schemes)
    with mem.session(user_id="alice", conversation_id="c"):
        mem.conversation.append([Message.user("My tea is oolong"), Message.assistant("Noted")])
        mem.facts.put("tea", "oolong")
        assert [m.text for m in mem.conversation.messages()] == ["My tea is oolong", "Noted"]
    srv = Memory("mongodb+srv://cluster.example/other", store_options={"client": mock_client()})
    assert isinstance(srv.store, MongoStore) and srv.store.database == "other"
    default = open_store("mongodb://localhost", client=mock_client())
    assert default.database == "memory_adapters"


def test_missing_pymongo_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pymongo", None)
    with pytest.raises(MissingExtra, match=r"memory-adapters\[mongo\]"):
        MongoStore("mongodb://localhost/x")


def test_bad_options_are_refused() -> None:
    with pytest.raises(InvalidInput):
        MongoStore()
    with pytest.raises(InvalidInput):
        mock_store(text_search="fuzzy")
    with pytest.raises(InvalidInput):
        MongoStore(client=mock_client(), timeout=1)
    with pytest.raises(InvalidInput):
        MongoStore(client=object())
    for mode in ("auto", "text", "words"):  # obsolete: accepted and ignored
        assert mock_store(text_search=mode).uses_text_index is False


def test_unreachable_server_fails_fast_and_clearly() -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="unreachable") as info:
        Memory("mongodb://127.0.0.1:1/x")
    elapsed = time.monotonic() - started
    assert elapsed < 10, f"took {elapsed:.1f} s"
    assert isinstance(info.value, ConnectionError)
    assert isinstance(info.value.__cause__, errors.ServerSelectionTimeoutError)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        MongoStore("mongodb://127.0.0.1:1/x", timeout=0.3)
    assert time.monotonic() - started < 3


def test_indexes_are_created_once_and_idempotently() -> None:
    raw = mock_client()
    first = MongoStore(client=raw, database="idx")
    again = MongoStore(client=raw, database="idx")  # a second connect changes nothing
    assert first.uses_text_index is False and again.uses_text_index is False  # obsolete
    db = raw["idx"]
    batches = db[BATCHES].index_information()
    assert {"ma_batches_seq", "ma_batches_tokens", "ma_batches_idempotency"} <= set(batches)
    assert batches["ma_batches_idempotency"]["partialFilterExpression"] == {
        "idempotency_key": {"$exists": True}
    }
    fact_indexes = db[FACTS].index_information()
    assert fact_indexes["ma_facts_key"]["unique"] is True
    assert fact_indexes["ma_facts_ttl"]["expireAfterSeconds"] == 60
    assert {"ma_facts_terms", "ma_facts_stats", "ma_facts_legacy"} <= set(fact_indexes)
    assert fact_indexes["ma_facts_terms"]["key"] == [("scope", 1), ("namespace", 1), ("terms", 1)]
    assert fact_indexes["ma_facts_legacy"]["partialFilterExpression"] == {"text": {"$exists": True}}
    assert "ma_facts_words" not in fact_indexes


# -- building the store from an application's client ------------------------------------------


def test_store_over_an_existing_sync_client() -> None:
    client = mock_client()
    store = MongoStore(client=client, database="app")
    mem = Memory(store=store)

    async def go() -> list[str]:
        async with mem.session(conversation_id="c"):
            await mem.conversation.aappend([Message.user("async, in a thread")])
            return [r.message.text for r in await mem.conversation.aread()]

    with mem.session(conversation_id="c"):
        mem.conversation.append([Message.user("sync")])
    assert asyncio.run(go()) == ["sync", "async, in a thread"]
    store.close()
    assert client["app"][BATCHES].count_documents({}) == 2  # the client was not closed


def test_store_over_a_motor_client_alone() -> None:
    """A Motor-style client (mongomock-motor's): async calls use it, sync calls use the
    pymongo-style client it wraps."""
    motor: Any = AsyncMongoMockClient()
    store = MongoStore(client=motor, database="app")
    mem = Memory(store=store)
    with mem.session(user_id="u", conversation_id="c"):
        mem.conversation.append(turn("sync"))
        mem.facts.put("tea", "oolong")

    async def go() -> tuple[list[str], Any]:
        async with mem.session(user_id="u", conversation_id="c"):
            await mem.conversation.aappend(turn("async"))
            fact = await mem.facts.aget("tea")
            return [r.message.text for r in await mem.conversation.aread()], fact

    texts, fact = asyncio.run(go())
    assert texts[-1] == "answer async" and texts[3] == "answer sync" and len(texts) == 8
    assert fact is not None and fact.value == "oolong"


def test_store_over_a_pymongo_async_client_alone() -> None:
    """A pymongo AsyncMongoClient: nothing happens until first use; sync calls open a
    MongoClient with the same settings (owned, closed with the store); async calls use the
    application's client on its loop. (No server here: both fail fast and clearly.)"""
    app_client: Any = pymongo.AsyncMongoClient(
        "mongodb://127.0.0.1:1/x", serverSelectionTimeoutMS=200, connectTimeoutMS=200
    )
    store = MongoStore(client=app_client, database="app")
    assert store.database == "app"
    with pytest.raises(StoreUnavailable, match="unreachable"):
        store.last_seq("c")
    derived = store._clients._sync_owner
    assert isinstance(derived, pymongo.MongoClient)
    assert derived.options.server_selection_timeout == 0.2

    async def go() -> None:
        with pytest.raises(StoreUnavailable, match="unreachable"):
            await store.alast_seq("c")
        assert app_client._loop is asyncio.get_running_loop()
        await app_client.close()

    asyncio.run(go())
    store.close()
    assert store._clients._sync_owner is None


def test_async_calls_are_native_on_the_async_clients_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    store, _ = mock_async_store()
    offloaded: list[str] = []
    real_to_thread = asyncio.to_thread

    async def spy(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        offloaded.append(getattr(fn, "__name__", repr(fn)))
        return await real_to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", spy)

    async def go() -> int:
        await store.aappend("c", entries("a", "b"))
        await store.aput_fact("ns", "s", "k", '"v"', text="v")
        assert [h.key for h in (await store.amatch_terms("ns", "s", ["v"])).hits] == ["k"]
        assert [f.key for f in await store.aget_facts("ns", "s", ["k"])] == ["k"]
        assert [r.seq for r in await store.atail("c", max_messages=2)][-1] % 2 == 0
        return await store.alast_seq("c")

    assert asyncio.run(go()) == 2
    assert offloaded == []
    # another loop: the async client stays with its first loop; this one runs in threads
    assert asyncio.run(go()) == 4
    assert offloaded and set(offloaded) == {"_run"}


def test_a_store_built_from_a_url_opens_an_async_client_per_loop() -> None:
    """Owned async clients: one per event loop, each closed when its loop shuts down."""
    raw = mock_client()
    store = MongoStore(client=Locked(raw), database="loops")
    opened: list[ClosingSpy] = []

    def open_async() -> ClosingSpy:
        spy = ClosingSpy(AsyncMongoMockClient(mock_mongo_client=raw))
        opened.append(spy)
        return spy

    store._clients._new_async = open_async  # what a URL-built store does with AsyncMongoClient

    async def go(text: str) -> int:
        await store.aappend("c", entries(text))
        await store.aappend("c", entries(text + "!"))
        return await store.alast_seq("c")

    assert asyncio.run(go("one")) == 2
    assert len(opened) == 1 and opened[0].closed  # closed by asyncio.run's shutdown
    assert asyncio.run(go("two")) == 4
    assert len(opened) == 2 and opened[1].closed

    async def close_inside() -> None:
        await store.aappend("c", entries("three"))
        await store.aclose()

    asyncio.run(close_inside())
    assert len(opened) == 3 and opened[2].closed
    with pytest.raises(StoreUnavailable, match="closed"):
        store.last_seq("c")


class ClosingSpy:
    """An owned async client that records being closed."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.closed = False

    def get_database(self, name: str, **options: Any) -> Any:
        return self.client.get_database(name, **options)

    async def close(self) -> None:
        self.closed = True


# -- hostile input ----------------------------------------------------------------------------

OPERATOR_SHAPED = ['{"$gt": ""}', "$gt", "$where", "a.b", "$set.x", "this.x == this.x"]


def test_operator_shaped_ids_are_stored_exactly_and_match_nobody() -> None:
    store = mock_store()
    mem = Memory(store=store)
    with mem.session(user_id="victim", conversation_id="private"):
        mem.conversation.append([Message.user("the victim's secret")])
        mem.facts.put("secret", "the victim's secret")
    for ident in OPERATOR_SHAPED:
        with mem.session(user_id=ident, conversation_id=ident):
            assert mem.conversation.read() == []
            assert mem.facts.all() == [] and mem.facts.search("secret victim") == []
            assert mem.facts.get(ident) is None
            mem.conversation.append([Message.user(ident)])
            mem.facts.put(ident, {ident: ident})
    for ident in OPERATOR_SHAPED:
        with mem.session(user_id=ident, conversation_id=ident):
            assert [r.message.text for r in mem.conversation.read()] == [ident]
            got = mem.facts.get(ident)
            assert got is not None and got.value == {ident: ident} and got.version == 1
    with mem.session(user_id="victim", conversation_id="private"):
        assert [r.message.text for r in mem.conversation.read()] == ["the victim's secret"]
        assert [f.key for f in mem.facts.all()] == ["secret"]


def test_values_that_are_not_strings_never_reach_a_query() -> None:
    store = mock_store()
    store.append("c", entries("x"))
    store.put_fact("ns", "s", "k", '"v"', text="v")
    hostile: list[Any] = [{"$gt": ""}, {"$ne": None}, ["c"], 1, None]
    for value in hostile:
        with pytest.raises(InvalidInput):
            store.read(value)
        with pytest.raises(InvalidInput):
            store.last_seq(value)
        with pytest.raises(InvalidInput):
            store.get_fact("ns", value, "k")
        with pytest.raises(InvalidInput):
            store.get_fact("ns", "s", value)
        with pytest.raises(InvalidInput):
            store.match_terms("ns", "s", [value])
        with pytest.raises(InvalidInput):
            store.get_facts("ns", "s", [value])
        with pytest.raises(InvalidInput):
            store.search_fact_vectors("ns", "s", [1.0], model="m", keys=[value])
        with pytest.raises(InvalidInput):
            key: Any = value if value is not None else 5
            store.append("c", entries("y"), idempotency_key=key)
    with pytest.raises(InvalidInput):
        store.read("c", start_seq={"$gt": 0})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        store.put_fact("ns", "s", "k", {"$set": 1}, text="v")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        store.tail("c", max_messages=True)
    assert [r.message.text for r in store.read("c")] == ["x"]
    fact = store.get_fact("ns", "s", "k")
    assert fact is not None and fact.version == 1


def test_values_are_stored_as_json_text_never_as_documents() -> None:
    raw = mock_client()
    mem = Memory(store=MongoStore(client=raw, database="raw"))
    value = {"$where": "sleep(1000)", "a.b": {"$gt": ""}, "$set": {"x.y": 1}}
    with mem.session(user_id="u", conversation_id="c"):
        mem.facts.put("k", value)
        mem.conversation.append([Message.assistant("", [])], run_id="$where")
        mem.conversation.append([Message.tool()], idempotency_key='{"$gt": ""}')
        mem.working.set("$gt", value)
        assert mem.facts.get("k").value == value  # type: ignore[union-attr]
        assert mem.working.get("$gt") == value
    db = raw["raw"]
    for doc in db[FACTS].find():
        assert isinstance(doc["data"], str)
    fact = db[FACTS].find_one({"key": "k"})
    assert (
        fact is not None
        and fact["data"] == '{"$where":"sleep(1000)","a.b":{"$gt":""},"$set":{"x.y":1}}'
    )
    for doc in db[BATCHES].find():
        assert all(isinstance(m["data"], str) for m in doc["messages"])
    assert db[BATCHES].find_one({"idempotency_key": '{"$gt": ""}'}) is not None


# -- size limits and errors ---------------------------------------------------------------------


class CheapCounter:
    """Counts a character per token: tiktoken on megabytes of text is slow."""

    @hookimpl
    def count_tokens(self, texts: list[str], model: str | None) -> list[int]:
        return [len(t) for t in texts]


def test_an_oversized_turn_is_refused_with_nothing_stored() -> None:
    store, _ = mock_async_store()
    mem = Memory(store=store, max_turn_bytes=40 << 20, plugins=[CheapCounter()])
    huge = "x" * (17 << 20)  # over MongoDB's 16 MiB document limit, under the turn limit
    with mem.session(conversation_id="big"):
        mem.conversation.append([Message.user("before")])
        with pytest.raises(ValueTooLarge, match="16777216"):
            mem.conversation.append([Message.user(huge)])
        with pytest.raises(ValueTooLarge):  # one message under the limit, the batch over it
            mem.conversation.append([Message.user("y" * (9 << 20)), Message.user("z" * (9 << 20))])

    async def go() -> None:
        async with mem.session(conversation_id="big"):
            with pytest.raises(ValueTooLarge):
                await mem.conversation.aappend([Message.user(huge)])

    asyncio.run(go())
    with mem.session(conversation_id="big"):
        assert [r.message.text for r in mem.conversation.read()] == ["before"]
        assert mem.conversation.last_seq() == 1
        assert mem.conversation.append([Message.user("after")]).first_seq == 2


def test_oversized_facts_and_summaries_are_refused_before_they_are_sent() -> None:
    store = mock_store(max_document_bytes=64 << 10)
    with pytest.raises(ValueTooLarge):
        store.put_fact("ns", "s", "k", '"' + "x" * (70 << 10) + '"', text="x")
    assert store.get_fact("ns", "s", "k") is None
    store.put_fact("ns", "s", "k", '"small"', text="small")
    from memory_adapters import Summary

    with pytest.raises(ValueTooLarge):
        store.put_summary("c", Summary(1, 2, "s" * (70 << 10), 10))
    assert store.latest_summary("c") is None


class Failing(Locked):
    """A collection proxy whose chosen method raises a chosen error."""

    def __init__(self, target: Any, lock: threading.RLock, fail: dict[str, BaseException]):
        super().__init__(target, lock)
        self._fail = fail

    def get_database(self, name: str, **options: Any) -> Locked:
        return Failing(self._target.get_database(name, **options), self._lock, self._fail)

    def get_collection(self, name: str, **options: Any) -> Locked:
        return Failing(self._target.get_collection(name, **options), self._lock, self._fail)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        error = self._fail.get(name)
        if error is not None:

            def fail(*args: Any, **kwargs: Any) -> Any:
                raise error

            return fail
        return super().__getattr__(name)


def test_write_errors_are_raised_never_swallowed() -> None:
    raw = mock_client()
    fail: dict[str, BaseException] = {}
    store = MongoStore(client=Failing(raw, threading.RLock(), fail), database="w")
    store.append("c", entries("kept"))
    fail["insert_one"] = errors.WriteError("Document failed validation", 121)
    with pytest.raises(errors.WriteError, match="validation"):
        store.append("c", entries("refused"))
    with pytest.raises(errors.WriteError):
        store.put_fact("ns", "s", "new", '"v"', text="v")
    fail.clear()
    store.put_fact("ns", "s", "k", '"v"', text="v")
    fail["update_one"] = errors.WriteConcernError("waiting for replication timed out", 64)
    with pytest.raises(errors.WriteConcernError):
        store.put_fact("ns", "s", "k", '"w"', text="w")
    fail.clear()
    fail["insert_one"] = errors.AutoReconnect("connection reset")
    with pytest.raises(StoreUnavailable, match="unreachable"):
        store.append("c", entries("lost"))
    fail.clear()
    assert [r.message.text for r in store.read("c")] == ["kept"]
    assert store.append("c", entries("next")).first_seq == 2


# -- the log without transactions ----------------------------------------------------------------


def test_a_lagging_or_missing_head_never_causes_a_gap() -> None:
    """The head is a hint: a writer that died between its insert and the head update (or a
    head that is gone) costs a retry, never a gap or an overlap."""
    raw = mock_client()
    store = MongoStore(client=raw, database="heads")
    store.append("c", entries("a", "b"))
    store.append("c", entries("c"))
    raw["heads"][HEADS].update_one({"_id": "c"}, {"$set": {"last_seq": 2, "total_tokens": 10}})
    assert store.append("c", entries("d"), expected_last_seq=3).first_seq == 4
    raw["heads"][HEADS].delete_one({"_id": "c"})
    assert store.append("c", entries("e", "f")).first_seq == 5
    assert [r.seq for r in store.read("c")] == [1, 2, 3, 4, 5, 6]
    assert [r.batch for r in store.read("c")] == [1, 1, 3, 4, 5, 5]
    head = raw["heads"][HEADS].find_one({"_id": "c"})
    assert head is not None and head["last_seq"] == 6


def test_a_stale_head_update_cannot_outlive_a_deletion() -> None:
    raw = mock_client()
    store = MongoStore(client=raw, database="epoch")
    store.append("c", entries("a", "b", "c"))
    assert store.delete_conversation("c") == 3
    # a writer that raced with the deletion tries to move the old epoch's head forward
    plan = mongo_log._advance_head("c", 0, True, {"last_seq": 9, "end_tokens": 90})
    op = only_op(next(plan))
    raw["epoch"][HEADS].update_one(*op.args, **op.kwargs)
    assert store.append("c", entries("fresh")).first_seq == 1
    assert [r.seq for r in store.read("c")] == [1]


def test_many_stores_share_one_database_without_loss() -> None:
    """Several stores (as several processes would) append to one conversation at once."""
    raw = mock_client()
    lock = threading.RLock()
    stores = [MongoStore(client=Locked(raw, lock), database="shared") for _ in range(4)]
    writers, batches, size = 4, 15, 3
    errors_seen: list[BaseException] = []

    def write(w: int) -> None:
        try:
            for b in range(batches):
                stores[w].append("shared", _entries(f"w{w}b{b}", size))
        except BaseException as exc:  # pragma: no cover - reported below
            errors_seen.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors_seen
    check_log(stores[0].read("shared"), writers, batches, size)


def test_window_queries_are_bounded_index_ranges() -> None:
    """The tail reads the newest batch, then one range on (conversation, end_tokens,
    first_seq), sorted by the index; read() with a limit bounds its range by it."""
    plan = mongo_log.tail("c", 100, 10)
    top = next(plan)
    assert top == Op(
        BATCHES,
        "find_one",
        ({"conversation": "c"},),
        {"sort": [("first_seq", -1)], "projection": mongo_log._TOP},
    )
    window = only_op(plan.send({"first_seq": 40, "last_seq": 42, "end_tokens": 1000}))
    assert window.args == (
        {"conversation": "c", "first_seq": {"$lte": 40}, "end_tokens": {"$gte": 900}},
    )
    assert window.kwargs == {"sort": [("end_tokens", -1), ("first_seq", -1)], "limit": 10}
    head = only_op(next(mongo_log.read("c", 1, None, 4)))
    assert head.args == ({"conversation": "c", "first_seq": {"$gte": 1, "$lte": 4}},)


def test_keyword_candidates_are_one_query_on_the_scopes_postings() -> None:
    """match_terms: one aggregation counting the scope (scoped by equality, expired facts
    left out), then one query on the postings (terms ``$in``), projecting only the counts
    of the terms asked for, with the filter in the query."""
    where = FactFilter((("kind", "note"),), since=5.0)
    plan = term_plans.match("ns", "alice", ["oolong", "tea", "$gt", "a.b"], where)
    stats = only_op(next(plan))
    assert stats.method == "aggregate"
    match = stats.args[0][0]["$match"]
    assert (match["scope"], match["namespace"], set(match["expires_at"])) == (
        "alice",
        "ns",
        {"$not"},
    )
    op = only_op(plan.send([{"_id": None, "n": 7, "total": 40}]))
    query, options = op.args[0], op.kwargs
    assert query["scope"] == "alice" and query["namespace"] == "ns"
    assert query["terms"] == {"$in": ["oolong", "tea", "$gt", "a.b"]}
    assert query["meta.kind"] == "s:note" and query["updated_at"] == {"$gte": 5.0}
    tf = sorted(k for k in options["projection"] if k.startswith("tf."))
    assert tf == ["tf._246774", "tf._612e62", "tf.oolong", "tf.tea"]  # odd terms as hex names
    row = {"key": "k", "length": 3, "importance": 0.5, "updated_at": 9.0}
    with pytest.raises(StopIteration) as done:
        plan.send([{**row, "tf": {"tea": 2, "_612e62": 1}}])
    assert done.value.value == TermMatches(7, 40, [TermHit("k", 3, (0, 2, 0, 1), 0.5, 9.0)])


def test_expired_facts_are_hidden_before_the_ttl_monitor_runs() -> None:
    raw = mock_client()
    store = MongoStore(client=raw, database="ttl")
    store.put_fact("ns", "s", "soon", '"x"', text="soon", expires_at=time.time() + 0.2)
    doc = raw["ttl"][FACTS].find_one({"key": "soon"})
    assert doc is not None and doc["expires"] is not None
    time.sleep(0.3)
    assert raw["ttl"][FACTS].count_documents({"key": "soon"}) == 1  # still there
    assert store.get_fact("ns", "s", "soon") is None
    assert store.match_terms("ns", "s", ["soon"]).hits == []
    assert store.get_facts("ns", "s", ["soon"]) == []
    assert store.list_facts("ns", "s") == []
    assert store.prune() == 1
    assert raw["ttl"][FACTS].count_documents({}) == 0


# -- semantic recall: fact vectors ------------------------------------------------------------


def _unit(*values: float) -> list[float]:
    return normalized(values)


def _emb(model: str, **fields: list[float]) -> Embedding:
    dims = len(next(iter(fields.values()))) if fields else 0
    return Embedding(model, dims, fields)


def _put(store: Store, key: str, embedding: Embedding | None, scope: str = "u", **kw: Any) -> None:
    store.put_fact("ns", scope, key, f'"{key}"', text=key, embedding=embedding, **kw)


def _vkeys(store: Store, vector: list[float], model: str = "m", scope: str = "u") -> list[str]:
    return [f.key for f in store.search_fact_vectors("ns", scope, vector, model=model)]


def test_vectors_layout_fields_models_and_scopes() -> None:
    raw = mock_client()
    store = MongoStore(client=raw, database="v")
    _put(store, "two", _emb("m", **{"a.b": _unit(0, 1, 0), "$": _unit(1, 0, 0)}))
    _put(store, "one", _emb("m", **{"$": _unit(1, 0.5, 0)}))
    _put(store, "other", _emb("m2", **{"$": _unit(1, 0, 0)}))
    _put(store, "flat", _emb("m", x=_unit(1, 0)))
    doc = raw["v"][FACTS].find_one({"key": "two"})
    assert doc is not None
    assert (doc["embed_model"], doc["dims"], doc["vector_field"]) == ("m", 3, "$")
    assert bytes(doc["vector"])[:2] == b"\x27\x00" and len(bytes(doc["vector"])) == 14
    assert [v["field"] for v in doc["vectors"]] == ["a.b"]
    assert _vkeys(store, _unit(0, 1, 0)) == ["two", "one"]  # by its best field
    assert _vkeys(store, _unit(1, 0)) == ["flat"]
    assert _vkeys(store, _unit(1, 0, 0), model="m2") == ["other"]
    for i in range(40):
        _put(store, f"k{i}", _emb("m", **{"$": _unit(1, i, 0)}), scope=f"s{i}")
    for i in range(40):
        assert _vkeys(store, _unit(1, 0, 0), scope=f"s{i}") == [f"k{i}"]
    _put(store, "two", None)
    doc = raw["v"][FACTS].find_one({"key": "two"})
    assert doc is not None and not {"embed_model", "dims", "vector", "vectors"} & set(doc)
    assert _vkeys(store, _unit(1, 0, 0)) == ["one"]
    assert [f.key for f in store.facts_to_embed("ns", "u", "m")] == ["other", "two"]


def test_set_fact_embedding_and_expiry() -> None:
    store, _ = mock_async_store()
    _put(store, "k", None)
    _put(store, "k", None)
    before = store.get_fact("ns", "u", "k")
    assert before is not None and before.version == 2
    assert not store.set_fact_embedding("ns", "u", "k", 1, _emb("m", **{"$": _unit(1, 0)}))
    assert store.set_fact_embedding("ns", "u", "k", 2, _emb("m", **{"$": _unit(1, 0)}))
    assert store.get_fact("ns", "u", "k") == before
    _put(store, "soon", _emb("m", **{"$": _unit(1, 0)}), expires_at=time.time() + 0.2)
    assert _vkeys(store, _unit(1, 0)) == ["soon", "k"]
    time.sleep(0.3)
    assert asyncio.run(_asearch(store)) == ["k"]
    assert store.prune() == 1
    with pytest.raises(InvalidInput):
        store.put_fact("ns", "u", "x", '"x"', text="x", embedding={"m": [1.0]})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        _put(store, "x", Embedding("m", 2, {"$": [1.0, "0"]}))  # type: ignore[list-item]


async def _asearch(store: MongoStore) -> list[str]:
    found = await store.asearch_fact_vectors("ns", "u", _unit(1, 0), model="m")
    return [f.key for f in found]


def test_exact_vector_search_is_the_default_and_numpy_free_ranks_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import random

    from memory_adapters import exact_vectors

    store = mock_store()
    assert store.vector_search == "exact"
    rnd = random.Random(3)
    for i in range(150):
        fields = {f"f{j}": _unit(*(rnd.gauss(0, 1) for _ in range(8))) for j in range(i % 2 + 1)}
        _put(store, f"k{i:03d}", _emb("m", **fields))
    query = _unit(*(rnd.gauss(0, 1) for _ in range(8)))
    with_numpy = [(f.key, f.score) for f in store.search_fact_vectors("ns", "u", query, model="m")]
    monkeypatch.setattr(exact_vectors, "_numpy", lambda: None)
    assert [(f.key, f.score) for f in store.search_fact_vectors("ns", "u", query, model="m")] == (
        with_numpy
    )


def test_atlas_vector_search_pipeline() -> None:
    """What ``vector_search="atlas"`` sends (mongomock cannot run ``$vectorSearch``)."""
    store = mock_store(vector_search="atlas", atlas_index="vec", atlas_num_candidates=300)
    assert store.vector_search == "atlas"
    plan = search_vectors_plan(store, [0.6, 0.8])
    op = only_op(next(plan))
    assert op.method == "aggregate"
    stage = op.args[0][0]["$vectorSearch"]
    assert stage == {
        "index": "vec",
        "path": "vector",
        "queryVector": [0.6, 0.8],
        "numCandidates": 300,
        "limit": 5,
        "filter": {
            "scope": {"$eq": "u"},
            "namespace": {"$eq": "ns"},
            "embed_model": {"$eq": "m"},
            "dims": {"$eq": 2},
        },
    }
    assert set(op.args[0][1]["$match"]["expires_at"]) == {"$not"}
    assert op.args[0][2]["$project"]["score"] == {"$meta": "vectorSearchScore"}
    row = {"data": '"v"', "version": 1, "created_at": 1.0, "expires_at": None}
    with pytest.raises(StopIteration) as done:
        plan.send(
            [
                {**row, "key": "b", "importance": 0.0, "updated_at": 1.0, "score": 0.9},
                {**row, "key": "a", "importance": 1.0, "updated_at": 1.0, "score": 0.9},
                {**row, "key": "c", "importance": 0.0, "updated_at": 1.0, "score": 1.0},
            ]
        )
    found = done.value.value
    assert [(f.key, f.score) for f in found] == [("c", 1.0), ("a", 0.8), ("b", 0.8)]
    default = facts_plans.atlas_pipeline(
        "ns", "u", [1.0], "m", 10, index="i", num_candidates=None, now=0.0
    )
    assert default[0]["$vectorSearch"]["numCandidates"] == 200
    with pytest.raises(InvalidInput):
        mock_store(vector_search="ann")


def search_vectors_plan(store: MongoStore, vector: list[float]) -> Any:
    return store._search_vectors("ns", "u", vector, "m", 5)()


def test_match_terms_answers_as_the_in_memory_store_does() -> None:
    """The same facts, the same terms: the same statistics and hits (so the same ranking)."""
    from memory_adapters_inmemory import InMemoryStore

    texts = {
        "rare": "the zebra",
        "common": "tea tea tea tea tea tea tea tea",
        "both": "tea and zebra in a very long sentence about many other things entirely",
        "short_tea": "tea",
        "none": "coffee",
        "odd": "north_east value-0 $gt a.b tea",
    }
    stores: list[Store] = [mock_store(), InMemoryStore()]
    answers = []
    for store in stores:
        for key, text in texts.items():
            store.put_fact("ns", "u", key, '"x"', text=text)
        store.put_fact("ns", "v", "other", '"x"', text="tea zebra")
        found = store.match_terms("ns", "u", ["tea", "zebra", "$gt", "a.b", "missing"])
        hits = sorted((h.key, h.length, h.counts, h.importance) for h in found.hits)
        answers.append((found.documents, found.total_length, hits))
    assert answers[0] == answers[1]
    assert answers[0][0] == 6 and len(answers[0][2]) == 5


def test_heads_written_before_activity_was_recorded_are_listed_and_retained() -> None:
    """A head of an earlier version (no created_at / last_activity): listed with its batches'
    times, after the others; retention judges it by its newest batch."""
    raw = mock_client()
    store = MongoStore(client=raw, database="legacy")
    store.append("n:u:old", entries("a"))
    store.append("n:u:old", entries("b"))
    raw["legacy"][HEADS].update_one(
        {"_id": "n:u:old"}, {"$unset": {"created_at": "", "last_activity": ""}}
    )
    store.append("n:u:old2", entries("x"))
    raw["legacy"][HEADS].update_one(
        {"_id": "n:u:old2"}, {"$unset": {"created_at": "", "last_activity": ""}}
    )
    store.append("n:u:new", entries("c"))
    batches = sorted(
        d["created_at"] for d in raw["legacy"][BATCHES].find({"conversation": "n:u:old"})
    )
    listed = store.list_conversations("n:")
    assert [c.conversation_id for c in listed] == ["new", "old2", "old"]
    assert (listed[2].created_at, listed[2].last_activity) == (batches[0], batches[-1])
    pages, cursor = [], None
    while page := store.list_conversations("n:", limit=1, before=cursor):
        pages += page
        cursor = page[-1].cursor
    assert pages == listed
    assert store.delete_idle_conversations("n:", batches[-1]) == 0
    assert store.delete_idle_conversations("n:", listed[0].last_activity) == 2
    assert [c.conversation_id for c in store.list_conversations("n:")] == ["new"]
