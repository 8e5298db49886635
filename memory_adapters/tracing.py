"""Operations that observers can time: the ``operation_started`` / ``operation_finished`` pair.

A tracing, metrics or logging plugin needs to know when memory's work on a window, an append,
a fact search or a memory tool call begins and ends, with what it was asked and what came of
it. :func:`traced` wraps an operation's plan (see :mod:`.steps`) between the two hooks. When no
plugin observes operations now (none implements either hook, or each that does says through
its ``memory_adapters_active()`` that it has nothing to do, as the OpenTelemetry plugin does
while no tracer provider is configured) it returns the plan itself: the operation costs a set
lookup or two more (and those plugins' checks), and no :class:`Operation` is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .steps import Plan

if TYPE_CHECKING:
    from .memory import Memory
    from .run import Run
    from .scope import Scope

T = TypeVar("T")

OperationName = Literal["window", "append", "search", "tool", "extract"]
"""The operations reported: a window read for a model call, a turn appended to a log, a search
of long-term facts, a memory tool called by a model, a background extraction of facts from a
conversation's new turns."""


@dataclass(slots=True)
class Operation:
    """One operation of memory, as the ``operation_started`` / ``operation_finished`` hooks see
    it.

    ``attributes`` hold what an operator filters on and never message content or fact values
    (``tool``: the tool's name, with ``caller`` and ``client`` when the host names who called,
    as the MCP server does: ``"mcp"`` and the client's name; ``mode`` and ``limit``: a
    search's; ``messages`` and
    ``tokens``: what an append stores, known by the time it finishes). ``capture_content`` is
    the operator's choice (``Memory(telemetry_content=True)`` or
    ``MEMORY_ADAPTERS_OTEL_CONTENT=1``) to let content through to telemetry: only then does
    ``content`` hold what the operation was given (a search's ``query``, a tool's
    ``arguments``, an append's ``messages``), and only then may a plugin export content from
    the result (texts of a window, values of facts found). ``state`` is free for plugins to
    carry data from the start to the finish of the same operation.
    """

    name: OperationName
    scope: Scope
    store: str
    """The store's URL scheme (``"postgresql"``, ``"sqlite"``...), or its class name."""
    run: Run | None = None
    """The agent run the operation belongs to (``None`` outside any run)."""
    capture_content: bool = False
    attributes: dict[str, Any] = field(default_factory=dict)
    content: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)


def traced(
    memory: Memory,
    name: OperationName,
    scope: Scope,
    plan: Plan[T],
    *,
    run: Run | None = None,
    attributes: dict[str, Any] | None = None,
    content: dict[str, Any] | None = None,
) -> Plan[T]:
    """``plan`` between the ``operation_started`` and ``operation_finished`` hooks, or ``plan``
    itself when no plugin observes operations now. ``run`` defaults to the run active in this
    context (:func:`~memory_adapters.run.active_run`)."""
    hooks = memory.hooks
    if not hooks.observes_operations:
        return plan
    if run is None:
        from .run import active_run

        lifecycle = active_run(memory)
        run = None if lifecycle is None else lifecycle.run
    store = memory.store.scheme or type(memory.store).__name__
    capture = memory.telemetry_content
    op = Operation(
        name,
        scope,
        store,
        run,
        capture,
        {} if attributes is None else attributes,  # the plan may fill it as it goes
        (content or {}) if capture else {},
    )
    return _traced(memory, op, plan)


def _traced(memory: Memory, op: Operation, plan: Plan[T]) -> Plan[T]:
    hooks = memory.hooks
    step = hooks.operation_started(op)
    started = step is not None
    if step is not None:
        yield step
    try:
        result: T = yield from plan
    except GeneratorExit:
        raise
    except Exception as exc:
        step = hooks.operation_finished(op, None, exc, started)
        if step is not None:
            yield step
        raise
    step = hooks.operation_finished(op, result, None, started)
    if step is not None:
        yield step
    return result
