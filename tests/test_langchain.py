"""The LangChain adapter with real ``create_agent`` agents driven by a scripted chat model that
supports ``bind_tools``, on every store: memory://, SQLite, PostgreSQL and MongoDB
(mongomock). Both surfaces: ``MemoryMiddleware`` and ``memory.wrap(agent)``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from memory_adapters_langchain import (
    MemoryGraph,
    MemoryMiddleware,
    from_messages,
    memory_tools,
    to_messages,
)
from stores import STORES, open_memory

from memory_adapters import (
    InvalidInput,
    Memory,
    Message,
    NoScope,
    ToolCall,
    ToolResult,
    WorkingMemory,
    Writer,
    hookimpl,
)
from memory_adapters.run import Run, active_run
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool

ROOT = Path(__file__).resolve().parent.parent

Surface = Callable[..., Any]
"""Builds an agent with memory: (memory, model, tools, **create_agent options) -> agent."""


def with_middleware(memory: Memory, model: Any, tools: list[Any], **options: Any) -> Any:
    return make_agent(model, tools=tools, middleware=[MemoryMiddleware(memory)], **options)


def wrapped(memory: Memory, model: Any, tools: list[Any], **options: Any) -> Any:
    return memory.wrap(make_agent(model, tools=tools, **options))


def make_agent(model: Any, **options: Any) -> Any:
    """``create_agent``, typed loosely: tests pass LangChain's message shorthands."""
    return create_agent(model, **options)


SURFACES = {"middleware": with_middleware, "wrap": wrapped}


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


@pytest.fixture(params=["memory", "sqlite"])
def local_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


@pytest.fixture(params=sorted(SURFACES))
def surface(request: pytest.FixtureRequest) -> Surface:
    return SURFACES[request.param]


def stored(memory: Memory, conversation_id: str, user_id: str | None = None) -> list[Message]:
    with memory.session(conversation_id=conversation_id, user_id=user_id):
        return [r.message for r in memory.conversation.read()]


def texts(messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in messages]


def check_pairs(messages: list[BaseMessage]) -> None:
    """Every tool call is answered right after its message, every result answers a call."""
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in open_calls, f"orphan tool result {m.tool_call_id}"
            open_calls.discard(m.tool_call_id)
            continue
        assert not open_calls, f"unanswered tool calls {open_calls}"
        if isinstance(m, AIMessage):
            open_calls = {c["id"] or "" for c in m.tool_calls}
    assert not open_calls, "the history ends in an unanswered tool call"


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


# -- every entry point, exactly once ---------------------------------------------------------------


def test_every_entry_point_persists_exactly_once(memory: Memory, surface: Surface) -> None:
    model = ScriptedChatModel([call_tool("weather", city="Lisbon"), "It is sunny."])
    model.script.extend(f"answer {i}" for i in range(2, 8))
    agent = surface(memory, model, [weather], system_prompt="Be brief.")
    config = {"configurable": {"thread_id": "c-1", "user_id": "alice"}}
    agent.invoke({"messages": [{"role": "user", "content": "invoke"}]}, config)
    for _ in agent.stream({"messages": [("user", "stream")]}, config, stream_mode="updates"):
        pass

    async def run_async() -> None:
        await agent.ainvoke({"messages": [("user", "ainvoke")]}, config)
        async for _ in agent.astream({"messages": [("user", "astream")]}, config):
            pass

    asyncio.run(run_async())
    agent.batch([{"messages": [("user", "batch")]}], config)
    got = stored(memory, "c-1", "alice")
    assert texts(got) == [
        ("user", "invoke"),
        ("assistant", ""),
        ("tool", ""),
        ("assistant", "It is sunny."),
        ("user", "stream"),
        ("assistant", "answer 2"),
        ("user", "ainvoke"),
        ("assistant", "answer 3"),
        ("user", "astream"),
        ("assistant", "answer 4"),
        ("user", "batch"),
        ("assistant", "answer 5"),
    ]
    assert got[1].tool_calls[0].name == "weather"
    assert got[2].tool_results[0].content == "sunny in Lisbon"
    # each run's model saw the earlier turns, once, then its own prompt
    last = model.calls[-1]
    assert isinstance(last[0], SystemMessage) and last[0].text.startswith("Be brief.")
    assert [m.text for m in last[1:]] == [m.text for m in from_messages(got[:-1])]


def test_stream_modes_are_what_the_caller_asked_for(local_memory: Memory) -> None:
    agent = wrapped(local_memory, ScriptedChatModel(["hi"]), [])
    config = {"configurable": {"thread_id": "s"}}
    single = list(agent.stream({"messages": [("user", "a")]}, config, stream_mode="values"))
    assert all(isinstance(p, dict) and "messages" in p for p in single)
    several = list(
        agent.stream({"messages": [("user", "b")]}, config, stream_mode=["messages", "custom"])
    )
    assert {mode for mode, _ in several} == {"messages"}
    v2 = list(agent.stream({"messages": [("user", "c")]}, config, version="v2"))
    bare = make_agent(ScriptedChatModel(["hi"])).stream({"messages": [("user", "c")]}, version="v2")
    assert {p["type"] for p in v2} == {p["type"] for p in bare}
    assert len(stored(local_memory, "s")) == 6


INVOKE_OPTIONS: list[dict[str, Any]] = [
    {},
    {"stream_mode": "updates"},
    {"stream_mode": ["updates", "messages"]},
    {"version": "v2"},
    {"stream_mode": "updates", "version": "v2"},
    {"stream_mode": ["values"], "subgraphs": True},
]


def outline(value: Any) -> Any:
    """The shape of an invoke result, without message ids and contents."""
    if isinstance(value, dict):
        return {k: outline(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [outline(v) for v in value]
    return type(value).__name__


def test_a_wrapped_invoke_returns_what_the_graph_returns(local_memory: Memory) -> None:
    """MemoryGraph collects invoke's result from the graph's stream, as LangGraph does."""
    for i, options in enumerate(INVOKE_OPTIONS):
        config = {"configurable": {"thread_id": f"shape-{i}"}}
        hi = {"messages": [("user", "hi")]}
        bare = make_agent(ScriptedChatModel(["ok"])).invoke(hi, config, **options)
        agent = wrapped(local_memory, ScriptedChatModel(["ok"]), [])
        got = agent.invoke(hi, config, **options)
        assert type(got) is type(bare), options
        if not options.get("version"):
            assert outline(got) == outline(bare), options
        assert texts(stored(local_memory, f"shape-{i}")) == [("user", "hi"), ("assistant", "ok")]


# -- a second process ------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, os, sys
    from langchain.agents import create_agent
    from memory_adapters import Memory
    from memory_adapters_langchain import MemoryMiddleware
    from memory_adapters.testing.langchain import ScriptedChatModel

    def answer(messages):
        earlier = [m.text for m in messages if m.type == "human"][:-1]
        return "Earlier you said: " + " | ".join(earlier)

    memory = Memory(os.environ["URL"], store_options=json.loads(os.environ["OPTIONS"]))
    agent = create_agent(ScriptedChatModel([answer]), middleware=[MemoryMiddleware(memory)])
    config = {"configurable": {"thread_id": "c-42", "user_id": "alice"}}
    out = agent.invoke({"messages": [("user", sys.argv[1])]}, config)
    print(out["messages"][-1].text)
    memory.close()
    """
)


@pytest.mark.processes
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_second_process_remembers(
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
    assert outputs[0].strip() == "Earlier you said:"
    assert outputs[1].strip() == "Earlier you said: My favourite tea is oolong"


# -- the window ------------------------------------------------------------------------------------


def tool_turn(i: int) -> list[Message]:
    call = f"call-{i}"
    return [
        Message.user(f"question {i}"),
        Message.assistant(tool_calls=[ToolCall(call, "lookup", {"n": i})]),
        Message.tool(ToolResult(call, {"found": i}, "lookup")),
        Message.assistant(f"answer {i}"),
    ]


def test_the_model_gets_the_budgeted_window_with_whole_tool_calls(
    memory: Memory, surface: Surface
) -> None:
    with memory.session(conversation_id="long"):
        for i in range(40):
            memory.conversation.append(tool_turn(i))
        window = memory.conversation.window(max_tokens=120)
    model = ScriptedChatModel(["fine"])
    if surface is with_middleware:
        agent = make_agent(
            model, middleware=[MemoryMiddleware(memory, history_tokens=120, tools=False)]
        )
    else:
        agent = memory.wrap(make_agent(model), history_tokens=120)
    agent.invoke({"messages": [("user", "next")]}, {"configurable": {"thread_id": "long"}})
    seen = [m for m in model.calls[0] if not isinstance(m, SystemMessage)]
    expected = from_messages(window.messages())
    assert [m.text for m in seen[:-1]] == [m.text for m in expected]
    assert 0 < len(expected) < 40 * 4
    assert isinstance(seen[0], HumanMessage)
    assert seen[-1].text == "next"
    check_pairs(seen)
    # the window is the newest turns
    assert seen[-2].text == "answer 39"


def test_with_a_checkpointer_nothing_is_duplicated(memory: Memory) -> None:
    model = ScriptedChatModel([call_tool("weather", city="Oslo"), "snow?", "a2", "a3"])
    saver = InMemorySaver()
    agent = with_middleware(memory, model, [weather], checkpointer=saver)
    config = {"configurable": {"thread_id": "t-1"}}
    for q in ("q1", "q2", "q3"):
        out = agent.invoke({"messages": [("user", q)]}, config)
    expected = [
        ("user", "q1"),
        ("assistant", ""),
        ("tool", ""),
        ("assistant", "snow?"),
        ("user", "q2"),
        ("assistant", "a2"),
        ("user", "q3"),
        ("assistant", "a3"),
    ]
    assert texts(stored(memory, "t-1")) == expected
    # the thread's state has every message once; the model saw every message once
    as_langchain = from_messages(stored(memory, "t-1"))
    assert out["messages"] == as_langchain
    assert model.calls[-1][1:] == as_langchain[:-1]
    ids = [m.id for m in model.calls[-1]]
    assert len(ids) == len(set(ids))
    # the private keys stay out of the output, and the window never enters the state
    assert set(out) == {"messages"}
    state = agent.get_state(config).values
    assert len(state["messages"]) == len(expected)


def test_a_wrapped_agent_with_a_checkpointer_stores_each_message_once(
    local_memory: Memory,
) -> None:
    model = ScriptedChatModel(["a1", "a2"])
    agent = wrapped(local_memory, model, [], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t-2"}}
    agent.invoke({"messages": [("user", "q1")]}, config)
    agent.invoke({"messages": [("user", "q2")]}, config)
    assert texts(stored(local_memory, "t-2")) == [
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
        ("assistant", "a2"),
    ]
    assert [m.text for m in model.calls[-1]] == ["q1", "a1", "q2"]


def test_a_wrapped_agents_thread_is_the_sessions_conversation(memory: Memory) -> None:
    """With a checkpointer and no thread_id, memory.wrap runs the graph on the thread of the
    run's conversation, by its key: two users' conversations of one id never share a thread."""
    model = ScriptedChatModel(["a1", "a2", "b1"])
    agent = wrapped(memory, model, [], checkpointer=InMemorySaver())
    with memory.session(user_id="alice", conversation_id="c"):
        agent.invoke({"messages": [("user", "q1")]})
        asyncio.run(agent.ainvoke({"messages": [("user", "q2")]}))
        assert [m.text for m in model.calls[-1]] == ["q1", "a1", "q2"]  # the thread, once
        thread = {"configurable": {"thread_id": memory.scope.conversation_key}}
        assert thread["configurable"]["thread_id"] == "default:alice:c"
        assert [m.text for m in agent.get_state(thread).values["messages"]] == [
            "q1",
            "a1",
            "q2",
            "a2",
        ]
    with memory.session(user_id="bob", conversation_id="c"):
        agent.invoke({"messages": [("user", "hi")]})
        assert [m.text for m in model.calls[-1]] == ["hi"]  # not alice's thread
    assert texts(stored(memory, "c", "alice")) == [
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
        ("assistant", "a2"),
    ]
    assert texts(stored(memory, "c", "bob")) == [("user", "hi"), ("assistant", "b1")]


def test_the_middleware_with_a_checkpointer_needs_a_thread_id(local_memory: Memory) -> None:
    """LangGraph refuses a checkpointed run without a thread_id before any middleware runs:
    the session's conversation cannot stand in for it there."""
    agent = with_middleware(
        local_memory, ScriptedChatModel(["ok"]), [], checkpointer=InMemorySaver()
    )
    with local_memory.session(conversation_id="c"):
        with pytest.raises(ValueError, match=r"Checkpointer requires .* thread_id"):
            agent.invoke({"messages": [("user", "hi")]})
        assert local_memory.conversation.last_seq() == 0
        agent.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "c"}})
        assert local_memory.conversation.last_seq() == 2


def test_a_thread_started_before_the_middleware_is_stored_once(local_memory: Memory) -> None:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "old"}}
    plain = make_agent(ScriptedChatModel(["before"]), checkpointer=saver)
    plain.invoke({"messages": [("user", "earlier")]}, config)
    agent = with_middleware(local_memory, ScriptedChatModel(["after"]), [], checkpointer=saver)
    agent.invoke({"messages": [("user", "now")]}, config)
    assert texts(stored(local_memory, "old")) == [
        ("user", "earlier"),
        ("assistant", "before"),
        ("user", "now"),
        ("assistant", "after"),
    ]


# -- failures --------------------------------------------------------------------------------------


class Broken(RuntimeError):
    pass


@tool
def explode(reason: str) -> str:
    """A tool that fails."""
    raise Broken(reason)


def test_a_tool_that_raises_leaves_the_completed_steps_stored(memory: Memory) -> None:
    model = ScriptedChatModel(
        [call_tool("weather", city="Rome"), call_tool("explode", reason="boom"), "recovered"]
    )
    agent = with_middleware(memory, model, [weather, explode])
    config = {"configurable": {"thread_id": "f-1"}}
    with pytest.raises(Broken):
        agent.invoke({"messages": [("user", "go")]}, config)
    got = stored(memory, "f-1")
    assert [m.role for m in got] == ["user", "assistant", "tool", "assistant"]
    assert got[2].tool_results[0].content == "sunny in Rome"
    assert got[3].tool_calls[0].name == "explode"
    # the next run sees the completed steps without the call that was never answered
    agent.invoke({"messages": [("user", "again")]}, config)
    seen = [m for m in model.calls[-1] if not isinstance(m, SystemMessage)]
    check_pairs(seen)
    assert [type(m).__name__ for m in seen] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "HumanMessage",
    ]


def test_a_raising_call_keeps_the_results_its_sibling_calls_returned(memory: Memory) -> None:
    both = AIMessage(
        content="",
        tool_calls=[
            {"name": "weather", "args": {"city": "Rome"}, "id": "ok-1"},
            {"name": "explode", "args": {"reason": "boom"}, "id": "bad-1"},
            {"name": "weather", "args": {"city": "Oslo"}, "id": "ok-2"},
        ],
    )
    agent = with_middleware(memory, ScriptedChatModel([both]), [weather, explode])
    # one call at a time, in call order: the first has returned when the second raises
    config = {"configurable": {"thread_id": "f-4"}, "max_concurrency": 1}
    with pytest.raises(Broken):
        agent.invoke({"messages": [("user", "go")]}, config)
    got = stored(memory, "f-4")
    assert [m.role for m in got] == ["user", "assistant", "tool"]
    assert [c.id for c in got[1].tool_calls] == ["ok-1", "bad-1", "ok-2"]
    assert got[2].tool_results[0].id == "ok-1"


def test_a_wrapped_run_that_raises_keeps_what_completed_marked_failed(
    local_memory: Memory,
) -> None:
    model = ScriptedChatModel([call_tool("explode", reason="x")])
    agent = wrapped(local_memory, model, [explode])
    with pytest.raises(Broken):
        agent.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "f-2"}})
    got = stored(local_memory, "f-2")
    assert texts(got) == [("user", "go"), ("assistant", "")]  # the input, the model's step
    assert all(m.meta["failed"] is True for m in got)
    assert got[1].tool_calls[0].name == "explode"


def test_a_wrapped_run_with_a_checkpointer_keeps_what_completed(local_memory: Memory) -> None:
    model = ScriptedChatModel([call_tool("weather", city="Bern"), call_tool("explode", reason="x")])
    agent = wrapped(local_memory, model, [weather, explode], checkpointer=InMemorySaver())
    with pytest.raises(Broken):
        agent.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "f-3"}})
    got = stored(local_memory, "f-3")
    assert [m.role for m in got] == ["user", "assistant", "tool", "assistant"]
    assert all(m.meta.get("failed") for m in got)


# -- scope -----------------------------------------------------------------------------------------


@dataclass
class Context:
    user_id: str
    conversation_id: str


def test_scope_comes_from_config_context_session_and_resolvers(local_memory: Memory) -> None:
    memory = local_memory
    model = ScriptedChatModel(["ok"])
    agent = with_middleware(memory, model, [], context_schema=Context)
    agent.invoke({"messages": [("user", "by context")]}, context=Context("ann", "ctx-1"))
    assert texts(stored(memory, "ctx-1", "ann")) == [("user", "by context"), ("assistant", "ok")]
    agent2 = with_middleware(memory, model, [])
    agent2.invoke(
        {"messages": [("user", "by config")]},
        {"configurable": {"thread_id": "cfg-1", "user_id": "bob"}},
    )
    assert len(stored(memory, "cfg-1", "bob")) == 2
    with memory.session(user_id="cy", conversation_id="sess-1"):
        agent2.invoke({"messages": [("user", "by session")]})
    assert len(stored(memory, "sess-1", "cy")) == 2
    resolved = make_agent(
        model,
        middleware=[
            MemoryMiddleware(memory, conversation_id=lambda runtime: "res-1", user_id="dee")
        ],
    )
    resolved.invoke({"messages": [("user", "by resolver")]}, {"configurable": {"thread_id": "x"}})
    assert len(stored(memory, "res-1", "dee")) == 2
    graph = memory.wrap(
        make_agent(model), conversation_id=lambda config: config["metadata"]["chat"]
    )
    graph.invoke({"messages": [("user", "wrapped")]}, {"metadata": {"chat": "meta-1"}})
    assert len(stored(memory, "meta-1")) == 2


def test_async_resolvers_work_in_async_runs_and_are_refused_in_sync_ones(
    local_memory: Memory,
) -> None:
    async def conversation(runtime: Any) -> str:
        return "async-1"

    agent = make_agent(
        ScriptedChatModel(["ok"]),
        middleware=[MemoryMiddleware(local_memory, conversation_id=conversation)],
    )
    asyncio.run(agent.ainvoke({"messages": [("user", "hi")]}))
    assert len(stored(local_memory, "async-1")) == 2
    with pytest.raises(TypeError, match="async"):
        agent.invoke({"messages": [("user", "hi")]})


def test_no_conversation_in_scope_is_a_clear_error(local_memory: Memory, surface: Surface) -> None:
    agent = surface(local_memory, ScriptedChatModel(["ok"]), [])
    with pytest.raises(NoScope, match="thread_id"):
        agent.invoke({"messages": [("user", "hi")]})


# -- tools and the system message ------------------------------------------------------------------


def test_memory_tools_take_no_scope_and_a_forged_argument_changes_nothing(memory: Memory) -> None:
    tools: list[BaseTool] = memory_tools(memory)
    forbidden = {"user_id", "user", "scope", "namespace", "conversation_id", "agent_id"}
    for t in tools:
        schema = t.tool_call_schema
        properties = schema["properties"] if isinstance(schema, dict) else {}
        assert forbidden.isdisjoint(properties), t.name
    forged = AIMessage(
        content="",
        tool_calls=[
            {
                "name": "save_memory",
                "args": {"key": "tea", "value": "mallory's", "user_id": "alice"},
                "id": "forged",
            }
        ],
    )
    model = ScriptedChatModel([call_tool("save_memory", key="tea", value="oolong"), "ok"])
    agent = with_middleware(memory, model, [])
    agent.invoke(
        {"messages": [("user", "remember")]},
        {"configurable": {"thread_id": "a", "user_id": "alice"}},
    )
    mallory = ScriptedChatModel([forged, "done"])
    with_middleware(memory, mallory, []).invoke(
        {"messages": [("user", "hack")]}, {"configurable": {"thread_id": "m", "user_id": "mallory"}}
    )
    error = mallory.calls[-1][-1]
    assert isinstance(error, ToolMessage) and error.status == "error"
    assert "user_id" in error.text
    with memory.session(user_id="alice"):
        assert [(f.key, f.value) for f in memory.facts.all()] == [("tea", "oolong")]
    with memory.session(user_id="mallory"):
        assert memory.facts.all() == []


def test_the_system_message_holds_guidance_facts_and_working_memory(local_memory: Memory) -> None:
    memory = local_memory
    with memory.session(user_id="alice", conversation_id="sys"):
        memory.facts.put("tea", "oolong, no sugar")
        memory.working.set("plan", "book the trip")
    model = ScriptedChatModel(["ok"])
    agent = make_agent(
        model,
        system_prompt="Be brief.",
        middleware=[MemoryMiddleware(memory, preload_facts=3)],
    )
    agent.invoke(
        {"messages": [("user", "Which tea?")]},
        {"configurable": {"thread_id": "sys", "user_id": "alice"}},
    )
    system = model.calls[0][0]
    assert isinstance(system, SystemMessage)
    text = system.text
    assert text.startswith("Be brief.")
    assert memory.tools.instructions in text
    assert "tea: oolong, no sugar" in text
    assert "plan" in text and "book the trip" in text
    assert set(model.tools[0]) == {s.name for s in memory.tools.specs}
    bare = ScriptedChatModel(["ok"])
    make_agent(bare, middleware=[MemoryMiddleware(memory, tools=False, working=False)]).invoke(
        {"messages": [("user", "x")]}, {"configurable": {"thread_id": "sys2"}}
    )
    assert bare.tools[0] == []
    assert not any(isinstance(m, SystemMessage) for m in bare.calls[0])


def test_the_before_model_call_hook_can_rewrite_what_the_model_gets(local_memory: Memory) -> None:
    class Redact:
        @hookimpl
        def before_model_call(
            self, run: Run, messages: list[Message], instructions: list[str]
        ) -> None:
            for m in messages:
                m.text = m.text.replace("secret", "[redacted]")
            instructions.append("Extra rule.")

    local_memory.register(Redact(), name="redact")
    model = ScriptedChatModel(["ok"])
    agent = with_middleware(local_memory, model, [])
    agent.invoke({"messages": [("user", "my secret")]}, {"configurable": {"thread_id": "h"}})
    assert model.calls[0][-1].text == "my [redacted]"
    assert "Extra rule." in model.calls[0][0].text
    # what is stored is what the user said
    assert texts(stored(local_memory, "h"))[0] == ("user", "my secret")


# -- sub-agents ------------------------------------------------------------------------------------


def test_a_tool_calling_another_wrapped_agent_gives_it_a_fork(
    memory: Memory, surface: Surface
) -> None:
    seen: dict[str, Any] = {}

    @tool
    def note(key: str, value: str) -> str:
        """Write a working-memory note."""
        run = active_run(memory)
        seen["sub_scope"] = run.scope if run else None
        memory.working.set(key, value)
        return "noted"

    researcher_model = ScriptedChatModel([call_tool("note", key="found", value="42"), "done"])
    researcher = surface(memory, researcher_model, [note], name="researcher")

    @tool
    def research(question: str) -> str:
        """Ask the researcher."""
        out = researcher.invoke({"messages": [("user", question)]})
        return str(out["messages"][-1].text)

    lead_model = ScriptedChatModel([call_tool("research", question="meaning?"), "It is 42."])
    lead = with_middleware(memory, lead_model, [research])
    with memory.session(user_id="alice", conversation_id="lead"):
        memory.working.set("goal", "answer")
    lead.invoke(
        {"messages": [("user", "ask")]}, {"configurable": {"thread_id": "lead", "user_id": "alice"}}
    )
    sub_scope = seen["sub_scope"]
    assert sub_scope is not None and len(sub_scope.fork) == 1
    assert sub_scope.fork[0].startswith("researcher@")  # a fork of this sub-agent run alone
    assert sub_scope.conversation_id == "lead"
    # the sub-agent read the parent's notes (in its system message, through the fork)
    if surface is with_middleware:
        assert "goal" in researcher_model.calls[0][0].text
    # its messages went to a child conversation, not the lead's
    assert texts(stored(memory, "lead/researcher", "alice"))[:2] == [
        ("user", "meaning?"),
        ("assistant", ""),
    ]
    assert [m.role for m in stored(memory, "lead", "alice")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    # its note was merged back into the lead's working memory
    with memory.session(user_id="alice", conversation_id="lead"):
        notes = {k: n.value for k, n in memory.working.items().items()}
    assert notes == {"goal": "answer", "found": "42"}
    assert isinstance(memory.working, WorkingMemory)


# -- the mapping and the plugin --------------------------------------------------------------------


def test_messages_round_trip_exactly_and_map_faithfully() -> None:
    originals: list[BaseMessage] = [
        SystemMessage("Be brief.", id="s"),
        HumanMessage(
            content=[{"type": "text", "text": "look"}, {"type": "text", "text": "here"}],
            id="h",
            additional_kwargs={"k": [1, 2]},
        ),
        AIMessage(
            content="checking",
            tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "c1"}],
            id="a",
            response_metadata={"model": "m"},
        ),
        ToolMessage(content="found", tool_call_id="c1", name="lookup", id="t"),
        ToolMessage(content=[{"type": "text", "text": "bad"}], tool_call_id="c2", status="error"),
    ]
    neutral = to_messages(originals)
    assert [m.role for m in neutral] == ["system", "user", "assistant", "tool", "tool"]
    assert neutral[1].text == "lookhere"
    assert neutral[2].tool_calls == [ToolCall("c1", "lookup", {"q": "x"})]
    assert neutral[3].tool_results == [ToolResult("c1", "found", "lookup", False)]
    assert neutral[4].tool_results[0].is_error is True
    stored_form = [Message.from_dict(json.loads(json.dumps(m.to_dict()))) for m in neutral]
    assert from_messages(stored_form) == originals
    foreign = [Message.from_dict({**m.to_dict(), "framework": "other"}) for m in neutral]
    rebuilt = from_messages(foreign)
    assert isinstance(rebuilt[2], AIMessage) and rebuilt[2].tool_calls[0]["id"] == "c1"
    assert isinstance(rebuilt[4], ToolMessage) and rebuilt[4].status == "error"


def test_the_plugin_loads_without_langchain() -> None:
    code = textwrap.dedent(
        """
        import sys
        for name in ("langchain", "langchain_core", "langgraph"):
            sys.modules[name] = None  # as if the extra were not installed
        import memory_adapters_langchain as plugin
        from memory_adapters import Memory, MissingExtra, NoAdapter
        memory = Memory("memory://")
        assert "langchain" not in memory.adapters, memory.adapters  # only those installed
        try:
            memory.wrap(object())
        except NoAdapter:
            pass
        try:
            plugin.MemoryMiddleware
        except MissingExtra as exc:
            print(exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert 'pip install "memory-adapters[langchain]"' in out


def test_wrap_refuses_bad_options_and_never_stacks(local_memory: Memory) -> None:
    graph = make_agent(ScriptedChatModel(["ok"]))
    with pytest.raises(InvalidInput, match="unknown option"):
        local_memory.wrap(graph, tools=True)
    once = local_memory.wrap(graph)
    assert isinstance(once, MemoryGraph)
    twice = local_memory.wrap(once)
    assert twice.graph is graph
    native = with_middleware(local_memory, ScriptedChatModel(["ok"]), [])
    assert local_memory.wrap(native).native
    with pytest.raises(InvalidInput):
        MemoryMiddleware(local_memory, merge="nope")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        once.invoke("not a dict of messages", {"configurable": {"thread_id": "z"}})


def test_a_graph_with_the_middleware_is_stored_once_when_also_wrapped(local_memory: Memory) -> None:
    agent = local_memory.wrap(with_middleware(local_memory, ScriptedChatModel(["ok"]), []))
    agent.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "n"}})
    assert texts(stored(local_memory, "n")) == [("user", "hi"), ("assistant", "ok")]


def test_fact_history_names_the_run_when_the_model_saves(memory: Memory) -> None:
    """A fact the model saves through the memory tool is written by that run's model; what
    the application writes is the application's (issue 14)."""
    model = ScriptedChatModel([call_tool("save_memory", key="tea", value="oolong"), "ok"])
    with_middleware(memory, model, []).invoke(
        {"messages": [("user", "remember")]},
        {"configurable": {"thread_id": "h", "user_id": "alice"}},
    )
    with memory.session(user_id="alice"):
        memory.facts.put("tea", "sencha")
        by_app, by_model = memory.facts.history("tea")
    assert by_app.writer == Writer() and by_app.value == "sencha"
    assert (by_model.op, by_model.value) == ("put", "oolong")
    assert (by_model.writer.kind, by_model.writer.framework) == ("model", "langchain")
    assert by_model.writer.run_id
