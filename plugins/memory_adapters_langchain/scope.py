"""Where a LangChain run's memory is: scope values from resolvers, the runtime context, the
run config and the session, in that order (shared by the middleware and ``MemoryGraph``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from memory_adapters import Memory
from memory_adapters.run import RunScope, SubConversation, active_run, run_scope
from memory_adapters.scope import framework_id

SCOPE_FIELDS = ("user_id", "conversation_id", "agent_id", "namespace")

HINT = (
    'pass {"configurable": {"thread_id": ...}} to the agent, run it inside '
    "memory.session(conversation_id=...), or give memory-adapters a conversation_id resolver "
    "such as conversation_id=lambda runtime: runtime.context.chat_id"
)


CONTEXT = "the run's context"
CONFIGURABLE = 'the run config\'s "configurable"'


def _value(source: Any, name: str, where: str) -> str | None:
    """The identifier ``source`` (a mapping's key or an object's attribute ``name``) holds, as
    memory keeps it (:func:`~memory_adapters.scope.framework_id`): a str, an int or a UUID;
    ``None`` or ``""`` for none; anything else raises ``InvalidId`` naming ``where``."""
    if source is None:
        return None
    value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
    return framework_id(value, name, where)


def framework_values(
    config: Mapping[str, Any] | None, context: Any, thread_id: object = None
) -> dict[str, str | None]:
    """The scope values a run's LangGraph context (attributes or keys ``user_id``,
    ``conversation_id`` or ``thread_id``, ``agent_id``, ``namespace``), the runtime's
    ``execution_info.thread_id`` and the config (``configurable``: ``thread_id``, ``user_id``,
    ``agent_id``, ``namespace``) give, in that order. Each is a str, an int or a UUID (an int or
    a UUID is kept as its str, as LangGraph accepts them); anything else raises
    :class:`~memory_adapters.InvalidId` naming where it came from."""
    configurable = (config or {}).get("configurable") or {}
    found: dict[str, str | None] = {}
    for name in ("user_id", "agent_id", "namespace"):
        found[name] = _value(context, name, CONTEXT) or _value(configurable, name, CONFIGURABLE)
    found["conversation_id"] = (
        _value(context, "conversation_id", CONTEXT)
        or _value(context, "thread_id", CONTEXT)
        or framework_id(thread_id, "thread_id", "the run's execution_info")
        or _value(configurable, "thread_id", CONFIGURABLE)
    )
    return found


def call_resolvers(
    resolvers: Mapping[str, Any], argument: Any, *, allow_async: bool
) -> dict[str, Any]:
    """Each resolver's value for ``argument``: a fixed value stays, a callable is called (its
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
    """Resolver results as memory keeps them (:func:`~memory_adapters.scope.framework_id`):
    a str, an int or a UUID (kept as its str), ``None`` or ``""`` for none; anything else
    raises :class:`~memory_adapters.InvalidId` naming the resolver."""
    return {
        name: framework_id(value, name, f"the {name} resolver") for name, value in values.items()
    }


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


ScopeId = str | int | UUID
"""An identifier a framework may hand over: memory keeps an int or a UUID as its str."""

Resolver = ScopeId | Callable[[Any], Any] | None
"""A scope value: a fixed identifier (a str, an int or a UUID), or a callable (sync, or async
for async runs) returning one or ``None`` to leave it to the next source; or ``None``."""
