"""``MemoryMiddleware``: memory as a native ``create_agent`` middleware.

``create_agent(model, tools, middleware=[MemoryMiddleware(memory)])``. For every run of the
agent, however it is called (``invoke``, ``ainvoke``, ``stream``, ``astream``, ``batch`` ...):

``before_agent``
    decides the run's scope (:meth:`MemoryMiddleware.resolve_scope`) or raises
    :class:`~memory_adapters.NoScope`, calls ``run_started``, and loads the budgeted window of
    the stored conversation (and the working memory, in the same round trip) into the
    middleware's private per-run state (never into the graph state, so never into a
    checkpoint).
``wrap_model_call`` / ``awrap_model_call``
    shows the model the window, then the run's own messages, and adds to the system message
    the memory's fragments (tool guidance, optionally the user's facts most relevant to the
    prompt, the rendered working memory); runs the ``before_model_call`` hook when a plugin
    implements it. System messages of the window join the system message: a summary of
    evicted turns always, another framework's system prompt only when the agent has none of
    its own (providers expect one system message, first).
``tools``
    the long-term memory tools (:mod:`.tools`); ``wrap_tool_call`` makes the run active around
    every tool call, so the memory tools reach the run's scope and a wrapped agent called from a
    tool becomes a sub-agent on a fork of the run's working memory.
``after_agent``
    persists the run: each step (the input, what each model call and its tool calls added,
    the rest) as a batch of its own, keyed by the run and the step, all in one write (one round
    trip where the store can); calls ``run_finished`` and merges a sub-agent's fork back. A model
    or tool call that raises persists the steps that completed at once, before the error goes
    on, so that a run that raises keeps them (and one that goes on, under a retry middleware,
    stores the rest at its end). An interrupted run (an approval) is stored when it resumes: the
    graph's checkpoint holds its messages meanwhile.

Messages of the graph state that earlier runs stored (a LangGraph checkpointer keeps them in
the thread's state) are recognised and neither stored again nor shown twice: the model sees the
stored window in their place. A message another middleware makes (a ``SummarizationMiddleware``
summary; :func:`.mapping.synthesized`) is never stored, and once such a middleware has rewritten
the state the model is shown the state, with only the part of the window older than it. The
middleware keeps, in private state keys (``memory_run``, ``memory_mark``, ``memory_head``,
``memory_window``: omitted from the agent's input and ``invoke`` output), which run is going on,
the id of the last message it stored and of the first message of the thread (or run), and
which stored messages the run's window showed: a run resumed from a checkpoint after a crash
is shown that window again, whatever was appended since (``docs/durable.md``). With a
checkpointer, the memory tools' writes are marked with the tool call, so that a call run again
after a crash (its checkpoint lost) does not write twice.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ModelCallResult,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from memory_adapters import Memory, durable
from memory_adapters.run import (
    RunLifecycle,
    RunScope,
    SubConversation,
    active_run,
    own_run_id,
    run_options,
)
from memory_adapters.steps import Plan, drive_async, drive_sync
from memory_adapters.window import SUMMARY_PREFIX
from memory_adapters.working import MergePolicy

from .errors import ModelCannotCallTools
from .mapping import EDITED, FRAMEWORK, from_messages, synthesized, to_messages
from .scope import ScopeId, awaited, call_resolvers, checked, framework_values, run_where
from .tools import memory_tools

log = logging.getLogger("memory_adapters.langchain")

Resolver = ScopeId | Callable[[Runtime[Any]], Awaitable[ScopeId | None] | ScopeId | None] | None
"""A scope value: a fixed identifier, a callable (sync, or async for async runs) computing it
from the run's LangGraph ``Runtime`` (``runtime.context``, ``runtime.execution_info``; the run's
config is ``langgraph.config.get_config()``), returning ``None`` to leave it to the next
source, or ``None``. An identifier is a str, an int or a UUID (an int or a UUID is kept as its
str); anything else raises :class:`~memory_adapters.InvalidId`."""

MAX_RUNS = 1024
"""How many runs' private state one middleware keeps at most (a run that raised never says it
ended; the oldest are dropped first, and rebuilt from the store if their run goes on)."""


class MemoryState(AgentState[Any]):
    """The agent state keys the middleware adds, both private (not in input or output)."""

    memory_run: NotRequired[Annotated[str | None, PrivateStateAttr]]
    """The run the state belongs to (a key of the middleware's private per-run state)."""
    memory_mark: NotRequired[Annotated[str | None, PrivateStateAttr]]
    """The id of the last state message the memory stored."""
    memory_head: NotRequired[Annotated[str | None, PrivateStateAttr]]
    """The id of the first message of the thread (with a checkpointer) or of the run (without):
    where what the state holds, or a summary in it stands for, begins."""
    memory_window: NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr]]
    """Which stored messages the run's window showed (their seqs: a small mark,
    :func:`memory_adapters.durable.window_mark`): a run resumed from a checkpoint after a
    crash is shown the same window, whatever was appended to the conversation since."""


@dataclass(slots=True)
class _Run:
    """The middleware's private state for one run: never in the graph state."""

    lifecycle: RunLifecycle
    window: list[BaseMessage]
    old: set[str]
    """Ids of state messages that were stored before the run (a checkpointer's history)."""
    hidden: set[str]
    """Ids of state messages the model is shown through the window instead."""
    head: str | None = None
    """The state's ``memory_head``: the first message of the thread or of the run."""
    held: set[str] = field(default_factory=set)
    """Ids of the messages the state has held during the run: one that has left it was removed
    by another middleware (a summary stands for it)."""
    stored: set[str] = field(default_factory=set)
    """Ids of state messages the run has stored or holds to store (in ``pending``)."""
    pending: list[list[BaseMessage]] = field(default_factory=list)
    """The steps seen and not yet stored, in order: written together at the run's end, or at
    once when a model or tool call raises."""
    done: dict[str, ToolMessage] = field(default_factory=dict)
    """Results of the current step's tool calls that returned, by call id: stored by the next
    step in the order of the calls, or at once, in that order, when a sibling call raises."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def _config() -> dict[str, Any]:
    try:
        return cast(dict[str, Any], get_config())
    except RuntimeError:  # not inside a runnable
        return {}


class MemoryMiddleware(AgentMiddleware[MemoryState, Any]):
    """Durable, budgeted memory for a ``create_agent`` agent (see the module docstring).

    Scope. ``user_id``, ``conversation_id``, ``agent_id`` and ``namespace`` are each an
    identifier or a *resolver* (see :data:`Resolver`). For each value the first source that
    gives one wins: the value or resolver given here; the runtime context's attribute (or key)
    of that name (``conversation_id`` also as ``thread_id``); the run config's
    ``configurable`` entry (``thread_id`` for the conversation, ``user_id``, ``agent_id``); the
    ``Memory``'s session.
    A run of a memory agent started from a tool of another one is a sub-agent: it starts from
    the parent run's scope on the working-memory fork ``name`` (default: the agent's name), and
    its messages go to a child conversation (``sub_conversation``) unless its config names a
    ``thread_id`` of its own. A run with no conversation raises
    :class:`~memory_adapters.NoScope`.

    Options. ``history`` shows the model the stored window, within ``history_tokens``
    (default: the ``Memory``'s) and ``max_messages``; ``tools`` gives the model the long-term
    memory tools and their guidance; ``preload_facts`` puts up to that many of the user's facts
    most relevant to the prompt in the system message (0: off); ``working`` renders the working
    memory there; ``merge`` is the policy a sub-agent's fork is merged into its parent by when
    the sub-agent's run succeeds (``None``: never).
    """

    state_schema = MemoryState

    def __init__(
        self,
        memory: Memory,
        *,
        user_id: Resolver = None,
        conversation_id: Resolver = None,
        agent_id: Resolver = None,
        namespace: Resolver = None,
        history: bool = True,
        history_tokens: int | None = None,
        max_messages: int | None = None,
        tools: bool = True,
        preload_facts: int = 0,
        working: bool = True,
        name: str | None = None,
        sub_conversation: SubConversation = "child",
        merge: MergePolicy | None = "child",
    ) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(f"MemoryMiddleware needs a memory_adapters.Memory, not {memory!r}")
        self._window_options = run_options(
            history_tokens=history_tokens,
            max_messages=max_messages,
            sub_conversation=sub_conversation,
            merge=merge,
            preload_facts=preload_facts,
        )
        self.memory = memory
        self.user_id = user_id
        self.conversation_id = conversation_id
        self.agent_id = agent_id
        self.namespace = namespace
        self.history = history
        self.history_tokens = history_tokens
        self.max_messages = max_messages
        self.use_tools = tools
        self.preload_facts = preload_facts
        self.working = working
        self.agent_name = name
        self.sub_conversation = sub_conversation
        self.merge = merge
        self.tools: Sequence[BaseTool] = memory_tools(memory) if tools else []
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._lock = threading.Lock()

    # -- scope ------------------------------------------------------------------------------

    def _resolvers(self) -> dict[str, Resolver]:
        return {
            "user_id": self.user_id,
            "conversation_id": self.conversation_id,
            "agent_id": self.agent_id,
            "namespace": self.namespace,
        }

    def _where(self, runtime: Runtime[Any], resolved: dict[str, Any], run_id: str) -> RunScope:
        info = getattr(runtime, "execution_info", None)
        found = framework_values(
            _config(), getattr(runtime, "context", None), getattr(info, "thread_id", None)
        )
        return run_where(
            self.memory,
            checked(resolved),
            found,
            run_id=run_id,
            name=self._agent(),
            sub_conversation=self.sub_conversation,
        )

    def _agent(self) -> str | None:
        name = self.agent_name or (_config().get("metadata") or {}).get("lc_agent_name")
        return name if isinstance(name, str) else None

    def resolve_scope(self, runtime: Runtime[Any], run_id: str = "") -> RunScope:
        """Where the memory of the run ``runtime`` belongs to is (see the class docstring);
        async resolvers need :meth:`aresolve_scope`."""
        resolved = call_resolvers(self._resolvers(), runtime, allow_async=False)
        return self._where(runtime, resolved, run_id or uuid.uuid4().hex)

    async def aresolve_scope(self, runtime: Runtime[Any], run_id: str = "") -> RunScope:
        """Async :meth:`resolve_scope` (resolvers may be async)."""
        resolved = await awaited(call_resolvers(self._resolvers(), runtime, allow_async=True))
        return self._where(runtime, resolved, run_id or uuid.uuid4().hex)

    # -- private per-run state --------------------------------------------------------------

    def _lifecycle(self, where: RunScope, run_id: str) -> RunLifecycle:
        return RunLifecycle(
            self.memory,
            where,
            framework=FRAMEWORK,
            run_id=run_id,
            agent=self._agent(),
            parent=active_run(self.memory),
            merge=self.merge,
            window_options=self._window_options,
        )

    def _keep(self, key: str, run: _Run) -> None:
        with self._lock:
            self._runs[key] = run
            while len(self._runs) > MAX_RUNS:
                self._runs.popitem(last=False)

    def _find(self, state: Any) -> _Run | None:
        key = state.get("memory_run") if isinstance(state, dict) else None
        if not isinstance(key, str):
            return None
        with self._lock:
            return self._runs.get(key)

    def _begin(
        self, lifecycle: RunLifecycle, state: Any, mark: Any = None, fresh: bool = False
    ) -> Plan[tuple[_Run, dict[str, Any]]]:
        """Start the run: load the window (and the working memory with it), hold the run's
        input to store. The plan of ``before_agent`` (``fresh``: a run that starts here, which
        a run of its id stored as completed refuses, raising
        :class:`~memory_adapters.RunCompleted`); with the ``mark`` of the window a run
        resumed from a checkpoint was first shown, that window again (and what was stored
        after it, known as stored but not shown)."""
        yield from lifecycle._start()
        window: list[BaseMessage] = []
        update: dict[str, Any] = {"memory_run": lifecycle.run.run_id}
        since: set[str] = set()
        if self.history and durable.is_mark(mark):
            shown, later = yield from durable._replay_window(lifecycle, mark)
            window = from_messages(shown)
            since = {m.id for m in from_messages(later) if m.id is not None}
        elif self.history:
            loaded = yield from lifecycle._open({}, self.working)
            window = from_messages(loaded.messages())
            update["memory_window"] = durable.window_mark(loaded)
        elif fresh:
            yield from lifecycle._open({}, self.working, load=False)
        messages: list[AnyMessage] = list(state.get("messages") or [])
        old, hidden = _earlier(messages, state.get("memory_mark"), window)
        old |= since
        head = state.get("memory_head")
        if not isinstance(head, str):
            head = next((m.id for m in messages if not synthesized(m)), None)
        run = _Run(lifecycle, window, old, hidden, head)
        self._hold(run, messages)
        if head is not None and state.get("memory_head") != head:
            update["memory_head"] = head
        return run, update

    def _resume(self, state: Any, runtime: Any) -> _Run:
        """The run's private state, rebuilt from the store when this process does not hold it
        (a run resumed after an interrupt, or one of more than ``MAX_RUNS`` at once)."""
        found = self._find(state)
        if found is not None:
            return found
        key, run_id = _resumed_key(state)
        lifecycle = self._lifecycle(self.resolve_scope(runtime, run_id), run_id)
        mark = state.get("memory_window") if isinstance(state, dict) else None
        run, _ = drive_sync(
            self._begin(lifecycle, state, mark), self.memory.store, self.memory.hooks
        )
        self._keep(key, run)
        return run

    async def _aresume(self, state: Any, runtime: Any) -> _Run:
        found = self._find(state)
        if found is not None:
            return found
        key, run_id = _resumed_key(state)
        lifecycle = self._lifecycle(await self.aresolve_scope(runtime, run_id), run_id)
        mark = state.get("memory_window") if isinstance(state, dict) else None
        run, _ = await drive_async(
            self._begin(lifecycle, state, mark), self.memory.store, self.memory.hooks
        )
        self._keep(key, run)
        return run

    # -- persistence --------------------------------------------------------------------------

    def _claim(self, run: _Run, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages not stored yet, now marked as stored by the caller."""
        new: list[BaseMessage] = []
        with run.lock:
            for m in messages:
                if m.id is None or m.id in run.old or m.id in run.stored or synthesized(m):
                    continue
                run.stored.add(m.id)
                new.append(m)
        return new

    def _hold(self, run: _Run, messages: Sequence[BaseMessage]) -> None:
        """Hold, as the next step to store, the state messages the run has not stored or
        held yet (the state as a step of the run sees it)."""
        with run.lock:  # the tools' results have reached the state by now
            run.done.clear()
            run.held.update(m.id for m in messages if m.id is not None)
        new = self._claim(run, messages)
        if new:
            with run.lock:
                run.pending.append(new)

    def _flush(self, run: _Run, last: bool = False) -> Plan[None]:
        """Store the held steps, each a batch of its own, in one write (held again if it
        fails, for the run's end to store, should the run go on); ``last``: the run's last
        steps, which complete it."""
        with run.lock:
            steps, run.pending = run.pending, []
        if not steps:
            return
        try:
            yield from run.lifecycle._save_steps([to_messages(step) for step in steps], last)
        except BaseException:
            with run.lock:
                run.pending[:0] = steps
            raise

    def _flush_failed(self, run: _Run, done: Sequence[BaseMessage]) -> Plan[None]:
        """A model or tool call raised: store what completed now (``done``: results of the
        sibling calls that returned, as their own step), before the error goes on."""
        if done:
            with run.lock:
                run.pending.append(list(done))
        yield from self._flush(run)

    def _end(self, run: _Run, state: Any) -> Plan[dict[str, Any]]:
        messages = list(state.get("messages") or [])
        self._hold(run, messages)
        yield from self._flush(run, last=True)
        yield from run.lifecycle._finish([])
        key = state.get("memory_run")
        with self._lock:
            self._runs.pop(key if isinstance(key, str) else run.lifecycle.run.run_id, None)
        last = messages[-1].id if messages else None
        return {"memory_mark": last} if last is not None else {}

    # -- node hooks ---------------------------------------------------------------------------

    def before_agent(self, state: MemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Start the run: its scope, its window, its input stored."""
        run_id = own_run_id(self.memory, _run_id(runtime))
        lifecycle = self._lifecycle(self.resolve_scope(runtime, run_id), run_id)
        run, update = drive_sync(
            self._begin(lifecycle, state, fresh=True), self.memory.store, self.memory.hooks
        )
        self._keep(run_id, run)
        return update

    async def abefore_agent(
        self, state: MemoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async :meth:`before_agent`."""
        run_id = own_run_id(self.memory, _run_id(runtime))
        lifecycle = self._lifecycle(await self.aresolve_scope(runtime, run_id), run_id)
        run, update = await drive_async(
            self._begin(lifecycle, state, fresh=True), self.memory.store, self.memory.hooks
        )
        self._keep(run_id, run)
        return update

    def after_agent(self, state: MemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Store what is left, call ``run_finished``, merge a sub-agent's fork back."""
        run = self._resume(state, runtime)
        return drive_sync(self._end(run, state), self.memory.store, self.memory.hooks) or None

    async def aafter_agent(
        self, state: MemoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async :meth:`after_agent`."""
        run = await self._aresume(state, runtime)
        return (
            await drive_async(self._end(run, state), self.memory.store, self.memory.hooks) or None
        )

    # -- the model call -----------------------------------------------------------------------

    def _request(self, run: _Run, request: ModelRequest[Any]) -> tuple[list[BaseMessage], str]:
        """The messages the model is shown, and the text of the prompt (for preloaded facts).

        Normally the window, then the state's messages it does not stand in for. Once another
        middleware has rewritten the state (messages have left it, or it holds a summary that
        middleware made), the state is the history from its head on, and the window adds only
        what is older than all of it (see :func:`_before`)."""
        state = list(request.messages)
        ids = {m.id for m in state if m.id is not None}
        with run.lock:
            left = run.held - ids
            head_is_own = run.head is not None and run.head in run.stored
        if left or any(synthesized(m) for m in state):
            own = state
            window = _before(run.window, None if head_is_own else run.head, ids | left)
        else:
            own = [m for m in state if m.id is None or m.id not in run.hidden]
            shown = {m.id for m in own if m.id is not None}
            window = [m for m in run.window if m.id is None or m.id not in shown]
        prompt = next(
            (m.text for m in reversed(own) if isinstance(m, HumanMessage) and not synthesized(m)),
            "",
        )
        return [*window, *own], prompt

    def _fragments_plan(
        self, run: _Run, messages: list[BaseMessage], prompt: str
    ) -> Plan[tuple[list[BaseMessage], list[str]]]:
        lifecycle = run.lifecycle
        fragments: list[str] = yield from lifecycle._fragments(
            prompt or None, self.use_tools, self.preload_facts, self.working
        )
        if self.memory.hooks.live("before_model_call"):
            neutral = to_messages(messages)
            before = [m.to_dict() for m in neutral]
            yield from lifecycle._before_model_call(neutral, fragments)
            if [m.to_dict() for m in neutral] != before:
                for m in neutral:
                    m.meta[EDITED] = True
                messages = from_messages(neutral)
        return messages, fragments

    def _override(
        self, request: ModelRequest[Any], messages: list[BaseMessage], fragments: list[str]
    ) -> ModelRequest[Any]:
        system = request.system_message
        kept: list[BaseMessage] = []
        notes: list[str] = []
        for m in messages:  # system messages of the window join the request's system message
            if isinstance(m, SystemMessage):
                if m.text.startswith(SUMMARY_PREFIX) or system is None:
                    notes.append(m.text)
            else:
                kept.append(m)
        extra = "\n\n".join(t for t in [*notes, *fragments] if t)
        if extra:
            if system is None:
                system = SystemMessage(content=extra)
            elif isinstance(system.content, str):
                system = SystemMessage(content=f"{system.content}\n\n{extra}")
            else:
                system = SystemMessage(content=[*system.content, {"type": "text", "text": extra}])
        return request.override(messages=cast(list[AnyMessage], kept), system_message=system)

    def _check_tools(self, request: ModelRequest[Any]) -> None:
        """Raise :class:`~.errors.ModelCannotCallTools` before the model is called when it
        cannot call tools and the request gives it the memory tools (LangChain itself would
        raise a bare ``NotImplementedError`` from ``bind_tools``)."""
        model = request.model
        if not self.use_tools or not isinstance(model, BaseChatModel):
            return
        if type(model).bind_tools is not BaseChatModel.bind_tools:
            return
        mine = {t.name for t in self.tools}
        if any(getattr(t, "name", None) in mine for t in request.tools):
            raise ModelCannotCallTools(type(model).__name__)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        """Show the model the window and the memory's system-message fragments."""
        self._check_tools(request)
        run = self._resume(request.state, request.runtime)
        self._hold(run, _state_messages(request.state))
        messages, prompt = self._request(run, request)
        messages, fragments = drive_sync(
            self._fragments_plan(run, messages, prompt), self.memory.store, self.memory.hooks
        )
        try:
            with run.lifecycle.activate():
                return handler(self._override(request, messages, fragments))
        except GraphBubbleUp:
            raise
        except Exception:
            with _logged(run):
                drive_sync(self._flush(run), self.memory.store, self.memory.hooks)
            raise

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        """Async :meth:`wrap_model_call`."""
        self._check_tools(request)
        run = await self._aresume(request.state, request.runtime)
        self._hold(run, _state_messages(request.state))
        messages, prompt = self._request(run, request)
        messages, fragments = await drive_async(
            self._fragments_plan(run, messages, prompt), self.memory.store, self.memory.hooks
        )
        try:
            with run.lifecycle.activate():
                return await handler(self._override(request, messages, fragments))
        except GraphBubbleUp:
            raise
        except Exception:
            with _logged(run):
                await drive_async(self._flush(run), self.memory.store, self.memory.hooks)
            raise

    # -- tool calls ---------------------------------------------------------------------------

    def _returned(self, run: _Run, result: ToolMessage | Command[Any]) -> None:
        """Note a tool's result, in case a sibling call raises (a returned result reaches the
        state, and is stored from there; so do a ``Command``'s messages)."""
        if isinstance(result, ToolMessage):
            if result.id is None:  # the id the state will keep, so the next step knows it
                result.id = str(uuid.uuid4())
            with run.lock:
                run.done[result.tool_call_id] = result

    def _siblings(self, run: _Run, request: ToolCallRequest) -> list[BaseMessage]:
        """When a tool call raises: the results its sibling calls returned, in call order,
        claimed for storing now (the step's state update is lost with the error)."""
        state = _state_messages(request.state)
        calls: list[str] = []
        for m in reversed(state):
            if isinstance(m, AIMessage) and any(
                c.get("id") == request.tool_call.get("id") for c in m.tool_calls
            ):
                calls = [c.get("id") or "" for c in m.tool_calls]
                break
        with run.lock:
            done = [run.done[c] for c in calls if c in run.done]
        self._hold(run, state)  # the step up to the calls, first
        return self._claim(run, done)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool with the run active. Its result is stored with the run, in call order;
        if the call raises, what completed is stored now, with the results its sibling calls
        returned."""
        run = self._resume(request.state, request.runtime)
        try:
            with run.lifecycle.activate(), _replayable(run, request):
                result = handler(request)
        except GraphBubbleUp:
            raise
        except Exception:
            done = self._siblings(run, request)
            with _logged(run):
                drive_sync(self._flush_failed(run, done), self.memory.store, self.memory.hooks)
            raise
        self._returned(run, result)
        return result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async :meth:`wrap_tool_call`."""
        run = await self._aresume(request.state, request.runtime)
        try:
            with run.lifecycle.activate(), _replayable(run, request):
                result = await handler(request)
        except GraphBubbleUp:
            raise
        except Exception:
            done = self._siblings(run, request)
            with _logged(run):
                await drive_async(
                    self._flush_failed(run, done), self.memory.store, self.memory.hooks
                )
            raise
        self._returned(run, result)
        return result

    def __repr__(self) -> str:
        return f"MemoryMiddleware(memory={self.memory!r})"


def _earlier(
    messages: Sequence[BaseMessage], mark: Any, window: Sequence[BaseMessage]
) -> tuple[set[str], set[str]]:
    """Ids of the state messages stored before this run (those up to the mark a previous run
    left in the state, a checkpointer's thread, and any the window holds), and of those the
    window stands in for: every state message up to the last one the window holds. Stored
    messages after that one (a tool call the window left out because its result is not stored
    yet, in a run resumed after an interrupt) are shown from the state."""
    in_window = {m.id for m in window if m.id is not None}
    old = set(in_window)
    if isinstance(mark, str):
        for i, m in enumerate(messages):
            if m.id == mark:
                old.update(x.id for x in messages[: i + 1] if x.id is not None)
                break
    last = max((i for i, m in enumerate(messages) if m.id in in_window), default=-1)
    hidden = in_window | {m.id for m in messages[: last + 1] if m.id is not None}
    return old, hidden


def _before(window: Sequence[BaseMessage], head: str | None, later: set[str]) -> list[BaseMessage]:
    """The part of ``window`` older than a rewritten state: before ``head`` (the first message
    of a thread that began before this run; nothing when the window does not reach back to
    it), and before any message in ``later`` (what the state holds or held), ending with whole
    tool calls. Without a ``head`` (the state began with this run) the whole window is older."""
    kept = list(window)
    if head is not None:
        at = next((i for i, m in enumerate(kept) if m.id == head), None)
        kept = kept[:at] if at is not None else []
    cut = next((i for i, m in enumerate(kept) if m.id is not None and m.id in later), len(kept))
    kept = kept[:cut]
    calls = next((i for i in range(len(kept) - 1, -1, -1) if isinstance(kept[i], AIMessage)), None)
    if calls is not None:
        asked = {c.get("id") for c in cast(AIMessage, kept[calls]).tool_calls}
        answered = {m.tool_call_id for m in kept[calls + 1 :] if isinstance(m, ToolMessage)}
        if not asked <= answered:
            kept = kept[:calls]
    return kept


def _run_id(runtime: Any) -> Any:
    """LangGraph's id of the run (the ``run_id`` of the caller's config, or one LangGraph made
    up), so that a run retried under the same ``run_id`` is known as the same run."""
    return getattr(getattr(runtime, "execution_info", None), "run_id", None)


def _resumed_key(state: Any) -> tuple[str, str]:
    """The state's run key, and a fresh run id for the rebuilt lifecycle (its step batches
    must not reuse the idempotency keys of the steps the first worker stored)."""
    key = state.get("memory_run") if isinstance(state, dict) else None
    return (key if isinstance(key, str) else uuid.uuid4().hex), uuid.uuid4().hex


CHECKPOINTER = "__pregel_checkpointer"
"""The config key under which LangGraph hands a run its checkpointer."""


def _replayable(run: _Run, request: ToolCallRequest) -> contextlib.AbstractContextManager[None]:
    """With a checkpointer (a run that may be resumed after a crash, running a tool call again
    whose result no checkpoint kept), the memory tools' writes are marked with the call, so
    that the call run again does not write twice
    (:func:`memory_adapters.durable.replayable_call`)."""
    if _config().get("configurable", {}).get(CHECKPOINTER) is None:
        return contextlib.nullcontext()
    call_id = request.tool_call.get("id")
    thread = run.lifecycle.conversation.conversation_id
    return durable.replayable_call(thread, call_id if isinstance(call_id, str) else None)


def _state_messages(state: Any) -> list[BaseMessage]:
    return list((state or {}).get("messages") or []) if isinstance(state, dict) else []


@contextlib.contextmanager
def _logged(run: _Run) -> Iterator[None]:
    """Storing what a failed call completed is best effort: the call's own error is what the
    caller must see."""
    try:
        yield
    except Exception as exc:
        log.warning(
            "could not store what run %s completed before it failed: %r",
            run.lifecycle.run.run_id,
            exc,
        )
