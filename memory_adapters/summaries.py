"""Summaries of evicted turns, made by a model the application already has, off the hot path.

``Memory(url, summary_tokens=N, summarizer=spec)`` turns summaries on. What ``spec`` may be is
decided by the ``make_summarizer`` hook, as embedders are (:mod:`.embedders`):

* a pydantic-ai model name (``"openai:gpt-4o-mini"``), ``Model`` or ``Agent`` (the
  ``pydantic-ai`` extra);
* a LangChain chat model (``BaseChatModel``; the ``langchain`` extra);
* a :class:`Summarizer`, or a plain callable ``fn(previous_summary, messages) -> str``, sync or
  async.

A summary is never computed while a run waits. A window shows the newest summary the store
has (even one that does not yet cover the latest evicted turns: the window then shows what it
can, within its budget, see :mod:`.window`), and says in :attr:`Window.summary_due
<memory_adapters.window.Window.summary_due>` when turns were evicted past it. After the run's
turn is stored, :class:`Summaries` (``memory.summaries``) computes that summary on the
``Memory``'s worker (:mod:`.worker`): it claims the range in the store first
(:meth:`~memory_adapters.store.Store.claim_summary`: of several processes driving the same
conversation one calls the model, once per range), reads the evicted messages, extends the
previous summary with them through the summarizer, cuts the answer to ``summary_tokens``
(counted with the ``Memory``'s token counter: the model's word is not trusted) and stores it
with the model's name and the seq range it covers; the next window shows it. A summarizer
that fails or hangs fails nothing: a failure is logged with a :class:`SummaryWarning`, and
windows go on without the summary (a later turn tries again, after :data:`RETRY_SECONDS`).

``memory.summaries.wait()`` waits for the summaries under way (tests, scripts that exit);
``Memory.close()`` waits for them too (at most :data:`CLOSE_TIMEOUT_SECONDS`), then stops the
worker; the summaries it gave up on are named in a :class:`SummaryWarning`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .asyncs import resolve_sync
from .errors import SummaryWarning, Unsupported
from .hookspecs import hookimpl
from .messages import Message, Record, Summary
from .steps import Plan, StoreCall, drive_sync
from .worker import Abandoned

if TYPE_CHECKING:
    from .memory import Memory

log = logging.getLogger("memory_adapters")

LEASE_SECONDS = 300.0
"""How long a claim on a range keeps other processes from summarizing it (a process that
dies mid-summary holds it back this long, at most)."""

RETRY_SECONDS = 60.0
"""After a summarizer fails, no summary is started for this long (a provider that is down, or
rate-limits, is not called again on every turn)."""

CLOSE_TIMEOUT_SECONDS = 30.0
"""How long ``Memory.close()`` waits for the summaries under way by default. Those still
unfinished then are abandoned (named in a :class:`SummaryWarning`): none is stored, and each
range is summarized after a later window asks for it again (by another process once the
abandoned claim's lease lapses)."""

TOOL_TEXT_LIMIT = 200
"""Tool arguments and results are shown to the summarizing model cut to this many characters."""

INSTRUCTIONS = (
    "You maintain the running summary of a conversation between a user and an AI assistant. "
    "Extend the previous summary with the new messages. Keep what the assistant must remember "
    "to go on: the user's goals, facts and preferences, decisions, open questions, results of "
    "tool calls. Be concise; write at most about {max_tokens} tokens. Answer with the summary "
    "only."
)


@dataclass(frozen=True, slots=True)
class SummaryDue:
    """Turns a window evicted past the stored summary: the range a new summary should cover
    (``start_seq``..``end_seq``, at most
    :data:`~memory_adapters.window.SUMMARY_SOURCE_LIMIT` messages) and the summary it extends
    (``previous``, ``None`` for the first)."""

    conversation: str
    start_seq: int
    end_seq: int
    previous: Summary | None
    max_tokens: int
    model: str | None
    """The tokenizer the window counts with (the ``Memory``'s model)."""


def render_messages(messages: list[Message]) -> str:
    """The evicted messages as the summarizing model reads them: one line per message, tool
    calls and results briefly."""
    lines: list[str] = []
    for m in messages:
        if m.text:
            lines.append(f"{m.role}: {m.text}")
        for c in m.tool_calls:
            args = json.dumps(c.args, ensure_ascii=False, default=str)
            lines.append(f"{m.role} called {c.name}({_short(args)})")
        for r in m.tool_results:
            content = (
                r.content if isinstance(r.content, str) else json.dumps(r.content, default=str)
            )
            kind = "error" if r.is_error else "result"
            lines.append(f"tool {kind}: {_short(content)}")
    return "\n".join(lines)


def _short(text: str) -> str:
    return text if len(text) <= TOOL_TEXT_LIMIT else text[: TOOL_TEXT_LIMIT - 3] + "..."


def summary_prompt(previous: str | None, messages: list[Message]) -> str:
    """The user prompt a model-backed summarizer sends: the previous summary and the new
    messages."""
    head = f"Previous summary:\n{previous}\n\n" if previous else "There is no summary yet.\n\n"
    return f"{head}New messages:\n{render_messages(messages)}"


class Summarizer:
    """Extends a conversation's summary with newly evicted messages.

    Subclasses implement :meth:`asummarize` (or :meth:`summarize`, or both); :attr:`name`
    is recorded with each summary (:attr:`Summary.model
    <memory_adapters.messages.Summary.model>`). The answer need not fit: it is cut to
    ``max_tokens`` after."""

    name: str = "summarizer"

    def summarize(self, previous: str | None, messages: list[Message], max_tokens: int) -> str:
        """The summary of ``previous`` (the summary so far, if any) and ``messages``."""
        result: str = resolve_sync(self.asummarize(previous, messages, max_tokens))
        return result

    async def asummarize(
        self, previous: str | None, messages: list[Message], max_tokens: int
    ) -> str:
        """Async :meth:`summarize`."""
        if type(self).summarize is Summarizer.summarize:
            raise NotImplementedError(f"{type(self).__name__} implements neither summarize")
        return await asyncio.to_thread(self.summarize, previous, messages, max_tokens)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class CallableSummarizer(Summarizer):
    """A plain function ``fn(previous_summary, messages) -> str`` (or an awaitable of it)."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or _callable_name(fn)

    def summarize(self, previous: str | None, messages: list[Message], max_tokens: int) -> str:
        return _text(resolve_sync(self.fn(previous, messages)), self.name)

    async def asummarize(
        self, previous: str | None, messages: list[Message], max_tokens: int
    ) -> str:
        if inspect.iscoroutinefunction(self.fn):
            return _text(await self.fn(previous, messages), self.name)
        result = await asyncio.to_thread(self.fn, previous, messages)
        if inspect.isawaitable(result):
            result = await result
        return _text(result, self.name)


def _callable_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or ""
    return f"{module}.{name}" if module else str(name)


def _text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"summarizer {name!r} returned {type(value).__name__}, not str")
    return value


@hookimpl(trylast=True)
def make_summarizer(spec: object) -> Summarizer | None:
    """The built-in fallback: a :class:`Summarizer` as it is, a plain callable wrapped in a
    :class:`CallableSummarizer`."""
    if isinstance(spec, Summarizer):
        return spec
    if callable(spec) and not isinstance(spec, type):
        return CallableSummarizer(spec)
    return None


# -- the background work -----------------------------------------------------------------------


def summary_job(
    memory: Memory,
    summarize: Callable[[str | None, list[Message], int], str],
    name: str,
    due: SummaryDue,
    owner: str,
    lease: float,
) -> Plan[Summary | None]:
    """Claim ``due``'s range, summarize it with ``summarize(previous, messages, max_tokens)``
    and store the summary, made by ``name`` (``None``: another process claimed the range, or
    a summary stored since the window was read covers it or moved the cut on, or the answer
    left nothing)."""
    from .window import fit_summary

    try:
        claimed = yield StoreCall(
            "claim_summary", (due.conversation, due.end_seq, owner), {"lease_seconds": lease}
        )
    except Unsupported:  # a store without claims: fine for one process
        claimed = True
    if not claimed:
        return None
    # another worker may have stored a summary since the window read. That one moved the cut
    # on by half of what it leaves, as this one would have: the next window names what is
    # due after it, if anything (no message is summarized twice, and none is left out)
    prev: Summary | None = yield StoreCall("latest_summary", (due.conversation,))
    if prev is not None and (
        prev.end_seq >= due.end_seq or due.previous is None or prev.end_seq > due.previous.end_seq
    ):
        return None
    start_seq = due.start_seq if prev is None else max(due.start_seq, prev.end_seq + 1)
    evicted: list[Record] = yield StoreCall(
        "read", (due.conversation,), {"start_seq": start_seq, "end_seq": due.end_seq}
    )
    previous = prev.text if prev else None
    text = _text(summarize(previous, [r.message for r in evicted], due.max_tokens), name).strip()
    fitted = (
        (yield from fit_summary(memory.hooks, text, due.max_tokens, due.model)) if text else None
    )
    if fitted is None:
        return None
    start = prev.start_seq if prev and prev.end_seq + 1 >= start_seq else start_seq
    summary = Summary(start, due.end_seq, fitted[0], fitted[1], time.time(), name)
    yield StoreCall("put_summary", (due.conversation, summary))
    return summary


class Summaries:
    """The summaries a ``Memory`` computes in the background (``memory.summaries``).

    They run on the ``Memory``'s worker (:mod:`memory_adapters.worker`: one daemon thread,
    with an event loop of its own that the summarizer's async clients may keep across calls),
    one per conversation at a time. A summarizer that hangs never keeps the process from
    exiting (what is under way then is dropped; its claim lapses with its lease); :meth:`wait`
    waits for those under way, :meth:`close` (called by ``Memory.close()``) waits, at most a
    timeout, and stops the worker. :attr:`calls` and :attr:`failures` count the summarizer's
    calls."""

    def __init__(self, memory: Memory, summarizer: Summarizer, lease_seconds: float) -> None:
        self.memory = memory
        self.summarizer = summarizer
        self.lease_seconds = lease_seconds
        self.owner = uuid.uuid4().hex
        """Who this ``Memory`` claims ranges as (a fresh id per ``Memory``)."""
        self.calls = 0
        """How many times the summarizer was called (failures included)."""
        self.failures = 0
        """How many of those calls (or the storing of their summaries) failed."""
        self._lock = threading.Lock()
        self._closed = False
        self._retry_at = 0.0  # time.monotonic() before which no summary starts (a failure)

    def submit(self, due: SummaryDue | None) -> Future[Summary | None] | None:
        """Compute ``due`` in the background, unless a summary of its conversation is under
        way already (or the ``Memory`` is closed). Returns at once."""
        if due is None:
            return None
        with self._lock:
            if self._closed:
                return None
            if self._retry_at and time.monotonic() < self._retry_at:
                return None
        return self.memory.worker.submit(
            ("summary", due.conversation), lambda: self._run(due), tag=due
        )

    def _summarize(self, previous: str | None, messages: list[Message], max_tokens: int) -> str:
        with self._lock:
            self.calls += 1
        return self.memory.worker.run_async(
            self.summarizer.asummarize(previous, messages, max_tokens)
        )

    def _run(self, due: SummaryDue) -> Summary | None:
        try:
            plan = summary_job(
                self.memory,
                self._summarize,
                self.summarizer.name,
                due,
                self.owner,
                self.lease_seconds,
            )
            return drive_sync(plan, self.memory.store, self.memory.hooks)
        except Abandoned:
            return None  # close() reported it
        except Exception as exc:
            with self._lock:
                self.failures += 1
                self._retry_at = time.monotonic() + RETRY_SECONDS
            log.warning("summarizing %s failed", due.conversation, exc_info=exc)
            warnings.warn(
                f"summarizer {self.summarizer.name!r} failed on {due.conversation} "
                f"(seqs {due.start_seq}..{due.end_seq}): {type(exc).__name__}: {exc}; "
                "windows go on without this summary",
                SummaryWarning,
                stacklevel=1,
            )
            return None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the summaries under way (at most ``timeout`` seconds); whether all ended."""
        return self.memory.worker.wait(timeout, tags=SummaryDue)

    def close(self, timeout: float | None = CLOSE_TIMEOUT_SECONDS) -> list[SummaryDue]:
        """Wait for the summaries under way, at most ``timeout`` seconds (``None``: as long as
        they take), then stop the ``Memory``'s worker (no new ones start).

        Returns the summaries abandoned when the time ran out, each also named in a
        :class:`SummaryWarning` (and the log): none of them is stored. A summarizer call still
        running is left to its daemon thread, its answer dropped."""
        return self.abandon(self.memory.worker.close(timeout), timeout)

    def abandon(self, tags: list[object], timeout: float | None) -> list[SummaryDue]:
        """Report the summaries among ``tags`` (what the worker's close gave up on after
        ``timeout`` seconds) and start no new one."""
        with self._lock:
            self._closed = True
        abandoned = [t for t in tags if isinstance(t, SummaryDue)]
        if abandoned:
            ranges = ", ".join(
                f"{due.conversation} (seqs {due.start_seq}..{due.end_seq})" for due in abandoned
            )
            message = (
                f"Memory.close() stopped waiting for summarizer {self.summarizer.name!r} "
                f"after {timeout} s and abandoned {len(abandoned)} "
                f"summar{'y' if len(abandoned) == 1 else 'ies'}, not stored: {ranges}; "
                "a later window asks for them again"
            )
            log.warning(message)
            warnings.warn(message, SummaryWarning, stacklevel=4)
        return abandoned

    def __repr__(self) -> str:
        return f"<Summaries {self.summarizer!r} calls={self.calls}>"
