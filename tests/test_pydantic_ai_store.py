"""pydantic-ai's ``ConversationStore`` over every memory-adapters store: the conformance kit,
and ``read_history`` in one store query."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from memory_adapters_pydantic_ai import MemoryConversationStore
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from stores import STORES, on_sync_loop, open_memory

from memory_adapters import Memory, Message, RawJSON, hookimpl
from memory_adapters.testing.pydantic_ai import ConversationStoreConformance, sample_messages

__all__ = ["STORES", "on_sync_loop", "open_memory"]


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


class TestMemoryConversationStore(ConversationStoreConformance):
    """The kit, on each store."""

    @pytest.fixture
    def conversation_store(self, memory: Memory) -> MemoryConversationStore:
        return MemoryConversationStore(memory)


def count_store_calls(memory: Memory) -> dict[str, int]:
    """Count the store's async methods (each one query) called from now on, by sync name."""
    counts: dict[str, int] = {}
    store = memory.store
    names = set(dir(type(store)))
    for name in names:
        method = getattr(store, name)
        if not (name.startswith("a") and name[1:] in names and inspect.iscoroutinefunction(method)):
            continue

        async def counted(
            *args: Any, __name: str = name[1:], __method: Callable[..., Any] = method, **kw: Any
        ) -> Any:
            counts[__name] = counts.get(__name, 0) + 1
            return await __method(*args, **kw)

        setattr(store, name, counted)
    return counts


def test_read_history_is_one_store_query(memory: Memory) -> None:
    async def body() -> None:
        store = MemoryConversationStore(memory)
        messages = sample_messages() * 20
        await store.save(Conversation(conversation_id="long", messages=messages))
        record = await store.read_record("long")
        assert record is not None and record.head_id is not None
        cold = MemoryConversationStore(memory)  # another process: nothing cached
        cold_record = await cold.read_record("long")
        assert cold_record is not None
        counts = count_store_calls(memory)
        history = await cold.read_history(cold_record.head_id)
        assert [e.message for e in history] == messages
        assert counts == {"read": 1}
        counts.clear()
        last = await cold.read_history(cold_record.head_id, limit=5)
        assert [e.message for e in last] == messages[-5:]
        assert counts == {"read": 1}
        counts.clear()
        loaded = await MemoryConversationStore(memory).load("long")  # record + history
        assert loaded is not None and loaded.messages == messages
        assert sum(counts.values()) == 2

    asyncio.run(body())


def test_a_branched_history_reads_one_query_per_segment(memory: Memory) -> None:
    async def body() -> None:
        store = MemoryConversationStore(memory)
        await store.save(Conversation(conversation_id="c", messages=sample_messages()))
        loaded = await store.load("c")
        assert loaded is not None
        branched = await store.branch("c", at=2, expected_revision=loaded.revision)
        branched.messages.append(ModelRequest(parts=[UserPromptPart("other way")]))
        branched.messages.append(ModelResponse(parts=[TextPart("ok")]))
        await store.save(branched)
        cold = MemoryConversationStore(memory)
        record = await cold.read_record("c")
        assert record is not None
        expected = await store.load_entries("c")
        counts = count_store_calls(memory)
        history = await cold.read_history(record.head_id)
        assert counts == {"read": 2}
        assert history == expected and len(history) == 4

    asyncio.run(body())


def test_entries_are_neutral_messages_with_the_exact_message_in_raw(memory: Memory) -> None:
    async def body() -> None:
        store = MemoryConversationStore(memory)
        await store.save(Conversation(conversation_id="c", messages=sample_messages()))
        with memory.session(namespace="default#pydantic-ai", conversation_id="c"):
            records = await memory.conversation.aread()
        roles = [r.message.role for r in records]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
        call = records[2].message.tool_calls[0]
        assert (call.id, call.name, call.args) == (
            "call-1",
            "get_weather",
            {"city": "Lisbon", "units": ["c"]},
        )
        results = records[3].message.tool_results
        assert [(r.id, r.is_error) for r in results] == [("call-1", False), ("call-2", True)]
        assert all(r.message.framework == "pydantic-ai" for r in records)

    asyncio.run(body())


class _RawRewritten:
    """A plugin that rewrites every ``raw`` into something that is not pydantic-ai's message:
    plain text (a careless redaction), or JSON text of something else."""

    def __init__(self, rewrite: Callable[[Any], Any]) -> None:
        self.rewrite = rewrite

    @hookimpl
    def before_save(self, messages: list[Message]) -> None:
        for i, m in enumerate(messages):
            if m.raw is not None:
                messages[i] = replace(m, raw=self.rewrite(m.raw))


@pytest.mark.parametrize(
    "rewrite",
    [str, lambda raw: RawJSON(json.dumps({"masked": str(raw)}))],
    ids=["plain-text", "other-json-text"],
)
def test_entries_whose_raw_a_plugin_rewrote_are_read_from_the_neutral_form(
    rewrite: Callable[[Any], Any],
) -> None:
    """A history whose ``raw`` a plugin rewrote still loads: each such entry rebuilt from its
    neutral form (its text and tool calls), none failing the read."""

    async def body() -> None:
        memory = Memory("memory://", embed=False, plugins=[_RawRewritten(rewrite)])
        store = MemoryConversationStore(memory)
        messages = sample_messages()
        await store.save(Conversation(conversation_id="c", messages=messages))
        loaded = await MemoryConversationStore(memory).load("c")
        assert loaded is not None and len(loaded.messages) == len(messages)
        assert [type(m) for m in loaded.messages] == [type(m) for m in messages]
        texts = [p.content for m in loaded.messages for p in m.parts if isinstance(p, TextPart)]
        assert texts == [p.content for m in messages for p in m.parts if isinstance(p, TextPart)]

    asyncio.run(body())
