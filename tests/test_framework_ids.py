"""Identifiers a framework hands over that are not strings, through both adapters on every
store: LangGraph accepts an int or a UUID as a ``thread_id`` or ``user_id``, and resolvers may
return one. Memory keeps an int or a UUID as its str, so ``"42"`` and ``42`` name the same user
and conversation, and refuses anything else with the same ``InvalidId`` whichever adapter
and source it came through."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from memory_adapters_langchain import MemoryMiddleware
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from stores import STORES, open_memory
from test_langchain import make_agent

from memory_adapters import InvalidId, Memory, hookimpl
from memory_adapters.run import Run
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool

UUID = uuid.UUID("12345678-1234-5678-1234-567812345678")
GOOD: list[tuple[object, str]] = [("42", "42"), (42, "42"), (UUID, str(UUID))]
BAD: list[object] = [1.5, True, b"42", {"id": 42}]


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


class Keys:
    """Records the scope keys of every run (what the store is asked for)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    @hookimpl
    def run_started(self, run: Run) -> None:
        self.seen.append((run.scope.conversation_key, run.scope.fact_scope))


def langchain_model() -> ScriptedChatModel:
    return ScriptedChatModel([call_tool("save_memory", key="tea", value="oolong"), "Noted."])


def pydantic_ai_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if messages[-1].parts[0].part_kind == "tool-return":
        return ModelResponse(parts=[TextPart("Noted.")])
    return ModelResponse(parts=[ToolCallPart("save_memory", {"key": "tea", "value": "oolong"})])


Way = Callable[[Memory, object, object], None]
"""Runs one turn for user ``user`` in conversation ``conversation`` through one source."""


def by_configurable(memory: Memory, user: object, conversation: object) -> None:
    agent = make_agent(langchain_model(), middleware=[MemoryMiddleware(memory)])
    config = {"configurable": {"thread_id": conversation, "user_id": user}}
    agent.invoke({"messages": [("user", "hi")]}, config)


def by_configurable_with_a_checkpointer(memory: Memory, user: object, conversation: object) -> None:
    agent = make_agent(
        langchain_model(), middleware=[MemoryMiddleware(memory)], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": conversation, "user_id": user}}
    agent.invoke({"messages": [("user", "hi")]}, config)


def by_context(memory: Memory, user: object, conversation: object) -> None:
    agent = make_agent(langchain_model(), middleware=[MemoryMiddleware(memory)])
    context = {"user_id": user, "conversation_id": conversation}
    agent.invoke({"messages": [("user", "hi")]}, context=context)


def by_middleware_resolvers(memory: Memory, user: object, conversation: object) -> None:
    def user_of(runtime: Any) -> Any:  # any value: the test passes bad ones on purpose
        return user

    async def conversation_of(runtime: Any) -> Any:
        return conversation

    middleware = MemoryMiddleware(memory, user_id=user_of, conversation_id=conversation_of)
    agent = make_agent(langchain_model(), middleware=[middleware])
    asyncio.run(agent.ainvoke({"messages": [("user", "hi")]}))


def by_wrap_configurable(memory: Memory, user: object, conversation: object) -> None:
    agent = memory.wrap(make_agent(langchain_model(), tools=memory_tools_of(memory)))
    config = {"configurable": {"thread_id": conversation, "user_id": user}}
    agent.invoke({"messages": [("user", "hi")]}, config)


def by_wrap_resolvers(memory: Memory, user: object, conversation: object) -> None:
    agent = memory.wrap(
        make_agent(langchain_model(), tools=memory_tools_of(memory)),
        user_id=lambda config: user,
        conversation_id=lambda config: conversation,
    )
    agent.invoke({"messages": [("user", "hi")]})


def by_pydantic_ai_resolvers(memory: Memory, user: object, conversation: object) -> None:
    async def conversation_of(ctx: Any) -> Any:
        return conversation

    agent = memory.wrap(
        Agent(FunctionModel(pydantic_ai_model)),
        user_id=lambda ctx: user,
        conversation_id=conversation_of,
    )
    agent.run_sync("hi")


def memory_tools_of(memory: Memory) -> list[Any]:
    from memory_adapters_langchain import memory_tools

    return list(memory_tools(memory))


WAYS: dict[str, Way] = {
    "configurable": by_configurable,
    "configurable+checkpointer": by_configurable_with_a_checkpointer,
    "context": by_context,
    "middleware resolvers": by_middleware_resolvers,
    "wrap configurable": by_wrap_configurable,
    "wrap resolvers": by_wrap_resolvers,
    "pydantic-ai resolvers": by_pydantic_ai_resolvers,
}


@pytest.mark.parametrize("way", sorted(WAYS))
def test_a_str_an_int_and_a_uuid_are_the_same_scope_in_both_adapters(
    memory: Memory, way: str
) -> None:
    keys = Keys()
    memory.register(keys, name="keys")
    for value, text in GOOD:
        WAYS[way](memory, value, value)
        with memory.session(user_id=text, conversation_id=text):
            expected = (memory.scope.conversation_key, memory.scope.fact_scope)
            assert memory.facts.get("tea") is not None, (way, value)
            memory.facts.forget("tea")
        assert keys.seen[-1] == expected, (way, value)
    # "42" and 42 are one conversation: the second run was stored after the first
    with memory.session(user_id="42", conversation_id="42"):
        assert [m.role for m in memory.conversation.messages()][0::4] == ["user", "user"]


def resolver_error(way: str, bad: object) -> str:
    with pytest.raises(InvalidId) as info:
        if way == "pydantic-ai":
            by_pydantic_ai_resolvers(Memory("memory://"), bad, "c")
        elif way == "middleware":
            by_middleware_resolvers(Memory("memory://"), bad, "c")
        else:
            by_wrap_resolvers(Memory("memory://"), bad, "c")
    return str(info.value)


@pytest.mark.parametrize("bad", BAD, ids=lambda v: type(v).__name__)
def test_other_types_are_the_same_invalid_id_in_both_adapters(memory: Memory, bad: object) -> None:
    name = type(bad).__name__
    expected = f"user_id from the user_id resolver must be a str, an int or a UUID, not {name}"
    for way in ("pydantic-ai", "middleware", "wrap"):
        assert resolver_error(way, bad) == expected, way
    configurable = 'the run config\'s "configurable"'
    for way, source, field in (
        ("configurable", configurable, "user_id"),
        ("wrap configurable", configurable, "user_id"),
        ("context", "the run's context", "user_id"),
    ):
        with pytest.raises(InvalidId) as info:
            WAYS[way](memory, bad, "c")
        assert (
            str(info.value) == f"{field} from {source} must be a str, an int or a UUID, not {name}"
        )
        with pytest.raises(InvalidId, match=f"thread_id from .* not {name}|conversation_id"):
            WAYS[way](memory, "u", bad)
    with memory.session(conversation_id="c"):
        assert memory.conversation.last_seq() == 0  # nothing ran, nothing was stored
