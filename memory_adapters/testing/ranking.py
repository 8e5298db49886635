"""The ranking part of the conformance kit: what a store answers to keyword search
(:meth:`Store.match_terms <memory_adapters.store.Store.match_terms>`), fact metadata and the
filters a search applies, on every store.

:class:`RankingConformance` is mixed into :class:`~memory_adapters.testing.StoreConformance`;
it uses the same ``store`` fixture and calls the store contract directly, with exact
expectations: a store finds candidates and counts statistics, and the core
(:mod:`memory_adapters.ranking`) scores them, so every store must answer exactly alike.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_adapters import Memory
from memory_adapters.embedders import WHOLE, Embedding, normalized
from memory_adapters.facts import Fact, FactFilter, embed_text, index_text
from memory_adapters.ranking import TermHit, TermMatches
from memory_adapters.store import Store

from .embedders import ConceptEmbedder

NS = "rank"


def put(
    store: Store,
    key: str,
    value: Any,
    *,
    scope: str = "u",
    namespace: str = NS,
    metadata: dict[str, Any] | None = None,
    vector: Sequence[float] | None = None,
    expires_at: float | None = None,
    importance: float = 0.0,
) -> Fact:
    """Put a fact as the core does: its terms from :func:`~memory_adapters.facts.index_text`,
    its metadata as JSON text, and a vector of model ``"m"`` when given one."""
    options: dict[str, Any] = {
        "text": index_text(key, value),
        "importance": importance,
        "expires_at": expires_at,
    }
    if metadata is not None:
        options["metadata"] = json.dumps(metadata)
    if vector is not None:
        unit = normalized(vector)
        options["embedding"] = Embedding("m", len(unit), {WHOLE: unit})
    return store.put_fact(namespace, scope, key, json.dumps(value), **options)


def hits(matches: TermMatches) -> dict[str, tuple[int, tuple[int, ...]]]:
    """The hits of a keyword match by key: (length, counts)."""
    return {h.key: (h.length, h.counts) for h in matches.hits}


def lengths(*texts: tuple[str, Any]) -> int:
    return sum(len(index_text(k, v).split()) for k, v in texts)


class RankingConformance:
    """Keyword candidates and statistics, metadata and filters, store by store."""

    def test_match_terms_counts_the_scope_and_finds_every_holder(self, store: Store) -> None:
        facts = {
            "tea": "I drink oolong tea, tea every morning",
            "coffee": "I drink coffee",
            "city": "Lisbon is home",
            "cat": "my cat sleeps all day",
        }
        for key, value in facts.items():
            put(store, key, value)
        put(store, "other_scope", "tea tea tea", scope="v")
        put(store, "other_ns", "tea coffee", namespace="rank-other")
        matches = store.match_terms(NS, "u", ["tea", "drink", "zebra"])
        assert isinstance(matches, TermMatches)
        assert matches.documents == 4
        assert matches.total_length == lengths(*facts.items())
        assert hits(matches) == {
            "tea": (len(index_text("tea", facts["tea"]).split()), (3, 1, 0)),
            "coffee": (len(index_text("coffee", facts["coffee"]).split()), (0, 1, 0)),
        }
        for hit in matches.hits:
            assert isinstance(hit, TermHit)
            assert hit.importance == 0.0 and hit.updated_at > 0
        assert store.match_terms(NS, "u", ["zebra"]).hits == []
        empty = store.match_terms(NS, "nobody", ["tea"])
        assert (empty.documents, empty.total_length, empty.hits) == (0, 0, [])

    def test_match_terms_follows_writes_deletes_and_expiry(self, store: Store) -> None:
        put(store, "a", "tea")
        put(store, "b", "tea and biscuits")
        put(store, "c", "tea soon gone", expires_at=time.time() + 0.3)
        assert set(hits(store.match_terms(NS, "u", ["tea"]))) == {"a", "b", "c"}
        put(store, "a", "coffee now")  # a write replaces the terms
        assert set(hits(store.match_terms(NS, "u", ["tea"]))) == {"b", "c"}
        assert set(hits(store.match_terms(NS, "u", ["coffe"]))) == {"a"}
        assert store.delete_fact(NS, "u", "b")
        time.sleep(0.35)
        matches = store.match_terms(NS, "u", ["tea", "coffe"])
        length = len(index_text("a", "coffee now").split())
        assert hits(matches) == {"a": (length, (0, 1))}
        assert matches.documents == 1 and matches.total_length == length

    def test_match_terms_keeps_repeats_and_lengths_exact(self, store: Store) -> None:
        text = " ".join(["alpha"] * 7 + ["beta"] * 2 + ["gamma"])
        put(store, "k", text)
        matches = store.match_terms(NS, "u", ["alpha", "beta", "gamma", "delta"])
        assert hits(matches) == {"k": (11, (7, 2, 1, 0))}  # the key "k" is a term too

    def test_match_terms_sees_importance_and_update_times(self, store: Store) -> None:
        put(store, "a", "tea", importance=0.7)
        fact = store.get_fact(NS, "u", "a")
        assert fact is not None
        (hit,) = store.match_terms(NS, "u", ["tea"]).hits
        assert hit.importance == 0.7 and hit.updated_at == fact.updated_at

    def test_metadata_round_trips_and_is_never_searched(self, store: Store) -> None:
        meta = {"source": "chat", "turn": 3, "score": 1.5, "ok": True, "none": None, "tags": ["x"]}
        written = put(store, "k", "a value", metadata=meta)
        assert written.metadata == meta
        got = store.get_fact(NS, "u", "k")
        assert got is not None and got.metadata == meta
        assert [f.metadata for f in store.list_facts(NS, "u")] == [meta]
        assert [f.metadata for f in store.get_facts(NS, "u", ["k"])] == [meta]
        assert store.match_terms(NS, "u", ["chat"]).hits == []  # metadata is not indexed
        put(store, "k", "a value")  # a put replaces the fact, metadata included
        again = store.get_fact(NS, "u", "k")
        assert again is not None and again.metadata is None

    def test_get_facts_answers_in_the_order_asked(self, store: Store) -> None:
        for key in ("a", "b", "c"):
            put(store, key, key)
        put(store, "gone", "x", expires_at=time.time() + 0.2)
        time.sleep(0.25)
        found = store.get_facts(NS, "u", ["c", "missing", "a", "gone", "b"])
        assert [f.key for f in found] == ["c", "a", "b"]
        assert store.get_facts(NS, "u", []) == []
        assert store.get_facts(NS, "v", ["a"]) == []

    def test_filters_apply_to_keyword_hits_but_not_to_statistics(self, store: Store) -> None:
        put(store, "int", "tea", metadata={"n": 1})
        put(store, "float", "tea", metadata={"n": 1.0})
        put(store, "bool", "tea", metadata={"n": True})
        put(store, "str", "tea", metadata={"n": "1"})
        put(store, "null", "tea", metadata={"n": None})
        put(store, "list", "tea", metadata={"n": [1]})
        put(store, "nothing", "tea")
        put(store, "other", "tea", metadata={"m": 1})

        def found(*pairs: tuple[str, Any]) -> set[str]:
            matches = store.match_terms(NS, "u", ["tea"], where=FactFilter(tuple(pairs)))
            assert matches.documents == 8  # statistics are the scope's, whatever the filter
            return set(hits(matches))

        assert found(("n", 1)) == {"int", "float"}
        assert found(("n", 1.0)) == {"int", "float"}
        assert found(("n", True)) == {"bool"}
        assert found(("n", False)) == set()
        assert found(("n", "1")) == {"str"}
        assert found(("n", None)) == {"null"}
        assert found(("n", 1), ("m", 1)) == set()
        assert found(("m", 1)) == {"other"}
        assert found() == {"int", "float", "bool", "str", "null", "list", "nothing", "other"}

    def test_since_and_until_filter_on_the_update_time(self, store: Store) -> None:
        first = put(store, "first", "tea")
        time.sleep(0.02)
        second = put(store, "second", "tea")
        assert first.updated_at < second.updated_at

        def found(since: float | None, until: float | None) -> set[str]:
            where = FactFilter(since=since, until=until)
            return set(hits(store.match_terms(NS, "u", ["tea"], where=where)))

        assert found(None, None) == {"first", "second"}
        assert found(second.updated_at, None) == {"second"}
        assert found(None, second.updated_at) == {"first"}  # until is exclusive
        assert found(first.updated_at, second.updated_at) == {"first"}
        assert found(second.updated_at + 1, None) == set()

    def test_vector_search_within_keys_and_filters(self, store: Store) -> None:
        put(store, "a", "x", vector=[1.0, 0.0], metadata={"kind": "note"})
        put(store, "b", "x", vector=[0.9, 0.1], metadata={"kind": "todo"})
        put(store, "c", "x", vector=[0.5, 0.5], metadata={"kind": "note"})
        put(store, "d", "x", vector=[0.0, 1.0])
        q = [1.0, 0.0]

        def keys(**kw: Any) -> list[str]:
            return [f.key for f in store.search_fact_vectors(NS, "u", q, model="m", **kw)]

        assert keys(limit=10) == ["a", "b", "c", "d"]
        assert keys(limit=10, keys=["d", "b"]) == ["b", "d"]
        assert keys(limit=10, keys=[]) == []
        assert keys(limit=1, keys=["c", "d", "zzz"]) == ["c"]
        assert keys(limit=10, where=FactFilter((("kind", "note"),))) == ["a", "c"]
        assert keys(limit=1, where=FactFilter((("kind", "note"),))) == ["a"]
        assert keys(limit=10, keys=["b", "c"], where=FactFilter((("kind", "note"),))) == ["c"]
        found = store.search_fact_vectors(NS, "u", q, model="m", limit=1)
        assert found[0].metadata == {"kind": "note"}

    def test_restore_keeps_metadata_and_terms(self, store: Store) -> None:
        fact = Fact("k", "oolong tea", 3, 0.5, 100.0, 200.0, None, None, {"src": "import"})
        assert store.restore_fact(NS, "u", fact)
        got = store.get_fact(NS, "u", "k")
        assert got is not None and got.metadata == {"src": "import"} and got.version == 3
        assert set(hits(store.match_terms(NS, "u", ["oolong"]))) == {"k"}

    def test_async_twins(self, store: Store) -> None:
        put(store, "k", "tea", metadata={"a": 1})

        async def go() -> tuple[TermMatches, list[Fact]]:
            return (
                await store.amatch_terms(NS, "u", ["tea"], where=FactFilter((("a", 1),))),
                await store.aget_facts(NS, "u", ["k"]),
            )

        matches, found = asyncio.run(go())
        assert set(hits(matches)) == {"k"} and [f.key for f in found] == ["k"]


# -- one ranking on every store: a property over random scopes and queries -------------------------

VOCABULARY = [
    "tea",
    "oolong",
    "coffee",
    "drink",
    "city",
    "lisbon",
    "home",
    "live",
    "dog",
    "parrot",
    "pet",
    "job",
    "bank",
    "work",
    "music",
    "jazz",
    "song",
    "food",
    "peanuts",
    "meal",
    "morning",
    "evening",
    "friday",
    "sister",
    "brother",
    "garden",
    "book",
    "train",
    "holiday",
    "Caroline's",
    "researched",
    "research",
    "researching",
    "adoption",
    "agencies",
    "the",
    "a",
    "my",
    "and",
]
"""Words the random facts and queries are made of: some of them share concepts (for the
embedder), stems ("researched", "research"), possessives and stop words."""

_TEXT = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=12).map(" ".join)
_FACTS = st.lists(
    st.tuples(
        _TEXT,
        st.sampled_from([0.0, 0.0, 0.5]),  # importance: ties are common
        st.integers(0, 4),  # the update time, in whole seconds: ties are common
        st.one_of(st.none(), st.fixed_dictionaries({"kind": st.sampled_from(["a", "b"])})),
    ),
    min_size=1,
    max_size=25,
)
_QUERIES = st.lists(_TEXT, min_size=1, max_size=3)


def _restore(store: Store, namespace: str, scope: str, facts: list[Any], model: str) -> None:
    """Write ``facts`` exactly (times, versions, vectors), as an import does."""
    embedder = ConceptEmbedder(model)
    for i, (text, importance, at, metadata) in enumerate(facts):
        key = f"f{i}"
        vector = normalized(embedder.vector(embed_text(key, text)))
        fact = Fact(key, text, 1, importance, 1e9, 1e9 + at, None, None, metadata)
        store.restore_fact(
            namespace, scope, fact, embedding=Embedding(model, len(vector), {WHOLE: vector})
        )


def _same(found: list[Fact], expected: list[Fact]) -> None:
    assert [f.key for f in found] == [f.key for f in expected]
    for got, want in zip(found, expected, strict=True):
        assert got.score is not None and want.score is not None
        assert math.isclose(got.score, want.score, rel_tol=1e-9, abs_tol=1e-9), (got, want)


class RankingProperties:
    """Every store ranks as the in-memory reference does, whatever else it holds: the same
    keys in the same order with the same scores (to 1e-9), for keyword, semantic and hybrid
    search, at every limit (a result is the first ``k`` of any longer one), with filters."""

    def test_every_store_ranks_as_the_reference_whatever_other_scopes_hold(
        self, store: Store
    ) -> None:
        @settings(
            max_examples=RANKING_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(facts=_FACTS, noise=_FACTS, queries=_QUERIES)
        def check(facts: list[Any], noise: list[Any], queries: list[str]) -> None:
            _ranks_as_the_reference(store, facts, noise, queries)

        check()


RANKING_EXAMPLES = 30
"""Random scopes the ranking property draws per store."""


def _ranks_as_the_reference(
    store: Store, facts: list[Any], noise: list[Any], queries: list[str]
) -> None:
    from memory_adapters_inmemory import InMemoryStore

    model = "kit-concepts"
    user = f"u-{uuid.uuid4().hex[:12]}"
    reference = InMemoryStore()
    namespace = "rank-prop"
    scope = f"user:{user}"
    _restore(store, namespace, scope, facts, model)
    _restore(reference, namespace, scope, facts, model)
    # other users, and the same user in another namespace, hold other facts with the same
    # words: the reference holds none of them
    _restore(store, namespace, f"user:{user}-other", noise, model)
    _restore(store, namespace + "-other", scope, noise, model)
    memories = [
        Memory(store=s, load_entrypoints=False, embed=ConceptEmbedder(model))
        for s in (store, reference)
    ]
    wheres: list[dict[str, Any]] = [{}, {"filter": {"kind": "a"}}]
    try:
        for query in queries:
            for mode in ("keyword", "semantic", "hybrid"):
                for where in wheres:
                    found: list[list[Fact]] = []
                    for memory in memories:
                        with memory.session(user_id=user, namespace=namespace):
                            longest = memory.facts.search(query, 30, mode=mode, **where)
                            for k in (1, 3, 5):
                                short = memory.facts.search(query, k, mode=mode, **where)
                                _same(short, longest[:k])  # prefix-stable
                            found.append(longest)
                    _same(found[0], found[1])
                    if mode == "semantic" and not where:  # every fact has a vector
                        assert len(found[0]) == min(30, len(facts))
    finally:
        reference.close()
