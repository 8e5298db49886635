"""The long-term memory tools, defined once for every framework.

Each :class:`ToolSpec` gives a name, a description and a JSON-schema for the parameters.
Adapters expose them in their framework's tool format and execute them with
:meth:`MemoryTools.call`, which binds the scope from the host (the session, the run), never
from the model: no parameter names a user, a scope or a namespace, and arguments outside
the schema are refused.
"""

from __future__ import annotations

import asyncio
import json
import math
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .consolidation import consolidated_put
from .conversation_search import IndexDue
from .errors import InvalidInput, ToolArgumentError
from .operations import APPLICATION, Writer
from .scope import Scope
from .steps import Plan, drive_async, drive_sync
from .tracing import traced
from .validation import describe

REPLAYABLE: ContextVar[str | None] = ContextVar("memory_adapters.replayable_call", default=None)
"""The durable identity of the memory tool call running here (its conversation and call id),
set by an adapter when the call may be replayed (see :func:`.durable.replayable_call`)."""

if TYPE_CHECKING:
    from .conversation_search import MessageHit
    from .facts import Fact, Facts
    from .memory import Memory


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A framework-neutral tool definition."""

    name: str
    description: str
    parameters: dict[str, Any]


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


SEARCH_BY_MEANING = "Search saved facts by meaning and by words"
SEARCH_BY_WORDS = "Search saved facts by their words"
_SEARCH_TAIL = (
    "; returns the most relevant ones (best first, with a relevance score and when each was "
    "last updated), or none when nothing saved is relevant."
)


def tool_min_score(memory: Memory) -> float | None:
    """The ``search_memory`` tool's default relevance floor, on the hybrid scale: a fact that
    shares no word with the question must be at least as similar as the embedder's
    :attr:`~memory_adapters.embedders.Embedder.min_similarity` (a fact sharing words scores
    more). ``None`` (no floor) without an embedder, or with one whose scale is unknown:
    keyword search finds only facts sharing a word with the question."""
    from .ranking import KEYWORD_WEIGHT

    embedder = memory.embedder
    if embedder is None or embedder.min_similarity is None:
        return None
    return (1.0 - KEYWORD_WEIGHT) * embedder.min_similarity


_KEY = {
    "type": "string",
    "description": "A short, stable name for the fact, e.g. 'favourite_tea'.",
    "minLength": 1,
    "maxLength": 256,
}

MEMORY_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "save_memory",
        "Remember a fact about the user or the task for future conversations. Saving under an "
        "existing key replaces that fact; a fact meaning the same as one saved under another "
        "key updates that one (the result names the key saved).",
        _schema(
            {
                "key": _KEY,
                "value": {"type": "string", "description": "The fact, in a short sentence."},
                "importance": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "description": "How important the fact is, from 0 to 1 (default 0.5).",
                },
            },
            ["key", "value"],
        ),
    ),
    ToolSpec(
        "recall_memory",
        "Recall the fact saved under a key.",
        _schema({"key": _KEY}, ["key"]),
    ),
    ToolSpec(
        "search_memory",
        SEARCH_BY_MEANING + _SEARCH_TAIL,
        _schema(
            {
                "query": {
                    "type": "string",
                    "description": "What to look for: a question or a few words.",
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
            },
            ["query"],
        ),
    ),
    ToolSpec(
        "list_memories",
        "List saved facts.",
        _schema({"limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}}, []),
    ),
    ToolSpec(
        "forget_memory",
        "Forget the fact saved under a key, when the user asks or it is no longer true.",
        _schema({"key": _KEY}, ["key"]),
    ),
)

SEARCH_CONVERSATIONS = ToolSpec(
    "search_conversations",
    "Search what was said in your earlier conversations with this user, and earlier in this "
    "one, by meaning and by words; returns the most relevant messages (best first, with when "
    "and in which conversation each was said, and the messages around it), or none when "
    "nothing said is relevant. Messages you can already see are left out.",
    _schema(
        {
            "query": {
                "type": "string",
                "description": "What to look for: a question or a few words.",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
        },
        ["query"],
    ),
)
"""The conversation search tool (:mod:`memory_adapters.conversation_search`), offered beside
:data:`MEMORY_TOOLS` unless ``memory.tools.conversation_search`` is off."""

TOOL_INSTRUCTIONS = (
    "You have long-term memory that persists across conversations. When the user tells you "
    "something worth remembering (preferences, facts about them, decisions), call save_memory "
    "with a short key. Before answering a question that may depend on earlier conversations, "
    "call search_memory or recall_memory. Call forget_memory when a fact is wrong or the user "
    "asks you to forget it. Never mention these tools unless asked."
)

CONVERSATION_INSTRUCTIONS = (
    " To find what was said in earlier conversations (when no saved fact answers), call "
    "search_conversations."
)

TOOL_WAIT_SECONDS = 2.0
"""How long ``search_conversations`` waits for the worker to index what was just stored (the
latest turns, usually in the model's window already) before it searches what is indexed."""

HIT_CHARS = 1000
"""How much of a found message the conversation search tool shows the model (characters)."""

CONTEXT_CHARS = 200
"""How much of each message around a found one the tool shows the model (characters)."""


def when(at: float) -> str:
    """A time as the tools show it to a model: ISO 8601 in UTC, to the minute."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%MZ")


def _fact_json(fact: Fact) -> dict[str, Any]:
    out: dict[str, Any] = {"key": fact.key, "value": fact.value, "importance": fact.importance}
    if fact.updated_at:
        out["updated"] = when(fact.updated_at)
    if fact.score is not None:
        out["score"] = round(fact.score, 3)
    return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _hit_json(hit: MessageHit) -> dict[str, Any]:
    out: dict[str, Any] = {
        "conversation": hit.conversation_id,
        "said": when(hit.created_at),
        "role": hit.message.role,
        "text": _cut(hit.message.text, HIT_CHARS),
        "score": round(hit.score, 3),
    }
    around = [
        {"role": r.message.role, "text": _cut(r.message.text, CONTEXT_CHARS)}
        for r in hit.context
        if r.seq != hit.seq and r.message.text and r.message.role in ("user", "assistant")
    ]
    if around:
        out["around"] = around
    return out


class MemoryTools:
    """Executes the memory tools for the scope in force (set by the host, never the model)."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory
        self._min_score: float | None = None
        self._min_score_set = False
        self.conversation_search = True
        """Whether the model is offered ``search_conversations`` (:data:`SEARCH_CONVERSATIONS`):
        its definition costs about 150 tokens of every model call's context (and 20 of
        instructions); its answers, what they show (at most ``limit`` messages of
        :data:`HIT_CHARS` and their neighbours)."""

    @property
    def instructions(self) -> str:
        """What the model is told about its memory tools."""
        if self.conversation_search:
            return TOOL_INSTRUCTIONS + CONVERSATION_INSTRUCTIONS
        return TOOL_INSTRUCTIONS

    @property
    def min_score(self) -> float | None:
        """The ``search_memory`` tool's relevance floor (hybrid scores, 0 to 1): facts scoring
        less are not shown to the model, so that a question about something never saved gets
        no facts rather than the least unrelated ones. By default :func:`tool_min_score`;
        set ``None`` or 0 to show the best facts whatever their score."""
        return self._min_score if self._min_score_set else tool_min_score(self._memory)

    @min_score.setter
    def min_score(self, value: float | None) -> None:
        self._min_score, self._min_score_set = value, True

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools as this memory offers them: :data:`MEMORY_TOOLS`, with a ``search_memory``
        description that says whether it searches by meaning (an embedder is configured)."""
        tools = MEMORY_TOOLS
        if self._memory.embedder is None:
            tools = tuple(
                ToolSpec(s.name, SEARCH_BY_WORDS + _SEARCH_TAIL, s.parameters)
                if s.name == "search_memory"
                else s
                for s in MEMORY_TOOLS
            )
        if self.conversation_search:
            spec = SEARCH_CONVERSATIONS
            if self._memory.embedder is None:
                spec = ToolSpec(
                    spec.name,
                    spec.description.replace("by meaning and by words", "by their words"),
                    spec.parameters,
                )
            tools = (*tools, spec)
        return tools

    def _facts(self, scope: Scope | None) -> Facts:
        from .facts import Facts

        return Facts(self._memory, scope or self._memory.scope)

    @staticmethod
    def _check(name: str, args: dict[str, Any]) -> ToolSpec:
        """Check a tool call against its schema; raise :class:`ToolArgumentError` unless it
        fits (a known tool; an object of known, well-typed, in-range arguments)."""
        spec = next(
            (
                s
                for s in (*MEMORY_TOOLS, SEARCH_CONVERSATIONS)
                if type(name) is str and s.name == name
            ),
            None,
        )
        if spec is None:
            raise ToolArgumentError(f"unknown memory tool {describe(name)}")
        if not isinstance(args, dict):
            raise ToolArgumentError(f"{name} takes an object of arguments")
        props = spec.parameters["properties"]
        unknown = sorted(describe(k) for k in args if type(k) is not str or k not in props)
        if unknown:
            raise ToolArgumentError(f"{name} does not take {', '.join(unknown)}")
        missing = [p for p in spec.parameters["required"] if p not in args]
        if missing:
            raise ToolArgumentError(f"{name} needs {', '.join(missing)}")
        for pname, value in args.items():
            kind = props[pname]["type"]
            ok = (
                isinstance(value, str)
                if kind == "string"
                else isinstance(value, int) and not isinstance(value, bool)
                if kind == "integer"
                else isinstance(value, int | float) and not isinstance(value, bool)
            )
            if not ok:
                raise ToolArgumentError(f"{name}: {pname} must be a {kind}")
            if isinstance(value, float) and not math.isfinite(value):
                raise ToolArgumentError(f"{name}: {pname} must be a finite number")
            schema = props[pname]
            if "minimum" in schema and value < schema["minimum"]:
                raise ToolArgumentError(f"{name}: {pname} must be at least {schema['minimum']}")
            if "maximum" in schema and value > schema["maximum"]:
                raise ToolArgumentError(f"{name}: {pname} must be at most {schema['maximum']}")
            if "minLength" in schema and len(value) < schema["minLength"]:
                raise ToolArgumentError(f"{name}: {pname} must not be empty")
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                raise ToolArgumentError(f"{name}: {pname} is longer than {schema['maxLength']}")
        return spec

    def _writer(self, caller: Writer | None = None) -> Writer:
        """Who a tool's write is by: ``caller`` when the host names one (the MCP server names
        its client), else the model of the active run of this ``Memory`` (its id, framework,
        agent and model), else the application. Never from the tool's arguments."""
        from .run import active_run

        if caller is not None:
            return caller
        lifecycle = active_run(self._memory)
        if lifecycle is None:
            return APPLICATION
        run = lifecycle.run
        return Writer("model", run.run_id, run.framework, run.agent, run.model, REPLAYABLE.get())

    def _replayed(self, facts: Facts, name: str, key: str, writer: Writer) -> Plan[str | None]:
        """What the replayed tool call ``writer.call_id`` returned the first time, when the
        fact's latest change is that call's (a durable run resumed after it wrote); else
        ``None``. Needs the store's fact history."""
        from .facts import supports_history

        memory = self._memory
        if writer.call_id is None or memory.history_limit == 0:
            return None
        if not supports_history(memory.store):
            return None
        changes = yield from facts._history(key, 1)
        if not changes or changes[0].writer.call_id != writer.call_id:
            return None
        last = changes[0]
        if name == "save_memory" and last.op == "put":
            return json.dumps({"saved": last.key, "version": last.version})
        if name == "forget_memory" and last.op == "forget":
            return json.dumps({"forgotten": True, "key": last.key})
        return None

    def _plan(
        self, name: str, args: dict[str, Any], scope: Scope | None, writer: Writer | None = None
    ) -> Plan[str]:
        """The tool call's plan, observed as a ``"tool"`` operation when a plugin asks
        (:mod:`.tracing`); a host-named ``writer`` is in its attributes (``caller``: its kind,
        ``client``: its agent)."""
        if writer is not None and not isinstance(writer, Writer):
            raise InvalidInput(f"writer must be a Writer or None, not {type(writer).__name__}")
        plan = self._tool_plan(name, args, scope, writer)
        memory = self._memory
        if not memory.hooks.observes_operations:
            return plan
        attributes: dict[str, Any] = {"tool": name if type(name) is str else repr(name)}
        if writer is not None:
            attributes["caller"] = writer.kind
            if writer.agent is not None:
                attributes["client"] = writer.agent
        return traced(
            memory,
            "tool",
            scope if isinstance(scope, Scope) else memory.scope,
            plan,
            attributes=attributes,
            content={"arguments": args},
        )

    def _tool_plan(
        self, name: str, args: dict[str, Any], scope: Scope | None, caller: Writer | None
    ) -> Plan[str]:
        if scope is not None and not isinstance(scope, Scope):
            raise InvalidInput(f"scope must be a Scope or None, not {type(scope).__name__}")
        self._check(name, args)
        facts = self._facts(scope)
        writer = self._writer(caller)
        try:
            if name in ("save_memory", "forget_memory"):
                done = yield from self._replayed(facts, name, args["key"], writer)
                if done is not None:
                    return done
            if name == "save_memory":
                # merged into a fact that means the same, if any (memory_adapters.consolidation)
                importance = args.get("importance")
                fact = yield from consolidated_put(
                    facts, args["key"], args["value"], importance, writer, rewrite=True
                )
                return json.dumps({"saved": fact.key, "version": fact.version})
            if name == "recall_memory":
                got = yield from facts._get(args["key"])
                return json.dumps(_fact_json(got) if got else {"found": False, "key": args["key"]})
            if name == "search_memory":
                floor = self.min_score if self._memory.embedder is not None else None
                found = yield from facts._search(
                    args["query"], int(args.get("limit", 5)), min_score=floor or None
                )
                return json.dumps([_fact_json(f) for f in found], ensure_ascii=False)
            if name == "search_conversations":
                hits = yield from self._conversations(
                    args["query"], int(args.get("limit", 5)), scope
                )
                return json.dumps([_hit_json(h) for h in hits], ensure_ascii=False)
            if name == "list_memories":
                listed = yield from facts._list(int(args.get("limit", 20)))
                return json.dumps([_fact_json(f) for f in listed], ensure_ascii=False)
            deleted = yield from facts._forget(args["key"], None, writer)
            return json.dumps({"forgotten": deleted, "key": args["key"]})
        except InvalidInput as exc:
            raise ToolArgumentError(f"{name}: {exc}") from exc

    def _conversations(self, query: str, limit: int, scope: Scope | None) -> Plan[list[MessageHit]]:
        """The ``search_conversations`` tool: the user's conversations (the run's scope), less
        what the run's model sees already (its window, its own messages), above the floor."""
        from .conversation_search import search_plan
        from .run import active_run

        memory = self._memory
        run = active_run(memory)
        scope = scope or memory.scope
        shown: frozenset[int] = frozenset()
        mine: str | None = None
        if (
            run is not None
            and scope.conversation_id is not None
            and run.conversation.conversation_key == scope.conversation_key
        ):
            shown, mine = run.shown, run.run.run_id
        current = scope.conversation_id
        # ranking is prefix-stable: the first hits not shown are among the first limit + shown
        hits = yield from search_plan(
            memory, scope, query, limit + len(shown), None, True, None, None
        )
        floor = self.min_score if memory.embedder is not None else None
        kept = [
            h
            for h in hits
            if not (
                h.conversation_id == current and (h.seq in shown or (mine and h.run_id == mine))
            )
            and (not floor or h.score >= floor)
        ]
        return kept[:limit]

    def call(
        self,
        name: str,
        args: dict[str, Any],
        *,
        scope: Scope | None = None,
        writer: Writer | None = None,
    ) -> str:
        """Run tool ``name`` with the model's ``args``; return the text result for the model.

        The scope is ``scope`` if the host gives one, else the current session's. Arguments
        outside the tool's schema (an unknown tool or argument, a wrong type, a number out
        of range or not finite, a key that is not an identifier, a value too large) raise
        :class:`~memory_adapters.errors.ToolArgumentError`, and nothing is stored.
        ``writer`` is who the host says is calling, recorded in the history of the facts the
        call changes (the MCP server names its client: ``Writer("mcp", ...)``); by default the
        active run's model, else the application.
        """
        if name == SEARCH_CONVERSATIONS.name:
            self._memory.conversation_index.wait(TOOL_WAIT_SECONDS)
        return drive_sync(
            self._plan(name, args, scope, writer), self._memory.store, self._memory.hooks
        )

    async def acall(
        self,
        name: str,
        args: dict[str, Any],
        *,
        scope: Scope | None = None,
        writer: Writer | None = None,
    ) -> str:
        """Async :meth:`call`."""
        if name == SEARCH_CONVERSATIONS.name and self._memory.worker.busy_with(IndexDue):
            await asyncio.to_thread(self._memory.conversation_index.wait, TOOL_WAIT_SECONDS)
        return await drive_async(
            self._plan(name, args, scope, writer), self._memory.store, self._memory.hooks
        )
