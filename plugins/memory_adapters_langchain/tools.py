"""The long-term memory tools as LangChain structured tools, sync and async.

Each tool's schema is the core's (:data:`memory_adapters.MEMORY_TOOLS`): no parameter names a
user, a scope or a namespace. Whose facts a call reaches is decided by the application: the
``scope`` given to :func:`memory_tools`, else the scope in force when the tool runs, which is
the run's own inside a :class:`~.middleware.MemoryMiddleware` run (the middleware makes the run
active around every tool call) and the ``Memory``'s session elsewhere. Arguments outside a
tool's schema are answered with an error the model can read (a ``ToolMessage`` with status
``"error"``), not raised into the agent.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from memory_adapters import Memory, Scope, ToolArgumentError, ToolSpec


def _tool(memory: Memory, spec: ToolSpec, scope: Scope | None) -> BaseTool:
    def call(**args: Any) -> str:
        try:
            return memory.tools.call(spec.name, args, scope=scope)
        except ToolArgumentError as exc:
            raise ToolException(str(exc)) from exc

    async def acall(**args: Any) -> str:
        try:
            return await memory.tools.acall(spec.name, args, scope=scope)
        except ToolArgumentError as exc:
            raise ToolException(str(exc)) from exc

    return StructuredTool.from_function(
        func=call,
        coroutine=acall,
        name=spec.name,
        description=spec.description,
        args_schema=dict(spec.parameters),
        handle_tool_error=True,
    )


def memory_tools(memory: Memory, scope: Scope | None = None) -> list[BaseTool]:
    """The memory tools (``save_memory``, ``recall_memory``, ``search_memory``,
    ``list_memories``, ``forget_memory``) reading and writing the facts of ``scope``, or, when
    it is ``None``, of the scope in force at each call (see the module docstring)."""
    return [_tool(memory, spec, scope) for spec in memory.tools.specs]
