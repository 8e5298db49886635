"""``MemoryGraph``: what ``memory.wrap(agent)`` returns for an agent already built.

A LangChain ``Runnable`` around the compiled graph (a ``create_agent`` agent or any LangGraph
graph with a ``messages`` state) with the same call surface: ``invoke``, ``ainvoke``,
``stream``, ``astream``, and from ``Runnable`` ``batch``, ``abatch``, ``batch_as_completed``,
``|`` composition and ``with_config``; anything else (``get_state``, ``get_graph`` ...) reaches
the graph. For every run it:

1. decides the scope (resolvers given to ``wrap``, called with the run's config; the
   ``context=`` argument's attributes; the config's ``configurable``; the session), or raises
   :class:`~memory_adapters.NoScope`; a run started from a tool of another memory agent is a
   sub-agent on a fork of the parent run's working memory, in a child conversation;
2. puts the budgeted window of the stored conversation before the input messages (with a
   checkpointer, only when the thread's state is still empty: a thread's state already is its
   history);
3. runs the graph with the run active (so tools reach the run's memory and wrapped agents they
   call are sub-agents), watching every step's messages (``invoke`` collects its result from
   the graph's stream, as LangGraph's own does), then stores the run's new messages once, as
   one batch, leaving out messages middleware made (a summary); a run that raises stores the
   steps that completed, marked ``meta["failed"] = True``.

With a checkpointer and no ``thread_id`` in the config, the run's conversation is the thread,
named by its key (``default:alice:c-42``). A ``Command`` input (resuming an interrupted run) is
run the same way, after the thread's history: what the resumed run adds is stored once.

What only :class:`~.middleware.MemoryMiddleware` can add, because it runs inside the graph:
the memory tools and the system-prompt fragments (tool guidance, preloaded facts, working
memory); storing each step as it completes; the window *in place of* a checkpointer's thread
history rather than in the state; and the ``before_model_call`` hook. A graph that already has
the middleware is run as it is: wrapping it adds nothing twice.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, convert_to_messages
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langgraph.pregel import Pregel
from langgraph.types import Command, GraphOutput

from memory_adapters import InvalidInput, Memory
from memory_adapters.extraction import run_extracts
from memory_adapters.run import (
    RunLifecycle,
    RunScope,
    SubConversation,
    active_run,
    own_run_id,
    run_options,
)
from memory_adapters.validation import check_bool
from memory_adapters.working import MergePolicy

from .mapping import FRAMEWORK, from_messages, synthesized, to_messages
from .scope import Resolver, awaited, call_resolvers, checked, framework_values, run_where


class _Turn:
    """One run of a wrapped graph: its lifecycle, its input and what it is known to hold."""

    __slots__ = ("input", "known", "lifecycle", "messages", "threaded")

    def __init__(self, lifecycle: RunLifecycle, threaded: bool) -> None:
        self.lifecycle = lifecycle
        self.threaded = threaded
        self.known: set[str] = set()
        """Ids of messages that were stored before the run (the window, the thread's state)."""
        self.input: list[BaseMessage] = []
        self.messages: dict[str, BaseMessage] = {}
        """The run's new messages by id, in the order they came."""

    def add(self, messages: Sequence[Any]) -> None:
        """Note messages the run produced, the latest version of each (ignoring those stored
        before it, and those middleware made: a summary is not a turn)."""
        for m in messages:
            if (
                isinstance(m, BaseMessage)
                and m.id is not None
                and m.id not in self.known
                and not synthesized(m)
            ):
                self.messages[m.id] = m

    def add_update(self, chunk: Any) -> None:
        """Note the messages of a stream ``updates`` chunk ({node: update})."""
        if not isinstance(chunk, Mapping):
            return
        for update in chunk.values():
            for item in update if isinstance(update, list) else [update]:
                if isinstance(item, Mapping) and "messages" in item:
                    value = item["messages"]
                    self.add(value if isinstance(value, list) else [value])


class MemoryGraph(Runnable[Any, Any]):
    """A compiled LangGraph graph with memory (see the module docstring).

    ``user_id``, ``conversation_id``, ``agent_id`` and ``namespace`` are identifiers (a str, an
    int or a UUID) or resolvers called with the run's ``RunnableConfig`` (sync, or async for
    async calls). ``history``,
    ``history_tokens``, ``max_messages``, ``name``, ``sub_conversation``, ``merge`` and
    ``extract`` are as for :class:`~.middleware.MemoryMiddleware`.
    """

    def __init__(
        self,
        graph: Pregel[Any, Any, Any, Any],
        memory: Memory,
        *,
        user_id: Resolver = None,
        conversation_id: Resolver = None,
        agent_id: Resolver = None,
        namespace: Resolver = None,
        history: bool = True,
        history_tokens: int | None = None,
        max_messages: int | None = None,
        name: str | None = None,
        sub_conversation: SubConversation = "child",
        merge: MergePolicy | None = "child",
        extract: bool = True,
    ) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(f"MemoryGraph needs a memory_adapters.Memory, not {memory!r}")
        if not isinstance(graph, Pregel) or "messages" not in graph.channels:
            raise InvalidInput("MemoryGraph wraps a compiled LangGraph graph with a messages state")
        self.window_options = run_options(
            history_tokens=history_tokens,
            max_messages=max_messages,
            sub_conversation=sub_conversation,
            merge=merge,
        )
        self.graph = graph
        self.memory = memory
        self.resolvers: dict[str, Resolver] = {
            "user_id": user_id,
            "conversation_id": conversation_id,
            "agent_id": agent_id,
            "namespace": namespace,
        }
        self.history = history
        self.agent_name = name
        self.sub_conversation = sub_conversation
        self.merge = merge
        self.extract = check_bool(extract, "extract")
        self.native = any(n.startswith("MemoryMiddleware.") for n in graph.nodes)
        """Whether the graph has the memory middleware already (then it is run as it is)."""

    # -- the run ---------------------------------------------------------------------------------

    def _name(self, config: RunnableConfig) -> str | None:
        name = self.agent_name or (config.get("metadata") or {}).get("lc_agent_name")
        return name if isinstance(name, str) else (self.graph.name or None)

    def _turn(self, where: RunScope, config: RunnableConfig, run_id: str) -> _Turn:
        threaded = bool(self.graph.checkpointer) and _thread(config) is not None
        lifecycle = RunLifecycle(
            self.memory,
            where,
            framework=FRAMEWORK,
            run_id=run_id,
            agent=self._name(config),
            parent=active_run(self.memory),
            merge=self.merge,
            window_options=self.window_options,
            extract=run_extracts(self.extract, config.get("configurable"), config.get("metadata")),
        )
        return _Turn(lifecycle, threaded)

    def _where(
        self, resolved: dict[str, Any], config: RunnableConfig, context: Any, run_id: str
    ) -> RunScope:
        return run_where(
            self.memory,
            checked(resolved),
            framework_values(config, context),
            run_id=run_id,
            name=self._name(config),
            sub_conversation=self.sub_conversation,
        )

    def _on_thread(self, config: RunnableConfig, where: RunScope) -> RunnableConfig:
        """The config the graph runs with: with a checkpointer and no ``thread_id``, the run's
        conversation is the thread, by its key (``default:alice:c-42``: unique per namespace,
        user and conversation, so two users' conversations of one id never share a thread)."""
        if not self.graph.checkpointer or _thread(config) is not None:
            return config
        configurable = {
            **(config.get("configurable") or {}),
            "thread_id": where.conversation.conversation_key,
        }
        return cast(RunnableConfig, {**config, "configurable": configurable})

    def _start(
        self, resolved: dict[str, Any], input: Any, config: RunnableConfig, context: Any
    ) -> tuple[_Turn, RunnableConfig]:
        run_id = own_run_id(self.memory, config.get("run_id"))
        where = self._where(resolved, config, context, run_id)
        config = self._on_thread(config, where)
        turn = self._turn(where, config, run_id)
        if not isinstance(input, Command):
            self._input(turn, input)
        return turn, config

    def _input(self, turn: _Turn, input: Any) -> list[BaseMessage]:
        if not isinstance(input, Mapping) or "messages" not in input:
            raise InvalidInput(
                "a memory agent's input is a dict with 'messages', or a Command resuming an "
                "interrupted run"
            )
        raw = input["messages"]
        messages = convert_to_messages(raw if isinstance(raw, list) else [raw])
        for m in messages:  # ids let the run tell its messages from the window's
            if m.id is None:
                m.id = str(uuid.uuid4())
        turn.input = messages
        return messages

    def _prepared(self, turn: _Turn, input: Any, window: list[BaseMessage], state: Any) -> Any:
        """The graph's input: the window (unless the thread has history), then the input; a
        ``Command`` (resuming an interrupted run) as it is, after the thread's history."""
        earlier = [m for m in (state or []) if isinstance(m, BaseMessage)]
        turn.known.update(m.id for m in earlier if m.id is not None)
        if isinstance(input, Command):
            return input
        shown: list[BaseMessage] = []
        if not earlier:
            for m in window:
                if m.id is None:
                    m.id = str(uuid.uuid4())
                turn.known.add(m.id)
            shown = window
        return {**input, "messages": [*shown, *turn.input]}

    def _outcome(self, turn: _Turn, result: Any) -> list[BaseMessage]:
        if isinstance(result, GraphOutput):
            result = result.value
        if isinstance(result, Mapping) and isinstance(result.get("messages"), list):
            turn.add(result["messages"])
        turn.add(turn.input)  # an input the graph did not echo is the run's all the same
        ordered = {m.id: m for m in turn.input if m.id is not None}
        ordered.update(turn.messages)
        return _in_call_order(list(ordered.values()))

    def _passthrough(self, input: Any) -> bool:
        """Whether the run goes to the graph as it is: the graph has the middleware."""
        return self.native

    # -- sync -------------------------------------------------------------------------------------

    def _begin(
        self, input: Any, config: RunnableConfig | None, context: Any
    ) -> tuple[_Turn, RunnableConfig, Any]:
        config = ensure_config(config)
        resolved = call_resolvers(self.resolvers, config, allow_async=False)
        turn, config = self._start(resolved, input, config, context)
        lifecycle = turn.lifecycle
        lifecycle.start()
        window: list[BaseMessage] = []
        if not isinstance(input, Command):  # a run resuming an interrupted one is not refused
            window = from_messages(lifecycle.open(working=False, load=self.history).messages())
        state = self._state(config) if turn.threaded else None
        return turn, config, self._prepared(turn, input, window, state)

    def _state(self, config: RunnableConfig) -> list[Any]:
        snapshot = self.graph.get_state(config)
        return list((snapshot.values or {}).get("messages") or [])

    def _failed(self, turn: _Turn, config: RunnableConfig, error: BaseException) -> None:
        if turn.threaded:
            with contextlib.suppress(Exception):  # the run's own error is what the caller sees
                turn.add(self._state(config))
        turn.lifecycle.fail(error, to_messages(self._outcome(turn, None)))

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """The graph's ``invoke``, with the stored window and the run stored."""
        if self._passthrough(input):
            return self.graph.invoke(input, config, **kwargs)
        turn, config, prepared = self._begin(input, config, kwargs.get("context"))
        lifecycle = turn.lifecycle
        invoked = _Invoked(kwargs)
        with lifecycle.activate():
            try:
                for part in self.graph.stream(prepared, config, **invoked.stream_kwargs):
                    invoked.add(turn, part)
            except BaseException as exc:
                self._failed(turn, config, exc)
                raise
        result = invoked.result()
        lifecycle.finish(to_messages(self._outcome(turn, result)))
        return result

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """The graph's ``stream`` (every mode, ``subgraphs``, ``version``), with the stored
        window and the run stored when the stream has been consumed."""
        if self._passthrough(input):
            yield from self.graph.stream(input, config, **kwargs)
            return
        turn, config, prepared = self._begin(input, config, kwargs.get("context"))
        lifecycle = turn.lifecycle
        modes, kwargs = _with_updates(self.graph, kwargs)
        with lifecycle.activate():
            try:
                for part in self.graph.stream(prepared, config, **kwargs):
                    shown = _observe(turn, part, modes, kwargs)
                    if shown is not _HIDDEN:
                        yield shown
            except BaseException as exc:
                self._failed(turn, config, exc)
                raise
        lifecycle.finish(to_messages(self._outcome(turn, None)))

    # -- async ------------------------------------------------------------------------------------

    async def _abegin(
        self, input: Any, config: RunnableConfig | None, context: Any
    ) -> tuple[_Turn, RunnableConfig, Any]:
        config = ensure_config(config)
        resolved = await awaited(call_resolvers(self.resolvers, config, allow_async=True))
        turn, config = self._start(resolved, input, config, context)
        lifecycle = turn.lifecycle
        await lifecycle.astart()
        window: list[BaseMessage] = []
        if not isinstance(input, Command):  # a run resuming an interrupted one is not refused
            opened = await lifecycle.aopen(working=False, load=self.history)
            window = from_messages(opened.messages())
        state = await self._astate(config) if turn.threaded else None
        return turn, config, self._prepared(turn, input, window, state)

    async def _astate(self, config: RunnableConfig) -> list[Any]:
        snapshot = await self.graph.aget_state(config)
        return list((snapshot.values or {}).get("messages") or [])

    async def _afailed(self, turn: _Turn, config: RunnableConfig, error: BaseException) -> None:
        if turn.threaded:
            with contextlib.suppress(Exception):  # the run's own error is what the caller sees
                turn.add(await self._astate(config))
        await turn.lifecycle.afail(error, to_messages(self._outcome(turn, None)))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Async :meth:`invoke`."""
        if self._passthrough(input):
            return await self.graph.ainvoke(input, config, **kwargs)
        turn, config, prepared = await self._abegin(input, config, kwargs.get("context"))
        lifecycle = turn.lifecycle
        invoked = _Invoked(kwargs)
        with lifecycle.activate():
            try:
                async for part in self.graph.astream(prepared, config, **invoked.stream_kwargs):
                    invoked.add(turn, part)
            except BaseException as exc:
                await self._afailed(turn, config, exc)
                raise
        result = invoked.result()
        await lifecycle.afinish(to_messages(self._outcome(turn, result)))
        return result

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Async :meth:`stream`."""
        if self._passthrough(input):
            async for part in self.graph.astream(input, config, **kwargs):
                yield part
            return
        turn, config, prepared = await self._abegin(input, config, kwargs.get("context"))
        lifecycle = turn.lifecycle
        modes, kwargs = _with_updates(self.graph, kwargs)
        with lifecycle.activate():
            try:
                async for part in self.graph.astream(prepared, config, **kwargs):
                    shown = _observe(turn, part, modes, kwargs)
                    if shown is not _HIDDEN:
                        yield shown
            except BaseException as exc:
                await self._afailed(turn, config, exc)
                raise
        await lifecycle.afinish(to_messages(self._outcome(turn, None)))

    # -- the rest of the graph ------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name == "graph":  # not set yet (for example while unpickling)
            raise AttributeError(name)
        return getattr(self.graph, name)

    def __repr__(self) -> str:
        return f"MemoryGraph({self.graph!r}, memory={self.memory!r})"


_HIDDEN = object()


def _in_call_order(messages: list[BaseMessage]) -> list[BaseMessage]:
    """``messages`` with the results of each step's parallel tool calls in the order of the
    calls (a graph's updates come in the order the tools finished), as the middleware stores
    them."""
    out = list(messages)
    i = 0
    while i < len(out):
        m = out[i]
        j = i + 1
        while j < len(out) and isinstance(out[j], ToolMessage):
            j += 1
        if isinstance(m, AIMessage) and m.tool_calls and j - i > 2:
            order = {c.get("id"): k for k, c in enumerate(m.tool_calls)}
            ranked = sorted(
                (order.get(r.tool_call_id, len(order)), n, r)
                for n, r in enumerate(out[i + 1 : j])
                if isinstance(r, ToolMessage)
            )
            out[i + 1 : j] = [r for _, _, r in ranked]
        i = j
    return out


_INTERRUPT = "__interrupt__"


def _thread(config: RunnableConfig) -> Any:
    """The config's ``thread_id``, or ``None``."""
    thread = (config.get("configurable") or {}).get("thread_id")
    return None if thread is None or thread == "" else thread


class _Invoked:
    """What ``invoke`` returns, collected from the graph's stream the way ``Pregel.invoke``
    collects it (LangGraph's own ``invoke`` is built on ``stream``), with the ``updates`` the
    memory needs: every message the run made, also those another middleware removed from the
    state before the run ended (messages a ``SummarizationMiddleware`` summary replaced)."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        asked = kwargs.get("stream_mode") or "values"
        self.mode: str | None = asked if isinstance(asked, str) else None
        """The one mode asked for (``None``: a list of them, each chunk named by its mode)."""
        self.modes: list[str] = [asked] if isinstance(asked, str) else list(asked)
        self.v2 = kwargs.get("version") == "v2"
        self.subgraphs = bool(kwargs.get("subgraphs"))
        modes = ["updates", "values"] if self.mode == "values" else [*self.modes, "updates"]
        self.stream_kwargs = {**kwargs, "stream_mode": list(dict.fromkeys(modes))}
        self.latest: Any = None
        self.interrupts: list[Any] = []
        self.chunks: list[Any] = []

    def add(self, turn: _Turn, part: Any) -> None:
        """Note one part of the stream."""
        if self.v2:
            kind, namespace, data = part.get("type"), part.get("ns") or (), part.get("data")
        elif self.subgraphs:
            namespace, kind, data = part
        else:
            namespace, (kind, data) = (), part
        if kind == "updates" and not namespace:
            turn.add_update(data)
        if self.mode == "values":
            if self.v2:
                if kind == "values":
                    self.latest = data
                    self.interrupts.extend(part.get("interrupts") or ())
            elif kind == "updates" and isinstance(data, dict) and _INTERRUPT in data:
                self.interrupts.extend(data[_INTERRUPT])
            elif kind == "values":
                self.latest = data
        elif kind in self.modes:
            if self.v2:
                self.chunks.append(part)
            elif self.mode is None:
                self.chunks.append((namespace, kind, data) if self.subgraphs else (kind, data))
            else:
                self.chunks.append((namespace, data) if self.subgraphs else data)

    def result(self) -> Any:
        """What the graph's ``invoke`` would have returned."""
        if self.mode != "values":
            return self.chunks
        if self.v2:
            return GraphOutput(value=self.latest, interrupts=tuple(self.interrupts))
        if self.interrupts:
            if isinstance(self.latest, dict):
                return {**self.latest, _INTERRUPT: self.interrupts}
            return {_INTERRUPT: self.interrupts}
        return self.latest


def _with_updates(
    graph: Pregel[Any, Any, Any, Any], kwargs: dict[str, Any]
) -> tuple[tuple[list[str], bool], dict[str, Any]]:
    """The caller's stream modes (and whether it asked for one mode, not a list), and the
    stream arguments with ``"updates"`` added, which is how the run's messages are seen."""
    asked = kwargs.get("stream_mode")
    single = asked is None or isinstance(asked, str)
    if asked is None:
        asked = graph.stream_mode
    modes = [asked] if isinstance(asked, str) else list(cast(Sequence[str], asked))
    internal = modes if "updates" in modes else [*modes, "updates"]
    return (modes, single), {**kwargs, "stream_mode": internal}


def _observe(turn: _Turn, part: Any, modes: tuple[list[str], bool], kwargs: dict[str, Any]) -> Any:
    """Note the messages of a stream part, and return what the caller's stream would have
    yielded for it (``_HIDDEN`` for the ``updates`` parts only the memory asked for)."""
    wanted, single = modes
    if kwargs.get("version") == "v2":
        if part.get("type") == "updates" and not part.get("ns"):
            turn.add_update(part.get("data"))
        return part if part.get("type") in wanted else _HIDDEN
    if kwargs.get("subgraphs"):
        namespace, mode, chunk = part
    else:
        namespace, (mode, chunk) = (), part
    if mode == "updates" and not namespace:
        turn.add_update(chunk)
    if mode not in wanted:
        return _HIDDEN
    if single:
        return (namespace, chunk) if kwargs.get("subgraphs") else chunk
    return (namespace, mode, chunk) if kwargs.get("subgraphs") else (mode, chunk)
