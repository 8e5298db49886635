"""The semantic-recall part of the conformance kit: fact vectors in the store, and
``Facts.search`` by keyword, meaning and both, on every store.

:class:`SemanticConformance` is mixed into :class:`~memory_adapters.testing.StoreConformance`;
it uses the same ``store`` fixture. The store-level tests call the store contract directly
with hand-made unit vectors (exact expectations); the ``Memory``-level ones use
:class:`~memory_adapters.testing.embedders.ConceptEmbedder`, which finds meaning without a
model and counts what it embeds.
"""

from __future__ import annotations

import asyncio
import math
import time
import warnings
from collections.abc import Sequence

import pytest

from memory_adapters import Memory
from memory_adapters.embedders import WHOLE, Embedding, normalized
from memory_adapters.errors import (
    EmbedderFailed,
    EmbeddingWarning,
    InvalidInput,
    NoEmbedder,
)
from memory_adapters.facts import Fact, embed_text, supports_refresh
from memory_adapters.store import Store

from .embedders import ConceptEmbedder, FailingEmbedder

NS = "sem"


def _emb(model: str, *vectors: Sequence[float], fields: Sequence[str] | None = None) -> Embedding:
    unit = [normalized(v) for v in vectors]
    names = list(fields) if fields is not None else [WHOLE] if unit else []
    return Embedding(model, len(unit[0]) if unit else 0, dict(zip(names, unit, strict=True)))


def _put(
    store: Store,
    key: str,
    embedding: Embedding | None,
    *,
    scope: str = "u",
    importance: float = 0.0,
    expires_at: float | None = None,
    namespace: str = NS,
) -> Fact:
    return store.put_fact(
        namespace,
        scope,
        key,
        f'"{key}"',
        text=key,
        importance=importance,
        expires_at=expires_at,
        embedding=embedding,
    )


def _keys(facts: list[Fact]) -> list[str]:
    return [f.key for f in facts]


PROFILE = {
    "favourite_tea": "oolong",
    "home_city": "Lisbon",
    "pet": "a parrot called Kiwi",
    "job": "software engineer at a bank",
    "allergy": "peanuts",
}
"""Facts and, below, questions that share no word with the fact they are about."""
QUESTIONS = {
    "Which beverage should I make?": "favourite_tea",
    "Where do I reside?": "home_city",
    "Tell me about my companion animal": "pet",
    "What is my occupation?": "job",
    "What food must I avoid?": "allergy",
}


class SemanticConformance:
    """Semantic recall on the store under test (``store`` fixture)."""

    def _memory(self, store: Store, embed: object) -> Memory:
        return Memory(store=store, load_entrypoints=False, embed=embed)

    # -- the store contract, with hand-made vectors ---------------------------------------------

    def test_vector_search_ranks_by_cosine(self, store: Store) -> None:
        _put(store, "east", _emb("m", [1, 0, 0]))
        _put(store, "north_east", _emb("m", [1, 1, 0]))
        _put(store, "north", _emb("m", [0, 1, 0]))
        _put(store, "west", _emb("m", [-1, 0, 0]))
        query = normalized([1, 0.2, 0])
        found = store.search_fact_vectors(NS, "u", query, model="m", limit=10)
        assert _keys(found) == ["east", "north_east", "north", "west"]
        for fact, vec in zip(found, ([1, 0, 0], [1, 1, 0], [0, 1, 0], [-1, 0, 0]), strict=True):
            expected = sum(a * b for a, b in zip(query, normalized(vec), strict=True))
            assert fact.score is not None and math.isclose(fact.score, expected, abs_tol=1e-4)
        assert fact.value == "west" and fact.version == 1
        assert _keys(store.search_fact_vectors(NS, "u", query, model="m", limit=2)) == [
            "east",
            "north_east",
        ]

    def test_only_the_models_vectors_of_the_querys_dimensions_are_candidates(
        self, store: Store
    ) -> None:
        _put(store, "m3", _emb("m", [1, 0, 0]))
        _put(store, "other_model", _emb("other", [1, 0, 0]))
        _put(store, "m2", _emb("m", [1, 0]))
        _put(store, "none", None)
        _put(store, "unindexed", _emb("m"))
        q3 = normalized([1, 0, 0])
        assert _keys(store.search_fact_vectors(NS, "u", q3, model="m")) == ["m3"]
        assert _keys(store.search_fact_vectors(NS, "u", [1.0, 0.0], model="m")) == ["m2"]
        assert _keys(store.search_fact_vectors(NS, "u", q3, model="other")) == ["other_model"]
        assert store.search_fact_vectors(NS, "u", q3, model="nobody") == []

    def test_a_fact_scores_by_its_best_field(self, store: Store) -> None:
        _put(store, "two", _emb("m", [0, 1, 0], [1, 0, 0], fields=["a", "b"]))
        _put(store, "one", _emb("m", [1, 0.5, 0]))
        found = store.search_fact_vectors(NS, "u", normalized([1, 0, 0]), model="m")
        assert _keys(found) == ["two", "one"]
        assert found[0].score is not None and math.isclose(found[0].score, 1.0, abs_tol=1e-4)

    def test_vectors_stay_in_their_scope_and_namespace(self, store: Store) -> None:
        for scope in ("u", "u2", "u/x", "U"):
            _put(store, f"k_{scope}", _emb("m", [1, 0]), scope=scope)
        _put(store, "k_ns", _emb("m", [1, 0]), namespace="other")
        for scope in ("u", "u2", "u/x", "U"):
            assert _keys(store.search_fact_vectors(NS, scope, [1.0, 0.0], model="m")) == [
                f"k_{scope}"
            ]
        assert store.search_fact_vectors(NS, "nobody", [1.0, 0.0], model="m") == []

    def test_a_rewrite_replaces_or_drops_the_vectors(self, store: Store) -> None:
        _put(store, "k", _emb("m", [1, 0]))
        _put(store, "k", _emb("m", [0, 1]))
        found = store.search_fact_vectors(NS, "u", [1.0, 0.0], model="m")
        assert _keys(found) == ["k"] and found[0].score is not None
        assert math.isclose(found[0].score, 0.0, abs_tol=1e-4)
        _put(store, "k", None)  # new text, no vectors: the old ones described the old text
        assert store.search_fact_vectors(NS, "u", [0.0, 1.0], model="m") == []
        assert _keys(store.facts_to_embed(NS, "u", "m")) == ["k"]

    def test_deleted_and_expired_facts_are_never_found(self, store: Store) -> None:
        _put(store, "gone", _emb("m", [1, 0]))
        _put(store, "soon", _emb("m", [1, 0]), expires_at=time.time() + 0.3)
        _put(store, "stays", _emb("m", [0.5, 1]))
        assert store.delete_fact(NS, "u", "gone")
        time.sleep(0.5)
        assert _keys(store.search_fact_vectors(NS, "u", [1.0, 0.0], model="m")) == ["stays"]
        assert "soon" not in _keys(store.facts_to_embed(NS, "u", "other"))
        store.prune()
        _put(store, "gone", None)  # a new fact under an old key has no vectors
        assert _keys(store.search_fact_vectors(NS, "u", [1.0, 0.0], model="m")) == ["stays"]

    def test_ties_go_to_importance_then_recency_then_key(self, store: Store) -> None:
        _put(store, "b", _emb("m", [1, 0]))
        _put(store, "a", _emb("m", [1, 0]))
        _put(store, "c", _emb("m", [1, 0]), importance=1.0)
        time.sleep(0.01)
        _put(store, "d", _emb("m", [1, 0]))
        found = _keys(store.search_fact_vectors(NS, "u", [1.0, 0.0], model="m"))
        assert found[:2] == ["c", "d"] and sorted(found[2:]) == ["a", "b"]

    def test_facts_to_embed_lists_what_the_model_has_not_embedded(self, store: Store) -> None:
        _put(store, "c_none", None)
        _put(store, "a_other", _emb("other", [1, 0]))
        _put(store, "b_mine", _emb("m", [1, 0]))
        _put(store, "d_unindexed", _emb("m"))
        _put(store, "e_none", None)
        _put(store, "f_expired", None, expires_at=time.time() + 0.2)
        _put(store, "g_elsewhere", None, scope="u2")
        time.sleep(0.4)
        assert _keys(store.facts_to_embed(NS, "u", "m")) == ["a_other", "c_none", "e_none"]
        assert _keys(store.facts_to_embed(NS, "u", "m", limit=2)) == ["a_other", "c_none"]
        stale = store.facts_to_embed(NS, "u", "m")[0]
        assert stale.value == "a_other" and stale.version == 1

    def test_set_fact_embedding_guards_the_version(self, store: Store) -> None:
        fact = _put(store, "k", None)
        _put(store, "k", None)  # version 2
        assert not store.set_fact_embedding(NS, "u", "k", fact.version, _emb("m", [1, 0]))
        assert not store.set_fact_embedding(NS, "u", "absent", 1, _emb("m", [1, 0]))
        assert store.search_fact_vectors(NS, "u", [1.0, 0.0], model="m") == []
        before = store.get_fact(NS, "u", "k")
        assert before is not None and before.version == 2
        assert store.set_fact_embedding(NS, "u", "k", 2, _emb("m", [1, 0]))
        after = store.get_fact(NS, "u", "k")
        assert after is not None
        assert (after.version, after.updated_at, after.created_at) == (
            2,
            before.updated_at,
            before.created_at,
        )
        assert _keys(store.search_fact_vectors(NS, "u", [1.0, 0.0], model="m")) == ["k"]
        assert store.facts_to_embed(NS, "u", "m") == []
        assert _keys(store.facts_to_embed(NS, "u", "m2")) == ["k"]

    def test_refresh_fact_moves_the_expiry_and_keeps_the_vectors(self, store: Store) -> None:
        if not supports_refresh(store):  # optional in the contract
            return
        soon = time.time() + 30
        fact = _put(store, "k", _emb("m", [1, 0], [0, 1], fields=["a", "b"]), expires_at=soon)
        assert not store.refresh_fact(NS, "u", "k", fact.version + 1, 90)
        assert not store.refresh_fact(NS, "u", "absent", 1, 90)
        assert store.refresh_fact(NS, "u", "k", fact.version, 90)
        after = store.get_fact(NS, "u", "k")
        assert after is not None and after.value == "k"
        assert after.version == fact.version + 1 and after.created_at == fact.created_at
        assert after.expires_at is not None
        assert after.expires_at - after.updated_at == pytest.approx(90, abs=1e-6)
        assert after.updated_at >= fact.updated_at
        hits = store.search_fact_vectors(NS, "u", [0.0, 1.0], model="m")
        assert _keys(hits) == ["k"] and hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert store.facts_to_embed(NS, "u", "m") == []
        terms = store.match_terms(NS, "u", ["k"])  # its terms stay, for keyword search
        assert [hit.key for hit in terms.hits] == ["k"] and terms.documents == 1
        assert not store.refresh_fact(NS, "u", "k", fact.version, 90)  # written since
        gone = _put(store, "old", _emb("m", [1, 0]), expires_at=time.time() + 0.2)
        time.sleep(0.4)
        assert not store.refresh_fact(NS, "u", "old", gone.version, 60)

        async def go() -> None:
            assert await store.arefresh_fact(NS, "u", "k", fact.version + 1, 120)

        asyncio.run(go())
        again = store.get_fact(NS, "u", "k")
        assert again is not None and again.version == fact.version + 2
        assert _keys(store.search_fact_vectors(NS, "u", [1.0, 0.0], model="m")) == ["k"]

    def test_async_vector_methods(self, store: Store) -> None:
        async def go() -> None:
            await store.aput_fact(NS, "u", "k", '"v"', text="k", embedding=_emb("m", [1, 0]))
            await store.aput_fact(NS, "u", "j", '"v"', text="j")
            assert _keys(await store.asearch_fact_vectors(NS, "u", [1.0, 0.0], model="m")) == ["k"]
            stale = await store.afacts_to_embed(NS, "u", "m")
            assert _keys(stale) == ["j"]
            assert await store.aset_fact_embedding(NS, "u", "j", 1, _emb("m", [0.6, 0.8]))
            assert _keys(await store.asearch_fact_vectors(NS, "u", [0.0, 1.0], model="m")) == [
                "j",
                "k",
            ]

        asyncio.run(go())

    # -- Facts.search through Memory ---------------------------------------------------------

    def _profile(self, memory: Memory) -> None:
        for key, value in PROFILE.items():
            memory.facts.put(key, value)

    def test_semantic_search_finds_what_shares_no_word(self, store: Store) -> None:
        memory = self._memory(store, ConceptEmbedder())
        with memory.session(user_id="alice"):
            self._profile(memory)
            for question, key in QUESTIONS.items():
                assert memory.facts.search(question, mode="keyword") == []
                assert _keys(memory.facts.search(question, limit=1, mode="semantic")) == [key]
                assert _keys(memory.facts.search(question, limit=1)) == [key]  # hybrid default
            hybrid = memory.facts.search("oolong", limit=5)
            assert _keys(hybrid)[0] == "favourite_tea"
            assert all(f.score is not None for f in hybrid)

    def test_hybrid_is_the_default_only_with_an_embedder(self, store: Store) -> None:
        keyword_only = self._memory(store, False)
        assert keyword_only.embedder is None
        with keyword_only.session(user_id="bob"):
            self._profile(keyword_only)
            assert keyword_only.facts.search("Which beverage should I make?") == []
            with pytest.raises(NoEmbedder):
                keyword_only.facts.search("tea", mode="semantic")
            with pytest.raises(NoEmbedder):
                keyword_only.facts.search("tea", mode="hybrid")
            with pytest.raises(InvalidInput):
                keyword_only.facts.search("tea", mode="fuzzy")  # type: ignore[arg-type]

    def test_each_fact_is_embedded_once_in_its_life(self, store: Store) -> None:
        embedder = ConceptEmbedder()
        memory = self._memory(store, embedder)
        with memory.session(user_id="carol", conversation_id="c1"):
            self._profile(memory)
            assert len(embedder.documents) == len(PROFILE)
            for _ in range(3):
                for key in PROFILE:
                    memory.facts.get(key)
                memory.facts.all()
                for question in QUESTIONS:
                    memory.facts.search(question)
                    memory.facts.search(question, mode="semantic")
                    memory.facts.search(question, mode="keyword")
                memory.conversation.window()
            assert len(embedder.documents) == len(PROFILE)
            assert len(embedder.queries) == 3 * 2 * len(QUESTIONS)
            memory.facts.put("home_city", "Porto")  # new text: embedded again, once
            assert len(embedder.documents) == len(PROFILE) + 1
            assert _keys(memory.facts.search("Where do I reside?", limit=1)) == ["home_city"]

    def test_a_new_model_embeds_each_fact_once_when_it_first_searches(self, store: Store) -> None:
        first = self._memory(store, ConceptEmbedder("concepts-v1"))
        with first.session(user_id="dan"):
            self._profile(first)
        plain = self._memory(store, False)
        with plain.session(user_id="dan"):
            plain.facts.put("music", "jazz")  # written with no embedder at all
        second_embedder = ConceptEmbedder("concepts-v2")
        second = self._memory(store, second_embedder)
        with second.session(user_id="dan"):
            assert _keys(second.facts.search("Which beverage should I make?", limit=1)) == [
                "favourite_tea"
            ]
            assert sorted(second_embedder.documents) == sorted(
                [embed_text(k, v) for k, v in {**PROFILE, "music": "jazz"}.items()]
            )
            assert _keys(second.facts.search("a nice melody", limit=1)) == ["music"]
            assert len(second_embedder.documents) == len(PROFILE) + 1

    def test_an_embedder_that_fails_never_fails_a_write_or_a_default_search(
        self, store: Store
    ) -> None:
        memory = self._memory(store, FailingEmbedder())
        with memory.session(user_id="erin"):
            with pytest.warns(EmbeddingWarning):
                memory.facts.put("favourite_tea", "oolong")
            stored = memory.facts.get("favourite_tea")
            assert stored is not None and stored.value == "oolong"
            with pytest.warns(EmbeddingWarning):
                assert _keys(memory.facts.search("oolong")) == ["favourite_tea"]
            with pytest.raises(EmbedderFailed), warnings.catch_warnings():
                warnings.simplefilter("ignore", EmbeddingWarning)
                memory.facts.search("oolong", mode="semantic")
        healthy = self._memory(store, ConceptEmbedder())
        with healthy.session(user_id="erin"):  # embedded when first searched
            assert _keys(healthy.facts.search("Which beverage?", mode="semantic")) == [
                "favourite_tea"
            ]

    def test_async_search_modes(self, store: Store) -> None:
        memory = self._memory(store, ConceptEmbedder())

        async def go() -> None:
            async with memory.session(user_id="fay"):
                for key, value in PROFILE.items():
                    await memory.facts.aput(key, value)
                for question, key in QUESTIONS.items():
                    assert _keys(await memory.facts.asearch(question, limit=1)) == [key]
                    assert _keys(
                        await memory.facts.asearch(question, limit=1, mode="semantic")
                    ) == [key]
                assert await memory.facts.asearch("Where?", mode="keyword") == []

        asyncio.run(go())
