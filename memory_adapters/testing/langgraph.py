"""A parity kit for LangGraph ``BaseStore`` backends: the same operations against LangGraph's
own ``InMemoryStore`` and the store under test, with the results compared.

Subclass :class:`BaseStoreParity` and give it a ``store`` fixture yielding a fresh, empty
``langgraph.store.base.BaseStore``; pytest then runs the kit against it::

    import pytest
    from memory_adapters import Memory
    from memory_adapters.testing.langgraph import BaseStoreParity
    from memory_adapters_langchain import MemoryStore

    class TestMyStore(BaseStoreParity):
        @pytest.fixture
        def store(self, tmp_path):
            yield MemoryStore(Memory(f"sqlite:///{tmp_path / 'db'}"))

One script of operations — puts, overwrites, deletes, gets, searches (prefixes, filters with
every operator, offsets, limits, queries), namespace listings (prefixes, suffixes, ``"*"``
wildcards, ``max_depth``, limits, offsets), batches mixing all of them, unicode and
pattern-shaped labels and keys, invalid namespaces — runs step by step on both stores, sync
(the ``BaseStore`` methods and ``batch``) and async (the ``a`` methods and ``abatch``), and
every result is compared: namespace, key, value and order, not timestamps.

What is compared where the two legitimately differ, each said again where it is checked:

* ``query``: ``InMemoryStore`` without an index ignores it; a store may rank by it. Only
  that the results are matching items of the prefix and filter, at most ``limit``, with
  scores (if any) best first, is compared.
* ``InMemoryStore`` keeps a namespace once anything touched it — a ``get`` of a missing
  item, or deleting its last item — and lists it empty. The reference used here
  (:func:`reference_store`) creates a namespace with its first item and drops it after the
  batch that deletes its last one, so that listings compare what stores hold.
* TTL: ``InMemoryStore`` has none, so expiry and refresh are checked on the store under test
  alone (when it ``supports_ttl``), against a ``clock`` fixture: by default
  :class:`OffsetClock`, which moves ``time.time`` forward (right for stores that take time
  from Python, as memory-adapters' do); override it with :class:`SleepClock` for a store
  whose clock is a server's.
* ``InMemoryStore``'s filters raise ``TypeError`` comparing a missing field with ``$gt``;
  the script gives every item a numeric ``score`` so that both can answer.

LangGraph is imported when the tests run, not when this module is imported, so the kit
loads without the ``langchain`` extra.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore, Op


# -- clocks ---------------------------------------------------------------------------------------


class Clock(Protocol):
    """Moves the time the store under test sees forward."""

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass, for the store."""


class OffsetClock:
    """``time.time`` plus an offset that :meth:`advance` grows (through ``monkeypatch``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + self.offset)

    def advance(self, seconds: float) -> None:
        self.offset += seconds


class SleepClock:
    """Really waits: for stores whose clock is not Python's (use short TTLs)."""

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)


# -- the reference --------------------------------------------------------------------------------


class _Namespaces(dict[tuple[str, ...], dict[str, Any]]):
    """``InMemoryStore._data`` (a name its source asks to keep stable) that adds a namespace
    on its first item, not on the first look-up: a ``get`` of a missing item no longer
    creates an empty namespace."""

    def __missing__(self, namespace: tuple[str, ...]) -> dict[str, Any]:
        return _Pending(self, namespace)


class _Pending(dict[str, Any]):
    """The items of a namespace not in the store yet: joins it on the first item."""

    def __init__(self, namespaces: _Namespaces, namespace: tuple[str, ...]) -> None:
        super().__init__()
        self._namespaces = namespaces
        self._namespace = namespace

    def __setitem__(self, key: str, value: Any) -> None:
        self._namespaces.setdefault(self._namespace, {})[key] = value


def reference_store() -> BaseStore:
    """LangGraph's ``InMemoryStore``, listing only namespaces that hold items: a look-up
    does not create a namespace, and one whose last item goes is dropped after the batch."""
    from langgraph.store.memory import InMemoryStore

    class Reference(InMemoryStore):
        """``InMemoryStore`` whose namespace listings show only namespaces holding items."""

        def __init__(self) -> None:
            super().__init__()
            self._data = _Namespaces()

        def _drop_empty(self) -> None:
            for namespace in [ns for ns, items in self._data.items() if not items]:
                del self._data[namespace]

        def batch(self, ops: Any) -> Any:
            try:
                return super().batch(ops)
            finally:
                self._drop_empty()

        async def abatch(self, ops: Any) -> Any:
            try:
                return await super().abatch(ops)
            finally:
                self._drop_empty()

    return Reference()


# -- the script -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Put:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]


@dataclass(frozen=True)
class Delete:
    namespace: tuple[str, ...]
    key: str


@dataclass(frozen=True)
class Get:
    namespace: tuple[str, ...]
    key: str


@dataclass(frozen=True)
class Search:
    prefix: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Query:
    """A search with ``query``: compared only where comparable (see the module docstring)."""

    prefix: tuple[str, ...]
    query: str
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ListNamespaces:
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Batch:
    ops: tuple[Any, ...]


@dataclass(frozen=True)
class Raises:
    """Both stores must refuse ``step``; the store under test with the reference's error
    class (or a subclass)."""

    step: Any


Step = Put | Delete | Get | Search | Query | ListNamespaces | Batch | Raises


def _value(i: int, **extra: Any) -> dict[str, Any]:
    return {"n": i, "score": float(i % 7), **extra}


DOCS = ("docs",)
ALICE = ("memories", "alice")
UNICODE = ("ünï", "cødé ✓", "🦜")
FILTERS: list[dict[str, Any] | None] = [
    None,
    {"type": "report"},
    {"score": {"$gt": 2.5}},
    {"score": {"$gte": 2, "$lt": 5}},
    {"score": {"$ne": 2.0}},
    {"score": {"$eq": 3.0}},
    {"score": {"$lte": 1}},
    {"meta": {"lang": "en"}},
    {"tags": ["a", "b"]},
    {"type": "report", "status": "draft"},
    {"n": 3},
    {"missing": None},
]
PREFIXES: list[tuple[str, ...]] = [
    (),
    DOCS,
    ("docs", "v1"),
    ("a",),
    ("ab",),
    ("memories",),
    ALICE,
    ("memories", "alice", "agents"),
    ("memories", "bob"),
    ("cache",),
    ("ünï",),
    ("e\u0301",),
    ("é",),
    ("%",),
    ("nothing",),
]
PAGES = [(10, 0), (2, 0), (2, 1), (3, 4), (100, 0), (1, 100), (0, 0)]
LISTINGS: list[dict[str, Any]] = [
    {},
    {"prefix": DOCS},
    {"prefix": ("a",)},
    {"prefix": ("memories",)},
    {"prefix": ALICE},
    {"prefix": ("memories", "*", "agents")},
    {"prefix": ("*",)},
    {"prefix": ("cache", "*")},
    {"prefix": ("cache", "*", "v1")},
    {"suffix": ("v1",)},
    {"suffix": ("*", "v1")},
    {"suffix": ("alice",)},
    {"prefix": ("cache",), "suffix": ("v2",)},
    {"max_depth": 1},
    {"max_depth": 2},
    {"prefix": ("memories",), "max_depth": 2},
    {"prefix": ("cache",), "max_depth": 2, "limit": 1, "offset": 1},
    {"limit": 2},
    {"limit": 3, "offset": 2},
    {"offset": 100},
    {"limit": 0},
    {"prefix": ("nothing",)},
    {"prefix": UNICODE[:2]},
]


def seed() -> list[Step]:
    """The items every test starts from: several namespaces (user-shaped ones too), nested
    values, unicode and pattern-shaped labels and keys; every value has a numeric score."""
    steps: list[Step] = [
        Put(DOCS, "d1", _value(1, type="report", status="active", text="quarterly revenue")),
        Put(DOCS, "d2", _value(2, type="memo", status="draft", meta={"lang": "en"})),
        Put(("docs", "v1"), "d3", _value(3, type="report", status="draft", tags=["a", "b"])),
        Put(("docs", "v2"), "d4", _value(4, type="report", meta={"lang": "fr", "pages": 3})),
        Put(("a",), "k", _value(5, tags=["a", "b"])),
        Put(("ab",), "k", _value(6, tags=["b", "a"])),
        Put(("a", "b"), "k2", _value(7, meta={"lang": "en", "pages": 1})),
        Put(ALICE, "tea", _value(8, content="likes oolong tea")),
        Put(("memories", "alice", "agents", "planner"), "plan", _value(9, content="trip")),
        Put(("memories", "bob"), "tea", _value(10, content="likes green tea")),
        Put(("memories",), "root", _value(11)),
        Put(("memories", "alice", "notes"), "n1", _value(12, missing=None)),
        Put(UNICODE, "ключ 🔑", _value(13, текст="значение 🦜 \u05e9\u05dc\u05d5\u05dd")),
        Put(("e\u0301",), "nfd", _value(14)),
        Put(("é",), "nfc", _value(15)),
        Put(("cache", "x", "v1"), "c", _value(16)),
        Put(("cache", "y", "v1"), "c", _value(17)),
        Put(("cache", "x", "v2"), "c", _value(18)),
        Put(("%",), "_", _value(19, like="%_\\")),
        Put(("a%b", "_x_"), "%", _value(20)),
        Put(("*",), "*", _value(21)),
    ]
    for key in ("$gt", "$where", "a.b", "'; DROP TABLE x; --", "%", "_", "\\", "k" * 200):
        steps.append(Put(DOCS, key, _value(len(key), key=key, nested={"$ne": {"a.b": 1}})))
    return steps


def reads() -> list[Step]:
    """Every read the kit compares, over whatever the stores hold."""
    steps: list[Step] = []
    for prefix in PREFIXES:
        for flt in FILTERS:
            steps.append(Search(prefix, {"filter": flt} if flt is not None else {}))
    for prefix in ((), DOCS, ("memories",), ("cache",)):
        for limit, offset in PAGES:
            steps.append(Search(prefix, {"limit": limit, "offset": offset}))
            steps.append(
                Search(prefix, {"limit": limit, "offset": offset, "filter": {"n": {"$gt": 2}}})
            )
    for prefix, query in [((), "tea"), (("memories",), "oolong"), (DOCS, "revenue draft")]:
        steps.append(Query(prefix, query))
        steps.append(Query(prefix, query, {"limit": 1}))
        steps.append(Query(prefix, query, {"filter": {"score": {"$gt": 0}}}))
    steps.extend(ListNamespaces(kwargs) for kwargs in LISTINGS)
    for put in seed():
        if isinstance(put, Put):
            steps.append(Get(put.namespace, put.key))
    steps += [
        Get(DOCS, "absent"),
        Get(("never", "created"), "k"),
        Get(("a",), "k2"),  # lives in ("a", "b"), not ("a",)
        Get(("memories", "alice", "agents"), "plan"),
    ]
    return steps


def invalid() -> list[Step]:
    """Requests both stores refuse (LangGraph's own namespace rules, unknown operators)."""
    return [
        Raises(Put(("a.b",), "k", {"x": 1})),
        Raises(Put((), "k", {"x": 1})),
        Raises(Put(("langgraph", "x"), "k", {"x": 1})),
        Raises(Put(("ok", ""), "k", {"x": 1})),
        Raises(Put(("nul\x00",), "k", {"x": 1})),
        Raises(Get(("a.b",), "k")),
        Raises(Get(("",), "k")),
        Raises(Search(("x.y",))),
        Raises(Search(("",))),
        Raises(ListNamespaces({"prefix": ("a.b",)})),
        Raises(ListNamespaces({"suffix": ("",)})),
        Raises(Search(DOCS, {"filter": {"score": {"$regex": ".*"}}})),
    ]


# -- running and comparing ------------------------------------------------------------------------


def view(result: Any) -> Any:
    """What is compared of a result: namespace, key and value of items, in order."""
    from langgraph.store.base import Item

    if isinstance(result, Item):
        return (tuple(result.namespace), result.key, result.value)
    if isinstance(result, list):
        return [view(r) for r in result]
    if isinstance(result, tuple):
        return tuple(result)
    return result


def _ops(step: Batch) -> list[Op]:
    from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp

    ops: list[Op] = []
    for op in step.ops:
        if isinstance(op, Put):
            ops.append(PutOp(op.namespace, op.key, op.value))
        elif isinstance(op, Delete):
            ops.append(PutOp(op.namespace, op.key, None))
        elif isinstance(op, Get):
            ops.append(GetOp(op.namespace, op.key))
        elif isinstance(op, Search):
            ops.append(SearchOp(op.prefix, **op.kwargs))
        elif isinstance(op, ListNamespaces):
            kw = dict(op.kwargs)
            conditions = tuple(
                MatchCondition(match_type=kind, path=kw.pop(kind))
                for kind in ("prefix", "suffix")
                if kind in kw
            )
            ops.append(ListNamespacesOp(match_conditions=conditions, **kw))
        else:  # pragma: no cover - the kit's own scripts
            raise TypeError(f"not a batchable step: {op!r}")
    return ops


def run_step(store: BaseStore, step: Step) -> Any:
    """Run one step with the sync API."""
    if isinstance(step, Put):
        return store.put(step.namespace, step.key, step.value)
    if isinstance(step, Delete):
        return store.delete(step.namespace, step.key)
    if isinstance(step, Get):
        return store.get(step.namespace, step.key)
    if isinstance(step, Search):
        return store.search(step.prefix, **step.kwargs)
    if isinstance(step, Query):
        return store.search(step.prefix, query=step.query, **step.kwargs)
    if isinstance(step, ListNamespaces):
        return store.list_namespaces(**step.kwargs)
    if isinstance(step, Batch):
        return store.batch(_ops(step))
    raise TypeError(f"not a step: {step!r}")  # pragma: no cover


async def arun_step(store: BaseStore, step: Step) -> Any:
    """Run one step with the async API."""
    if isinstance(step, Put):
        return await store.aput(step.namespace, step.key, step.value)
    if isinstance(step, Delete):
        return await store.adelete(step.namespace, step.key)
    if isinstance(step, Get):
        return await store.aget(step.namespace, step.key)
    if isinstance(step, Search):
        return await store.asearch(step.prefix, **step.kwargs)
    if isinstance(step, Query):
        return await store.asearch(step.prefix, query=step.query, **step.kwargs)
    if isinstance(step, ListNamespaces):
        return await store.alist_namespaces(**step.kwargs)
    if isinstance(step, Batch):
        return await store.abatch(_ops(step))
    raise TypeError(f"not a step: {step!r}")  # pragma: no cover


def _check_items(result: Any) -> None:
    """Items of the store under test carry real timestamps (not compared with the
    reference: they differ by construction)."""
    from langgraph.store.base import Item

    items = [result] if isinstance(result, Item) else result if isinstance(result, list) else []
    for item in items:
        if isinstance(item, Item):
            assert isinstance(item.created_at, datetime) and item.created_at.tzinfo is not None
            assert isinstance(item.updated_at, datetime) and item.updated_at.tzinfo is not None
            assert item.created_at <= item.updated_at


def compare(step: Step, got: Any, expected: Any, everything: Any = None) -> None:
    """Assert the store under test answered ``step`` as the reference did."""
    _check_items(got)
    if isinstance(step, Query):
        # InMemoryStore without an index ignores `query`; a store may rank by it. Comparable:
        # every result is an item of the prefix that passes the filter (``everything`` is
        # the reference's answer without query and limit), at most `limit` of them, scores
        # (where given) best first.
        allowed = view(everything)
        assert all(item in allowed for item in view(got)), (step, view(got))
        assert len(got) <= step.kwargs.get("limit", 10), step
        scores = [item.score for item in got if item.score is not None]
        assert scores == sorted(scores, reverse=True), (step, scores)
        return
    assert view(got) == view(expected), step


def _everything(step: Query) -> Search:
    kwargs = {k: v for k, v in step.kwargs.items() if k == "filter"}
    return Search(step.prefix, {**kwargs, "limit": 100_000})


def play(store: BaseStore, reference: BaseStore, steps: Sequence[Step]) -> int:
    """Run ``steps`` on both stores with the sync API, comparing as it goes; return how
    many were compared."""
    for step in steps:
        if isinstance(step, Raises):
            with pytest.raises(Exception) as expected:
                run_step(reference, step.step)
            with pytest.raises(expected.type):
                run_step(store, step.step)
            continue
        everything = run_step(reference, _everything(step)) if isinstance(step, Query) else None
        compare(step, run_step(store, step), run_step(reference, step), everything)
    return len(steps)


async def aplay(store: BaseStore, reference: BaseStore, steps: Sequence[Step]) -> int:
    """:func:`play` with the async API."""
    for step in steps:
        if isinstance(step, Raises):
            with pytest.raises(Exception) as expected:
                await arun_step(reference, step.step)
            with pytest.raises(expected.type):
                await arun_step(store, step.step)
            continue
        everything = (
            await arun_step(reference, _everything(step)) if isinstance(step, Query) else None
        )
        compare(
            step,
            await arun_step(store, step),
            await arun_step(reference, step),
            everything,
        )
    return len(steps)


def changes() -> list[Step]:
    """Overwrites, deletes and re-puts, each followed by the reads they affect."""
    return [
        Put(DOCS, "d1", _value(100, type="memo", status="archived")),  # keeps its place
        Put(("a",), "k", {"replaced": True, "n": 0, "score": 0.0}),
        Delete(DOCS, "d2"),
        Delete(DOCS, "d2"),  # again: nothing to delete
        Delete(("never",), "k"),
        Delete(("ab",), "k"),  # its only item: the namespace goes too
        Put(DOCS, "d2", _value(2, type="memo", status="back")),  # a new item, so last
        Put(("ab",), "k2", _value(22)),  # the namespace again, now after the others
        Delete(("memories",), "root"),
        Put(("memories", "carol"), "tea", _value(23, content="rooibos")),
        *[Delete(DOCS, key) for key in ("$gt", "%", "_")],
    ]


def batches() -> list[Step]:
    """Batches mixing every op: reads see the state before the batch's writes, the writes
    are deduplicated per (namespace, key), the last one winning."""
    return [
        Batch(
            (
                Put(("batch",), "x", _value(1)),
                Get(("batch",), "x"),
                Search(("batch",)),
                ListNamespaces({"prefix": ("batch",)}),
                Put(("batch",), "x", _value(2)),
                Put(("batch",), "y", _value(3)),
                Get(DOCS, "d1"),
            )
        ),
        Batch(
            (
                Get(("batch",), "x"),
                Search(("batch",), {"filter": {"n": {"$gte": 2}}}),
                Put(("batch",), "x", _value(4)),
                Delete(("batch",), "x"),
                Put(("batch",), "z", _value(5)),
                Delete(("batch",), "z"),
                Put(("batch",), "z", _value(6)),
                ListNamespaces({"prefix": ("batch",), "suffix": ("batch",)}),
            )
        ),
        Batch((Search(("batch",)), ListNamespaces({"max_depth": 1, "limit": 3}))),
        Batch(()),
    ]


class BaseStoreParity:
    """The kit; subclasses provide a ``store`` fixture (a fresh, empty ``BaseStore``)."""

    @pytest.fixture
    def store(self) -> BaseStore:  # pragma: no cover - replaced by the subclass
        raise NotImplementedError("give the parity kit a `store` fixture")

    @pytest.fixture
    def reference(self) -> BaseStore:
        """LangGraph's ``InMemoryStore`` (see :func:`reference_store`)."""
        return reference_store()

    @pytest.fixture
    def clock(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
        """Moves the store's time forward; replace it for a store not on Python's clock."""
        yield OffsetClock(monkeypatch)

    # -- parity -----------------------------------------------------------------------------

    def test_a_fresh_store_is_empty(self, store: BaseStore, reference: BaseStore) -> None:
        play(store, reference, [Search(()), ListNamespaces(), Get(DOCS, "d1")])

    def test_the_script_sync(self, store: BaseStore, reference: BaseStore) -> None:
        steps = [*seed(), *reads(), *changes(), *reads(), *batches(), *reads(), *invalid()]
        assert play(store, reference, steps) > 500

    def test_the_script_async(self, store: BaseStore, reference: BaseStore) -> None:
        steps = [*seed(), *reads(), *changes(), *reads(), *batches(), *reads(), *invalid()]
        assert asyncio.run(aplay(store, reference, steps)) > 500

    def test_the_script_through_batches(self, store: BaseStore, reference: BaseStore) -> None:
        """The same items written and read through ``batch`` / ``abatch`` directly."""
        puts = tuple(step for step in seed() if isinstance(step, Put))
        gets = tuple(Get(p.namespace, p.key) for p in puts)
        searches = tuple(Search(prefix) for prefix in PREFIXES)
        listings = tuple(ListNamespaces(kwargs) for kwargs in LISTINGS)
        half = len(puts) // 2
        sync_steps: list[Step] = [
            Batch(puts[:half]),
            Batch(gets + searches + listings),
            Batch(tuple(changes()[:6])),
        ]
        play(store, reference, sync_steps)

        async def rest() -> None:
            await aplay(
                store,
                reference,
                [Batch(puts[half:]), Batch(gets + searches + listings), *batches()],
            )

        asyncio.run(rest())
        play(store, reference, reads())

    # -- TTL (the store under test alone: InMemoryStore has none) ----------------------------

    @staticmethod
    def _needs_ttl(store: BaseStore) -> None:
        if not store.supports_ttl:
            pytest.skip(f"{type(store).__name__} does not support TTL")

    def test_items_expire_and_reads_refresh_them(self, store: BaseStore, clock: Clock) -> None:
        self._needs_ttl(store)
        ns = ("ttl",)
        store.put(ns, "short", {"v": 1}, ttl=1)  # one minute
        store.put(ns, "forever", {"v": 2})
        store.put(("ttl", "alone"), "only", {"v": 3}, ttl=1)
        clock.advance(30)
        assert store.get(ns, "short") is not None  # refreshes: 60 s from now
        clock.advance(45)  # 75 s after the put, 45 s after the refresh
        assert store.get(ns, "short", refresh_ttl=False) is not None
        assert store.get(("ttl", "alone"), "only") is None
        assert ("ttl", "alone") not in store.list_namespaces(prefix=("ttl",))
        clock.advance(20)  # 65 s after the refresh
        assert store.get(ns, "short") is None
        assert [i.key for i in store.search(ns)] == ["forever"]
        clock.advance(86_400)
        assert [i.key for i in store.search(ns)] == ["forever"]
        assert store.list_namespaces(prefix=("ttl",)) == [ns]

    def test_a_read_without_refresh_leaves_the_expiry(self, store: BaseStore, clock: Clock) -> None:
        self._needs_ttl(store)
        ns = ("ttl",)
        store.put(ns, "k", {"v": 1}, ttl=1)
        store.put(ns, "s", {"v": 2}, ttl=1)
        clock.advance(30)
        assert store.get(ns, "k", refresh_ttl=False) is not None
        assert [i.key for i in store.search(ns, refresh_ttl=False)] == ["k", "s"]
        clock.advance(45)
        assert store.get(ns, "k") is None
        assert store.search(ns) == []

    def test_search_refreshes_what_it_returns(self, store: BaseStore, clock: Clock) -> None:
        self._needs_ttl(store)
        ns = ("ttl",)
        store.put(ns, "a", {"v": 1}, ttl=1)
        store.put(ns, "b", {"v": 2}, ttl=1)
        clock.advance(50)
        assert [i.key for i in store.search(ns, limit=1)] == ["a"]  # refreshes "a" only
        clock.advance(50)
        assert [i.key for i in store.search(ns, refresh_ttl=False)] == ["a"]
        clock.advance(15)
        assert store.search(ns) == []

    def test_ttl_is_replaced_by_the_next_put(self, store: BaseStore, clock: Clock) -> None:
        self._needs_ttl(store)
        from langgraph.store.base import PutOp

        ns = ("ttl",)
        store.put(ns, "k", {"v": 1}, ttl=1)
        store.put(ns, "k", {"v": 2})  # no TTL any more
        store.batch([PutOp(ns, "b", {"v": 3}, ttl=0.5)])
        clock.advance(45)
        assert store.get(ns, "b") is None
        clock.advance(86_400)
        item = store.get(ns, "k")
        assert item is not None and item.value == {"v": 2}

    def test_ttl_async(self, store: BaseStore, clock: Clock) -> None:
        self._needs_ttl(store)
        ns = ("ttl", "async")

        async def body() -> None:
            await store.aput(ns, "k", {"v": 1}, ttl=2)
            clock.advance(100)
            assert await store.aget(ns, "k") is not None  # refreshed: 120 s from now
            clock.advance(100)
            assert [i.key for i in await store.asearch(ns)] == ["k"]
            clock.advance(121)
            assert await store.aget(ns, "k") is None
            assert await store.alist_namespaces(prefix=("ttl",)) == []

        asyncio.run(body())
