"""The pydantic-ai adapter with real ``Agent``s driven by ``FunctionModel`` / ``TestModel``, on
every store: memory://, SQLite, PostgreSQL and MongoDB (mongomock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from memory_adapters_pydantic_ai import (
    MemoryAgent,
    MemoryCapability,
    from_messages,
    memory_toolset,
    to_messages,
)
from pydantic_ai import Agent, RunContext
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel
from test_pydantic_ai_store import STORES, on_sync_loop, open_memory

from memory_adapters import Memory, Message, NoScope, Scope, WorkingMemory, Writer, hookimpl
from memory_adapters.run import active_run
from memory_adapters.testing.pydantic_ai import sample_messages

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


@pytest.fixture(params=["memory", "sqlite"])
def local_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


# -- a scripted model -----------------------------------------------------------------------------


@dataclass
class Script:
    """A FunctionModel whose replies a test decides; it records every request it gets."""

    reply: Callable[[list[ModelMessage], AgentInfo], ModelResponse] | None = None
    requests: list[list[ModelMessage]] = field(default_factory=list)
    infos: list[AgentInfo] = field(default_factory=list)

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        self.infos.append(info)
        if self.reply is not None:
            return self.reply(messages, info)
        return ModelResponse(parts=[TextPart(f"answer {len(self.requests)}")])

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        response = self._answer(messages, info)
        for part in response.parts:
            if isinstance(part, TextPart):
                yield part.content

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self._answer, stream_function=self._stream)


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]


def shape(messages: list[ModelMessage]) -> Any:
    """Messages as JSON without their timestamps (a message rebuilt from the neutral form, such
    as one the window trimmed, gets a new one)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "timestamp"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def check_tool_structure(messages: list[ModelMessage]) -> None:
    """Every tool call is answered in the next request, and every result answers a call."""
    for i, m in enumerate(messages):
        if isinstance(m, ModelResponse) and m.tool_calls:
            assert i + 1 < len(messages), "the history ends in an unanswered tool call"
            answered = {
                p.tool_call_id for p in messages[i + 1].parts if isinstance(p, ToolReturnPart)
            }
            assert {c.tool_call_id for c in m.tool_calls} <= answered
        if isinstance(m, ModelRequest):
            results = {p.tool_call_id for p in m.parts if isinstance(p, ToolReturnPart)}
            if results:
                previous = messages[i - 1] if i else None
                assert isinstance(previous, ModelResponse), "a tool result without its call"
                assert results <= {c.tool_call_id for c in previous.tool_calls}


def stored(memory: Memory, conversation_id: str, **scope: Any) -> list[Message]:
    with memory.session(conversation_id=conversation_id, **scope):
        return [r.message for r in memory.conversation.read()]


# -- across processes -----------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, os, sys
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel
    from memory_adapters import Memory

    def model(messages, info):
        said = [p.content for m in messages for p in m.parts if p.part_kind == "user-prompt"]
        return ModelResponse(parts=[TextPart("Earlier you said: " + " | ".join(said[:-1]))])

    memory = Memory(os.environ["URL"], store_options=json.loads(os.environ["OPTIONS"]))
    agent = memory.wrap(Agent(FunctionModel(model)))
    with memory.session(user_id="alice", conversation_id="c-42"):
        print(agent.run_sync(sys.argv[1]).output)
    memory.close()
    """
)


@pytest.mark.processes
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_second_process_sees_the_first_ones_turn(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    options: dict[str, Any] = {}
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
        options = {"schema": "t_" + uuid.uuid4().hex[:12]}
    env = {**os.environ, "URL": url, "OPTIONS": json.dumps(options)}
    try:
        outputs = [
            subprocess.run(
                [sys.executable, "-c", CHILD, prompt],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
            ).stdout
            for prompt in ("My favourite tea is oolong", "Which tea do I like?")
        ]
    finally:
        if options:
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{options["schema"]}" CASCADE')
    assert "My favourite tea is oolong" in outputs[1]
    assert outputs[0].strip() == "Earlier you said:"


# -- the window -----------------------------------------------------------------------------------


def tool_turn(i: int) -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart(f"question {i}")]),
        ModelResponse(parts=[ToolCallPart("lookup", {"n": i}, f"call-{i}")]),
        ModelRequest(parts=[ToolReturnPart("lookup", {"found": i}, f"call-{i}")]),
        ModelResponse(parts=[TextPart(f"answer {i}")]),
    ]


def test_the_model_gets_exactly_the_budgeted_window_with_whole_tool_calls(memory: Memory) -> None:
    script = Script()
    agent = memory.wrap(Agent(script.model), history_tokens=300, tools=False, working=False)
    with memory.session(user_id="alice", conversation_id="long"):
        conv = memory.conversation
        for i in range(40):
            conv.append(to_messages(tool_turn(i)), run_id=f"r{i}")
        # a failed run left a call that never got its result
        conv.append(
            to_messages(
                [
                    ModelRequest(parts=[UserPromptPart("question 40")]),
                    ModelResponse(
                        parts=[TextPart("checking"), ToolCallPart("lookup", {}, "orphan")]
                    ),
                ]
            )
        )
        window = conv.window(max_tokens=300)
        agent.run_sync("new question")
    seen = script.requests[0]
    assert prompts(seen)[-1] == "new question"
    assert shape(seen[:-1]) == shape(from_messages(window.messages()))
    shown = prompts(seen[:-1])
    first = int(shown[0].split()[1])
    assert shown == [f"question {i}" for i in range(first, 41)]
    assert 0 < first < 40  # a strict, whole-turn tail of the conversation
    assert window.tokens <= 300
    check_tool_structure(seen)
    assert all(
        c.tool_call_id != "orphan"
        for m in seen
        if isinstance(m, ModelResponse)
        for c in m.tool_calls
    )
    assert any(isinstance(p, TextPart) and p.content == "checking" for m in seen for p in m.parts)


def test_a_window_starting_after_the_system_prompt_keeps_it_pinned(local_memory: Memory) -> None:
    memory = local_memory
    script = Script()
    agent = memory.wrap(
        Agent(script.model, system_prompt="You are a tea bot."), history_tokens=120, tools=False
    )
    with memory.session(conversation_id="pinned"):
        for i in range(12):
            agent.run_sync(f"turn {i} " + "words " * 10)
    last = script.requests[-1]
    first = last[0]
    assert isinstance(first, ModelRequest)
    assert first.parts[0].part_kind == "system-prompt"
    assert "turn 0" not in prompts(last) and "turn 11" in prompts(last)[-1]


# -- every entry point persists, once -------------------------------------------------------------


def run_every_entry_point(agent: Any) -> list[str]:
    """Run the agent once through each entry point; return the prompts used."""
    agent.run_sync("via run_sync")

    async def run_async() -> None:
        await agent.run("via run")
        async with agent.run_stream("via run_stream") as stream:
            assert (await stream.get_output()).startswith("answer")
        async with agent.iter("via iter") as agent_run:
            async for _ in agent_run:
                pass
        async with agent.run_stream_events("via run_stream_events") as events:
            async for _ in events:
                pass

    on_sync_loop(run_async())
    with agent.run_stream_sync("via run_stream_sync") as stream:
        assert stream.get_output().startswith("answer")
    return [
        "via run_sync",
        "via run",
        "via run_stream",
        "via iter",
        "via run_stream_events",
        "via run_stream_sync",
    ]


def test_all_six_entry_points_load_and_persist_exactly_once(memory: Memory) -> None:
    script = Script()
    agent = memory.wrap(Agent(script.model))
    with memory.session(user_id="alice", conversation_id="six"):
        used = run_every_entry_point(agent)
    messages = stored(memory, "six", user_id="alice")
    users = [m.text for m in messages if m.role == "user"]
    assert users == used  # each run's prompt stored once, in order
    assert [m.role for m in messages] == ["user", "assistant"] * 6
    with memory.session(user_id="alice", conversation_id="six"):
        records = memory.conversation.read()
    assert len({r.run_id for r in records}) == 6
    # every run after the first was given what the ones before it stored
    assert [len(prompts(r)) for r in script.requests] == [1, 2, 3, 4, 5, 6]


def test_the_wrapper_composes_and_leaves_the_agent_alone(local_memory: Memory) -> None:
    memory = local_memory
    script = Script()
    original = Agent(script.model, name="helper")
    before = dict(vars(original))
    agent = memory.wrap(original)
    assert isinstance(agent, MemoryAgent) and isinstance(agent, AbstractAgent)
    assert type(original) is Agent and agent.wrapped is original
    assert agent.name == "helper" and agent.model is original.model
    assert memory.wrap(agent).wrapped is original  # re-wrapping never stacks
    with memory.session(conversation_id="c"):
        agent.run_sync("with memory")
    original.run_sync("without memory")
    assert vars(original).keys() == before.keys()
    assert [m.text for m in stored(memory, "c") if m.role == "user"] == ["with memory"]
    assert len(prompts(script.requests[-1])) == 1  # the bare agent saw no memory


def test_history_given_by_the_caller_is_used_as_given(local_memory: Memory) -> None:
    memory = local_memory
    script = Script()
    agent = memory.wrap(Agent(script.model))
    with memory.session(conversation_id="c"):
        first = agent.run_sync("one")
        agent.run_sync("two", message_history=first.all_messages())
        agent.run_sync("three", message_history=[])
    assert prompts(script.requests[1]) == ["one", "two"]
    assert prompts(script.requests[2]) == ["one", "two", "three"]  # [] is no history: loaded
    assert [m.text for m in stored(memory, "c") if m.role == "user"] == ["one", "two", "three"]


# -- failures -------------------------------------------------------------------------------------


def test_a_failed_run_keeps_what_completed_marked_failed(memory: Memory) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if prompts(messages)[-1] == "break it":
            return ModelResponse(parts=[ToolCallPart("explode", {}, "call-x")])
        return ModelResponse(parts=[TextPart("fine")])

    script = Script(reply)
    base = Agent(script.model)

    @base.tool_plain
    def explode() -> str:
        raise RuntimeError("the tool broke")

    agent = memory.wrap(base)
    with memory.session(conversation_id="f"):
        agent.run_sync("hello")
        with pytest.raises(RuntimeError, match="the tool broke"):
            agent.run_sync("break it")
        agent.run_sync("after")
    messages = stored(memory, "f")
    failed = [m for m in messages if m.meta.get("failed")]
    assert [m.role for m in failed] == ["user", "assistant"]
    assert failed[0].text == "break it" and failed[1].tool_calls[0].id == "call-x"
    assert not any(m.meta.get("failed") for m in messages if m.text in ("hello", "after"))
    check_tool_structure(script.requests[-1])  # the orphan call never reaches the model
    assert "break it" in prompts(script.requests[-1])


def test_an_abandoned_iter_run_keeps_what_completed(local_memory: Memory) -> None:
    memory = local_memory
    script = Script()
    agent = memory.wrap(Agent(script.model))

    async def main() -> None:
        async with memory.session(conversation_id="i"), agent.iter("stop early") as agent_run:
            async for node in agent_run:
                if Agent.is_call_tools_node(node):
                    break

    on_sync_loop(main())
    messages = stored(memory, "i")
    assert [m.text for m in messages if m.role == "user"] == ["stop early"]
    assert all(m.meta.get("failed") for m in messages)


# -- scope ----------------------------------------------------------------------------------------


def test_no_conversation_in_scope_is_a_clear_error(local_memory: Memory) -> None:
    memory = local_memory
    agent = memory.wrap(Agent(TestModel()))
    with pytest.raises(NoScope, match="conversation_id"):
        agent.run_sync("hello")
    with memory.session(user_id="alice"), pytest.raises(NoScope):
        agent.run_sync("hello")
    assert memory.store.last_seq(Scope(conversation_id="x").conversation_key) == 0


def test_scope_from_the_run_argument_the_session_and_resolvers(local_memory: Memory) -> None:
    memory = local_memory

    @dataclass
    class Deps:
        user: str
        thread: str

    script = Script()
    plain = memory.wrap(Agent(script.model))
    plain.run_sync("by argument", conversation_id="arg")
    with memory.session(conversation_id="sess"):
        result = plain.run_sync("by session")
        assert result.conversation_id == "sess"  # pydantic-ai's own id agrees with memory's
        plain.run_sync("argument beats session", conversation_id="arg")

    async def user_of(ctx: RunContext[Deps]) -> str:  # resolvers may be async
        return ctx.deps.user

    resolved = memory.wrap(
        Agent(script.model, deps_type=Deps),
        user_id=user_of,
        conversation_id=lambda ctx: ctx.deps.thread,
    )
    resolved.run_sync("by resolver", deps=Deps("bob", "t-1"))
    assert [m.text for m in stored(memory, "arg") if m.role == "user"] == [
        "by argument",
        "argument beats session",
    ]
    assert [m.text for m in stored(memory, "sess") if m.role == "user"] == ["by session"]
    assert [m.text for m in stored(memory, "t-1", user_id="bob") if m.role == "user"] == [
        "by resolver"
    ]


def test_the_native_capability_works_on_the_agent_and_per_run(local_memory: Memory) -> None:
    memory = local_memory
    script = Script()
    built = Agent(script.model, capabilities=[MemoryCapability(memory, conversation_id="native")])
    built.run_sync("on the agent")
    built.run_sync("again")
    assert prompts(script.requests[-1]) == ["on the agent", "again"]
    bare = Agent(script.model)
    bare.run_sync("per run", capabilities=[MemoryCapability(memory, conversation_id="per-run")])
    assert [m.text for m in stored(memory, "per-run") if m.role == "user"] == ["per run"]


# -- tools and instructions -----------------------------------------------------------------------


def call_tool(name: str, args: dict[str, Any], then: str = "done") -> Script:
    """A model that calls one tool, then answers with what it returned."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"{then}: {returns[0].content}")])
        return ModelResponse(parts=[ToolCallPart(name, args, f"call-{uuid.uuid4().hex[:6]}")])

    return Script(reply)


def test_tool_schemas_name_no_scope_and_a_forged_argument_changes_nothing(memory: Memory) -> None:
    forged = call_tool("save_memory", {"key": "tea", "value": "oolong", "user_id": "bob"})
    agent = memory.wrap(Agent(forged.model, retries=0))
    with (
        memory.session(user_id="alice", conversation_id="c"),
        pytest.raises(UnexpectedModelBehavior),
    ):
        agent.run_sync("remember my tea")
    tools = {t.name: t for t in forged.infos[0].function_tools}
    assert {
        "save_memory",
        "recall_memory",
        "search_memory",
        "list_memories",
        "forget_memory",
    } <= set(tools)
    for tool in tools.values():
        params = json.dumps(tool.parameters_json_schema).lower()
        for word in ("user", "scope", "namespace", "owner", "agent_id", "conversation"):
            assert word not in params, (tool.name, word)
    with memory.session(user_id="bob"):
        assert memory.facts.all() == []
    with memory.session(user_id="alice"):
        assert memory.facts.all() == []  # refused, not stored anywhere
    honest = call_tool("save_memory", {"key": "tea", "value": "oolong"})
    with memory.session(user_id="alice", conversation_id="c"):
        memory.wrap(Agent(honest.model)).run_sync("remember my tea")
    with memory.session(user_id="alice"):
        assert memory.facts.get("tea") is not None
    with memory.session(user_id="bob"):
        assert memory.facts.all() == []


def test_two_users_never_see_each_others_facts_or_notes(memory: Memory) -> None:
    with memory.session(user_id="alice", conversation_id="shared-id"):
        memory.facts.put("tea", "Alice drinks oolong")
        memory.working.set("plan", "alice's secret plan")
    search = call_tool("search_memory", {"query": "tea oolong"}, then="found")
    agent = memory.wrap(Agent(search.model), preload_facts=5)
    with memory.session(user_id="bob", conversation_id="shared-id"):
        result = agent.run_sync("what tea do I drink?")
    assert result.output == "found: []"
    instructions = search.infos[0].instructions or ""
    assert "oolong" not in instructions and "secret" not in instructions
    assert stored(memory, "shared-id", user_id="alice") == []
    with memory.session(user_id="alice", conversation_id="shared-id"):
        result = agent.run_sync("what tea do I drink?")
    assert "Alice drinks oolong" in result.output
    assert "Alice drinks oolong" in (search.infos[-1].instructions or "")
    assert "alice's secret plan" in (search.infos[-1].instructions or "")


def test_instructions_hold_the_tool_guidance_and_the_working_memory(local_memory: Memory) -> None:
    memory = local_memory
    script = Script()
    agent = memory.wrap(Agent(script.model, instructions="Be kind."))
    with memory.session(user_id="alice", conversation_id="c"):
        memory.working.set("goal", "plan a tea tasting", importance=1.0)
        agent.run_sync("hi")
    text = script.infos[0].instructions or ""
    assert text.startswith("Be kind.")
    assert memory.tools.instructions in text
    assert "- goal: plan a tea tasting" in text
    quiet = memory.wrap(Agent(script.model), tools=False, working=False)
    with memory.session(user_id="alice", conversation_id="c"):
        quiet.run_sync("hi")
    assert not script.infos[-1].instructions
    assert not [t for t in script.infos[-1].function_tools if t.name.endswith("memory")]


def test_memory_toolset_is_bound_to_its_scope(local_memory: Memory) -> None:
    memory = local_memory
    script = call_tool("save_memory", {"key": "k", "value": "v"})
    agent = Agent(script.model, toolsets=[memory_toolset(memory, Scope(user_id="carol"))])
    agent.run_sync("save")
    with memory.session(user_id="carol"):
        assert memory.facts.get("k") is not None


def test_the_before_model_call_hook_can_rewrite_what_the_model_gets(local_memory: Memory) -> None:
    memory = local_memory

    class Rewrite:
        @hookimpl
        def before_model_call(
            self, run: Any, messages: list[Message], instructions: list[str]
        ) -> None:
            instructions.append("Answer in French.")
            for m in messages:
                if m.role == "user":
                    m.text = m.text.replace("secret", "[hidden]")

    memory.register(Rewrite(), name="rewrite")
    script = Script()
    agent = memory.wrap(Agent(script.model))
    with memory.session(conversation_id="c"):
        agent.run_sync("my secret is safe")
    assert "Answer in French." in (script.infos[0].instructions or "")
    assert prompts(script.requests[0]) == ["my [hidden] is safe"]
    assert [m.text for m in stored(memory, "c") if m.role == "user"] == ["my secret is safe"]


# -- sub-agents -----------------------------------------------------------------------------------


def delegating_agent(memory: Memory, sub: Any, seen: dict[str, Any]) -> Agent[None, str]:
    """A parent agent whose tool runs ``sub`` and records in ``seen`` what it finds."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("delegated")])
        return ModelResponse(parts=[ToolCallPart("delegate", {"task": "find a tea shop"}, "d1")])

    parent = Agent(Script(reply).model)

    @parent.tool
    async def delegate(ctx: RunContext[Any], task: str) -> str:
        seen["parent_scope"] = memory.scope
        result = await sub.run(task, usage=ctx.usage)
        seen["after"] = memory.working.get("shop")
        return str(result.output)

    return parent


def sub_agent(memory: Memory, seen: dict[str, Any], **options: Any) -> Any:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("Tea House, 5th Street")])
        return ModelResponse(parts=[ToolCallPart("research", {}, "r1")])

    sub = Agent(Script(reply).model, name="researcher")

    @sub.tool_plain
    def research() -> str:
        seen["sub_scope"] = memory.scope
        run = active_run(memory)
        assert run is not None
        seen["sub_conversation"] = run.conversation.conversation_id
        seen["goal_in_fork"] = memory.working.get("goal")  # reads through to the parent
        memory.working.set("shop", "Tea House, 5th Street")
        parent_scope = seen["parent_scope"]
        seen["parent_during"] = WorkingMemory(memory, parent_scope).get("shop")
        seen["facts"] = [f.key for f in memory.facts.all()]
        return "found"

    return memory.wrap(sub, **options)


def test_a_sub_agent_works_on_a_fork_and_merges_back(memory: Memory) -> None:
    sub_seen: dict[str, Any] = {}
    parent = memory.wrap(delegating_agent(memory, sub_agent(memory, sub_seen), sub_seen))
    with memory.session(user_id="alice", conversation_id="trip"):
        memory.facts.put("tea", "oolong")
        memory.working.set("goal", "plan a tasting")
        assert parent.run_sync("plan my tasting").output == "delegated"
        assert memory.working.get("shop") == "Tea House, 5th Street"  # merged
    assert sub_seen["goal_in_fork"] == "plan a tasting"
    assert sub_seen["parent_during"] is None  # the notes stayed in the fork until the merge
    assert sub_seen["after"] == "Tea House, 5th Street"
    assert sub_seen["facts"] == ["tea"]  # the same user's facts
    sub_scope: Scope = sub_seen["sub_scope"]
    assert sub_scope.user_id == "alice" and len(sub_scope.fork) == 1
    assert sub_scope.fork[0].startswith("researcher@")  # a fork of this sub-agent run alone
    assert sub_scope.conversation_id == "trip"  # its working memory is a fork of trip's
    assert sub_seen["sub_conversation"] == "trip/researcher"  # its messages are its own
    assert [m.text for m in stored(memory, "trip", user_id="alice") if m.role == "user"] == [
        "plan my tasting"
    ]
    assert [
        m.text for m in stored(memory, "trip/researcher", user_id="alice") if m.role == "user"
    ] == ["find a tea shop"]


def test_a_sub_agent_fork_without_merge_keeps_its_notes(local_memory: Memory) -> None:
    memory = local_memory
    seen: dict[str, Any] = {}
    sub = sub_agent(memory, seen, merge=None, sub_conversation="per_run")
    parent = memory.wrap(delegating_agent(memory, sub, seen))
    with memory.session(user_id="alice", conversation_id="trip"):
        parent.run_sync("plan")
        assert memory.working.get("shop") is None
        fork = memory.working.fork(seen["sub_scope"].fork[-1])  # the run's own fork
        assert fork.get("shop") == "Tea House, 5th Street"
        fork.merge()
        assert memory.working.get("shop") == "Tea House, 5th Street"
    assert seen["sub_conversation"].startswith("trip/researcher/")


# -- the mapping ----------------------------------------------------------------------------------


def test_messages_round_trip_exactly_and_map_faithfully() -> None:
    messages = sample_messages()
    neutral = to_messages(messages)
    assert from_messages(neutral) == messages
    assert [m.role for m in neutral] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert neutral[2].text == "Let me check."
    assert [(c.id, c.name, c.args) for c in neutral[2].tool_calls] == [
        ("call-1", "get_weather", {"city": "Lisbon", "units": ["c"]}),
        ("call-2", "get_time", {"tz": "WET"}),
    ]
    assert [(r.id, r.name, r.content, r.is_error) for r in neutral[3].tool_results] == [
        ("call-1", "get_weather", {"celsius": 21, "sky": "sunny ☀"}, False),
        ("call-2", "get_time", "boom", True),
    ]
    assert neutral[5].text.endswith("and \ntomorrow?") or "tomorrow?" in neutral[5].text
    for m in neutral:
        m.validate()  # plain JSON: storable as it is
    # without raw (another framework wrote it), the neutral form still makes valid messages
    rebuilt = from_messages([Message.from_dict({**m.to_dict(), "raw": None}) for m in neutral])
    check_tool_structure(rebuilt)
    assert prompts(rebuilt)[0] == "Weather in Lisbon?"


def test_parts_of_two_messages_are_never_taken_for_one() -> None:
    first = ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("first question")])
    later = ModelRequest(
        parts=[ToolReturnPart("lookup", "42", "call-1"), UserPromptPart("later question")]
    )
    head = to_messages([first])  # [system (raw), user]
    tail = to_messages([later])  # [tool (raw), user]
    # a window: the pinned system prompt, then a tail that starts at the later user prompt
    window = [head[0], tail[1]]
    rebuilt = from_messages(window)
    assert prompts(rebuilt) == ["later question"]
    assert rebuilt[0].parts[0].part_kind == "system-prompt"


def test_messages_written_by_another_framework_are_read_from_the_neutral_form(
    local_memory: Memory,
) -> None:
    memory = local_memory
    script = Script()
    agent = memory.wrap(Agent(script.model), tools=False)
    from memory_adapters import ToolCall, ToolResult

    with memory.session(conversation_id="mixed"):
        memory.conversation.append(
            [
                Message.user("Weather?"),
                Message.assistant("", [ToolCall("lc-1", "weather", {"city": "Porto"})]),
                Message.tool(ToolResult("lc-1", "sunny", name="weather")),
                Message.assistant("Sunny."),
            ]
        )
        agent.run_sync("thanks")
    seen = script.requests[0]
    check_tool_structure(seen)
    assert prompts(seen) == ["Weather?", "thanks"]
    call = next(m for m in seen if isinstance(m, ModelResponse) and m.tool_calls).tool_calls[0]
    assert (call.tool_call_id, call.tool_name, call.args_as_dict()) == (
        "lc-1",
        "weather",
        {"city": "Porto"},
    )


# -- installation ---------------------------------------------------------------------------------


def test_the_plugin_loads_without_pydantic_ai() -> None:
    code = textwrap.dedent(
        """
        import sys
        # as if the extra were not installed: pydantic-ai and what it brings (anyio)
        sys.modules["pydantic_ai"] = None
        sys.modules["anyio"] = None
        import memory_adapters_pydantic_ai as plugin
        import memory_adapters.testing.pydantic_ai
        from memory_adapters import Memory, MissingExtra, NoAdapter
        memory = Memory("memory://")
        assert "pydantic-ai" not in memory.adapters, memory.adapters  # only those installed
        try:
            memory.wrap(object())
        except NoAdapter:
            pass
        try:
            plugin.MemoryCapability
        except MissingExtra as exc:
            print(exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert 'pip install "memory-adapters[pydantic-ai]"' in out.stdout


def test_wrap_refuses_unknown_options_and_bad_values(local_memory: Memory) -> None:
    agent = Agent(TestModel())
    with pytest.raises(ValueError, match="unknown option"):
        local_memory.wrap(agent, user="alice")
    for bad in ({"merge": "sometimes"}, {"sub_conversation": "shared"}, {"preload_facts": -1}):
        with pytest.raises(ValueError):
            local_memory.wrap(agent, **bad)


def test_test_model_runs_with_memory_tools(local_memory: Memory) -> None:
    memory = local_memory
    agent = memory.wrap(Agent(TestModel(call_tools=["list_memories"])))
    with memory.session(user_id="alice", conversation_id="tm"):
        memory.facts.put("tea", "oolong")
        result = agent.run_sync("what do you remember?")
    assert "oolong" in result.output
    check_tool_structure(result.all_messages())


def test_streamed_tool_calls_persist_whole(local_memory: Memory) -> None:
    memory = local_memory

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        if not any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            yield {0: DeltaToolCall(name="list_memories", json_args="{}", tool_call_id="s1")}
            return
        yield "listed"

    agent = memory.wrap(Agent(FunctionModel(stream_function=stream)))

    async def main() -> None:
        async with (
            memory.session(user_id="alice", conversation_id="st"),
            agent.run_stream("list") as result,
        ):
            assert await result.get_output() == "listed"

    on_sync_loop(main())
    roles = [m.role for m in stored(memory, "st", user_id="alice")]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_fact_history_names_the_run_when_the_model_saves(memory: Memory) -> None:
    """A fact the model saves through the memory tool is written by that run's model; what
    the application writes is the application's (issue 14: the model cannot forge it)."""
    honest = call_tool("save_memory", {"key": "tea", "value": "oolong"})
    agent = memory.wrap(Agent(honest.model, name="barista"))
    with memory.session(user_id="alice", conversation_id="history"):
        result = agent.run_sync("remember my tea")
        memory.facts.put("tea", "sencha")
        by_app, by_model = memory.facts.history("tea")
    assert by_app.writer == Writer() and by_app.value == "sencha"
    assert (by_model.op, by_model.value, by_model.version) == ("put", "oolong", 1)
    writer = by_model.writer
    assert (writer.kind, writer.framework, writer.agent) == ("model", "pydantic-ai", "barista")
    assert writer.model  # the model the agent ran with
    # the run id is the one the run's messages were stored under
    key = Scope(namespace=memory.namespace, user_id="alice", conversation_id="history")
    assert {r.run_id for r in memory.store.read(key.conversation_key)} == {writer.run_id}
    assert result.output
