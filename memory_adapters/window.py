"""Choosing what of the past the model sees: the window.

A window is the conversation's tail within a budget (tokens, messages or both), read from the
store by an index range, so it costs what the window costs. What the window holds, in the
order it keeps them when the budget is short (each is left out whole when it does not fit in
what the ones before it left, and :attr:`Window.left_out` says so):

1. the pinned system messages at the conversation's start (``pin_system``);
2. the pinned first turn (``pin_first_turn``), once a second turn has begun;
3. the summary of evicted turns, when summaries are on (``summary_tokens``) and the store
   has one: the newest it has, even one that does not cover the latest evicted turns yet
   (the tail then starts where the budget lets it, after a gap nothing shows);
4. the tail: the newest whole turns that fit in what is left. The tail starts at a user
   message, or at the conversation's start (right after the pins) when everything since then
   fits, whatever role opens it (an agent that greets first).

The budget is a cap: ``Window.tokens`` (the stored token counts of what it holds, the summary
message included) never exceeds ``max_tokens``, and ``len(Window.messages())`` never exceeds
``max_messages``.

A window is valid for every model API: a tool call is shown only with its result, and a result
only with its call. A call is answered only by a result in the ``tool`` messages that directly
follow the message that made it (an empty ``system`` message, pydantic-ai's bookkeeping, may
sit between); anything else between them (a user message, another model response) means the
call was never answered (a run that failed) and is left out, however its id is reused later.
Within one message a call id counts once. Messages that lose calls or results are marked
``meta["trimmed"] = True`` and lose their ``raw``, so adapters rebuild them from the neutral
form; a message left with nothing is dropped. One exception, for a run that *resumes*
(``resuming=True``): calls that a run left waiting for their results (an approval, a deferred
tool; the adapter marks them ``meta["awaiting"]``) stay at the window's end, where nothing but
tool messages follows them, so that the run can answer them.

Turns evicted from the window can be summarized through the ``summarize`` hook; each summary
is stored with the seq range it covers and reused until the window moves on by about half its
budget, so summarizing costs once per range, not once per turn. With a ``Memory`` summarizer
(:mod:`memory_adapters.summaries`) and no such hook, the window does not wait for a summary:
it names the range due in :attr:`Window.summary_due`, computed after the turn in the
background and shown from the next window on. The stored summary is read in the same round
trip as the window's messages; with summaries off nothing more is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from .hookspecs import hookimpl
from .messages import Message, Record, Summary
from .steps import Plan, StoreBatch, StoreCall
from .summaries import SummaryDue
from .tokens import MESSAGE_OVERHEAD

if TYPE_CHECKING:
    from .hooks import Hooks
    from .run import Run

HEAD_LIMIT = 64
"""How many of a conversation's first messages are read to find the pinned ones."""

SUMMARY_SOURCE_LIMIT = 200
"""At most this many evicted messages are handed to the summarizer at once."""

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"

Reason = Literal["pinned", "summary", "unanswered_call", "orphan_result"]


@dataclass(frozen=True, slots=True)
class LeftOut:
    """Something stored that a window does not show, and why.

    ``reason`` is ``"pinned"`` (a pinned group larger than what the budget left),
    ``"summary"`` (the summary did not fit), ``"unanswered_call"`` (tool calls no result
    answers, as a failed run leaves them; ``call_ids`` names them) or ``"orphan_result"``
    (tool results whose call is not right before them). ``seqs`` are the records concerned
    (for a summary, the first and last seq it covers); ``tokens`` is what leaving them out
    saved (0 for a message that was only trimmed)."""

    reason: Reason
    seqs: tuple[int, ...]
    tokens: int = 0
    call_ids: tuple[str, ...] = ()


@dataclass(slots=True)
class Window:
    """The past messages a run is given: pinned head, optional summary, then the tail."""

    conversation: str
    records: list[Record] = field(default_factory=list)
    pinned: list[Record] = field(default_factory=list)
    summary: Summary | None = None
    max_tokens: int | None = None
    """The token budget the window was chosen within (``None``: none)."""
    max_messages: int | None = None
    """The message budget the window was chosen within (``None``: none)."""
    left_out: list[LeftOut] = field(default_factory=list)
    """What the window did not show for want of budget or because it would break a model
    API (see :class:`LeftOut`); older turns that fell out of the tail are not listed."""
    summary_due: SummaryDue | None = None
    """Turns evicted past the stored summary, for a background summarizer to summarize
    (``None``: nothing due, or summaries are made inline or are off)."""

    @property
    def tokens(self) -> int:
        """Stored tokens of everything in the window (at most ``max_tokens``)."""
        total = sum(r.tokens for r in self.pinned) + sum(r.tokens for r in self.records)
        return total + (self.summary.tokens if self.summary else 0)

    @property
    def last_seq(self) -> int:
        """The seq of the newest message in the window (0 if empty)."""
        if self.records:
            return self.records[-1].seq
        return self.pinned[-1].seq if self.pinned else 0

    def messages(self) -> list[Message]:
        """The window as messages, in the order the model should see them."""
        out = [r.message for r in self.pinned]
        if self.summary is not None:
            out.append(summary_message(self.summary.text))
        out.extend(r.message for r in self.records)
        return out


def summary_message(text: str) -> Message:
    """The system message a summary is shown as."""
    return Message.system(SUMMARY_PREFIX + text)


# -- validity: tool calls with their results ---------------------------------------------------


def _transparent(message: Message) -> bool:
    """An empty system message (pydantic-ai's bookkeeping) may sit between calls and results."""
    return message.role == "system" and not message.text


AWAITING = "awaiting"
"""The ``meta`` key an adapter sets on a message whose calls a run left waiting for their
results (approvals, deferred tools): the ids of those calls."""


def pair_tool_calls(
    records: list[Record], left_out: list[LeftOut] | None = None, resuming: bool = False
) -> list[Record]:
    """``records`` with every tool call that its results do not directly follow, and every
    result that does not directly follow its call, left out (see the module docstring).

    With ``resuming`` (``records`` end where the conversation ends, and the run resumes calls
    left waiting), the calls the last model message marks as awaiting (``meta["awaiting"]``)
    stay unanswered at the end, where only tool messages follow them.

    Returns ``records`` itself when nothing had to go; ``left_out`` collects what went."""
    call_ok: dict[int, list[bool]] = {}
    result_ok: dict[int, list[bool]] = {}
    current = -1  # the record whose calls the tool messages that follow may answer
    open_ids: dict[str, int] = {}  # unanswered call id -> its position in that record
    for i, r in enumerate(records):
        m = r.message
        if m.role == "tool":
            flags = []
            for t in m.tool_results:
                pos = open_ids.pop(t.id, None)
                flags.append(pos is not None)
                if pos is not None:
                    call_ok[current][pos] = True
            if not all(flags) or not flags:
                result_ok[i] = flags
            continue
        if _transparent(m):
            continue
        open_ids = {}
        current = -1
        if m.tool_calls:
            current = i
            call_ok[i] = [False] * len(m.tool_calls)
            for pos, c in enumerate(m.tool_calls):
                open_ids.setdefault(c.id, pos)  # a repeated id in one message counts once
    if resuming and current >= 0:
        awaiting = records[current].message.meta.get(AWAITING)
        if isinstance(awaiting, list):
            for call_id in awaiting:
                pos = open_ids.pop(call_id, None) if isinstance(call_id, str) else None
                if pos is not None:
                    call_ok[current][pos] = True
    bad_calls = {i: flags for i, flags in call_ok.items() if not all(flags)}
    if not bad_calls and not result_ok:
        return records
    out: list[Record] = []
    for i, r in enumerate(records):
        m = r.message
        if i in bad_calls:
            flags = bad_calls[i]
            kept = [c for c, ok in zip(m.tool_calls, flags, strict=True) if ok]
            dropped = tuple(c.id for c, ok in zip(m.tool_calls, flags, strict=True) if not ok)
            gone = not kept and not m.text
            if left_out is not None:
                left_out.append(LeftOut("unanswered_call", (r.seq,), r.tokens * gone, dropped))
            if gone:
                continue
            m = replace(m, tool_calls=kept, raw=None, meta={**m.meta, "trimmed": True})
        elif i in result_ok:
            flags = result_ok[i]
            kept_results = [t for t, ok in zip(m.tool_results, flags, strict=True) if ok]
            dropped = tuple(t.id for t, ok in zip(m.tool_results, flags, strict=True) if not ok)
            gone = not kept_results
            if left_out is not None:
                left_out.append(LeftOut("orphan_result", (r.seq,), r.tokens * gone, dropped))
            if gone:
                continue
            m = replace(m, tool_results=kept_results, raw=None, meta={**m.meta, "trimmed": True})
        out.append(r if m is r.message else replace(r, message=m))
    return out


def from_user_turn(records: list[Record]) -> list[Record]:
    """``records`` from the first user message on."""
    for i, r in enumerate(records):
        if r.message.role == "user":
            return records[i:]
    return []


def cut(
    records: list[Record], max_tokens: int | None, max_messages: int | None, opening: bool = False
) -> list[Record]:
    """The newest of ``records`` within both limits, from a user message on; or all of them
    when ``opening`` says they begin at the conversation's start and all of them fit."""
    start = 0
    if max_messages is not None and len(records) > max_messages:
        start = len(records) - max_messages
    if max_tokens is not None:
        total = 0
        for i in range(len(records) - 1, start - 1, -1):
            total += records[i].tokens
            if total > max_tokens:
                start = i + 1
                break
    tail = records[start:]
    return tail if opening and start == 0 else from_user_turn(tail)


@hookimpl(trylast=True)
def select_window(
    records: list[Record], max_tokens: int | None, max_messages: int | None, opening: bool
) -> list[Record]:
    """The built-in strategy: the newest whole turns that fit (see :func:`cut`)."""
    return cut(records, max_tokens, max_messages, opening)


# -- pins ---------------------------------------------------------------------------------------


def _pin_groups(
    head: list[Record], pin_system: bool, pin_first_turn: bool
) -> tuple[list[list[Record]], int]:
    """The groups to pin (the leading system messages; the first turn, once complete), and
    the seq the pinned head ends at (the tail starts after it)."""
    groups: list[list[Record]] = []
    i = 0
    while i < len(head) and head[i].message.role == "system":
        i += 1
    if pin_system and i:
        groups.append(head[:i])
    end = head[i - 1].seq if (pin_system and i) else 0
    if pin_first_turn and i < len(head) and head[i].message.role == "user":
        j = i + 1
        while j < len(head) and head[j].message.role != "user":
            j += 1
        if j < len(head):  # the first turn is complete: a second one has started
            groups.append(pair_tool_calls(head[i:j]))
            end = head[j - 1].seq
    return groups, end


@dataclass(slots=True)
class _Budget:
    """What is left of a window's budget while its parts are chosen."""

    tokens: int | None
    messages: int | None

    def fits(self, tokens: int, messages: int) -> bool:
        return (self.tokens is None or tokens <= self.tokens) and (
            self.messages is None or messages <= self.messages
        )

    def take(self, tokens: int, messages: int) -> None:
        if self.tokens is not None:
            self.tokens -= tokens
        if self.messages is not None:
            self.messages -= messages


def fit_summary(
    hooks: Hooks, text: str, limit: int, model: str | None
) -> Plan[tuple[str, int] | None]:
    """``text`` cut until its summary message counts at most ``limit`` tokens, and the count;
    ``None`` when nothing of it fits."""
    for _ in range(6):
        counted: list[int] = yield hooks.count_tokens([SUMMARY_PREFIX + text], model)
        tokens = counted[0] + MESSAGE_OVERHEAD
        if tokens <= limit:
            return text, tokens
        keep = len(text) * max(0, limit - MESSAGE_OVERHEAD) // tokens
        text = text[: min(keep, len(text) - 1)]
        if not text:
            return None
    return None


# -- the plan -------------------------------------------------------------------------------------


def window_plan(
    conversation: str,
    *,
    hooks: Hooks,
    max_tokens: int | None,
    max_messages: int | None,
    pin_system: bool = True,
    pin_first_turn: bool = False,
    summary_tokens: int = 0,
    resuming: bool = False,
    model: str | None = None,
    run: Run | None = None,
    background: bool = False,
) -> Plan[Window]:
    """Read and choose the window of ``conversation`` (see the module docstring; ``resuming``
    as for :func:`pair_tool_calls`). With ``background`` (a ``Memory`` summarizer) and no
    ``summarize`` hook, turns evicted past the stored summary are named in
    :attr:`Window.summary_due` instead of summarized here."""
    window = Window(conversation, max_tokens=max_tokens, max_messages=max_messages)
    left = _Budget(max_tokens, max_messages)
    summarize = hooks.summarize([], None, summary_tokens, model) if summary_tokens > 0 else None
    summaries = summary_tokens > 0 and (summarize is not None or background)

    # One call reads the head the pins need (usually a few messages) and the tail within the
    # whole budget; the tail is cut to what the pins and the summary leave below. The stored
    # summary, when summaries are on, is read in the same round trip.
    tail: list[Record] = []
    want_tail = max_tokens != 0 and max_messages != 0
    pinned_end = 0
    pins = pin_system or pin_first_turn
    probe = HEAD_LIMIT if pin_first_turn else 2
    first: StoreCall | None = None
    if pins and want_tail:
        first = StoreCall(
            "head_and_tail",
            (conversation,),
            {"head": probe, "max_tokens": max_tokens, "max_messages": max_messages},
        )
    elif pins:
        first = StoreCall("read", (conversation,), {"limit": probe})
    elif want_tail:
        first = StoreCall(
            "tail", (conversation,), {"max_tokens": max_tokens, "max_messages": max_messages}
        )
    stored: Summary | None = None
    got: object = None
    if summaries and first is not None:
        stored, got = yield StoreBatch([StoreCall("latest_summary", (conversation,)), first])
    elif summaries:
        stored = yield StoreCall("latest_summary", (conversation,))
    elif first is not None:
        got = yield first
    if pins:
        head: list[Record]
        if want_tail:
            head, tail = got  # type: ignore[misc]
        else:
            head = got  # type: ignore[assignment]
        if len(head) == probe < HEAD_LIMIT and all(r.message.role == "system" for r in head):
            head = yield StoreCall("read", (conversation,), {"limit": HEAD_LIMIT})
        groups, pinned_end = _pin_groups(head, pin_system, pin_first_turn)
        for group in groups:
            cost = sum(r.tokens for r in group)
            if left.fits(cost, len(group)):
                window.pinned.extend(group)
                left.take(cost, len(group))
            elif group:
                window.left_out.append(LeftOut("pinned", tuple(r.seq for r in group), cost))
    elif want_tail:
        tail = got  # type: ignore[assignment]

    summary: Summary | None = None
    if stored is not None:
        if left.fits(stored.tokens, 1):
            summary = stored
        else:
            window.left_out.append(
                LeftOut("summary", (stored.start_seq, stored.end_seq), stored.tokens)
            )
    floor = max(pinned_end, summary.end_seq if summary else 0)
    candidates = [r for r in tail if r.seq > floor]
    opening = bool(candidates) and candidates[0].seq == floor + 1
    after_summary = _Budget(left.tokens, left.messages)
    if summary is not None:
        after_summary.take(summary.tokens, 1)
    start_of_tail, selected = yield from _select(
        hooks, candidates, after_summary, opening, floor + 1, window.left_out, resuming
    )
    start: int | None = None
    end = 0
    if (
        summaries
        and start_of_tail - 1 > floor
        and left.tokens is not None
        and left.fits(summary_tokens, 1)
    ):
        # Turns were evicted past the stored summary: summarize them, and move the cut on to
        # half of what the new summary leaves, so that the next turns reuse this summary.
        half = _Budget((left.tokens - summary_tokens) // 2, None)
        if left.messages is not None:
            half.messages = left.messages - 1
        kept = cut(candidates, half.tokens, half.messages)
        end = (kept[0].seq if kept else start_of_tail) - 1  # the last seq the new one covers
        start = max(floor + 1, end + 1 - SUMMARY_SOURCE_LIMIT)
    if summaries and summarize is None and start is not None:
        window.summary_due = SummaryDue(conversation, start, end, stored, summary_tokens, model)
    elif summarize is not None and start is not None:
        evicted: list[Record] = yield StoreCall(
            "read", (conversation,), {"start_seq": start, "end_seq": end}
        )
        summarize.kwargs["messages"] = [r.message for r in evicted]
        summarize.kwargs["previous"] = stored.text if stored else None
        text = yield summarize
        fitted = (yield from fit_summary(hooks, text, summary_tokens, model)) if text else None
        if fitted is not None:
            covered_from = stored.start_seq if stored and stored.end_seq + 1 >= start else start
            summary = Summary(covered_from, end, fitted[0], fitted[1])
            yield StoreCall("put_summary", (conversation, summary))
            after_summary = _Budget(left.tokens, left.messages)
            after_summary.take(summary.tokens, 1)
            rest = [r for r in candidates if r.seq > summary.end_seq]
            window.left_out = [x for x in window.left_out if x.reason == "pinned"]
            opening = bool(rest) and rest[0].seq == summary.end_seq + 1
            _, selected = yield from _select(
                hooks, rest, after_summary, opening, summary.end_seq + 1, window.left_out, resuming
            )
    window.summary = summary
    window.records = selected
    loaded = hooks.history_loaded(run, window)
    if loaded is not None:
        yield loaded
        # what a plugin left must still be valid for the model's API
        window.pinned = pair_tool_calls(window.pinned, window.left_out)
        window.records = pair_tool_calls(window.records, window.left_out, resuming)
    return window


def _select(
    hooks: Hooks,
    candidates: list[Record],
    left: _Budget,
    opening: bool,
    start_seq: int,
    left_out: list[LeftOut],
    resuming: bool,
) -> Plan[tuple[int, list[Record]]]:
    """The tail through the ``select_window`` hook, then held to the window's rules whatever
    the hook returned: within what is left of the budget, from a user message (or the
    opening, the record at ``start_seq``), tool calls paired with their results. Also the seq
    the tail's span starts at (past the last candidate when nothing fits): everything after
    the floor and before it was evicted."""
    tokens = None if left.tokens is None else max(0, left.tokens)
    messages = None if left.messages is None else max(0, left.messages)
    chosen: list[Record] = yield hooks.select_window(candidates, tokens, messages, opening)
    span = cut(list(chosen), tokens, messages, bool(chosen) and chosen[0].seq == start_seq)
    past = candidates[-1].seq + 1 if candidates else start_seq
    first = span[0].seq if span else past
    return first, pair_tool_calls(span, left_out, resuming)
