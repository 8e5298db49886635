"""The property-based window suite: random tool-heavy conversations, every window checked.

:class:`WindowProperties` (part of :class:`~memory_adapters.testing.StoreConformance`) stores
conversations drawn by hypothesis — call ids reused across turns and within a turn (the way
pydantic-ai's ``TestModel`` and providers that number their calls do), parallel calls, runs
that failed and left calls unanswered, stray results, multi-part messages, greetings, system
prompts, messages larger than any budget — written as neutral messages, or as pydantic-ai or
LangChain messages through the adapters' own mappings when those are installed, split into
batches as the adapters save them. It then reads windows under many budgets and options and
checks each one against an oracle written independently of :mod:`memory_adapters.window`:

* within budget: ``window.tokens <= max_tokens`` and ``len(window.messages()) <= max_messages``;
* every record is the stored one, or the stored one with tool calls or results left out;
* the pinned groups are those that fit, in order; a summary that does not fit is left out;
* the tail is maximal: it starts at the earliest user message (or at the conversation's start,
  right after the pins or the summary) from which the stored messages fit what the pins and the
  summary left, and holds every stored message from there on, but for what a model API forbids;
* valid for every model API: every tool call is answered by the tool messages right after it,
  every result answers a call right before it, no call id twice in one message;
* converted to each installed framework, the model is given exactly the window: pydantic-ai's
  own history repair (``repair_messages``) synthesizes and drops nothing, and LangChain's
  OpenAI form (``convert_to_openai_messages``) has every ``tool_call_id`` matched.

:data:`WINDOWS_CHECKED` counts the windows checked in this process, by store class.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_adapters import Memory, Message, Store, Summary, ToolCall, ToolResult, hookimpl
from memory_adapters.messages import Record
from memory_adapters.window import AWAITING, HEAD_LIMIT, SUMMARY_PREFIX, Window

WINDOWS_CHECKED: Counter[str] = Counter()
"""Windows checked by :class:`WindowProperties` in this process, by store class name."""

EXAMPLES = int(os.environ.get("MEMORY_ADAPTERS_WINDOW_EXAMPLES", "120"))
"""Conversations drawn per store (each is checked under 10 to 25 window options)."""

CALL_IDS = ["call_0", "call_1", "call_2", "pyd_ai_tool_call_id__lookup", "toolu_01"]
"""A small pool, so that ids repeat across turns and within them, as they do in practice."""

TOOLS = ["lookup", "search", "save_memory"]


# -- conversation scripts ----------------------------------------------------------------------


@dataclass
class Step:
    """One model response and what followed it."""

    text: str
    calls: list[tuple[str, str, dict[str, Any]]]
    """(id, tool name, args) of each call."""
    results: list[tuple[str, str, Any, bool]]
    """(call id, tool name, content, is_error) in the order they came back: a subset of the
    calls (a run that failed), in any order, sometimes with a stray id."""
    between: str | None = None
    """Something between the response and its results: ``"empty_system"`` (pydantic-ai's
    bookkeeping), ``"system"``, ``"user"`` or ``"assistant"`` (then the calls went
    unanswered)."""
    feedback: str | None = None
    """A user message sent with the results (retry feedback, a tool's files)."""
    one_per_result: bool = True
    """Whether each result is a message of its own (LangChain) or they share one."""


@dataclass
class Turn:
    """One run: optional system prompts and greeting, a prompt, steps, an answer."""

    systems: list[str] = field(default_factory=list)
    greeting: str | None = None
    prompt: str | None = "hi"
    stray: list[tuple[str, Any]] = field(default_factory=list)
    """Results with no call, right after the prompt."""
    steps: list[Step] = field(default_factory=list)
    final: str | None = None
    framework: str = "neutral"
    batches: int = 1
    awaiting: bool = False
    """Whether the run ended waiting for the results of its last response's calls (an
    approval, a deferred tool): that message is marked ``meta["awaiting"]``."""
    """Into how many batches the run was saved (step by step, like the LangChain adapter)."""


def _text(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n)) or "w"


texts = st.one_of(
    st.integers(1, 12).map(_text),
    st.integers(30, 300).map(_text),  # larger than many budgets
)
contents = st.one_of(texts, st.fixed_dictionaries({"answer": texts}), st.just([1, "two"]))


@st.composite
def steps(draw: st.DrawFn) -> Step:
    """A model response with 0 to 3 calls and what answered them."""
    n = draw(st.integers(0, 3))
    calls = [
        (draw(st.sampled_from(CALL_IDS)), draw(st.sampled_from(TOOLS)), {"q": draw(texts)})
        for _ in range(n)
    ]
    text = draw(st.one_of(st.just(""), texts)) if calls else draw(texts)
    answered = draw(st.lists(st.sampled_from(range(n)), unique=True)) if n else []
    results = [(calls[i][0], calls[i][1], draw(contents), draw(st.booleans())) for i in answered]
    if n and draw(st.integers(0, 9)) == 0:  # a stray result
        stray = ("stray_" + draw(st.sampled_from(CALL_IDS)), "x", "?", False)
        results.insert(draw(st.integers(0, len(results))), stray)
    between = draw(st.sampled_from([None] * 12 + ["empty_system", "system", "user", "assistant"]))
    feedback = draw(texts) if draw(st.integers(0, 5)) == 0 else None
    return Step(text, calls, results, between, feedback, draw(st.booleans()))


@st.composite
def turns(draw: st.DrawFn, first: bool, frameworks: Sequence[str]) -> Turn:
    """One run of a conversation."""
    turn = Turn(framework=draw(st.sampled_from(list(frameworks))))
    if first:
        turn.systems = draw(st.lists(texts, max_size=2))
        turn.greeting = draw(st.one_of(st.none(), texts))
    elif draw(st.integers(0, 12)) == 0:
        turn.systems = [draw(texts)]
    turn.prompt = draw(texts) if draw(st.integers(0, 15)) else None
    if draw(st.integers(0, 10)) == 0:
        turn.stray = [(draw(st.sampled_from(CALL_IDS)), draw(contents))]
    turn.steps = draw(st.lists(steps(), max_size=3))
    turn.final = draw(st.one_of(st.none(), texts))
    turn.batches = draw(st.integers(1, 4))
    if turn.steps and turn.steps[-1].calls and draw(st.integers(0, 3)) == 0:
        # the run ended waiting for results: nothing after its last response but results
        turn.awaiting, turn.final = True, None
        last = turn.steps[-1]
        last.between, last.feedback = None, None
        last.results = last.results[: draw(st.integers(0, len(last.calls) - 1))]
    return turn


@st.composite
def conversations(draw: st.DrawFn, frameworks: Sequence[str]) -> list[Turn]:
    """A conversation: 1 to 12 runs."""
    n = draw(st.integers(1, 12))
    return [draw(turns(i == 0, frameworks)) for i in range(n)]


def _neutral(turn: Turn) -> list[list[Message]]:
    """The turn as neutral messages, in units that a batch never splits."""
    units: list[list[Message]] = [[Message.system(s)] for s in turn.systems]
    if turn.greeting is not None:
        units.append([Message.assistant(turn.greeting)])
    if turn.prompt is not None:
        units.append([Message.user(turn.prompt)])
    if turn.stray:
        units.append([Message.tool(*(ToolResult(i, c) for i, c in turn.stray))])
    for s in turn.steps:
        units.append([Message.assistant(s.text, [ToolCall(i, n, a) for i, n, a in s.calls])])
        if s.between is not None:
            role = s.between.replace("empty_", "")
            text = "" if s.between == "empty_system" else "interjection"
            units.append([Message(role, text)])  # type: ignore[arg-type]
        results = [ToolResult(i, c, n, e) for i, n, c, e in s.results]
        if results and s.one_per_result:
            units.extend([Message.tool(r)] for r in results)
        elif results:
            units.append([Message.tool(*results)])
        if s.feedback is not None:
            units.append([Message.user(s.feedback)])
    if turn.final is not None:
        units.append([Message.assistant(turn.final)])
    return units


def _pydantic_ai(turn: Turn) -> list[list[Message]]:
    from memory_adapters_pydantic_ai.mapping import to_messages
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        ModelResponsePart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    out: list[ModelMessage] = []
    systems: list[ModelRequestPart] = [SystemPromptPart(s) for s in turn.systems]
    if turn.greeting is not None:
        if systems:
            out.append(ModelRequest(parts=systems))
            systems = []
        out.append(ModelResponse(parts=[TextPart(turn.greeting)]))
    first: list[ModelRequestPart] = [*systems]
    if turn.prompt is not None:
        first.append(UserPromptPart(turn.prompt))
    if first:
        out.append(ModelRequest(parts=first))
    if turn.stray:
        out.append(ModelRequest(parts=[ToolReturnPart("x", c, i) for i, c in turn.stray]))
    for s in turn.steps:
        parts: list[ModelResponsePart] = [TextPart(s.text)] if s.text else []
        parts.extend(ToolCallPart(n, dict(a), i) for i, n, a in s.calls)
        out.append(ModelResponse(parts=parts))
        if s.between == "system":
            out.append(ModelRequest(parts=[SystemPromptPart("interjection")]))
        elif s.between == "user":
            out.append(ModelRequest(parts=[UserPromptPart("interjection")]))
        elif s.between == "assistant":
            out.append(ModelResponse(parts=[TextPart("interjection")]))
        request: list[ModelRequestPart] = [
            ToolReturnPart(n, c, i, outcome="failed" if e else "success")
            for i, n, c, e in s.results
        ]
        if s.feedback is not None:
            request.append(UserPromptPart(s.feedback))
        if request:
            out.append(ModelRequest(parts=request))
    if turn.final is not None:
        out.append(ModelResponse(parts=[TextPart(turn.final)]))
    return [to_messages([m]) for m in out]


def _langchain(turn: Turn) -> list[list[Message]]:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
    from memory_adapters_langchain.mapping import to_messages

    out: list[BaseMessage] = [SystemMessage(s) for s in turn.systems]
    if turn.greeting is not None:
        out.append(AIMessage(turn.greeting))
    if turn.prompt is not None:
        out.append(HumanMessage(turn.prompt))
    out.extend(ToolMessage(_lc_content(c), tool_call_id=i) for i, c in turn.stray)
    for s in turn.steps:
        calls = [{"name": n, "args": dict(a), "id": i} for i, n, a in s.calls]
        out.append(AIMessage(content=s.text, tool_calls=calls))
        if s.between == "empty_system":
            out.append(SystemMessage(""))
        elif s.between == "system":
            out.append(SystemMessage("interjection"))
        elif s.between == "user":
            out.append(HumanMessage("interjection"))
        elif s.between == "assistant":
            out.append(AIMessage("interjection"))
        out.extend(
            ToolMessage(_lc_content(c), tool_call_id=i, name=n, status="error" if e else "success")
            for i, n, c, e in s.results
        )
        if s.feedback is not None:
            out.append(HumanMessage(s.feedback))
    if turn.final is not None:
        out.append(AIMessage(turn.final))
    return [to_messages([m]) for m in out]


def _lc_content(content: Any) -> Any:
    """A ``ToolMessage`` content: text, or a content block for anything else."""
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": json.dumps(content)}]


RENDERERS: dict[str, Callable[[Turn], list[list[Message]]]] = {
    "neutral": _neutral,
    "pydantic-ai": _pydantic_ai,
    "langchain": _langchain,
}


def installed_frameworks() -> list[str]:
    """The frameworks whose adapters can render and read windows here."""
    found = []
    for name, modules in (
        ("pydantic-ai", ("pydantic_ai", "memory_adapters_pydantic_ai.mapping")),
        ("langchain", ("langchain_core", "memory_adapters_langchain.mapping")),
    ):
        try:
            for module in modules:
                __import__(module)
        except ImportError:
            continue
        found.append(name)
    return found


def batches(turn: Turn) -> list[list[Message]]:
    """The turn rendered by its framework's mapping, split into ``turn.batches`` batches."""
    units = [u for u in RENDERERS[turn.framework](turn) if u]
    if not units:
        return []
    if turn.awaiting:
        waiting = [m for u in units for m in u if m.role == "assistant" and m.tool_calls]
        if waiting:
            waiting[-1].meta[AWAITING] = [c.id for c in waiting[-1].tool_calls]
    n = max(1, min(turn.batches, len(units)))
    size = -(-len(units) // n)
    return [[m for u in units[i : i + size] for m in u] for i in range(0, len(units), size)]


# -- plugins the suite runs with ---------------------------------------------------------------


class WordCounter:
    """Counts a text's tokens as its words, so that scripts control sizes exactly."""

    @hookimpl
    def count_tokens(self, texts: list[str], model: str | None) -> list[int]:
        return [len(t.split()) for t in texts]


class Summarizer:
    """Summarizes in ``words`` words (set per window; larger than some budgets)."""

    words = 5

    @hookimpl
    def summarize(
        self, messages: list[Message], previous: str | None, max_tokens: int, model: str | None
    ) -> str:
        return f"s{len(messages)} " + _text(self.words)


# -- the oracle -----------------------------------------------------------------------------------


def _transparent(m: Message) -> bool:
    return m.role == "system" and not m.text


def _owner(messages: Sequence[Message], j: int) -> int:
    """The index of the message a tool message at ``j`` answers (-1: none)."""
    i = j - 1
    while i >= 0 and (messages[i].role == "tool" or _transparent(messages[i])):
        i -= 1
    return i if i >= 0 and messages[i].role == "assistant" else -1


def kept_parts(
    messages: Sequence[Message], resuming: bool = False
) -> list[tuple[list[str], list[str]]]:
    """For each message, the ids of the calls and of the results a valid window keeps: a call
    is kept when it is the first of its id in its message and the tool messages right after
    it hold a result for it (or, ``resuming``, when it is marked awaiting in a message only
    tool messages follow to the end); a result when it is the first for a call of the message
    right before its run of tool messages. (Quadratic, and written apart from the window's
    code.)"""
    out: list[tuple[list[str], list[str]]] = []
    for j, m in enumerate(messages):
        calls: list[str] = []
        if m.role == "assistant":
            run: list[str] = []
            k = j + 1
            while k < len(messages) and (messages[k].role == "tool" or _transparent(messages[k])):
                run.extend(t.id for t in messages[k].tool_results)
                k += 1
            waiting = m.meta.get(AWAITING) if resuming and k == len(messages) else None
            for p, c in enumerate(m.tool_calls):
                if c.id not in [x.id for x in m.tool_calls[:p]] and (
                    c.id in run or (isinstance(waiting, list) and c.id in waiting)
                ):
                    calls.append(c.id)
        results: list[str] = []
        if m.role == "tool":
            owner = _owner(messages, j)
            if owner >= 0:
                call_ids = {c.id for c in messages[owner].tool_calls}
                earlier = [t.id for x in messages[owner + 1 : j] for t in x.tool_results]
                seen: list[str] = []
                for t in m.tool_results:
                    if t.id in call_ids and t.id not in earlier and t.id not in seen:
                        results.append(t.id)
                    seen.append(t.id)
        out.append((calls, results))
    return out


def api_problems(messages: Sequence[Message], resuming: bool = False) -> list[str]:
    """Why ``messages`` would be refused by a model API (empty: they would not). ``resuming``:
    they are given with the results of the calls their end awaits."""
    problems = []
    kept = kept_parts(messages, resuming)
    for j, m in enumerate(messages):
        ids = [c.id for c in m.tool_calls]
        if len(set(ids)) != len(ids):
            problems.append(f"message {j} repeats a call id: {ids}")
        calls, results = kept[j]
        if sorted(calls) != sorted(ids):
            problems.append(f"message {j} has unanswered calls {set(ids) - set(calls)}")
        if len(results) != len(m.tool_results):
            problems.append(f"message {j} has orphan results {[t.id for t in m.tool_results]}")
        if m.role == "tool" and not m.tool_results:
            problems.append(f"message {j} is an empty tool message")
    return problems


@dataclass
class Options:
    """The options of one window read."""

    max_tokens: int | None
    max_messages: int | None
    pin_system: bool
    pin_first_turn: bool
    summary_tokens: int
    summary_words: int
    resuming: bool = False

    def kwargs(self) -> dict[str, Any]:
        return {
            "max_tokens": self.max_tokens,
            "max_messages": self.max_messages,
            "pin_system": self.pin_system,
            "pin_first_turn": self.pin_first_turn,
            "summary_tokens": self.summary_tokens,
            "resuming": self.resuming,
        }


@st.composite
def options(draw: st.DrawFn) -> Options:
    """Budgets from nothing to everything, pins and summaries on and off."""
    tokens = draw(
        st.one_of(
            st.none(),
            st.integers(0, 30),
            st.integers(0, 600),
            st.sampled_from([10**6, 2**63 - 1]),
        )
    )
    messages = draw(st.one_of(st.none(), st.none(), st.integers(0, 40)))
    if tokens is None and messages is None:
        messages = draw(st.integers(0, 40))
    return Options(
        tokens,
        messages,
        draw(st.booleans()),
        draw(st.booleans()),
        draw(st.sampled_from([0, 0, 3, 12, 60])),
        draw(st.integers(0, 80)),
        draw(st.booleans()),
    )


def _pin_groups(records: list[Record], o: Options) -> tuple[list[list[Record]], int]:
    head = records[:HEAD_LIMIT]
    i = 0
    while i < len(head) and head[i].message.role == "system":
        i += 1
    groups: list[list[Record]] = []
    end = 0
    if o.pin_system and i:
        groups.append(head[:i])
        end = head[i - 1].seq
    if o.pin_first_turn and i < len(head) and head[i].message.role == "user":
        j = next((k for k in range(i + 1, len(head)) if head[k].message.role == "user"), None)
        if j is not None:
            turn = head[i:j]
            keep = kept_parts([r.message for r in turn])
            groups.append(
                [r for r, (c, t) in zip(turn, keep, strict=True) if _survives(r.message, c, t)]
            )
            end = head[j - 1].seq
    return groups, end


def _survives(m: Message, calls: list[str], results: list[str]) -> bool:
    if m.role == "tool":
        return bool(results)
    if m.role == "assistant" and m.tool_calls and not calls:
        return bool(m.text)
    return True


def _same_or_trimmed(stored: Message, shown: Message, calls: list[str], results: list[str]) -> str:
    """Why ``shown`` is not ``stored`` with exactly the parts a valid window keeps ('' if it
    is)."""
    full = [c.id for c in stored.tool_calls] == calls and [
        t.id for t in stored.tool_results
    ] == results
    if full:
        return "" if shown.to_dict() == stored.to_dict() else "changed"
    if not shown.meta.get("trimmed") or shown.raw is not None:
        return "trimmed but not marked trimmed without raw"
    if (shown.role, shown.text) != (stored.role, stored.text):
        return "trimmed message changed its text"
    if [c.id for c in shown.tool_calls] != calls:
        return f"kept calls {[c.id for c in shown.tool_calls]}, expected {calls}"
    if [t.id for t in shown.tool_results] != results:
        return f"kept results {[t.id for t in shown.tool_results]}, expected {results}"
    return ""


def window_problems(
    records: list[Record], window: Window, o: Options, stored_summary: Summary | None
) -> list[str]:
    """Everything wrong with ``window``, read with options ``o`` from a conversation whose
    records are ``records`` (all of them) and whose latest summary before the read was
    ``stored_summary`` (see the module docstring for the rules)."""
    problems: list[str] = []
    shown = window.messages()
    if o.max_tokens is not None and window.tokens > o.max_tokens:
        problems.append(f"{window.tokens} tokens over the budget of {o.max_tokens}")
    if o.max_messages is not None and len(shown) > o.max_messages:
        problems.append(f"{len(shown)} messages over the budget of {o.max_messages}")
    problems.extend(api_problems(shown, o.resuming))
    if shown and shown[0].role == "tool":
        problems.append("the window opens with a tool result")

    tokens, count = o.max_tokens, o.max_messages
    groups, pinned_end = _pin_groups(records, o)
    expected_pins: list[int] = []
    for group in groups:
        cost = sum(r.tokens for r in group)
        if (tokens is None or cost <= tokens) and (count is None or len(group) <= count):
            expected_pins.extend(r.seq for r in group)
            tokens = None if tokens is None else tokens - cost
            count = None if count is None else count - len(group)
        elif not any(x.reason == "pinned" for x in window.left_out):
            problems.append("a pinned group left out without saying so")
    if [r.seq for r in window.pinned] != expected_pins:
        problems.append(f"pinned {[r.seq for r in window.pinned]}, expected {expected_pins}")

    summary = window.summary
    if summary is not None:
        if not shown[len(window.pinned)].text.startswith(SUMMARY_PREFIX):
            problems.append("the summary is not shown after the pins")
        tokens = None if tokens is None else tokens - summary.tokens
        count = None if count is None else count - 1
    elif o.summary_tokens and stored_summary is not None:
        fits = (tokens is None or stored_summary.tokens <= tokens) and (count is None or count >= 1)
        if fits:
            problems.append("a summary that fits was not shown")
        elif not any(x.reason == "summary" for x in window.left_out):
            problems.append("a summary left out without saying so")
    floor = max(pinned_end, summary.end_seq if summary else 0)
    candidates = [r for r in records if r.seq > floor]

    # the tail: the earliest start from which the stored messages fit what is left
    start = None
    boundaries = [r for i, r in enumerate(candidates) if i == 0 or r.message.role == "user"]
    for b in boundaries:
        span = [r for r in candidates if r.seq >= b.seq]
        if (tokens is None or sum(r.tokens for r in span) <= tokens) and (
            count is None or len(span) <= count
        ):
            start = b.seq
            break
    expected = [r for r in candidates if start is not None and r.seq >= start]
    keep = kept_parts([r.message for r in expected], o.resuming)
    survivors = [
        (r, c, t) for r, (c, t) in zip(expected, keep, strict=True) if _survives(r.message, c, t)
    ]
    got = [r.seq for r in window.records]
    if got != [r.seq for r, _, _ in survivors]:
        problems.append(
            f"tail {got[:3]}..{got[-3:]} ({len(got)}), expected from seq {start}: "
            f"{[r.seq for r, _, _ in survivors][:3]}.. ({len(survivors)})"
        )
    else:
        for r, (s, c, t) in zip(window.records, survivors, strict=True):
            why = _same_or_trimmed(s.message, r.message, c, t)
            if why:
                problems.append(f"seq {r.seq}: {why}")
    for r in window.pinned:
        stored = next(x for x in records if x.seq == r.seq)
        if stored.message.to_dict() != r.message.to_dict() and not r.message.meta.get("trimmed"):
            problems.append(f"pinned seq {r.seq} differs from what is stored")
    return problems


# -- what each framework is given ---------------------------------------------------------------


def _flat(messages: Sequence[Message]) -> list[tuple[Any, ...]]:
    """What a model is shown, part by part (empty system messages are nothing)."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        if m.text or m.role == "user":
            out.append((m.role, m.text))
        out.extend(("call", c.id, c.name) for c in m.tool_calls)
        out.extend(("result", t.id) for t in m.tool_results)
    return out


def pydantic_ai_problems(messages: list[Message], resuming: bool = False) -> list[str]:
    """Whether pydantic-ai is given exactly the window and repairs or drops nothing of it
    (``resuming``: the calls the window ends awaiting are answered by the run)."""
    from memory_adapters_pydantic_ai.mapping import from_messages, to_messages
    from pydantic_ai.messages import (
        SYNTHESIZED_TOOL_RETURN_METADATA_KEY,
        ModelRequest,
        ToolCallPart,
        ToolReturnPart,
        repair_messages,
    )

    problems = []
    given_ = from_messages(messages)
    if _flat(to_messages(given_)) != _flat(messages):
        problems.append("pydantic-ai is not given what the window holds")
    repaired = repair_messages(given_, repair_last_response=not resuming)

    def parts(ms: Sequence[Any], kind: type[ToolCallPart | ToolReturnPart]) -> list[str]:
        return [p.tool_call_id for m in ms for p in m.parts if isinstance(p, kind)]

    if parts(repaired, ToolReturnPart) != parts(given_, ToolReturnPart):
        problems.append("pydantic-ai repaired the window's tool results")
    if parts(repaired, ToolCallPart) != parts(given_, ToolCallPart):
        problems.append("pydantic-ai dropped tool calls of the window")
    for m in repaired:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if (getattr(p, "metadata", None) or {}).get(SYNTHESIZED_TOOL_RETURN_METADATA_KEY):
                    problems.append("pydantic-ai synthesized a tool result")
    return problems


def langchain_problems(messages: list[Message], resuming: bool = False) -> list[str]:
    """Whether LangChain is given exactly the window, valid in the OpenAI form (``resuming``:
    the calls the window ends awaiting are answered by the run)."""
    from langchain_core.messages import convert_to_openai_messages
    from memory_adapters_langchain.mapping import from_messages, to_messages

    problems = []
    given_ = from_messages(messages)
    if _flat(to_messages(given_)) != _flat(messages):
        problems.append("LangChain is not given what the window holds")
    wire: list[dict[str, Any]] = convert_to_openai_messages(given_)
    open_ids: set[str] = set()
    for i, m in enumerate(wire):
        if m["role"] == "tool":
            call_id = m.get("tool_call_id", "")
            if call_id not in open_ids:
                problems.append(f"OpenAI message {i}: tool_call_id {call_id} unmatched")
            open_ids.discard(call_id)
            continue
        if open_ids:
            problems.append(f"OpenAI message {i}: calls {open_ids} left unanswered")
        open_ids = {c["id"] for c in m.get("tool_calls") or []}
    waiting = next((m.meta.get(AWAITING) for m in reversed(messages) if m.tool_calls), None)
    if open_ids and not (resuming and isinstance(waiting, list) and open_ids <= set(waiting)):
        problems.append(f"the OpenAI form ends with calls {open_ids} unanswered")
    return problems


FRAMEWORK_CHECKS: dict[str, Callable[[list[Message], bool], list[str]]] = {
    "pydantic-ai": pydantic_ai_problems,
    "langchain": langchain_problems,
}


# -- the suite ------------------------------------------------------------------------------------


class WindowProperties:
    """The property-based window suite; :class:`~memory_adapters.testing.StoreConformance`
    includes it. Needs a ``store`` fixture."""

    frameworks: tuple[str, ...] | None = None
    """The frameworks whose mappings write and read the conversations (``None``: every one
    installed, see :func:`installed_frameworks`)."""

    @pytest.fixture
    def window_memory(self, store: Store) -> Memory:
        """A ``Memory`` over the store under test that counts words as tokens (and indexes
        nothing for conversation search: windows are what these tests are about)."""
        return Memory(
            store=store,
            load_entrypoints=False,
            plugins=[WordCounter(), Summarizer()],
            index_conversations=False,
        )

    def test_every_window_is_valid_maximal_and_within_budget(self, window_memory: Memory) -> None:
        frameworks = ["neutral", *(self.frameworks or installed_frameworks())]
        store_name = type(window_memory.store).__name__

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(
            script=conversations(frameworks),
            reads=st.lists(options(), min_size=10, max_size=25),
        )
        def check(script: list[Turn], reads: list[Options]) -> None:
            memory = window_memory
            summarizer = next(p for p in memory.pm.get_plugins() if isinstance(p, Summarizer))
            with memory.session(conversation_id="w-" + uuid.uuid4().hex):
                conv = memory.conversation
                for turn in script:
                    for batch in batches(turn):
                        conv.append(batch)
                records = conv.read()
                for o in reads:
                    summarizer.words = o.summary_words
                    before = memory.store.latest_summary(conv.key)
                    window = conv.window(**o.kwargs())
                    problems = window_problems(records, window, o, before)
                    shown = window.messages()
                    for name in frameworks[1:]:
                        checked = FRAMEWORK_CHECKS[name](shown, o.resuming)
                        problems.extend(f"{name}: {p}" for p in checked)
                    assert not problems, f"{o}:\n" + "\n".join(problems)
                    WINDOWS_CHECKED[store_name] += 1

        check()
