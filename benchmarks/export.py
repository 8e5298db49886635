"""Peak memory of an export as the store grows: streamed, it stays flat.

What is measured
    For each store and each size (messages stored: 10,000 and 100,000 by default) the
    benchmark fills a fresh store with conversations of up to ``--per-conversation`` messages
    (batches of four, written straight through the store contract, so that filling is fast),
    then exports it with :func:`memory_adapters.transfer.export_jsonl` into a sink that only
    counts bytes, under ``tracemalloc``, and reports the peak of memory allocated during the
    export (the store's own data, allocated before, is not counted), the time, and the bytes
    written.

Why
    Export reads messages a page at a time (``transfer.PAGE``), holds at most one batch while
    it writes it, and lists conversations a page at a time: what it holds does not depend on
    how much the store holds. The last line per store, ``ratio``, is the peak at the largest
    size over the peak at the smallest, and should be close to 1 (10 would mean the export
    holds everything). Times are taken without tracemalloc (which slows Python down several
    times); the CPU time is the steadier figure on a shared machine.

``--quick`` (the CI smoke run) measures the in-memory store only; the full run adds SQLite.
Run ``python benchmarks/export.py --help`` for the options.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from memory_adapters import Memory, transfer
from memory_adapters.messages import Entry

DEFAULT_SIZES = (10_000, 100_000)
PER_CONVERSATION = 10_000
BATCH = 4


class CountingSink:
    """A text file that keeps nothing: it counts the characters written."""

    def __init__(self) -> None:
        self.chars = 0

    def write(self, text: str) -> int:
        self.chars += len(text)
        return len(text)

    def flush(self) -> None:
        pass


def turn(i: int) -> list[Entry]:
    """One turn of four messages, a tool call and its result among them, as a store keeps
    them (JSON text and a token count)."""
    return [
        Entry("user", json.dumps({"role": "user", "text": f"question number {i}"}), 9),
        Entry(
            "assistant",
            json.dumps(
                {
                    "role": "assistant",
                    "tool_calls": [{"id": f"c{i}", "name": "lookup", "args": {"q": i}}],
                }
            ),
            14,
        ),
        Entry(
            "tool",
            json.dumps(
                {
                    "role": "tool",
                    "tool_results": [
                        {"id": f"c{i}", "content": {"a": i}, "name": "lookup", "is_error": False}
                    ],
                }
            ),
            12,
        ),
        Entry("assistant", json.dumps({"role": "assistant", "text": f"the answer is {i}"}), 10),
    ]


def fill(memory: Memory, messages: int, per_conversation: int) -> None:
    """``messages`` messages in conversations of at most ``per_conversation``."""
    written = 0
    c = 0
    while written < messages:
        key = f"bench:user{c % 7}:conv{c}"
        in_this = 0
        while in_this < per_conversation and written < messages:
            memory.store.append(key, turn(written), run_id=f"run-{written // BATCH}")
            in_this += BATCH
            written += BATCH
        c += 1


def measure(url: str, messages: int, per_conversation: int) -> dict[str, float | int]:
    """Fill a store at ``url`` and export it under tracemalloc."""
    with Memory(url, embed=False, namespace="bench") as memory:
        fill(memory, messages, per_conversation)
        sink = CountingSink()
        gc.collect()
        started = time.perf_counter()
        cpu = time.process_time()
        counts = transfer.export_jsonl(memory, sink, namespace="bench")  # type: ignore[arg-type]
        cpu = time.process_time() - cpu
        seconds = time.perf_counter() - started
        gc.collect()
        tracemalloc.start()
        traced = transfer.export_jsonl(memory, CountingSink(), namespace="bench")  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert counts.messages == traced.messages == messages, (counts, traced)
    return {
        "messages": messages,
        "conversations": counts.conversations,
        "peak_kib": round(peak / 1024, 1),
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "mib_written": round(sink.chars / 2**20, 1),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the CI smoke run (memory store)")
    parser.add_argument(
        "--stores",
        default=None,
        help="comma-separated: memory, sqlite (default: both; --quick: memory)",
    )
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, DEFAULT_SIZES)),
        help="comma-separated message counts (default: %(default)s)",
    )
    parser.add_argument("--per-conversation", type=int, default=PER_CONVERSATION)
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stores = (args.stores or ("memory" if args.quick else "memory,sqlite")).split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    print(f"export peak memory (tracemalloc), transfer.PAGE={transfer.PAGE}")
    print(
        f"{'store':<8} {'messages':>9} {'convs':>6} {'peak KiB':>10} {'wall s':>7} "
        f"{'cpu s':>6} {'MiB out':>8}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for store in stores:
            peaks = []
            for size in sizes:
                url = "memory://" if store == "memory" else f"sqlite:///{Path(tmp) / f'{size}.db'}"
                row = {"store": store, **measure(url, size, args.per_conversation)}
                rows.append(row)
                peaks.append(float(row["peak_kib"]))
                print(
                    f"{store:<8} {row['messages']:>9,} {row['conversations']:>6} "
                    f"{row['peak_kib']:>10,.1f} {row['seconds']:>7.2f} {row['cpu_seconds']:>6.2f} "
                    f"{row['mib_written']:>8.1f}",
                    flush=True,
                )
            ratio = peaks[-1] / peaks[0] if peaks[0] else float("nan")
            print(f"{store:<8} ratio {sizes[-1]:,}/{sizes[0]:,} peak: {ratio:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
