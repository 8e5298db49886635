"""Move pydantic-ai conversations from ``InMemoryConversationStore`` to memory-adapters.

Code written for pydantic-ai's ``ConversationStore`` (load, ``agent.run(...,
conversation=...)``, save) keeps working when the store is a ``MemoryConversationStore``; the
conversations already kept move with a one-off copy: ``list_conversations`` on the old store,
``load`` each, ``save`` it into the new one under the same id. A conversation the new store
already holds is left as it is, so the copy can run again. Then the same agent code goes on
with the moved conversation, persisted in any memory-adapters store.

Store: argv[1] (a URL or a file path), ``$MEMORY_ADAPTERS_URL`` or
``sqlite:///memory_adapters_demo.db``. Offline: the model is a ``FunctionModel``.

    pip install ".[pydantic-ai,offline]" && python examples/from_pydantic_ai_conversation_store.py

Needs: pip install ".[pydantic-ai,offline]"
"""

from __future__ import annotations

import asyncio
import os
import sys

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import Memory
from memory_adapters.pydantic_ai import MemoryConversationStore

DEFAULT_URL = "sqlite:///memory_adapters_demo.db"


def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A model that says how many messages it was given."""
    return ModelResponse(parts=[TextPart(f"I was given {len(messages)} messages.")])


async def copy_conversations(source: ConversationStore, target: ConversationStore) -> list[str]:
    """Copy every conversation of ``source`` that ``target`` does not hold yet; their ids."""
    copied = []
    for record in await source.list_conversations():
        old = await source.load(record.conversation_id)
        if old is None or await target.load(record.conversation_id) is not None:
            continue
        await target.save(
            Conversation(conversation_id=record.conversation_id, messages=old.messages)
        )
        copied.append(record.conversation_id)
    return copied


async def main(url: str) -> None:
    agent = Agent(FunctionModel(reply))

    # Before: conversations in pydantic-ai's in-memory store.
    old_store = InMemoryConversationStore()
    for prompt in ("My favourite tea is oolong.", "I am off to Taipei."):
        conversation = await old_store.load("ada-1") or Conversation(conversation_id="ada-1")
        await old_store.save(await agent.run(prompt, conversation=conversation))

    # The move.
    new_store = MemoryConversationStore(
        Memory(url, namespace="from_pydantic_ai_conversation_store")
    )
    print("copied:", await copy_conversations(old_store, new_store) or "nothing new")

    # After: the same code, on the new store.
    moved = await new_store.load("ada-1")
    assert moved is not None
    result = await agent.run("What did I tell you?", conversation=moved)
    await new_store.save(result)
    print("model:", result.output)


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MEMORY_ADAPTERS_URL")
    arg = arg or DEFAULT_URL
    asyncio.run(main(arg if "://" in arg else f"sqlite:///{arg}"))
