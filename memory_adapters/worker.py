"""The ``Memory``'s background worker: what a run never waits for.

Summaries of evicted turns (:mod:`.summaries`), the indexing and embedding of stored messages
(:mod:`.recall`) and the extraction of facts from new turns run here, after the turn that asked
for them is stored. :class:`Worker` is one daemon thread per ``Memory`` (started on first use)
with an event loop of its own that async clients (a summarizer's, an embedder's) may keep
across calls. Jobs run one after the other, in the order submitted.

A job is submitted under a key (what it works on: a conversation, say). A key with a job
queued and not yet started is not queued again: that job will do the work when it runs.
Whether a key whose job is *running* may queue another depends on the job: a summary of a
conversation under way covers what a second would (``while_running=False``), an index job
that already read the conversation does not (``while_running=True``).

A job never fails a run: its exceptions are its own to report (the clients log and warn).
:meth:`Worker.wait` waits for what is under way; :meth:`Worker.close` (``Memory.close()``)
waits at most a timeout, then stops: the jobs still unfinished are abandoned and returned, so
that their clients can say what was given up (nothing a job leaves undone is lost: a later
turn, search or process does it).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import queue
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

EXIT_SECONDS = 5.0
"""At interpreter exit, how long a worker's running job is waited for (the queued ones are
dropped: a later process does their work). A native library (the offline embedder's runtime)
torn down under a running job aborts the process."""

IDLE_SECONDS = 10.0
"""A worker with nothing to do for this long ends its thread (the next job starts another): a
``Memory`` left open and unused holds no thread."""


class Abandoned(Exception):
    """Raised inside a job whose result :meth:`Worker.close` gave up waiting for: it must
    store nothing more (the store may be closed)."""


@dataclass(eq=False)
class Job:
    """One submitted job: its key, what it is for (``tag``, handed back by
    :meth:`Worker.close` when abandoned) and its future."""

    key: Hashable
    run: Callable[[], Any]
    tag: object
    future: Future[Any] = field(default_factory=Future)
    started: bool = False


class Worker:
    """One daemon thread running a ``Memory``'s background jobs (``memory.worker``)."""

    def __init__(self, name: str = "memory-adapters-worker") -> None:
        self.name = name
        self._reset()
        self._closed = False
        self.abandoned = False
        """Whether :meth:`close` gave up waiting: jobs still running store nothing more."""
        _workers.add(self)

    def _reset(self) -> None:
        """No thread, no jobs: what a worker is in a new process (the parent's thread did not
        survive the fork, and neither did its jobs; a later turn or search does their work)."""
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._jobs: list[Job] = []  # queued or running, in order
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the worker's, used there only

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (nothing new is started)."""
        return self._closed

    def submit(
        self,
        key: Hashable,
        run: Callable[[], T],
        *,
        tag: object = None,
        while_running: bool = False,
    ) -> Future[T] | None:
        """Run ``run()`` on the worker thread, unless a job of ``key`` is queued already (or,
        without ``while_running``, running), or the worker is closed: then ``None``. Returns
        at once; the future holds what ``run`` returned or raised."""
        with self._lock:
            if self._closed:
                return None
            for job in self._jobs:
                if job.key == key and (not job.started or not while_running):
                    return None
            if self._thread is None:
                # a daemon: a job that hangs never keeps the interpreter from exiting
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            job = Job(key, run, tag)
            self._jobs.append(job)
            self._queue.put(job)
        future: Future[T] = job.future
        return future

    def busy(self, key: Hashable) -> bool:
        """Whether a job of ``key`` is queued or running."""
        with self._lock:
            return any(job.key == key for job in self._jobs)

    def on_thread(self) -> bool:
        """Whether the caller runs on the worker's thread (in a job)."""
        return threading.current_thread() is self._thread

    def busy_with(self, tags: type) -> bool:
        """Whether a job whose tag is of type ``tags`` is queued or running."""
        with self._lock:
            return any(isinstance(job.tag, tags) for job in self._jobs)

    def run_async(self, awaitable: Awaitable[T]) -> T:
        """Inside a job: wait for ``awaitable`` on the worker's own event loop (kept across
        jobs, so async clients may keep their connections)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()

        async def wrapped() -> T:
            return await awaitable

        result = self._loop.run_until_complete(wrapped())
        if self.abandoned:  # close() gave up on it and closed the store: nothing to store
            raise Abandoned
        return result

    def wait(self, timeout: float | None = None, *, tags: type | None = None) -> bool:
        """Wait for the jobs under way (with ``tags``, those whose tag is of that type), at
        most ``timeout`` seconds; whether they all ended. From a job (the worker's own thread),
        ``False`` at once: a job cannot wait for the jobs queued after it."""
        if threading.current_thread() is self._thread:
            return False
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                futures = [j.future for j in self._jobs if tags is None or isinstance(j.tag, tags)]
            if not futures:
                return True
            for f in futures:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    f.result(left)
                except TimeoutError:
                    return False
                except Exception:  # jobs report their failures themselves
                    continue

    def _work(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._jobs or self._closed:
                        continue
                    # idle: the thread ends (a later submit starts another, on the same loop)
                    self._thread = None
                return
            if job is None:
                break
            with self._lock:
                job.started = True
            if self.abandoned or not job.future.set_running_or_notify_cancel():
                self._finished(job)
                continue
            try:
                result = job.run()
            except BaseException as exc:
                self._finished(job)
                job.future.set_exception(exc)
            else:
                self._finished(job)
                job.future.set_result(result)
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _finished(self, job: Job) -> None:
        with self._lock:
            if job in self._jobs:
                self._jobs.remove(job)

    def close(self, timeout: float | None = None) -> list[object]:
        """Wait for the jobs under way, at most ``timeout`` seconds (``None``: as long as they
        take), then stop the thread (nothing new starts). Returns the tags of the jobs
        abandoned when the time ran out (those queued are cancelled; one still running is left
        to its daemon thread, and :meth:`run_async` raises :class:`Abandoned` in it when its
        awaitable ends). Closing again returns ``[]``."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is None:  # never started, or ended idle
            if self._loop is not None:
                self._loop.close()
                self._loop = None
            return []
        self._queue.put(None)
        thread.join(timeout)
        if not thread.is_alive():
            return []
        with self._lock:
            self.abandoned = True
            jobs = list(self._jobs)
        for job in jobs:
            job.future.cancel()  # the queued ones; the one running ends when its call returns
        return [job.tag for job in jobs]

    def __repr__(self) -> str:
        with self._lock:
            n = len(self._jobs)
        return f"<Worker {self.name} jobs={n}{' closed' if self._closed else ''}>"


_workers: weakref.WeakSet[Worker] = weakref.WeakSet()


def _after_fork() -> None:
    for worker in list(_workers):
        worker._reset()


def _at_exit() -> None:
    """Let each worker finish the job it is running (at most :data:`EXIT_SECONDS` in all),
    dropping what is queued, before the interpreter tears down."""
    deadline = time.monotonic() + EXIT_SECONDS
    for worker in list(_workers):
        with worker._lock:
            thread = worker._thread
            worker._closed = True
            if thread is None:
                continue
            worker.abandoned = True  # the queued jobs are skipped
        worker._queue.put(None)
        thread.join(max(0.0, deadline - time.monotonic()))


atexit.register(_at_exit)

if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_after_fork)
