"""A run: one invocation of an agent under a scope, and the memory work done around it.

:class:`Run` is what the lifecycle hooks see. :class:`RunLifecycle` is the framework-neutral
driver every framework adapter uses around one agent run, so that the pydantic-ai and the
LangChain adapters load, show and persist memory the same way:

1. :func:`run_scope` decides where the run's memory is (the caller's explicit values and
   resolvers, else the session; a run started inside another run is a *sub-agent* run on a
   fork of the parent's working memory, whose messages go to a child conversation), or raises
   :class:`~memory_adapters.errors.NoScope`;
2. ``start`` calls ``run_started``; ``window`` reads the budgeted window of past messages
   (without what earlier attempts of the same run id stored: a retried run starts over from
   the history its first attempt started from; a run id names one run, so a run whose id a
   completed run has, marked :data:`RUN_COMPLETED`, is refused with
   :class:`~memory_adapters.errors.RunCompleted` before the model is called);
   ``fragments`` renders the instruction fragments (tool guidance, preloaded facts, working
   memory) and ``before_model_call`` lets plugins rewrite them;
3. ``finish`` persists the run's new messages once, as one batch keyed by the run id and what
   the batch says (:func:`outcome_key`: the same run persisted again with the same outcome is
   stored once, a retry that ends otherwise is stored too), calls ``run_finished`` and merges
   a sub-agent's fork back; ``fail`` persists what completed, marked ``meta["failed"] = True``,
   and calls ``run_failed``. Values a framework accepted from a model that JSON cannot hold
   are stored in the encoding of :func:`~memory_adapters.validation.json_safe`. An
   adapter that can see the run's steps (the LangChain middleware) may instead ``save`` each
   step's messages, each as a batch of its own (keys ``<run id>.1``, ``<run id>.2`` ...;
   several steps in one write with ``_save_steps``), so that a run which raises keeps what
   completed; ``finish`` then persists what is left and hands ``run_finished`` every message
   of the run.

Every operation has a sync and an async form (``finish`` / ``afinish`` ...), written once as a
plan (see :mod:`.steps`). While a run is active (:meth:`RunLifecycle.activate`), the
``Memory``'s session is the run's scope, so tools that use ``memory.facts`` or
``memory.working`` reach the run's memory, and :func:`active_run` finds the run, so a run
started inside it becomes its sub-agent.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import itertools
import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .conversation import Conversation
from .errors import InvalidInput, NoScope, RunCompleted
from .facts import Facts
from .messages import AppendResult, Message, Record
from .scope import Scope
from .steps import Plan, StoreCall, drive_async, drive_sync, gather
from .validation import MAX_ID_LENGTH, check_positive_int
from .window import Window, pair_tool_calls
from .working import POLICIES, MergePolicy, MergeReport, Note, WorkingMemory

if TYPE_CHECKING:
    from .memory import Memory
    from .summaries import SummaryDue

T = TypeVar("T")

SubConversation = Literal["child", "per_run"]
"""Where a sub-agent's messages go: ``"child"``, one conversation per parent conversation and
sub-agent name (the sub-agent remembers its earlier tasks); ``"per_run"``, a new conversation
for every sub-agent run."""

SUB_CONVERSATIONS: tuple[str, ...] = ("child", "per_run")

WORKING_HEADER = "Working memory (notes for the current task):"
FACTS_HEADER = "What you remember about the user (most relevant first):"

RUN_COMPLETED = "run_completed"
"""The ``meta`` key (``True``) of the last message of the batch that completes a run (the one
:meth:`RunLifecycle.finish` stores, or the LangChain middleware's last steps): a run started
later under the same run id in that conversation finds it and raises
:class:`~memory_adapters.errors.RunCompleted` (see :meth:`RunLifecycle.window`)."""


@dataclass(slots=True)
class Run:
    """An agent run. Adapters create it; hooks receive it.

    ``state`` is free for plugins to carry data from ``run_started`` to ``run_finished``.
    ``parent`` is the run that started this one (a sub-agent's parent).
    """

    scope: Scope
    framework: str
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    model: str | None = None
    agent: str | None = None
    parent: Run | None = None
    started_at: float = field(default_factory=time.time)
    state: dict[str, Any] = field(default_factory=dict)


_ACTIVE: contextvars.ContextVar[RunLifecycle | None] = contextvars.ContextVar(
    "memory_adapters.active_run", default=None
)


def active_run(memory: Memory) -> RunLifecycle | None:
    """The innermost active run of ``memory`` in this context (``None`` outside any run)."""
    lifecycle = _ACTIVE.get()
    while lifecycle is not None and lifecycle.memory is not memory:
        lifecycle = lifecycle._outer  # a run of another Memory, inside one of this one's
    return lifecycle


def own_run_id(memory: Memory, given: object) -> str:
    """The id of a new run: ``given`` (the framework's run id, so that a run retried under the
    same id is known as the same run), unless there is none or a run of ``memory`` active here
    has it already (a nested call handed its parent's id): then a new one."""
    if given is not None and given != "":
        candidate = str(given)
        run = active_run(memory)
        while run is not None and run.run.run_id != candidate:
            run = run.parent
        if run is None:
            return candidate
    return uuid.uuid4().hex


def fork_name(name: str | None) -> str:
    """A usable working-memory fork name for a sub-agent called ``name``."""
    cleaned = (name or "").replace("/", "_").strip()
    return cleaned[:64] or "subagent"


def run_fork(name: str, run_id: str) -> str:
    """The working-memory fork of one sub-agent run: ``<name>@<run id>``. A fork belongs to one
    run, so two runs of the same sub-agent at once never see each other's notes, and a run that
    fails leaves its notes apart (never merged), where they can be inspected."""
    return f"{name}@{run_id.replace('/', '_')[:96]}"


@dataclass(frozen=True, slots=True)
class RunScope:
    """Where a run's memory is. ``scope`` holds its facts and working memory and is the
    ``Memory``'s session inside the run; ``conversation`` is the scope of the log its messages
    go to. They differ only for a sub-agent, whose working memory is a fork below its parent's
    conversation while its messages go to a conversation of its own."""

    scope: Scope
    conversation: Scope


def run_scope(
    memory: Memory,
    *,
    conversation_id: str | None = None,
    user_id: str | None = None,
    agent_id: str | None = None,
    namespace: str | None = None,
    parent: RunLifecycle | None = None,
    name: str | None = None,
    run_id: str | None = None,
    sub_conversation: SubConversation = "child",
    hint: str = "",
) -> RunScope:
    """Where a run's memory is.

    The given values (the caller's explicit identifiers and what its resolvers returned) win;
    what they leave unset comes from the session in force. Under a ``parent`` run they come
    from the parent's scope instead, with the working memory on a fork of this run alone,
    named after the sub-agent and the run (:func:`run_fork`), and the messages in a child
    conversation (see :data:`SubConversation`) unless a conversation id is given. Raises
    :class:`~memory_adapters.errors.NoScope` when no conversation is in scope; ``hint`` is its
    message (how this framework's callers name a conversation).
    """
    if sub_conversation not in SUB_CONVERSATIONS:
        raise InvalidInput(
            f"sub_conversation must be one of {SUB_CONVERSATIONS}, not {sub_conversation!r}"
        )
    if parent is not None:
        base = parent.scope
        fork = fork_name(name)
        run_id = run_id or uuid.uuid4().hex
        scope = replace(
            base.merged(user_id=user_id, agent_id=agent_id, namespace=namespace),
            fork=(*base.fork, run_fork(fork, run_id)),
        )
        if conversation_id is None:
            parent_id = parent.conversation.conversation_id or "conversation"
            conversation_id = f"{parent_id}/{fork}"
            if sub_conversation == "per_run":
                conversation_id += f"/{run_id}"
        return RunScope(scope, replace(scope, conversation_id=conversation_id))
    scope = memory.scope.merged(
        user_id=user_id, agent_id=agent_id, namespace=namespace, conversation_id=conversation_id
    )
    if scope.conversation_id is None:
        raise NoScope(
            "no conversation in scope for this run: "
            + (hint or "use memory.session(conversation_id=...) or give memory.wrap() a resolver")
        )
    return RunScope(scope, scope)


def run_options(
    *,
    history_tokens: int | None,
    max_messages: int | None,
    sub_conversation: str,
    merge: str | None,
    preload_facts: int = 0,
) -> dict[str, Any]:
    """Check the options every adapter takes, raising
    :class:`~memory_adapters.errors.InvalidInput` for a bad one, and return the window options
    they give (``max_tokens``, ``max_messages``: what :class:`RunLifecycle` takes)."""
    check_positive_int(preload_facts, "preload_facts", allow_zero=True)
    window: dict[str, Any] = {}
    for value, what, key in (
        (history_tokens, "history_tokens", "max_tokens"),
        (max_messages, "max_messages", "max_messages"),
    ):
        if value is not None:
            window[key] = check_positive_int(value, what, allow_zero=True)
    if sub_conversation not in SUB_CONVERSATIONS:
        raise InvalidInput(
            f"sub_conversation must be one of {SUB_CONVERSATIONS}, not {sub_conversation!r}"
        )
    if merge is not None and merge not in POLICIES:
        raise InvalidInput(f"merge must be one of {POLICIES} or None, not {merge!r}")
    return window


class RunLifecycle:
    """The memory work around one agent run, framework-neutral (see the module docstring).

    ``merge`` is the policy a sub-agent's fork is merged back by when its run succeeds
    (``None`` keeps the notes in the fork); ``window_options`` are passed to
    :meth:`Conversation.window` (``max_tokens``, ``max_messages``, ``pin_system`` ...).
    """

    __slots__ = (
        "_closed",
        "_due",
        "_notes",
        "_outer",
        "_preloaded",
        "_saved",
        "_started",
        "_started_hook",
        "_steps",
        "memory",
        "merge",
        "parent",
        "result",
        "run",
        "shown",
        "where",
        "window_options",
    )

    def __init__(
        self,
        memory: Memory,
        where: RunScope | Scope,
        *,
        framework: str,
        run_id: str | None = None,
        agent: str | None = None,
        model: str | None = None,
        parent: RunLifecycle | None = None,
        merge: MergePolicy | None = "child",
        window_options: dict[str, Any] | None = None,
    ) -> None:
        if merge is not None and merge not in POLICIES:
            raise InvalidInput(f"merge must be one of {POLICIES} or None, not {merge!r}")
        if isinstance(where, Scope):
            where = RunScope(where, where)
        self.memory = memory
        self.where = where
        self.parent = parent
        self.merge = merge
        self.window_options = dict(window_options or {})
        self.run: Run = Run(
            where.conversation,
            framework,
            run_id=run_id or uuid.uuid4().hex,
            model=model,
            agent=agent,
            parent=None if parent is None else parent.run,
        )
        self.result: AppendResult | None = None
        self._closed = False
        self._started = False
        self._started_hook = False  # run_started was called (not only the run started)
        self._saved: list[Message] = []
        self._steps = itertools.count(1)
        self._preloaded: str | None = None
        self._notes: tuple[int, dict[str, Note]] | None = None
        self._outer: RunLifecycle | None = None
        self._due: SummaryDue | None = None
        self.shown: frozenset[int] = frozenset()
        """The seqs of the stored messages the run's window showed the model (conversation
        search leaves them out of what its tool returns)."""

    @property
    def scope(self) -> Scope:
        """The scope of the run's facts and working memory (its session inside the run)."""
        return self.where.scope

    @property
    def conversation(self) -> Scope:
        """The scope of the conversation the run's messages go to (``run.scope``)."""
        return self.where.conversation

    @property
    def closed(self) -> bool:
        """Whether the run has been persisted (by :meth:`finish` or :meth:`fail`)."""
        return self._closed

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        """Make this the active run, and its scope the ``Memory``'s session, inside the block."""
        self._outer = _ACTIVE.get()
        token = _ACTIVE.set(self)
        scope_token = self.memory._scope.set(self.scope)
        try:
            yield
        finally:
            self.memory._scope.reset(scope_token)
            _ACTIVE.reset(token)

    # -- plans ---------------------------------------------------------------------------------

    def _start(self) -> Plan[None]:
        self._started = True
        step = self.memory.hooks.run_started(self.run)
        if step is not None:
            self._started_hook = True
            yield step

    def _window(self, options: dict[str, Any]) -> Plan[Window]:
        conversation = Conversation(self.memory, self.conversation)
        window: Window = yield from conversation._window(
            {**self.window_options, **options}, self.run
        )
        if window.summary_due is not None:
            self._due = window.summary_due
        self.shown = frozenset(r.seq for r in (*window.pinned, *window.records))
        mine = self.run.run_id
        yield from self._refuse_completed([*window.pinned, *window.records])
        if any(r.run_id == mine for r in (*window.pinned, *window.records)):
            # earlier attempts of this very run (a retry under the same run id): the run
            # starts over from the history they started from
            window.pinned = pair_tool_calls([r for r in window.pinned if r.run_id != mine])
            window.records = pair_tool_calls(
                [r for r in window.records if r.run_id != mine], window.left_out
            )
        return window

    def _refuse_completed(self, records: Sequence[Record]) -> Plan[None]:
        """Raise :class:`~memory_adapters.errors.RunCompleted` when ``records`` (read from the
        run's conversation) hold a completed run of this run's id: the run is closed (it
        stores nothing) and, once started, ends with ``run_failed``."""
        mine = self.run.run_id
        completed = [r for r in records if r.run_id == mine and r.message.meta.get(RUN_COMPLETED)]
        done = completed[-1] if completed else None
        if done is None:
            return
        error = RunCompleted(mine, self.conversation.conversation_id or "", done.seq, done.message)
        self._closed = True
        if self._started:
            step = self.memory.hooks.run_failed(self.run, error, [], self._started_hook)
            if step is not None:
                yield step
        raise error

    def _probe(self) -> Plan[None]:
        """For a run that reads no window: the conversation's last message, so that a run
        retried under the id of a run just completed is refused all the same."""
        key = Conversation(self.memory, self.conversation).key
        last: list[Record] = yield StoreCall("tail", (key,), {"max_messages": 1})
        yield from self._refuse_completed(last)

    def _open(self, options: dict[str, Any], working: bool, load: bool = True) -> Plan[Window]:
        """The window (without ``load``: an empty one, after :meth:`_probe`), and with
        ``working`` the run's working memory (kept for :meth:`_fragments`), read together: one
        round trip where the store can."""
        read: Plan[Any] = self._window(options) if load else self._probe()
        if not working:
            got = yield from read
        else:
            version = self.memory.working_version
            wm = WorkingMemory(self.memory, self.scope)
            got, notes = yield from gather(read, wm._items())
            self._notes = (version, notes)
        if load:
            window: Window = got
            return window
        return Window(Conversation(self.memory, self.conversation).key)

    def _working_notes(self) -> Plan[dict[str, Note]]:
        """The run's working memory: as read at the run's start (or last read), unless a
        working-memory write through this ``Memory`` came since."""
        version = self.memory.working_version
        if self._notes is not None and self._notes[0] == version:
            return self._notes[1]
        notes: dict[str, Note] = yield from WorkingMemory(self.memory, self.scope)._items()
        self._notes = (version, notes)
        return notes

    def _fragments(
        self, prompt: str | None, tools: bool, preload_facts: int, working: bool
    ) -> Plan[list[str]]:
        fragments: list[str] = []
        if tools:
            fragments.append(self.memory.tools.instructions)
        if preload_facts > 0 and prompt and self.scope.user_id is not None:
            if self._preloaded is None:  # once per run: the prompt does not change
                facts = Facts(self.memory, self.scope)
                found = yield from facts._search(prompt, preload_facts)
                lines = [f"- {f.key}: {_text(f.value)}" for f in found]
                self._preloaded = "\n".join([FACTS_HEADER, *lines]) if lines else ""
            if self._preloaded:
                fragments.append(self._preloaded)
        if working:
            notes = yield from self._working_notes()
            rendered = WorkingMemory(self.memory, self.scope)._render(notes, None)
            if rendered:
                fragments.append(f"{WORKING_HEADER}\n{rendered}")
        return fragments

    def _before_model_call(self, messages: list[Message], instructions: list[str]) -> Plan[None]:
        step = self.memory.hooks.before_model_call(self.run, messages, instructions)
        if step is not None:
            yield step

    def _append(self, msgs: list[Message], key: str) -> Plan[AppendResult]:
        conversation = Conversation(self.memory, self.conversation)
        result: AppendResult = yield from conversation._append(
            msgs, self.run.run_id, None, outcome_key(key, msgs), None, coerce=True, run=self.run
        )
        self._saved.extend(msgs)
        self.result = result
        return result

    def _save(self, messages: Sequence[Message]) -> Plan[AppendResult | None]:
        if self._closed:
            raise InvalidInput(f"run {self.run.run_id} has been persisted already")
        msgs = list(messages)
        if not msgs:
            return None
        # next() on a count is atomic: steps saved from several threads get distinct keys
        result: AppendResult = yield from self._append(
            msgs, f"{self.run.run_id}.{next(self._steps)}"
        )
        return result

    def _save_steps(
        self, steps: Sequence[Sequence[Message]], last: bool = False
    ) -> Plan[list[AppendResult | None]]:
        """Persist several completed steps, each a batch of its own (as :meth:`save` would,
        one after the other), in one write: one round trip where the store can. With
        ``last``, they are the run's last steps, and the last message is marked as completing
        the run (:data:`RUN_COMPLETED`)."""
        steps = [list(s) for s in steps]
        if last:
            final = max((i for i, s in enumerate(steps) if s), default=None)
            if final is not None:
                steps[final] = _completing(steps[final])
        results: list[AppendResult | None] = yield from gather(*(self._save(s) for s in steps))
        return results

    def _persist(
        self, messages: Sequence[Message], error: BaseException | None
    ) -> Plan[AppendResult | None]:
        if self._closed:
            return self.result
        self._closed = True
        msgs = list(messages)
        if error is not None:
            msgs = [replace(m, meta={**m.meta, "failed": True}) for m in msgs]
        elif msgs:
            msgs = _completing(msgs)
        if msgs:  # the whole run as one batch keyed by the run id, or the rest after its steps
            key = f"{self.run.run_id}.{next(self._steps)}" if self._saved else self.run.run_id
            yield from self._append(msgs, key)
        if self._due is not None and self.memory.summaries is not None:
            # evicted turns to summarize: in the background, shown from the next turn on
            self.memory.summaries.submit(self._due)
        if self._saved:  # the run's messages, indexed for conversation search in the background
            self.memory.conversation_index.submit(self.conversation.conversation_key)
        hooks = self.memory.hooks
        if error is None:
            step = hooks.run_finished(self.run, list(self._saved), self._started_hook)
        else:
            step = hooks.run_failed(self.run, error, list(self._saved), self._started_hook)
        if step is not None:
            yield step
        return self.result

    def _merge(self) -> Plan[MergeReport | None]:
        if self.merge is None or not self.scope.fork or self.parent is None:
            return None
        report: MergeReport = yield from WorkingMemory(self.memory, self.scope)._merge(self.merge)
        return report

    def _finish(self, messages: Sequence[Message]) -> Plan[AppendResult | None]:
        first = not self._closed
        result = yield from self._persist(messages, None)
        if first:
            yield from self._merge()
        return result

    # -- sync -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Call ``run_started``."""
        self._run(self._start())

    def window(self, **options: Any) -> Window:
        """The window of past messages for the run (the lifecycle's window options, updated
        by ``options``). Raises :class:`~memory_adapters.errors.RunCompleted` (the run
        closed, ``run_failed`` called) when it shows a run of this run id stored as
        completed: a run id names one run."""
        return self._run(self._window(options))

    def open(self, *, working: bool = True, load: bool = True, **options: Any) -> Window:
        """:meth:`window`, and with ``working`` the run's working memory read in the same
        round trip (the first :meth:`fragments` then needs no read). Without ``load`` (a run
        that is shown no stored history), an empty window, after a look at the
        conversation's last message that refuses a run completed under this run id as
        :meth:`window` does."""
        return self._run(self._open(options, working, load))

    def fragments(
        self,
        prompt: str | None = None,
        *,
        tools: bool = True,
        preload_facts: int = 0,
        working: bool = True,
    ) -> list[str]:
        """The memory's instruction fragments: the tool guidance (``tools``), up to
        ``preload_facts`` of the user's facts most relevant to ``prompt`` (searched once per
        run), and the rendered working memory (``working``). Empty ones are left out."""
        return self._run(self._fragments(prompt, tools, preload_facts, working))

    def before_model_call(self, messages: list[Message], instructions: list[str]) -> None:
        """Call ``before_model_call``; the hooks may change both lists in place."""
        self._run(self._before_model_call(messages, instructions))

    def save(self, messages: Sequence[Message]) -> AppendResult | None:
        """Persist one completed step's messages as a batch of their own (nothing for none)."""
        return self._run(self._save(messages))

    def finish(self, messages: Sequence[Message]) -> AppendResult | None:
        """Persist the run's new messages (once; later calls return the first result), call
        ``run_finished`` and merge a sub-agent's fork into its parent."""
        return self._run(self._finish(messages))

    def fail(self, error: BaseException, messages: Sequence[Message]) -> AppendResult | None:
        """Persist what the run completed, marked ``meta["failed"] = True`` (once), and call
        ``run_failed``. The caller re-raises ``error``."""
        return self._run(self._persist(messages, error))

    # -- async ----------------------------------------------------------------------------------

    async def astart(self) -> None:
        """Async :meth:`start`."""
        await self._arun(self._start())

    async def awindow(self, **options: Any) -> Window:
        """Async :meth:`window`."""
        return await self._arun(self._window(options))

    async def aopen(self, *, working: bool = True, load: bool = True, **options: Any) -> Window:
        """Async :meth:`open`."""
        return await self._arun(self._open(options, working, load))

    async def afragments(
        self,
        prompt: str | None = None,
        *,
        tools: bool = True,
        preload_facts: int = 0,
        working: bool = True,
    ) -> list[str]:
        """Async :meth:`fragments`."""
        return await self._arun(self._fragments(prompt, tools, preload_facts, working))

    async def abefore_model_call(self, messages: list[Message], instructions: list[str]) -> None:
        """Async :meth:`before_model_call`."""
        await self._arun(self._before_model_call(messages, instructions))

    async def asave(self, messages: Sequence[Message]) -> AppendResult | None:
        """Async :meth:`save`."""
        return await self._arun(self._save(messages))

    async def afinish(self, messages: Sequence[Message]) -> AppendResult | None:
        """Async :meth:`finish`."""
        return await self._arun(self._finish(messages))

    async def afail(self, error: BaseException, messages: Sequence[Message]) -> AppendResult | None:
        """Async :meth:`fail`."""
        return await self._arun(self._persist(messages, error))

    def _run(self, plan: Plan[T]) -> T:
        return drive_sync(plan, self.memory.store, self.memory.hooks)

    async def _arun(self, plan: Plan[T]) -> T:
        return await drive_async(plan, self.memory.store, self.memory.hooks)

    def __repr__(self) -> str:
        return f"<RunLifecycle {self.run.framework} run={self.run.run_id} scope={self.scope}>"


def outcome_key(base: str, messages: Sequence[Message]) -> str:
    """The idempotency key of a run's batch: ``base`` (the run id, or ``<run id>.<step>``) and a
    fingerprint of what the batch says (roles, texts, tool calls' names and arguments, tool
    results; not ids, timestamps or ``raw``). A batch persisted again with the same outcome (a
    retried persist, a replayed run) is stored once; a retry of the run that ends otherwise (a
    failed attempt, then its answer) is stored as well."""
    said = [
        (
            m.role,
            m.text,
            [(c.name, c.args) for c in m.tool_calls],
            [(r.content, r.is_error) for r in m.tool_results],
        )
        for m in messages
    ]
    text = json.dumps(said, default=str, sort_keys=True, ensure_ascii=False)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if len(base) > MAX_ID_LENGTH - 17:
        base = hashlib.sha256(base.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{base}#{digest}"


def _completing(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with the last one marked as completing its run (:data:`RUN_COMPLETED`)."""
    last = messages[-1]
    return [*messages[:-1], replace(last, meta={**last.meta, RUN_COMPLETED: True})]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
