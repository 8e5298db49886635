"""Memories that form themselves: facts extracted from new turns in the background.

``Memory(url, extractor=spec, extract_every=N)`` turns extraction on. What ``spec`` may be is
decided by the ``make_extractor`` hook, as summarizers are (:mod:`.summaries`):

* a pydantic-ai model name (``"openai:gpt-4o-mini"``), ``Model`` or ``Agent`` (the
  ``pydantic-ai`` extra), asked with :data:`INSTRUCTIONS` for structured output;
* a LangChain chat model (``BaseChatModel``; the ``langchain`` extra), asked to call a tool
  whose arguments are the operations;
* an :class:`Extractor`, or a plain callable ``fn(messages, facts)``, sync or async,
  returning a list of :class:`FactOp` (or plain dicts ``{"op": "add" | "update" | "forget",
  "key": ..., "value": ...}``).

**When.** After a run's turn is stored, every ``extract_every`` turns of a conversation (turns
this process stored; a turn is a user message), and when a conversation with turns not yet
extracted has had none for ``extract_idle`` seconds, a job on the ``Memory``'s worker
(:mod:`.worker`) reads the messages stored since the conversation was last extracted — by any
process — and the user's facts related to them (:meth:`Facts.search
<memory_adapters.Facts.search>`), and calls the extractor once. A run never waits for it, and
never calls the extractor itself.

**Once per range, across processes.** Each conversation's extraction state is a fact of the
working-memory namespace (``<namespace>#working``, scope ``<conversation key>//extraction``:
an empty fork name, which no fork can have), written with compare-and-swap: the seq extracted
through (the *watermark*) and a claim with a lease. A job claims the range after the
watermark by swapping the state's version; of several processes one wins, the others leave
the range to it; the winner moves the watermark on when the operations are applied. So no
message range is extracted twice (unless a claim's lease, :data:`LEASE_SECONDS`, runs out
before its extractor answers). Erase, retention and export cover the state with the
conversation's working memory; a conversation cleared and written again is extracted from its
start (the watermark remembers which message it stopped at).

**Applied by the core.** The operations pass the ``facts_proposed`` hook (plugins drop or
rewrite them), then are applied to the facts of the run's scope (from the host, never from the
extractor) through the write plan of the memory tools, under the duplicate rule
(:mod:`.consolidation`), each change recorded in the fact's history as made by the extractor
(:class:`~memory_adapters.operations.Writer` ``kind="extractor"``, with its model and the
conversation range).

**Failures are harmless.** An extractor that raises, answers something other than a list of
operations, or takes longer than ``extract_timeout`` seconds writes nothing: the failure is
counted, logged and warned about (:class:`~memory_adapters.errors.ExtractionWarning`), the
claim is given back, and this ``Memory`` starts no extraction for :data:`RETRY_SECONDS`.
A malformed operation in an otherwise good answer is dropped and counted
(:attr:`Extraction.dropped`); the others are applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .asyncs import resolve_sync
from .consolidation import consolidated_put
from .errors import ExtractionWarning, InvalidInput, VersionConflict
from .hookspecs import hookimpl
from .messages import Message, Record
from .operations import Writer
from .steps import Plan, StoreCall, drive_sync
from .summaries import render_messages
from .tracing import traced
from .validation import MAX_VALUE_BYTES, check_id, check_importance, describe, dumps
from .worker import Abandoned

if TYPE_CHECKING:
    from .facts import Fact
    from .memory import Memory
    from .scope import Scope

T = TypeVar("T")
log = logging.getLogger("memory_adapters")

LEASE_SECONDS = 300.0
"""How long a claim on a conversation's range keeps other processes from extracting it."""

RETRY_SECONDS = 60.0
"""After an extractor fails, no extraction is started by this ``Memory`` for this long."""

TIMEOUT_SECONDS = 120.0
"""How long an extractor call may take by default (``Memory(extract_timeout=...)``)."""

IDLE_SECONDS = 120.0
"""After how long without a turn a conversation's turns not yet extracted are extracted, by
default (``Memory(extract_idle=...)``; ``None``: only every ``extract_every`` turns)."""

SOURCE_LIMIT = 200
"""The most messages one extractor call reads; a longer backlog takes several calls."""

RELATED_FACTS = 10
"""How many of the user's facts the extractor is shown: those most related to the new messages
(:meth:`Facts.search <memory_adapters.Facts.search>`), then, when fewer are found, others of
the scope (so that a user with few facts has them all shown)."""

STATE_SCOPE_SUFFIX = "//extraction"
"""A conversation's extraction state lives in the working-memory namespace under the scope
``<conversation key>//extraction`` (see the module docstring)."""

STATE_KEY = "state"

NO_EXTRACT = "no_extract"
"""The ``meta`` key (``True``) of the messages of a run that opted out of extraction: no
extractor is shown them."""

RUN_OPTION = "memory_extract"
"""The per-run opt-out: a run whose pydantic-ai ``metadata``, or whose LangChain config's
``configurable`` or ``metadata``, holds ``{"memory_extract": False}`` is never extracted
(nor, with ``True``, is a run of an adapter built with ``extract=False`` kept from it)."""


def run_extracts(default: bool, *sources: object) -> bool:
    """Whether a run's messages may be extracted: what the first of ``sources`` (a run's
    metadata, a config's ``configurable``...: dicts, or anything else, skipped) holding
    :data:`RUN_OPTION` says, else ``default`` (the adapter's ``extract`` option)."""
    for source in sources:
        if isinstance(source, Mapping) and RUN_OPTION in source:
            value = source[RUN_OPTION]
            if not isinstance(value, bool):
                raise InvalidInput(f"{RUN_OPTION} must be True or False, not {describe(value)}")
            return value
    return default


INSTRUCTIONS = (
    "You maintain the long-term memory an AI assistant keeps about its user across "
    "conversations. Read the new messages of a conversation and the facts already "
    "remembered, and propose operations on the remembered facts:\n"
    '- "add" a fact worth remembering in future conversations: stable preferences, personal '
    "details, plans, decisions, corrections;\n"
    '- "update" a remembered fact (by its key) when the messages change or contradict it;\n'
    '- "forget" a remembered fact (by its key) when the user says it is wrong or asks to '
    "forget it.\n"
    "Use short snake_case keys (favourite_tea, home_city) and a short sentence per value. "
    "Never add what is remembered already, small talk, one-off requests, what only the "
    "assistant said, or secrets (passwords, card numbers). Propose no operation when nothing "
    "is worth remembering."
)


# -- the operations --------------------------------------------------------------------------

OpKind = Literal["add", "update", "forget"]
OPS: tuple[str, ...] = ("add", "update", "forget")


@dataclass(frozen=True, slots=True)
class FactOp:
    """One operation an extractor proposes: ``add`` a fact, ``update`` one (by key) or
    ``forget`` one. Build them with :meth:`add`, :meth:`update` and :meth:`forget`; an
    extractor may return plain dicts instead (:meth:`of`)."""

    op: OpKind
    key: str
    value: Any = None
    importance: float | None = None

    @classmethod
    def add(cls, key: str, value: Any, importance: float | None = None) -> FactOp:
        """Remember ``value`` under ``key`` (merged into a fact that means the same, if any:
        :mod:`memory_adapters.consolidation`)."""
        return cls.of({"op": "add", "key": key, "value": value, "importance": importance})

    @classmethod
    def update(cls, key: str, value: Any, importance: float | None = None) -> FactOp:
        """Replace the fact ``key``'s value (its old value stays in the fact's history)."""
        return cls.of({"op": "update", "key": key, "value": value, "importance": importance})

    @classmethod
    def forget(cls, key: str) -> FactOp:
        """End the fact ``key`` (its history stays: ``facts.get(key, as_of=...)``)."""
        return cls.of({"op": "forget", "key": key})

    @classmethod
    def of(cls, item: object) -> FactOp:
        """``item`` (a :class:`FactOp` or a dict with ``op``, ``key`` and, but for a forget,
        ``value``; optionally ``importance`` from 0 to 1) as a checked :class:`FactOp`; raises
        :class:`~memory_adapters.errors.InvalidInput` (or a subclass) saying what is wrong."""
        if isinstance(item, FactOp):
            item = {"op": item.op, "key": item.key, "value": item.value}
            item["importance"] = item.get("importance")
        if not isinstance(item, Mapping):
            raise InvalidInput(f"an operation is a FactOp or a dict, not {describe(item)}")
        unknown = sorted(str(k) for k in item if k not in ("op", "key", "value", "importance"))
        if unknown:
            raise InvalidInput(f"an operation has no {', '.join(unknown)}")
        op = item.get("op")
        if op not in OPS:
            raise InvalidInput(f"an operation's op is one of {OPS}, not {describe(op)}")
        key = check_id(item.get("key"), "an operation's key")
        value = item.get("value")
        importance = item.get("importance")
        if op == "forget":
            if value is not None or importance is not None:
                raise InvalidInput("a forget operation takes no value or importance")
            return cls("forget", key)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise InvalidInput(f"an {op} operation needs a value")
        dumps(value, "an operation's value", MAX_VALUE_BYTES)
        if importance is not None:
            importance = check_importance(importance)
            if not 0.0 <= importance <= 1.0:
                raise InvalidInput("an operation's importance is from 0 to 1")
        return cls(op, key, value, importance)


def parse_ops(answer: object) -> tuple[list[FactOp], list[str]]:
    """An extractor's ``answer`` as operations: the valid ones, and why each other one was
    dropped. Raises :class:`~memory_adapters.errors.InvalidInput` when the answer is not a
    list (or tuple) at all."""
    if isinstance(answer, Mapping) and set(answer) == {"operations"}:
        answer = answer["operations"]  # the shape structured output gives
    if isinstance(answer, str | bytes) or not isinstance(answer, Sequence):
        raise InvalidInput(f"an extractor returns a list of operations, not {describe(answer)}")
    ops: list[FactOp] = []
    dropped: list[str] = []
    for item in answer:
        try:
            ops.append(FactOp.of(item))
        except InvalidInput as exc:
            dropped.append(str(exc))
    return ops, dropped


# -- extractors ------------------------------------------------------------------------------


class Extractor:
    """Proposes operations on a user's facts from a conversation's new messages.

    Subclasses implement :meth:`aextract` (or :meth:`extract`, or both); :attr:`name` is
    recorded as the writer's model in the history of each fact it changes. ``instructions``
    are the ``Memory``'s ``extract_instructions`` (what is worth remembering), for
    model-backed extractors."""

    name: str = "extractor"

    def extract(
        self, messages: list[Message], facts: list[Fact], instructions: str | None = None
    ) -> list[Any]:
        """The operations (:class:`FactOp` or dicts) that ``messages`` call for, given the
        user's ``facts`` related to them."""
        result: list[Any] = resolve_sync(self.aextract(messages, facts, instructions))
        return result

    async def aextract(
        self, messages: list[Message], facts: list[Fact], instructions: str | None = None
    ) -> list[Any]:
        """Async :meth:`extract` (the default runs :meth:`extract` in a daemon thread, so
        that one that hangs never holds up the process's exit)."""
        if type(self).extract is Extractor.extract:
            raise NotImplementedError(f"{type(self).__name__} implements neither extract")
        result: list[Any] = await in_daemon_thread(self.extract, messages, facts, instructions)
        return result

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class CallableExtractor(Extractor):
    """A plain function ``fn(messages, facts) -> list`` (or an awaitable of it)."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or _callable_name(fn)

    def extract(
        self, messages: list[Message], facts: list[Fact], instructions: str | None = None
    ) -> list[Any]:
        result: list[Any] = resolve_sync(self.fn(messages, facts))
        return result

    async def aextract(
        self, messages: list[Message], facts: list[Fact], instructions: str | None = None
    ) -> list[Any]:
        if inspect.iscoroutinefunction(self.fn):
            result: Any = await self.fn(messages, facts)
            return result  # type: ignore[no-any-return]
        result = await in_daemon_thread(self.fn, messages, facts)
        if inspect.isawaitable(result):
            result = await result
        return result  # type: ignore[no-any-return]


async def in_daemon_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a daemon thread of its own, awaited: a call that never returns is left
    behind (after a timeout) without keeping the interpreter from exiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def work() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the awaiting task
            error = exc
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, lambda: future.set_result(result))

    threading.Thread(target=work, name="memory-adapters-extractor", daemon=True).start()
    return await future


def _callable_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or ""
    return f"{module}.{name}" if module else str(name)


@hookimpl(trylast=True)
def make_extractor(spec: object) -> Extractor | None:
    """The built-in fallback: an :class:`Extractor` as it is, a plain callable wrapped in a
    :class:`CallableExtractor`."""
    if isinstance(spec, Extractor):
        return spec
    if callable(spec) and not isinstance(spec, type):
        return CallableExtractor(spec)
    return None


def extraction_prompt(messages: list[Message], facts: list[Fact]) -> str:
    """The user prompt a model-backed extractor sends: the remembered facts related to the new
    messages, and the messages."""
    if facts:
        lines = [f"- {f.key}: {_text(f.value)}" for f in facts]
        head = "Remembered facts:\n" + "\n".join(lines)
    else:
        head = "No facts are remembered yet."
    return f"{head}\n\nNew messages:\n{render_messages(messages)}"


def instructions_for(instructions: str | None) -> str:
    """The system instructions of a model-backed extractor: :data:`INSTRUCTIONS`, and the
    application's ``extract_instructions`` when it gave some."""
    if not instructions:
        return INSTRUCTIONS
    return f"{INSTRUCTIONS}\n\nWhat is worth remembering here: {instructions}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# -- one extraction ---------------------------------------------------------------------------


@dataclass(eq=False)
class ExtractionDue:
    """A conversation to extract: its facts' scope (``scope``) and its log's (``conversation``);
    ``force``: extract whatever is new, even fewer than ``extract_every`` turns."""

    scope: Scope
    conversation: Scope
    force: bool = False

    @property
    def key(self) -> str:
        """The conversation's store key."""
        return self.conversation.conversation_key


@dataclass(frozen=True, slots=True)
class ExtractionResult:
    """What one extractor call did: the range it read (``start_seq``..``end_seq`` of
    ``conversation``), the operations ``applied`` (after the ``facts_proposed`` hook and the
    duplicate rule: the facts written or forgotten), those ``dropped`` as malformed, and the
    facts written."""

    conversation: str
    start_seq: int
    end_seq: int
    applied: int
    dropped: int
    facts: list[Fact] = field(default_factory=list)


def state_scope(conversation_key: str) -> str:
    """The scope of a conversation's extraction state (in its working-memory namespace)."""
    return conversation_key + STATE_SCOPE_SUFFIX


def _turns(records: list[Record]) -> int:
    return sum(1 for r in records if r.message.role == "user")


def _eligible(records: list[Record]) -> list[Record]:
    return [r for r in records if not r.message.meta.get(NO_EXTRACT)]


class _Claim:
    """A claimed range: the state fact's version after the claim, and where it stands."""

    __slots__ = ("through", "version")

    def __init__(self, version: int, through: int) -> None:
        self.version = version
        self.through = through


def _state_value(through: int, mark: float | None, claim: dict[str, Any] | None) -> str:
    return json.dumps({"through": through, "mark": mark, "claim": claim}, separators=(",", ":"))


def extraction_job(
    memory: Memory,
    call: Callable[[list[Message], list[Fact]], Any],
    name: str,
    due: ExtractionDue,
    every: int,
    owner: str,
    lease: float,
    results: list[ExtractionResult],
) -> Plan[None]:
    """Extract ``due``'s conversation (see the module docstring): claim the range after the
    watermark, read it, call the extractor through ``call(messages, facts)``, apply the
    operations, move the watermark on; again while a backlog is left. Each call's result is
    appended to ``results``. Nothing when another process holds the claim, or fewer than
    ``every`` turns are new (unless ``due.force``)."""
    key = due.key
    namespace = due.conversation.namespace + "#working"
    where = (namespace, state_scope(key), STATE_KEY)
    while True:
        state: Fact | None = yield StoreCall("get_fact", where)
        value: dict[str, Any] = state.value if state is not None else {}
        if not isinstance(value, dict):
            value = {}
        through = int(value.get("through") or 0)
        mark = value.get("mark")
        claim = value.get("claim")
        now = time.time()
        if (
            isinstance(claim, dict)
            and claim.get("owner") != owner
            and float(claim.get("until") or 0) > now
        ):
            return None  # another process is extracting this conversation
        start = max(through, 1)
        records: list[Record] = yield StoreCall(
            "read", (key,), {"start_seq": start, "limit": SOURCE_LIMIT + 1}
        )
        if through > 0:
            first = records[0] if records else None
            if first is None or first.seq != through or first.created_at != mark:
                # the conversation was cleared (and maybe written again) since: start over
                through, start = 0, 1
                records = yield StoreCall(
                    "read", (key,), {"start_seq": 1, "limit": SOURCE_LIMIT + 1}
                )
            else:
                records = records[1:]
        records = records[:SOURCE_LIMIT]
        if not records:
            return None
        new = _eligible(records)
        backlog = len(records) == SOURCE_LIMIT
        if not due.force and not backlog and _turns(new) < every:
            return None
        end = records[-1]
        version = 0 if state is None else state.version
        lease_until = now + lease
        try:
            claimed: Fact = yield StoreCall(
                "put_fact",
                (
                    *where,
                    _state_value(
                        through, mark, {"owner": owner, "until": lease_until, "end": end.seq}
                    ),
                ),
                {"text": "", "expected_version": version},
            )
        except VersionConflict:
            return None  # another process claimed it first
        held = _Claim(claimed.version, through)
        try:
            if new:
                result = yield from _extract_range(memory, call, name, due, new)
                results.append(result)
        except Exception:
            # give the range back (a failure; or close gave up): another process, or this one
            # after its back-off, extracts it again
            with contextlib.suppress(Exception):  # else its lease lapses all the same
                yield StoreCall(
                    "put_fact",
                    (*where, _state_value(held.through, mark, None)),
                    {"text": "", "expected_version": held.version},
                )
            raise
        try:
            yield StoreCall(
                "put_fact",
                (*where, _state_value(end.seq, end.created_at, None)),
                {"text": "", "expected_version": held.version},
            )
        except VersionConflict:
            log.warning("the extraction claim on %s lapsed before it was done", key)
            return None
        if not backlog:
            return None


def _extract_range(
    memory: Memory,
    call: Callable[[list[Message], list[Fact]], Any],
    name: str,
    due: ExtractionDue,
    records: list[Record],
) -> Plan[ExtractionResult]:
    from .facts import Facts

    facts = Facts(memory, due.scope)
    messages = [r.message for r in records]
    query = "\n".join(m.text for m in messages if m.role == "user" and m.text)
    related: list[Fact] = []
    if query.strip():
        related = yield from facts._search(query, RELATED_FACTS)
    if len(related) < RELATED_FACTS:
        # what shares no word with the messages (without an embedder, "I moved to Berlin"
        # finds no "home_city: lives in Paris"): the scope's other facts, up to the limit
        listed = yield from facts._list(RELATED_FACTS)
        shown = {f.key for f in related}
        related += [f for f in listed if f.key not in shown][: RELATED_FACTS - len(related)]
    answer = call(messages, related)
    ops, dropped = parse_ops(answer)
    step = memory.hooks.facts_proposed(due.scope, ops, messages)
    if step is not None:
        yield step
        checked: list[FactOp] = []
        for op in ops:  # what plugins left or put there, checked again
            try:
                checked.append(FactOp.of(op))
            except InvalidInput as exc:
                dropped.append(str(exc))
        ops = checked
    writer = Writer(
        "extractor",
        model=name,
        conversation=due.key,
        start_seq=records[0].seq,
        end_seq=records[-1].seq,
    )
    written: list[Fact] = []
    applied = 0
    for op in ops:
        if op.op == "forget":
            current = yield StoreCall("get_fact", (facts.namespace, facts._owner, op.key))
            if current is not None:
                yield from facts._forget(op.key, None, writer)
                applied += 1
            continue
        fact = yield from consolidated_put(facts, op.key, op.value, op.importance, writer)
        written.append(fact)
        applied += 1
    return ExtractionResult(
        due.key, records[0].seq, records[-1].seq, applied, len(dropped), written
    )


# -- the background work -----------------------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    """A conversation's turns this ``Memory`` stored and has not had extracted yet."""

    due: ExtractionDue
    turns: int = 0
    last: float = 0.0


class Extraction:
    """The extraction a ``Memory`` runs in the background (``memory.extraction``).

    Counters: :attr:`calls` (extractor calls, failures included), :attr:`failures`,
    :attr:`dropped` (malformed operations dropped), :attr:`applied` (operations applied);
    :attr:`results` keeps the last :data:`KEPT_RESULTS` calls' :class:`ExtractionResult`."""

    KEPT_RESULTS = 100

    def __init__(
        self,
        memory: Memory,
        extractor: Extractor,
        *,
        every: int,
        instructions: str | None,
        idle: float | None,
        timeout: float,
        lease_seconds: float = LEASE_SECONDS,
    ) -> None:
        self.memory = memory
        self.extractor = extractor
        self.every = every
        """Extract every this many turns of a conversation (0: only when idle or asked)."""
        self.instructions = instructions
        self.idle = idle
        self.timeout = timeout
        self.lease_seconds = lease_seconds
        self.owner = uuid.uuid4().hex
        """Who this ``Memory`` claims ranges as (a fresh id per ``Memory``)."""
        self.calls = 0
        self.failures = 0
        self.dropped = 0
        self.applied = 0
        self.results: list[ExtractionResult] = []
        self._closed = False
        self._retry_at = 0.0
        self._reset()
        _extractions.add(self)

    def _reset(self) -> None:
        """Nothing pending, queued or watched: what extraction is in a new process (the
        parent's worker and idle threads did not survive the fork; the turns it counted are
        extracted by the parent, or when their conversation next goes on)."""
        self._lock = threading.Condition()
        self._pending: dict[str, _Pending] = {}
        self._queued: dict[str, ExtractionDue] = {}
        self._idle_thread: threading.Thread | None = None

    # -- triggers ------------------------------------------------------------------------------

    def turn(self, scope: Scope, conversation: Scope, turns: int = 1) -> None:
        """A run (or ``memory.conversation.append``) stored ``turns`` turns of
        ``conversation`` (its facts in ``scope``): extract when ``extract_every`` turns are
        due, later when the conversation goes idle. Returns at once (called after the turn is
        stored)."""
        key = conversation.conversation_key
        submit = False
        with self._lock:
            if self._closed:
                return
            pending = self._pending.get(key)
            if pending is None:
                pending = self._pending[key] = _Pending(ExtractionDue(scope, conversation))
            pending.turns += turns
            pending.last = time.monotonic()
            if self.every and pending.turns >= self.every:
                pending.turns = 0
                submit = True
            elif self.idle is not None:
                self._start_idle()
                self._lock.notify_all()
        if submit:
            self.submit(scope, conversation)

    def submit(
        self, scope: Scope, conversation: Scope, *, force: bool = False
    ) -> Future[list[ExtractionResult]] | None:
        """Extract ``conversation`` in the background (``force``: whatever is new, even fewer
        than ``extract_every`` turns), unless a job for it is queued already (it then does
        this one's work), the ``Memory`` is closed, or an extractor failed less than
        :data:`RETRY_SECONDS` ago. Returns at once."""
        due = ExtractionDue(scope, conversation, force)
        with self._lock:
            if self._closed or (self._retry_at and time.monotonic() < self._retry_at):
                return None
            queued = self._queued.get(due.key)
            if queued is not None:
                queued.force = queued.force or force
                return None
            self._queued[due.key] = due
        future = self.memory.worker.submit(
            ("extract", due.key), lambda: self._run(due), tag=due, while_running=True
        )
        if future is None:
            with self._lock:
                self._queued.pop(due.key, None)
        return future

    def flush(self) -> int:
        """Extract now, in the background, what is not extracted yet of the conversations
        this ``Memory`` stored turns of (fewer than ``extract_every``), and of the session's
        conversation, if one is in scope (turns other processes stored); how many
        conversations that is."""
        with self._lock:
            todo = [p.due for p in self._pending.values() if p.turns > 0]
            for p in self._pending.values():
                p.turns = 0
        scope = self.memory.scope
        if scope.conversation_id is not None:
            key = scope.conversation_key
            if all(due.key != key for due in todo):
                todo.append(ExtractionDue(scope, scope))
        for due in todo:
            self.submit(due.scope, due.conversation, force=True)
        return len(todo)

    def _start_idle(self) -> None:
        if self._idle_thread is None:
            self._idle_thread = threading.Thread(
                target=self._watch_idle, name="memory-adapters-extraction-idle", daemon=True
            )
            self._idle_thread.start()

    def _watch_idle(self) -> None:
        """Extract the conversations with turns pending and none for ``idle`` seconds."""
        idle = self.idle
        assert idle is not None
        while True:
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                due = [p for p in self._pending.values() if p.turns and now - p.last >= idle]
                for p in due:
                    p.turns = 0
                waiting = [p.last + idle - now for p in self._pending.values() if p.turns]
                if not due:
                    self._lock.wait(min(waiting) if waiting else None)
            for p in due:
                self.submit(p.due.scope, p.due.conversation, force=True)

    # -- the job ------------------------------------------------------------------------------

    def _call(self, messages: list[Message], facts: list[Fact]) -> Any:
        with self._lock:
            self.calls += 1
        work = self.extractor.aextract(messages, facts, self.instructions)
        return self.memory.worker.run_async(asyncio.wait_for(work, self.timeout))

    def _run(self, due: ExtractionDue) -> list[ExtractionResult]:
        results: list[ExtractionResult] = []
        with self._lock:
            self._queued.pop(due.key, None)
            if self._retry_at and time.monotonic() < self._retry_at:
                return results  # queued before a failure: backing off all the same

        def job() -> Plan[list[ExtractionResult]]:
            yield from extraction_job(
                self.memory,
                self._call,
                self.extractor.name,
                due,
                self.every,
                self.owner,
                self.lease_seconds,
                results,
            )
            return results

        try:
            plan = job()
            memory = self.memory
            if memory.hooks.observes_operations:
                attributes: dict[str, Any] = {"extractor": self.extractor.name}
                plan = traced(memory, "extract", due.scope, plan, attributes=attributes)
            drive_sync(plan, memory.store, memory.hooks)
        except Abandoned:
            return results  # close() reported it
        except Exception as exc:
            with self._lock:
                self.failures += 1
                self._retry_at = time.monotonic() + RETRY_SECONDS
            if isinstance(exc, TimeoutError):
                why = f"took longer than {self.timeout} s"
            else:
                why = f"{type(exc).__name__}: {exc}"
            log.warning("extracting %s failed", due.key, exc_info=exc)
            warnings.warn(
                f"extractor {self.extractor.name!r} failed on {due.key}: {why}; no fact was "
                f"written, and this Memory starts no extraction for {RETRY_SECONDS:.0f} s",
                ExtractionWarning,
                stacklevel=1,
            )
            return results
        finally:
            self._record(results)
        return results

    def _record(self, results: list[ExtractionResult]) -> None:
        dropped = sum(r.dropped for r in results)
        with self._lock:
            self.dropped += dropped
            self.applied += sum(r.applied for r in results)
            self.results.extend(results)
            del self.results[: -self.KEPT_RESULTS]
        if dropped:
            message = (
                f"extractor {self.extractor.name!r} proposed {dropped} malformed "
                f"operation{'s' if dropped != 1 else ''}, dropped (the others were applied)"
            )
            log.warning(message)
            warnings.warn(message, ExtractionWarning, stacklevel=3)

    # -- waiting and closing ------------------------------------------------------------------

    def wait(self, timeout: float | None = None, *, flush: bool = True) -> bool:
        """Read-your-writes: extract the turns this ``Memory`` stored that are not extracted
        yet (with ``flush``, see :meth:`flush`), and wait for the extraction under way, at
        most ``timeout`` seconds; whether it all ended. After it, searches see the facts the
        extractor proposed from those turns."""
        if flush:
            self.flush()
        return self.memory.worker.wait(timeout, tags=ExtractionDue)

    def abandon(self, tags: list[object], timeout: float | None) -> list[ExtractionDue]:
        """Report the extractions among ``tags`` (what the worker's close gave up on after
        ``timeout`` seconds) and start no new one."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        abandoned = [t for t in tags if isinstance(t, ExtractionDue)]
        if abandoned:
            keys = ", ".join(due.key for due in abandoned)
            message = (
                f"Memory.close() stopped waiting for extractor {self.extractor.name!r} after "
                f"{timeout} s and abandoned {len(abandoned)} extraction"
                f"{'s' if len(abandoned) != 1 else ''}, nothing written: {keys}; the next "
                "extraction of each conversation (by any process, once the claim's lease "
                "lapses) reads those messages again"
            )
            log.warning(message)
            warnings.warn(message, ExtractionWarning, stacklevel=4)
        return abandoned

    def __repr__(self) -> str:
        return f"<Extraction {self.extractor!r} every={self.every} calls={self.calls}>"


_extractions: weakref.WeakSet[Extraction] = weakref.WeakSet()


def _after_fork() -> None:
    for extraction in list(_extractions):
        extraction._reset()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_after_fork)
