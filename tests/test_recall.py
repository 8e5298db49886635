"""Semantic recall seen from the outside: choosing an embedder (WordLlama offline, pydantic-ai,
LangChain, callables), the ``embed`` hook, failures, and the model finding facts by meaning
through the memory tools of both frameworks."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from memory_adapters_inmemory import InMemoryStore

from memory_adapters import Memory, hookimpl
from memory_adapters.embedders import CallableEmbedder, Embedder
from memory_adapters.errors import (
    EmbedderFailed,
    EmbeddingWarning,
    InvalidInput,
    MissingExtra,
    NoEmbedder,
)
from memory_adapters.testing.embedders import ConceptEmbedder

PROFILE = {"favourite_tea": "oolong", "home_city": "Lisbon", "dog_name": "Rex"}


def _keys(found: list[Any]) -> list[str]:
    return [f.key for f in found]


# -- choosing an embedder ------------------------------------------------------------------------


def test_the_embeddings_extra_gives_every_memory_an_offline_model() -> None:
    memory = Memory("memory://")
    assert memory.embedder is not None and memory.embedder.name.startswith("minilm:")
    assert Memory("memory://", embed="minilm").embedder is not None
    light = Memory("memory://", embed="wordllama")  # the light option, by name
    assert light.embedder is not None and light.embedder.name.startswith("wordllama:")
    assert Memory("memory://", embed=False).embedder is None
    with memory.session(user_id="alice"):
        for key, value in PROFILE.items():
            memory.facts.put(key, value)
        assert memory.facts.search("Which drink do I prefer?", mode="keyword") == []
        assert _keys(memory.facts.search("Which drink do I prefer?", limit=1)) == ["favourite_tea"]
        assert _keys(memory.facts.search("What city do I live in?", limit=1)) == ["home_city"]


def test_a_memory_given_a_store_object_chooses_its_embedder_as_one_given_a_url() -> None:
    """``Memory(store=...)`` loads the plugins that make embedders, as ``Memory(url)`` does: the
    same default, and an embedder named by its plugin."""
    given = Memory(store=InMemoryStore())
    assert given.embedder is not None and given.embedder.name.startswith("minilm:")
    named = Memory(store=InMemoryStore(), embed="wordllama")
    assert named.embedder is not None and named.embedder.name.startswith("wordllama:")
    assert Memory(store=InMemoryStore(), embed=False).embedder is None
    with given.session(user_id="alice"):
        for key, value in PROFILE.items():
            given.facts.put(key, value)
        assert _keys(given.facts.search("Which drink do I prefer?", limit=1)) == ["favourite_tea"]


def test_wordllama_loads_from_its_wheel_with_no_network(tmp_path: Path) -> None:
    """A fresh process with every socket refused still embeds: nothing is downloaded."""
    script = """
import socket, sys
def refuse(*a, **k):
    raise OSError("network is off in this test")
socket.socket.connect = refuse
socket.create_connection = refuse
from memory_adapters import Memory
m = Memory("memory://", embed="wordllama")
with m.session(user_id="u"):
    m.facts.put("favourite_tea", "oolong")
    m.facts.put("home_city", "Lisbon")
    print(m.facts.search("Which drink do I prefer?", limit=1)[0].key)
"""
    env = {"MEMORY_ADAPTERS_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    import os

    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "favourite_tea"
    assert (tmp_path / "cache" / "wordllama" / "tokenizers").is_dir()


def test_a_pydantic_ai_embedder_model_or_name() -> None:
    from pydantic_ai.embeddings import Embedder as PAIEmbedder
    from pydantic_ai.embeddings import TestEmbeddingModel

    model = TestEmbeddingModel(dimensions=4)
    for spec in (PAIEmbedder(model), model):
        memory = Memory("memory://", embed=spec)
        assert memory.embedder is not None and memory.embedder.name == "test:test"
        with memory.session(user_id="u"):
            memory.facts.put("k", "v")
            assert _keys(memory.facts.search("q", mode="semantic")) == ["k"]
    named = Memory("memory://", embed="openai:text-embedding-3-small")
    assert named.embedder is not None and named.embedder.name == "openai:text-embedding-3-small"


def test_a_pydantic_ai_model_name_that_cannot_embed_never_loses_a_fact() -> None:
    memory = Memory("memory://", embed="openai:text-embedding-3-small")  # no package, no key
    with memory.session(user_id="u"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        memory.facts.put("favourite_tea", "oolong")
        assert _keys(memory.facts.search("oolong")) == ["favourite_tea"]
    assert sum(issubclass(w.category, EmbeddingWarning) for w in caught) == 2
    with memory.session(user_id="u"), pytest.raises(EmbedderFailed):
        memory.facts.search("oolong", mode="semantic")


def test_a_langchain_embeddings() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings

    class Concepts(Embeddings):
        def __init__(self) -> None:
            self.inner = ConceptEmbedder()
            self.model = "concepts"

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return self.inner.embed(texts, "document")

        def embed_query(self, text: str) -> list[float]:
            return self.inner.embed([text], "query")[0]

    memory = Memory("memory://", embed=Concepts())
    assert memory.embedder is not None and memory.embedder.name == "langchain:Concepts:concepts"
    with memory.session(user_id="u"):
        for key, value in PROFILE.items():
            memory.facts.put(key, value)
        assert _keys(memory.facts.search("a beverage?", limit=1)) == ["favourite_tea"]

        async def go() -> list[str]:
            return _keys(await memory.facts.asearch("which town", limit=1, mode="semantic"))

        assert asyncio.run(go()) == ["home_city"]
    assert Memory("memory://", embed=DeterministicFakeEmbedding(size=8)).embedder is not None


def test_plain_callables_sync_async_and_told_the_input_type() -> None:
    concepts = ConceptEmbedder()
    kinds: list[str] = []

    def typed(texts: list[str], input_type: str = "document") -> list[list[float]]:
        kinds.append(input_type)
        return [concepts.vector(t) for t in texts]

    async def coroutine(texts: list[str]) -> list[list[float]]:
        await asyncio.sleep(0)
        return [concepts.vector(t) for t in texts]

    for fn in (typed, coroutine):
        memory = Memory("memory://", embed=fn)
        assert isinstance(memory.embedder, CallableEmbedder)
        assert memory.embedder.name.endswith(fn.__qualname__)
        with memory.session(user_id="u"):
            memory.facts.put("favourite_tea", "oolong")
            memory.facts.put("home_city", "Lisbon")
            assert _keys(memory.facts.search("a beverage", limit=1)) == ["favourite_tea"]

            async def go(memory: Memory) -> list[str]:
                await memory.facts.aput("dog_name", "Rex")
                return _keys(await memory.facts.asearch("my pet", limit=1))

            assert asyncio.run(go(memory)) == ["dog_name"]
    assert kinds[:3] == ["document", "document", "query"]


def test_what_is_not_an_embedder_is_refused_clearly() -> None:
    for spec in ("nonsense", 42, object()):
        with pytest.raises(InvalidInput, match="no installed plugin makes an embedder"):
            Memory("memory://", embed=spec)
    bad = Memory("memory://", embed=lambda texts: [[0.0, 0.0] for _ in texts])  # no direction
    with bad.session(user_id="u"), pytest.warns(EmbeddingWarning, match="all zeros"):
        bad.facts.put("k", "v")
    extra = Memory("memory://", embed=lambda texts: [[1.0]] * (len(texts) + 1))
    with extra.session(user_id="u"), pytest.warns(EmbeddingWarning, match="2 vectors for 1"):
        extra.facts.put("k", "v")
    with extra.session(user_id="u"):
        fact = extra.facts.get("k")
        assert fact is not None and fact.value == "v"
    none = Memory("memory://", embed=False)
    with none.session(user_id="u"), pytest.raises(NoEmbedder, match="embeddings"):
        none.facts.search("x", mode="semantic")


def test_wordllama_by_name_without_the_extra_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "wordllama" else real(name, *a),
    )
    with pytest.raises(MissingExtra, match=r"memory-adapters\[wordllama\]"):
        Memory("memory://", embed="wordllama")
    default = Memory("memory://").embedder  # the default is the embeddings extra's model
    assert default is not None and default.name.startswith("minilm:")


def test_the_embed_hook_can_answer_in_the_embedders_place() -> None:
    embedder = ConceptEmbedder()

    class Cache:
        def __init__(self) -> None:
            self.vectors: dict[str, list[float]] = {}
            self.asked: list[tuple[str, str]] = []

        @hookimpl
        def embed(self, texts: list[str], model: str, input_type: str) -> Any:
            self.asked.extend((model, input_type) for _ in texts)
            if all(t in self.vectors for t in texts):
                return [self.vectors[t] for t in texts]
            return None

    cache = Cache()
    memory = Memory("memory://", embed=embedder, plugins=[cache])
    with memory.session(user_id="u"):
        memory.facts.put("favourite_tea", "oolong")
        cache.vectors["a beverage"] = embedder.vector("tea")
        assert _keys(memory.facts.search("a beverage", mode="semantic")) == ["favourite_tea"]
    assert embedder.queries == []  # the plugin answered
    assert cache.asked == [("concepts-v1", "document"), ("concepts-v1", "query")]


class _Broken(Embedder):
    name = "broken"

    def embed(self, texts: list[str], input_type: str = "document") -> list[list[float]]:
        return [[float("nan"), 1.0] for _ in texts]


def test_non_finite_vectors_are_a_failed_embedding_not_a_stored_one() -> None:
    memory = Memory("memory://", embed=_Broken())
    with memory.session(user_id="u"), pytest.warns(EmbeddingWarning, match="finite"):
        memory.facts.put("k", "v")
    with memory.session(user_id="u"):
        fact = memory.facts.get("k")
        assert fact is not None and fact.value == "v"


# -- the model recalls by meaning through the tools ----------------------------------------------


def test_a_pydantic_ai_agent_finds_a_fact_by_meaning(tmp_path: Path) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    found: list[Any] = []

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            found.append(json.loads(str(returns[0].content)))
            return ModelResponse(parts=[TextPart("done")])
        prompt = messages[-1].parts[-1].content
        if "favourite" in prompt:
            args = {"key": "favourite_tea", "value": "oolong"}
            return ModelResponse(parts=[ToolCallPart("save_memory", args, "c1")])
        return ModelResponse(parts=[ToolCallPart("search_memory", {"query": prompt}, "c1")])

    url = f"sqlite:///{tmp_path / 'm.db'}"
    with Memory(url, embed=ConceptEmbedder()) as memory:
        agent = memory.wrap(Agent(FunctionModel(model)))
        with memory.session(user_id="alice", conversation_id="one"):
            agent.run_sync("My favourite tea is oolong")
        with memory.session(user_id="alice", conversation_id="two"):
            agent.run_sync("Which beverage do I like?")
    assert found[-1][0]["key"] == "favourite_tea"


def test_a_langchain_agent_finds_a_fact_by_meaning() -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.runnables import RunnableConfig

    from memory_adapters.langchain import MemoryMiddleware
    from memory_adapters.testing.langchain import ScriptedChatModel

    memory = Memory("memory://", embed=ConceptEmbedder())
    with memory.session(user_id="alice"):
        memory.facts.put("favourite_tea", "oolong")
    model = ScriptedChatModel(
        [
            AIMessage(
                "",
                tool_calls=[
                    {"name": "search_memory", "args": {"query": "a beverage?"}, "id": "s1"}
                ],
            ),
            AIMessage("You like oolong."),
        ]
    )
    agent = create_agent(model, middleware=[MemoryMiddleware(memory)])
    config: RunnableConfig = {"configurable": {"thread_id": "t1", "user_id": "alice"}}
    out = agent.invoke({"messages": [{"role": "user", "content": "What should I drink?"}]}, config)
    results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(str(results[0].content))[0]["key"] == "favourite_tea"


def test_a_word_in_common_does_not_push_out_what_the_meaning_found() -> None:
    """A word most of the scope's facts hold ("make") is a weak keyword hit: weighed against
    KEYWORD_SCALE, not against the best hit, it does not push out what the meaning found."""
    memory = Memory("memory://", embed=ConceptEmbedder())
    with memory.session(user_id="u"):
        memory.facts.put("favourite_tea", "oolong")
        for i in range(10):
            memory.facts.put(f"chore_{i}", f"make the bed, number {i}")
        question = "Which beverage should I make?"
        assert _keys(memory.facts.search(question, limit=1)) == ["favourite_tea"]
        assert _keys(memory.facts.search(question, limit=1, mode="keyword"))[0].startswith("chore")
        assert _keys(memory.facts.search("make bed number 3", limit=1)) == ["chore_3"]


# -- what the tools show the model: dates, scores, nothing rather than noise ----------------------

UNRELATED = "What is the capital of Australia?"
PERSONAL = {
    "favourite_tea": "I drink oolong every morning",
    "dog_name": "My dog is called Rex",
    "employer": "I work at Acme Bank as a software engineer",
    "allergy": "I am allergic to peanuts",
    "hobby": "I play tennis on Saturdays",
}


def _tool_results(results: list[Any]) -> list[list[dict[str, Any]]]:
    return [json.loads(str(r)) for r in results]


def test_a_pydantic_ai_agent_sees_dates_and_gets_nothing_for_an_unrelated_question() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    seen: list[Any] = []

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            seen.append(returns[0].content)
            return ModelResponse(parts=[TextPart("done")])
        prompt = messages[-1].parts[-1].content
        return ModelResponse(parts=[ToolCallPart("search_memory", {"query": prompt}, "c1")])

    memory = Memory("memory://")  # the embeddings extra: a real offline model
    assert memory.embedder is not None
    with memory.session(user_id="alice"):
        for key, value in PERSONAL.items():
            memory.facts.put(key, value)
    agent = memory.wrap(Agent(FunctionModel(model)))
    with memory.session(user_id="alice", conversation_id="c"):
        agent.run_sync("What do I drink in the morning?")
        agent.run_sync(UNRELATED)
    related, unrelated = _tool_results(seen)
    assert related[0]["key"] == "favourite_tea"
    assert related[0]["updated"].endswith("Z") and 0 < related[0]["score"] <= 1
    assert unrelated == []
    with memory.session(user_id="alice"):  # the floor is the tool's: the API still answers
        assert memory.facts.search(UNRELATED) != []
        assert memory.facts.search(UNRELATED, min_score=memory.tools.min_score) == []


def test_a_langchain_agent_sees_dates_and_gets_nothing_for_an_unrelated_question() -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.runnables import RunnableConfig

    from memory_adapters.langchain import MemoryMiddleware
    from memory_adapters.testing.langchain import ScriptedChatModel

    memory = Memory("memory://")
    with memory.session(user_id="alice"):
        for key, value in PERSONAL.items():
            memory.facts.put(key, value)

    def search(query: str, call: str) -> AIMessage:
        return AIMessage(
            "", tool_calls=[{"name": "search_memory", "args": {"query": query}, "id": call}]
        )

    model = ScriptedChatModel(
        [search("my dog's name", "s1"), AIMessage("Rex."), search(UNRELATED, "s2"), AIMessage("?")]
    )
    agent = create_agent(model, middleware=[MemoryMiddleware(memory)])
    config: RunnableConfig = {"configurable": {"thread_id": "t1", "user_id": "alice"}}
    seen: list[Any] = []
    for question in ("What is my dog called?", UNRELATED):
        out = agent.invoke({"messages": [{"role": "user", "content": question}]}, config)
        seen.append([m for m in out["messages"] if isinstance(m, ToolMessage)][-1].content)
    related, unrelated = _tool_results(seen)
    assert related[0]["key"] == "dog_name" and related[0]["updated"].endswith("Z")
    assert unrelated == []


def test_the_search_tool_says_what_the_memory_can_do() -> None:
    with_meaning = Memory("memory://", embed=ConceptEmbedder())
    words_only = Memory("memory://", embed=False)

    def description(memory: Memory) -> str:
        return next(s.description for s in memory.tools.specs if s.name == "search_memory")

    assert "by meaning" in description(with_meaning)
    assert "meaning" not in description(words_only) and "words" in description(words_only)
