"""Choosing what of the past the model sees: the window.

A window is the conversation's tail within a token budget (or a message count), read from
the store by an index range (so it costs what the window costs), then trimmed so that it
starts at a user turn and never holds a tool call without its result or a result without
its call. The leading system message, and optionally the first turn, can be pinned. Turns
evicted from the window can be summarized through the ``summarize`` hook; each summary is
stored with the seq range it covers and reused until the window moves on by about half its
budget, so summarizing costs once per range, not once per turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .hookspecs import hookimpl
from .messages import Message, Record, Summary
from .steps import Plan, StoreCall

if TYPE_CHECKING:
    from .hooks import Hooks
    from .run import Run

HEAD_LIMIT = 64
"""How many of a conversation's first messages are read to find the pinned ones."""

SUMMARY_SOURCE_LIMIT = 200
"""At most this many evicted messages are handed to the summarizer at once."""

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


@dataclass(slots=True)
class Window:
    """The past messages a run is given: pinned head, optional summary, then the tail."""

    conversation: str
    records: list[Record] = field(default_factory=list)
    pinned: list[Record] = field(default_factory=list)
    summary: Summary | None = None

    @property
    def tokens(self) -> int:
        """Stored tokens of everything in the window."""
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
            out.append(Message.system(SUMMARY_PREFIX + self.summary.text))
        out.extend(r.message for r in self.records)
        return out


def _strip_orphans(records: list[Record]) -> list[Record]:
    """Drop tool calls without results and results without calls, and messages left empty."""
    calls = {c.id for r in records for c in r.message.tool_calls}
    results = {t.id for r in records for t in r.message.tool_results}
    if calls == results:
        return records
    out: list[Record] = []
    for r in records:
        m = r.message
        if m.tool_calls and not all(c.id in results for c in m.tool_calls):
            kept = [c for c in m.tool_calls if c.id in results]
            if not kept and not m.text:
                continue
            m = replace(m, tool_calls=kept, raw=None, meta={**m.meta, "trimmed": True})
        elif m.tool_results and not all(t.id in calls for t in m.tool_results):
            kept_results = [t for t in m.tool_results if t.id in calls]
            if not kept_results:
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


@hookimpl(trylast=True)
def select_window(
    records: list[Record], max_tokens: int | None, max_messages: int | None
) -> list[Record]:
    """The built-in strategy: start at a user turn, never split a tool call from its result."""
    if max_messages is not None and len(records) > max_messages:
        records = records[-max_messages:]
    if max_tokens is not None:
        total = 0
        for i in range(len(records) - 1, -1, -1):
            total += records[i].tokens
            if total > max_tokens:
                records = records[i + 1 :]
                break
    return _strip_orphans(from_user_turn(records))


def _pinned(head: list[Record], pin_system: bool, pin_first_turn: bool) -> list[Record]:
    pinned: list[Record] = []
    i = 0
    while i < len(head) and head[i].message.role == "system":
        if pin_system:
            pinned.append(head[i])
        i += 1
    if pin_first_turn and i < len(head) and head[i].message.role == "user":
        j = i + 1
        while j < len(head) and head[j].message.role != "user":
            j += 1
        if j < len(head):  # the first turn is complete: a second one has started
            pinned.extend(_strip_orphans(head[i:j]))
    return pinned


def window_plan(
    conversation: str,
    *,
    hooks: Hooks,
    max_tokens: int | None,
    max_messages: int | None,
    pin_system: bool = True,
    pin_first_turn: bool = False,
    summary_tokens: int = 0,
    model: str | None = None,
    run: Run | None = None,
) -> Plan[Window]:
    """Read and trim the window of ``conversation`` (see the module docstring)."""
    window = Window(conversation)
    summarize = hooks.summarize([], None, summary_tokens, model) if summary_tokens > 0 else None
    summary: Summary | None = None
    if summarize is not None:
        summary = yield StoreCall("latest_summary", (conversation,))
    budget = max_tokens
    if budget is not None and summary is not None:
        budget = max(0, budget - summary.tokens)

    tail: list[Record] = []
    pinned_end = 0
    want_tail = budget != 0 and max_messages != 0
    if pin_system or pin_first_turn:
        # One call for the head the pins need (usually a few messages) and the tail: the
        # tail is read within the whole budget and trimmed below once the pins are known.
        probe = HEAD_LIMIT if pin_first_turn else 2
        head: list[Record]
        if want_tail:
            head, tail = yield StoreCall(
                "head_and_tail",
                (conversation,),
                {"head": probe, "max_tokens": budget, "max_messages": max_messages},
            )
        else:
            head = yield StoreCall("read", (conversation,), {"limit": probe})
        if len(head) == probe < HEAD_LIMIT and all(r.message.role == "system" for r in head):
            head = yield StoreCall("read", (conversation,), {"limit": HEAD_LIMIT})
        window.pinned = _pinned(head, pin_system, pin_first_turn)
        if window.pinned:
            pinned_end = window.pinned[-1].seq
            if budget is not None:
                budget = max(0, budget - sum(r.tokens for r in window.pinned))
    elif want_tail:
        tail = yield StoreCall(
            "tail", (conversation,), {"max_tokens": budget, "max_messages": max_messages}
        )
    floor = max(pinned_end, summary.end_seq if summary else 0)
    candidates = [r for r in tail if r.seq > floor]
    selected: list[Record] = yield hooks.select_window(candidates, budget, max_messages)

    first = selected[0].seq if selected else (tail[-1].seq + 1 if tail else floor + 1)
    if summarize is not None and first - 1 > floor and max_tokens is not None:
        # Turns were evicted past the stored summary: summarize them, and move the cut
        # forward to half the budget so the next turns reuse this summary.
        budget_now = max(0, max_tokens - sum(r.tokens for r in window.pinned) - summary_tokens)
        kept: list[Record] = yield hooks.select_window(candidates, budget_now // 2, max_messages)
        cut = kept[0].seq if kept else first
        start = max(floor + 1, cut - SUMMARY_SOURCE_LIMIT)
        evicted: list[Record] = yield StoreCall(
            "read", (conversation,), {"start_seq": start, "end_seq": cut - 1}
        )
        summarize.kwargs["messages"] = [r.message for r in evicted]
        summarize.kwargs["previous"] = summary.text if summary else None
        text = yield summarize
        if text:
            counted: list[int] = yield hooks.count_tokens([text], model)
            if counted[0] > summary_tokens:  # an over-long summary is cut to its budget
                text = text[: max(1, len(text) * summary_tokens // counted[0])]
                counted = yield hooks.count_tokens([text], model)
            covered_from = summary.start_seq if summary and summary.end_seq + 1 >= start else start
            summary = Summary(covered_from, cut - 1, text, counted[0])
            yield StoreCall("put_summary", (conversation, summary))
            selected = kept or selected
    window.summary = summary
    window.records = selected
    loaded = hooks.history_loaded(run, window)
    if loaded is not None:
        yield loaded
    return window
