"""Search latency and recall@5 of long-term facts: keyword, semantic and hybrid search.

What is measured
    For each store and each scope size (1,000, 10,000 and 100,000 facts in one scope by
    default) the benchmark fills one user's scope with the labelled facts of
    :mod:`recall_set` and distractor facts (the filler), then asks every labelled question
    through ``memory.facts.search(question, limit=5, mode=...)`` in the three modes, in turn
    (the modes take turns for each question, so drifts in the machine's speed fall on all of
    them alike), each timed with ``time.perf_counter_ns`` and the garbage collector disabled.
    It reports the median and 90th percentile per search in microseconds and recall@5: the
    share of questions whose fact is among the five returned. The peer, LangGraph's
    ``InMemoryStore(index={"dims": 256, "embed": ...})``, holds the same facts, embedded by
    the same WordLlama model, and answers the same questions with
    ``store.search(namespace, query=..., limit=5)``.

    A semantic or hybrid search embeds its query (LangGraph's too): that is part of its
    latency. The ``embed us`` column is the embedder's own time for one query, measured in the
    same loop, for reference.

    Filling is not timed: the facts are embedded once per run, in batches, and written through
    the store's ``put_fact(..., text=..., embedding=...)`` with exactly the text and vector
    ``facts.put`` would have written (LangGraph is given the same vectors through a cache in
    front of the embedder, used only while filling).

Two question sets (:mod:`recall_set`): ``paraphrase`` questions share no content word with
their fact (checked before every run), so keyword search cannot find them; ``shared``
questions share a word with their fact. The issue's bar: on the paraphrases, hybrid recall@5
within 0.05 of semantic, and far above keyword.

Run ``python benchmarks/recall.py --help`` for the options; ``--quick`` is the CI smoke run.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import inspect
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import recall_set
from turn_cost import _int_list, percentile

from memory_adapters import Memory
from memory_adapters.embedders import WHOLE, Embedding
from memory_adapters.facts import SEARCH_MODES, search_text, supports_vectors
from memory_adapters.validation import dumps

DEFAULT_SIZES = (1000, 10000, 100000)
QUICK_SIZES = (1000,)
DEFAULT_BUDGET_S = 60.0
"""Seconds of searching one (row, size) may take before its remaining questions are skipped
(a slow row at 100,000 facts); recall is then over the questions asked, marked ``*``."""
QUICK_BUDGET_S = 2.0
WARMUP = 1
"""Questions asked in every mode before timing, per row and size."""
FAKE_MAX_SIZE = 1000
"""``mongo-fake`` (mongomock scans every document in Python: about 30 s to fill 1,000 facts,
a quarter of a second per search) runs only sizes up to this, unless ``--sizes`` names them;
``--quick`` leaves it out unless ``--stores`` names it."""
LIMIT = 5
USER_ID = "recall-user"
NAMESPACE = ("memories", USER_ID)
"""LangGraph's namespace for the user's facts."""
BAR = 0.05
"""Hybrid recall@5 must be within this much of semantic recall@5 (the issue's bar)."""
FAR_ABOVE = 0.25
"""... and at least this much above keyword recall@5 ("far above": this benchmark's reading;
on the paraphrases keyword recall is 0 by construction)."""

MODES = tuple(SEARCH_MODES)  # keyword, semantic, hybrid
NA_VECTORS = "n/a (no vector search)"


# -- the questions and facts ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    key: str
    kind: str  # "paraphrase" or "shared"


def questions(seed: int = 5) -> list[Question]:
    """Every labelled question, in a fixed shuffled order (so that a row stopped by its
    budget has asked a fair sample of both sets)."""
    out = [Question(q, f.key, "paraphrase") for f in recall_set.LABELLED for q in f.paraphrases]
    out += [Question(q, f.key, "shared") for f in recall_set.LABELLED for q in f.shared]
    random.Random(seed).shuffle(out)
    return out


@dataclass(slots=True)
class Corpus:
    """The facts of a scope of the largest size (labelled first, then filler), their search
    texts and vectors, embedded once per run."""

    keys: list[str]
    values: list[str]
    texts: list[str]
    vectors: list[list[float]]
    embed_s: float

    @classmethod
    def build(cls, size: int, embedder: Any) -> Corpus:
        facts = [(f.key, f.value) for f in recall_set.LABELLED]
        facts += list(recall_set.filler(max(0, size - len(facts))))
        keys = [k for k, _ in facts]
        values = [v for _, v in facts]
        texts = [search_text(k, v) for k, v in facts]
        start = time.perf_counter()
        vectors: list[list[float]] = []
        for at in range(0, len(texts), 4096):
            vectors.extend(embedder.embed(texts[at : at + 4096], "document"))
        return cls(keys, values, texts, vectors, time.perf_counter() - start)


# -- what is measured: rows ----------------------------------------------------------------------


class Target(Protocol):
    """One row: a store (or the peer) holding one scope of facts."""

    label: str
    kind: str  # "store" or "peer"

    def modes(self) -> tuple[str, ...]:
        """The search modes this row can run (the others print n/a)."""
        ...

    def fill(self, corpus: Corpus, start: int, stop: int) -> None:
        """Add facts ``start`` to ``stop`` of ``corpus`` (not timed)."""
        ...

    def search(self, query: str, mode: str) -> list[str]:
        """The keys of the best ``LIMIT`` facts, best first (timed)."""
        ...

    def close(self) -> None: ...


class MemoryTarget:
    """memory-adapters' ``Memory`` over the store at ``url``, with the WordLlama embedder."""

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
        self._after_fill = after_fill
        self.memory = Memory(url, embed=embedder, store_options=store_options)
        self._session = self.memory.session(user_id=USER_ID)
        self._session.__enter__()
        self.facts = self.memory.facts
        self.store = self.memory.store
        self.vectors = supports_vectors(self.store)
        self.model = embedder.name

    def modes(self) -> tuple[str, ...]:
        return MODES if self.vectors else ("keyword",)

    def fill(self, corpus: Corpus, start: int, stop: int) -> None:
        namespace, scope = self.facts.namespace, self.facts.scope.fact_scope
        for i in range(start, stop):
            options: dict[str, Any] = {"text": corpus.texts[i]}
            if self.vectors:  # exactly what facts.put writes (a store without vectors: nothing)
                vector = corpus.vectors[i]
                options["embedding"] = Embedding(self.model, len(vector), {WHOLE: vector})
            self.store.put_fact(
                namespace, scope, corpus.keys[i], dumps(corpus.values[i]), **options
            )
        if self._after_fill is not None:
            self._after_fill(self.store)

    def search(self, query: str, mode: str) -> list[str]:
        return [f.key for f in self.facts.search(query, limit=LIMIT, mode=cast(Any, mode))]

    def close(self) -> None:
        self._session.__exit__(None, None, None)
        self.memory.close()


class LangGraphTarget:
    """The peer: LangGraph's ``InMemoryStore`` with an index of the same embedder."""

    kind = "peer"
    label = 'langgraph InMemoryStore(index={"dims": 256, "embed": wordllama})'

    def __init__(self, embedder: Any) -> None:
        from langgraph.store.base import IndexConfig
        from langgraph.store.memory import InMemoryStore

        self._embedder = embedder
        self._cache: dict[str, list[float]] | None = None

        def embed(texts: Sequence[str]) -> list[list[float]]:
            cache = self._cache
            if cache is not None and all(t in cache for t in texts):
                return [cache[t] for t in texts]
            vectors: list[list[float]] = self._embedder.embed(list(texts), "query")
            return vectors

        index: IndexConfig = {"dims": 256, "embed": embed, "fields": ["text"]}
        self.store = InMemoryStore(index=index)

    def modes(self) -> tuple[str, ...]:
        return ("semantic",)

    def fill(self, corpus: Corpus, start: int, stop: int) -> None:
        from langgraph.store.base import PutOp

        self._cache = dict(zip(corpus.texts[start:stop], corpus.vectors[start:stop], strict=True))
        try:
            for at in range(start, stop, 4096):
                end = min(stop, at + 4096)
                self.store.batch(
                    [
                        PutOp(NAMESPACE, corpus.keys[i], {"text": corpus.texts[i]})
                        for i in range(at, end)
                    ]
                )
        finally:
            self._cache = None  # queries are embedded for real

    def search(self, query: str, mode: str) -> list[str]:
        return [item.key for item in self.store.search(NAMESPACE, query=query, limit=LIMIT)]

    def close(self) -> None:
        pass


# -- the rows' factories -------------------------------------------------------------------------

TargetFactory = Callable[[Path, Any], Target | str]
"""``factory(workdir, embedder)``: the row's target, or why the row cannot run (printed)."""


def _memory(workdir: Path, embedder: Any) -> Target | str:
    return MemoryTarget("memory://", embedder)


def _sqlite(workdir: Path, embedder: Any) -> Target | str:
    return MemoryTarget(f"sqlite:///{workdir}/recall.db", embedder)


def _postgres_options(vector_search: str) -> dict[str, Any] | None:
    """``vector_search=...`` where the PostgreSQL store takes that option."""
    from memory_adapters_postgres.store import PostgresStore

    if "vector_search" in inspect.signature(PostgresStore.__init__).parameters:
        return {"vector_search": vector_search, "schema": "recall_" + os.urandom(4).hex()}
    return {"schema": "recall_" + os.urandom(4).hex()}


def _analyze(store: Any) -> None:
    """``ANALYZE`` the store's tables after a bulk fill: what autovacuum does soon after one.
    Without it the planner still believes the freshly filled tables empty, and the exact
    search's join takes about 8 times longer (400 ms instead of 50 at 1,000 facts here)."""
    with store.pool.connection() as conn:
        for table in ("facts", "fact_vectors"):
            conn.execute(f'ANALYZE "{store.schema}".{table}')


def _postgres(workdir: Path, embedder: Any) -> Target | str:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "n/a (psycopg is not installed)"
    from postgres import server_url

    return MemoryTarget(
        server_url(),
        embedder,
        label="postgresql, exact search in Python (no pgvector)",
        store_options=_postgres_options("exact"),
        after_fill=_analyze,
    )


_pgvector_server: Any = None


def _postgres_pgvector(workdir: Path, embedder: Any) -> Target | str:
    global _pgvector_server
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "n/a (psycopg is not installed)"
    from memory_adapters.testing.postgres_server import PostgresUnavailable, TemporaryPostgres

    if "binaries" not in inspect.signature(TemporaryPostgres.__init__).parameters:
        return "n/a (TemporaryPostgres cannot start pgserver's PostgreSQL yet)"
    options = _postgres_options("pgvector")
    if options is None or "vector_search" not in options:
        return NA_VECTORS
    if _pgvector_server is None:
        try:
            server = cast(Any, TemporaryPostgres)(binaries="pgserver").start()
        except PostgresUnavailable as exc:
            return f"n/a ({exc})"
        atexit.register(server.cleanup)
        _pgvector_server = server
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MemoryTarget(
            _pgvector_server.url,
            embedder,
            label="postgresql with pgvector (pgserver's PostgreSQL 16; exact in SQL)",
            store_options=options,
            after_fill=_analyze,
        )


def _mongo_fake(workdir: Path, embedder: Any) -> Target | str:
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


def _langgraph(workdir: Path, embedder: Any) -> Target | str:
    try:
        import langgraph.store.memory  # noqa: F401
    except ImportError:
        return "n/a (langgraph is not installed)"
    return LangGraphTarget(embedder)


ROWS: dict[str, TargetFactory] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "postgres": _postgres,
    "postgres-pgvector": _postgres_pgvector,
    "mongo-fake": _mongo_fake,
    "langgraph": _langgraph,
}
"""Rows, by ``--stores`` name."""

NOTES = {
    "mongo-fake": "mongomock is an in-process fake: its timings say nothing about MongoDB",
}


# -- the run ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    store: str
    size: int
    mode: str
    searches: int
    median_us: float | None = None
    p90_us: float | None = None
    embed_us: float | None = None
    recall_paraphrase: float | None = None
    recall_shared: float | None = None
    asked: int = 0
    """Questions asked (fewer than all when the row's time budget ran out)."""
    fill_s: float | None = None
    """Seconds spent adding this size's facts to the scope (not timed)."""
    note: str = ""


def _recall(hits: dict[Question, bool], kind: str) -> float | None:
    mine = [hit for q, hit in hits.items() if q.kind == kind]
    return sum(mine) / len(mine) if mine else None


def measure(
    name: str,
    target: Target,
    corpus: Corpus,
    sizes: Sequence[int],
    asked: Sequence[Question],
    embedder: Any,
    budget_s: float,
) -> Iterator[Row]:
    """Fill ``target`` size by size, and at each size ask every question in every mode; the
    rows of each size as soon as it is measured."""
    filled = 0
    modes = target.modes()
    for size in sizes:
        start = time.perf_counter()
        target.fill(corpus, filled, size)
        filled = size
        fill_s = time.perf_counter() - start
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for q in asked[:WARMUP]:
                for mode in modes:
                    target.search(q.text, mode)
        times: dict[str, list[int]] = {m: [] for m in modes}
        embeds: list[int] = []
        hits: dict[str, dict[Question, bool]] = {m: {} for m in modes}
        began = time.perf_counter()
        gc.collect()
        gc.disable()
        try:
            for n, q in enumerate(asked):
                if n and time.perf_counter() - began > budget_s:
                    break
                order = modes[n % len(modes) :] + modes[: n % len(modes)]
                for mode in order:
                    t0 = time.perf_counter_ns()
                    keys = target.search(q.text, mode)
                    times[mode].append(time.perf_counter_ns() - t0)
                    hits[mode][q] = q.key in keys
                t0 = time.perf_counter_ns()
                embedder.embed([q.text], "query")
                embeds.append(time.perf_counter_ns() - t0)
        finally:
            gc.enable()
        embed_us = statistics.median(embeds) / 1000
        for mode in MODES:
            if mode not in modes:
                if target.kind == "store":
                    yield Row(name, size, mode, 0, note=NA_VECTORS)
                continue
            found = sorted(t / 1000 for t in times[mode])
            yield (
                Row(
                    name,
                    size,
                    mode if target.kind == "store" else "semantic",
                    len(found),
                    statistics.median(found),
                    percentile(found, 90),
                    embed_us,
                    _recall(hits[mode], "paraphrase"),
                    _recall(hits[mode], "shared"),
                    len(hits[mode]),
                    fill_s=fill_s,
                )
            )


# -- output -------------------------------------------------------------------------------------

_COLUMNS = (
    ("store", 18),
    ("facts", 7),
    ("mode", 8),
    ("median us", 10),
    ("p90 us", 10),
    ("embed us", 8),
    ("r@5 para", 8),
    ("r@5 shared", 10),
    ("asked", 6),
    ("fill s", 7),
)


def _cells(r: Row, total: int) -> list[str]:
    if r.median_us is None:
        return [r.store, str(r.size) if r.size else "-", r.mode, r.note]
    star = "*" if r.asked < total else ""

    def rec(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}{star}"

    return [
        r.store,
        str(r.size),
        r.mode,
        f"{r.median_us:.1f}",
        f"{r.p90_us:.1f}",
        f"{r.embed_us:.1f}",
        rec(r.recall_paraphrase),
        rec(r.recall_shared),
        str(r.asked),
        f"{r.fill_s:.1f}",
    ]


def _line(cells: Sequence[str]) -> str:
    out = []
    for i, cell in enumerate(cells):
        width = _COLUMNS[i][1] if i < len(_COLUMNS) else 0
        out.append(cell.ljust(width) if i < 3 else cell.rjust(width))
    if len(cells) == 4:  # a row that did not run: its reason after the mode
        out[3] = cells[3]
    return "  ".join(out).rstrip()


def verdicts(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per store and size: the issue's bar on the paraphrases (hybrid within :data:`BAR` of
    semantic and far above keyword), and hybrid against the better single mode on the shared
    questions."""
    by = {(r.store, r.size, r.mode): r for r in rows if r.median_us is not None}
    out = []
    for store, size in dict.fromkeys((r.store, r.size) for r in rows):
        k, s, h = (by.get((store, size, m)) for m in MODES)
        if k is None or s is None or h is None:
            continue
        if None in (k.recall_paraphrase, s.recall_paraphrase, h.recall_paraphrase):
            continue  # no paraphrase asked before the budget ran out
        assert s.recall_paraphrase is not None and h.recall_paraphrase is not None
        assert k.recall_paraphrase is not None
        asked = sum(q.kind == "paraphrase" for q in questions()[: h.asked])
        gap = s.recall_paraphrase - h.recall_paraphrase
        above = h.recall_paraphrase - k.recall_paraphrase
        out.append(
            {
                "store": store,
                "size": size,
                "semantic_minus_hybrid": gap,
                "hybrid_minus_keyword": above,
                "holds": gap <= BAR + 1e-9 and above >= FAR_ABOVE - 1e-9,
                "paraphrases_asked": asked,
                "shared": {
                    m: r.recall_shared for m, r in (("keyword", k), ("semantic", s), ("hybrid", h))
                },
            }
        )
    return out


def ratios(rows: Sequence[Row]) -> list[str]:
    """Median of the largest size over the smallest per store and mode, and LangGraph's
    semantic search over each store's."""
    lines = []
    timed = [r for r in rows if r.median_us is not None]
    for store, mode in dict.fromkeys((r.store, r.mode) for r in timed):
        mine = sorted(
            (r for r in timed if r.store == store and r.mode == mode), key=lambda r: r.size
        )
        if len(mine) > 1:
            lo, hi = mine[0], mine[-1]
            assert lo.median_us and hi.median_us
            note = f"  ({NOTES[store]})" if store in NOTES else ""
            ratio = hi.median_us / lo.median_us
            lines.append(f"{store} {mode}: ratio {hi.size}/{lo.size}: {ratio:.2f}{note}")
    peer = {r.size: r for r in timed if r.store == "langgraph"}
    for store in dict.fromkeys(r.store for r in timed if r.store != "langgraph"):
        cells = []
        for r in timed:
            if r.store == store and r.mode == "semantic" and r.size in peer:
                assert r.median_us and peer[r.size].median_us
                cells.append(f"{r.size}: {cast(float, peer[r.size].median_us) / r.median_us:.2f}")
        if cells:
            lines.append(
                f"langgraph InMemoryStore / {store}, semantic search (times faster): "
                + ", ".join(cells)
            )
    return lines


def environment(args: argparse.Namespace, embedder: Any) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "embedder": embedder.name,
        "stores": args.stores,
        "sizes": args.sizes,
        "budget_s": args.budget,
        "quick": args.quick,
        "facts_labelled": len(recall_set.LABELLED),
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
        description="Search latency and recall@5 of keyword, semantic and hybrid fact search, "
        "per store, beside LangGraph's InMemoryStore with the same embedder.",
    )
    parser.add_argument(
        "--stores",
        type=_store_list,
        default=None,
        help=f"comma-separated rows, from: {', '.join(ROWS)} (default: all; --quick: all but "
        "mongo-fake)",
    )
    parser.add_argument(
        "--sizes",
        type=_int_list,
        default=None,
        help="comma-separated numbers of facts in the scope "
        f"(default: {','.join(map(str, DEFAULT_SIZES))}; --quick: {QUICK_SIZES[0]})",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"seconds of searching per row and size before the remaining questions are "
        f"skipped (default: {DEFAULT_BUDGET_S:.0f}; --quick: {QUICK_BUDGET_S:.0f})",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fast smoke run for CI: 1,000 facts, a short budget"
    )
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.sizes_given = args.sizes is not None
    if args.stores is None:
        args.stores = [n for n in ROWS if not (args.quick and n == "mongo-fake")]
    if args.sizes is None:
        args.sizes = list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.budget is None:
        args.budget = QUICK_BUDGET_S if args.quick else DEFAULT_BUDGET_S
    labelled = len(recall_set.LABELLED)
    if min(args.sizes) < labelled:
        parser.error(f"every size must hold the {labelled} labelled facts")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    recall_set.check()
    from memory_adapters_wordllama.embedder import WordLlamaEmbedder

    embedder = WordLlamaEmbedder()
    asked = questions()
    total = len(asked)
    env = environment(args, embedder)
    corpus = Corpus.build(max(args.sizes), embedder)
    paraphrases = sum(q.kind == "paraphrase" for q in asked)
    print(
        f"recall: facts.search(question, limit={LIMIT}) by keyword, semantic and hybrid; "
        f"{len(recall_set.LABELLED)} labelled facts among filler, {paraphrases} paraphrased "
        f"questions (no shared word) and {total - paraphrases} sharing a word"
    )
    print(
        f"embedder {embedder.name}: {len(corpus.texts)} facts embedded once in "
        f"{corpus.embed_s:.1f} s (not timed) | python {env['python']} | {env['platform']} | "
        f"{env['cpus']} cpus | budget {args.budget:.0f} s per row and size"
    )
    print()
    print(_line([c for c, _ in _COLUMNS]))
    print(_line(["-" * w for _, w in _COLUMNS]))
    rows: list[Row] = []
    labels: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="recall-") as tmp:
        for name in args.stores:
            workdir = Path(tmp, name).resolve()
            workdir.mkdir()
            made = ROWS[name](workdir, embedder)
            if isinstance(made, str):  # one line for the whole row
                row = Row(name, 0, "-", 0, note=made)
                rows.append(row)
                print(_line(_cells(row, total)), flush=True)
                continue
            labels[name] = made.label
            sizes = args.sizes
            if name == "mongo-fake" and not args.sizes_given:
                sizes = [s for s in sizes if s <= FAKE_MAX_SIZE]
            try:
                for row in measure(name, made, corpus, sizes, asked, embedder, args.budget):
                    rows.append(row)
                    print(_line(_cells(row, total)), flush=True)
            finally:
                made.close()
            for size in args.sizes[len(sizes) :]:
                row = Row(name, size, "-", 0, note=f"skipped: a fake, above {FAKE_MAX_SIZE}")
                rows.append(row)
                print(_line(_cells(row, total)), flush=True)

    print()
    for name, label in labels.items():
        print(f"{name}: {label}")
    if any(r.asked < total for r in rows if r.median_us is not None):
        print(
            f"* recall over the questions asked before the row's {args.budget:.0f} s budget ran out"
        )
    print()
    for line in ratios(rows):
        print(line)
    print()
    found = verdicts(rows)
    for v in found:
        print(
            f"{v['store']} {v['size']}: paraphrases: hybrid is {v['semantic_minus_hybrid']:+.2f} "
            f"below semantic (bar: at most {BAR}) and {v['hybrid_minus_keyword']:+.2f} above "
            f"keyword (bar: at least {FAR_ABOVE}): "
            + ("holds" if v["holds"] else "DOES NOT HOLD")
            + (
                f" (on a sample of {v['paraphrases_asked']} paraphrases)"
                if v["paraphrases_asked"] < len(recall_set.LABELLED)
                else ""
            )
            + "; shared words: "
            + ", ".join(f"{m} {x:.2f}" for m, x in v["shared"].items() if x is not None)
        )
    if args.json is not None:
        payload = {
            "benchmark": "recall",
            "environment": env,
            "labels": labels,
            "rows": [asdict(r) for r in rows],
            "verdicts": found,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
