"""Store operations written once, as generators of driver calls, and run sync or async.

A *plan* is a generator that yields :class:`Op` (one call on a collection or the database)
and :class:`Sleep` steps, receives each call's result, and returns the operation's result.
:func:`run_sync` drives it with a ``pymongo.MongoClient`` (or anything shaped like one);
:func:`run_async` with a ``pymongo.AsyncMongoClient`` or a Motor client, awaiting each call.
So ``append`` and ``aappend`` share every line of logic, and only the few calls whose style
differs (a cursor's ``to_list``, awaiting) are bridged here.

Driver errors are translated before the plan sees them: a duplicate key becomes
:class:`DuplicateKey` (plans use it as the arbiter of races), a connection failure becomes
:class:`~memory_adapters.errors.StoreUnavailable`; every other error (a write error, a
failed command) is raised into the plan unchanged, and out of it: never swallowed.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from memory_adapters.errors import StoreUnavailable

T = TypeVar("T")

BATCHES = "ma_batches"
"""The conversation log: one document per appended batch (turn)."""
HEADS = "ma_conversations"
"""One small document per conversation: a hint of where its log ends."""
SUMMARIES = "ma_summaries"
"""Summaries of evicted ranges of a conversation."""
FACTS = "ma_facts"
"""Long-term facts and working memory."""
HISTORY = "ma_fact_history"
"""Fact history: one document per put or forget of a fact, with its writer."""
COLLECTIONS = (BATCHES, HEADS, SUMMARIES, FACTS, HISTORY)


@dataclass(frozen=True, slots=True)
class Op:
    """Call ``method(*args, **kwargs)`` on collection ``collection`` (``""``: the database).

    ``method`` is a pymongo method name; ``"find"`` and ``"aggregate"`` return the list of
    documents.
    """

    collection: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Sleep:
    """Back off for ``seconds`` (``time.sleep`` or ``asyncio.sleep``)."""

    seconds: float


Step = Op | Sleep
Plan = Generator[Step, Any, T]


class DuplicateKey(Exception):
    """A write was refused by a unique index: another writer got there first."""

    def driver_error(self) -> BaseException:
        """The driver's own error, to raise when a plan cannot resolve the race."""
        return self.__cause__ if self.__cause__ is not None else self


@dataclass(frozen=True, slots=True)
class Handles:
    """One client's database and the store's collections in it."""

    db: Any
    collections: Mapping[str, Any]

    @classmethod
    def of(cls, db: Any) -> Handles:
        """The handles of the store's collections in ``db``."""
        return cls(db, {name: db.get_collection(name) for name in COLLECTIONS})

    def target(self, op: Op) -> Any:
        return self.db if not op.collection else self.collections[op.collection]


def translate(exc: BaseException) -> BaseException:
    """The error a plan sees for a driver error (see the module docstring)."""
    from pymongo import errors

    if isinstance(exc, errors.DuplicateKeyError):
        dup = DuplicateKey(str(exc))
        dup.__cause__ = exc
        return dup
    if isinstance(exc, errors.ConnectionFailure):
        first = str(exc).split(", Timeout:")[0].split("\n")[0][:300]
        gone = StoreUnavailable(f"MongoDB is unreachable ({type(exc).__name__}): {first}")
        gone.__cause__ = exc
        return gone
    if isinstance(exc, errors.InvalidOperation) and "after close" in str(exc):
        closed = StoreUnavailable(f"the MongoDB client was closed: {exc}")
        closed.__cause__ = exc
        return closed
    return exc


_CURSORS = ("find", "aggregate")
"""Methods that return a cursor, which the drivers turn into a list."""


_IN_PROCESS = threading.Lock()
"""Serializes the calls on in-process fakes (mongomock, mongomock-motor), which are not
thread-safe: a ``Memory``'s worker indexing on its thread while a call runs on another broke
their dicts mid-iteration. A real driver is never serialized."""


def _in_process(target: Any) -> bool:
    return type(target).__module__.split(".")[0] in ("mongomock", "mongomock_motor")


def _call_sync(handles: Handles, op: Op) -> Any:
    target = handles.target(op)
    if _in_process(target):
        with _IN_PROCESS:
            return _call_target(target, op)
    return _call_target(target, op)


def _call_target(target: Any, op: Op) -> Any:
    if op.method in _CURSORS:
        return list(getattr(target, op.method)(*op.args, **op.kwargs))
    return getattr(target, op.method)(*op.args, **op.kwargs)


async def _call_async(handles: Handles, op: Op) -> Any:
    target = handles.target(op)
    if _in_process(target):
        # mongomock-motor runs each call to its end without suspending: the lock is never
        # held across a switch to another task of this loop
        with _IN_PROCESS:
            return await _acall_target(target, op)
    return await _acall_target(target, op)


async def _acall_target(target: Any, op: Op) -> Any:
    if op.method in _CURSORS:
        cursor = getattr(target, op.method)(*op.args, **op.kwargs)
        if inspect.isawaitable(cursor):  # pymongo's async aggregate() is a coroutine
            cursor = await cursor
        # pymongo's async cursors and Motor's cursors all have to_list(length=None).
        return await cursor.to_list(None)
    result = getattr(target, op.method)(*op.args, **op.kwargs)
    if inspect.isawaitable(result):  # a coroutine (pymongo async) or a Future (Motor)
        result = await result
    return result


def run_sync(plan: Plan[T], handles: Handles) -> T:
    """Drive ``plan`` with blocking calls on ``handles`` (a sync client's)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = plan.send(value) if error is None else plan.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            continue
        try:
            value = _call_sync(handles, step)
        except Exception as exc:
            error = translate(exc)


async def run_async(plan: Plan[T], handles: Handles) -> T:
    """Drive ``plan`` awaiting calls on ``handles`` (an async or Motor client's)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = plan.send(value) if error is None else plan.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            continue
        try:
            value = await _call_async(handles, step)
        except Exception as exc:
            error = translate(exc)
