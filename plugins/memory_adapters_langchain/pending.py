"""The runs a LangGraph thread waits on: interrupted for an approval, before they resume.

A run that ``HumanInTheLoopMiddleware`` (or any ``interrupt()``) stops is held by the graph's
checkpoint until a ``Command(resume=...)`` resumes it; memory stores it then (see
``docs/langchain.md``). :func:`awaiting` reads the thread's checkpoint and gives the waiting
run as memory's pydantic-ai adapter gives one (:class:`memory_adapters.AwaitingRun`): its run
id and the calls it waits on, with their tool names and arguments.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from memory_adapters import AwaitingRun, ToolCall


def awaiting(agent: Any, config: Any) -> list[AwaitingRun]:
    """The run the thread of ``config`` (``{"configurable": {"thread_id": ...}}``) waits on,
    interrupted: its run id (``None`` without ``MemoryMiddleware``) and the calls of its last
    model message not answered yet, those an approval asks about among them. Empty when the
    thread waits on nothing. ``agent`` is a compiled graph with a checkpointer (a
    ``create_agent`` agent, wrapped or not)."""
    return _waiting(agent.get_state(config))


async def aawaiting(agent: Any, config: Any) -> list[AwaitingRun]:
    """Async :func:`awaiting`."""
    return _waiting(await agent.aget_state(config))


def _waiting(snapshot: Any) -> list[AwaitingRun]:
    if not getattr(snapshot, "interrupts", ()):
        return []
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    messages = values.get("messages") or []
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    if last is None:
        return []
    calls = tuple(
        ToolCall(str(c.get("id") or ""), c["name"], dict(c.get("args") or {}))
        for c in last.tool_calls
        if c.get("id") not in answered
    )
    if not calls:
        return []
    run_id = values.get("memory_run")
    return [AwaitingRun(run_id if isinstance(run_id, str) else None, calls)]
