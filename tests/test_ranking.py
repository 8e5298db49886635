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
    assert fused(0.0, 10.0, 1.0) == 1 - KEYWORD_WEIGHT  # no keyword, identical meaning
    weak = KEYWORD_SCALE / 10
    assert math.isclose(fused(weak, weak, 0.0), KEYWORD_WEIGHT / 10)
    assert fused(1.0, 1.0, None) == fused(1.0, 1.0, 0.0) == fused(1.0, 1.0, -0.5)
