"""``MemoryCapability``: memory as a native pydantic-ai capability.

Give it to an agent (``Agent(..., capabilities=[MemoryCapability(memory)])``) or to one run
(``agent.run(..., capabilities=[...])``); ``memory.wrap(agent)`` passes it to every run for you.
Because pydantic-ai calls a capability's hooks however a run is driven, every entry point
(``run``, ``run_sync``, ``run_stream``, ``run_stream_sync``, ``run_stream_events``, ``iter``)
gets the same memory:

``for_run``
    decides the run's scope (:meth:`MemoryCapability.resolve_scope`), or raises
    :class:`~memory_adapters.NoScope`, and returns a per-run copy holding a
    :class:`~memory_adapters.run.RunLifecycle`.
``before_run``
    calls ``run_started`` and, when the caller passed no history, puts the budgeted window of
    the stored conversation in the run's history, as if it had been passed as
    ``message_history``.
instructions
    the memory tools' guidance, optionally the user's facts most relevant to the prompt, and the
    rendered working memory, before every model request.
``before_model_request``
    runs the ``before_model_call`` hook, when a plugin implements it, on the request's messages
    and the memory's instruction fragments.
toolset
    the long-term memory tools, bound to the run's scope (:mod:`.toolset`).
``wrap_run``
    makes the run active (its scope is the ``Memory``'s session inside the run, and a wrapped
    agent run from inside it becomes its sub-agent), then persists the run's new messages once,
    when the run ends: for a streamed run, when its stream has completed and its context exits.
    A run that fails, or that its caller abandons, persists what completed, marked
    ``meta["failed"] = True``.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast
from uuid import UUID

import anyio
from pydantic_ai import RunContext
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, DeferredToolRequests, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset

from memory_adapters import Memory, Message, durable
from memory_adapters.run import (
    RunLifecycle,
    RunScope,
    SubConversation,
    active_run,
    run_options,
    run_scope,
)
from memory_adapters.scope import framework_id
from memory_adapters.window import AWAITING
from memory_adapters.working import MergePolicy

from .mapping import EDITED, FINAL_RESULT, FRAMEWORK, from_messages, text_of, to_messages
from .toolset import memory_toolset

log = logging.getLogger("memory_adapters.pydantic_ai")

ScopeValue = str | int | UUID
"""An identifier as an application gives it: an int or a UUID is used as its str."""

Resolver = (
    ScopeValue
    | Callable[[RunContext[Any]], Awaitable[ScopeValue | None] | ScopeValue | None]
    | None
)
"""A scope value: a fixed one, a callable (sync or async) computing it from the run's
``RunContext`` (or returning ``None`` to leave it to the next source), or ``None``."""

CAPABILITY_ID = "memory_adapters"
"""The capability's default ``id``: a per-run one replaces an agent-level one."""

_UNSCOPED = "memory-adapters-unscoped-"

_HINT = (
    "pass conversation_id= to the run, run it inside memory.session(conversation_id=...), or "
    "give wrap() / MemoryCapability a conversation_id resolver such as "
    "conversation_id=lambda ctx: ctx.deps.thread_id"
)


@dataclass(init=False)
class MemoryCapability(AbstractCapability[AgentDepsT]):
    """Durable, budgeted memory for the runs of a pydantic-ai agent (see the module docstring).

    Scope. ``user_id``, ``conversation_id``, ``agent_id`` and ``namespace`` are each a string,
    or a *resolver*: a callable, sync or async, that receives the run's ``RunContext`` (with
    ``deps``, ``prompt``, ``conversation_id``, ``run_id``, ``metadata`` and ``agent`` set; it is
    called once per run, before the run starts) and returns the value or ``None``. For each
    value the first of these that gives one wins: the resolver (or string) given here; for the
    conversation, the run's own ``conversation_id`` (the argument, a ``conversation=`` object's,
    or the last one in a ``message_history``); the ``Memory``'s session. A wrapped agent run from
    inside another wrapped agent's run (a sub-agent) starts from the parent run's scope instead
    of the session, on the working-memory fork ``name`` (default: the agent's name), and its
    messages go to a child conversation (``sub_conversation``) unless the run itself is given a
    ``conversation_id`` (a conversation resolver or string given here does not apply to it). A
    run with no conversation raises :class:`~memory_adapters.NoScope`.

    Options. ``history`` loads the stored window when the caller passes no history, within
    ``history_tokens`` (default: the ``Memory``'s) and ``max_messages``; ``tools`` gives the model
    the long-term memory tools and their instructions; ``preload_facts`` puts up to that many of
    the user's facts most relevant to the prompt in the instructions (0: off); ``working``
    renders the working memory in the instructions; ``merge`` is the policy a sub-agent's fork is
    merged into its parent by when the sub-agent's run succeeds (``None``: never).
    """

    memory: Memory
    user_id: Resolver
    conversation_id: Resolver
    agent_id: Resolver
    namespace: Resolver
    history: bool
    history_tokens: int | None
    max_messages: int | None
    tools: bool
    preload_facts: int
    working: bool
    name: str | None
    sub_conversation: SubConversation
    merge: MergePolicy | None

    _lifecycle: RunLifecycle | None = field(default=None, repr=False, compare=False)
    _live: list[ModelMessage] | None = field(default=None, repr=False, compare=False)
    _fragments: list[str] = field(default_factory=list, repr=False, compare=False)
    _text: str | None = field(default=None, repr=False, compare=False)
    _agent_name: str | None = field(default=None, repr=False, compare=False)
    _defaults: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    _window_options: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _output_tools: set[str] = field(default_factory=set, repr=False, compare=False)
    _final: Any = field(default=None, repr=False, compare=False)
    _executed: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _shared: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """What every per-run copy shares with the capability it was copied from (the toolset)."""

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
        id: str | None = CAPABILITY_ID,
        description: str | None = None,
    ) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(f"MemoryCapability needs a memory_adapters.Memory, not {memory!r}")
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
        self.tools = tools
        self.preload_facts = preload_facts
        self.working = working
        self.name = name
        self.sub_conversation = sub_conversation
        self.merge = merge
        self.id = id
        self.description = description
        self.defer_loading = False
        self._lifecycle = None
        self._live = None
        self._fragments = []
        self._text = None
        self._agent_name = None
        self._defaults = {}
        self._output_tools = set()
        self._final = None
        self._executed = {}
        self._shared = {}

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not constructible from an agent spec: it holds a live ``Memory``."""
        return None

    def _copy(self) -> MemoryCapability[AgentDepsT]:
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._lifecycle = None
        new._live = None
        new._fragments = []
        new._text = None
        new._defaults = {}
        new._output_tools = set()
        new._final = None
        new._executed = {}
        return new

    @property
    def lifecycle(self) -> RunLifecycle | None:
        """The run this per-run copy serves (``None`` on the capability given to the agent)."""
        return self._lifecycle

    # -- binding and scope -------------------------------------------------------------------

    def for_agent(self, agent: AbstractAgent[AgentDepsT, Any]) -> MemoryCapability[AgentDepsT]:
        """A copy that knows the agent's name (a sub-agent's default fork name)."""
        bound = self._copy()
        bound._agent_name = agent.name
        return bound

    def _static(self, value: Resolver) -> str | None:
        return None if value is None or callable(value) else framework_id(value, "a scope value")

    def get_default_conversation_id(self, run_id: str) -> str | None:
        """pydantic-ai's ``conversation_id`` for a run given none: the one memory will use when
        it is known before the run (a fixed id, the parent run's child conversation, the
        session's), else a marker that tells :meth:`for_run` that none was given."""
        parent = active_run(self.memory)
        try:
            where = run_scope(
                self.memory,
                conversation_id=None if parent else self._static(self.conversation_id),
                parent=parent,
                name=self.name or self._agent_name,
                run_id=run_id,
                sub_conversation=self.sub_conversation,
            )
            value = where.conversation.conversation_id or _UNSCOPED + run_id
        except Exception:  # no session, or a session value a later resolver will replace
            value = _UNSCOPED + run_id
        if len(self._defaults) > 1000:  # runs that failed before for_run never took theirs
            self._defaults.clear()
        self._defaults[run_id] = value
        return value

    async def _resolve(self, value: Resolver, ctx: RunContext[AgentDepsT]) -> str | None:
        """The scope value ``value`` gives for the run ``ctx``: a fixed value, or what the
        resolver returns (awaited if async), as memory keeps identifiers
        (:func:`~memory_adapters.scope.framework_id`: a str, an int or a UUID, an int or a UUID
        as its str; ``None`` or ``""`` for none; anything else raises ``InvalidId`` naming the
        resolver)."""
        fields = ("user_id", "conversation_id", "agent_id", "namespace")
        what = next((n for n in fields if value is not None and getattr(self, n) is value), "")
        resolved: object = value(ctx) if callable(value) else value
        if inspect.isawaitable(resolved):
            resolved = await resolved
        return framework_id(resolved, what or "a scope value", f"the {what or 'scope'} resolver")

    async def resolve_scope(self, ctx: RunContext[AgentDepsT]) -> RunScope:
        """Where the memory of the run ``ctx`` describes is (see the class docstring)."""
        run_id = ctx.run_id or ""
        default = self._defaults.pop(run_id, None)
        given = ctx.conversation_id
        explicit = (
            None if given is None or given == default or given.startswith(_UNSCOPED) else given
        )
        parent = active_run(self.memory)
        if parent is None:
            conversation = await self._resolve(self.conversation_id, ctx) or explicit
        else:  # a sub-agent: its own child conversation, unless the run names one
            conversation = explicit
        return run_scope(
            self.memory,
            conversation_id=conversation,
            user_id=await self._resolve(self.user_id, ctx),
            agent_id=await self._resolve(self.agent_id, ctx),
            namespace=await self._resolve(self.namespace, ctx),
            parent=parent,
            name=self.name or self._agent_name or (ctx.agent.name if ctx.agent else None),
            run_id=run_id or None,
            sub_conversation=self.sub_conversation,
            hint=_HINT,
        )

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> MemoryCapability[AgentDepsT]:
        """A per-run copy bound to the run's scope; raises ``NoScope`` without a conversation."""
        where = await self.resolve_scope(ctx)
        run = self._copy()
        model = getattr(ctx.model, "model_name", None)
        run._lifecycle = RunLifecycle(
            self.memory,
            where,
            framework=FRAMEWORK,
            run_id=ctx.run_id,
            agent=ctx.agent.name if ctx.agent is not None else self._agent_name,
            model=model if isinstance(model, str) else None,
            parent=active_run(self.memory),
            merge=self.merge,
            window_options=self._window_options,
        )
        return run

    # -- contributions ------------------------------------------------------------------------

    def get_instructions(self) -> Callable[[RunContext[AgentDepsT]], Any] | None:
        """The memory's instructions, computed before every model request of a run."""
        return self._instructions if self._lifecycle is not None else None

    async def _instructions(self, ctx: RunContext[AgentDepsT]) -> str | None:
        lifecycle = self._lifecycle
        if lifecycle is None:
            return None
        self._fragments = await lifecycle.afragments(
            text_of(ctx.prompt),
            tools=self.tools,
            preload_facts=self.preload_facts,
            working=self.working,
        )
        self._text = "\n\n".join(self._fragments) or None
        return self._text

    def get_toolset(self) -> AbstractToolset[AgentDepsT] | None:
        """The memory tools, bound to the run's scope."""
        if not self.tools or self._lifecycle is None:
            return None
        toolset = self._shared.get("toolset")
        if toolset is None:  # built once: its tools act on the scope of the run in force
            toolset = self._shared["toolset"] = memory_toolset(self.memory)
        return cast(AbstractToolset[AgentDepsT], toolset)

    # -- lifecycle ----------------------------------------------------------------------------

    async def before_run(self, ctx: RunContext[AgentDepsT]) -> None:
        """Start the run; load the stored window when the caller passed no history."""
        lifecycle = self._lifecycle
        if lifecycle is None:
            return
        self._live = ctx.messages
        # a run with no prompt resumes: calls a run left waiting (approvals, deferred tools)
        # stay at the window's tail for their results. The working memory the instructions
        # render is read in the same round trip. Inside a durable run (a DBOS workflow) the
        # window and the run id are a recorded step, replayed on recovery (.durable).
        window = await durable.aopen_run(
            lifecycle,
            load=self.history and not ctx.messages,
            working=self.working,
            resuming=ctx.prompt is None,
        )
        ctx.messages.extend(from_messages(window))

    async def before_node_run(self, ctx: RunContext[AgentDepsT], *, node: Any) -> Any:
        """Keep hold of the run's live history (what a failed run persists), and of the final
        result a streamed run sets (whose output call's return pydantic-ai keeps out of the
        run's history)."""
        self._live = ctx.messages
        final = getattr(node, "final_result", None)
        if final is not None and type(node).__name__ == "SetFinalResult":
            self._final = final
        return node

    async def prepare_output_tools(
        self, ctx: RunContext[AgentDepsT], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        """Note the run's output tools (unchanged): a structured output is stored as the
        response's answer, readable by every framework."""
        self._output_tools.update(t.name for t in tool_defs)
        return tool_defs

    async def after_tool_execute(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        result: Any,
    ) -> Any:
        """Note what a tool returned (unchanged), for a streamed run's last step."""
        self._executed[call.tool_call_id] = result
        return result

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Run the ``before_model_call`` hook (only when a plugin implements it and is active)."""
        self._live = ctx.messages
        lifecycle = self._lifecycle
        if lifecycle is None or not self.memory.hooks.live("before_model_call"):
            return request_context
        neutral = to_messages(request_context.messages)
        before = {id(m): m.to_dict() for m in neutral}
        fragments = list(self._fragments)
        await lifecycle.abefore_model_call(neutral, fragments)
        changed = False
        for m in neutral:
            if before.get(id(m)) != m.to_dict():
                m.meta[EDITED] = True  # rebuild it from what the hook left, not from raw
                changed = True
        if changed or len(neutral) != len(before):
            request_context.messages = from_messages(neutral)
        if fragments != self._fragments:
            request_context = self._replace_instructions(request_context, fragments)
        return request_context

    def _replace_instructions(
        self, request_context: ModelRequestContext, fragments: list[str]
    ) -> ModelRequestContext:
        params = request_context.model_request_parameters
        parts = list(params.instruction_parts or [])
        text = "\n\n".join(f for f in fragments if f)
        for i, part in enumerate(parts):
            if self._text is not None and part.content == self._text:
                if text:
                    parts[i] = dataclasses.replace(part, content=text)
                else:
                    del parts[i]
                break
        else:
            if text:
                from pydantic_ai.messages import InstructionPart

                parts.append(InstructionPart(text, dynamic=True))
        return dataclasses.replace(
            request_context,
            model_request_parameters=dataclasses.replace(params, instruction_parts=parts),
        )

    def _new_messages(self, ctx: RunContext[AgentDepsT]) -> list[ModelMessage]:
        live = self._live if self._live is not None else ctx.messages
        for i, message in enumerate(live):
            if message.run_id == ctx.run_id:
                # a request the failure interrupted before it held anything says nothing
                return [m for m in live[i:] if m.parts or not isinstance(m, ModelRequest)]
        return []

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: Any) -> AgentRunResult[Any]:
        """Run with this run active; persist its new messages once when it ends."""
        lifecycle = self._lifecycle
        if lifecycle is None:
            result: AgentRunResult[Any] = await handler()
            return result
        with lifecycle.activate():
            try:
                result = await handler()
            except BaseException as exc:
                await self._persist_failure(lifecycle, exc, self._new_messages(ctx))
                raise
            await lifecycle.afinish(self._persisted(ctx, result))
            return result

    def _persisted(self, ctx: RunContext[AgentDepsT], result: AgentRunResult[Any]) -> list[Message]:
        """The neutral form of the run's new messages, as the run's caller sees them: a
        streamed run's last step completed the way ``run_stream`` completes it for its caller,
        and the calls a run leaves waiting (approvals, deferred tools) marked as awaiting."""
        messages = list(result.new_messages())
        awaiting: list[str] = []
        if isinstance(result.output, DeferredToolRequests):
            awaiting = [c.tool_call_id for c in (*result.output.calls, *result.output.approvals)]
        elif self._final is not None:
            closing = _closing_request(
                ctx, messages, self._final, self._output_tools, self._executed
            )
            if closing is not None:
                messages.append(closing)
        neutral = to_messages(messages, self._output_tools)
        if awaiting:
            last = next((m for m in reversed(neutral) if m.role == "assistant"), None)
            if last is not None:
                last.meta[AWAITING] = awaiting
        return neutral

    async def _persist_failure(
        self, lifecycle: RunLifecycle, error: BaseException, messages: Sequence[ModelMessage]
    ) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await lifecycle.afail(error, to_messages(messages, self._output_tools))
            except Exception as exc:  # the run's own error is what the caller must see
                log.error("could not persist the failed run %s", lifecycle.run.run_id, exc_info=exc)
                error.add_note(f"memory-adapters could not persist what the run completed: {exc!r}")


_OUTPUT_NOT_USED = "Output tool not used - a final result was already processed."
_TOOL_NOT_RUN = "Tool not executed - a final result was already processed."


def _closing_request(
    ctx: RunContext[Any],
    messages: list[ModelMessage],
    final: Any,
    output_tools: set[str],
    executed: dict[str, Any],
) -> ModelRequest | None:
    """The request ``run_stream`` adds, for its caller only, after the response that gave a
    streamed run its final result: a return for each of that response's calls (the winning
    output call's :data:`FINAL_RESULT`, what a tool that ran returned, pydantic-ai's notes for
    the rest), so that the stored turn holds no call without its result. ``None`` when the
    run's history already ends with the returns."""
    if not messages or not isinstance(messages[-1], ModelResponse):
        return None
    calls = messages[-1].tool_calls
    if not calls:
        return None
    parts: list[ModelRequestPart] = []
    for call in calls:
        if call.tool_call_id == getattr(final, "tool_call_id", None):
            content: Any = FINAL_RESULT
        elif call.tool_name in output_tools:
            content = _OUTPUT_NOT_USED
        elif call.tool_call_id in executed:
            content = executed[call.tool_call_id]
        else:
            content = _TOOL_NOT_RUN
        parts.append(ToolReturnPart(call.tool_name, content, call.tool_call_id))
    return ModelRequest(parts=parts, run_id=ctx.run_id, conversation_id=ctx.conversation_id)
