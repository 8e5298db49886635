"""Cost per turn of memory work, as the stored conversation grows.

What is measured
    One *turn of memory work* is what an agent adapter does around every model call:
    load the window of past messages for the model
    (``memory.conversation.window(max_tokens=W)``) and persist the turn just finished
    (``memory.conversation.append([...])``, four messages: user, assistant calling a tool,
    tool result, assistant). For each store and for each conversation size (messages already
    stored: 10, 1,000 and 10,000 by default) the benchmark preloads one conversation, warms
    up, then times ``--turns`` turns with ``time.perf_counter_ns`` and the garbage collector
    disabled, and reports the median and 90th percentile in microseconds, split into window
    and append, with the window's size in messages and tokens.

Why
    The window is a token budget, so the model sees the same amount of history whatever the
    length of the conversation; the store reads only that window, by an index range on the
    running token totals (see ``memory_adapters.store.Store.tail``), and an append touches
    only the conversation's head row and the new rows. The cost per turn must therefore stay
    flat as the conversation grows: the last line per store, ``ratio 10000/10``, is the
    median at the largest size over the median at the smallest, and should be close to 1
    (above 2 means something reads or writes in proportion to the conversation). Peers that
    load whole histories grow linearly instead (see DESIGN.md, "Measures").

The window is the same at every size (printed per row so that this is visible): every turn
has the same token count, and warm-up continues until the window stops growing, so that
even the smallest conversation fills the budget before timing starts.

Stores and peers are rows of :data:`SUBJECTS`, a registry of name -> factory; a new store
(PostgreSQL, MongoDB) or a peer (langchain-postgres, pydantic-ai) is one more factory that
returns an object implementing :class:`Subject`. Rows of kind ``"run"`` (``langchain_runs.py``)
time a whole agent turn (load + model call + persist) instead, as one, at the sizes and turns
their factory names (:func:`row_plan`).

Run ``python benchmarks/turn_cost.py --help`` for the options; ``--quick`` is the CI smoke run.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from memory_adapters import Memory, Message, ToolCall, ToolResult, Window
from memory_adapters import tokens as ma_tokens

DEFAULT_SIZES = (10, 1000, 10000)
DEFAULT_TURNS = 200
DEFAULT_WARMUP = 5
DEFAULT_WINDOW_TOKENS = 2000
MAX_WARMUP = 500
"""Warm-up gives up waiting for a steady window after this many turns (a huge budget)."""

QUICK_SIZES = (10, 1000, 10000)
QUICK_TURNS = 30
QUICK_WARMUP = 3

USER_ID = "bench-user"


# -- the conversation ---------------------------------------------------------------------------

_USER_TEXT = (
    "I'm planning the quarterly data migration for the billing service. Can you look up "
    "what our runbook says about moving the invoices table without downtime, and tell me "
    "which steps need a maintenance window and which can run while traffic is live?"
)
_TOOL_ARGS: dict[str, Any] = {
    "query": "billing invoices table online migration runbook",
    "limit": 4,
    "collection": "runbooks",
}
_TOOL_HITS: list[dict[str, Any]] = [
    {
        "title": f"Runbook: billing migrations, part {part}",
        "score": round(0.91 - 0.07 * part, 2),
        "snippet": (
            "Create the new table alongside the old one and backfill it in batches of 10,000 "
            "rows, throttled to keep replication lag under five seconds. Enable dual writes "
            "behind the billing.dual_write flag, verify row counts and checksums per day of "
            "invoices, then switch reads. The final rename needs a short maintenance window "
            "because it takes an exclusive lock on both tables."
        ),
    }
    for part in range(1, 5)
]
_ANSWER_TEXT = (
    "According to the runbook, almost all of the migration can run with live traffic: create "
    "the new invoices table, backfill it in throttled batches of 10,000 rows while keeping "
    "replication lag under five seconds, turn on dual writes with the billing.dual_write "
    "flag, and verify row counts and checksums day by day before switching reads over. Only "
    "the final rename needs a maintenance window, because it locks both tables exclusively; "
    "it is short, so schedule it for the lowest-traffic hour and keep the old table until the "
    "next billing cycle has closed cleanly."
)


def make_turn(n: int) -> list[Message]:
    """Turn ``n``: user, assistant calling a tool, the tool's result, assistant.

    Every turn has the same token count (the call id, which differs, is not counted), so that
    a token-budget window holds the same number of messages wherever it ends.
    """
    call_id = f"call-{n:08d}"
    return [
        Message.user(_USER_TEXT),
        Message.assistant(tool_calls=[ToolCall(call_id, "search_docs", dict(_TOOL_ARGS))]),
        Message.tool(ToolResult(call_id, {"hits": _TOOL_HITS}, name="search_docs")),
        Message.assistant(_ANSWER_TEXT),
    ]


def preload_batches(size: int) -> Iterator[list[Message]]:
    """Batches holding exactly ``size`` messages: the first ``size % 4`` messages of a turn
    (if any), then whole turns of four."""
    head = size % 4
    if head:
        yield make_turn(0)[:head]
    for n in range(1, size // 4 + 1):
        yield make_turn(n)


# -- what is measured: subjects ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchContext:
    """What factories may use: a scratch directory (deleted after the run) and the budget."""

    workdir: Path
    window_tokens: int


class Subject(Protocol):
    """One store (or peer) holding one conversation, for one row of the table.

    ``load_window`` and ``append`` are timed; everything else is not. ``prepare`` converts a
    turn to whatever ``append`` takes (a peer converts to its framework's messages there).
    """

    label: str

    def preload(self, batches: Iterator[list[Message]]) -> None: ...

    def count(self) -> int: ...

    def prepare(self, messages: list[Message]) -> object: ...

    def load_window(self) -> object: ...

    def append(self, prepared: object) -> None: ...

    def window_shape(self, window: object) -> tuple[int, int]:
        """(messages, tokens) of a window returned by :meth:`load_window`."""
        ...

    def close(self) -> None: ...


class MemorySubject:
    """memory-adapters' own ``Memory`` over the store at ``url``."""

    kind = "store"

    def __init__(
        self,
        url: str,
        ctx: BenchContext,
        conversation: str,
        *,
        label: str | None = None,
        store_options: dict[str, Any] | None = None,
    ) -> None:
        self.label = label or url
        self.window_tokens = ctx.window_tokens
        # the log's own cost: no conversation-search indexing on the worker beside it
        # (conversation_recall.py measures a turn with and without it)
        self.memory = Memory(url, store_options=store_options, index_conversations=False)
        self._session = self.memory.session(user_id=USER_ID, conversation_id=conversation)
        self._session.__enter__()

    def preload(self, batches: Iterator[list[Message]]) -> None:
        for batch in batches:
            self.memory.conversation.append(batch)

    def count(self) -> int:
        return self.memory.conversation.last_seq()

    def prepare(self, messages: list[Message]) -> object:
        return messages

    def load_window(self) -> object:
        return self.memory.conversation.window(max_tokens=self.window_tokens)

    def append(self, prepared: object) -> None:
        self.memory.conversation.append(cast(list[Message], prepared))

    def window_shape(self, window: object) -> tuple[int, int]:
        assert isinstance(window, Window)
        return len(window.messages()), window.tokens

    def close(self) -> None:
        self._session.__exit__(None, None, None)
        self.memory.close()


SubjectFactory = Callable[[BenchContext, str], Subject]
"""Builds the subject of one row: ``factory(ctx, conversation_id)``."""


def _memory_store(ctx: BenchContext, conversation: str) -> Subject:
    return MemorySubject("memory://", ctx, conversation)


def _sqlite_store(ctx: BenchContext, conversation: str) -> Subject:
    # ctx.workdir is absolute, so this is sqlite:////tmp/.../bench.db (an absolute path).
    return MemorySubject(f"sqlite:///{ctx.workdir}/bench.db", ctx, conversation)


SUBJECTS: dict[str, SubjectFactory] = {
    "memory": _memory_store,
    "sqlite": _sqlite_store,
}
"""Rows of the benchmark, by ``--stores`` name. Stores that need a server or a driver add
their rows from their own module (``postgres.py``, ``mongo.py``), only where the driver is
installed. A subject's ``kind`` is ``"store"`` (memory-adapters; every store's window must be
the same), ``"peer"`` (another library, loading whatever it loads), ``"floor"`` (the raw
driver round trips the work needs) or ``"run"`` (a whole agent turn, timed as one: its subject's
``load_window`` does nothing and ``append`` runs the turn)."""


def _optional_subjects() -> None:
    for module in ("postgres", "mongo", "pydantic_ai_runs", "langchain_runs"):
        try:
            found = __import__(module).subjects()
        except ImportError:
            continue
        SUBJECTS.update(found)


_optional_subjects()

COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("lc-postgres", "postgres", "langchain-postgres / memory-adapters (times faster)"),
    ("postgres", "pg-floor", "memory-adapters / raw psycopg floor (times the floor)"),
    ("mongo", "mongo-floor", "memory-adapters / raw pymongo floor (times the floor)"),
    (
        "pai-inmemory",
        "memory",
        "pydantic-ai InMemoryConversationStore / memory-adapters in-memory (times faster)",
    ),
    (
        "agent-rwmh-lcpg",
        "agent-mw",
        "create_agent turn: RunnableWithMessageHistory + PostgresChatMessageHistory / "
        "MemoryMiddleware (times faster)",
    ),
    (
        "agent-rwmh-lcpg",
        "agent-rwmh-ma",
        "create_agent turn, RunnableWithMessageHistory: PostgresChatMessageHistory / "
        "MemoryChatMessageHistory (times faster)",
    ),
)

NOTES: dict[str, str] = {
    "mongo-fake": "mongomock is an in-process fake that scans every document on every query; "
    "this row checks the store end to end and says nothing about MongoDB's cost",
    "agent-rwmh-lcpg": "RunnableWithMessageHistory reads the history twice per turn (as the "
    "turn starts, and as it ends, to strip the history it prepended to the input), and "
    "PostgresChatMessageHistory reads the whole session each time",
}
"""Printed beside a store's ratio."""
"""Pairs (a, b) printed as a's median over b's median at every size both ran."""


# -- the run ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    """The result of one (store, size)."""

    store: str
    kind: str
    url: str
    size: int
    stored_after: int
    warmup_turns: int
    turns: int
    window_messages: int
    window_tokens: int
    window_varied: bool
    median_us: float
    p90_us: float
    min_us: float
    max_us: float
    window_median_us: float
    append_median_us: float
    preload_s: float


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of an already sorted, non-empty sequence."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(slots=True)
class _Timings:
    """Raw timings of one (store, size), in nanoseconds."""

    totals: list[int] = field(default_factory=list)
    windows: list[int] = field(default_factory=list)
    appends: list[int] = field(default_factory=list)
    shapes: set[tuple[int, int]] = field(default_factory=set)


def _prepare(subject: Subject, name: str, size: int, warmup: int) -> tuple[float, int, int]:
    """Preload ``size`` messages and warm up: at least ``warmup`` turns, and for a store until
    its window has stopped growing (a peer that loads everything never stops growing).
    Returns (preload seconds, warm-up turns, next turn number)."""
    t0 = time.perf_counter()
    subject.preload(preload_batches(size))
    preload_s = time.perf_counter() - t0
    stored = subject.count()
    if stored != size:
        raise RuntimeError(f"{name}: preloaded {stored} messages, expected {size}")
    n = size // 4 + 1
    done = 0
    previous: tuple[int, int] | None = None
    while True:
        shape = subject.window_shape(subject.load_window())
        subject.append(subject.prepare(make_turn(n)))
        n += 1
        done += 1
        settled = shape == previous or getattr(subject, "kind", "store") != "store"
        if (done >= warmup and settled) or done >= MAX_WARMUP:
            return preload_s, done, n
        previous = shape


def measure_store(
    name: str,
    factory: SubjectFactory,
    ctx: BenchContext,
    sizes: Sequence[int],
    turns: int,
    warmup: int,
) -> list[Row]:
    """One row per size for the store ``name``.

    Every size gets its own subject (its own ``Memory``) and conversation, all preloaded and
    warmed up first; the timed turns then go round-robin over the sizes, starting each round
    at the next size, so that drifts in the machine's speed (frequency scaling, noisy
    neighbours on a VM, a checkpoint) fall on every size alike instead of on one row.
    """
    subjects: list[Subject] = []
    try:
        for size in sizes:
            subjects.append(factory(ctx, f"bench-{size}"))
        setup = [_prepare(s, name, size, warmup) for s, size in zip(subjects, sizes, strict=True)]
        prepared = [
            [s.prepare(make_turn(next_n + i)) for i in range(turns)]
            for s, (_, _, next_n) in zip(subjects, setup, strict=True)
        ]
        timings = [_Timings() for _ in sizes]
        clock = time.perf_counter_ns
        k = len(sizes)
        gc.collect()
        gc.disable()
        try:
            for i in range(turns):
                for j in range(k):
                    idx = (i + j) % k
                    subject, t = subjects[idx], timings[idx]
                    p = prepared[idx][i]
                    t0_ns = clock()
                    window = subject.load_window()
                    t1_ns = clock()
                    subject.append(p)
                    t2_ns = clock()
                    t.totals.append(t2_ns - t0_ns)
                    t.windows.append(t1_ns - t0_ns)
                    t.appends.append(t2_ns - t1_ns)
                    t.shapes.add(subject.window_shape(window))
        finally:
            gc.enable()
        stored_after = [s.count() for s in subjects]
    finally:
        for s in subjects:
            s.close()

    rows: list[Row] = []
    for size, subject, t, (preload_s, done, _), after in zip(
        sizes, subjects, timings, setup, stored_after, strict=True
    ):
        us = sorted(x / 1000 for x in t.totals)
        messages, tokens = max(t.shapes)
        rows.append(
            Row(
                store=name,
                kind=getattr(subject, "kind", "store"),
                url=subject.label,
                size=size,
                stored_after=after,
                warmup_turns=done,
                turns=turns,
                window_messages=messages,
                window_tokens=tokens,
                window_varied=len(t.shapes) > 1,
                median_us=statistics.median(us),
                p90_us=percentile(us, 90),
                min_us=us[0],
                max_us=us[-1],
                window_median_us=statistics.median(t.windows) / 1000,
                append_median_us=statistics.median(t.appends) / 1000,
                preload_s=preload_s,
            )
        )
    return rows


# -- output -----------------------------------------------------------------------------------

_COLUMNS: tuple[tuple[str, int], ...] = (
    ("store", 8),
    ("size", 7),
    ("stored@end", 10),
    ("win msgs", 8),
    ("win tok", 7),
    ("median us", 10),
    ("p90 us", 10),
    ("window us", 10),
    ("append us", 10),
    ("preload s", 9),
)


def _line(cells: Sequence[str], store_width: int) -> str:
    parts = [cells[0].ljust(max(store_width, _COLUMNS[0][1]))]
    parts += [c.rjust(w) for c, (_, w) in zip(cells[1:], _COLUMNS[1:], strict=True)]
    return "  ".join(parts)


def format_row(r: Row, store_width: int) -> str:
    whole = r.kind == "run"  # one timing for the whole turn: no window / append split
    return _line(
        (
            r.store,
            str(r.size),
            str(r.stored_after),
            str(r.window_messages) + ("*" if r.window_varied else ""),
            str(r.window_tokens),
            f"{r.median_us:.1f}",
            f"{r.p90_us:.1f}",
            "-" if whole else f"{r.window_median_us:.1f}",
            "-" if whole else f"{r.append_median_us:.1f}",
            f"{r.preload_s:.2f}",
        ),
        store_width,
    )


def row_plan(factory: SubjectFactory, args: argparse.Namespace) -> tuple[tuple[int, ...], int, int]:
    """(sizes, timed turns, least warm-up turns) for the row ``factory`` builds.

    A factory may name its own, where the command line did not: ``sizes`` / ``quick_sizes``
    (used instead of the default sizes), ``turns`` / ``quick_turns`` and ``quick_warmup``
    (upper bounds on the default turns and warm-up). Whole agent turns cost far more than
    store work, and the CI smoke run must stay short.
    """
    quick = "quick_" if args.quick else ""
    sizes = tuple(args.sizes)
    turns: int = args.turns
    warmup: int = args.warmup
    given: set[str] = getattr(args, "given", set())
    own_sizes = getattr(factory, quick + "sizes", None)
    if own_sizes is not None and "sizes" not in given:
        sizes = tuple(sorted(set(own_sizes)))
    own_turns = getattr(factory, quick + "turns", None)
    if own_turns is not None and "turns" not in given:
        turns = min(turns, own_turns)
    own_warmup = getattr(factory, quick + "warmup", None)
    if own_warmup is not None and "warmup" not in given:
        warmup = min(warmup, own_warmup)
    return sizes, turns, warmup


def ratios(rows: Sequence[Row]) -> dict[str, dict[str, Any]]:
    """Per store: median at the largest size over median at the smallest."""
    out: dict[str, dict[str, Any]] = {}
    for store in dict.fromkeys(r.store for r in rows):
        mine = [r for r in rows if r.store == store]
        lo = min(mine, key=lambda r: r.size)
        hi = max(mine, key=lambda r: r.size)
        if lo.size != hi.size:
            out[store] = {"from": lo.size, "to": hi.size, "ratio": hi.median_us / lo.median_us}
    return out


def comparisons(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The :data:`COMPARISONS` whose both sides ran, at every size both ran."""
    by = {(r.store, r.size): r for r in rows}
    out: list[dict[str, Any]] = []
    for a, b, what in COMPARISONS:
        sizes = sorted(size for (store, size) in by if store == a and (b, size) in by)
        if not sizes:
            continue
        values = {size: by[(a, size)].median_us / by[(b, size)].median_us for size in sizes}
        cells = ", ".join(f"{size}: {v:.2f}" for size, v in values.items())
        out.append({"a": a, "b": b, "ratios": values, "text": f"{what}: {cells}"})
    return out


def environment(args: argparse.Namespace, sizes: list[int], stores: list[str]) -> dict[str, Any]:
    enc = ma_tokens.encoding(None)
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "tokenizer": getattr(enc, "name", "approximate"),
        "stores": stores,
        "sizes": sizes,
        "turns": args.turns,
        "min_warmup": args.warmup,
        "window_tokens": args.window_tokens,
        "quick": args.quick,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# -- command line -----------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"sizes must be positive integers: {text!r}")
    return sorted(set(values))


def _store_list(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in SUBJECTS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown store(s) {', '.join(unknown) or text!r}; known: {', '.join(SUBJECTS)}"
        )
    return list(dict.fromkeys(names))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="turn_cost.py",
        description="Time one turn of memory work (load the window + append a turn) with "
        "10, 1,000 and 10,000 messages already stored; the cost must stay flat.",
    )
    parser.add_argument(
        "--stores",
        type=_store_list,
        default=None,
        help=f"comma-separated subjects, from: {', '.join(SUBJECTS)} (default: all)",
    )
    parser.add_argument(
        "--sizes",
        type=_int_list,
        default=None,
        help="comma-separated numbers of messages stored before timing "
        f"(default: {','.join(map(str, DEFAULT_SIZES))})",
    )
    parser.add_argument(
        "--turns",
        type=_positive,
        default=None,
        help=f"timed turns per size (default: {DEFAULT_TURNS}; --quick: {QUICK_TURNS})",
    )
    parser.add_argument(
        "--warmup",
        type=_positive,
        default=None,
        help=f"least warm-up turns per size; warm-up also lasts until the window is full "
        f"(default: {DEFAULT_WARMUP}; --quick: {QUICK_WARMUP})",
    )
    parser.add_argument(
        "--window-tokens",
        type=_positive,
        default=DEFAULT_WINDOW_TOKENS,
        help=f"token budget of the window loaded each turn (default: {DEFAULT_WINDOW_TOKENS})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"fast smoke run for CI: {QUICK_TURNS} turns and {QUICK_WARMUP} warm-up turns "
        "per size (unless given)",
    )
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.stores is None:
        args.stores = list(SUBJECTS)
    args.given = {k for k in ("sizes", "turns", "warmup") if getattr(args, k) is not None}
    if args.sizes is None:
        args.sizes = list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.turns is None:
        args.turns = QUICK_TURNS if args.quick else DEFAULT_TURNS
    if args.warmup is None:
        args.warmup = QUICK_WARMUP if args.quick else DEFAULT_WARMUP
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stores: list[str] = args.stores
    sizes: list[int] = args.sizes
    env = environment(args, sizes, stores)
    print(
        f"turn cost: window(max_tokens={args.window_tokens}) + append(4 messages); "
        f"{args.turns} timed turns per size, >= {args.warmup} warm-up"
    )
    print(
        f"python {env['python']} | sqlite {env['sqlite']} | tokenizer {env['tokenizer']} | "
        f"{env['platform']} | {env['cpus']} cpus"
    )
    plans = {name: row_plan(SUBJECTS[name], args) for name in stores}
    for plan in dict.fromkeys(
        p for p in plans.values() if p != (tuple(sizes), args.turns, args.warmup)
    ):
        names = [n for n in stores if plans[n] == plan]
        whole = all(getattr(SUBJECTS[n], "kind", "store") == "run" for n in names)
        print(
            f"{', '.join(names)}: sizes {','.join(map(str, plan[0]))}, {plan[1]} timed turns per "
            f"size, >= {plan[2]} warm-up"
            + ("; a whole agent turn (load + model call + persist) timed as one" if whole else "")
        )
    print()
    width = max(len(s) for s in stores)
    print(_line([c for c, _ in _COLUMNS], width))
    print(
        _line(
            ["-" * max(w, width) if i == 0 else "-" * w for i, (_, w) in enumerate(_COLUMNS)], width
        )
    )

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="turn-cost-") as tmp:
        for name in stores:
            ctx = BenchContext(Path(tmp, name).resolve(), args.window_tokens)
            ctx.workdir.mkdir()
            row_sizes, turns, warmup = plans[name]
            for row in measure_store(name, SUBJECTS[name], ctx, row_sizes, turns, warmup):
                rows.append(row)
                print(format_row(row, width), flush=True)

    print()
    own = [r for r in rows if r.kind == "store"]
    shapes = {(r.window_messages, r.window_tokens) for r in own}
    if len(shapes) == 1 and not any(r.window_varied for r in own):
        ((msgs, toks),) = shapes
        print(f"window: {msgs} messages / {toks} tokens in every row (same work at every size)")
    elif own:
        print(
            "WARNING: the window differs between rows (* = varied between turns); the rows "
            "do not do the same work. Use more --warmup or a smaller --window-tokens."
        )
    found = ratios(rows)
    for store, r in found.items():
        note = f"  ({NOTES[store]})" if store in NOTES else ""
        print(f"{store}: ratio {r['to']}/{r['from']}: {r['ratio']:.2f}{note}")
    compared = comparisons(rows)
    for line in compared:
        print(line["text"])

    if args.json is not None:
        payload = {
            "benchmark": "turn_cost",
            "environment": env,
            "plans": {
                name: {"sizes": list(p[0]), "turns": p[1], "min_warmup": p[2]}
                for name, p in plans.items()
            },
            "rows": [asdict(r) for r in rows],
            "ratios": found,
            "comparisons": [{k: v for k, v in c.items() if k != "text"} for c in compared],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
