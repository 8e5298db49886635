"""The one ranking: the analyzer every store's terms come from, BM25 over a scope's
statistics, and the hybrid score (memory_adapters.ranking)."""

from __future__ import annotations

import math

from memory_adapters.ranking import (
    K1,
    KEYWORD_SCALE,
    KEYWORD_WEIGHT,
    B,
    TermHit,
    TermMatches,
    bm25,
    fused,
    idf,
    index_terms,
    query_terms,
)


def test_possessives_and_clitics_are_not_terms() -> None:
    assert query_terms("What did Caroline's sister research?") == ["carolin", "sister", "research"]
    assert query_terms("I don't think she'll, they've, we're, I'd, I'm") == ["think"]
    assert query_terms("Don\u2019t") == []  # a typographic apostrophe splits too


def test_words_are_folded_and_stemmed_alike_in_texts_and_queries() -> None:
    assert index_terms("Café RÉSUMÉ naïve") == ["cafe", "resum", "naiv"]
    assert index_terms("researched researching research") == ["research"] * 3
    assert query_terms("Adoption agencies") == index_terms("adoption agency")
    assert index_terms("tea, tea and TEA") == ["tea", "tea", "tea"]  # repeats kept, in order
    assert index_terms("favourite_tea D1:3") == ["favourit", "tea", "d1", "3"]


def test_query_terms_are_distinct_and_bounded() -> None:
    assert query_terms("tea Tea TEA teas") == ["tea"]
    assert len(query_terms(" ".join(f"w{i}" for i in range(100)))) == 32
    assert query_terms("x" * 201 + " tea") == ["tea"]


def _hit(key: str, length: int, *counts: int) -> TermHit:
    return TermHit(key, length, counts, 0.0, 0.0)


def test_bm25_by_hand() -> None:
    matches = TermMatches(10, 50, [_hit("a", 5, 2, 0), _hit("b", 10, 1, 1)])
    scores = bm25(matches, ["x", "y"])
    avgdl = 5.0
    idf_x, idf_y = idf(10, 2), idf(10, 1)
    assert idf_x == math.log(1 + (10 - 2 + 0.5) / (2 + 0.5))

    def part(w: float, tf: int, dl: int) -> float:
        return w * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))

    assert math.isclose(scores["a"], part(idf_x, 2, 5), rel_tol=1e-12)
    assert math.isclose(scores["b"], part(idf_x, 1, 10) + part(idf_y, 1, 10), rel_tol=1e-12)


def test_bm25_statistics_are_the_scopes_not_the_hits() -> None:
    """The same hits score higher in a larger scope (rarer terms), whatever else it holds."""
    hits = [_hit("a", 3, 1)]
    small = bm25(TermMatches(2, 6, hits), ["x"])["a"]
    large = bm25(TermMatches(200, 600, hits), ["x"])["a"]
    assert large > small > 0


def test_the_hybrid_score_weighs_weak_keyword_hits_less() -> None:
    assert fused(10.0, 10.0, 0.0) == KEYWORD_WEIGHT  # the best hit, no similarity
    assert math.isclose(fused(0.0, 10.0, 1.0), 1 - KEYWORD_WEIGHT)  # no keyword, same meaning
    weak = KEYWORD_SCALE / 10
    assert math.isclose(fused(weak, weak, 0.0), KEYWORD_WEIGHT / 10)
    assert fused(1.0, 1.0, None) == fused(1.0, 1.0, 0.0) == fused(1.0, 1.0, -0.5)


def test_among_close_scores_newer_facts_come_first() -> None:
    from memory_adapters.ranking import order_key

    old, new = order_key(0.503, 0.0, 100.0, "old"), order_key(0.500, 0.0, 200.0, "new")
    assert sorted([old, new])[0] == new  # within about 1%: the newer first
    far = order_key(0.600, 0.0, 100.0, "old")
    assert sorted([far, new])[0] == far  # far apart: the better first
    important = order_key(0.500, 1.0, 50.0, "important")
    assert sorted([important, new])[0] == important


def test_search_filters_metadata_dates_and_a_floor() -> None:
    import datetime
    import time

    import pytest

    from memory_adapters import Memory
    from memory_adapters.errors import InvalidInput, InvalidValue

    memory = Memory("memory://", embed=False)
    with memory.session(user_id="alice"):
        memory.facts.put("trip", "a trip to Seville", metadata={"source": "chat", "turn": 3})
        cut = time.time()
        time.sleep(0.01)
        memory.facts.put("trip_plan", "planning the Seville trip", metadata={"source": "email"})
        facts = memory.facts
        assert facts.get("trip") is not None and facts.get("trip").metadata == {  # type: ignore[union-attr]
            "source": "chat",
            "turn": 3,
        }
        assert [f.key for f in facts.search("Seville trip", filter={"source": "chat"})] == ["trip"]
        assert [f.key for f in facts.search("Seville", filter={"turn": 3.0})] == ["trip"]
        assert facts.search("Seville", filter={"source": "chat", "turn": 4}) == []
        assert facts.search("chat email") == []  # metadata is never searched
        assert [f.key for f in facts.search("Seville", since=cut)] == ["trip_plan"]
        assert [f.key for f in facts.search("Seville", until=cut)] == ["trip"]
        aware = datetime.datetime.fromtimestamp(cut, datetime.UTC)
        assert [f.key for f in facts.search("Seville", since=aware)] == ["trip_plan"]
        scores = [f.score for f in facts.search("Seville")]
        assert all(s is not None for s in scores)
        top = max(s for s in scores if s is not None)
        assert len(facts.search("Seville", min_score=top)) == 1
        with pytest.raises(InvalidInput, match="aware"):
            facts.search("x", since=datetime.datetime(2025, 1, 1))
        with pytest.raises(InvalidInput, match="filter key"):
            facts.search("x", filter={"a.b": 1})
        with pytest.raises(InvalidInput, match="str, number, bool or None"):
            facts.search("x", filter={"a": [1]})
        with pytest.raises(InvalidInput, match="min_score"):
            facts.search("x", min_score=float("nan"))
        with pytest.raises(InvalidValue, match="metadata must be a dict"):
            facts.put("k", "v", metadata=["x"])  # type: ignore[arg-type]
        with pytest.raises(InvalidValue, match="NUL"):
            facts.put("k", "v", metadata={"a": "x\x00y"})
        assert facts.get("k") is None  # nothing stored
