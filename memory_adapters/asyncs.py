"""The async policy, in one place.

Hook implementations and summarizers may return awaitables. Async callers await them on
their own loop (:func:`resolve_async`); sync callers run them to completion on a private
loop (:func:`resolve_sync`), in a worker thread when the calling thread already runs a loop,
because a loop cannot be re-entered.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


async def _await(aw: Awaitable[T]) -> T:
    return await aw


def run_sync(aw: Awaitable[T]) -> T:
    """Run an awaitable to completion from sync code."""
    coro: Coroutine[Any, Any, T] = aw if inspect.iscoroutine(aw) else _await(aw)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1, thread_name_prefix="memory-adapters-async") as pool:
        return pool.submit(asyncio.run, coro).result()


def resolve_sync(value: Any) -> Any:
    """``value``, or what it resolves to if it is awaitable."""
    if inspect.isawaitable(value):
        return run_sync(value)
    return value


async def resolve_async(value: Any) -> Any:
    """``value``, or what it resolves to if it is awaitable (awaited on the caller's loop)."""
    if inspect.isawaitable(value):
        return await value
    return value
