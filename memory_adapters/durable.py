"""Replay-safe memory under durable execution (DBOS workflows; the seam for other engines).

A durable execution engine records what a run did as *steps* and, after a crash, recovers the
run by replaying it: a step already recorded returns its recorded result instead of running
again. Memory sits inside such a run, and each thing it does must give the same answer on
replay as the first time, and write nothing twice:

- what memory *reads* to start a run (the run's id and its window of past messages) is read
  once, as one recorded step (:data:`OPEN_STEP`): a recovered run continues from the history it
  was first shown, even if another writer appended to the conversation while it was down, and
  it keeps the run id it first had, so the batch it persists has the same idempotency key
  (:func:`~memory_adapters.run.outcome_key`) and a turn saved before the crash is not stored
  again;
- each memory tool call (``save_memory``, ``forget_memory`` ...) is a recorded step of its own
  (:data:`TOOL_STEP`): replayed, it returns what it returned the first time and writes
  nothing, so a fact saved before the crash keeps one version; and its write is marked with
  the tool call (:func:`replayable_call`), so that a call that wrote but was not recorded
  (the process died in between; a LangGraph checkpoint not yet written) is not applied twice
  when it runs again;
- an engine that checkpoints state instead of recording steps (LangGraph) keeps in its
  checkpoint a small mark of the window the run was shown (:func:`window_mark`), from which
  a resumed run reads the same window again.

:func:`current` finds the engine whose durable run is executing here, if any; outside one,
everything in this module just calls through, so the adapters use it unconditionally. DBOS is
built in (:class:`DBOSEngine`, found without importing ``dbos`` unless the application did);
another engine plugs in with :func:`register` (an object with ``active``, ``record`` and
``arecord``). Engines whose workflow code may not do I/O at all (Temporal) need the whole agent
run's memory work in activities instead: see ``docs/durable.md``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from .conversation import Conversation
from .messages import Message, Record
from .steps import Plan, StoreCall
from .tools import REPLAYABLE
from .window import Window, summary_message

if TYPE_CHECKING:
    from .run import RunLifecycle

T = TypeVar("T")

OPEN_STEP = "memory_adapters.open"
"""The name of the recorded step that reads a run's id and window."""

TOOL_STEP = "memory_adapters.tool.{name}"
"""The name of the recorded step of one memory tool call (``name``: the tool's)."""


@runtime_checkable
class DurableEngine(Protocol):
    """What memory needs from a durable execution engine."""

    name: str

    def active(self) -> bool:
        """Whether this code is a durable run's own code (where a step may be recorded)."""
        ...

    def record(self, name: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` as a recorded step called ``name``; on replay, return what it returned."""
        ...

    async def arecord(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Async :meth:`record`."""
        ...


class DBOSEngine:
    """DBOS: a step is ``DBOS.run_step`` / ``DBOS.run_step_async``, recorded in the workflow's
    system database (SQLite or PostgreSQL) and replayed by ``DBOS`` recovery. Active only in a
    workflow's own code (not inside a step, where DBOS records nothing of its own)."""

    name = "dbos"

    def active(self) -> bool:
        """Whether this is a DBOS workflow's own code (``dbos`` imported, a workflow id set,
        no step running)."""
        dbos = sys.modules.get("dbos")
        if dbos is None:
            return False
        try:
            return dbos.DBOS.workflow_id is not None and dbos.DBOS.step_id is None
        except Exception:  # DBOS not launched: no workflow can be running
            return False

    def record(self, name: str, fn: Callable[[], T]) -> T:
        """``DBOS.run_step`` of ``fn``."""
        from dbos import DBOS

        result: T = DBOS.run_step({"name": name}, fn)
        return result

    async def arecord(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        """``DBOS.run_step_async`` of ``fn``."""
        from dbos import DBOS

        async def step() -> T:
            return await fn()

        result: T = await DBOS.run_step_async({"name": name}, step)
        return result


_ENGINES: list[DurableEngine] = [DBOSEngine()]


def register(engine: DurableEngine) -> None:
    """Add a durable execution engine (checked before the built-in ones)."""
    if not isinstance(engine, DurableEngine):
        from .errors import InvalidInput

        raise InvalidInput(
            f"a durable engine needs name, active(), record() and arecord(), not {engine!r}"
        )
    _ENGINES.insert(0, engine)


def current() -> DurableEngine | None:
    """The engine whose durable run's own code is executing here, or ``None``."""
    return next((e for e in _ENGINES if e.active()), None)


def record(name: str, fn: Callable[[], T]) -> T:
    """``fn()``, as a recorded step called ``name`` inside a durable run (see :func:`current`)."""
    engine = current()
    return fn() if engine is None else engine.record(name, fn)


async def arecord(name: str, fn: Callable[[], Awaitable[T]]) -> T:
    """Async :func:`record`."""
    engine = current()
    return await fn() if engine is None else await engine.arecord(name, fn)


@contextlib.contextmanager
def replayable_call(conversation: str | None, call_id: str | None) -> Iterator[None]:
    """Inside the block, a memory tool's write (``save_memory``, ``forget_memory``) is marked
    with the tool call ``call_id`` of ``conversation`` (in the fact's history), and a call
    whose change is already the fact's latest returns what it returned the first time without
    writing again: the tool call of a durable run resumed after the call wrote, before its
    result was recorded (a LangGraph checkpoint not written yet, a DBOS step not recorded),
    is not applied twice. Nothing is marked without a ``call_id``."""
    if not call_id:
        yield
        return
    token = REPLAYABLE.set(f"{conversation or ''}:{call_id}")
    try:
        yield
    finally:
        REPLAYABLE.reset(token)


def _snapshot(lifecycle: RunLifecycle, messages: list[Message]) -> dict[str, Any]:
    return {"run_id": lifecycle.run.run_id, "messages": [m.to_dict() for m in messages]}


def _restore(lifecycle: RunLifecycle, snapshot: dict[str, Any]) -> list[Message]:
    lifecycle.run.run_id = snapshot["run_id"]
    return [Message.from_dict(d) for d in snapshot["messages"]]


async def aopen_run(
    lifecycle: RunLifecycle, *, load: bool, working: bool, **options: Any
) -> list[Message]:
    """Start ``lifecycle`` (``run_started``) and return its window's messages (none without
    ``load``), with the working memory read in the same round trip. A run under the id of a
    run stored as completed raises :class:`~memory_adapters.errors.RunCompleted` (see
    :meth:`~memory_adapters.run.RunLifecycle.open`).

    Inside a durable run, the run's id and the window are read once, as the recorded step
    :data:`OPEN_STEP`: a replay gets the same window and gives the run the id it first had
    (so what it persists is keyed as the first attempt's was)."""
    if current() is None:
        await lifecycle.astart()
        return (await lifecycle.aopen(working=working, load=load, **options)).messages()

    async def read() -> dict[str, Any]:
        window = await lifecycle.aopen(working=working, load=load, **options)
        return _snapshot(lifecycle, window.messages())

    messages = _restore(lifecycle, await arecord(OPEN_STEP, read))
    await lifecycle.astart()
    return messages


def open_run(
    lifecycle: RunLifecycle, *, load: bool, working: bool, **options: Any
) -> list[Message]:
    """Sync :func:`aopen_run`."""
    if current() is None:
        lifecycle.start()
        return lifecycle.open(working=working, load=load, **options).messages()

    def read() -> dict[str, Any]:
        window = lifecycle.open(working=working, load=load, **options)
        return _snapshot(lifecycle, window.messages())

    messages = _restore(lifecycle, record(OPEN_STEP, read))
    lifecycle.start()
    return messages


# -- a window pinned by its seqs (engines that checkpoint state: LangGraph) --------------------


def _ranges(seqs: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for seq in seqs:
        if out and out[-1][1] == seq - 1:
            out[-1][1] = seq
        else:
            out.append([seq, seq])
    return out


def window_mark(window: Window) -> dict[str, Any]:
    """A small JSON mark of what ``window`` showed (its records' seqs, as ranges, and its
    summary's text), from which :func:`_replay_window` reads the same window again: kept in a
    checkpoint (LangGraph's state), so that a run resumed after a crash is shown the window it
    was first shown, whatever was appended to the conversation since."""
    return {
        "pinned": _ranges([r.seq for r in window.pinned]),
        "summary": None if window.summary is None else window.summary.text,
        "records": _ranges([r.seq for r in window.records]),
    }


def _read_ranges(key: str, ranges: Any) -> Plan[list[Record]]:
    records: list[Record] = []
    for start, end in ranges:
        found: list[Record] = yield StoreCall(
            "read", (key,), {"start_seq": int(start), "end_seq": int(end)}
        )
        records.extend(found)
    return records


def _replay_window(lifecycle: RunLifecycle, mark: Any) -> Plan[tuple[list[Message], list[Message]]]:
    """The window ``mark`` (:func:`window_mark`) describes, read again, and the messages stored
    in the conversation after it (by this run before it was resumed, or by another writer):
    shown never, but known as stored."""
    key = Conversation(lifecycle.memory, lifecycle.conversation).key
    pinned = yield from _read_ranges(key, mark.get("pinned") or [])
    records = yield from _read_ranges(key, mark.get("records") or [])
    shown = [r.message for r in pinned]
    if mark.get("summary"):
        shown.append(summary_message(str(mark["summary"])))
    shown.extend(r.message for r in records)
    last = max((r.seq for r in (*pinned, *records)), default=0)
    since: list[Record] = yield StoreCall("read", (key,), {"start_seq": last + 1})
    return shown, [r.message for r in since]


def is_mark(value: Any) -> bool:
    """Whether ``value`` is a mark :func:`window_mark` made (one a checkpoint kept)."""
    return isinstance(value, dict) and "records" in value and "pinned" in value
