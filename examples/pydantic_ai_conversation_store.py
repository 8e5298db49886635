"""pydantic-ai's own ``conversation=`` API, persisted by memory-adapters.

Code written for pydantic-ai's ``ConversationStore`` (load, run with ``conversation=``, save)
keeps working and persists to SQLite, PostgreSQL, MongoDB or memory:// through
``MemoryConversationStore``. Two writers that loaded the same revision cannot both save: the
second gets ``ConversationConflict`` and reloads, as the contract asks.

Runs offline (store: argv[1], ``$MEMORY_ADAPTERS_URL`` or ``sqlite:///memory_adapters_demo.db``):

    pip install ".[pydantic-ai,offline]" && python examples/pydantic_ai_conversation_store.py

Needs: pip install ".[pydantic-ai,offline]"

Run again on the same store, it continues the conversation the first run saved (the model is
sent more messages); other examples on that store do not touch it (its own namespace).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import Memory
from memory_adapters.pydantic_ai import MemoryConversationStore


def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
    """Says how much of the conversation it was given."""
    return ModelResponse(parts=[TextPart(f"(I was sent {len(messages)} messages)")])


async def main(url: str) -> None:
    agent = Agent(FunctionModel(model))
    async with Memory(url, namespace="pydantic_ai_conversation_store") as memory:
        store = MemoryConversationStore(memory)
        for prompt in ("Hello!", "What did I just say?"):
            conversation = await store.load("support-1") or Conversation(
                conversation_id="support-1"
            )
            result = await agent.run(prompt, conversation=conversation)
            entries = await store.save(result)
            print(f"you: {prompt}\nagent: {result.output}  [saved {len(entries)} new entries]")

        first = await store.load("support-1")
        second = await store.load("support-1")
        assert first is not None and second is not None
        await store.save(await agent.run("one writer", conversation=first))
        try:
            await store.save(await agent.run("another writer", conversation=second))
        except ConversationConflict:
            print("the second writer got ConversationConflict: it reloads and retries")
        loaded = await store.load("support-1", limit=4)
        assert loaded is not None
        print(f"the last 4 of the stored messages: {[m.kind for m in loaded.messages]}")


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MEMORY_ADAPTERS_URL")
    asyncio.run(main(arg or "sqlite:///memory_adapters_demo.db"))
