"""pydantic-ai runs with and without memory, as the stored conversation grows.

What is measured
    One *turn* is one ``agent.run_sync(prompt)`` of a pydantic-ai ``Agent`` whose model is a
    ``FunctionModel`` answering at once (so that what is timed is the framework and the
    memory, never a provider). For each store and each conversation size (messages already
    stored: 10, 1,000 and 10,000) the benchmark times, turn by turn, with
    ``time.perf_counter_ns`` and the garbage collector disabled:

    ``bare``
        the agent alone, with no history (what the agent costs without memory);
    ``wrapped``
        ``memory.wrap(agent)``, with the ``Memory``'s default budget (8,000 tokens): it loads
        the window, gives the model the memory's instructions and tools, and persists the turn.

    and reports the medians and memory's *added cost per turn*, ``wrapped - bare``. The window
    is a token budget, so the added cost must not grow with the conversation: the check is
    **added(10,000) / added(1,000) <= 1.5** per store, printed with the ratios.

    ``pai-inmemory`` is the peer: pydantic-ai's own ``InMemoryConversationStore`` used through
    ``conversation=`` (``store.load``, ``agent.run(prompt, conversation=...)``,
    ``store.save``) at 10,000 messages; it loads, and the model is sent, the whole history. Its
    row is compared with the wrapped run on each store at the same size.

Also a row source for ``turn_cost.py`` (``subjects()``): ``pai-inmemory`` there is pydantic-ai's
``InMemoryConversationStore`` loading the conversation and saving the turn, as ``turn_cost.py``
times every store.

Run ``python benchmarks/pydantic_ai_runs.py --help``; ``--quick`` is the CI smoke run.
(Not named ``pydantic_ai.py``: run as a script, this directory comes first on ``sys.path``,
and a module of that name would shadow the ``pydantic_ai`` package.)
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memory_adapters import Memory, Message
from memory_adapters.memory import DEFAULT_HISTORY_TOKENS

DEFAULT_SIZES = (10, 1000, 10000)
DEFAULT_TURNS = 40
QUICK_TURNS = 12
WARMUP = 3
LIMIT = 1.5
"""The largest accepted added(10,000) / added(1,000)."""

PEER_SIZE = 10000


# -- the conversation ---------------------------------------------------------------------------


def pydantic_turn(n: int) -> list[Any]:
    """Turn ``n`` as pydantic-ai messages: a question, a tool call, its result, the answer."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    call = f"call-{n:08d}"
    return [
        ModelRequest(parts=[UserPromptPart(f"Question {n}: what does the runbook say?")]),
        ModelResponse(parts=[ToolCallPart("search_docs", {"query": f"runbook {n}"}, call)]),
        ModelRequest(
            parts=[ToolReturnPart("search_docs", {"hits": [f"doc {n}", f"doc {n + 1}"]}, call)]
        ),
        ModelResponse(parts=[TextPart(f"Answer {n}: dual writes, then a short window.")]),
    ]


def batches(size: int) -> Iterator[list[Any]]:
    """pydantic-ai messages, ``size`` of them, in turns (a last partial turn first)."""
    head = size % 4
    if head:
        yield pydantic_turn(0)[:head]
    for n in range(1, size // 4 + 1):
        yield pydantic_turn(n)


def agent() -> Any:
    """An agent whose model answers at once, the same for every row."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f"ok, {len(messages)} messages")])

    return Agent(FunctionModel(model), instructions="Answer briefly.")


# -- timing -------------------------------------------------------------------------------------


def clock(call: Callable[[], object]) -> float:
    """Microseconds one ``call()`` takes, with the garbage collector held off."""
    gc.disable()
    try:
        start = time.perf_counter_ns()
        call()
        return (time.perf_counter_ns() - start) / 1000
    finally:
        gc.enable()


def timed(turn: Callable[[int], object], turns: int) -> list[float]:
    """Microseconds of each of ``turns`` calls of ``turn(i)``, after a warm-up."""
    for i in range(WARMUP):
        turn(-1 - i)
    gc.collect()
    return [clock(functools.partial(turn, i)) for i in range(turns)]


@dataclass(slots=True)
class Row:
    """One (store, size): medians in microseconds."""

    store: str
    size: int
    bare: float
    wrapped: float
    window_messages: int

    @property
    def added(self) -> float:
        return self.wrapped - self.bare


def open_memory(store: str, workdir: Path) -> Memory:
    if store == "memory":
        return Memory("memory://")
    if store == "sqlite":
        return Memory(f"sqlite:///{workdir / (uuid.uuid4().hex + '.db')}")
    if store == "postgres":
        from postgres import server_url

        schema = "bench_" + uuid.uuid4().hex[:10]
        return Memory(server_url(), store_options={"schema": schema})
    if store == "mongo-fake":
        import mongomock

        client: Any = mongomock.MongoClient()
        return Memory("mongodb://localhost/bench", store_options={"client": client})
    raise SystemExit(f"unknown store {store!r}: memory, sqlite, postgres, mongo-fake")


def measure(store: str, sizes: list[int], turns: int, workdir: Path) -> list[Row]:
    """The bare and the wrapped run over conversations of each of ``sizes`` stored messages.

    The timed turns go round-robin over the sizes, bare and wrapped alternately, so that a
    drift in the machine's speed falls on every row alike."""
    from memory_adapters_pydantic_ai import to_messages

    memory = open_memory(store, workdir)
    bare = agent()
    wrapped = memory.wrap(agent())
    windows: dict[int, int] = {}
    samples: dict[int, tuple[list[float], list[float]]] = {size: ([], []) for size in sizes}

    def session(size: int) -> Any:
        return memory.session(user_id="bench-user", conversation_id=f"bench-{size}")

    try:
        for size in sizes:
            with session(size):
                for batch in batches(size):
                    memory.conversation.append(to_messages(batch))
                windows[size] = len(memory.conversation.window().messages())
                for i in range(WARMUP):
                    bare.run_sync(f"warm-up {i}")
                    wrapped.run_sync(f"warm-up {i}")
        gc.collect()
        for turn in range(turns):
            for k in range(len(sizes)):
                size = sizes[(turn + k) % len(sizes)]
                with session(size):
                    bare_us, wrapped_us = samples[size]
                    prompt = f"question {turn}"
                    bare_us.append(clock(functools.partial(bare.run_sync, prompt)))
                    wrapped_us.append(clock(functools.partial(wrapped.run_sync, prompt)))
        return [
            Row(
                store,
                size,
                statistics.median(samples[size][0]),
                statistics.median(samples[size][1]),
                windows[size],
            )
            for size in sizes
        ]
    finally:
        memory.close()


def measure_peer(size: int, turns: int) -> float:
    """pydantic-ai's InMemoryConversationStore through ``conversation=``: median microseconds."""
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import InMemoryConversationStore

    store = InMemoryConversationStore()
    runner = agent()
    loop = asyncio.new_event_loop()
    try:
        conversation = Conversation(conversation_id="peer")
        for batch in batches(size):
            conversation.messages.extend(batch)
            loop.run_until_complete(store.save(conversation))

        async def turn(i: int) -> None:
            loaded = await store.load("peer")
            assert loaded is not None
            result = await runner.run(f"new question {i}", conversation=loaded)
            await store.save(result)

        return statistics.median(timed(lambda i: loop.run_until_complete(turn(i)), turns))
    finally:
        loop.close()


# -- turn_cost.py rows ---------------------------------------------------------------------------


class ConversationStoreSubject:
    """turn_cost.py's ``pai-inmemory`` row: pydantic-ai's ``InMemoryConversationStore`` loads the
    whole conversation (its ``load``) and saves the turn (its ``save``)."""

    kind = "peer"

    def __init__(self, ctx: Any, conversation: str) -> None:
        from pydantic_ai.conversation import Conversation
        from pydantic_ai.conversation_store import InMemoryConversationStore

        self.label = "pydantic-ai InMemoryConversationStore"
        self.store = InMemoryConversationStore()
        self.loop = asyncio.new_event_loop()
        self.conversation_id = conversation
        self.conversation = Conversation(conversation_id=conversation)

    def preload(self, batches: Iterator[list[Message]]) -> None:
        from memory_adapters_pydantic_ai import from_messages

        for batch in batches:
            self.conversation.messages.extend(from_messages(batch))
            self.loop.run_until_complete(self.store.save(self.conversation))

    def count(self) -> int:
        return len(self.conversation.messages)

    def prepare(self, messages: list[Message]) -> object:
        from memory_adapters_pydantic_ai import from_messages

        return from_messages(messages)

    def load_window(self) -> object:
        loaded = self.loop.run_until_complete(self.store.load(self.conversation_id))
        assert loaded is not None
        self.conversation = loaded
        return loaded

    def append(self, prepared: object) -> None:
        assert isinstance(prepared, list)
        self.conversation.messages.extend(prepared)
        self.loop.run_until_complete(self.store.save(self.conversation))

    def window_shape(self, window: object) -> tuple[int, int]:
        return len(getattr(window, "messages", ())), -1

    def close(self) -> None:
        self.loop.close()


def subjects() -> dict[str, Callable[[Any, str], Any]]:
    """turn_cost.py rows this module adds (only where pydantic-ai is installed)."""
    import pydantic_ai.conversation_store  # noqa: F401 - ImportError: no rows

    return {"pai-inmemory": ConversationStoreSubject}


# -- the run -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--stores", default="memory,sqlite", help="of memory,sqlite,postgres,mongo-fake"
    )
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--turns", type=int, default=DEFAULT_TURNS)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TURNS} turns per row")
    parser.add_argument("--no-peer", action="store_true", help="skip pydantic-ai's own store")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    turns = QUICK_TURNS if args.quick else args.turns
    sizes = [int(s) for s in args.sizes.split(",") if s]
    stores = [s for s in args.stores.split(",") if s]

    rows: list[Row] = []
    print(
        f"pydantic-ai runs, FunctionModel, default budget {DEFAULT_HISTORY_TOKENS} tokens, "
        f"{turns} turns per row (medians, microseconds)"
    )
    print(f"{'store':<12}{'size':>7}{'win msgs':>10}{'bare':>11}{'wrapped':>11}{'added':>11}")
    with tempfile.TemporaryDirectory(prefix="ma-bench-pai-") as tmp:
        for store in stores:
            for row in measure(store, sizes, turns, Path(tmp)):
                rows.append(row)
                print(
                    f"{row.store:<12}{row.size:>7}{row.window_messages:>10}{row.bare:>11.1f}"
                    f"{row.wrapped:>11.1f}{row.added:>11.1f}",
                    flush=True,
                )
    peer = None if args.no_peer else measure_peer(PEER_SIZE, turns)
    if peer is not None:
        print(f"{'pai-inmemory':<12}{PEER_SIZE:>7}{PEER_SIZE:>10}{'':>11}{peer:>11.1f}")

    ok = True
    print()
    for store in stores:
        by_size = {r.size: r for r in rows if r.store == store}
        if 1000 in by_size and 10000 in by_size:
            ratio = by_size[10000].added / max(by_size[1000].added, 1.0)
            verdict = "ok" if ratio <= LIMIT else f"ABOVE {LIMIT}"
            ok &= ratio <= LIMIT
            print(f"{store}: added cost per turn 10000/1000 = {ratio:.2f} ({verdict})")
        if peer is not None and PEER_SIZE in by_size:
            print(
                f"{store}: pydantic-ai InMemoryConversationStore / wrapped run at {PEER_SIZE} "
                f"= {peer / by_size[PEER_SIZE].wrapped:.1f}x"
            )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": [asdict(r) | {"added": r.added} for r in rows],
                    "pai_inmemory": peer,
                    "python": sys.version,
                },
                indent=2,
            )
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
