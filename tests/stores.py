"""Every kind of store, opened fresh for one test: the helpers the adapter tests share.

``open_memory(kind, request, tmp_path)`` gives a ``Memory`` over memory://, a temporary SQLite
file, a fresh schema of the session's PostgreSQL server (the ``postgres_url`` fixture) or
MongoDB in-process (mongomock); drivers are imported only for the kind asked for.
"""

from __future__ import annotations

import asyncio
import os
import signal
import traceback
import uuid
import warnings
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from memory_adapters import Memory

STORES = ["memory", "sqlite", "postgres", "mongo"]
T = TypeVar("T")


def in_forked_child(check: Callable[[], None], timeout: int = 60) -> int:
    """Fork, run ``check`` in the child (killed after ``timeout`` seconds) and wait for it: its
    exit code, 0 when ``check`` returned (an error's traceback is printed, code 1)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        code = 1
        try:
            signal.alarm(timeout)
            check()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def on_sync_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the event loop pydantic-ai's sync entry points use (this thread's
    current loop), so that a test mixing ``run_sync`` and async runs uses one loop. (The
    PostgreSQL store opens an async pool per loop, closed when its loop shuts down; a loop
    dropped without shutting down, as ``asyncio.run`` drops ``run_sync``'s, leaves it open.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop()
        except RuntimeError:
            loop = None
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    return loop.run_until_complete(coro)


def open_memory(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, embed: object = False
) -> Iterator[Memory]:
    """A fresh Memory over one kind of store, closed (and its schema dropped) afterwards.

    ``embed`` as ``Memory(embed=...)``: none by default, so that the adapters' tests see
    keyword search whatever extras are installed (tests of semantic recall pass one)."""
    if kind == "memory":
        memory = Memory("memory://", embed=embed)
    elif kind == "sqlite":
        memory = Memory(f"sqlite:///{tmp_path / 'memory.db'}", embed=embed)
    elif kind == "mongo":
        memory = Memory(
            "mongodb://localhost/ma_test",
            store_options={"client": _mongomock().MongoClient()},
            embed=embed,
        )
    else:
        url: str = request.getfixturevalue("postgres_url")
        schema = "t_" + uuid.uuid4().hex[:12]
        memory = Memory(url, store_options={"schema": schema}, embed=embed)
        try:
            yield memory
        finally:
            on_sync_loop(memory.aclose())  # the async pool of run_sync's loop, and the rest
            memory.close()
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        return
    try:
        yield memory
    finally:
        memory.close()


def _mongomock() -> Any:
    import mongomock

    return mongomock
