"""One conversation, two frameworks: pydantic-ai and LangChain agents take turns on every store
(memory://, SQLite, PostgreSQL, MongoDB through mongomock).

Each model is checked on what it *receives*: the exact pydantic-ai ``ModelRequest`` /
``ModelResponse`` parts a ``FunctionModel`` is given, and the exact LangChain ``HumanMessage``,
``AIMessage.tool_calls`` and ``ToolMessage`` a ``ScriptedChatModel`` is given, including the
tool calls the other framework's agent made. A framework's own messages come back to it
exactly (LangChain's with their ids); both share the user's long-term facts; and a window cut
anywhere across the other framework's turns never hands a model a tool call without its result
or a result without its call. The LangChain side runs both as ``create_agent(...,
middleware=[MemoryMiddleware(memory)])`` and as ``memory.wrap(create_agent(...))``.
"""

from __future__ import annotations

import enum
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
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
    convert_to_openai_messages,
)
from langchain_core.tools import BaseTool, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from memory_adapters_langchain import MemoryMiddleware, memory_tools
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from stores import STORES, on_sync_loop, open_memory

from memory_adapters import Memory, Message, Record, Scope, hookimpl
from memory_adapters.testing.langchain import ScriptedChatModel

FORMS = ["middleware", "wrap"]
"""The two ways a LangChain agent gets memory: the middleware, or ``memory.wrap(graph)``."""

LC_SYSTEM = "You are a tea shop assistant."


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


@pytest.fixture(params=FORMS)
def form(request: pytest.FixtureRequest) -> str:
    """How the LangChain agent gets its memory (see :data:`FORMS`)."""
    return str(request.param)


# -- the two models -------------------------------------------------------------------------------


@dataclass
class PaiModel:
    """A pydantic-ai ``FunctionModel`` that plays ``steps`` in order (a response, or a callable
    making one from the messages) and records every request it gets."""

    steps: list[ModelResponse | Callable[[list[ModelMessage]], ModelResponse]] = field(
        default_factory=list
    )
    requests: list[list[ModelMessage]] = field(default_factory=list)

    def _reply(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        step = self.steps.pop(0) if self.steps else ModelResponse(parts=[TextPart("ok")])
        return step if isinstance(step, ModelResponse) else step(messages)

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self._reply)


def calls(*requested: tuple[str, dict[str, Any], str], text: str = "") -> AIMessage:
    """A LangChain script entry: a model message calling ``(name, args, id)`` tools."""
    return AIMessage(
        content=text, tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in requested]
    )


def langchain_agent(
    memory: Memory, form: str, model: ScriptedChatModel, tools: Sequence[BaseTool] = ()
) -> Any:
    """A ``create_agent`` agent with memory: through the middleware, or wrapped (which gives
    no memory tools of its own, so they are passed as ordinary tools)."""
    if form == "middleware":
        return create_agent(
            model, tools=list(tools), system_prompt=LC_SYSTEM, middleware=[MemoryMiddleware(memory)]
        )
    graph = create_agent(model, tools=[*tools, *memory_tools(memory)], system_prompt=LC_SYSTEM)
    return memory.wrap(graph)


def user(text: str) -> Any:
    """A LangChain agent's input: one user message."""
    return {"messages": [{"role": "user", "content": text}]}


# -- what a model was shown -----------------------------------------------------------------------


def stable(content: Any) -> Any:
    """A memory tool's result without what changes from run to run: when each fact was
    last updated, and its search score."""
    if isinstance(content, str) and content.startswith(("[{", '{"key"')):
        found = json.loads(content)
        facts = found if isinstance(found, list) else [found]
        kept = [{k: v for k, v in f.items() if k not in ("updated", "score")} for f in facts]
        return json.dumps(kept if isinstance(found, list) else kept[0])
    return content


def shape(messages: Sequence[ModelMessage]) -> Any:
    """pydantic-ai messages as JSON without their timestamps (a message rebuilt from the
    neutral form is given a new one) and the memory tools' times and scores."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "timestamp"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return stable(value)

    return strip(ModelMessagesTypeAdapter.dump_python(list(messages), mode="json"))


def without_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """LangChain messages without their ids (a message rebuilt from another framework's has
    none under the middleware; ``memory.wrap`` gives it a fresh one when it puts the window in
    the graph's state), and the memory tools' results without their times and scores."""
    return [
        m.model_copy(
            update={"id": None, "content": stable(m.content)}
            if isinstance(m, ToolMessage)
            else {"id": None}
        )
        for m in messages
    ]


def lc_history(seen: Sequence[BaseMessage]) -> list[BaseMessage]:
    """What a LangChain model was shown, without the system message."""
    assert isinstance(seen[0], SystemMessage)
    assert seen[0].text.startswith(LC_SYSTEM)
    assert not any(isinstance(m, SystemMessage) for m in seen[1:])
    return list(seen[1:])


def user_prompt(message: ModelMessage) -> str:
    assert isinstance(message, ModelRequest)
    (part,) = message.parts
    assert isinstance(part, UserPromptPart)
    return str(part.content)


def pai_prompts(messages: Sequence[ModelMessage]) -> list[str]:
    return [
        str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]


def check_pai_tool_structure(messages: Sequence[ModelMessage]) -> None:
    """Every tool call is answered in the next request, and every result answers a call of the
    response just before it."""
    for i, m in enumerate(messages):
        if isinstance(m, ModelResponse) and m.tool_calls:
            assert i + 1 < len(messages), "the history ends in an unanswered tool call"
            answered = {
                p.tool_call_id for p in messages[i + 1].parts if isinstance(p, ToolReturnPart)
            }
            assert {c.tool_call_id for c in m.tool_calls} == answered, "an orphan tool call"
        if isinstance(m, ModelRequest):
            results = {p.tool_call_id for p in m.parts if isinstance(p, ToolReturnPart)}
            if results:
                previous = messages[i - 1] if i else None
                assert isinstance(previous, ModelResponse), "a tool result without its call"
                assert results <= {c.tool_call_id for c in previous.tool_calls}


def check_lc_tool_structure(messages: Sequence[BaseMessage]) -> None:
    """Every ``AIMessage`` tool call is answered by the ``ToolMessage``s right after it, and
    every ``ToolMessage`` answers a call of the ``AIMessage`` before them."""
    pending: set[str] = set()
    for m in messages:
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in pending, f"a tool result without its call: {m!r}"
            pending.discard(m.tool_call_id)
            continue
        assert not pending, f"tool calls without their results: {pending}"
        if isinstance(m, AIMessage):
            pending = {str(c["id"]) for c in m.tool_calls}
    assert not pending, f"the history ends in unanswered tool calls: {pending}"


def stored(memory: Memory, conversation_id: str) -> list[Record]:
    with memory.session(user_id="alice", conversation_id=conversation_id):
        return memory.conversation.read()


# -- one conversation, turn by turn ---------------------------------------------------------------

T1 = "My favourite tea is oolong."
T2 = "I live in Lisbon. Which tea do I like?"
T3 = "Where do I live, and what is the weather there?"
T4 = "Thanks!"
T5 = "Bye."

SAVE_TEA = {"key": "favourite_tea", "value": "favourite tea: oolong"}
SAVE_CITY = {"key": "home_city", "value": "lives in Lisbon"}
SAVED_TEA = json.dumps({"saved": "favourite_tea", "version": 1})
SAVED_CITY = json.dumps({"saved": "home_city", "version": 1})
FOUND_TEA = json.dumps(
    [{"key": "favourite_tea", "value": "favourite tea: oolong", "importance": 0.5}]
)
RECALLED_CITY = json.dumps({"key": "home_city", "value": "lives in Lisbon", "importance": 0.5})
FORECAST = {"city": "Lisbon", "sky": "sunny"}


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def test_one_conversation_alternates_between_pydantic_ai_and_langchain(
    memory: Memory, form: str
) -> None:
    """Five turns, pydantic-ai and LangChain in turn, in one session: each model is shown the
    other's turns (text, tool calls, tool results) in its own types and its own turns exactly;
    a fact saved through one framework's memory tool is found through the other's."""
    pai_model = PaiModel(
        [
            # T1: pydantic-ai saves a fact, then answers
            ModelResponse(parts=[ToolCallPart("save_memory", SAVE_TEA, "pai-save")]),
            ModelResponse(parts=[TextPart("Noted.")]),
            # T3: recalls the fact LangChain saved, calls its own tool, answers
            ModelResponse(
                parts=[ToolCallPart("recall_memory", {"key": "home_city"}, "pai-recall")]
            ),
            ModelResponse(parts=[ToolCallPart("forecast", {"city": "Lisbon"}, "pai-forecast")]),
            ModelResponse(parts=[TextPart("Sunny in Lisbon.")]),
            # T5
            ModelResponse(parts=[TextPart("Bye!")]),
        ]
    )
    base = Agent(pai_model.model, instructions="Be brief.")

    @base.tool_plain
    def forecast(city: str) -> dict[str, str]:
        return {"city": city, "sky": "sunny"}

    pai = memory.wrap(base)
    lc_model = ScriptedChatModel(
        [
            # T2: LangChain saves a fact and searches for the one pydantic-ai saved (in parallel)
            calls(
                ("save_memory", SAVE_CITY, "lc-save"),
                ("search_memory", {"query": "tea"}, "lc-search"),
                text="Let me check.",
            ),
            "You like oolong.",
            # T4
            "You're welcome.",
        ]
    )
    lc = langchain_agent(memory, form, lc_model, [weather])

    with memory.session(user_id="alice", conversation_id="tea-chat"):
        t1 = pai.run_sync(T1).new_messages()
        t2_out = lc.invoke(user(T2))
        t3 = pai.run_sync(T3).new_messages()
        t4_out = on_sync_loop(lc.ainvoke(user(T4)))  # the async path too
        pai.run_sync(T5)

    # What LangChain's model got for pydantic-ai's turn T1: the tool call it made and its result.
    t1_in_langchain: list[BaseMessage] = [
        HumanMessage(T1),
        calls(("save_memory", SAVE_TEA, "pai-save")),
        ToolMessage(SAVED_TEA, tool_call_id="pai-save", name="save_memory"),
        AIMessage("Noted."),
    ]
    shown = lc_history(lc_model.calls[0])
    assert without_ids(shown[:4]) == t1_in_langchain
    assert isinstance(shown[4], HumanMessage) and shown[4].text == T2
    assert len(shown) == 5

    # LangChain's search_memory found the fact pydantic-ai's save_memory stored.
    results = lc_history(lc_model.calls[1])[-2:]
    assert [
        (m.tool_call_id, m.name, stable(m.content)) for m in results if isinstance(m, ToolMessage)
    ] == [
        ("lc-save", "save_memory", SAVED_CITY),
        ("lc-search", "search_memory", FOUND_TEA),
    ]

    # LangChain's own messages of T2, as its run left them (with ids).
    t2: list[BaseMessage] = t2_out["messages"][-5:]
    assert [type(m) for m in t2] == [HumanMessage, AIMessage, ToolMessage, ToolMessage, AIMessage]
    assert all(m.id for m in t2)

    # What pydantic-ai's model got at T3: its own T1 exactly, LangChain's T2 in its own types
    # (the two tool results in one request), then the prompt.
    t2_in_pydantic_ai: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(T2)]),
        ModelResponse(
            parts=[
                TextPart("Let me check."),
                ToolCallPart("save_memory", SAVE_CITY, "lc-save"),
                ToolCallPart("search_memory", {"query": "tea"}, "lc-search"),
            ]
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("save_memory", SAVED_CITY, "lc-save"),
                ToolReturnPart("search_memory", FOUND_TEA, "lc-search"),
            ]
        ),
        ModelResponse(parts=[TextPart("You like oolong.")]),
    ]
    seen = pai_model.requests[2]
    assert seen[:4] == t1  # exactly pydantic-ai's own messages, timestamps and all
    assert shape(seen[4:8]) == shape(t2_in_pydantic_ai)
    assert user_prompt(seen[8]) == T3 and len(seen) == 9

    # pydantic-ai's recall_memory returned the fact LangChain's save_memory stored.
    returned = pai_model.requests[3][-1]
    assert isinstance(returned, ModelRequest)
    assert (
        shape([returned])[0]["parts"]
        == shape(
            [ModelRequest(parts=[ToolReturnPart("recall_memory", RECALLED_CITY, "pai-recall")])]
        )[0]["parts"]
    )

    # What LangChain's model got at T4: T1 and T3 mapped, its own T2 exactly, ids included.
    t3_in_langchain: list[BaseMessage] = [
        HumanMessage(T3),
        calls(("recall_memory", {"key": "home_city"}, "pai-recall")),
        ToolMessage(RECALLED_CITY, tool_call_id="pai-recall", name="recall_memory"),
        calls(("forecast", {"city": "Lisbon"}, "pai-forecast")),
        ToolMessage(json.dumps(FORECAST), tool_call_id="pai-forecast", name="forecast"),
        AIMessage("Sunny in Lisbon."),
    ]
    shown = lc_history(lc_model.calls[2])
    assert without_ids(shown[:4]) == t1_in_langchain
    assert shown[4:9] == t2
    assert without_ids(shown[9:15]) == t3_in_langchain
    assert isinstance(shown[15], HumanMessage) and shown[15].text == T4
    assert len(shown) == 16
    t4: list[BaseMessage] = t4_out["messages"][-2:]
    assert [m.text for m in t4] == [T4, "You're welcome."]

    # What pydantic-ai's model got at T5: its own T1 and T3 exactly, T2 and T4 mapped.
    seen = pai_model.requests[5]
    assert seen[:4] == t1
    assert shape(seen[4:8]) == shape(t2_in_pydantic_ai)
    assert seen[8:14] == t3
    assert shape(seen[14:16]) == shape(
        [
            ModelRequest(parts=[UserPromptPart(T4)]),
            ModelResponse(parts=[TextPart("You're welcome.")]),
        ]
    )
    assert user_prompt(seen[16]) == T5 and len(seen) == 17

    # The log holds every turn once, each message written by its own framework.
    records = stored(memory, "tea-chat")
    frameworks = [r.message.framework for r in records]
    lc_, pai_ = "langchain", "pydantic-ai"
    assert frameworks == [pai_] * 4 + [lc_] * 5 + [pai_] * 6 + [lc_] * 2 + [pai_] * 2
    assert [r.message.text for r in records if r.message.role == "user"] == [T1, T2, T3, T4, T5]
    with memory.session(user_id="alice"):  # one user's facts, whichever framework saved them
        assert {f.key: f.value for f in memory.facts.all()} == {
            "favourite_tea": "favourite tea: oolong",
            "home_city": "lives in Lisbon",
        }


def test_each_frameworks_own_identifiers_name_the_same_conversation(
    memory: Memory, form: str
) -> None:
    """pydantic-ai's ``conversation_id=`` and LangGraph's ``configurable`` thread and user name
    one conversation, without a session."""
    pai_model = PaiModel()
    pai = memory.wrap(Agent(pai_model.model), user_id="alice")
    lc_model = ScriptedChatModel(["Hello from LangChain."])
    lc = langchain_agent(memory, form, lc_model)

    pai.run_sync("Hello from pydantic-ai.", conversation_id="c-7")  # pydantic-ai's own argument
    config = {"configurable": {"thread_id": "c-7", "user_id": "alice"}}  # LangGraph's own
    lc.invoke(user("And from LangChain."), config)
    pai.run_sync("Back to pydantic-ai.", conversation_id="c-7")

    shown = lc_history(lc_model.calls[0])
    assert without_ids(shown[:2]) == [HumanMessage("Hello from pydantic-ai."), AIMessage("ok")]
    assert shown[2].text == "And from LangChain."
    assert pai_prompts(pai_model.requests[1]) == [
        "Hello from pydantic-ai.",
        "And from LangChain.",
        "Back to pydantic-ai.",
    ]
    assert len(stored(memory, "c-7")) == 6


def test_tool_errors_map_as_errors_both_ways(memory: Memory, form: str) -> None:
    """A pydantic-ai tool retry reaches LangChain as a ``ToolMessage`` with status ``"error"``;
    a LangChain tool error reaches pydantic-ai as a ``ToolReturnPart`` with outcome
    ``"failed"``."""
    retried: list[int] = []
    pai_model = PaiModel(
        [
            ModelResponse(parts=[ToolCallPart("flaky", {"n": 1}, "pai-1")]),
            ModelResponse(parts=[ToolCallPart("flaky", {"n": 2}, "pai-2")]),
            ModelResponse(parts=[TextPart("Done.")]),
        ]
    )
    base = Agent(pai_model.model)

    @base.tool_plain
    def flaky(n: int) -> str:
        if not retried:
            retried.append(n)
            raise ModelRetry("try a larger n")
        return f"fine with {n}"

    pai = memory.wrap(base)

    @tool
    def broken(city: str) -> str:
        """Always fails."""
        raise ToolException(f"no weather for {city}")

    broken.handle_tool_error = True
    lc_model = ScriptedChatModel([calls(("broken", {"city": "Faro"}, "lc-1")), "Sorry."])
    lc = langchain_agent(memory, form, lc_model, [broken])

    with memory.session(user_id="alice", conversation_id="errors"):
        pai.run_sync("Try it.")
        lc.invoke(user("Weather in Faro?"))
        pai.run_sync("Again?")

    shown = without_ids(lc_history(lc_model.calls[0]))
    assert shown[:6] == [
        HumanMessage("Try it."),
        calls(("flaky", {"n": 1}, "pai-1")),
        ToolMessage("try a larger n", tool_call_id="pai-1", name="flaky", status="error"),
        calls(("flaky", {"n": 2}, "pai-2")),
        ToolMessage("fine with 2", tool_call_id="pai-2", name="flaky"),
        AIMessage("Done."),
    ]
    seen = pai_model.requests[3]
    failed = seen[-3]
    assert isinstance(failed, ModelRequest)
    (part,) = failed.parts
    assert isinstance(part, ToolReturnPart)
    assert (part.tool_call_id, part.tool_name, part.content, part.outcome) == (
        "lc-1",
        "broken",
        "no weather for Faro",
        "failed",
    )


def test_a_pydantic_ai_tool_result_that_is_a_json_list_reaches_langchain_as_json_text(
    memory: Memory,
) -> None:
    """A tool result is JSON in the neutral form. A pydantic-ai tool returning a list must reach
    LangChain as its JSON text, not as a list of LangChain content blocks (a list of dicts
    without ``"type"`` is no valid content: its ``.text`` is empty and LangChain's converters
    fail on it)."""
    found = [{"shop": "Tea House", "street": "5th"}, {"shop": "Leaf", "street": "Main"}]
    pai_model = PaiModel(
        [
            ModelResponse(parts=[ToolCallPart("shops", {}, "pai-shops")]),
            ModelResponse(parts=[TextPart("Two shops.")]),
        ]
    )
    base = Agent(pai_model.model)

    @base.tool_plain
    def shops() -> list[dict[str, str]]:
        return found

    pai = memory.wrap(base)
    lc_model = ScriptedChatModel(["ok"])
    lc = create_agent(lc_model, tools=[], middleware=[MemoryMiddleware(memory)])
    with memory.session(user_id="alice", conversation_id="lists"):
        pai.run_sync("Which shops?")
        lc.invoke(user("Thanks."))
    (result,) = [m for m in lc_model.calls[0] if isinstance(m, ToolMessage)]
    assert result.content == json.dumps(found)
    assert result.text == json.dumps(found)
    convert_to_openai_messages(lc_model.calls[0])  # a provider could send it


class AfterSave:
    """A plugin that sets ``event`` once the tool result answering ``call_id`` is stored."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.event = threading.Event()

    @hookimpl
    def after_save(self, scope: Scope, records: list[Record]) -> None:
        if any(t.id == self.call_id for r in records for t in r.message.tool_results):
            self.event.set()


@pytest.fixture(params=["memory", "sqlite"])
def local_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


def test_parallel_tool_results_are_stored_in_the_order_of_their_calls(local_memory: Memory) -> None:
    """LangChain runs a step's tool calls concurrently. Their results belong in the log in the
    order of the calls, as they are in the graph's state, however they finish: here the first
    call returns only once the second call's result has been stored (or after a short guard,
    where the second result is not stored before the first)."""
    memory = local_memory
    probe = AfterSave("call-second")
    memory.register(probe, name="after-save-probe")

    @tool
    def first(city: str) -> str:
        """Returns once the second call's result has been stored."""
        probe.event.wait(timeout=1)  # a guard only: no assertion depends on it
        return f"first for {city}"

    @tool
    def second(city: str) -> str:
        """Returns at once."""
        return f"second for {city}"

    lc_model = ScriptedChatModel(
        [
            calls(
                ("first", {"city": "Lisbon"}, "call-first"),
                ("second", {"city": "Porto"}, "call-second"),
            ),
            "Both done.",
            "ok",
        ]
    )
    lc = create_agent(
        lc_model,
        tools=[first, second],
        system_prompt=LC_SYSTEM,
        middleware=[MemoryMiddleware(memory)],
    )
    pai_model = PaiModel()
    pai = memory.wrap(Agent(pai_model.model))
    try:
        with memory.session(user_id="alice", conversation_id="parallel"):
            out = lc.invoke(user("Both cities?"))
            pai.run_sync("And now?")
            lc.invoke(user("Again."))
    finally:
        memory.unregister(name="after-save-probe")
    assert probe.event.is_set()
    results = [t.id for r in stored(memory, "parallel") for t in r.message.tool_results]
    assert results == ["call-first", "call-second"]
    # pydantic-ai gets them in one request, in call order; LangChain gets its own run back.
    (request,) = [
        m for m in pai_model.requests[0] if isinstance(m, ModelRequest) and not pai_prompts([m])
    ]
    assert [p.tool_call_id for p in request.parts if isinstance(p, ToolReturnPart)] == results
    assert lc_history(lc_model.calls[-1])[: len(out["messages"])] == out["messages"]


class Unit(enum.StrEnum):
    CELSIUS = "celsius"


def test_tool_call_args_that_python_json_accepts_are_stored_as_plain_json(
    memory: Memory, form: str
) -> None:
    """LangChain tool-call args are Python values: a tuple, a ``StrEnum``, the ``TextAccessor``
    that ``message.text`` is. They are stored as the plain JSON they stand for (the run must not
    fail storing them), and pydantic-ai is shown that JSON."""
    text = AIMessage("Lisbon").text  # a str subclass
    args = {"cities": (text, "Porto"), "unit": Unit.CELSIUS}
    lc_model = ScriptedChatModel([calls(("forecast", args, "lc-forecast")), "Sunny.", "ok"])

    @tool
    def forecast(cities: list[str], unit: str) -> str:
        """The forecast for some cities."""
        return f"sunny in {', '.join(cities)} ({unit})"

    lc = langchain_agent(memory, form, lc_model, [forecast])
    pai_model = PaiModel()
    pai = memory.wrap(Agent(pai_model.model))
    with memory.session(user_id="alice", conversation_id="python-args"):
        lc.invoke(user("Forecast?"))
        pai.run_sync("And?")
        lc.invoke(user("Again?"))
    plain = {"cities": ["Lisbon", "Porto"], "unit": "celsius"}
    (call,) = [c for r in stored(memory, "python-args") for c in r.message.tool_calls]
    assert call.args == plain and json.loads(json.dumps(call.args)) == call.args
    (part,) = [
        p
        for m in pai_model.requests[0]
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    ]
    assert (part.tool_call_id, part.args_as_dict()) == ("lc-forecast", plain)
    (again,) = [
        m for m in lc_history(lc_model.calls[-1]) if isinstance(m, AIMessage) and m.tool_calls
    ]
    assert again.tool_calls[0]["args"] == plain


def test_a_langchain_run_resumed_by_another_worker_is_stored_whole(
    local_memory: Memory,
) -> None:
    """A LangChain run that stops at ``interrupt()`` and is resumed (``Command(resume=...)``) by
    another worker (another agent and middleware over the same checkpointer and store, as after
    a restart) is stored whole: its model is never shown the tool result without its call, and
    a pydantic-ai agent continuing the conversation is shown the whole turn."""
    memory = local_memory
    saver = InMemorySaver()

    @tool
    def confirm(question: str) -> str:
        """Ask the user to confirm."""
        return str(interrupt(question))

    lc_model = ScriptedChatModel(
        [calls(("confirm", {"question": "Book it?"}, "lc-ask")), "Booked."]
    )

    def worker() -> Any:
        return create_agent(
            lc_model,
            tools=[confirm],
            system_prompt=LC_SYSTEM,
            checkpointer=saver,
            middleware=[MemoryMiddleware(memory)],
        )

    config: Any = {"configurable": {"thread_id": "booking", "user_id": "alice"}}
    assert "__interrupt__" in worker().invoke(user("Book a tasting."), config)
    worker().invoke(Command(resume="yes"), config)
    shown = lc_history(lc_model.calls[-1])
    check_lc_tool_structure(shown)
    assert [m.text for m in shown] == ["Book a tasting.", "", "yes"]

    pai_model = PaiModel()
    with memory.session(user_id="alice", conversation_id="booking"):
        memory.wrap(Agent(pai_model.model)).run_sync("Thanks.")
    seen = pai_model.requests[0]
    check_pai_tool_structure(seen)
    assert shape(seen[:-1]) == shape(
        [
            ModelRequest(parts=[UserPromptPart("Book a tasting.")]),
            ModelResponse(parts=[ToolCallPart("confirm", {"question": "Book it?"}, "lc-ask")]),
            ModelRequest(parts=[ToolReturnPart("confirm", "yes", "lc-ask")]),
            ModelResponse(parts=[TextPart("Booked.")]),
        ]
    )


# -- windows cut across the other framework's turns -----------------------------------------------


def pai_tool_turns(messages: list[ModelMessage]) -> ModelResponse:
    """pydantic-ai's side of a tool-heavy turn: two parallel calls, then one, then text."""
    start = max(i for i, m in enumerate(messages) if pai_prompts([m]))
    tag = pai_prompts(messages)[-1].split()[-1]
    answered = sum(
        isinstance(p, ToolReturnPart)
        for m in messages[start:]
        if isinstance(m, ModelRequest)
        for p in m.parts
    )
    if answered == 0:
        return ModelResponse(
            parts=[
                TextPart("looking"),
                ToolCallPart("lookup", {"q": "a"}, f"{tag}-1"),
                ToolCallPart("lookup", {"q": "b"}, f"{tag}-2"),
            ]
        )
    if answered == 2:
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": "c"}, f"{tag}-3")])
    return ModelResponse(parts=[TextPart(f"{tag} done")])


def lc_tool_turns(messages: list[BaseMessage]) -> AIMessage:
    """LangChain's side of a tool-heavy turn: two parallel calls, then one, then text."""
    start = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    tag = messages[start].text.split()[-1]
    answered = sum(isinstance(m, ToolMessage) for m in messages[start:])
    if answered == 0:
        return calls(
            ("weather", {"city": "Lisbon"}, f"{tag}-1"),
            ("weather", {"city": "Porto"}, f"{tag}-2"),
            text="checking",
        )
    if answered == 2:
        return calls(("weather", {"city": "Faro"}, f"{tag}-3"))
    return AIMessage(f"{tag} done")


def expected_window(records: list[Record], cut: int) -> list[Message]:
    """The stored messages from ``cut`` on, from the first user message (none if there is no
    user message after ``cut``: a window never starts inside a turn)."""
    tail = [r.message for r in records[cut:]]
    start = next((i for i, m in enumerate(tail) if m.role == "user"), len(tail))
    return tail[start:]


def test_windows_cut_across_the_other_frameworks_turns_keep_tool_calls_whole(
    memory: Memory,
) -> None:
    """Four tool-heavy turns (parallel calls, then one more), alternately pydantic-ai's and
    LangChain's; then, for a budget that ends at each stored message in turn, each framework
    (LangChain both ways) is shown exactly the whole turns from the first user message inside
    the budget, with every tool call and result paired."""
    script = PaiModel([pai_tool_turns] * 9)
    base = Agent(script.model)

    @base.tool_plain
    def lookup(q: str) -> dict[str, str]:
        return {"found": q}

    pai = memory.wrap(base)
    lc = langchain_agent(memory, "middleware", ScriptedChatModel([lc_tool_turns] * 8), [weather])
    with memory.session(user_id="alice", conversation_id="base"):
        pai.run_sync("turn A")
        lc.invoke(user("turn B"))
        pai.run_sync("turn C")
        lc.invoke(user("turn D"))
    records = stored(memory, "base")
    assert [r.message.role for r in records].count("tool") == 10
    tokens = [r.tokens for r in records]

    for cut in range(len(records)):
        budget = sum(tokens[cut:])  # the window's budget ends exactly at message `cut`
        window = expected_window(records, cut)
        users = [m.text for m in window if m.role == "user"]
        call_ids = {c.id for m in window for c in m.tool_calls}
        assert call_ids == {t.id for m in window for t in m.tool_results}

        def copy(name: str) -> None:
            with memory.session(user_id="alice", conversation_id=name):
                copied = [Message.from_dict(r.message.to_dict()) for r in records]
                memory.conversation.append(copied)
            assert [r.tokens for r in stored(memory, name)] == tokens

        # pydantic-ai, on a window cut anywhere in LangChain's turns (or its own)
        copy(f"cut-{cut}-pai")
        pai_model = PaiModel()
        with memory.session(user_id="alice", conversation_id=f"cut-{cut}-pai"):
            memory.wrap(Agent(pai_model.model), history_tokens=budget).run_sync("next")
        seen = pai_model.requests[0]
        check_pai_tool_structure(seen)
        assert pai_prompts(seen) == [*users, "next"]
        assert {
            c.tool_call_id for m in seen if isinstance(m, ModelResponse) for c in m.tool_calls
        } == call_ids

        # LangChain, both ways, on a window cut anywhere in pydantic-ai's turns (or its own)
        for form in FORMS:
            copy(f"cut-{cut}-{form}")
            lc_model = ScriptedChatModel(["ok"])
            if form == "middleware":
                agent = create_agent(
                    lc_model,
                    system_prompt=LC_SYSTEM,
                    middleware=[MemoryMiddleware(memory, history_tokens=budget)],
                )
            else:
                agent = memory.wrap(
                    create_agent(lc_model, system_prompt=LC_SYSTEM), history_tokens=budget
                )
            with memory.session(user_id="alice", conversation_id=f"cut-{cut}-{form}"):
                agent.invoke(user("next"))
            shown = lc_history(lc_model.calls[0])
            check_lc_tool_structure(shown)
            assert [m.text for m in shown if isinstance(m, HumanMessage)] == [*users, "next"]
            assert {c["id"] for m in shown if isinstance(m, AIMessage) for c in m.tool_calls} == (
                call_ids
            )


def test_a_failed_turn_never_hands_the_other_framework_an_orphan_call(
    memory: Memory, form: str
) -> None:
    """A tool that raises ends each framework's run with a call that never got its result;
    the other framework's model is never shown that call."""
    pai_model = PaiModel(
        [
            ModelResponse(parts=[ToolCallPart("explode", {}, "pai-boom")]),
            ModelResponse(parts=[TextPart("fine")]),
        ]
    )
    base = Agent(pai_model.model)

    @base.tool_plain
    def explode() -> str:
        raise RuntimeError("the pydantic-ai tool broke")

    pai = memory.wrap(base)

    @tool
    def crash(city: str) -> str:
        """Always raises."""
        raise RuntimeError("the LangChain tool broke")

    lc_model = ScriptedChatModel(
        [calls(("crash", {"city": "Faro"}, "lc-boom"), text="trying"), "fine"]
    )
    lc = langchain_agent(memory, form, lc_model, [crash])

    with memory.session(user_id="alice", conversation_id="failures"):
        with pytest.raises(RuntimeError, match="the pydantic-ai tool broke"):
            pai.run_sync("Break pydantic-ai.")
        with pytest.raises(RuntimeError, match="the LangChain tool broke"):
            lc.invoke(user("Break LangChain."))
        pai.run_sync("After both.")
        lc.invoke(user("After both, again."))

    # Both failed turns are kept with the tool call that never got its result ...
    records = stored(memory, "failures")
    orphans = [c.id for r in records for c in r.message.tool_calls]
    assert orphans == ["pai-boom", "lc-boom"]
    assert not any(r.message.tool_results for r in records)
    # ... and neither model is ever shown such a call: a call-only message is dropped, a
    # message with text keeps its text.
    seen = pai_model.requests[-1]
    check_pai_tool_structure(seen)
    assert not any(isinstance(m, ModelResponse) and m.tool_calls for m in seen)
    assert pai_prompts(seen) == ["Break pydantic-ai.", "Break LangChain.", "After both."]
    texts = [m.text for m in seen if isinstance(m, ModelResponse)]
    assert texts == ["trying"]
    shown = without_ids(lc_history(lc_model.calls[-1]))
    check_lc_tool_structure(shown)
    assert shown[:-1] == [
        HumanMessage("Break pydantic-ai."),
        HumanMessage("Break LangChain."),
        AIMessage("trying"),
        HumanMessage("After both."),
        AIMessage("fine"),
    ]
