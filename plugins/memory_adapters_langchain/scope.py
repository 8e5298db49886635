"""Where a LangChain run's memory is: scope values from resolvers, the runtime context, the
run config and the session, in that order (shared by the middleware and ``MemoryGraph``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from memory_adapters import Memory
from memory_adapters.run import RunScope, SubConversation, active_run, run_scope

SCOPE_FIELDS = ("user_id", "conversation_id", "agent_id", "namespace")

HINT = (
    'pass {"configurable": {"thread_id": ...}} to the agent, run it inside '
    "memory.session(conversation_id=...), or give memory-adapters a conversation_id resolver "
    "such as conversation_id=lambda runtime: runtime.context.chat_id"
)


def _value(source: Any, name: str) -> str | None:
    if source is None:
        return None
    value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
    return value if isinstance(value, str) and value else None


def framework_values(
    config: Mapping[str, Any] | None, context: Any, thread_id: str | None = None
) -> dict[str, str | None]:
    """The scope values a run's LangGraph context (attributes or keys ``user_id``,
    ``conversation_id`` or ``thread_id``, ``agent_id``, ``namespace``) and config
    (``configurable``: ``thread_id``, ``user_id``, ``agent_id``, ``namespace``) give, the
    context first."""
    configurable = (config or {}).get("configurable") or {}
    found: dict[str, str | None] = {}
    for name in ("user_id", "agent_id", "namespace"):
        found[name] = _value(context, name) or _value(configurable, name)
    found["conversation_id"] = (
        _value(context, "conversation_id")
        or _value(context, "thread_id")
        or (thread_id if isinstance(thread_id, str) and thread_id else None)
        or _value(configurable, "thread_id")
    )
    return found


def call_resolvers(
    resolvers: Mapping[str, Any], argument: Any, *, allow_async: bool
) -> dict[str, Any]:
    """Each resolver's value for ``argument``: a string stays, a callable is called (its
    awaitable returned as is when ``allow_async``, else a ``TypeError``)."""
    out: dict[str, Any] = {}
    for name, value in resolvers.items():
        got = value(argument) if callable(value) else value
        if inspect.isawaitable(got) and not allow_async:
            if inspect.iscoroutine(got):
                got.close()
            raise TypeError(f"the {name} resolver is async: call the agent with ainvoke/astream")
        out[name] = got
    return out


async def awaited(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every awaitable awaited."""
    return {k: (await v) if inspect.isawaitable(v) else v for k, v in values.items()}


def checked(values: Mapping[str, Any]) -> dict[str, str | None]:
    """Resolver results, checked to be strings or ``None``."""
    out: dict[str, str | None] = {}
    for name, value in values.items():
        if value is not None and not isinstance(value, str):
            raise TypeError(f"the {name} resolver returned {type(value).__name__}, not a str")
        out[name] = value or None
    return out


def run_where(
    memory: Memory,
    resolved: Mapping[str, str | None],
    found: Mapping[str, str | None],
    *,
    run_id: str,
    name: str | None,
    sub_conversation: SubConversation,
) -> RunScope:
    """Where a run's memory is: per value, the resolver's, else the framework's, else the
    session's. Under an active run of the same ``Memory`` (a sub-agent called from a tool),
    the conversation is a child of the parent's unless the run names another one than the
    parent's (LangChain hands a nested call the parent's config)."""
    values = {k: resolved.get(k) or found.get(k) for k in SCOPE_FIELDS}
    parent = active_run(memory)
    if parent is not None and values["conversation_id"] == parent.conversation.conversation_id:
        values["conversation_id"] = None
    return run_scope(
        memory,
        conversation_id=values["conversation_id"],
        user_id=values["user_id"],
        agent_id=values["agent_id"],
        namespace=values["namespace"],
        parent=parent,
        name=name,
        run_id=run_id,
        sub_conversation=sub_conversation,
        hint=HINT,
    )


Resolver = str | Callable[[Any], Any] | None
"""A scope value: a fixed string, or a callable (sync, or async for async runs) returning
the value or ``None`` to leave it to the next source; or ``None``."""
