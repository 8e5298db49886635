"""The long-term memory tools as a pydantic-ai toolset bound to one run's scope.

Each tool's schema is the core's (:data:`memory_adapters.MEMORY_TOOLS`): no parameter names a
user, a scope or a namespace. The scope is the application's: fixed when the toolset is built,
or, by default, the scope in force when a tool is called (inside a memory run, the run's own;
:class:`~.capability.MemoryCapability` builds the toolset once and shares it between runs).
Arguments outside a tool's schema are refused and the model is asked to retry. Inside a durable
run (a DBOS workflow) each call is a recorded step (:mod:`memory_adapters.durable`).
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import ModelRetry, RunContext
from pydantic_ai.tools import Tool
from pydantic_ai.toolsets import FunctionToolset

from memory_adapters import Memory, Scope, ToolArgumentError, ToolSpec, durable
from memory_adapters.durable import TOOL_STEP


def _tool(memory: Memory, spec: ToolSpec, scope: Scope | None) -> Tool[Any]:
    async def run(args: dict[str, Any]) -> dict[str, str]:
        try:
            return {"result": await memory.tools.acall(spec.name, args, scope=scope)}
        except ToolArgumentError as exc:
            return {"retry": str(exc)}

    async def call(ctx: RunContext[Any], **args: Any) -> str:
        # inside a durable run (a DBOS workflow) the call is a recorded step: replayed, it
        # returns what it returned the first time and writes nothing again
        call_id = ctx.tool_call_id if durable.current() is not None else None
        with durable.replayable_call(ctx.conversation_id, call_id):
            outcome = await durable.arecord(TOOL_STEP.format(name=spec.name), lambda: run(args))
        if "retry" in outcome:
            raise ModelRetry(outcome["retry"])
        return outcome["result"]

    call.__name__ = spec.name
    return Tool.from_schema(
        call, spec.name, spec.description, dict(spec.parameters), takes_ctx=True
    )


def memory_toolset(memory: Memory, scope: Scope | None = None) -> FunctionToolset[Any]:
    """A toolset of the memory tools that reads and writes the facts of ``scope`` only, or,
    without one, of the scope in force at each call (the run's, inside a memory run; the
    ``Memory``'s session otherwise)."""
    return FunctionToolset([_tool(memory, spec, scope) for spec in memory.tools.specs])
