"""``MemoryStore``, the LangGraph ``BaseStore`` over a ``Memory``'s facts: the parity kit on
every built-in store, the facts it shares with the library's own tools, graphs using it, and
bad input."""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import mongomock
import psycopg
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from memory_adapters_langchain.store import (
    MAX_SCOPE_CHARS,
    InvalidNamespace,
    MemoryStore,
)
from memory_adapters_mongo import MongoStore
from memory_adapters_postgres import PostgresStore
from mongomock_motor import AsyncMongoMockClient
from stores import STORES, open_memory
from typing_extensions import TypedDict

from memory_adapters import (
    InvalidId,
    InvalidInput,
    InvalidTTL,
    InvalidValue,
    Memory,
    Scope,
    Unsupported,
    ValueTooLarge,
    hookimpl,
)
from memory_adapters.embedders import normalized
from memory_adapters.errors import EmbedderFailed
from memory_adapters.facts import Fact, embed_text, supports_vectors
from memory_adapters.testing.conformance import HOSTILE_KEYS
from memory_adapters.testing.embedders import ConceptEmbedder
from memory_adapters.testing.langgraph import BaseStoreParity, view
from memory_adapters.validation import MAX_ID_LENGTH, MAX_VALUE_BYTES

ALICE = ("memories", "alice")

# -- the parity kit on every built-in store --------------------------------------------------


class TestParityInMemory(BaseStoreParity):
    @pytest.fixture
    def store(self) -> Iterator[MemoryStore]:
        memory = Memory("memory://")
        yield MemoryStore(memory)
        memory.close()


class TestParitySQLite(BaseStoreParity):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[MemoryStore]:
        memory = Memory(f"sqlite:///{tmp_path / 'memory.db'}")
        yield MemoryStore(memory)
        memory.close()


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class TestParityPostgres(BaseStoreParity):
    """Every test gets its own schema on the session's server."""

    @pytest.fixture
    def store(self, postgres_url: str) -> Iterator[MemoryStore]:
        schema = "t_" + uuid.uuid4().hex[:12]
        memory = Memory(store=PostgresStore(postgres_url, schema=schema))
        yield MemoryStore(memory)
        memory.close()
        _drop(postgres_url, schema)


class TestParityMongo(BaseStoreParity):
    """Sync calls on mongomock, async calls natively on mongomock-motor, one database."""

    @pytest.fixture
    def store(self) -> Iterator[MemoryStore]:
        raw: Any = mongomock.MongoClient()
        mongo = MongoStore(
            client=raw,
            async_client=AsyncMongoMockClient(mock_mongo_client=raw),
            database="ma_test",
        )
        memory = Memory(store=mongo)
        yield MemoryStore(memory)
        memory.close()


# -- one memory, two front doors ----------------------------------------------------------------


def test_the_librarys_tools_and_the_store_share_facts(memory: Memory) -> None:
    store = MemoryStore(memory)
    with memory.session(user_id="alice"):
        memory.tools.call("save_memory", {"key": "tea", "value": "Alice drinks oolong"})
    item = store.get(ALICE, "tea")
    assert item is not None and item.value == {"content": "Alice drinks oolong"}
    assert item.namespace == ALICE and item.created_at.tzinfo is not None

    store.put(ALICE, "city", {"content": "Lives in Lisbon", "since": 2019})
    with memory.session(user_id="alice"):
        assert "Lisbon" in memory.tools.call("recall_memory", {"key": "city"})
        fact = memory.facts.get("city")
        assert fact is not None and fact.value == {"content": "Lives in Lisbon", "since": 2019}
        assert "city" in memory.tools.call("search_memory", {"query": "Lisbon"})
        memory.tools.call("forget_memory", {"key": "tea"})
    assert store.get(ALICE, "tea") is None
    with memory.session(user_id="bob"):
        assert memory.facts.get("city") is None  # alice's, not bob's
    assert store.get(("memories", "bob"), "city") is None

    with memory.session(user_id="alice", agent_id="planner"):
        memory.facts.put("plan", "Porto in May")
    planner = ("memories", "alice", "agents", "planner")
    got = store.get(planner, "plan")
    assert got is not None and got.value == {"content": "Porto in May"}
    assert store.get(ALICE, "plan") is None

    with memory.session(conversation_id="c-1"):  # facts of a conversation: not a namespace
        memory.facts.put("k", "v")
    store.put(("docs",), "d", {"text": "a document about Lisbon"})
    assert store.list_namespaces() == [("docs",), ALICE, planner]
    found = store.search(("memories",), query="lisbon")
    assert [(i.namespace, i.key) for i in found] == [(ALICE, "city")]
    assert found[0].score is not None and found[0].score > 0
    assert [i.key for i in store.search((), query="Lisbon")] in (["city", "d"], ["d", "city"])

    async def both_ways_async() -> None:
        async with memory.session(user_id="alice"):
            await memory.tools.acall("save_memory", {"key": "pet", "value": "a parrot"})
        item = await store.aget(ALICE, "pet")
        assert item is not None and item.value == {"content": "a parrot"}
        await store.aput(ALICE, "pet", {"content": "a parrot called Kiwi"})
        async with memory.session(user_id="alice"):
            assert "Kiwi" in await memory.tools.acall("recall_memory", {"key": "pet"})
        await store.adelete(ALICE, "pet")
        async with memory.session(user_id="alice"):
            assert await memory.facts.aget("pet") is None

    asyncio.run(both_ways_async())


def test_namespaces_map_to_scopes(memory: Memory) -> None:
    store = MemoryStore(memory)
    assert store.fact_scope(ALICE) == Scope(user_id="alice").fact_scope == "user:alice"
    assert store.fact_scope(("memories", "a/b")) == "user:a%2Fb"
    assert store.fact_scope(("memories", "alice", "agents", "x")) == "user:alice/agent:x"
    assert store.fact_scope(("docs", "v1")) == "lg:docs/v1/"
    assert store.fact_scope(("a/b",)) == "lg:a%2Fb/"  # one label, not two
    assert store.fact_scope(("a", "b")) == "lg:a/b/"
    assert store.fact_scope(("memories",)) == "lg:memories/"
    # another namespace beneath a user's is that user's: kept beneath the user's scope
    notes = ("memories", "alice", "notes")
    assert store.fact_scope(notes) == "user:alice/lg:memories/alice/notes/"
    for ns in [ALICE, ("docs", "v1"), ("a/b",), ("ünï", "🦜"), ("memories", "u", "agents", "a")]:
        assert store.namespace_of(store.fact_scope(ns)) == ns
    assert store.namespace_of(store.fact_scope(notes)) == notes
    for scope in ["conversation:default::c", "lg:", "lg:a", "lg:%ZZ/", "lg:%FF/", "user:", "x"]:
        assert store.namespace_of(scope) is None
    assert store.namespace_of("lg:memories/alice/") is None  # not how ALICE is spelled
    assert store.namespace_of("lg:memories/alice/notes/") is None  # nor the notes
    assert store.namespace_of("user:bob/lg:memories/alice/notes/") is None  # alice's, not bob's
    assert store.namespace_of("user:alice/other") is None

    store.put(("a/b",), "k", {"v": 1})
    store.put(("a", "b"), "k", {"v": 2})
    store.put(("ab",), "k", {"v": 3})
    assert [i.value for i in store.search(("a",))] == [{"v": 2}]
    assert [i.value for i in store.search(("a/b",))] == [{"v": 1}]
    assert store.list_namespaces(prefix=("a",)) == [("a", "b")]

    with memory.session(user_id="alice.smith"):  # LangGraph refuses periods in labels
        memory.facts.put("k", "v")
    assert ("memories", "alice.smith") not in store.list_namespaces()
    assert store.search(("memories",)) == []

    other = MemoryStore(memory, user_namespace=("users", "v1"), namespace="tenant-2")
    other.put(("users", "v1", "carol"), "k", {"v": 1})
    assert memory.store.get_fact("tenant-2", "user:carol", "k") is not None
    with memory.session(user_id="carol", namespace="tenant-2"):
        assert memory.facts.get("k") is not None
    assert store.get(("users", "v1", "carol"), "k") is None  # another namespace, scope
    assert other.list_namespaces() == [("users", "v1", "carol")]


def test_hooks_fire_for_the_stores_reads_and_writes(memory: Memory) -> None:
    seen: list[tuple[str, str, str]] = []

    class Recorder:
        @hookimpl
        def fact_stored(self, scope: Scope, fact: Fact) -> None:
            seen.append(("stored", scope.user_id or "", fact.key))

        @hookimpl
        def fact_recalled(self, scope: Scope, key: str, fact: Fact | None) -> None:
            seen.append(("recalled", scope.user_id or "", key))

        @hookimpl
        def facts_searched(self, scope: Scope, query: str, results: list[Fact]) -> None:
            seen.append(("searched", scope.user_id or "", query))

        @hookimpl
        def fact_forgotten(self, scope: Scope, key: str, deleted: bool) -> None:
            seen.append(("forgotten", scope.user_id or "", key))

    memory.register(Recorder(), name="recorder")
    store = MemoryStore(memory)
    store.put(ALICE, "tea", {"content": "oolong"})
    store.get(ALICE, "tea")
    store.search(ALICE, query="oolong")
    store.delete(ALICE, "tea")
    store.put(("docs",), "d", {"x": 1})

    async def go() -> None:
        await store.aget(("docs",), "d")

    asyncio.run(go())
    assert seen == [
        ("stored", "alice", "tea"),
        ("recalled", "alice", "tea"),
        ("searched", "alice", "oolong"),
        ("forgotten", "alice", "tea"),
        ("stored", "", "d"),
        ("recalled", "", "d"),
    ]


# -- a LangGraph graph with the store ----------------------------------------------------------


class _State(TypedDict):
    said: str
    answer: str


def _remember(state: _State, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
    """A node: remember what the user said, answer with what their memories say of tea."""
    ns = ("memories", config["configurable"]["user_id"])
    store.put(ns, "last_said", {"content": state["said"]})
    found = store.search(ns, query="tea")
    return {"answer": "; ".join(sorted(str(i.value["content"]) for i in found))}


async def _aremember(state: _State, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
    """:func:`_remember`, with the store's async methods."""
    ns = ("memories", config["configurable"]["user_id"])
    await store.aput(ns, "last_said", {"content": state["said"]})
    found = await store.asearch(ns, query="tea")
    return {"answer": "; ".join(sorted(str(i.value["content"]) for i in found))}


def _graph(store: BaseStore, node: Any) -> Any:
    builder = StateGraph(_State)
    builder.add_node("remember", node)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    return builder.compile(store=store)


def test_a_graph_node_reads_and_writes_the_users_facts(memory: Memory) -> None:
    with memory.session(user_id="alice"):
        memory.tools.call("save_memory", {"key": "tea", "value": "Alice drinks oolong tea"})
    store = MemoryStore(memory)
    graph = _graph(store, _remember)
    out = graph.invoke({"said": "I like green tea too"}, {"configurable": {"user_id": "alice"}})
    assert "Alice drinks oolong tea" in out["answer"]
    assert "I like green tea too" in out["answer"]  # the node's own write, found by search
    with memory.session(user_id="alice"):
        fact = memory.facts.get("last_said")
        assert fact is not None and fact.value == {"content": "I like green tea too"}
        assert "green tea" in memory.tools.call("recall_memory", {"key": "last_said"})

    async def run() -> dict[str, Any]:
        result: dict[str, Any] = await _graph(store, _aremember).ainvoke(
            {"said": "no tea for me"}, {"configurable": {"user_id": "bob"}}
        )
        return result

    assert asyncio.run(run())["answer"] == "no tea for me"  # bob sees only his own
    with memory.session(user_id="bob"):
        fact = memory.facts.get("last_said")
        assert fact is not None and fact.value == {"content": "no tea for me"}


# -- semantics that the kit cannot see ----------------------------------------------------------


def test_a_refresh_keeps_the_ttl_and_gives_way_to_writers(memory: Memory) -> None:
    store = MemoryStore(memory)
    scope = store.fact_scope(("docs",))
    store.put(("docs",), "k", {"v": 1}, ttl=1.5)
    for expected_version in (2, 3, 4):
        assert store.get(("docs",), "k") is not None
        fact = memory.store.get_fact("default", scope, "k")
        assert fact is not None and fact.expires_at is not None
        assert fact.version == expected_version  # a refresh is a write
        assert round(fact.expires_at - fact.updated_at, 3) == 90.0
    store.search(("docs",))
    fact = memory.store.get_fact("default", scope, "k")
    assert fact is not None and fact.version == 5
    assert store.get(("docs",), "k", refresh_ttl=False) is not None
    fact = memory.store.get_fact("default", scope, "k")
    assert fact is not None and fact.version == 5
    # a read and a write of the item in one batch: the write wins, its (lack of) TTL stands
    store.batch([GetOp(("docs",), "k"), PutOp(("docs",), "k", {"v": 2})])
    fact = memory.store.get_fact("default", scope, "k")
    assert fact is not None and fact.value == {"v": 2} and fact.expires_at is None

    ttl_store = MemoryStore(memory, ttl={"default_ttl": 2, "refresh_on_read": False})
    ttl_store.put(("docs",), "t", {"v": 1})
    fact = memory.store.get_fact("default", scope, "t")
    assert fact is not None and fact.expires_at is not None
    assert round(fact.expires_at - fact.updated_at, 3) == 120.0
    ttl_store.get(("docs",), "t")
    fact = memory.store.get_fact("default", scope, "t")
    assert fact is not None and fact.version == 1  # refresh_on_read=False: not refreshed


def test_keyword_search_ranks_and_filters(memory: Memory) -> None:
    store = MemoryStore(memory)
    store.put(("docs",), "tea", {"text": "tea tea tea and more tea", "kind": "drink"})
    store.put(("docs",), "coffee", {"text": "coffee, not tea", "kind": "drink"})
    store.put(("docs", "v2"), "cake", {"text": "cake with tea", "kind": "food"})
    store.put(("docs",), "none", {"text": "nothing to see", "kind": "drink"})
    found = store.search(("docs",), query="tea")
    assert found[0].key == "tea"
    assert {i.key for i in found} == {"tea", "coffee", "cake"}
    scores = [i.score for i in found if i.score is not None]
    assert len(scores) == len(found) and scores == sorted(scores, reverse=True)
    assert {i.key for i in store.search(("docs",), query="tea", filter={"kind": "food"})} == {
        "cake"
    }
    assert len(store.search(("docs",), query="tea", limit=1, offset=1)) == 1
    assert store.search(("docs",), query="zebra") == []
    assert store.search(("docs",), query="?!") == []
    assert store.search(("docs",), query="tea", limit=0) == []


def test_async_calls_never_block_the_event_loop(tmp_path: Path) -> None:
    """With a blocking store (SQLite), every store call of ``abatch`` runs off the loop."""
    memory = Memory(f"sqlite:///{tmp_path / 'm.db'}")
    store = MemoryStore(memory)
    store.put(ALICE, "tea", {"content": "oolong"}, ttl=5)
    calls: list[tuple[str, int]] = []
    target: Any = memory.store
    names = (
        "get_fact",
        "put_fact",
        "list_facts",
        "match_terms",
        "get_facts",
        "delete_fact",
        "refresh_fact",
    )
    for name in names:
        original = getattr(target, name)

        def spy(*args: Any, __name: str = name, __original: Any = original, **kw: Any) -> Any:
            calls.append((__name, threading.get_ident()))
            return __original(*args, **kw)

        setattr(target, name, spy)
    original_scopes = target.list_fact_scopes

    def scopes_spy(*args: Any, **kw: Any) -> Any:
        calls.append(("list_fact_scopes", threading.get_ident()))
        return original_scopes(*args, **kw)

    target.list_fact_scopes = scopes_spy

    async def go() -> int:
        await store.aput(ALICE, "city", {"content": "Lisbon"})
        assert await store.aget(ALICE, "tea") is not None
        assert len(await store.asearch(("memories",), query="lisbon")) == 1
        assert len(await store.asearch(("memories",))) == 2
        assert await store.alist_namespaces() == [ALICE]
        await store.adelete(ALICE, "city")
        return threading.get_ident()

    loop_thread = asyncio.run(go())
    assert {name for name, _ in calls} == {*names, "list_fact_scopes"}
    assert all(ident != loop_thread for _, ident in calls), calls
    memory.close()


# -- bad input ---------------------------------------------------------------------------------


def _snapshot(store: MemoryStore) -> Any:
    return view(store.search((), limit=10_000)), store.list_namespaces(limit=10_000)


def test_bad_input_is_refused_and_nothing_is_lost(memory: Memory) -> None:
    store = MemoryStore(memory)
    store.put(ALICE, "kept", {"v": 1})
    store.put(("docs",), "kept", {"nul": "a\x00b", "k\x00": ["\x00"]})  # NUL in values: fine
    item = store.get(("docs",), "kept")
    assert item is not None and item.value == {"nul": "a\x00b", "k\x00": ["\x00"]}
    before = _snapshot(store)
    tried: list[str] = []
    put: Any = store.put
    batch: Any = store.batch

    def refused(name: str, exc: type[BaseException], fn: Callable[[], Any]) -> None:
        tried.append(name)
        with pytest.raises(exc):
            fn()

    for i, key in enumerate(["", "nul\x00key", "new\nline", "k" * (MAX_ID_LENGTH + 1), "\ud800"]):
        refused(f"key #{i}", InvalidId, partial(put, ALICE, key, {"v": 2}))
        refused(f"get key #{i}", InvalidId, partial(store.get, ALICE, key))
    refused("key type", InvalidId, lambda: batch([PutOp(ALICE, 5, {"v": 2})]))  # type: ignore[arg-type]
    for i, value in enumerate(["a string", ["a", "list"], 5, 1.5, True, ("t",)]):
        refused(f"value not a dict #{i}", InvalidValue, partial(put, ALICE, "k", value))
    not_json: list[Any] = [
        {"x": {1, 2}},
        {"x": b"bytes"},
        {"x": float("nan")},
        {"x": float("inf")},
        {1: "int key"},
        {"x": object()},
        {"x": ("a", "tuple")},
        {"x": "lone \ud800 surrogate"},
    ]
    for i, value in enumerate(not_json):
        refused(f"value not json #{i}", InvalidValue, partial(put, ALICE, "k", value))
    refused(
        "huge value",
        ValueTooLarge,
        lambda: put(ALICE, "k", {"x": "y" * MAX_VALUE_BYTES}),
    )
    deep: Any = {}
    for _ in range(150):
        deep = {"d": deep}
    refused("deep value", InvalidValue, lambda: put(ALICE, "k", deep))
    # LangGraph's own namespace rules, through its methods ...
    for i, ns in enumerate([("a.b",), ("",), ("nul\x00",), (), ("langgraph", "x")]):
        refused(f"namespace #{i}", InvalidNamespaceError, partial(put, ns, "k", {"v": 2}))
    # ... and ours, also for ops handed to batch() directly
    bad_namespaces: list[Any] = [
        ("a.b",),
        ("",),
        ("nul\x00",),
        ("new\nline",),
        ("x" * (MAX_ID_LENGTH + 1),),
        ("\ud800",),
        (1,),
        "not a tuple",
    ]
    for i, ns in enumerate(bad_namespaces):
        for op in (PutOp(ns, "k", {"v": 2}), GetOp(ns, "k"), SearchOp(ns)):
            refused(f"{type(op).__name__} namespace #{i}", InvalidNamespace, partial(batch, [op]))
    too_long = ("é" * 200, "é" * 200)  # 2,400 characters percent-encoded
    refused("long namespace", InvalidNamespace, lambda: put(too_long, "k", {"v": 2}))
    refused("long namespace get", InvalidNamespace, lambda: store.get(too_long, "k"))
    refused("not in ns", InvalidNamespace, lambda: put(("new\nline",), "k", {"v": 2}))
    # put refuses a "langgraph" root label (BaseStore's rule); a PutOp given to batch may have
    # one, as in LangGraph's own stores
    refused("root label", InvalidNamespaceError, lambda: put(("langgraph",), "k", {}))
    refused("empty ns", InvalidNamespace, lambda: batch([PutOp((), "k", {})]))
    refused(
        "listing label",
        InvalidNamespace,
        lambda: batch([ListNamespacesOp((MatchCondition("prefix", ("a\nb",)),))]),
    )
    for i, ttl in enumerate([0, -1, float("nan"), float("inf"), "5", True]):
        refused(f"ttl #{i}", InvalidTTL, partial(put, ALICE, "k", {"v": 2}, ttl=ttl))
    refused("operator", InvalidInput, lambda: store.search((), filter={"x": {"$regex": "."}}))
    refused("deep operator", InvalidInput, lambda: store.search((), filter={"x": {"y": {"$x": 1}}}))
    refused("filter type", InvalidInput, lambda: batch([SearchOp((), filter=["x"])]))  # type: ignore[arg-type]
    refused("query type", InvalidInput, lambda: batch([SearchOp((), query=5)]))  # type: ignore[arg-type]
    refused("limit", InvalidInput, lambda: store.search((), limit=-1))
    refused("offset", InvalidInput, lambda: store.search((), offset="2"))  # type: ignore[arg-type]
    refused("max_depth", InvalidInput, lambda: store.list_namespaces(max_depth=0))
    refused("list limit", InvalidInput, lambda: store.list_namespaces(limit=-3))
    refused(
        "match type",
        InvalidInput,
        lambda: batch([ListNamespacesOp((MatchCondition("infix", ("a",)),))]),  # type: ignore[arg-type]
    )
    refused("unknown op", InvalidInput, lambda: batch(["not an op"]))
    # one bad op in a batch: the good ones before it are not written either
    refused(
        "half a batch",
        InvalidValue,
        lambda: batch([PutOp(ALICE, "good", {"v": 1}), PutOp(ALICE, "bad", {"x": {1}})]),
    )
    refused(
        "async batch",
        InvalidValue,
        lambda: asyncio.run(
            store.abatch([PutOp(ALICE, "good", {"v": 1}), PutOp(ALICE, "bad", "x")])  # type: ignore[arg-type]
        ),
    )
    refused("index without embed", InvalidInput, lambda: MemoryStore(memory, index={"dims": 3}))
    refused("sweep", Unsupported, lambda: MemoryStore(memory, ttl={"sweep_interval_minutes": 1}))
    refused("default ttl", InvalidTTL, lambda: MemoryStore(memory, ttl={"default_ttl": -1}))
    refused("user namespace", InvalidNamespace, lambda: MemoryStore(memory, user_namespace=()))
    refused(
        "user namespace label",
        InvalidNamespace,
        lambda: MemoryStore(memory, user_namespace=("a.b",)),
    )
    refused("not a memory", InvalidInput, lambda: MemoryStore("memory://"))  # type: ignore[arg-type]
    assert len(tried) >= 80
    assert _snapshot(store) == before, "bad input changed what was stored"
    assert len(store.fact_scope(("é" * 170,))) <= MAX_SCOPE_CHARS  # just under the limit


def test_hostile_keys_and_labels_round_trip(memory: Memory) -> None:
    store = MemoryStore(memory)
    namespaces = [("docs",), ALICE, ("%", "_"), ("$gt", "a%b", "\\"), ("'; DROP TABLE x; --",)]
    for ns in namespaces:
        for i, key in enumerate(HOSTILE_KEYS):
            store.put(ns, key, {"i": i, "$where": {"$gt": ""}, "a.b": [key]})
    for ns in namespaces:
        for i, key in enumerate(HOSTILE_KEYS):
            item = store.get(ns, key)
            assert item is not None and item.value == {"i": i, "$where": {"$gt": ""}, "a.b": [key]}
        listed = store.search(ns, limit=1000)
        assert sorted(item.key for item in listed if item.namespace == ns) == sorted(HOSTILE_KEYS)
    assert store.get(("docs",), "$gtx") is None
    assert store.get(("%",), "_") is None  # ("%",) holds nothing: ("%", "_") is another
    assert sorted(store.list_namespaces()) == sorted(namespaces)
    assert store.list_namespaces(prefix=("%",)) == [("%", "_")]
    assert store.search(("_",)) == []


# -- semantic search: LangGraph's index -----------------------------------------------------------


class CountingEmbeddings(Embeddings):
    """A LangChain ``Embeddings`` of :class:`ConceptEmbedder` vectors that records every text
    it embeds (documents and queries apart)."""

    def __init__(self) -> None:
        self.concepts = ConceptEmbedder()
        self.documents: list[str] = []
        self.queries: list[str] = []
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.documents.extend(texts)
        return [self.concepts.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        self.queries.append(text)
        return self.concepts.vector(text)


DIMS = len(ConceptEmbedder().vector("x"))


@pytest.fixture(params=STORES)
def any_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    """A Memory (no embedder of its own) over each built-in store, MongoDB on mongomock."""
    yield from open_memory(request.param, request, tmp_path)


def _index(embed: Any, fields: list[str] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"dims": DIMS, "embed": embed}
    if fields is not None:
        config["fields"] = fields
    return config


def test_an_index_on_every_store(any_memory: Memory) -> None:
    embeddings = CountingEmbeddings()
    if not supports_vectors(any_memory.store):
        # this store has no vector search (Store.search_fact_vectors) yet: said at once
        with pytest.raises(Unsupported, match="cannot search by meaning"):
            MemoryStore(any_memory, index=_index(embeddings))
        store = MemoryStore(any_memory)  # keyword search still works
        store.put(("docs",), "tea", {"text": "oolong tea"})
        assert [i.key for i in store.search(("docs",), query="tea")] == ["tea"]
        return
    store = MemoryStore(any_memory, index=_index(embeddings, ["text"]))
    store.put(("docs",), "tea", {"text": "I sip oolong every morning"})
    store.put(("docs",), "city", {"text": "Lisbon is home"})
    store.put(("docs", "pets"), "dog", {"text": "Rex the dog"})
    found = store.search(("docs",), query="which beverage?")
    assert found[0].key == "tea"
    assert all(i.score is not None for i in found)
    scores = [i.score for i in found]
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert found[0].score == pytest.approx(
        dot_unit(
            embeddings.concepts.vector("which beverage?"),
            embeddings.concepts.vector("I sip oolong every morning"),
        ),
        abs=1e-5,
    )  # cosine similarity, as LangGraph's stores score
    assert [i.key for i in store.search(("docs",), query="a pet animal", limit=1)] == ["dog"]
    assert [i.key for i in store.search(("docs", "pets"), query="a drink")] == ["dog"]


def dot_unit(a: list[float], b: list[float]) -> float:
    na = sum(x * x for x in a) ** 0.5
    nb = sum(x * x for x in b) ** 0.5
    return float(sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb))


def _vector_store(memory: Memory, **index: Any) -> MemoryStore | None:
    """A MemoryStore with an index, or ``None`` (having checked it is refused) where the
    store has no vector search."""
    config = {"dims": DIMS, **index}
    if not supports_vectors(memory.store):
        with pytest.raises(Unsupported):
            MemoryStore(memory, index=config)
        return None
    return MemoryStore(memory, index=config)


def test_each_field_has_its_vector_and_the_best_one_scores(memory: Memory) -> None:
    embeddings = CountingEmbeddings()
    store = _vector_store(memory, embed=embeddings, fields=["title", "body", "tags[*]"])
    if store is None:
        return
    store.put(("n",), "a", {"title": "dog", "body": "work at the bank", "tags": ["jazz"]})
    store.put(("n",), "b", {"title": "lisbon", "body": "oolong tea", "tags": ["porto", "dog"]})
    # one vector per field path; "tags[*]" gives one per element
    assert sorted(embeddings.documents) == sorted(
        ["dog", "work at the bank", "jazz", "lisbon", "oolong tea", "porto", "dog"]
    )
    by_key = {i.key: i.score for i in store.search(("n",), query="dog")}
    assert set(by_key) == {"a", "b"}
    # "a" matches through its title, "b" through one tag: both by their best field, fully
    assert by_key["a"] == pytest.approx(1.0, abs=1e-5)
    assert by_key["b"] == pytest.approx(1.0, abs=1e-5)
    found = store.search(("n",), query="jazz music")
    assert found[0].key == "a"
    assert found[0].score is not None and found[1].score is not None
    assert found[0].score > found[1].score
    # "$" is the whole value as JSON, "*" every top-level value
    whole = _vector_store(memory, embed=CountingEmbeddings(), fields=["$"])
    assert whole is not None
    whole.put(("w",), "k", {"b": "tea", "a": 1})
    assert whole.embeddings is not None
    assert whole.embeddings.documents == ['{"a": 1, "b": "tea"}']  # type: ignore[attr-defined]
    star = _vector_store(memory, embed=CountingEmbeddings(), fields=["*"])
    assert star is not None
    star.put(("s",), "k", {"x": "tea", "y": "dog"})
    assert star.embeddings.documents == ["tea", "dog"]  # type: ignore[union-attr]
    # a put's own fields replace the store's
    store.put(("n",), "c", {"title": "jazz", "other": "dog"}, index=["other"])
    assert embeddings.documents[-1:] == ["dog"]
    assert store.search(("n",), query="jazz", limit=1)[0].key == "a"


def test_an_unindexed_item_is_found_by_filter_and_get_never_by_query(memory: Memory) -> None:
    embeddings = CountingEmbeddings()
    store = _vector_store(memory, embed=embeddings, fields=["text"])
    if store is None:
        return
    store.put(("d",), "indexed", {"text": "oolong tea", "kind": "drink"})
    store.put(("d",), "hidden", {"text": "oolong tea", "kind": "drink"}, index=False)
    store.put(("d",), "no-field", {"other": "oolong tea", "kind": "drink"})
    assert embeddings.documents == ["oolong tea"]  # the hidden one was never embedded
    found = store.search(("d",), query="tea")
    # scored items first, by score; then the items without vectors, unscored, as LangGraph
    assert [(i.key, i.score is None) for i in found] == [
        ("indexed", False),
        ("hidden", True),
        ("no-field", True),
    ]
    assert [i.key for i in store.search(("d",), query="tea", limit=1)] == ["indexed"]
    assert [i.key for i in store.search(("d",), query="tea", limit=1, offset=1)] == ["hidden"]
    assert {i.key for i in store.search(("d",), filter={"kind": "drink"})} == {
        "indexed",
        "hidden",
        "no-field",
    }
    item = store.get(("d",), "hidden")
    assert item is not None and item.value["text"] == "oolong tea"
    # the search embedded nothing of the items: only the queries
    assert embeddings.documents == ["oolong tea"]
    # an overwrite with index=False drops the vectors it had
    store.put(("d",), "indexed", {"text": "oolong tea", "kind": "drink"}, index=False)
    assert all(i.score is None for i in store.search(("d",), query="tea"))


def test_abatch_embeds_once_and_searches(memory: Memory) -> None:
    embeddings = CountingEmbeddings()
    store = _vector_store(memory, embed=embeddings, fields=["text"])
    if store is None:
        return

    async def go() -> list[Any]:
        await store.abatch(
            [
                PutOp(("d",), "tea", {"text": "oolong tea"}),
                PutOp(("d",), "dog", {"text": "my dog rex"}),
                PutOp(("d",), "twin", {"text": "oolong tea"}),
                PutOp(("d",), "gone", {"text": "porto"}),
                PutOp(("d",), "gone", None),
            ]
        )
        return await store.abatch(
            [
                SearchOp(("d",), query="a drink"),
                SearchOp(("d",), query="a drink", filter={"text": "my dog rex"}),
                GetOp(("d",), "dog"),
            ]
        )

    drinks, dogs, dog = asyncio.run(go())
    # one embed call for the whole batch of puts, each distinct text once
    assert embeddings.documents == ["oolong tea", "my dog rex"]
    assert [i.key for i in drinks][:2] == ["tea", "twin"] or [i.key for i in drinks][:2] == [
        "twin",
        "tea",
    ]
    assert [i.key for i in dogs] == ["dog"]
    assert dog is not None and dog.key == "dog"
    assert embeddings.queries == ["a drink"]  # one query, embedded once per batch


def test_each_put_is_embedded_once_and_reads_never_embed(memory: Memory) -> None:
    embeddings = CountingEmbeddings()
    store = _vector_store(memory, embed=embeddings, fields=["text", "note"])
    if store is None:
        return
    store.put(("d",), "tea", {"text": "oolong tea", "note": "every morning"})
    store.put(("d",), "dog", {"text": "my dog"})
    assert embeddings.calls == 2
    assert embeddings.documents == ["oolong tea", "every morning", "my dog"]
    for _ in range(3):
        store.get(("d",), "tea")
        store.search(("d",))
        store.search(("d",), filter={"text": "my dog"})
        store.list_namespaces()
    assert embeddings.calls == 2  # gets, listings and searches without query: nothing
    store.search(("d",), query="drink")
    store.search(("d",), query="drink", filter={"text": "my dog"})
    assert embeddings.documents == ["oolong tea", "every morning", "my dog"]
    assert embeddings.queries == ["drink", "drink"]
    store.batch([SearchOp(("d",), query="pet"), SearchOp(("d",), query="pet", limit=1)])
    assert embeddings.queries[2:] == ["pet"]  # one query of a batch: embedded once


def test_a_function_embeds_sync_and_async(memory: Memory) -> None:
    concepts = ConceptEmbedder()
    seen: list[str] = []

    def embed(texts: list[str]) -> list[list[float]]:
        seen.extend(texts)
        return [concepts.vector(t) for t in texts]

    async def aembed(texts: list[str]) -> list[list[float]]:
        seen.extend(texts)
        return [concepts.vector(t) for t in texts]

    for fn in (embed, aembed):
        store = _vector_store(memory, embed=fn, fields=["text"])
        if store is None:
            return
        asyncio.run(store.aput(("f", fn.__name__), "tea", {"text": "oolong tea"}))
        found = asyncio.run(store.asearch(("f", fn.__name__), query="beverage"))
        assert [i.key for i in found] == ["tea"]
        assert store.index_embedder is not None
        assert store.index_embedder.name == f"{__name__}.{fn.__qualname__}"
    assert seen == ["oolong tea", "beverage", "oolong tea", "beverage"]


def test_the_users_facts_are_shared_with_the_core_embedder(tmp_path: Path) -> None:
    """The same embedder for both: the core and the store read each other's vectors, and
    facts the library's tools saved are embedded once, when the store first searches."""
    concepts = ConceptEmbedder()
    memory = Memory(f"sqlite:///{tmp_path / 'm.db'}", embed=concepts)
    if not supports_vectors(memory.store):
        memory.close()
        memory = Memory("memory://", embed=concepts)
    try:
        store = MemoryStore(memory, index={"dims": DIMS, "embed": memory.embedder})
        with memory.session(user_id="alice"):
            memory.tools.call("save_memory", {"key": "tea", "value": "Alice drinks oolong"})
        assert concepts.documents == [embed_text("tea", "Alice drinks oolong")]
        store.put(ALICE, "pet", {"content": "Rex the parrot"})
        assert concepts.documents[1:] == ['{"content": "Rex the parrot"}']  # "$": the JSON
        found = store.search(ALICE, query="a beverage")
        assert found[0].key == "tea" and found[0].score is not None
        with memory.session(user_id="alice"):
            assert memory.facts.search("an animal", mode="semantic")[0].key == "pet"
        assert len(concepts.documents) == 2  # nothing embedded twice
    finally:
        memory.close()


def test_another_model_in_the_store_is_embedded_when_searched(memory: Memory) -> None:
    first = CountingEmbeddings()
    store = _vector_store(memory, embed=first, fields=["text"])
    if store is None:
        return
    store.put(("d",), "tea", {"text": "oolong tea"})
    store.put(("d",), "skip", {"text": "my dog"}, index=False)
    second = ConceptEmbedder("concepts-v2")
    other = MemoryStore(memory, index={"dims": DIMS, "embed": second, "fields": ["text"]})
    assert [i.key for i in other.search(("d",), query="drink", limit=1)] == ["tea"]
    # made by another model: embedded again, by this store's fields, once; a fact its
    # writer left unindexed (by another model) is embedded too
    assert sorted(second.documents) == ["my dog", "oolong tea"]
    other.search(("d",), query="drink")
    assert len(second.documents) == 2


def test_without_an_index_query_is_keyword_search_even_with_an_embedder(tmp_path: Path) -> None:
    concepts = ConceptEmbedder()
    memory = Memory("memory://", embed=concepts)
    try:
        store = MemoryStore(memory)
        store.batch(
            [
                PutOp(("d",), "tea", {"text": "oolong tea"}),
                PutOp(("d",), "dog", {"text": "my dog"}),
            ]
        )
        # written as memory.facts writes: embedded by the Memory's embedder, in one call
        assert concepts.calls == 1 and len(concepts.documents) == 2
        assert store.search(("d",), query="beverage") == []  # no word in common
        assert [i.key for i in store.search(("d",), query="tea")] == ["tea"]
        assert concepts.queries == []
    finally:
        memory.close()


def test_a_bad_index_or_put_index_is_refused(memory: Memory) -> None:
    with pytest.raises(InvalidInput):
        MemoryStore(memory, index={"dims": DIMS})
    with pytest.raises(InvalidInput):
        MemoryStore(memory, index={"dims": 0, "embed": CountingEmbeddings()})
    store = _vector_store(memory, embed=CountingEmbeddings(), fields=["text"])
    if store is None:
        return
    with pytest.raises(InvalidInput):
        store.put(("d",), "k", {"text": "x"}, index="text")  # type: ignore[arg-type]
    wrong = _vector_store(memory, embed=lambda texts: [[1.0, 0.0] for _ in texts])
    assert wrong is not None
    with pytest.raises(EmbedderFailed):  # vectors of 2 dimensions, not DIMS
        wrong.put(("d",), "k", {"text": "x"})
    assert wrong.get(("d",), "k") is None  # nothing written


def test_a_ttl_refresh_keeps_the_items_vectors(any_memory: Memory) -> None:
    """Issue 27 #2: a refresh on read moves the expiry and keeps the vectors the put wrote
    (the store's fields, a put's own ``index=[...]``, ``index=False``): later searches
    still rank by meaning, embed nothing again, and score as the first one did."""
    embeddings = CountingEmbeddings()
    ttl = {"default_ttl": 2, "refresh_on_read": True}
    store = _vector_store(any_memory, embed=embeddings, fields=["text"])
    if store is None:
        return
    store = MemoryStore(any_memory, index=_index(embeddings, ["text"]), ttl=ttl)  # type: ignore[arg-type]
    store.put(("docs",), "tea", {"text": "I sip oolong every morning"})
    store.put(
        ("docs",), "city", {"text": "Lisbon is home", "title": "a hot drink"}, index=["title"]
    )
    store.put(("docs",), "off", {"text": "green tea"}, index=False)
    documents = list(embeddings.documents)
    first = [(i.key, i.score) for i in store.search(("docs",), query="which beverage?")]
    assert first[0][0] in ("tea", "city") and first[-1] == ("off", None)
    scope = store.fact_scope(("docs",))
    for _ in range(3):
        again = [(i.key, i.score) for i in store.search(("docs",), query="which beverage?")]
        assert again == first  # ranked by meaning every time, the same scores
        fact = any_memory.store.get_fact("default", scope, "tea")
        assert fact is not None and fact.expires_at is not None
        # refreshed, same TTL (MongoDB keeps times to the millisecond: 119.999 is 120)
        assert abs((fact.expires_at - fact.updated_at) - 120.0) <= 0.002
    assert embeddings.documents == documents  # nothing embedded again
    scores = dict(first)
    assert scores["city"] == pytest.approx(
        dot_unit(
            embeddings.concepts.vector("which beverage?"),
            embeddings.concepts.vector("a hot drink"),
        ),
        abs=1e-5,
    )  # still the put's own field


def test_a_ttl_refresh_keeps_the_items_vectors_async(any_memory: Memory) -> None:
    embeddings = CountingEmbeddings()
    if not supports_vectors(any_memory.store):
        return
    store = MemoryStore(
        any_memory,
        index=_index(embeddings, ["text"]),
        ttl={"default_ttl": 2, "refresh_on_read": True},
    )

    async def run() -> None:
        await store.aput(("docs",), "tea", {"text": "I sip oolong every morning"})
        documents = list(embeddings.documents)
        first = [(i.key, i.score) for i in await store.asearch(("docs",), query="a drink")]
        for _ in range(2):
            again = [(i.key, i.score) for i in await store.asearch(("docs",), query="a drink")]
            assert again == first and first[0][1] is not None
        assert await store.aget(("docs",), "tea") is not None
        assert [(i.key, i.score) for i in await store.asearch(("docs",), query="a drink")] == first
        assert embeddings.documents == documents

    asyncio.run(run())


# -- whose items: erase, export and retention reach the user's namespaces ------------------------


def _items(store: MemoryStore) -> set[tuple[tuple[str, ...], str]]:
    return {(tuple(i.namespace), i.key) for i in store.search((), limit=1000)}


@pytest.mark.parametrize(
    "user_namespace",
    [
        None,  # the default, LangMem's ("memories", "{user_id}")
        ("users", "{user_id}"),
        lambda ns: ns[1] if len(ns) > 1 and ns[0] in ("users", "memories") else None,
    ],
    ids=["default", "template", "function"],
)
def test_erase_export_and_retention_reach_the_users_namespaces(
    any_memory: Memory, tmp_path: Path, user_namespace: Any
) -> None:
    """Issue 27 #4: every namespace ``user_namespace`` says is alice's is erased, exported and
    pruned with her memory; nothing of anybody else (bob, "alice2", the graph's own)."""
    import io
    import json
    import time

    from memory_adapters.transfer import export_jsonl

    options = {} if user_namespace is None else {"user_namespace": user_namespace}
    store = MemoryStore(any_memory, **options)
    root = "memories" if user_namespace is None else "users"
    alices = [
        (root, "alice"),
        (root, "alice", "prefs"),
        (root, "alice", "prefs", "deep"),
        (root, "alice", "agents", "planner"),
    ]
    others = [(root, "bob"), (root, "bob", "prefs"), (root, "alice2", "prefs"), ("docs", "alice")]
    for ns in alices + others:
        store.put(ns, "k", {"content": f"in {'/'.join(ns)}"})
    store.put((root, "alice", "prefs"), "brief", {"content": "soon gone"}, ttl=0.002)
    with any_memory.session(user_id="alice"):  # the library's own tools, alice's memory
        any_memory.tools.call("save_memory", {"key": "tea", "value": "oolong"})
    assert store.get((root, "alice", "prefs"), "k") is not None
    # found by prefix: one user's, or everybody's
    assert {ns for ns, _ in _items(store) if ns[:2] == (root, "alice")} == set(alices)
    assert {tuple(i.namespace) for i in store.search((root, "alice", "prefs"))} == {
        (root, "alice", "prefs"),
        (root, "alice", "prefs", "deep"),
    }
    assert set(store.list_namespaces(prefix=(root, "alice"))) == set(alices)

    out = io.StringIO()
    export_jsonl(any_memory, out, user_id="alice")
    exported = {
        json.loads(line)["value"]["content"]
        for line in out.getvalue().splitlines()
        if json.loads(line).get("type") == "fact" and isinstance(json.loads(line)["value"], dict)
    }
    assert {f"in {'/'.join(ns)}" for ns in alices} <= exported
    assert not any("bob" in c or "alice2" in c or c.startswith("in docs") for c in exported)

    time.sleep(0.3)  # "brief" expires (0.12 s)
    assert any_memory.retain(idle_days=365).facts >= 1  # retention prunes it
    assert store.get((root, "alice", "prefs"), "brief", refresh_ttl=False) is None

    report = any_memory.erase(user_id="alice")
    assert report.facts >= len(alices) + (1 if user_namespace is None else 0)
    left = _items(store)
    assert left == {(ns, "k") for ns in others}
    with any_memory.session(user_id="alice"):
        assert any_memory.facts.get("tea") is None


def test_a_bad_user_namespace_is_refused(memory: Memory) -> None:
    with pytest.raises(InvalidNamespace, match="last label"):
        MemoryStore(memory, user_namespace=("{user_id}", "memories"))
    store = MemoryStore(memory, user_namespace=lambda ns: 42)  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidInput, match="not a str"):
        store.put(("users", "x"), "k", {"v": 1})
    store = MemoryStore(memory, user_namespace=lambda ns: "a" if ns[0] == "users" else None)
    assert store.fact_scope(("users",)) == "user:a/lg:users/"
    assert store.namespace_of("user:a") is None  # with a function, no namespace is the user's own
    langmem = MemoryStore(memory, user_namespace=("memories", "{langgraph_user_id}"))
    assert langmem.fact_scope(("memories", "ann")) == "user:ann"  # LangMem's placeholder
    assert repr(MemoryStore(memory, user_namespace=("memories",))).endswith(
        "user_namespace=('memories',)>"
    )  # the older spelling of the default


@pytest.mark.parametrize("distance_type", ["cosine", "inner_product", "l2"])
def test_distance_types_score_as_langgraphs_stores(any_memory: Memory, distance_type: str) -> None:
    """Issue 27 #3: ``index["distance_type"]`` scores as LangGraph's PostgresStore does (for
    unit vectors: the cosine, the dot product, minus the Euclidean distance);
    ``ann_index_config`` is accepted, what does not apply ignored."""
    embeddings = CountingEmbeddings()
    ann = {"vector_type": "halfvec", "kind": "hnsw", "m": 8, "ef_construction": 32}
    store = _vector_store(
        any_memory,
        embed=embeddings,
        fields=["text"],
        distance_type=distance_type,
        ann_index_config=ann,
    )
    if store is None:
        return
    texts = {"tea": "I sip oolong every morning", "city": "Lisbon is home", "dog": "Rex"}
    for key, text in texts.items():
        store.put(("docs",), key, {"text": text})
    query = "which beverage?"
    found = store.search(("docs",), query=query)
    unit = [normalized(embeddings.concepts.vector(t)) for t in [query, *texts.values()]]
    cosines = {
        key: sum(a * b for a, b in zip(unit[0], u, strict=True))
        for key, u in zip(texts, unit[1:], strict=True)
    }
    expected = {
        k: (-math.dist(unit[0], u) if distance_type == "l2" else cosines[k])
        for k, u in zip(texts, unit[1:], strict=True)
    }
    assert [i.key for i in found] == sorted(texts, key=lambda k: -cosines[k])
    for item in found:
        assert item.score == pytest.approx(expected[item.key], abs=1e-5)


def test_unsupported_distance_types_are_refused(memory: Memory) -> None:
    embeddings = CountingEmbeddings()
    if not supports_vectors(memory.store):
        return
    with pytest.raises(Unsupported, match="bit vectors"):
        MemoryStore(memory, index={**_index(embeddings), "distance_type": "hamming"})
    bits = {**_index(embeddings), "ann_index_config": {"vector_type": "bit"}}
    with pytest.raises(Unsupported, match="halfvec"):
        MemoryStore(memory, index=bits)
