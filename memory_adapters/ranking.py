"""Ranking: the one place where search results are scored.

Stores find candidates and count statistics through their own indexes; they never rank. What
they find is scored here, with one formula, so that every store, built-in or third-party,
returns the same order and the same scores for the same facts and query:

* **Words** (:func:`index_terms`, :func:`query_terms`): one analyzer for texts and queries.
  Text is folded (NFKC, lower case, accents removed), split into runs of letters and digits
  (an apostrophe splits: "Caroline's" is "caroline" and "s"), English stop words are dropped
  (clitics such as the ``s`` of a possessive and the ``t`` of "don't" included) and each word
  is reduced to its English Snowball stem ("researched" and "research" are both ``research``).
  A store keeps a fact's terms as :meth:`Store.put_fact <memory_adapters.store.Store.put_fact>`
  gives them: space-separated, in order.
* **Keyword scores** (:func:`bm25`): Okapi BM25 with ``k1 =`` :data:`K1`, ``b =`` :data:`B`
  and the idf ``ln(1 + (N - df + 0.5) / (df + 0.5))``. Its statistics (``N`` facts, their
  average length, each term's document frequency ``df``) are those of the searched scope
  alone (namespace and scope): what other scopes hold never changes a scope's scores.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ANALYZER = "snowball-english-1"
"""The name of the analyzer below. A store that keeps terms keeps them in this analyzer's
form; a change to the analyzer is a new name, and a schema migration that indexes every fact
again."""

MAX_QUERY_TERMS = 32
"""A search uses at most this many distinct terms of its query (the first ones)."""

MAX_TERM_LENGTH = 200
"""Longest word indexed or searched, in characters; longer words are dropped."""

K1 = 1.2
"""BM25's term-frequency saturation: a word repeated in a fact counts less each time."""

B = 0.5
"""BM25's length normalization: a long fact's matches count less than a short one's. Half
the textbook 0.75: in conversations a long turn usually says more, not the same thing at
length (on ``benchmarks/recall.py``'s turns, 0.5 finds 0.03 more at recall@5 by keyword, and
the same on facts)."""

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

_STOP_WORDS = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    s t d ll m re ve y don doesn didn isn aren wasn weren hasn haven hadn won wouldn shouldn
    couldn mustn needn shan ain let
"""
STOP_WORDS = frozenset(_STOP_WORDS.split())
"""English words that say nothing about what a text is about, dropped from texts and queries:
the Snowball list PostgreSQL's ``english`` configuration uses, with the pieces an apostrophe
leaves (``s``, ``t``, ``ll``, ``re``, ``ve``, ``d``, ``m``, ``don``, ``didn``...)."""

_STEMS: dict[str, str] = {}
_STEMS_MAX = 200_000
_stemmer_local = threading.local()


def _stemmer() -> object:
    stemmer = getattr(_stemmer_local, "stemmer", None)
    if stemmer is None:
        import snowballstemmer

        stemmer = _stemmer_local.stemmer = snowballstemmer.stemmer("english")
    return stemmer


def stem(word: str) -> str:
    """The English Snowball stem of a folded word (kept per process: stemming is the slow
    part of analysis)."""
    found = _STEMS.get(word)
    if found is None:
        found = _stemmer().stemWord(word)  # type: ignore[attr-defined]
        if len(_STEMS) >= _STEMS_MAX:  # no lock: a lost entry is only computed again
            _STEMS.clear()
        _STEMS[word] = found
    return found


def fold(text: str) -> str:
    """``text`` in lower case, compatibility-normalized, accents removed ("Café" is
    "cafe")."""
    text = unicodedata.normalize("NFKD", text.lower())
    if text.isascii():
        return text
    return "".join(c for c in text if not unicodedata.combining(c))


def words(text: str) -> list[str]:
    """The folded words of ``text`` that are neither stop words nor longer than
    :data:`MAX_TERM_LENGTH`, unstemmed."""
    return [
        w for w in _TOKEN.findall(fold(text)) if w not in STOP_WORDS and len(w) <= MAX_TERM_LENGTH
    ]


def index_terms(text: str) -> list[str]:
    """The terms a text is indexed under, in order, repeats kept: its :func:`words`,
    stemmed."""
    return [stem(w) for w in words(text)]


def query_terms(query: str) -> list[str]:
    """The distinct terms of a search query, in order, at most :data:`MAX_QUERY_TERMS`."""
    seen: dict[str, None] = {}
    for w in words(query):
        seen.setdefault(stem(w), None)
        if len(seen) == MAX_QUERY_TERMS:
            break
    return list(seen)


# -- keyword scores ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TermHit:
    """One fact holding at least one of a search's terms, as a store found it: its key, its
    length (how many terms it is indexed under), how often it holds each searched term (in the
    order of the search's terms), and what breaks ties between equal scores."""

    key: str
    length: int
    counts: tuple[int, ...]
    importance: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class TermMatches:
    """What a store answers to a keyword search of one scope
    (:meth:`Store.match_terms <memory_adapters.store.Store.match_terms>`): how many unexpired
    facts the scope holds and how many terms they hold in all (BM25's ``N`` and average
    length), and every unexpired fact holding any of the terms."""

    documents: int
    total_length: int
    hits: list[TermHit]


def idf(documents: int, df: int) -> float:
    """BM25's inverse document frequency of a term held by ``df`` of ``documents`` facts
    (always positive)."""
    return math.log(1.0 + (documents - df + 0.5) / (df + 0.5))


def bm25(matches: TermMatches, terms: Sequence[str]) -> dict[str, float]:
    """The BM25 score of every hit of ``matches`` (by key) for ``terms``: the statistics are
    the scope's (``matches.documents`` and ``matches.total_length``) and the document
    frequencies are counted over the hits. A hit with no searched term scores nothing and is
    left out."""
    n = max(matches.documents, len(matches.hits))
    total = max(matches.total_length, sum(h.length for h in matches.hits))
    avgdl = total / n if n and total else 1.0
    df = [0] * len(terms)
    for hit in matches.hits:
        for i, count in enumerate(hit.counts):
            if count > 0:
                df[i] += 1
    weights = [idf(n, d) if d else 0.0 for d in df]
    scores: dict[str, float] = {}
    for hit in matches.hits:
        norm = K1 * (1.0 - B + B * hit.length / avgdl)
        score = math.fsum(
            w * c * (K1 + 1.0) / (c + norm)
            for w, c in zip(weights, hit.counts, strict=True)
            if c > 0
        )
        if score > 0.0:
            scores[hit.key] = score
    return scores


# -- fusion ----------------------------------------------------------------------------------

KEYWORD_WEIGHT = 0.35
"""The share of the keyword score in a hybrid score (the rest is the semantic score). On
``benchmarks/recall.py``'s conversations the best share was 0.3 with all-MiniLM-L6-v2 and 0.4
with WordLlama (a weaker encoder deserves less trust); 0.35 is within 0.01 recall@5 of the
best for both, on turns and on facts."""

SEMANTIC_DEPTH = 50
"""How many facts nearest in meaning a hybrid search reads (or ``limit``, when more): a fixed
depth, so that the first results of a search are the same at any ``limit``."""


KEYWORD_SCALE = 6.0
"""The BM25 score below which even a search's best keyword hit is a weak one: a hybrid search
weighs a keyword score as its share of the best hit's score or of this, whichever is larger.
(A word that most of a scope's facts hold, or a scope of a handful of facts, scores far below
it, and does not push out what the meaning found; one rare word of the query scores about
``ln(N)``, a few of them more.)"""


def keyword_part(score: float, best: float) -> float:
    """A keyword score as a hybrid search weighs it, 0 to 1: its share of the search's best
    keyword score, or of :data:`KEYWORD_SCALE` when the best is weaker than that."""
    return score / max(best, KEYWORD_SCALE)


def semantic_part(similarity: float | None) -> float:
    """A cosine similarity as a hybrid search weighs it (0 for a fact without a vector)."""
    return 0.0 if similarity is None else max(similarity, 0.0)


def fused(keyword: float, best: float, similarity: float | None) -> float:
    """The hybrid score of a fact: :data:`KEYWORD_WEIGHT` of its :func:`keyword_part` plus
    the rest of its :func:`semantic_part`. It depends only on the fact, the query and the
    scope (never on ``limit``), and grows with each part."""
    return KEYWORD_WEIGHT * keyword_part(keyword, best) + (1.0 - KEYWORD_WEIGHT) * semantic_part(
        similarity
    )


def fuse(keyword: dict[str, float], semantic: dict[str, float | None]) -> dict[str, float]:
    """The hybrid scores (:func:`fused`) of the facts in ``semantic`` (key -> similarity, or
    ``None`` when the fact has no vector), given every keyword hit's score (``keyword``)."""
    best = max(keyword.values(), default=0.0)
    return {key: fused(keyword.get(key, 0.0), best, sim) for key, sim in semantic.items()}


# -- order -------------------------------------------------------------------------------------

CLOSE = 0.01
"""Scores within about this share of each other are close: among close scores, the more
important, then the more recently updated fact comes first (keyword and hybrid search)."""

_LOG_CLOSE = math.log1p(CLOSE)


def band(score: float) -> int:
    """The band of ``score`` (positive): scores in one band are close. Bands are fixed
    (powers of ``1 + CLOSE``), so a fact's band depends only on its own score."""
    return math.floor(math.log(score) / _LOG_CLOSE) if score > 0.0 else -(10**9)


def band_floor(score: float) -> float:
    """The lowest score of ``score``'s band."""
    return math.exp(band(score) * _LOG_CLOSE) if score > 0.0 else -math.inf


def order_key(score: float, importance: float, updated_at: float, key: str) -> tuple[Any, ...]:
    """How results are ordered: by band of score, then the more important, the newer, the
    higher score, and key order."""
    return (-band(score), -importance, -updated_at, -score, key)
