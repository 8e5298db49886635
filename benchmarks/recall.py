"""Search quality and latency of long-term facts on realistic conversations: keyword, semantic
and hybrid search, beside a plain BM25 and a plain cosine baseline.

The data
    ``benchmarks/recall_data/*.json``: four multi-session conversations between two people
    (16-17 dated sessions, about 400 turns each), the facts extracted from them, and 263
    labelled questions, each with the turns and the facts that answer it and its kind
    (single-hop, multi-hop, temporal, open-domain).

Quality
    Each conversation is searched in two units, each in a scope of its own: ``turns`` (every
    turn one fact: key the turn id such as ``S3:12``, value ``"<speaker>: <text>"``, metadata
    the session and its date) and ``facts`` (every extracted fact one fact: key its id, value
    its text). Every question with a label (its evidence turns, or its facts) is asked through
    ``memory.facts.search(question, limit=25, mode=...)`` in each mode; recall@k is the share
    of the question's labelled items among the first k results, averaged over the questions.
    Beside the modes, in the same run and on the same texts: **plain BM25** (textbook Okapi,
    k1 1.2, b 0.75, lower-case ``\\w+`` words, no stop words, no stemming: :class:`PlainBM25`)
    and **plain cosine** (the same embedder's vectors of the same texts, numpy dot products).
    The core ranks, not the stores, so every store must return the same results: the run
    checks that every store's ranked keys equal the first store's.

Latency
    One scope per store and size (1,000, 10,000 and 100,000 facts by default) holds one
    conversation's turns and filler: sentences of the other conversations' turns, shuffled
    and recombined, with their speakers' names swapped among themselves (deterministic). A
    sample of that conversation's questions is asked in the three modes in turn (so drifts in
    the machine's speed fall on all of them alike), each search timed with
    ``time.perf_counter_ns`` and the garbage collector disabled. A semantic or hybrid search
    embeds its query: that is part of its time; the embedder's own time per query is measured
    in the same loop and shown apart. A (row, size) stops asking after its time budget.

Filling is never timed: every text is embedded once per run, in batches, and written through
the store's ``put_fact(..., text=index_text(...), embedding=...)`` with exactly the text and
vector ``facts.put`` would have written. The peer, LangGraph's ``InMemoryStore`` with an
index of the same embedder, is given the same vectors and answers ``store.search(namespace,
query=..., limit=...)`` (semantic only).

Run ``python benchmarks/recall.py --help`` for the options; ``--quick`` is the CI smoke run.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import itertools
import json
import math
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol, cast

from turn_cost import _int_list, percentile

from memory_adapters import Memory
from memory_adapters.embedders import EMBED_BATCH, WHOLE, Embedding, check_vectors
from memory_adapters.facts import SEARCH_MODES, embed_text, index_text, supports_vectors
from memory_adapters.validation import dumps

DATA = Path(__file__).resolve().parent / "recall_data"
UNITS = ("turns", "facts")
KS = (5, 10, 25)
LIMIT = max(KS)
"""Results asked of every quality search."""
LATENCY_LIMIT = 10
"""Results asked of every timed search (its recall@10 is shown beside its time)."""
KINDS = ("single-hop", "multi-hop", "temporal", "open-domain")
MODES = tuple(SEARCH_MODES)  # keyword, semantic, hybrid
PLAIN = ("plain-bm25", "plain-cosine")
DEFAULT_SIZES = (1000, 10000, 100000)
QUICK_SIZES = (1000,)
DEFAULT_BUDGET_S = 30.0
"""Seconds of timed searching one (row, size) may take before its remaining questions are
skipped (marked ``*``)."""
QUICK_BUDGET_S = 2.0
LATENCY_QUESTIONS = 60
QUICK_LATENCY_QUESTIONS = 10
QUICK_QUESTIONS = 20
"""``--quick``: questions asked per conversation for quality (the first ones)."""
WARMUP = 2
"""Questions asked in every mode before timing, per row and size."""
FAKE_MAX_SIZE = 1000
"""``mongo-fake`` (mongomock scans every document in Python) measures quality on the first
conversation only and latency at sizes up to this, unless ``--sizes`` names them."""
MARGIN = 0.01
"""The verdict: hybrid recall@5 at least the better single mode's minus this."""
NA_VECTORS = "n/a (no vector search)"


# -- the data -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    text: str
    kind: str
    labels: dict[str, tuple[str, ...]]
    """Per unit, the keys that answer the question (its evidence turns, its facts)."""


@dataclass(slots=True)
class Items:
    """What one scope holds: keys, values, metadata, the texts a store indexes, the texts
    embedded and their vectors (filled in by :meth:`Vectors.fill`)."""

    keys: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    metadata: list[str | None] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    embedded: list[str] = field(default_factory=list)
    vectors: list[list[float]] = field(default_factory=list)

    def add(self, key: str, value: str, metadata: dict[str, str] | None = None) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.metadata.append(None if metadata is None else json.dumps(metadata, sort_keys=True))
        self.texts.append(index_text(key, value))
        self.embedded.append(embed_text(key, value))


@dataclass(slots=True)
class Dialogue:
    id: str
    speakers: list[str]
    units: dict[str, Items]
    questions: list[Question]
    sentences: list[str]


def load(path: Path) -> Dialogue:
    raw = json.loads(path.read_text(encoding="utf-8"))
    turns, facts = Items(), Items()
    sentences = []
    for session in raw["sessions"]:
        for t in session["turns"]:
            meta = {"session": session["id"], "date": session["date"]}
            turns.add(t["id"], f"{t['speaker']}: {t['text']}", meta)
            sentences += [s for s in re.split(r"(?<=[.!?])\s+", t["text"]) if s]
    for f in raw["facts"]:
        facts.add(f["id"], f["text"])
    questions = [
        Question(
            q["id"],
            q["question"],
            q["kind"],
            {"turns": tuple(q["evidence"]), "facts": tuple(q["facts"])},
        )
        for q in raw["questions"]
    ]
    units = {"turns": turns, "facts": facts}
    return Dialogue(raw["id"], list(raw["speakers"]), units, questions, sentences)


def dialogues() -> list[Dialogue]:
    return [load(p) for p in sorted(DATA.glob("*.json"))]


def _swap(mapping: dict[str, str], match: re.Match[str]) -> str:
    return mapping[match.group(1)]


def filler(others: Sequence[Dialogue], seed: int = 7) -> Iterator[tuple[str, str]]:
    """Deterministic distractor turns (key, value), without end, from the vocabulary of
    ``others``: one to three of their sentences, recombined, said by one of their speakers,
    every speaker's name swapped for another's; no value twice."""
    names = sorted({s for d in others for s in d.speakers})
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    sentences = [s for d in others for s in d.sentences]
    rng = random.Random(seed)
    seen: set[str] = set()
    for i in itertools.count():
        swapped = names[:]
        rng.shuffle(swapped)
        mapping = dict(zip(names, swapped, strict=True))
        picked = " ".join(rng.choice(sentences) for _ in range(rng.randint(1, 3)))
        text = pattern.sub(partial(_swap, mapping), picked)
        value = f"{rng.choice(swapped)}: {text}"
        if value not in seen:
            seen.add(value)
            yield f"X:{i}", value


class Vectors:
    """The embedder's unit vectors, each text embedded once per run, in batches."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self.cache: dict[tuple[str, str], list[float]] = {}
        self.seconds = 0.0
        self.count = 0

    def get(self, texts: Sequence[str], input_type: str) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if (input_type, t) not in self.cache))
        start = time.perf_counter()
        for at in range(0, len(missing), EMBED_BATCH):
            batch = missing[at : at + EMBED_BATCH]
            found = check_vectors(self.embedder.embed(batch, input_type), len(batch), "embedder")
            self.cache.update(((input_type, t), v) for t, v in zip(batch, found, strict=True))
        self.seconds += time.perf_counter() - start
        self.count += len(missing)
        return [self.cache[(input_type, t)] for t in texts]

    def fill(self, items: Items) -> None:
        items.vectors = self.get(items.embedded, "document")


# -- the baselines -------------------------------------------------------------------------------

_WORD = re.compile(r"\w+")


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class PlainBM25:
    """Textbook Okapi BM25 over ``texts``: k1 1.2, b 0.75, idf ln(1 + (N - df + .5) / (df +
    .5)), lower-case ``\\w+`` words, no stop words, no stemming."""

    def __init__(self, texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        docs = [Counter(_tokens(t)) for t in texts]
        lengths = [sum(d.values()) for d in docs]
        average = sum(lengths) / len(docs) if docs else 1.0
        self.postings: dict[str, list[tuple[int, float]]] = {}
        for i, d in enumerate(docs):
            norm = k1 * (1 - b + b * lengths[i] / average)
            for word, tf in d.items():
                self.postings.setdefault(word, []).append((i, tf * (k1 + 1) / (tf + norm)))
        n = len(docs)
        self.idf = {
            w: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for w, p in self.postings.items()
        }

    def top(self, query: str, limit: int) -> list[int]:
        scores: dict[int, float] = {}
        for word in set(_tokens(query)):
            idf = self.idf.get(word, 0.0)
            for i, part in self.postings.get(word, ()):
                scores[i] = scores.get(i, 0.0) + idf * part
        return sorted(scores, key=lambda i: (-scores[i], i))[:limit]


def plain_cosine(
    documents: list[list[float]], queries: list[list[float]], limit: int
) -> list[list[int]]:
    """The ``limit`` documents of greatest dot product (cosine: unit vectors) per query."""
    import numpy as np

    scores = np.asarray(queries, dtype=np.float64) @ np.asarray(documents, dtype=np.float64).T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :limit]
    return [[int(i) for i in row] for row in order]


# -- what is measured: rows ----------------------------------------------------------------------


class Scope(Protocol):
    """One scope of one row."""

    def fill(self, items: Items, start: int, stop: int) -> None:
        """Add items ``start`` to ``stop`` (not timed)."""
        ...

    def search(self, query: str, mode: str, limit: int) -> list[str]:
        """The keys of the best ``limit`` items, best first."""
        ...


class Target(Protocol):
    """One row: a store (or the peer)."""

    label: str
    kind: str  # "store" or "peer"

    def modes(self) -> tuple[str, ...]: ...

    def scope(self, user: str) -> Scope: ...

    def close(self) -> None: ...


class MemoryScope:
    def __init__(self, target: MemoryTarget, user: str) -> None:
        self.target = target
        with target.memory.session(user_id=user):
            self.facts = target.memory.facts

    def fill(self, items: Items, start: int, stop: int) -> None:
        store, model = self.target.memory.store, self.target.model
        namespace, scope = self.facts.namespace, self.facts.scope.fact_scope
        for i in range(start, stop):
            options: dict[str, Any] = {"text": items.texts[i]}
            if self.target.vectors:  # what facts.put writes (a store without vectors: none)
                vector = items.vectors[i]
                options["embedding"] = Embedding(model, len(vector), {WHOLE: vector})
            if items.metadata[i] is not None:
                options["metadata"] = items.metadata[i]
            store.put_fact(namespace, scope, items.keys[i], dumps(items.values[i]), **options)
        if self.target.after_fill is not None:
            self.target.after_fill(store)

    def search(self, query: str, mode: str, limit: int) -> list[str]:
        return [f.key for f in self.facts.search(query, limit=limit, mode=cast(Any, mode))]


class MemoryTarget:
    """memory-adapters' ``Memory`` over the store at ``url``."""

    kind = "store"

    def __init__(
        self,
        url: str,
        embedder: Any,
        *,
        label: str | None = None,
        store_options: dict[str, Any] | None = None,
        after_fill: Callable[[Any], None] | None = None,
    ) -> None:
        self.label = label or url
        self.after_fill = after_fill
        self.memory = Memory(url, embed=embedder, store_options=store_options)
        self.vectors = supports_vectors(self.memory.store)
        self.model = embedder.name

    def modes(self) -> tuple[str, ...]:
        return MODES if self.vectors else ("keyword",)

    def scope(self, user: str) -> Scope:
        return MemoryScope(self, user)

    def close(self) -> None:
        self.memory.close()


class LangGraphScope:
    def __init__(self, target: LangGraphTarget, user: str) -> None:
        self.target = target
        self.namespace = ("memories", user)

    def fill(self, items: Items, start: int, stop: int) -> None:
        from langgraph.store.base import PutOp

        target = self.target
        target.cache = dict(zip(items.embedded[start:stop], items.vectors[start:stop], strict=True))
        try:
            for at in range(start, stop, 4096):
                end = min(stop, at + 4096)
                target.store.batch(
                    [
                        PutOp(self.namespace, items.keys[i], {"text": items.embedded[i]})
                        for i in range(at, end)
                    ]
                )
        finally:
            target.cache = None  # queries are embedded for real

    def search(self, query: str, mode: str, limit: int) -> list[str]:
        found = self.target.store.search(self.namespace, query=query, limit=limit)
        return [item.key for item in found]


class LangGraphTarget:
    """The peer: LangGraph's ``InMemoryStore`` with an index of the same embedder."""

    kind = "peer"

    def __init__(self, embedder: Any, dims: int) -> None:
        from langgraph.store.base import IndexConfig
        from langgraph.store.memory import InMemoryStore

        self.label = f'langgraph InMemoryStore(index={{"dims": {dims}, "embed": {embedder.name}}})'
        self.cache: dict[str, list[float]] | None = None

        def embed(texts: Sequence[str]) -> list[list[float]]:
            cache = self.cache
            if cache is not None and all(t in cache for t in texts):
                return [cache[t] for t in texts]
            vectors: list[list[float]] = embedder.embed(list(texts), "query")
            return vectors

        index: IndexConfig = {"dims": dims, "embed": embed, "fields": ["text"]}
        self.store = InMemoryStore(index=index)

    def modes(self) -> tuple[str, ...]:
        return ("semantic",)

    def scope(self, user: str) -> Scope:
        return LangGraphScope(self, user)

    def close(self) -> None:
        pass


# -- the rows' factories -------------------------------------------------------------------------

TargetFactory = Callable[[Path, Any, int], Target | str]
"""``factory(workdir, embedder, dims)``: the row's target, or why the row cannot run."""


def _memory(workdir: Path, embedder: Any, dims: int) -> Target | str:
    return MemoryTarget("memory://", embedder)


def _sqlite(workdir: Path, embedder: Any, dims: int) -> Target | str:
    return MemoryTarget(f"sqlite:///{workdir}/recall.db", embedder)


def _analyze(store: Any) -> None:
    """``ANALYZE`` the store's tables after a bulk fill, as autovacuum soon would: without it
    the planner believes the freshly filled tables empty and picks slow joins."""
    with store.pool.connection() as conn:
        for table in ("facts", "fact_vectors"):
            conn.execute(f'ANALYZE "{store.schema}".{table}')


def _schema() -> str:
    return "recall_" + os.urandom(4).hex()


def _postgres(workdir: Path, embedder: Any, dims: int) -> Target | str:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "n/a (psycopg is not installed)"
    from postgres import server_url

    from memory_adapters.testing.postgres_server import PostgresUnavailable

    try:
        url = server_url()
    except PostgresUnavailable as exc:
        return f"n/a ({exc})"
    return MemoryTarget(
        url,
        embedder,
        label="postgresql, exact search in Python (no pgvector)",
        store_options={"vector_search": "exact", "schema": _schema()},
        after_fill=_analyze,
    )


_pgvector_server: Any = None


def _postgres_pgvector(workdir: Path, embedder: Any, dims: int) -> Target | str:
    global _pgvector_server
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "n/a (psycopg is not installed)"
    from memory_adapters.testing.postgres_server import PostgresUnavailable, TemporaryPostgres

    if _pgvector_server is None:
        try:
            server = TemporaryPostgres(binaries="pgserver").start()
        except PostgresUnavailable as exc:
            return f"n/a ({exc})"
        atexit.register(server.cleanup)
        _pgvector_server = server
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MemoryTarget(
            _pgvector_server.url,
            embedder,
            label="postgresql with pgvector (pgserver's PostgreSQL; exact in SQL)",
            store_options={"vector_search": "pgvector", "schema": _schema()},
            after_fill=_analyze,
        )


def _mongo_fake(workdir: Path, embedder: Any, dims: int) -> Target | str:
    try:
        import mongomock
    except ImportError:
        return "n/a (mongomock is not installed)"
    return MemoryTarget(
        "mongodb://mongomock/recall",
        embedder,
        label="mongomock (in-process fake, not a server: its timings mean nothing)",
        store_options={"client": mongomock.MongoClient()},
    )


def _langgraph(workdir: Path, embedder: Any, dims: int) -> Target | str:
    try:
        import langgraph.store.memory  # noqa: F401
    except ImportError:
        return "n/a (langgraph is not installed)"
    return LangGraphTarget(embedder, dims)


ROWS: dict[str, TargetFactory] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "postgres": _postgres,
    "postgres-pgvector": _postgres_pgvector,
    "mongo-fake": _mongo_fake,
    "langgraph": _langgraph,
}
"""Rows, by ``--stores`` name."""


# -- quality -------------------------------------------------------------------------------------

Ranked = dict[tuple[str, str, str, str], list[str]]
"""(conversation, unit, question id, mode) -> the keys found, best first."""


def labelled(d: Dialogue, unit: str, count: int | None) -> list[Question]:
    """The questions of ``d`` with a label in ``unit``: all, or ``count`` spread evenly over
    the conversation (so that every kind is asked)."""
    asked = d.questions
    if count is not None and count < len(asked):
        asked = [asked[i * len(asked) // count] for i in range(count)]
    return [q for q in asked if q.labels[unit]]


def rank_store(
    target: Target, ds: Sequence[Dialogue], count: int | None, tag: str
) -> tuple[Ranked, float]:
    """Every labelled question of ``ds`` in every mode of ``target``, on fresh scopes."""
    ranked: Ranked = {}
    start = time.perf_counter()
    for d in ds:
        for unit in UNITS:
            items = d.units[unit]
            scope = target.scope(f"{tag}-{d.id}-{unit}")
            scope.fill(items, 0, len(items.keys))
            for q in labelled(d, unit, count):
                for mode in target.modes():
                    ranked[(d.id, unit, q.id, mode)] = scope.search(q.text, mode, LIMIT)
    return ranked, time.perf_counter() - start


def rank_plain(ds: Sequence[Dialogue], count: int | None, vectors: Vectors) -> Ranked:
    """Plain BM25 and plain cosine over the same texts: the values as stored."""
    ranked: Ranked = {}
    for d in ds:
        for unit in UNITS:
            items = d.units[unit]
            asked = labelled(d, unit, count)
            bm25 = PlainBM25(items.values)
            for q in asked:
                ranked[(d.id, unit, q.id, "plain-bm25")] = [
                    items.keys[i] for i in bm25.top(q.text, LIMIT)
                ]
            docs = vectors.get(items.values, "document")
            queries = vectors.get([q.text for q in asked], "query")
            for q, top in zip(asked, plain_cosine(docs, queries, LIMIT), strict=True):
                ranked[(d.id, unit, q.id, "plain-cosine")] = [items.keys[i] for i in top]
    return ranked


def recalls(
    ranked: Ranked, ds: Sequence[Dialogue], count: int | None, kind: str | None = None
) -> dict[str, dict[str, dict[int, float]]]:
    """unit -> mode -> k -> recall@k averaged over the questions (of ``kind``, if given)."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    modes = list(dict.fromkeys(m for (_, _, _, m) in ranked))
    for unit in UNITS:
        for mode in modes:
            shares: dict[int, list[float]] = {k: [] for k in KS}
            for d in ds:
                for q in labelled(d, unit, count):
                    found = ranked.get((d.id, unit, q.id, mode))
                    if found is None or (kind is not None and q.kind != kind):
                        continue
                    want = set(q.labels[unit])
                    for k in KS:
                        shares[k].append(len(want & set(found[:k])) / len(want))
            if shares[KS[0]]:
                out.setdefault(unit, {})[mode] = {k: statistics.fmean(v) for k, v in shares.items()}
    return out


# -- latency -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    store: str
    size: int
    mode: str
    searches: int
    median_ms: float | None = None
    p90_ms: float | None = None
    embed_ms: float | None = None
    recall10: float | None = None
    """Recall@10 of the turns over the questions asked, among the filler."""
    asked: int = 0
    fill_s: float | None = None
    stopped: bool = False
    """The time budget ran out before every question was asked."""
    note: str = ""
    p95_ms: float | None = None


def measure(
    name: str,
    target: Target,
    items: Items,
    sizes: Sequence[int],
    asked: Sequence[Question],
    embedder: Any,
    budget_s: float,
) -> Iterator[Row]:
    """Fill one scope of ``target`` size by size and time the questions in every mode."""
    scope = target.scope("latency")
    filled = 0
    modes = target.modes()
    for size in sizes:
        start = time.perf_counter()
        scope.fill(items, filled, size)
        filled = size
        fill_s = time.perf_counter() - start
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for q in asked[:WARMUP]:
                for mode in modes:
                    scope.search(q.text, mode, LATENCY_LIMIT)
        times: dict[str, list[int]] = {m: [] for m in modes}
        embeds: list[int] = []
        hits: dict[str, list[float]] = {m: [] for m in modes}
        began = time.perf_counter()
        stopped = False
        gc.collect()
        gc.disable()
        try:
            for n, q in enumerate(asked):
                if n and time.perf_counter() - began > budget_s:
                    stopped = True
                    break
                order = modes[n % len(modes) :] + modes[: n % len(modes)]
                for mode in order:
                    t0 = time.perf_counter_ns()
                    keys = scope.search(q.text, mode, LATENCY_LIMIT)
                    times[mode].append(time.perf_counter_ns() - t0)
                    want = set(q.labels["turns"])
                    hits[mode].append(len(want & set(keys)) / len(want))
                t0 = time.perf_counter_ns()
                embedder.embed([q.text], "query")
                embeds.append(time.perf_counter_ns() - t0)
        finally:
            gc.enable()
        embed_ms = statistics.median(embeds) / 1e6
        for mode in MODES:
            if mode not in modes:
                if target.kind == "store":
                    yield Row(name, size, mode, 0, note=NA_VECTORS)
                continue
            found = sorted(t / 1e6 for t in times[mode])
            yield Row(
                name,
                size,
                mode,
                len(found),
                statistics.median(found),
                percentile(found, 90),
                embed_ms,
                statistics.fmean(hits[mode]),
                len(hits[mode]),
                fill_s,
                stopped,
                p95_ms=percentile(found, 95),
            )


# -- output -------------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def quality_lines(table: dict[str, dict[str, dict[int, float]]], modes: Sequence[str]) -> list[str]:
    headers = ["mode", *(f"{u} r@{k}" for u in UNITS for k in KS)]
    rows = []
    for mode in modes:
        cells = [mode]
        for unit in UNITS:
            r = table.get(unit, {}).get(mode)
            cells += ["-" if r is None else f"{r[k]:.3f}" for k in KS]
        rows.append(cells)
    return _table(headers, rows)


def kind_lines(
    by_kind: dict[str, dict[str, dict[str, dict[int, float]]]],
    modes: Sequence[str],
    counts: dict[str, dict[str, int]],
) -> list[str]:
    headers = [
        "unit",
        "mode",
        *(f"{k} ({counts['turns'].get(k, 0)}/{counts['facts'].get(k, 0)})" for k in KINDS),
    ]
    rows = []
    for unit in UNITS:
        for mode in modes:
            cells = [unit, mode]
            for kind in KINDS:
                r = by_kind.get(kind, {}).get(unit, {}).get(mode)
                cells.append("-" if r is None else f"{r[5]:.3f}")
            rows.append(cells)
    return _table(headers, rows, left=2)


LATENCY_COLUMNS = (
    ("store", 17),
    ("facts", 6),
    ("mode", 8),
    ("median ms", 9),
    ("p90 ms", 8),
    ("embed ms", 8),
    ("r@10", 6),
    ("asked", 5),
    ("fill s", 6),
)


def latency_line(cells: Sequence[str]) -> str:
    """One line of the latency table (a row that did not run: its reason after the mode)."""
    out = []
    for i, cell in enumerate(cells):
        width = LATENCY_COLUMNS[i][1]
        out.append(cell.ljust(width) if i < 3 or len(cells) == 4 else cell.rjust(width))
    return "  ".join(out).rstrip()


def latency_cells(r: Row) -> list[str]:
    if r.median_ms is None:
        return [r.store, str(r.size) if r.size else "-", r.mode, r.note]
    assert r.p90_ms is not None and r.embed_ms is not None and r.fill_s is not None
    star = "*" if r.stopped else ""
    return [
        r.store,
        str(r.size),
        r.mode,
        f"{r.median_ms:.2f}",
        f"{r.p90_ms:.2f}",
        f"{r.embed_ms:.2f}",
        f"{r.recall10:.2f}{star}",
        f"{r.asked}{star}",
        f"{r.fill_s:.1f}",
    ]


def latency_lines(rows: Sequence[Row]) -> list[str]:
    header = [latency_line([c for c, _ in LATENCY_COLUMNS])]
    header.append(latency_line(["-" * w for _, w in LATENCY_COLUMNS]))
    return header + [latency_line(latency_cells(r)) for r in rows]


def ratios(rows: Sequence[Row]) -> list[str]:
    """Per store and mode, the median at the largest size over the smallest; and LangGraph's
    semantic search over each store's, per size."""
    lines = []
    timed = [r for r in rows if r.median_ms is not None]
    for store, mode in dict.fromkeys((r.store, r.mode) for r in timed):
        mine = sorted(
            (r for r in timed if r.store == store and r.mode == mode), key=lambda r: r.size
        )
        if len(mine) > 1:
            lo, hi = cast(float, mine[0].median_ms), cast(float, mine[-1].median_ms)
            lines.append(f"{store} {mode}: median {mine[-1].size}/{mine[0].size}: {hi / lo:.1f}")
    peer = {r.size: cast(float, r.median_ms) for r in timed if r.store == "langgraph"}
    for store in dict.fromkeys(r.store for r in timed if r.store != "langgraph"):
        cells = [
            f"{r.size}: {cast(float, r.median_ms) / peer[r.size]:.2f}"
            for r in timed
            if r.store == store and r.mode == "semantic" and r.size in peer
        ]
        if cells:
            lines.append(f"{store} semantic / langgraph semantic, median: " + ", ".join(cells))
    return lines


def verdicts(table: dict[str, dict[str, dict[int, float]]]) -> list[dict[str, Any]]:
    """Per unit: hybrid recall@5 at least the better single mode's minus :data:`MARGIN`, and
    above plain BM25 and plain cosine."""
    out = []
    for unit in UNITS:
        r = {m: v[5] for m, v in table.get(unit, {}).items()}
        if not all(m in r for m in (*MODES, *PLAIN)):
            continue
        best = max(r["keyword"], r["semantic"])
        out.append(
            {
                "unit": unit,
                "recall5": r,
                "hybrid_vs_best_mode": r["hybrid"] - best,
                "holds_modes": r["hybrid"] >= best - MARGIN - 1e-9,
                "holds_plain": r["hybrid"] > r["plain-bm25"] and r["hybrid"] > r["plain-cosine"],
            }
        )
    return out


def environment(args: argparse.Namespace, embedder: Any) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "embedder": embedder.name,
        "stores": args.stores,
        "sizes": args.sizes,
        "budget_s": args.budget,
        "quick": args.quick,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# -- command line -------------------------------------------------------------------------------


def _store_list(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in ROWS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown store(s) {', '.join(unknown) or text!r}; known: {', '.join(ROWS)}"
        )
    return list(dict.fromkeys(names))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="recall.py",
        description="Recall@5/10/25 of keyword, semantic and hybrid fact search on labelled "
        "conversations (beside plain BM25 and plain cosine), and search latency per store.",
    )
    parser.add_argument(
        "--stores",
        type=_store_list,
        default=None,
        help=f"comma-separated rows, from: {', '.join(ROWS)} (default: all; --quick: "
        "memory,sqlite)",
    )
    parser.add_argument(
        "--sizes",
        type=_int_list,
        default=None,
        help="comma-separated numbers of facts in the latency scope "
        f"(default: {','.join(map(str, DEFAULT_SIZES))}; --quick: {QUICK_SIZES[0]})",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"seconds of timed searching per row and size before the remaining questions are "
        f"skipped (default: {DEFAULT_BUDGET_S:.0f}; --quick: {QUICK_BUDGET_S:.0f})",
    )
    parser.add_argument(
        "--embed",
        metavar="NAME",
        default=None,
        help="the embedder, as Memory(embed=NAME) takes it (default: Memory's default)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"CI smoke run: memory and sqlite, one conversation, {QUICK_QUESTIONS} questions, "
        f"{QUICK_SIZES[0]} facts",
    )
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.sizes_given = args.sizes is not None
    if args.stores is None:
        args.stores = ["memory", "sqlite"] if args.quick else list(ROWS)
    if args.sizes is None:
        args.sizes = list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.budget is None:
        args.budget = QUICK_BUDGET_S if args.quick else DEFAULT_BUDGET_S
    return args


def embedder_of(name: str | None) -> Any:
    """The embedder ``Memory(embed=name)`` picks (``None``: none is installed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Memory("memory://", embed=name).embedder


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    embedder = embedder_of(args.embed)
    if embedder is None:
        print("recall.py needs an embedder: install the embeddings extra, or pass --embed NAME")
        return 2
    env = environment(args, embedder)
    every = dialogues()
    ds = every[:1] if args.quick else every
    count = QUICK_QUESTIONS if args.quick else None
    vectors = Vectors(embedder)
    for d in ds:
        for items in d.units.values():
            vectors.fill(items)
    dims = len(ds[0].units["turns"].vectors[0])

    # the latency scope: the first conversation's turns, then filler from the others'
    subject = ds[0]
    others = [d for d in every if d is not subject] or [subject]
    latency = Items()
    turns = subject.units["turns"]
    for i, key in enumerate(turns.keys):
        latency.add(key, turns.values[i])
    values = set(latency.values)
    for key, value in filler(others):
        if len(latency.keys) >= max(args.sizes):
            break
        if value not in values:
            latency.add(key, value)
    vectors.fill(latency)
    asked = [q for q in subject.questions if q.labels["turns"]]
    random.Random(5).shuffle(asked)
    asked = asked[: QUICK_LATENCY_QUESTIONS if args.quick else LATENCY_QUESTIONS]

    questions = sum(len(labelled(d, u, count)) for d in ds for u in UNITS)
    load = env["load_average"]
    print(
        f"recall: facts.search(question, limit={LIMIT}) by keyword, semantic and hybrid on "
        f"{len(ds)} labelled conversation(s) ({questions} question-units), beside plain BM25 "
        "and plain cosine"
    )
    print(
        f"embedder {embedder.name} ({dims} dims): {vectors.count} texts embedded once in "
        f"{vectors.seconds:.1f} s (not timed) | python {env['python']} | {env['platform']} | "
        f"{env['cpus']} cpus | load average "
        + (" ".join(f"{v:.2f}" for v in load) if load else "n/a")
    )

    quality: dict[str, Any] = {}
    rankings: dict[str, Ranked] = {}
    rows: list[Row] = []
    labels: dict[str, str] = {}
    plain = rank_plain(ds, count, vectors)
    with tempfile.TemporaryDirectory(prefix="recall-") as tmp:
        for name in args.stores:
            workdir = Path(tmp, name).resolve()
            workdir.mkdir()
            try:
                made = ROWS[name](workdir, embedder, dims)
            except Exception as exc:  # a store that cannot open here: its row says why
                made = f"n/a ({type(exc).__name__}: {exc})"
            print()
            if isinstance(made, str):
                print(f"{name}: {made}")
                rows.append(Row(name, 0, "-", 0, note=made))
                continue
            labels[name] = made.label
            fake = name == "mongo-fake"
            try:
                mine = ds[:1] if fake else ds
                ranked, took = rank_store(made, mine, count, name)
                rankings[name] = ranked
                table = recalls({**ranked, **plain}, mine, count)
                quality[name] = table
                scope_note = " (first conversation only)" if fake and len(ds) > 1 else ""
                print(f"quality, {name}: {made.label}{scope_note}, {took:.1f} s")
                for line in quality_lines(table, [*made.modes(), *PLAIN]):
                    print("  " + line)
                sizes = args.sizes
                if fake and not args.sizes_given:
                    sizes = [s for s in sizes if s <= FAKE_MAX_SIZE]
                print(f"latency, {name}:")
                for line in latency_lines([]):
                    print("  " + line)
                for row in measure(name, made, latency, sizes, asked, embedder, args.budget):
                    rows.append(row)
                    print("  " + latency_line(latency_cells(row)), flush=True)
                sys.stdout.flush()
            finally:
                made.close()

    print()
    first = next((n for n in args.stores if n in rankings), None)
    same: dict[str, Any] = {}
    if first is not None:
        for name, ranked in rankings.items():
            shared = [k for k in ranked if k in rankings[first]]
            differ = [k for k in shared if ranked[k] != rankings[first][k]]
            same[name] = {
                "searches": len(shared),
                "differ": len(differ),
                "examples": [list(k) for k in differ[:5]],
            }
            print(
                f"{name}: {len(shared) - len(differ)} of {len(shared)} searches ranked as {first}'s"
                + ("" if not differ else f" -- DIFFER: {differ[:3]}")
            )
    by_kind: dict[str, Any] = {}
    kinds_count: dict[str, dict[str, int]] = {
        u: dict(Counter(q.kind for d in ds for q in labelled(d, u, count))) for u in UNITS
    }
    found: list[dict[str, Any]] = []
    if first is not None:
        both = {**rankings[first], **plain}
        for kind in KINDS:
            by_kind[kind] = recalls(both, ds, count, kind)
        print()
        print(f"recall@5 per question kind ({first}; questions turns/facts):")
        modes = list(dict.fromkeys(m for (_, _, _, m) in rankings[first]))
        for line in kind_lines(by_kind, [*modes, *PLAIN], kinds_count):
            print("  " + line)
        print()
        found = verdicts(quality[first])
        for v in found:
            r = v["recall5"]
            print(
                f"verdict, {v['unit']}: hybrid recall@5 {r['hybrid']:.3f} vs keyword "
                f"{r['keyword']:.3f}, semantic {r['semantic']:.3f} (bar: at least the better "
                f"minus {MARGIN}): "
                + ("holds" if v["holds_modes"] else "DOES NOT HOLD")
                + f"; vs plain BM25 {r['plain-bm25']:.3f}, plain cosine {r['plain-cosine']:.3f}: "
                + ("above both" if v["holds_plain"] else "NOT ABOVE BOTH")
            )
    print()
    for line in ratios(rows):
        print(line)
    if any(r.stopped for r in rows):
        print(f"* the row's {args.budget:.0f} s budget ran out before every question was asked")
    if args.json is not None:
        payload = {
            "benchmark": "recall",
            "environment": env,
            "labels": labels,
            "conversations": [d.id for d in ds],
            "quality": {
                s: {
                    u: {m: {str(k): x for k, x in v.items()} for m, v in t.items()}
                    for u, t in table.items()
                }
                for s, table in quality.items()
            },
            "by_kind": {
                kind: {
                    u: {m: {str(k): x for k, x in v.items()} for m, v in t.items()}
                    for u, t in table.items()
                }
                for kind, table in by_kind.items()
            },
            "kind_counts": kinds_count,
            "identical": same,
            "latency": [asdict(r) for r in rows],
            "verdicts": found,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
