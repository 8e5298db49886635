"""Pending approvals after a restart (issue 27, item 14): a conversation's runs waiting for
approval, with their tool calls and arguments, listed by a public method of each adapter's side:
``memory.conversation.awaiting()`` for pydantic-ai (memory holds the waiting run),
``memory_adapters.langchain.awaiting(agent, config)`` for LangChain (the checkpoint holds it)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from stores import STORES, on_sync_loop, open_memory

from memory_adapters import AwaitingRun, Memory, ToolCall
from memory_adapters.langchain import MemoryMiddleware, aawaiting, awaiting
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
        return ModelResponse(parts=[TextPart("Done.")])
    if "hello" in str(messages[-1].parts):
        return ModelResponse(parts=[TextPart("Hi.")])
    return ModelResponse(
        parts=[
            ToolCallPart("delete_file", {"path": "notes.txt"}, "del-1"),
            ToolCallPart("delete_file", {"path": "todo.txt"}, "del-2"),
        ]
    )


def _agent(memory: Memory) -> Any:
    agent = Agent(FunctionModel(_model), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return f"deleted {path}"

    return memory.wrap(agent, tools=False)


WAITING = (
    ToolCall("del-1", "delete_file", {"path": "notes.txt"}),
    ToolCall("del-2", "delete_file", {"path": "todo.txt"}),
)


def test_pydantic_ai_lists_the_run_waiting_for_approval(memory: Memory) -> None:
    with memory.session(user_id="u", conversation_id="ops"):
        assert memory.conversation.awaiting() == []
        asked = _agent(memory).run_sync("Delete my notes and my list")
        assert isinstance(asked.output, DeferredToolRequests)
    # after a restart: a new agent, nothing kept but the conversation id
    with memory.session(user_id="u", conversation_id="ops"):
        (waiting,) = memory.conversation.awaiting()
        assert waiting.calls == WAITING
        record = memory.conversation.read()[waiting.seq - 1]  # type: ignore[operator]
        assert record.run_id == waiting.run_id is not None
        assert on_sync_loop(memory.conversation.aawaiting()) == [waiting]
        approvals: dict[str, Any] = {c.id: True for c in waiting.calls}
        done = _agent(memory).run_sync(
            deferred_tool_results=DeferredToolResults(approvals=approvals)
        )
        assert done.output == "Done."
        assert memory.conversation.awaiting() == []


def test_pydantic_ai_a_new_prompt_abandons_the_waiting_calls(memory: Memory) -> None:
    with memory.session(user_id="u", conversation_id="ops"):
        _agent(memory).run_sync("Delete my notes and my list")
        assert len(memory.conversation.awaiting()) == 1
        _agent(memory).run_sync("hello")
        assert memory.conversation.awaiting() == []


@tool
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def _lc_agent(memory: Memory, checkpointer: InMemorySaver, script: list[Any]) -> Any:
    middleware: list[Any] = [
        MemoryMiddleware(memory, tools=False),
        HumanInTheLoopMiddleware(interrupt_on={"send_email": True}),
    ]
    return create_agent(
        ScriptedChatModel(script),
        tools=[send_email],
        checkpointer=checkpointer,
        middleware=middleware,
    )


def test_langchain_lists_the_run_waiting_for_approval(memory: Memory) -> None:
    checkpointer = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "mail-1", "user_id": "u"}}
    agent = _lc_agent(memory, checkpointer, [call_tool("send_email", to="bob")])
    assert awaiting(agent, config) == []
    agent.invoke({"messages": [{"role": "user", "content": "Email bob"}]}, config)
    # after a restart: a new agent on the same checkpointer and store
    again = _lc_agent(memory, checkpointer, ["Sent."])
    (waiting,) = awaiting(again, config)
    assert [(c.name, c.args) for c in waiting.calls] == [("send_email", {"to": "bob"})]
    assert waiting.calls[0].id and waiting.run_id and waiting.seq is None
    assert asyncio.run(aawaiting(again, config)) == [waiting]
    out = again.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert out["messages"][-1].text == "Sent."
    assert awaiting(again, config) == []
    with memory.session(user_id="u", conversation_id="mail-1"):
        roles = [r.message.role for r in memory.conversation.read()]
        assert roles == ["user", "assistant", "tool", "assistant"]


def test_awaiting_run_is_public() -> None:
    assert AwaitingRun(None, WAITING).seq is None
