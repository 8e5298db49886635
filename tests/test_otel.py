"""The OpenTelemetry plugin: spans captured with the SDK's in-memory exporter for runs of real
pydantic-ai and LangChain agents (scripted models) and for windows, appends, searches and
memory tool calls; their attributes and parents; no content unless asked for."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import memory_adapters_otel
import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool as lc_tool
from memory_adapters_langchain import MemoryMiddleware
from memory_adapters_otel import OpenTelemetry
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_turn_work import Recording
from test_turn_work import _model as turn_work_model

from memory_adapters import AppendConflict, Memory, Message, ToolArgumentError
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool

SECRET = "oolong-7f3a"
"""A value that must never reach a span unless content is asked for."""

P = "memory_adapters."


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp


def traced_memory(provider: TracerProvider, **options: Any) -> Memory:
    return Memory("memory://", embed=False, plugins=[OpenTelemetry(provider)], **options)


@pytest.fixture
def memory(provider: TracerProvider) -> Iterator[Memory]:
    with traced_memory(provider) as m:
        yield m


def spans(exporter: InMemorySpanExporter, name: str | None = None) -> list[ReadableSpan]:
    got = list(exporter.get_finished_spans())
    return [s for s in got if name is None or s.name == P + name]


def only(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = spans(exporter, name)
    assert len(found) == 1, [s.name for s in spans(exporter)]
    return found[0]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def no_content(exporter: InMemorySpanExporter) -> None:
    for span in spans(exporter):
        for key, value in attrs(span).items():
            assert SECRET not in str(value), (span.name, key)
        for event in span.events:
            assert SECRET not in json.dumps(dict(event.attributes or {}), default=str)


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


# -- the run of an agent ---------------------------------------------------------------------------


def save_then_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A model that saves a fact through the memory tool, then answers."""
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart("Noted.")])
    return ModelResponse(
        parts=[ToolCallPart("save_memory", {"key": "tea", "value": SECRET}, tool_call_id="c1")]
    )


def check_run(exporter: InMemorySpanExporter, framework: str) -> None:
    run = only(exporter, "run")
    a = attrs(run)
    assert a[P + "run.framework"] == framework
    assert a[P + "namespace"] == "default"
    assert a[P + "conversation"] == "default:ann:c1"
    assert a[P + "store"] == "memory"
    assert a["gen_ai.conversation.id"] == "c1"
    assert a[P + "run.messages"] == 4  # the prompt, the tool call, its result, the answer
    assert a[P + "run.tokens"] > 0
    assert run.status.status_code is not StatusCode.ERROR
    run_id = a[P + "run.id"]
    window, tool = only(exporter, "window"), only(exporter, "tool")
    appends = spans(exporter, "append")  # one per run, or one per step (LangChain middleware)
    for child in (window, tool, *appends):  # the run's span is the parent of its operations
        assert parent_id(child) == run.context.span_id
        assert child.context.trace_id == run.context.trace_id
        assert attrs(child)[P + "run.id"] == run_id
        assert attrs(child)[P + "store"] == "memory"
    assert attrs(window)[P + "window.messages"] == 0  # a new conversation
    assert sum(attrs(s)[P + "append.messages"] for s in appends) == 4
    assert sum(attrs(s)[P + "append.tokens"] for s in appends) == a[P + "run.tokens"]
    assert attrs(appends[0])[P + "append.first_seq"] == 1
    assert attrs(tool)["gen_ai.tool.name"] == "save_memory"
    assert attrs(tool)["gen_ai.operation.name"] == "execute_tool"


def test_a_pydantic_ai_run_has_a_span_with_its_window_tool_and_append(
    memory: Memory, exporter: InMemorySpanExporter
) -> None:
    agent = memory.wrap(Agent(FunctionModel(save_then_answer)))
    with memory.session(user_id="ann", conversation_id="c1"):
        assert agent.run_sync("Remember my tea").output == "Noted."
    check_run(exporter, "pydantic-ai")
    with memory.session(user_id="ann"):  # the tool saved the fact
        assert memory.facts.get("tea") is not None
    no_content(exporter)


def test_a_langchain_run_has_a_span_with_its_window_tool_and_append(
    memory: Memory, exporter: InMemorySpanExporter
) -> None:
    model = ScriptedChatModel([call_tool("save_memory", key="tea", value=SECRET), "Noted."])
    agent: Any = create_agent(model, middleware=[MemoryMiddleware(memory)])  # typed loosely
    config = {"configurable": {"thread_id": "c1", "user_id": "ann"}}
    agent.invoke({"messages": [("user", "Remember my tea")]}, config)
    check_run(exporter, "langchain")
    no_content(exporter)


def test_a_failed_run_has_an_error_status(memory: Memory, exporter: InMemorySpanExporter) -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("the model is down")

    agent = memory.wrap(Agent(FunctionModel(broken)))
    with memory.session(user_id="ann", conversation_id="c1"), pytest.raises(RuntimeError):
        agent.run_sync("hello")
    run = only(exporter, "run")
    assert run.status.status_code is StatusCode.ERROR
    assert attrs(run)["error.type"] == "RuntimeError"


# -- operations outside a run ----------------------------------------------------------------------


def test_window_append_and_search_spans(memory: Memory, exporter: InMemorySpanExporter) -> None:
    with memory.session(user_id="ann", conversation_id="c1"):
        memory.conversation.append([Message.user(SECRET), Message.assistant("ok")])
        window = memory.conversation.window(max_tokens=1000)
        memory.facts.put("tea", SECRET)
        memory.facts.put("coffee", "none")
        found = memory.facts.search("tea", limit=3)
    append = attrs(only(exporter, "append"))
    assert append[P + "append.messages"] == 2
    assert append[P + "append.last_seq"] == 2
    assert append[P + "append.duplicate"] is False
    assert append[P + "conversation"] == "default:ann:c1"
    w = attrs(only(exporter, "window"))
    assert w[P + "window.messages"] == 2
    assert w[P + "window.tokens"] == window.tokens
    assert w[P + "window.max_tokens"] == 1000
    s = attrs(only(exporter, "search"))
    assert s[P + "search.mode"] == "keyword"
    assert s[P + "search.limit"] == 3
    assert s[P + "search.results"] == len(found) == 1
    for span in spans(exporter):  # outside a run: roots
        assert span.parent is None
        assert P + "run.id" not in attrs(span)
    no_content(exporter)


def test_async_operations_have_spans(memory: Memory, exporter: InMemorySpanExporter) -> None:
    import asyncio

    async def go() -> None:
        with memory.session(user_id="ann", conversation_id="c1"):
            await memory.conversation.aappend([Message.user("hi")])
            await memory.conversation.awindow()
            await memory.facts.asearch("tea")
            await memory.tools.acall("recall_memory", {"key": "tea"})

    asyncio.run(go())
    assert [s.name for s in spans(exporter)] == [
        P + "append",
        P + "window",
        P + "search",
        P + "tool",
    ]


def test_a_search_by_a_tool_is_a_child_of_the_tool(
    memory: Memory, exporter: InMemorySpanExporter
) -> None:
    with memory.session(user_id="ann"):
        memory.tools.call("search_memory", {"query": "tea", "limit": 2})
    tool, search = only(exporter, "tool"), only(exporter, "search")
    assert parent_id(search) == tool.context.span_id
    assert attrs(search)[P + "search.limit"] == 2
    assert attrs(tool)[P + "tool.name"] == "search_memory"


def test_failed_operations_have_an_error_status(
    memory: Memory, exporter: InMemorySpanExporter
) -> None:
    with memory.session(user_id="ann", conversation_id="c1"):
        memory.conversation.append([Message.user("a")])
        with pytest.raises(AppendConflict):  # raised by the store, under the span
            memory.conversation.append([Message.user("b")], expected_last_seq=0)
        with pytest.raises(ToolArgumentError):
            memory.tools.call("save_memory", {"key": "k"})
    failed = [s for s in spans(exporter) if s.status.status_code is StatusCode.ERROR]
    assert [(s.name, attrs(s)["error.type"]) for s in failed] == [
        (P + "append", "AppendConflict"),
        (P + "tool", "ToolArgumentError"),
    ]


# -- content ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["option", "environment"])
def test_content_only_when_asked(
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    if how == "environment":
        monkeypatch.setenv("MEMORY_ADAPTERS_OTEL_CONTENT", "1")
        memory = traced_memory(provider)
    else:
        memory = traced_memory(provider, telemetry_content=True)
    with memory, memory.session(user_id="ann", conversation_id="c1"):
        memory.conversation.append([Message.user(f"my tea is {SECRET}")])
        memory.conversation.window()
        memory.tools.call("save_memory", {"key": "tea", "value": SECRET})
        memory.facts.search("tea")
    assert SECRET in attrs(only(exporter, "append"))[P + "append.content"]
    assert SECRET in attrs(only(exporter, "window"))[P + "window.content"]
    tool = attrs(only(exporter, "tool"))
    assert SECRET in tool[P + "tool.arguments"]
    search = attrs(only(exporter, "search"))
    assert search[P + "search.query"] == "tea"
    assert SECRET in search[P + "search.facts"]


# -- cost and activation ---------------------------------------------------------------------------


def test_no_hook_is_called_without_a_tracer_provider(exporter: InMemorySpanExporter) -> None:
    """With no tracer provider configured (the tests configure none globally), the built-in
    plugin is there but idle: none of its hooks is called and no operation is observed, so a
    turn does no telemetry work at all (tests/test_turn_work.py counts its store calls)."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    (plugin,) = memory_adapters_otel.memory_adapters_plugins()
    assert isinstance(plugin, OpenTelemetry)
    assert not plugin.memory_adapters_active()
    assert plugin.tracer() is None
    called: list[str] = []
    with Memory("memory://", embed=False) as memory:
        assert memory.pm.has_plugin("otel.1")
        assert not memory.hooks.observes_operations
        undo = memory.pm.add_hookcall_monitoring(
            lambda name, impls, kwargs: called.append(name), lambda *args: None
        )
        agent = memory.wrap(Agent(FunctionModel(save_then_answer)))
        with memory.session(user_id="ann", conversation_id="c1"):
            assert agent.run_sync("Remember my tea").output == "Noted."
            memory.facts.search("tea")
        undo()
    assert not {"run_started", "run_finished", "operation_started", "operation_finished"} & set(
        called
    )
    assert spans(exporter) == []


def pydantic_ai_turns(memory: Memory, prompts: list[str]) -> list[str]:
    agent = memory.wrap(Agent(FunctionModel(save_then_answer)))
    with memory.session(user_id="ann", conversation_id="c1"):
        return [agent.run_sync(prompt).output for prompt in prompts]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_memory_created_before_the_provider_is_traced_once_it_is_configured(
    kind: str,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    """Tracing attaches whenever a provider is there when a run starts, not only to a
    ``Memory`` created after it was configured (issue 27, item 15). The global provider can be
    set once per process: here ``get_tracer_provider`` is patched (the subprocess test below
    sets it for real)."""
    url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'otel.db'}"
    with Memory(url, embed=False) as memory:
        assert pydantic_ai_turns(memory, ["Remember my tea"]) == ["Noted."]
        assert spans(exporter) == []
        assert not memory.hooks.observes_operations
        monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
        assert memory.hooks.observes_operations
        assert pydantic_ai_turns(memory, ["Remember it again"]) == ["Noted."]
    run = only(exporter, "run")
    a = attrs(run)
    assert a[P + "run.framework"] == "pydantic-ai"
    assert a[P + "conversation"] == "default:ann:c1"
    assert a[P + "store"] == kind
    assert a[P + "run.messages"] == 4
    window, tool, append = (only(exporter, name) for name in ("window", "tool", "append"))
    for child in (window, tool, append):
        assert parent_id(child) == run.context.span_id
        assert attrs(child)[P + "run.id"] == a[P + "run.id"]
    assert attrs(window)[P + "window.messages"] == 4  # the first turn, read back
    assert attrs(append)[P + "append.first_seq"] == 5  # after the first, untraced turn
    assert attrs(append)[P + "append.messages"] == 4
    no_content(exporter)


def second_turn_store_calls(memory: Memory, store: Recording, framework: str) -> list[Any]:
    """The store calls of a pydantic-ai or LangChain agent's second turn (its window read
    with its working memory, then its steps written), as ``tests/test_turn_work.py`` counts
    them."""
    if framework == "pydantic-ai":
        agent = Agent(FunctionModel(turn_work_model))

        @agent.tool_plain
        def lookup(q: str) -> str:
            return f"found {q}"

        wrapped = memory.wrap(agent)
        with memory.session(conversation_id="t"):
            wrapped.run_sync("first")
            store.taken()
            wrapped.run_sync("second")
            return store.taken()

    @lc_tool
    def find(q: str) -> str:
        """Looks up."""
        return f"found {q}"

    def reply(messages: list[Any]) -> Any:
        return "done" if len(messages) > 2 else call_tool("find", q="x")

    lc_agent: Any = create_agent(
        ScriptedChatModel([reply]), tools=[find], middleware=[MemoryMiddleware(memory)]
    )
    config = {"configurable": {"thread_id": "t"}}
    lc_agent.invoke({"messages": [("user", "first")]}, config)
    store.taken()
    lc_agent.invoke({"messages": [("user", "second")]}, config)
    return store.taken()


@pytest.mark.parametrize("framework", ["pydantic-ai", "langchain"])
def test_a_traced_turn_makes_the_store_calls_of_an_untraced_one(
    framework: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Spans cost no round trip: a turn's reads stay in one batch when its window is observed
    (the window's ``operation_started`` is called before the batch, not between its reads)."""
    calls = {}
    for traced in (False, True):
        store = Recording()
        plugins: list[object] = [OpenTelemetry(provider)] if traced else []
        with Memory(store=store, embed=False, load_entrypoints=False, plugins=plugins) as memory:
            assert memory.hooks.observes_operations is traced
            calls[traced] = second_turn_store_calls(memory, store, framework)
    assert calls[True] == calls[False]
    assert calls[True][0] == ("batch", ["head_and_tail", "list_facts"])
    assert len(spans(exporter, "run")) == 2


AFTER_THE_FACT = """
import json
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from memory_adapters import Memory


def model(messages, info):  # save a fact with the memory tool, then answer
    last = messages[-1]
    if isinstance(last, ModelRequest) and last.parts[-1].part_kind == "tool-return":
        return ModelResponse(parts=[TextPart("Noted.")])
    return ModelResponse(parts=[ToolCallPart("save_memory", {"key": "tea", "value": "oolong"})])


memory = Memory(sys.argv[1], embed=False)  # created before any tracer provider is configured
agent = memory.wrap(Agent(FunctionModel(model)))
exporter = InMemorySpanExporter()
with memory.session(user_id="ann", conversation_id="c1"):
    agent.run_sync("before")
    before = [span.name for span in exporter.get_finished_spans()]
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # the real global, set once in this process
    agent.run_sync("after")
after = [span.name for span in exporter.get_finished_spans()]
memory.close()
print(json.dumps({"before": before, "after": after}))
"""


def test_a_tracer_provider_set_globally_after_the_memory_is_created_gets_spans(
    tmp_path: Any,
) -> None:
    """``trace.set_tracer_provider`` for real (it works once per process, so in a process of
    its own), after the ``Memory`` was created and had run a turn untraced."""
    url = f"sqlite:///{tmp_path / 'otel.db'}"
    done = subprocess.run(
        [sys.executable, "-c", AFTER_THE_FACT, url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["before"] == []
    assert got["after"] == [P + name for name in ("window", "tool", "append", "run")]


def test_the_built_in_plugin_traces_with_the_global_provider(
    provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    with Memory("memory://", embed=False) as memory:
        assert memory.hooks.observes_operations
        assert "otel.1" in {p["name"] for p in memory.pm.describe()}
        with memory.session(user_id="ann", conversation_id="c1"):
            memory.conversation.append([Message.user("hi")])
    assert len(spans(exporter, "append")) == 1
