"""The adapters' own cost per agent turn, against a hand-written floor (issue 13).

What is measured
    Whole agent turns, for each adapter (pydantic-ai, LangChain) x store x conversation size
    (messages already stored: 10, 1,000 and 10,000), the timed turns going round-robin over
    the sizes and the variants of a row so that drifts in the machine's speed fall on all of
    them alike, with the garbage collector disabled and every input built beforehand:

    ``bare``
        the agent alone, with an empty history;
    ``bare+window``
        the same agent given, by hand, the window ``ours`` shows its model (captured from the
        model after warm-up: the framework's own objects, built before timing);
    ``bare+tools``
        the same agent given, by hand, that window AND the memory tools and the instructions
        ``ours`` gives its model, with no memory layer: for pydantic-ai the agent built with
        ``toolsets=[memory_toolset(memory, Scope(conversation_id=...))]`` and, as its
        instructions, the text ``ours``' model received (``AgentInfo.instructions``); for
        LangChain ``create_agent(model, tools=[*memory_tools(memory, scope), search_docs],
        system_prompt=<the system text ours sent>)`` with the window in the messages. What its
        model is shown (window, instructions, tool names in order) is captured and compared
        with ``ours``'; a difference is printed as a WARNING (not the same work). A framework
        charges for tools and instructions on every request (pydantic-ai processes the history
        for each tool set), a cost any memory-tool solution pays: this variant isolates it;
    ``bare+hooks``
        ``bare+tools`` plus a no-op extension with exactly the hooks ours implements: for
        LangChain an ``AgentMiddleware`` overriding each of LangChain's middleware hooks
        (:data:`LANGCHAIN_HOOKS`) that ``MemoryMiddleware`` overrides, and no other, with
        ``MemoryMiddleware``'s state schema, each returning ``None`` or ``handler(request)``
        (:func:`noop_middleware`); for pydantic-ai an ``AbstractCapability`` overriding each
        method ``MemoryCapability`` defines that ``AbstractCapability`` has, each doing what the
        base does (``for_run`` returns the capability, ``get_toolset`` / ``get_instructions``
        ``None``, ``wrap_run`` awaits its handler; :func:`noop_capability`), given to each run
        as ``memory.wrap`` gives ours. Both are built at run time by introspection, so they
        follow ours. A framework charges for the extension points themselves (a graph node per
        agent hook, a wrapper around each model and tool call, a capability's hooks on every
        node), a cost a hand-written floor outside the agent never pays and any memory built
        into the agent does: this variant isolates it. What its model is shown is compared
        with ``ours``' as for ``bare+tools``; the no-op counts its hooks' calls: one never
        called is a WARNING, and the calls of one turn are printed;
    ``floor``
        the same agent under a hand-written memory layer doing the minimum for the store (see
        :class:`FloorLayer`): read the last N stored messages (N = the window's length) with
        one query, parse them with one call of the framework's own deserializer, run the
        agent with them, count the tokens of the new messages with
        ``memory_adapters.tokens``' default counter and write them with one multi-row insert;
    ``ours``
        the agent with memory as users add it (``memory.wrap(agent)`` for pydantic-ai, driven
        with ``await agent.run(...)``; ``create_agent(..., middleware=[MemoryMiddleware(memory)])``
        for LangChain, driven with ``invoke``), with the ``Memory``'s defaults: the memory
        tools, their guidance and the working memory in the instructions, and a token budget
        chosen so that the window holds :data:`WINDOW_MESSAGES` messages;
    ``ours-cold``
        ``ours`` (an agent of its own on the same conversation) with memory-adapters'
        decoded-message cache off during its turns (``DECODED_CACHE_CHARS = 0``, see
        :func:`cold`): every stored row parsed on every read, as when the rows were not read
        before in this process (another process wrote them). ``cache = ours-cold - ours`` is
        what the cache saves a turn; it is printed, not judged;
    ``ours-h``
        the same with history only (``tools=False, working=False``): what the history path
        costs by itself, to compare with the floor, which does nothing else.

    Derived, each like for like:

    * ``tools = bare+tools - bare+window``: the framework's charge for the memory tools and
      their instructions (printed, not counted as memory's own);
    * ``hooks = bare+hooks - bare+tools``: the framework's charge for the extension points
      ours uses (printed, not counted as memory-adapters' own);
    * ``own = ours - bare+tools``: memory's cost with all its features, the framework's
      extension-point charge included;
    * ``own net = ours - bare+hooks``: memory-adapters' own code only;
    * ``own-h = ours-h - bare+window``: the history path's own cost;
    * ``floor own = floor - bare+window``: the floor's, which does history only;
    * ``ours/floor = own / floor own``, ``net/floor = own net / floor own`` and
      ``h/floor = own-h / floor own`` (the history path, the framework's hook charge
      included), all three judged against the goal (1.3 for pydantic-ai, 1.5 for LangChain),
      and per adapter x store the flatness ``own(10,000) / own(1,000)``.

    The conversation has the issue's shape: turns of a question, an assistant calling a tool,
    the tool's result and an answer, every message 400 characters; each timed turn is the same
    (the scripted model calls the tool once, then answers), so a turn has two model steps and
    stores four messages.

Round trips
    For PostgreSQL rows, a separate untimed pass of a few turns runs ``ours``, ``ours-h`` and
    the floor through a ``Memory`` (a connection) opened on a tiny TCP proxy
    (:class:`WireCounter`) in front of the server. A round trip is a Sync (``S``) or a simple
    Query (``Q``) message the client sends: each is a point where it waits for the server's
    ReadyForQuery, so a pipeline (several statements, one Sync) counts one, although the
    server may answer its first statement while the client is still sending the next.
    ``bursts`` (a client-to-server burst following a server-to-client burst) is kept as a
    transport-level cross-check; it overcounts such a pipeline. Statements are the simple
    queries and the extended-protocol executes the client sends. The proxy never sits in front
    of a timed turn.

Only public API is used (``Memory``, ``memory.wrap``, ``MemoryMiddleware``, the adapters'
``to_messages``, ``memory_toolset`` / ``memory_tools`` and ``memory.conversation.window(...)``;
``bare+hooks`` reads which hooks ``MemoryMiddleware`` and ``MemoryCapability`` override),
so that the same benchmark measures the code as it is and as it will be.

``python benchmarks/agent_overhead.py --help``; ``--quick`` is the CI smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import platform
import selectors
import socket
import sqlite3
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from memory_adapters import Memory
from memory_adapters import messages as ma_messages
from memory_adapters import tokens as ma_tokens

ADAPTERS = ("pydantic-ai", "langchain", "pydantic-ai-sync")
DEFAULT_ADAPTERS = ("pydantic-ai", "langchain")
STORES = ("memory", "sqlite", "postgres", "mongo-fake", "mongo")
DEFAULT_SIZES = (10, 1000, 10000)
DEFAULT_TURNS = 40
QUICK_TURNS = 3
MIN_WARMUP = 3
QUICK_WARMUP = 1
MAX_WARMUP = 200
RT_TURNS = 4
"""Turns of the round-trip pass (after :data:`RT_WARMUP` turns through the proxy that are not
counted)."""
RT_WARMUP = 6
"""Uncounted turns first: connections opened, and psycopg's statements prepared (it prepares
one on its 5th execution, a one-off round trip that is no turn's own)."""
QUICK_RT_TURNS = 2
"""--quick: the round-trip pass runs at the largest size only, this many turns."""

WINDOW_MESSAGES = 112
"""The window the issue measured with: the budget is chosen so that it holds this many."""
MESSAGE_CHARS = 400
PRELOAD_CHUNK = 256
"""Preloading appends this many messages at once (whole turns)."""

INTERVAL_DRAWS = 1000
"""Bootstrap resamples of the rounds behind each ratio's interval (:func:`ratio_intervals`)."""
INTERVAL = 0.9
"""The interval printed beside each ratio: its central 90% over the resamples."""

GOALS = {"pydantic-ai": 1.3, "pydantic-ai-sync": 1.3, "langchain": 1.5}
"""Own cost's largest accepted multiple of the floor's own cost."""
FLAT_LIMIT = 1.1
"""The largest accepted own(10,000) / own(1,000)."""
MAX_ROUND_TRIPS = {"pydantic-ai": 2, "pydantic-ai-sync": 2, "langchain": 3}
"""Database round trips per turn accepted on PostgreSQL."""

VARIANTS = (
    "bare",
    "bare+window",
    "bare+tools",
    "bare+hooks",
    "floor",
    "ours",
    "ours-h",
    "ours-cold",
)
OURS_OPTIONS: dict[str, dict[str, Any]] = {
    "ours": {},
    "ours-h": {"tools": False, "working": False},
    "ours-cold": {},
}
COLD = ("ours-cold",)
"""The variants run with memory-adapters' decoded-message cache off (:func:`cold`)."""


# -- the conversation -----------------------------------------------------------------------------


def _chars(seed: str) -> str:
    """A text of exactly :data:`MESSAGE_CHARS` characters (words, so that it tokenizes like
    prose), the same every time for the same seed."""
    words = (
        f"{seed} the billing service migration moves the invoices table in throttled "
        "batches while dual writes keep both tables in step and checksums are verified per "
        "day before reads switch over; only the final rename needs a short maintenance window"
    ).split()
    out: list[str] = []
    n = 0
    while n < MESSAGE_CHARS:
        word = words[len(out) % len(words)]
        out.append(word)
        n += len(word) + 1
    return " ".join(out)[:MESSAGE_CHARS]


QUESTION = _chars("question:")
QUERY = _chars("query:")
RESULT = _chars("result:")
ANSWER = _chars("answer:")
PROMPT = _chars("prompt:")
"""Every timed turn's question (every turn is the same, so every window is too)."""
TOOL = "search_docs"


# -- frameworks ------------------------------------------------------------------------------------


LANGCHAIN_HOOKS = (
    "before_agent",
    "abefore_agent",
    "before_model",
    "abefore_model",
    "after_model",
    "aafter_model",
    "after_agent",
    "aafter_agent",
    "wrap_model_call",
    "awrap_model_call",
    "wrap_tool_call",
    "awrap_tool_call",
)
"""LangChain's middleware hooks (``create_agent`` adds a node or a wrapper for each one a
middleware overrides)."""


def _langchain_noop(name: str) -> Callable[..., Any]:
    """A LangChain hook doing nothing (``None``; a wrapper calls its handler), counting its calls
    in ``self.calls``."""
    if name.startswith("wrap_"):

        def wrap(self: Any, request: Any, handler: Any) -> Any:
            self.calls[name] += 1
            return handler(request)

        return wrap
    if name.startswith("awrap_"):

        async def awrap(self: Any, request: Any, handler: Any) -> Any:
            self.calls[name] += 1
            return await handler(request)

        return awrap
    if name.startswith(("abefore_", "aafter_")):

        async def anode(self: Any, state: Any, runtime: Any) -> None:
            self.calls[name] += 1

        return anode

    def node(self: Any, state: Any, runtime: Any) -> None:
        self.calls[name] += 1

    return node


def noop_middleware() -> Any:
    """``bare+hooks``' LangChain extension: an ``AgentMiddleware`` overriding exactly the hooks
    ``MemoryMiddleware`` overrides (found at run time, so it follows ours), each doing nothing,
    with ours' state schema (its private keys are state the graph carries). Its ``calls``
    counts the calls of each hook."""
    from langchain.agents.middleware import AgentMiddleware

    from memory_adapters.langchain import MemoryMiddleware

    namespace: dict[str, Any] = {
        "__module__": __name__,
        "state_schema": MemoryMiddleware.state_schema,
    }
    for name in LANGCHAIN_HOOKS:
        ours = getattr(MemoryMiddleware, name)
        if ours is not getattr(AgentMiddleware, name):
            hook = _langchain_noop(name)
            if hasattr(ours, "__can_jump_to__"):  # the jumps ours declares shape the graph
                hook.__can_jump_to__ = ours.__can_jump_to__  # type: ignore[attr-defined]
            namespace[name] = hook
    cls = type("NoopMiddleware", (AgentMiddleware,), namespace)
    middleware = cls()
    middleware.calls = dict.fromkeys([n for n in LANGCHAIN_HOOKS if n in namespace], 0)
    return middleware


def _capability_noop(base: type, name: str, calls: dict[str, int]) -> Any:
    """``base``'s own ``name`` (what a capability that does not override it does), as a new
    function counting its calls in ``calls``: ``for_run`` returns the capability itself,
    ``get_toolset`` / ``get_instructions`` return ``None`` (``bare+tools`` already gives the
    tools and the instructions), ``wrap_run`` awaits its handler, the ``before_*`` / ``after_*``
    / ``prepare_*`` hooks return what they were given, ``get_default_conversation_id``
    returns ``None``."""
    import functools
    import inspect

    raw = inspect.getattr_static(base, name)
    if isinstance(raw, classmethod):
        func = raw.__func__

        @functools.wraps(func)
        def of_class(cls: Any, *args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return func(cls, *args, **kwargs)

        return classmethod(of_class)
    if isinstance(raw, staticmethod):
        plain = raw.__func__

        @functools.wraps(plain)
        def static(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return plain(*args, **kwargs)

        return staticmethod(static)
    if inspect.iscoroutinefunction(raw):

        @functools.wraps(raw)
        async def coroutine(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return await raw(self, *args, **kwargs)

        return coroutine

    @functools.wraps(raw)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return raw(self, *args, **kwargs)

    return method


def noop_capability() -> Any:
    """``bare+hooks``' pydantic-ai extension: an ``AbstractCapability`` overriding exactly the
    methods ``MemoryCapability`` defines that ``AbstractCapability`` has (found at run time, so
    it follows ours), each doing what the base does (see :func:`_capability_noop`). Its
    ``calls`` counts the calls of each."""
    import inspect

    from pydantic_ai.capabilities import AbstractCapability

    from memory_adapters.pydantic_ai import MemoryCapability

    names = [
        name
        for name, value in vars(MemoryCapability).items()
        if not (name.startswith("__") and name.endswith("__"))
        and hasattr(AbstractCapability, name)
        and (isinstance(value, (classmethod, staticmethod)) or inspect.isfunction(value))
    ]
    calls = dict.fromkeys(names, 0)
    namespace: dict[str, Any] = {"__module__": __name__}
    namespace.update((name, _capability_noop(AbstractCapability, name, calls)) for name in names)
    cls = type("NoopCapability", (AbstractCapability,), namespace)
    capability = cls()
    capability.calls = calls
    return capability


@dataclass(slots=True)
class Shown:
    """What a model was shown in the first call of a turn: the history (without the turn's own
    request), the instructions (pydantic-ai: one text; LangChain: the system messages' texts)
    and the names of the tools it was offered, in order."""

    history: list[Any]
    instructions: list[str]
    tools: list[str]


class Framework:
    """What the benchmark needs of a framework: its turn as its own messages, its agents, its
    serialized form, and how one turn of each variant runs."""

    name = ""

    def turn(self, n: int) -> list[Any]:
        """Turn ``n`` (a question, a tool call, its result, the answer) as framework messages."""
        raise NotImplementedError

    def neutral(self, messages: list[Any]) -> list[Any]:
        """The adapter's public mapping to memory-adapters' messages (for preloading)."""
        raise NotImplementedError

    def dump(self, messages: list[Any]) -> list[str]:
        """One JSON text per message, in the framework's own serialized form."""
        raise NotImplementedError

    def texts(self, messages: list[Any]) -> list[str]:
        """The text of each message a token counter should see."""
        raise NotImplementedError


def _tool_text(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, separators=(",", ":"))


class PydanticAI(Framework):
    """An ``Agent`` over a ``FunctionModel`` that calls ``search_docs`` once, then answers;
    turns driven by ``await agent.run(...)`` on one event loop."""

    name = "pydantic-ai"

    def __init__(self) -> None:
        from pydantic import TypeAdapter
        from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

        self.loop = asyncio.new_event_loop()
        self.messages_adapter = ModelMessagesTypeAdapter
        self.message_adapter: Any = TypeAdapter(ModelMessage)
        self.seen: list[tuple[list[Any], Any]] | None = None
        """While a list, the model appends the messages and ``AgentInfo`` of every call to it."""

    def turn(self, n: int) -> list[Any]:
        from pydantic_ai.messages import (
            ModelRequest,
            ModelResponse,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
            UserPromptPart,
        )

        call = f"call-{n:08d}"
        return [
            ModelRequest(parts=[UserPromptPart(QUESTION)]),
            ModelResponse(parts=[ToolCallPart(TOOL, {"query": QUERY}, call)]),
            ModelRequest(parts=[ToolReturnPart(TOOL, RESULT, call)]),
            ModelResponse(parts=[TextPart(ANSWER)]),
        ]

    def neutral(self, messages: list[Any]) -> list[Any]:
        from memory_adapters.pydantic_ai import to_messages

        return to_messages(messages)

    def dump(self, messages: list[Any]) -> list[str]:
        return [self.message_adapter.dump_json(m).decode() for m in messages]

    def load(self, rows: list[str]) -> list[Any]:
        return cast(list[Any], self.messages_adapter.validate_json("[" + ",".join(rows) + "]"))

    def texts(self, messages: list[Any]) -> list[str]:
        out: list[str] = []
        for m in messages:
            parts: list[str] = []
            for p in m.parts:
                if p.part_kind == "tool-call":
                    parts += [p.tool_name, _tool_text(p.args)]
                elif isinstance(getattr(p, "content", None), str):
                    parts.append(p.content)
                elif hasattr(p, "content"):
                    parts.append(_tool_text(p.content))
            out.append("\n".join(parts))
        return out

    def agent(self, instructions: str = "Answer briefly.", toolsets: Sequence[Any] = ()) -> Any:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        calls = iter(range(1 << 62))

        def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
            if self.seen is not None:
                self.seen.append((list(messages), info))
            if any(p.part_kind == "tool-return" for p in messages[-1].parts):
                return ModelResponse(parts=[TextPart(ANSWER)])
            call = f"t-{next(calls)}"
            return ModelResponse(parts=[ToolCallPart(TOOL, {"query": QUERY}, call)])

        agent = Agent(FunctionModel(model), instructions=instructions, toolsets=list(toolsets))

        @agent.tool_plain
        def search_docs(query: str) -> str:
            """Search the runbooks."""
            return RESULT

        return agent

    def ours(self, memory: Memory, options: dict[str, Any]) -> Any:
        return memory.wrap(self.agent(), **options)

    def variants(self, case: Case) -> dict[str, Callable[[int], object]]:
        """One turn of each variant, as a callable of the turn's number."""
        bare = self.agent()
        ours = {name: self.ours(case.memory, options) for name, options in OURS_OPTIONS.items()}
        floor = case.floor
        loop = self.loop
        conversation = case.conversation

        async def floor_turn() -> None:
            rows = await floor.aload(case.window_messages)
            result = await bare.run(PROMPT, message_history=self.load(rows))
            new = result.new_messages()
            await floor.asave(self.dump(new), ma_tokens.count(self.texts(new)))

        out: dict[str, Callable[[int], object]] = {
            "bare": lambda i: loop.run_until_complete(bare.run(PROMPT)),
            "bare+window": lambda i: loop.run_until_complete(
                bare.run(PROMPT, message_history=case.window)
            ),
            "floor": lambda i: loop.run_until_complete(floor_turn()),
        }
        for name, agent in ours.items():
            out[name] = _run_async(loop, agent, conversation)
        return out

    def tools_agent(self, case: Case) -> Any:
        """``bare+tools``' agent: the bare agent given by hand the memory tools (the public
        ``memory_toolset``, bound to the case's scope) and the instructions ``ours`` sent."""
        from memory_adapters import Scope
        from memory_adapters.pydantic_ai import memory_toolset

        assert case.shown is not None
        toolset = memory_toolset(case.memory, Scope(conversation_id=case.conversation))
        return self.agent("\n\n".join(case.shown.instructions), [toolset])

    def with_tools(self, case: Case) -> Callable[[int], object]:
        """One turn of ``bare+tools``: its agent run with the window given by hand."""
        agent = self.tools_agent(case)
        loop = self.loop
        return lambda i: loop.run_until_complete(agent.run(PROMPT, message_history=case.window))

    def with_hooks(self, case: Case) -> Callable[[int], object]:
        """One turn of ``bare+hooks``: ``bare+tools``' agent (a new one) run with the no-op
        capability (:func:`noop_capability`) given to the run, as ``memory.wrap`` gives ours."""
        agent = self.tools_agent(case)
        case.noop = noop = noop_capability()
        loop = self.loop
        return lambda i: loop.run_until_complete(
            agent.run(PROMPT, message_history=case.window, capabilities=[noop])
        )

    def capture(self, turn: Callable[[], object]) -> Shown:
        """Run ``turn`` once and return what its model was shown in its first call."""
        self.seen = []
        try:
            turn()
            messages, info = self.seen[0]
        finally:
            self.seen = None
        return Shown(
            list(messages[:-1]),  # the history, without the turn's own request
            [info.instructions or ""],
            [t.name for t in info.function_tools],
        )

    def after_round(self) -> None:
        """Nothing to drop between rounds."""

    def close(self) -> None:
        self.loop.close()


def _run_async(loop: Any, agent: Any, conversation: str) -> Callable[[int], object]:
    """``ours``' turn: ``await agent.run(PROMPT, conversation_id=...)`` on the loop."""
    return lambda i: loop.run_until_complete(agent.run(PROMPT, conversation_id=conversation))


class PydanticAISync(PydanticAI):
    """The same agents driven by ``agent.run_sync(...)``, the floor on sync connections."""

    name = "pydantic-ai-sync"

    def variants(self, case: Case) -> dict[str, Callable[[int], object]]:
        bare = self.agent()
        ours = {name: self.ours(case.memory, options) for name, options in OURS_OPTIONS.items()}
        floor = case.floor
        conversation = case.conversation

        def floor_turn(i: int) -> None:
            rows = floor.load(case.window_messages)
            result = bare.run_sync(PROMPT, message_history=self.load(rows))
            new = result.new_messages()
            floor.save(self.dump(new), ma_tokens.count(self.texts(new)))

        out: dict[str, Callable[[int], object]] = {
            "bare": lambda i: bare.run_sync(PROMPT),
            "bare+window": lambda i: bare.run_sync(PROMPT, message_history=case.window),
            "floor": floor_turn,
        }
        for name, agent in ours.items():
            out[name] = _run_sync(agent, conversation)
        return out

    def with_tools(self, case: Case) -> Callable[[int], object]:
        agent = self.tools_agent(case)
        return lambda i: agent.run_sync(PROMPT, message_history=case.window)

    def with_hooks(self, case: Case) -> Callable[[int], object]:
        agent = self.tools_agent(case)
        case.noop = noop = noop_capability()
        return lambda i: agent.run_sync(PROMPT, message_history=case.window, capabilities=[noop])


def _run_sync(agent: Any, conversation: str) -> Callable[[int], object]:
    """``ours``' turn: ``agent.run_sync(PROMPT, conversation_id=...)``."""
    return lambda i: agent.run_sync(PROMPT, conversation_id=conversation)


class LangChain(Framework):
    """A ``create_agent`` agent over a ``ScriptedChatModel`` that calls ``search_docs`` once,
    then answers; turns driven by ``invoke``."""

    name = "langchain"

    def __init__(self) -> None:
        from langchain_core.messages import ToolMessage, message_to_dict, messages_from_dict
        from langchain_core.tools import tool

        from memory_adapters.testing.langchain import ScriptedChatModel, call_tool

        def script(messages: list[Any]) -> Any:
            if isinstance(messages[-1], ToolMessage):
                return ANSWER
            return call_tool(TOOL, query=QUERY)

        self.model = ScriptedChatModel([script])

        @tool
        def search_docs(query: str) -> str:
            """Search the runbooks."""
            return RESULT

        self.tool = search_docs
        self.to_dict = message_to_dict
        self.from_dict = messages_from_dict

    def turn(self, n: int) -> list[Any]:
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

        call = f"call-{n:08d}"
        return [
            HumanMessage(QUESTION),
            AIMessage("", tool_calls=[{"id": call, "name": TOOL, "args": {"query": QUERY}}]),
            ToolMessage(RESULT, tool_call_id=call, name=TOOL),
            AIMessage(ANSWER),
        ]

    def neutral(self, messages: list[Any]) -> list[Any]:
        from memory_adapters.langchain import to_messages

        return to_messages(messages)

    def dump(self, messages: list[Any]) -> list[str]:
        return [json.dumps(self.to_dict(m)) for m in messages]

    def load(self, rows: list[str]) -> list[Any]:
        return cast(list[Any], self.from_dict(json.loads("[" + ",".join(rows) + "]")))

    def texts(self, messages: list[Any]) -> list[str]:
        out: list[str] = []
        for m in messages:
            parts = [m.text] if m.text else []
            for c in getattr(m, "tool_calls", None) or ():
                parts += [c["name"], _tool_text(c["args"])]
            out.append("\n".join(parts))
        return out

    def agent(self, middleware: Sequence[Any] = ()) -> Any:
        from langchain.agents import create_agent

        return create_agent(
            self.model, tools=[self.tool], system_prompt="Answer briefly.", middleware=middleware
        )

    def variants(self, case: Case) -> dict[str, Callable[[int], object]]:
        from langchain_core.messages import HumanMessage

        from memory_adapters.langchain import MemoryMiddleware

        bare = self.agent()
        ours = {
            name: self.agent([MemoryMiddleware(case.memory, **options)])
            for name, options in OURS_OPTIONS.items()
        }
        floor = case.floor
        config: Any = {"configurable": {"thread_id": case.conversation}}

        def fresh() -> Any:
            return HumanMessage(PROMPT, id=str(uuid.uuid4()))

        def floor_turn(i: int) -> None:
            history = self.load(floor.load(case.window_messages))
            given = [*history, case.inputs["floor"][i]]
            out = bare.invoke({"messages": given})
            new = out["messages"][len(history) :]
            floor.save(self.dump(new), ma_tokens.count(self.texts(new)))

        case.input_factories = {
            "bare": lambda: {"messages": [fresh()]},
            "bare+window": lambda: {"messages": [*(m.model_copy() for m in case.window), fresh()]},
            "floor": fresh,
            **{name: (lambda: {"messages": [fresh()]}) for name in ours},
        }
        out: dict[str, Callable[[int], object]] = {
            "bare": lambda i: bare.invoke(case.inputs["bare"][i]),
            "bare+window": lambda i: bare.invoke(case.inputs["bare+window"][i]),
            "floor": floor_turn,
        }
        for name, agent in ours.items():
            out[name] = _invoke(agent, case, name, config)
        return out

    def with_tools(self, case: Case) -> Callable[[int], object]:
        """One turn of ``bare+tools``: ``create_agent`` given by hand the memory tools (the
        public ``memory_tools``, bound to the case's scope) before the agent's own (the order
        the middleware offers them in), the system text ``ours`` sent, and the window in the
        messages (as ``bare+window``)."""
        agent = self.tools_agent(case)
        case.input_factories["bare+tools"] = case.input_factories["bare+window"]
        return lambda i: agent.invoke(case.inputs["bare+tools"][i])

    def with_hooks(self, case: Case) -> Callable[[int], object]:
        """One turn of ``bare+hooks``: ``bare+tools``' agent (a new one) with the no-op
        middleware (:func:`noop_middleware`)."""
        case.noop = noop = noop_middleware()
        agent = self.tools_agent(case, [noop])
        case.input_factories["bare+hooks"] = case.input_factories["bare+window"]
        return lambda i: agent.invoke(case.inputs["bare+hooks"][i])

    def tools_agent(self, case: Case, middleware: Sequence[Any] = ()) -> Any:
        """``bare+tools``' agent: the memory tools (bound to the case's scope) before the
        agent's own, the system text ``ours`` sent; with ``middleware`` if given."""
        from langchain.agents import create_agent

        from memory_adapters import Scope
        from memory_adapters.langchain import memory_tools

        assert case.shown is not None
        tools = memory_tools(case.memory, Scope(conversation_id=case.conversation))
        return create_agent(
            self.model,
            tools=[*tools, self.tool],
            system_prompt="\n\n".join(case.shown.instructions),
            middleware=middleware,
        )

    def capture(self, turn: Callable[[], object]) -> Shown:
        """Run ``turn`` once and return what its model was shown in its first call (the
        history without the system messages and the turn's own question)."""
        from langchain_core.messages import SystemMessage

        self.model.calls.clear()
        self.model.tools.clear()
        turn()
        first = self.model.calls[0]
        tools = self.model.tools[0]
        self.after_round()
        start = 0
        while start < len(first) and isinstance(first[start], SystemMessage):
            start += 1
        return Shown(list(first[start:-1]), [m.text for m in first[:start]], list(tools))

    def after_round(self) -> None:
        """Untimed: drop what the scripted model recorded (it keeps every call's messages)."""
        self.model.calls.clear()
        self.model.tools.clear()

    def close(self) -> None:
        pass


def _invoke(agent: Any, case: Case, name: str, config: Any) -> Callable[[int], object]:
    return lambda i: agent.invoke(case.inputs[name][i], config)


# -- floor layers ----------------------------------------------------------------------------------


class FloorLayer:
    """A hand-written memory layer doing the minimum: rows of (seq, tokens, the framework's
    JSON); ``load(n)`` reads the last ``n`` rows with one query, ``save`` writes a turn's rows
    with one multi-row insert. Async callers use ``aload`` / ``asave`` (the same, except on
    PostgreSQL, where they use an async connection)."""

    def __init__(self) -> None:
        self.seq = 0

    def load(self, n: int) -> list[str]:
        raise NotImplementedError

    def save(self, rows: list[str], tokens: list[int]) -> None:
        raise NotImplementedError

    async def aload(self, n: int) -> list[str]:
        return self.load(n)

    async def asave(self, rows: list[str], tokens: list[int]) -> None:
        self.save(rows, tokens)

    def _numbered(self, rows: list[str], tokens: list[int]) -> list[tuple[int, int, str]]:
        out = []
        for row, n in zip(rows, tokens, strict=True):
            self.seq += 1
            out.append((self.seq, n, row))
        return out

    def close(self) -> None:
        pass


class ListFloor(FloorLayer):
    """In memory: a Python list of the framework's JSON (a layer must not hand out the objects
    it keeps, so it still serializes and parses, as the stores do)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int, int, str]] = []

    def load(self, n: int) -> list[str]:
        return [r[2] for r in self.rows[-n:]]

    def save(self, rows: list[str], tokens: list[int]) -> None:
        self.rows.extend(self._numbered(rows, tokens))


class SqliteFloor(FloorLayer):
    """SQLite with ``sqlite3``: one indexed SELECT, one multi-row INSERT (autocommit), in WAL
    mode with ``synchronous = NORMAL`` as the SQLite store runs."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute(
            "CREATE TABLE messages (seq INTEGER PRIMARY KEY, tokens INTEGER, data TEXT)"
        )

    def load(self, n: int) -> list[str]:
        rows = self.db.execute(
            "SELECT data FROM messages ORDER BY seq DESC LIMIT ?", (n,)
        ).fetchall()
        return [r[0] for r in reversed(rows)]

    def save(self, rows: list[str], tokens: list[int]) -> None:
        items = self._numbered(rows, tokens)
        values = ", ".join(["(?, ?, ?)"] * len(items))
        self.db.execute(
            f"INSERT INTO messages VALUES {values}", [v for item in items for v in item]
        )

    def close(self) -> None:
        self.db.close()


class PostgresFloor(FloorLayer):
    """PostgreSQL with psycopg, autocommit: one indexed SELECT of the last N rows of the
    conversation, one multi-row INSERT. Sync calls use a sync connection, async ones an
    ``AsyncConnection`` (opened on first use, on the benchmark's event loop)."""

    def __init__(self, url: str, table: str, conversation: str, *, create: bool) -> None:
        import psycopg

        super().__init__()
        self.url = url
        self.table = table
        self.conversation = conversation
        self.conn = psycopg.connect(url, autocommit=True)
        self.aconn: Any = None
        if create:
            self.conn.execute(
                f"CREATE TABLE {table} (conversation text, seq bigint, tokens integer, "
                "data text, PRIMARY KEY (conversation, seq))"
            )
        else:
            row = self.conn.execute(f"SELECT max(seq) FROM {table}").fetchone()
            self.seq = int(row[0] or 0) if row else 0
        self.select = f"SELECT data FROM {table} WHERE conversation = %s ORDER BY seq DESC LIMIT %s"

    def _insert(self, rows: list[str], tokens: list[int]) -> tuple[str, list[Any]]:
        items = self._numbered(rows, tokens)
        values = ", ".join(["(%s, %s, %s, %s)"] * len(items))
        params = [v for seq, n, data in items for v in (self.conversation, seq, n, data)]
        return f"INSERT INTO {self.table} VALUES {values}", params

    def load(self, n: int) -> list[str]:
        rows = self.conn.execute(self.select, (self.conversation, n)).fetchall()
        return [r[0] for r in reversed(rows)]

    def save(self, rows: list[str], tokens: list[int]) -> None:
        self.conn.execute(*self._insert(rows, tokens))

    async def aload(self, n: int) -> list[str]:
        if self.aconn is None:
            import psycopg

            self.aconn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        cursor = await self.aconn.execute(self.select, (self.conversation, n))
        rows = await cursor.fetchall()
        return [r[0] for r in reversed(rows)]

    async def asave(self, rows: list[str], tokens: list[int]) -> None:
        await self.aconn.execute(*self._insert(rows, tokens))

    def analyze(self) -> None:
        self.conn.execute(f"ANALYZE {self.table}")

    def close(self, loop: Any = None) -> None:
        if self.aconn is not None and loop is not None:
            loop.run_until_complete(self.aconn.close())
        self.conn.close()


class MongoFloor(FloorLayer):
    """MongoDB with pymongo (or mongomock): one ``find`` sorted on an index of (conversation,
    seq) with a limit, one ``insert_many``."""

    def __init__(self, collection: Any, conversation: str) -> None:
        super().__init__()
        self.collection = collection
        self.conversation = conversation
        collection.create_index([("c", 1), ("seq", -1)])

    def load(self, n: int) -> list[str]:
        found = self.collection.find(
            {"c": self.conversation}, {"data": 1, "_id": 0}, sort=[("seq", -1)], limit=n
        )
        return [d["data"] for d in reversed(list(found))]

    def save(self, rows: list[str], tokens: list[int]) -> None:
        self.collection.insert_many(
            [
                {"c": self.conversation, "seq": seq, "tokens": n, "data": data}
                for seq, n, data in self._numbered(rows, tokens)
            ],
            ordered=True,
        )


# -- stores ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class StoreSetup:
    """How one store opens a ``Memory`` and a floor layer for a conversation, and how to open
    them again on another PostgreSQL address (the round-trip pass)."""

    memory: Callable[[int], Memory]
    floor: Callable[[], FloorLayer]
    cleanup: Callable[[], None] = lambda: None
    reopen_memory: Callable[[str, int], Memory] | None = None
    reopen_floor: Callable[[str], PostgresFloor] | None = None
    note: str = ""


def store_setup(store: str, workdir: Path, conversation: str) -> StoreSetup:
    """Open what a store's rows need; ``memory(budget)`` builds the ``Memory`` with the budget
    (and no conversation-search indexing on its worker: the adapters' own cost, beside the
    floor; ``conversation_recall.py --parts turns`` measures a turn with and without it)."""
    if store == "memory":
        return StoreSetup(
            lambda b: Memory("memory://", history_tokens=b, index_conversations=False), ListFloor
        )
    if store == "sqlite":
        ours = workdir / f"{conversation}-ours.db"
        floor = workdir / f"{conversation}-floor.db"
        return StoreSetup(
            lambda b: Memory(f"sqlite:///{ours}", history_tokens=b, index_conversations=False),
            lambda: SqliteFloor(floor),
        )
    if store == "postgres":
        from postgres import server_url

        url = server_url()
        schema = "bench_" + uuid.uuid4().hex[:10]
        table = "floor_" + uuid.uuid4().hex[:10]

        def drop() -> None:
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                conn.execute(f"DROP TABLE IF EXISTS {table}")

        return StoreSetup(
            lambda b: Memory(
                url, history_tokens=b, index_conversations=False, store_options={"schema": schema}
            ),
            lambda: PostgresFloor(url, table, conversation, create=True),
            drop,
            lambda other, b: Memory(
                other, history_tokens=b, index_conversations=False, store_options={"schema": schema}
            ),
            lambda other: PostgresFloor(other, table, conversation, create=False),
        )
    if store == "mongo-fake":
        import mongomock

        client: Any = mongomock.MongoClient()
        return StoreSetup(
            lambda b: Memory(
                "mongodb://mongomock/bench",
                history_tokens=b,
                index_conversations=False,
                store_options={"client": client},
            ),
            lambda: MongoFloor(client["floor"]["messages"], conversation),
            note="mongomock is an in-process fake that scans every document: these timings "
            "say nothing about MongoDB",
        )
    if store == "mongo":
        import pymongo

        url = os.environ["MEMORY_ADAPTERS_MONGODB_URL"]
        database = "ma_overhead_" + uuid.uuid4().hex[:8]
        admin: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000)

        def drop_mongo() -> None:
            admin.drop_database(database)
            admin.drop_database(database + "_floor")
            admin.close()

        return StoreSetup(
            lambda b: Memory(
                url,
                history_tokens=b,
                index_conversations=False,
                store_options={"database": database},
            ),
            lambda: MongoFloor(admin[database + "_floor"]["messages"], conversation),
            drop_mongo,
        )
    raise SystemExit(f"unknown store {store!r}; known: {', '.join(STORES)}")


# -- counting round trips on the wire ----------------------------------------------------------


class WireCounter:
    """A TCP proxy in a thread, between PostgreSQL clients and the server, that counts what the
    client sends:

    round trips
        the Sync (``S``) and simple Query (``Q``) messages: each is a point where the client
        waits for the server's ReadyForQuery, so a pipeline (several statements, one Sync)
        is one round trip however the server's answers interleave with the client's sending;
    statements
        the simple queries and extended-protocol executes (``E``);
    bursts
        client-to-server bursts following a server-to-client burst, per connection: a
        transport-level count that overcounts a pipeline the server starts answering while the
        client is still sending (kept as a cross-check; the only count of a stream that cannot
        be parsed, e.g. encrypted).

    Only the untimed round-trip pass goes through it."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.lock = threading.Lock()
        self.round_trips = 0
        self.statements = 0
        self.bursts = 0
        self.log: list[str] = []
        """The SQL of every statement since :meth:`reset`."""
        self.parsed = True
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="wire-counter", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        with self.lock:
            self.round_trips = 0
            self.statements = 0
            self.bursts = 0
            self.log = []

    def counts(self) -> tuple[int | None, int | None, int]:
        """(round trips, statements, bursts) since :meth:`reset`; the first two are ``None``
        once a stream could not be parsed."""
        with self.lock:
            if not self.parsed:
                return None, None, self.bursts
            return self.round_trips, self.statements, self.bursts

    def _serve(self) -> None:
        while not self._stop:
            for key, _ in self.selector.select(timeout=0.05):
                if key.data is None:
                    self._accept()
                else:
                    self._forward(key.fileobj, key.data)  # type: ignore[arg-type]

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except BlockingIOError:
            return
        server = socket.create_connection(self.upstream)
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state = _Connection(client, server)
        self.selector.register(client, selectors.EVENT_READ, (state, True))
        self.selector.register(server, selectors.EVENT_READ, (state, False))

    def _forward(self, sock: socket.socket, data: tuple[_Connection, bool]) -> None:
        state, from_client = data
        try:
            chunk = sock.recv(1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            for s in (state.client, state.server):
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(s)
                s.close()
            return
        with self.lock:
            if from_client:
                if state.last_from_server:
                    self.bursts += 1
                state.last_from_server = False
                waits = state.waits
                found = state.parse(chunk)
                if found is None:
                    self.parsed = False
                else:
                    self.round_trips += state.waits - waits
                    self.statements += len(found)
                    self.log.extend(found)
            else:
                state.last_from_server = True
                if state.awaiting_ssl_answer:
                    state.awaiting_ssl_answer = False
                    if chunk[:1] != b"N":
                        state.broken = True
        (state.server if from_client else state.client).sendall(chunk)

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        for key in list(self.selector.get_map().values()):
            cast(socket.socket, key.fileobj).close()
        self.selector.close()


@dataclass(slots=True)
class _Connection:
    """One proxied connection: its sockets, who spoke last, the client stream's framing, and the
    Syncs and simple Queries the client sent (``waits``)."""

    client: socket.socket
    server: socket.socket
    last_from_server: bool = True
    started: bool = False
    awaiting_ssl_answer: bool = False
    broken: bool = False
    waits: int = 0
    buffer: bytearray = field(default_factory=bytearray)
    prepared: dict[bytes, str] = field(default_factory=dict)
    portals: dict[bytes, str] = field(default_factory=dict)

    def parse(self, chunk: bytes) -> list[str] | None:
        """The statements (their SQL) the client's bytes so far complete: simple queries and
        extended-protocol executes (``None`` once the stream is unreadable, e.g. encrypted).
        Counts the Syncs and simple Queries in ``waits``."""
        if self.broken:
            return None
        self.buffer += chunk
        found: list[str] = []
        while True:
            if not self.started:  # untyped: SSLRequest, GSSENCRequest, StartupMessage
                if len(self.buffer) < 8:
                    return found
                (length, code) = struct.unpack("!ii", self.buffer[:8])
                if not 8 <= length <= 10_000:  # not PostgreSQL's startup
                    self.broken = True
                    return None
                if len(self.buffer) < length:
                    return found
                del self.buffer[:length]
                if code in (80877103, 80877104):
                    self.awaiting_ssl_answer = True
                else:
                    self.started = True
                continue
            if len(self.buffer) < 5:
                return found
            kind = bytes(self.buffer[0:1])
            (length,) = struct.unpack("!i", self.buffer[1:5])
            if length < 4:
                self.broken = True
                return None
            if len(self.buffer) < 1 + length:
                return found
            body = bytes(self.buffer[5 : 1 + length])
            del self.buffer[: 1 + length]
            fields = body.split(b"\0")
            if kind == b"Q":
                self.waits += 1
                found.append(fields[0].decode(errors="replace"))
            elif kind == b"S":  # Sync: the end of an extended-protocol exchange (a pipeline's)
                self.waits += 1
            elif kind == b"P":  # Parse: statement name, query
                self.prepared[fields[0]] = fields[1].decode(errors="replace")
            elif kind == b"B":  # Bind: portal name, statement name
                self.portals[fields[0]] = self.prepared.get(fields[1], "?")
            elif kind == b"E":  # Execute: portal name
                found.append(self.portals.get(fields[0], "?"))


def proxied(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = (userinfo + "@" if userinfo else "") + f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


# -- one row ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Case:
    """One size of one adapter x store: its ``Memory``, floor layer, window and variants."""

    size: int
    conversation: str
    memory: Memory
    floor: FloorLayer
    window: list[Any] = field(default_factory=list)
    window_messages: int = 0
    shown: Shown | None = None
    """What ``ours`` showed its model after warm-up (``bare+tools`` is given the same)."""
    noop: Any = None
    """``bare+hooks``' no-op extension (its ``calls`` count its hooks' calls)."""
    hook_calls: dict[str, int] = field(default_factory=dict)
    """How often each of the no-op's hooks ran in one ``bare+hooks`` turn."""
    turns: dict[str, Callable[[int], object]] = field(default_factory=dict)
    input_factories: dict[str, Callable[[], Any]] = field(default_factory=dict)
    inputs: dict[str, list[Any]] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    warmup_turns: int = 0
    preload_s: float = 0.0
    mismatch: str = ""
    """Set when the floor's window, or what ``bare+tools`` showed its model, differs from
    ours' (the rows would not do the same work)."""
    round_trips: dict[str, float | None] = field(default_factory=dict)
    bursts: dict[str, float] = field(default_factory=dict)
    statements: dict[str, float | None] = field(default_factory=dict)
    sql: dict[str, list[str]] = field(default_factory=dict)
    """The statements of the round-trip pass's last turn, per variant."""


@dataclass(slots=True)
class Row:
    """The result of one adapter x store x size (microseconds)."""

    adapter: str
    store: str
    size: int
    window_messages: int
    budget_tokens: int
    turns: int
    warmup_turns: int
    median: dict[str, float]
    p90: dict[str, float]
    round_trips: dict[str, float | None]
    statements: dict[str, float | None]
    bursts: dict[str, float] = field(default_factory=dict)
    sql: dict[str, list[str]] = field(default_factory=dict)
    preload_s: float = 0.0
    mismatch: str = ""
    hook_calls: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    """Every timed turn of each variant, in the order the rounds ran them."""
    _intervals: dict[str, tuple[float, float]] = field(default_factory=dict, repr=False)

    @property
    def own(self) -> float:
        """Memory's own cost with all its features: ``ours - bare+tools`` (the framework's
        charge for having the memory tools and their instructions excluded)."""
        return self.median["ours"] - self.median["bare+tools"]

    @property
    def own_history(self) -> float:
        """The history path's own cost: ``ours-h - bare+window`` (like the floor's)."""
        return self.median["ours-h"] - self.median["bare+window"]

    @property
    def floor_own(self) -> float:
        return self.median["floor"] - self.median["bare+window"]

    @property
    def tool_charge(self) -> float:
        """What the framework charges for the memory tools and their instructions, with no
        memory layer at all: ``bare+tools - bare+window``."""
        return self.median["bare+tools"] - self.median["bare+window"]

    @property
    def hook_charge(self) -> float:
        """What the framework charges for the extension points memory uses, with no-op hooks:
        ``bare+hooks - bare+tools``."""
        return self.median["bare+hooks"] - self.median["bare+tools"]

    @property
    def own_net(self) -> float:
        """memory-adapters' own code only: ``ours - bare+hooks`` (the framework's charges for
        the tools, the instructions and the extension points excluded)."""
        return self.median["ours"] - self.median["bare+hooks"]

    @property
    def ratio(self) -> float:
        return self.own / self.floor_own if self.floor_own > 0 else math.inf

    @property
    def ratio_net(self) -> float:
        return self.own_net / self.floor_own if self.floor_own > 0 else math.inf

    @property
    def ratio_history(self) -> float:
        return self.own_history / self.floor_own if self.floor_own > 0 else math.inf

    def intervals(self) -> dict[str, tuple[float, float]]:
        """``ours/floor``, ``net/floor`` and ``h/floor``'s :data:`INTERVAL` bootstrap
        intervals (:func:`ratio_intervals`), computed once."""
        if not self._intervals and self.samples:
            self._intervals = ratio_intervals(self.samples)
        return self._intervals


RATIOS: dict[str, tuple[str, str]] = {
    "ours/floor": ("ours", "bare+tools"),
    "net/floor": ("ours", "bare+hooks"),
    "h/floor": ("ours-h", "bare+window"),
}
"""Each ratio's numerator, as (variant, baseline): the ratio is ``(median(variant) -
median(baseline)) / (median(floor) - median(bare+window))``."""


def ratio_intervals(
    samples: dict[str, list[float]], draws: int = INTERVAL_DRAWS, seed: int = 13
) -> dict[str, tuple[float, float]]:
    """How far each ratio of :data:`RATIOS` could be from what one run printed, on this
    machine: the central :data:`INTERVAL` of the ratio over ``draws`` bootstrap resamples of
    the run's rounds (a round's turns, one per variant, run back to back, are drawn together,
    so that a slow stretch of the machine weighs on all the variants of its rounds). A
    resample whose floor own cost is not positive counts as an infinite ratio. Wide intervals
    say the run cannot tell the ratio from its goal: run more ``--turns``."""
    import random

    rounds = min(len(v) for v in samples.values())
    if rounds < 2:
        return {}
    rng = random.Random(seed)
    found: dict[str, list[float]] = {name: [] for name in RATIOS}
    for _ in range(draws):
        picks = [rng.randrange(rounds) for _ in range(rounds)]
        median = {v: statistics.median([s[i] for i in picks]) for v, s in samples.items()}
        floor = median["floor"] - median["bare+window"]
        for name, (variant, base) in RATIOS.items():
            own = median[variant] - median[base]
            found[name].append(own / floor if floor > 0 else math.inf)
    out: dict[str, tuple[float, float]] = {}
    for name, values in found.items():
        values.sort()
        tail = (1 - INTERVAL) / 2
        out[name] = (percentile(values, 100 * tail), percentile(values, 100 * (1 - tail)))
    return out


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of an already sorted, non-empty sequence."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def make_framework(adapter: str) -> Any:
    if adapter == "pydantic-ai":
        return PydanticAI()
    if adapter == "langchain":
        return LangChain()
    if adapter == "pydantic-ai-sync":
        return PydanticAISync()
    raise SystemExit(f"unknown adapter {adapter!r}; known: {', '.join(ADAPTERS)}")


def budget_for(fw: Any) -> int:
    """A token budget whose window holds :data:`WINDOW_MESSAGES` messages: the tokens of the
    last ``WINDOW_MESSAGES`` stored messages plus half a turn (a window starts at a user turn,
    so it then holds exactly that many whatever the rounding)."""
    probe = Memory("memory://", history_tokens=None)
    try:
        with probe.session(conversation_id="probe"):
            for n in range(WINDOW_MESSAGES // 4 + 2):
                probe.conversation.append(fw.neutral(fw.turn(n)))
            whole = probe.conversation.window(max_tokens=None, max_messages=WINDOW_MESSAGES)
            turn = probe.conversation.window(max_tokens=None, max_messages=4)
            return int(whole.tokens + turn.tokens // 2)
    finally:
        probe.close()


def _turns(first: int, count: int) -> Iterator[tuple[int, int]]:
    """(turn number, messages of it) for ``count`` messages from turn ``first`` on: whole turns
    of four, a partial turn first when ``count`` is not a multiple of 4."""
    if count % 4:
        yield first, count % 4
        first += 1
    for n in range(first, first + count // 4):
        yield n, 4


def append_turns(fw: Any, case: Case, first: int, count: int) -> None:
    """Append ``count`` messages (turns ``first``, ...) to both ``ours``' conversation and the
    floor's table, in chunks of about :data:`PRELOAD_CHUNK`. The floor's rows come from one
    serialized turn with the call id replaced (every turn is the same but for it)."""
    template = fw.dump(fw.turn(1))
    tokens = ma_tokens.count(fw.texts(fw.turn(1)))
    chunk: list[Any] = []
    rows: list[str] = []
    counts: list[int] = []

    def flush() -> None:
        case.memory.conversation.append(fw.neutral(chunk))
        case.floor.save(rows, counts)
        chunk.clear()
        rows.clear()
        counts.clear()

    with case.memory.session(conversation_id=case.conversation):
        for n, k in _turns(first, count):
            chunk.extend(fw.turn(n)[:k])
            rows.extend(r.replace("call-00000001", f"call-{n:08d}") for r in template[:k])
            counts.extend(tokens[:k])
            if len(chunk) >= PRELOAD_CHUNK:
                flush()
        if chunk:
            flush()


def preload(fw: Any, case: Case) -> float:
    """``size`` messages in both ``ours``' conversation and the floor's table, then, for a
    conversation shorter than the window, turns up to :data:`WINDOW_MESSAGES` + 4 messages
    (what warm-up turns would add, cheaper). Returns the seconds it took."""
    started = time.perf_counter()
    append_turns(fw, case, 0 if case.size % 4 else 1, case.size)
    with case.memory.session(conversation_id=case.conversation):
        stored = case.memory.conversation.last_seq()
    if stored != case.size:
        raise RuntimeError(f"preloaded {stored} messages, expected {case.size}")
    missing = WINDOW_MESSAGES + 4 - case.size
    if missing > 0:
        append_turns(fw, case, case.size // 4 + 1, (missing + 3) // 4 * 4)
    if isinstance(case.floor, PostgresFloor):
        case.floor.analyze()
    return time.perf_counter() - started


def cold(turns: dict[str, Callable[[int], object]]) -> dict[str, Callable[[int], object]]:
    """``turns`` with those named in :data:`COLD` run with the decoded-message cache off
    (``memory_adapters.messages.DECODED_CACHE_CHARS = 0`` during the turn): every stored row
    parsed on every read, as when a turn's rows were not read before in this process."""

    def without_cache(turn: Callable[[int], object]) -> Callable[[int], object]:
        def run(i: int) -> object:
            saved = ma_messages.DECODED_CACHE_CHARS
            ma_messages.DECODED_CACHE_CHARS = 0
            try:
                return turn(i)
            finally:
                ma_messages.DECODED_CACHE_CHARS = saved

        return run

    return {name: without_cache(t) if name in COLD else t for name, t in turns.items()}


def once(case: Case, name: str) -> None:
    """One untimed turn of a variant (its input built first, where it takes one)."""
    if name in case.input_factories:
        case.inputs[name] = [case.input_factories[name]()]
    case.turns[name](0)


def warm_up(fw: Any, case: Case, least: int) -> None:
    """Run ``ours`` until the window it shows is steady (and at least ``least`` turns), capture
    what it showed its model (the window for ``bare+window`` and the floor; the window, the
    instructions and the tools for ``bare+tools`` and ``bare+hooks``, whose turns are built
    then), then warm the other variants up (the floor as many turns as ``ours``, so that its
    table holds the window too). What the floor, ``bare+tools`` and ``bare+hooks`` show their
    model is compared with ``ours``', and ``bare+hooks``' no-op hooks must have run; a
    difference is recorded in ``case.mismatch``."""
    previous = -1
    done = 0
    while True:
        ours = fw.capture(lambda: once(case, "ours"))
        done += 1
        steady = len(ours.history) == previous
        previous = len(ours.history)
        if (done >= least and steady) or done >= MAX_WARMUP:
            break
    case.warmup_turns = done
    case.shown = ours
    case.window = window = ours.history
    case.window_messages = len(window)
    case.turns["bare+tools"] = fw.with_tools(case)
    case.turns["bare+hooks"] = fw.with_hooks(case)
    problems: list[str] = []
    for _ in range(done - 1):
        once(case, "floor")
    floor = fw.capture(lambda: once(case, "floor"))
    if fw.texts(floor.history) != fw.texts(window):
        problems.append(f"the floor showed {len(floor.history)} messages, ours {len(window)}")
    for name in ("bare+tools", "bare+hooks"):
        calls = case.noop.calls
        calls.update(dict.fromkeys(calls, 0))
        shown = fw.capture(lambda: once(case, name))  # noqa: B023 (run at once)
        if name == "bare+hooks":
            case.hook_calls = dict(calls)
        if fw.texts(shown.history) != fw.texts(window):
            problems.append(f"{name} showed {len(shown.history)} messages, ours {len(window)}")
        if shown.instructions != ours.instructions:
            problems.append(
                f"{name}' instructions differ from ours' ({shown.instructions!r} against "
                f"{ours.instructions!r})"
            )
        if shown.tools != ours.tools:
            problems.append(f"{name} offered the tools {shown.tools}, ours {ours.tools}")
    for name in ("bare", "bare+window", "bare+tools", "bare+hooks", "ours-h", *COLD):
        for _ in range(least):
            once(case, name)
    if not any(case.noop.calls.values()):
        problems.append(
            f"bare+hooks' no-op {type(case.noop).__name__} was never called (hooks: "
            f"{', '.join(case.noop.calls)}): it measures no extension point"
        )
    case.mismatch = "; ".join(problems)
    fw.after_round()


def build_inputs(case: Case, turns: int) -> None:
    """Every timed turn's input, built before timing (LangChain: fresh messages per turn)."""
    case.inputs = {
        name: [factory() for _ in range(turns)] for name, factory in case.input_factories.items()
    }


def count_round_trips(
    fw: Any,
    case: Case,
    setup: StoreSetup,
    counter: WireCounter,
    url: str,
    budget: int,
    turns: int,
) -> None:
    """The untimed pass: ``ours``, ``ours-h`` and the floor through the proxy, per turn."""
    assert setup.reopen_memory is not None and setup.reopen_floor is not None
    memory = setup.reopen_memory(url, budget)
    floor = setup.reopen_floor(url)
    saved = (case.memory, case.floor, case.turns, case.inputs)
    try:
        case.memory, case.floor = memory, floor
        case.turns = fw.variants(case)
        build_inputs(case, turns + RT_WARMUP)
        for name in ("ours", "ours-h", "floor"):
            for i in range(RT_WARMUP):  # connections opened, statements prepared: not counted
                case.turns[name](i)
            counter.reset()
            for i in range(RT_WARMUP, RT_WARMUP + turns):
                if i == RT_WARMUP + turns - 1:
                    with counter.lock:
                        start = len(counter.log)
                case.turns[name](i)
            with counter.lock:
                case.sql[name] = [" ".join(q.split()) for q in counter.log[start:]]
            trips, statements, bursts = counter.counts()
            case.round_trips[name] = None if trips is None else trips / turns
            case.statements[name] = None if statements is None else statements / turns
            case.bursts[name] = bursts / turns
            fw.after_round()
    finally:
        memory.close()
        floor.close(getattr(fw, "loop", None))
        case.memory, case.floor, case.turns, case.inputs = saved


def measure(
    adapter: str,
    store: str,
    sizes: Sequence[int],
    turns: int,
    warmup: int,
    workdir: Path,
    budget: int,
    fw: Any,
    round_trip_turns: int,
    round_trips_everywhere: bool,
) -> tuple[list[Row], str]:
    """Rows for one adapter x store: every size preloaded and warmed up, then the timed turns
    round-robin over sizes and variants (each round starting one step further)."""
    setups: list[StoreSetup] = []
    cases: list[Case] = []
    note = ""
    try:
        for size in sizes:
            conversation = f"bench-{adapter}-{size}"
            setup = store_setup(store, workdir, conversation)
            setups.append(setup)
            note = setup.note
            case = Case(size, conversation, setup.memory(budget), setup.floor())
            cases.append(case)
            case.preload_s = preload(fw, case)
            case.turns = cold(fw.variants(case))
            warm_up(fw, case, warmup)

        for case in cases:
            build_inputs(case, turns)
            case.samples = {v: [] for v in VARIANTS}
        slots = [(case, v) for case in cases for v in VARIANTS]
        clock = time.perf_counter_ns
        gc.collect()
        gc.disable()
        try:
            for i in range(turns):
                for j in range(len(slots)):
                    case, variant = slots[(i + j) % len(slots)]
                    call = case.turns[variant]
                    t0 = clock()
                    call(i)
                    case.samples[variant].append((clock() - t0) / 1000)
                fw.after_round()
        finally:
            gc.enable()

        if store == "postgres":
            from postgres import server_url

            url = server_url()
            parts = urlsplit(url)
            if parts.hostname and parts.port:
                counter = WireCounter(parts.hostname, parts.port)
                try:
                    pairs = list(zip(cases, setups, strict=True))
                    for case, setup in pairs if round_trips_everywhere else pairs[-1:]:
                        count_round_trips(
                            fw,
                            case,
                            setup,
                            counter,
                            proxied(url, counter.port),
                            budget,
                            round_trip_turns,
                        )
                finally:
                    counter.close()
    finally:
        for case in cases:
            case.memory.close()
            if isinstance(case.floor, PostgresFloor):
                case.floor.close(getattr(fw, "loop", None))
            else:
                case.floor.close()
        for setup in setups:
            setup.cleanup()

    rows = []
    for case in cases:
        ordered = {v: sorted(case.samples[v]) for v in VARIANTS}
        rows.append(
            Row(
                adapter=adapter,
                store=store,
                size=case.size,
                window_messages=case.window_messages,
                budget_tokens=budget,
                turns=turns,
                warmup_turns=case.warmup_turns,
                median={v: statistics.median(s) for v, s in ordered.items()},
                p90={v: percentile(s, 90) for v, s in ordered.items()},
                round_trips=dict(case.round_trips),
                statements=dict(case.statements),
                bursts=dict(case.bursts),
                sql=dict(case.sql),
                preload_s=case.preload_s,
                mismatch=case.mismatch,
                hook_calls=dict(case.hook_calls),
                samples={v: list(s) for v, s in case.samples.items()},
            )
        )
    return rows, note


# -- output ----------------------------------------------------------------------------------------

_COLUMNS = (
    ("adapter", 16, "<"),
    ("store", 10, "<"),
    ("size", 6, ">"),
    ("win msgs", 8, ">"),
    ("bare", 8, ">"),
    ("bare+win", 9, ">"),
    ("bare+tools", 10, ">"),
    ("bare+hooks", 10, ">"),
    ("floor", 9, ">"),
    ("ours", 9, ">"),
    ("ours-h", 9, ">"),
    ("ours-cold", 9, ">"),
    ("cache", 6, ">"),
    ("tools", 7, ">"),
    ("hooks", 7, ">"),
    ("own", 8, ">"),
    ("own net", 8, ">"),
    ("own-h", 8, ">"),
    ("floor own", 9, ">"),
    ("ours/floor", 10, ">"),
    ("net/floor", 9, ">"),
    ("h/floor", 7, ">"),
    ("rt ours", 7, ">"),
    ("rt h", 5, ">"),
    ("rt floor", 8, ">"),
    ("bursts ours", 11, ">"),
    ("sql ours", 8, ">"),
    ("sql floor", 9, ">"),
)


def _line(cells: Sequence[str]) -> str:
    return "  ".join(
        f"{c:{align}{width}}" for c, (_, width, align) in zip(cells, _COLUMNS, strict=True)
    )


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_row(r: Row) -> str:
    m = r.median
    return _line(
        (
            r.adapter,
            r.store,
            str(r.size),
            str(r.window_messages),
            f"{m['bare']:.0f}",
            f"{m['bare+window']:.0f}",
            f"{m['bare+tools']:.0f}",
            f"{m['bare+hooks']:.0f}",
            f"{m['floor']:.0f}",
            f"{m['ours']:.0f}",
            f"{m['ours-h']:.0f}",
            f"{m['ours-cold']:.0f}",
            f"{m['ours-cold'] - m['ours']:.0f}",
            f"{r.tool_charge:.0f}",
            f"{r.hook_charge:.0f}",
            f"{r.own:.0f}",
            f"{r.own_net:.0f}",
            f"{r.own_history:.0f}",
            f"{r.floor_own:.0f}",
            _num(r.ratio if math.isfinite(r.ratio) else None, 2),
            _num(r.ratio_net if math.isfinite(r.ratio_net) else None, 2),
            _num(r.ratio_history if math.isfinite(r.ratio_history) else None, 2),
            _num(r.round_trips.get("ours")),
            _num(r.round_trips.get("ours-h")),
            _num(r.round_trips.get("floor")),
            _num(r.bursts.get("ours")),
            _num(r.statements.get("ours")),
            _num(r.statements.get("floor")),
        )
    )


def _span(spans: dict[str, tuple[float, float]], name: str) -> str:
    """`` [low, high]``: the ratio's interval (see :func:`ratio_intervals`), if any."""
    if name not in spans:
        return ""
    low, high = spans[name]
    return f" [{low:.2f}, {high:.2f}]"


def verdicts(rows: Sequence[Row]) -> list[tuple[bool, str]]:
    """Per adapter x store: the flatness and the goal's checks, as (passed, line)."""
    out: list[tuple[bool, str]] = []
    for adapter, store in dict.fromkeys((r.adapter, r.store) for r in rows):
        mine = {r.size: r for r in rows if r.adapter == adapter and r.store == store}
        goal = GOALS[adapter]
        checks: list[tuple[bool, str]] = []
        for size, r in sorted(mine.items()):
            if math.isfinite(r.ratio):
                spans = r.intervals()
                for name, value in (
                    ("ours/floor", r.ratio),
                    ("net/floor", r.ratio_net),
                    ("h/floor", r.ratio_history),
                ):
                    checks.append(
                        (value <= goal, f"{size}: {name} {value:.2f}{_span(spans, name)}")
                    )
            else:
                checks.append((False, f"{size}: floor own <= 0 (noise: use more --turns)"))
        if 1000 in mine and 10000 in mine:
            if mine[1000].own > 0 and mine[10000].own > 0:
                flat = mine[10000].own / mine[1000].own
                checks.append((flat <= FLAT_LIMIT, f"own 10000/1000 {flat:.2f}"))
            else:
                checks.append((False, "own 10000/1000: an own cost <= 0 (noise: more --turns)"))
        if store == "postgres":
            limit = MAX_ROUND_TRIPS[adapter]
            trips = [r.round_trips.get("ours") for r in mine.values()]
            worst = max((t for t in trips if t is not None), default=None)
            if worst is not None:
                checks.append((worst <= limit, f"round trips/turn {worst:.1f}"))
        passed = all(ok for ok, _ in checks)
        failed = [text for ok, text in checks if not ok]
        detail = "; ".join(text for _, text in checks)
        line = (
            f"{'PASS' if passed else 'FAIL'} {adapter} / {store} (goal, each <= {goal}: "
            "ours/floor = (ours - bare+tools) / floor own: memory's cost with all features, "
            "the framework's extension-point charge included, its tool charge excluded; "
            "net/floor = (ours - bare+hooks) / floor own: memory-adapters' own code only; "
            "h/floor = (ours-h - bare+window) / floor own: history only, the framework's hook "
            f"charge included; and own 10000/1000 <= {FLAT_LIMIT}"
            + (f", <= {MAX_ROUND_TRIPS[adapter]} round trips" if store == "postgres" else "")
            + f"): {detail}"
            + (f"  -- over: {', '.join(failed)}" if failed else "")
        )
        out.append((passed, line))
    return out


# -- command line ----------------------------------------------------------------------------------


def _names(known: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [v.strip() for v in text.split(",") if v.strip()]
        unknown = [n for n in names if n not in known]
        if not names or unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(unknown) or repr(text)}; known: {', '.join(known)}"
            )
        return list(dict.fromkeys(names))

    return parse


def _sizes(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive integers: {text!r}")
    return values


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="agent_overhead.py",
        description="The adapters' own cost per agent turn (ours - bare+tools) against a "
        "hand-written floor layer's, per adapter x store x stored messages.",
    )
    parser.add_argument(
        "--adapters",
        type=_names(ADAPTERS),
        default=list(DEFAULT_ADAPTERS),
        help="of pydantic-ai (async: await agent.run), langchain (invoke), pydantic-ai-sync "
        "(agent.run_sync; not run by default)",
    )
    parser.add_argument(
        "--stores",
        type=_names(STORES),
        default=None,
        help="of memory,sqlite,postgres,mongo-fake,mongo (default: all but mongo, which runs "
        "when MEMORY_ADAPTERS_MONGODB_URL is set)",
    )
    parser.add_argument("--sizes", type=_sizes, default=list(DEFAULT_SIZES))
    parser.add_argument(
        "--turns",
        type=_positive,
        default=None,
        help=f"timed turns per variant and size (default {DEFAULT_TURNS}; --quick {QUICK_TURNS})",
    )
    parser.add_argument(
        "--warmup",
        type=_positive,
        default=None,
        help=f"least warm-up turns (default {MIN_WARMUP}; --quick {QUICK_WARMUP}); warm-up "
        "also lasts until the window is full",
    )
    parser.add_argument("--quick", action="store_true", help="the CI smoke run: few turns")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is not met")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    if args.stores is None:
        args.stores = [s for s in STORES if s != "mongo"]
        if os.environ.get("MEMORY_ADAPTERS_MONGODB_URL"):
            args.stores.append("mongo")
    if args.turns is None:
        args.turns = QUICK_TURNS if args.quick else DEFAULT_TURNS
    if args.warmup is None:
        args.warmup = QUICK_WARMUP if args.quick else MIN_WARMUP
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    enc = ma_tokens.encoding(None)
    print(
        f"agent overhead: {args.turns} timed turns per variant and size, >= {args.warmup} "
        f"warm-up; window {WINDOW_MESSAGES} messages of {MESSAGE_CHARS} characters; every turn "
        "calls one tool, then answers (2 model steps, 4 messages stored)"
    )
    print(
        f"python {platform.python_version()} | sqlite {sqlite3.sqlite_version} | tokenizer "
        f"{getattr(enc, 'name', 'approximate')} | {platform.platform()} | {os.cpu_count()} cpus"
    )
    load = os.getloadavg()[0]
    print(
        "medians in microseconds per turn; tools = bare+tools - bare+window (the framework's "
        "charge for the memory tools and instructions); hooks = bare+hooks - bare+tools (the "
        "framework's charge for the extension points ours uses, with no-op hooks); own = ours - "
        "bare+tools; own net = ours - bare+hooks; own-h = ours-h - bare+window; floor own = "
        "floor - bare+window; ours/floor = own / floor own; net/floor = own net / floor own; "
        "h/floor = own-h / floor own"
    )
    print(
        "per turn, PostgreSQL: rt = round trips (Syncs + simple Queries the client sent); "
        "bursts = client bursts after a server burst; sql = statements; "
        f"load average {load:.1f} at start"
    )
    print()
    print(_line([c for c, _, _ in _COLUMNS]))
    print(_line(["-" * w for _, w, _ in _COLUMNS]))
    rows: list[Row] = []
    notes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="agent-overhead-") as tmp:
        for adapter in args.adapters:
            fw = make_framework(adapter)
            try:
                budget = budget_for(fw)
                for store in args.stores:
                    found, note = measure(
                        adapter,
                        store,
                        args.sizes,
                        args.turns,
                        args.warmup,
                        Path(tmp),
                        budget,
                        fw,
                        QUICK_RT_TURNS if args.quick else RT_TURNS,
                        not args.quick,
                    )
                    if note:
                        notes[store] = note
                    for row in found:
                        rows.append(row)
                        print(format_row(row), flush=True)
            finally:
                fw.close()

    print()
    print("p90 us:  " + "; ".join(f"{v}" for v in VARIANTS))
    for r in rows:
        cells = " ".join(f"{r.p90[v]:9.0f}" for v in VARIANTS)
        print(f"  {r.adapter:<16} {r.store:<10} {r.size:>6}  {cells}")
    print()
    shown: set[str] = set()
    for r in rows:
        if r.sql and r.adapter not in shown:
            shown.add(r.adapter)
            print(f"statements of one {r.adapter} turn on {r.store} ({r.size} stored), in order:")
            for variant, statements in r.sql.items():
                for q in statements:
                    print(f"  {variant:<6} {q[:110]}")
            print()
    for adapter in dict.fromkeys(r.adapter for r in rows):
        calls = next(r.hook_calls for r in rows if r.adapter == adapter)
        print(
            f"bare+hooks, {adapter}: a no-op overriding {', '.join(calls)}; calls in one turn: "
            + ", ".join(f"{name} {n}" for name, n in calls.items())
        )
    print(
        f"ratios with their {INTERVAL:.0%} intervals (bootstrap over the run's rounds, "
        f"{INTERVAL_DRAWS} draws: how far another run on this machine could land):"
    )
    for r in rows:
        spans = r.intervals()
        cells = "  ".join(
            f"{name} {value:5.2f}{_span(spans, name):<15}"
            for name, value in (
                ("ours/floor", r.ratio),
                ("net/floor", r.ratio_net),
                ("h/floor", r.ratio_history),
            )
        )
        print(f"  {r.adapter:<16} {r.store:<10} {r.size:>6}  {cells}")
    print()
    for store, note in notes.items():
        print(f"{store}: {note}")
    for r in rows:
        if r.mismatch:
            print(f"WARNING {r.adapter} / {r.store} / {r.size}: {r.mismatch}: not the same work")
    found_verdicts = verdicts(rows)
    for _, line in found_verdicts:
        print(line)
    elapsed = time.perf_counter() - started
    print(
        f"(informational; --check makes a FAIL the exit code) {elapsed:.0f} s; load average "
        f"{os.getloadavg()[0]:.1f} at the end"
    )

    if args.json is not None:
        payload = {
            "benchmark": "agent_overhead",
            "environment": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "sqlite": sqlite3.sqlite_version,
                "tokenizer": getattr(enc, "name", "approximate"),
                "turns": args.turns,
                "quick": args.quick,
                "window_messages": WINDOW_MESSAGES,
                "message_chars": MESSAGE_CHARS,
                "load_average_start": load,
                "load_average_end": os.getloadavg()[0],
                "seconds": elapsed,
            },
            "rows": [
                {k: v for k, v in asdict(r).items() if not k.startswith("_")}
                | {
                    "intervals": {k: list(v) for k, v in r.intervals().items()},
                    "own": r.own,
                    "own_history": r.own_history,
                    "tool_charge": r.tool_charge,
                    "hook_charge": r.hook_charge,
                    "own_net": r.own_net,
                    "ratio_net": r.ratio_net,
                    "floor_own": r.floor_own,
                    "ratio": r.ratio,
                    "ratio_history": r.ratio_history,
                }
                for r in rows
            ],
            "verdicts": [{"passed": ok, "text": line} for ok, line in found_verdicts],
            "notes": notes,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    if args.check and not all(ok for ok, _ in found_verdicts):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
