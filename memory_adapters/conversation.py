"""The conversation log of one scope: append turns, read windows.

Every turn is appended as one batch; each message's tokens are counted once, here, and
stored with it. Reading a window costs what the window costs (see :mod:`.window`).
"""

from __future__ import annotations

import asyncio
import copy
import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .conversation_search import IndexDue, MessageHit, asearch, delete_plan, search
from .errors import InvalidInput, InvalidValue, ValueTooLarge
from .facts import SearchMode
from .messages import AppendResult, Entry, Message, Record, ToolCall
from .steps import Plan, StoreCall, drive_async, drive_sync
from .tokens import MESSAGE_OVERHEAD
from .tracing import traced
from .validation import (
    check_bool,
    check_id,
    check_model,
    check_optional_int,
    check_positive_int,
    check_read_range,
)
from .window import AWAITING, Window, window_plan


class Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "UNSET"


UNSET = Unset.UNSET
"""Marks an option that was not given, so the ``Memory``'s default applies."""

AWAITING_PAGE = 64
"""Records read at a time, from the end, looking for the run a conversation ends waiting on."""


@dataclass(frozen=True, slots=True)
class AwaitingRun:
    """A run that ended waiting for tool results it cannot make itself: approvals, deferred
    tools (:meth:`Conversation.awaiting`)."""

    run_id: str | None
    """The id the run started under (the id its stored messages carry, with pydantic-ai). A
    run is resumed by its conversation: with pydantic-ai, a run in it given only
    ``deferred_tool_results``; with LangChain, ``Command(resume=...)`` on its thread."""
    calls: tuple[ToolCall, ...]
    """The calls it waits on, with their tool names and arguments, in the model's order."""
    seq: int | None = None
    """The stored message holding the calls; ``None`` where the framework holds the run until
    it resumes (a LangGraph checkpoint: :func:`memory_adapters.langchain.awaiting`)."""


if TYPE_CHECKING:
    from .memory import Memory
    from .run import Run
    from .scope import Scope


class Conversation:
    """The conversation log of one scope (namespace, user, conversation id)."""

    __slots__ = ("_key", "_memory", "scope")

    def __init__(self, memory: Memory, scope: Scope) -> None:
        self._memory = memory
        self.scope = scope
        self._key = scope.conversation_key if scope.conversation_id is not None else None

    @property
    def key(self) -> str:
        """The store key of the conversation; :class:`~memory_adapters.errors.NoScope` without
        a conversation id in scope (only :meth:`search` of ``all_conversations`` needs none)."""
        return self._key if self._key is not None else self.scope.conversation_key

    # -- plans ------------------------------------------------------------------------------

    def _append(
        self,
        messages: Sequence[Message],
        run_id: str | None,
        expected_last_seq: int | None,
        idempotency_key: str | None,
        model: str | None,
        coerce: bool = False,
        run: Run | None = None,
    ) -> Plan[AppendResult]:
        """The append plan, observed as an ``"append"`` operation when a plugin asks
        (:mod:`.tracing`); ``run`` is the run appending, if any."""
        m = self._memory
        if not m.hooks.observes_operations:
            return self._append_plan(
                messages, run_id, expected_last_seq, idempotency_key, model, coerce, None
            )
        seen: dict[str, Any] = {}
        plan = self._append_plan(
            messages, run_id, expected_last_seq, idempotency_key, model, coerce, seen
        )
        content = {"messages": messages}
        return traced(m, "append", self.scope, plan, run=run, attributes=seen, content=content)

    def _append_plan(
        self,
        messages: Sequence[Message],
        run_id: str | None,
        expected_last_seq: int | None,
        idempotency_key: str | None,
        model: str | None,
        coerce: bool,
        seen: dict[str, Any] | None,
    ) -> Plan[AppendResult]:
        check_bool(coerce, "coerce")
        if isinstance(messages, Message) or not isinstance(messages, Sequence):
            raise InvalidInput("append takes a sequence of Message objects")
        msgs = list(messages)
        if not msgs:
            raise InvalidInput("append needs at least one message")
        for m in msgs:
            if not isinstance(m, Message):
                raise InvalidInput(f"append takes Message objects, not {type(m).__name__}")
            m.check_fields()
        if run_id is not None:
            check_id(run_id, "run_id")
        if idempotency_key is not None:
            check_id(idempotency_key, "idempotency_key")
        if expected_last_seq is not None:
            check_positive_int(expected_last_seq, "expected_last_seq", allow_zero=True)
        hooks = self._memory.hooks
        step = hooks.before_save(self.scope, msgs)
        if step is not None:
            # transforms change copies: the caller's own messages stay as they were
            msgs = [copy.deepcopy(m) for m in msgs]
            step.kwargs["messages"] = msgs
            yield step
            for m in msgs:
                if not isinstance(m, Message):
                    raise InvalidInput(f"a before_save hook left a {type(m).__name__} in the turn")
            if not msgs:
                raise InvalidInput("a before_save hook removed every message of the turn")
        limit = self._memory.max_turn_bytes
        data = [_serialized(msgs, i, limit, coerce) for i in range(len(msgs))]
        counts: list[int] = yield hooks.count_tokens(
            [m.token_text() for m in msgs], model or self._memory.model
        )
        entries = [
            Entry(m.role, d, n + MESSAGE_OVERHEAD)
            for m, d, n in zip(msgs, data, counts, strict=True)
        ]
        size = sum(len(e.data) for e in entries)
        if seen is not None:
            seen["messages"] = len(entries)
            seen["tokens"] = sum(e.tokens for e in entries)
        if size > limit:
            raise ValueTooLarge(f"the turn is about {size} bytes; the limit is {limit}")
        result: AppendResult = yield StoreCall(
            "append",
            (self.key, entries),
            {
                "run_id": run_id,
                "expected_last_seq": expected_last_seq,
                "idempotency_key": idempotency_key,
            },
        )
        if not result.duplicate:
            step = hooks.after_save(self.scope, self._records(result, msgs, entries, run_id))
            if step is not None:
                yield step
        return result

    @staticmethod
    def _records(
        result: AppendResult, msgs: list[Message], entries: list[Entry], run_id: str | None
    ) -> list[Record]:
        now = time.time()
        return [
            Record(result.first_seq + i, m, e.tokens, result.first_seq, run_id, now)
            for i, (m, e) in enumerate(zip(msgs, entries, strict=True))
        ]

    def _window(self, options: dict[str, Any], run: Run | None) -> Plan[Window]:
        """The window plan, observed as a ``"window"`` operation when a plugin asks
        (:mod:`.tracing`)."""
        plan = self._window_plan(options, run)
        if not self._memory.hooks.observes_operations:
            return plan
        return traced(self._memory, "window", self.scope, plan, run=run)

    def _window_plan(self, options: dict[str, Any], run: Run | None) -> Plan[Window]:
        m = self._memory
        max_tokens = options.get("max_tokens", m.history_tokens)
        max_messages = options.get("max_messages")
        check_optional_int(max_tokens, "max_tokens")
        check_optional_int(max_messages, "max_messages")
        if max_tokens is None and max_messages is None:
            raise InvalidInput("a window needs max_tokens or max_messages")
        for flag in ("pin_system", "pin_first_turn", "resuming"):
            if flag in options:
                check_bool(options[flag], flag)
        if "summary_tokens" in options:
            check_positive_int(options["summary_tokens"], "summary_tokens", allow_zero=True)
        window: Window = yield from window_plan(
            self.key,
            hooks=m.hooks,
            max_tokens=max_tokens,
            max_messages=max_messages,
            pin_system=options.get("pin_system", m.pin_system),
            pin_first_turn=options.get("pin_first_turn", m.pin_first_turn),
            summary_tokens=options.get("summary_tokens", m.summary_tokens),
            resuming=options.get("resuming", False),
            model=m.model,
            run=run,
            background=m.summaries is not None,
        )
        return window

    # -- sync ---------------------------------------------------------------------------------

    def append(
        self,
        messages: Sequence[Message],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
        model: str | None = None,
        coerce: bool = False,
    ) -> AppendResult:
        """Append one turn's messages as one batch.

        ``expected_last_seq`` makes it conditional (raises
        :class:`~memory_adapters.errors.AppendConflict`); ``idempotency_key`` makes a retry
        a no-op; ``model`` picks the tokenizer (default: the ``Memory``'s).
        ``expected_last_seq`` is an int from 0 to ``MAX_INT``; ``run_id`` and
        ``idempotency_key`` are identifiers. A value that is not plain JSON raises
        :class:`~memory_adapters.errors.InvalidValue`, unless ``coerce`` is true: for messages
        a framework accepted from a model (``NaN`` in tool-call arguments, a lone surrogate),
        which are then stored in the encoding of :func:`~memory_adapters.validation.json_safe`.
        """
        check_model(model)
        result: AppendResult = drive_sync(
            self._append(messages, run_id, expected_last_seq, idempotency_key, model, coerce),
            self._memory.store,
            self._memory.hooks,
        )
        if not result.duplicate:
            self._memory.conversation_index.submit(self.key)
        return result

    def window(
        self,
        *,
        max_tokens: int | Unset | None = UNSET,
        max_messages: int | None = None,
        pin_system: bool | None = None,
        pin_first_turn: bool | None = None,
        summary_tokens: int | None = None,
        resuming: bool = False,
        run: Run | None = None,
    ) -> Window:
        """The window of past messages for the next model call.

        Defaults come from the ``Memory`` (``history_tokens`` etc.). ``max_messages`` adds a
        count limit to the token budget; ``max_tokens=None`` removes the token budget.
        ``max_tokens``, ``max_messages`` and ``summary_tokens`` are ints from 0 to
        ``MAX_INT`` (``sys.maxsize`` works as "no limit"); the pins are ``True`` or ``False``.
        ``resuming`` is for a run that resumes calls a run left waiting for their results
        (approvals, deferred tools): the calls its last message marks as awaiting
        (``meta["awaiting"]``) stay at the window's tail, unanswered.
        With a ``Memory`` summarizer, a summary the window found due is computed in the
        background (:mod:`memory_adapters.summaries`) and shown from a later window on.
        """
        window = drive_sync(
            self._window(
                _opts(
                    max_tokens, max_messages, pin_system, pin_first_turn, summary_tokens, resuming
                ),
                run,
            ),
            self._memory.store,
            self._memory.hooks,
        )
        if window.summary_due is not None and self._memory.summaries is not None:
            self._memory.summaries.submit(window.summary_due)
        return window

    def messages(self, **options: Any) -> list[Message]:
        """Shorthand for ``window(**options).messages()``."""
        return self.window(**options).messages()

    def read(
        self, *, start_seq: int = 1, end_seq: int | None = None, limit: int | None = None
    ) -> list[Record]:
        """Stored records by seq range (for export and inspection, not for prompts).

        ``start_seq`` is an int >= 1, ``end_seq`` ``None`` or an int >= 0 (below
        ``start_seq``: nothing), ``limit`` ``None`` or an int >= 1; all at most ``MAX_INT``.
        """
        start_seq, end_seq, limit = check_read_range(start_seq, end_seq, limit)
        return self._memory.store.read(self.key, start_seq=start_seq, end_seq=end_seq, limit=limit)

    def last_seq(self) -> int:
        """The newest seq (0 when empty)."""
        return self._memory.store.last_seq(self.key)

    def clear(self) -> int:
        """Delete the whole conversation log, and its messages from the conversation index;
        return how many messages went."""
        self._memory.conversation_index.wait()
        return drive_sync(self._clear(), self._memory.store, self._memory.hooks)

    def _clear(self) -> Plan[int]:
        deleted: int = yield StoreCall("delete_conversation", (self.key,))
        # seqs are gapless from 1: the messages that went are seqs 1..deleted
        yield from delete_plan(self.scope.namespace, self.key, deleted)
        return deleted

    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        mode: SearchMode | None = None,
        all_conversations: bool = False,
        since: float | datetime | None = None,
        until: float | datetime | None = None,
    ) -> list[MessageHit]:
        """The stored messages most relevant to ``query``, best first, at most ``limit`` (an
        int from 1 to ``MAX_INT``): of this conversation, or with ``all_conversations`` of
        every conversation of its user (in its namespace; never another user's). Each
        :class:`~memory_adapters.conversation_search.MessageHit` has the conversation id, the
        seq, the message, when it was stored, its score and its neighbouring messages.

        A session with a user and no conversation may search ``all_conversations``.

        ``mode`` and scores are those of :meth:`Facts.search
        <memory_adapters.facts.Facts.search>` (``"hybrid"`` by default with an embedder, else
        ``"keyword"``); the first ``k`` hits are the same at any ``limit >= k``, on every
        store. ``since`` / ``until``: only messages stored at or after ``since`` and before
        ``until`` (epoch seconds, or aware datetimes). Messages stored before the search are
        found (what the worker has not indexed yet, the search indexes first): see
        :mod:`memory_adapters.conversation_search`.
        """
        return search(self._memory, self.scope, query, limit, mode, all_conversations, since, until)

    def awaiting(self) -> list[AwaitingRun]:
        """The runs this conversation ends waiting on (a run whose output was pydantic-ai's
        ``DeferredToolRequests``: approvals, deferred tools), each with the calls still
        unanswered, their tool names and arguments. Empty once the run is resumed, or when a
        later turn moved on without answering them (the calls are then abandoned). Reads the
        conversation's end only."""
        end = self.last_seq()
        tail: list[Record] = []
        found: list[AwaitingRun] | None = [] if end < 1 else None
        while found is None:
            start = max(1, end - AWAITING_PAGE + 1)
            tail = self._memory.store.read(self.key, start_seq=start, end_seq=end) + tail
            found = _awaiting(tail, start)
            end = start - 1
        return found

    # -- async --------------------------------------------------------------------------------

    async def aappend(
        self,
        messages: Sequence[Message],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
        model: str | None = None,
        coerce: bool = False,
    ) -> AppendResult:
        """Async :meth:`append`."""
        check_model(model)
        result: AppendResult = await drive_async(
            self._append(messages, run_id, expected_last_seq, idempotency_key, model, coerce),
            self._memory.store,
            self._memory.hooks,
        )
        if not result.duplicate:
            self._memory.conversation_index.submit(self.key)
        return result

    async def awindow(
        self,
        *,
        max_tokens: int | Unset | None = UNSET,
        max_messages: int | None = None,
        pin_system: bool | None = None,
        pin_first_turn: bool | None = None,
        summary_tokens: int | None = None,
        resuming: bool = False,
        run: Run | None = None,
    ) -> Window:
        """Async :meth:`window`."""
        window = await drive_async(
            self._window(
                _opts(
                    max_tokens, max_messages, pin_system, pin_first_turn, summary_tokens, resuming
                ),
                run,
            ),
            self._memory.store,
            self._memory.hooks,
        )
        if window.summary_due is not None and self._memory.summaries is not None:
            self._memory.summaries.submit(window.summary_due)
        return window

    async def amessages(self, **options: Any) -> list[Message]:
        """Async :meth:`messages`."""
        return (await self.awindow(**options)).messages()

    async def aread(
        self, *, start_seq: int = 1, end_seq: int | None = None, limit: int | None = None
    ) -> list[Record]:
        """Async :meth:`read`."""
        start_seq, end_seq, limit = check_read_range(start_seq, end_seq, limit)
        return await self._memory.store.aread(
            self.key, start_seq=start_seq, end_seq=end_seq, limit=limit
        )

    async def alast_seq(self) -> int:
        """Async :meth:`last_seq`."""
        return await self._memory.store.alast_seq(self.key)

    async def aclear(self) -> int:
        """Async :meth:`clear`."""
        if self._memory.worker.busy_with(IndexDue):
            await asyncio.to_thread(self._memory.conversation_index.wait)
        return await drive_async(self._clear(), self._memory.store, self._memory.hooks)

    async def asearch(
        self,
        query: str,
        *,
        limit: int = 5,
        mode: SearchMode | None = None,
        all_conversations: bool = False,
        since: float | datetime | None = None,
        until: float | datetime | None = None,
    ) -> list[MessageHit]:
        """Async :meth:`search`."""
        return await asearch(
            self._memory, self.scope, query, limit, mode, all_conversations, since, until
        )

    async def aawaiting(self) -> list[AwaitingRun]:
        """Async :meth:`awaiting`."""
        end = await self.alast_seq()
        tail: list[Record] = []
        found: list[AwaitingRun] | None = [] if end < 1 else None
        while found is None:
            start = max(1, end - AWAITING_PAGE + 1)
            tail = await self._memory.store.aread(self.key, start_seq=start, end_seq=end) + tail
            found = _awaiting(tail, start)
            end = start - 1
        return found


def _awaiting(tail: list[Record], start: int) -> list[AwaitingRun] | None:
    """The runs waiting at the end of a conversation whose last records, from seq ``start``
    on, are ``tail``; ``None`` when an earlier record must be read to know."""
    answered: set[str] = set()
    for record in reversed(tail):
        m = record.message
        if m.role == "tool":
            answered.update(r.id for r in m.tool_results)
            continue
        if m.role == "system" and not m.text:  # pydantic-ai's bookkeeping, between calls
            continue
        ids = m.meta.get(AWAITING) if m.role == "assistant" else None
        if not isinstance(ids, list):
            return []
        by_id = {c.id: c for c in m.tool_calls}
        calls = tuple(
            by_id[i] for i in ids if isinstance(i, str) and i in by_id and i not in answered
        )
        return [AwaitingRun(record.run_id, calls, record.seq)] if calls else []
    return [] if start <= 1 else None


def _serialized(msgs: list[Message], i: int, limit: int, coerce: bool) -> str:
    """The JSON text of ``msgs[i]``; with ``coerce``, a message JSON cannot hold is replaced in
    ``msgs`` by its :meth:`~Message.coerced` copy first."""
    try:
        return msgs[i].serialize(limit)  # validates: one walk, one dump
    except ValueTooLarge:
        raise
    except InvalidValue:
        if not coerce:
            raise
    msgs[i] = msgs[i].coerced()
    return msgs[i].serialize(limit)


def _opts(
    max_tokens: int | Unset | None,
    max_messages: int | None,
    pin_system: bool | None,
    pin_first_turn: bool | None,
    summary_tokens: int | None,
    resuming: bool = False,
) -> dict[str, Any]:
    """Only the options given, so the Memory's defaults fill the rest."""
    opts: dict[str, Any] = {}
    if max_tokens is not UNSET:
        opts["max_tokens"] = max_tokens
    if max_messages is not None:
        opts["max_messages"] = max_messages
    if pin_system is not None:
        opts["pin_system"] = pin_system
    if pin_first_turn is not None:
        opts["pin_first_turn"] = pin_first_turn
    if summary_tokens is not None:
        opts["summary_tokens"] = summary_tokens
    if resuming is not False:
        opts["resuming"] = resuming
    return opts
