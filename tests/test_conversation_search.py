"""Conversation search through the agents' own tool (issue 28): what a user said in one
conversation is found by the model in another conversation of the same user, after it left
every window; never by another user's agent. With pydantic-ai and LangChain, on SQLite and
PostgreSQL. (The store-level suite is in the conformance kit.)"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import Memory, Message, NoScope, ToolArgumentError
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool
from memory_adapters.tools import SEARCH_CONVERSATIONS

SAID = "By the way, our roofing contractor is Dana Whitfield; she starts on the ninth."
CHATTER = [
    "Can you suggest a pasta recipe for tonight?",
    "What is a good name for a grey cat?",
    "How long should I boil an egg?",
    "Recommend a podcast about history.",
    "What's the capital of Australia?",
    "Give me a word that rhymes with orange.",
]


@pytest.fixture
def shared(shared_store: tuple[str, dict[str, Any]]) -> Iterator[Memory]:
    url, options = shared_store
    # a small window: the first turns leave it after a few more
    memory = Memory(url, store_options=options, embed=False, history_tokens=120)
    yield memory
    memory.close()


def pydantic_search(query: str) -> FunctionModel:
    """A model that calls search_conversations once, then answers with what it returned."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"found: {returns[0].content}")])
        call = ToolCallPart("search_conversations", {"query": query}, f"c-{uuid.uuid4().hex[:6]}")
        return ModelResponse(parts=[call])

    return FunctionModel(reply)


def chat(memory: Memory, agent: Any, user: str, conversation: str, texts: list[str]) -> None:
    with memory.session(user_id=user, conversation_id=conversation):
        for text in texts:
            agent.run_sync(text)


def test_a_pydantic_ai_agent_finds_what_was_said_in_another_conversation(shared: Memory) -> None:
    memory = shared
    talk = memory.wrap(Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok")]))))
    chat(memory, talk, "alice", "roof", [SAID, *CHATTER])
    with memory.session(user_id="alice", conversation_id="roof"):
        window = memory.conversation.window()
        assert all("Dana" not in m.text for m in window.messages())  # it left the window
    ask = memory.wrap(Agent(pydantic_search("who is the roofing contractor?")))
    with memory.session(user_id="alice", conversation_id="kitchen"):
        output = ask.run_sync("who was the roofer again?").output
    hits = json.loads(output.removeprefix("found: "))
    assert hits and "Dana Whitfield" in hits[0]["text"]
    assert hits[0]["conversation"] == "roof" and hits[0]["role"] == "user"
    assert hits[0]["said"].endswith("Z")
    with memory.session(user_id="bob", conversation_id="roof"):  # the same conversation id
        output = ask.run_sync("who was the roofer again?").output
    assert output == "found: []"


def test_a_langchain_agent_finds_what_was_said_in_another_conversation(shared: Memory) -> None:
    memory = shared
    from memory_adapters_langchain import MemoryMiddleware

    model = ScriptedChatModel([AIMessage(content="ok")] * (len(CHATTER) + 1))
    talk: Any = create_agent(model, middleware=[MemoryMiddleware(memory)])
    for text in [SAID, *CHATTER]:
        talk.invoke(
            {"messages": [("user", text)]},
            {"configurable": {"thread_id": "roof", "user_id": "alice"}},
        )
    script = ScriptedChatModel(
        [call_tool("search_conversations", query="roofing contractor"), AIMessage(content="done")]
    )
    ask: Any = create_agent(script, middleware=[MemoryMiddleware(memory)])

    def found(user: str) -> list[dict[str, Any]]:
        result = ask.invoke(
            {"messages": [("user", "who was the roofer?")]},
            {"configurable": {"thread_id": "kitchen", "user_id": user}},
        )
        tool = [m for m in result["messages"] if isinstance(m, ToolMessage)][-1]
        hits: list[dict[str, Any]] = json.loads(str(tool.content))
        return hits

    alice = found("alice")
    assert alice and "Dana Whitfield" in alice[0]["text"] and alice[0]["conversation"] == "roof"
    script.script.extend(
        [call_tool("search_conversations", query="roofing contractor"), AIMessage(content="done")]
    )
    assert found("bob") == []


def test_the_tool_leaves_out_what_the_window_shows(memory: Memory) -> None:
    memory.history_tokens = 120
    talk = memory.wrap(Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok")]))))
    ask = memory.wrap(Agent(pydantic_search("roofing contractor")))
    with memory.session(user_id="alice", conversation_id="roof"):
        talk.run_sync(SAID)
        # still in the window: the model sees it, the tool does not repeat it
        assert json.loads(ask.run_sync("roofer?").output.removeprefix("found: ")) == []
    chat(memory, talk, "alice", "roof", CHATTER)
    with memory.session(user_id="alice", conversation_id="roof"):
        hits = json.loads(ask.run_sync("roofer?").output.removeprefix("found: "))
    assert [h["text"] for h in hits][:1] == [SAID]


def test_the_tool_is_offered_by_default_and_can_be_turned_off(memory: Memory) -> None:
    assert SEARCH_CONVERSATIONS.name in [s.name for s in memory.tools.specs]
    assert "search_conversations" in memory.tools.instructions
    params = json.dumps(SEARCH_CONVERSATIONS.parameters).lower()
    for word in ("user", "scope", "namespace", "conversation"):
        assert word not in params
    memory.tools.conversation_search = False
    assert SEARCH_CONVERSATIONS.name not in [s.name for s in memory.tools.specs]
    assert "search_conversations" not in memory.tools.instructions
    with memory.session(user_id="alice", conversation_id="c"), pytest.raises(ToolArgumentError):
        memory.tools.call("search_conversations", {"query": "x", "user_id": "bob"})


def test_the_tool_returns_nothing_below_the_floor() -> None:
    memory = Memory("memory://")  # the default embedder, with its floor
    try:
        with memory.session(user_id="alice", conversation_id="c"):
            memory.conversation.append([Message("user", "I adopted a cat named Miso")])
            memory.conversation.append([Message("assistant", "What a lovely name for a cat")])
            found = json.loads(memory.tools.call("search_conversations", {"query": "my cat"}))
            assert found and "Miso" in found[0]["text"]
            assert (
                json.loads(memory.tools.call("search_conversations", {"query": "rocket fuel"}))
                == []
            )
    finally:
        memory.close()


def test_a_session_with_a_user_and_no_conversation_searches_all_of_them() -> None:
    memory = Memory("memory://", embed=False)
    try:
        for conversation in ("c1", "c2"):
            with memory.session(user_id="alice", conversation_id=conversation):
                memory.conversation.append([Message("user", f"the contractor of {conversation}")])
        with memory.session(user_id="alice"):
            hits = memory.conversation.search("contractor", all_conversations=True, limit=5)
            assert sorted(h.conversation_id for h in hits) == ["c1", "c2"]
            with pytest.raises(NoScope):
                memory.conversation.search("contractor")  # which conversation?
    finally:
        memory.close()


def test_an_import_is_searchable_and_the_index_is_not_exported(tmp_path: Any) -> None:
    """The index is derived data: an export holds the messages, not their documents, and the
    store imported into finds them on its first search."""
    import io

    from memory_adapters.transfer import export_jsonl, import_jsonl

    source = Memory("memory://", embed=False)
    target = Memory(f"sqlite:///{tmp_path / 'imported.db'}", embed=False)
    try:
        with source.session(user_id="alice", conversation_id="roof"):
            source.conversation.append([Message("user", SAID)])
            said = source.conversation.search("roofing contractor")
        out = io.StringIO()
        export_jsonl(source, out)
        assert "#messages" not in out.getvalue()
        import_jsonl(target, io.StringIO(out.getvalue()))
        with target.session(user_id="alice", conversation_id="kitchen"):
            hits = target.conversation.search("roofing contractor", all_conversations=True)
        assert [(h.conversation_id, h.seq, h.text) for h in hits] == [("roof", 1, SAID)]
        assert said and said[0].text == SAID
    finally:
        source.close()
        target.close()
