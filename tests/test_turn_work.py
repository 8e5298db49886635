"""What one agent turn does to the store (issue 13): its reads in one batch, its writes in one,
the working memory read once, a window parsed once; and that what users rely on stays.

The round trips themselves are counted on the wire by ``benchmarks/agent_overhead.py`` (and
``tests/test_benchmarks.py`` checks that a batch of reads is one round trip to PostgreSQL);
here a recording store says which store calls a turn makes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.tools import tool
from memory_adapters_inmemory import InMemoryStore
from memory_adapters_langchain import MemoryMiddleware
from memory_adapters_langchain import mapping as lc_mapping
from memory_adapters_pydantic_ai import capability, toolset
from memory_adapters_pydantic_ai import mapping as pai_mapping
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from memory_adapters import (
    Memory,
    Message,
    RawJSON,
    Record,
    RunCompleted,
    ToolCall,
    ToolResult,
    hookimpl,
)
from memory_adapters.messages import RAW_SEPARATOR
from memory_adapters.steps import StoreCall
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool


class Recording(InMemoryStore):
    """An in-memory store that records the calls the core makes: ``(method, detail)``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []
        self.background: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def _note(self, method: str, detail: Any = None) -> None:
        with self.lock:
            if threading.current_thread().name == "memory-adapters-worker":
                # the Memory's background work (indexing the turn for conversation search)
                self.background.append((method, detail))
            else:
                self.calls.append((method, detail))

    def batch(self, calls: Sequence[StoreCall]) -> list[Any]:
        self._note("batch", [c.method for c in calls])
        return [getattr(self, c.method)(*c.args, **c.kwargs) for c in calls]

    async def abatch(self, calls: Sequence[StoreCall]) -> list[Any]:
        self._note("batch", [c.method for c in calls])
        return await super().abatch(calls)

    def append(self, conversation: str, entries: Any, **kwargs: Any) -> Any:
        self._note("append", len(entries))
        return super().append(conversation, entries, **kwargs)

    def head_and_tail(self, conversation: str, **kwargs: Any) -> Any:
        self._note("head_and_tail")
        return super().head_and_tail(conversation, **kwargs)

    def list_facts(self, namespace: str, scope: str, **kwargs: Any) -> Any:
        self._note("list_facts", namespace)
        return super().list_facts(namespace, scope, **kwargs)

    def taken(self) -> list[tuple[str, Any]]:
        with self.lock:
            calls, self.calls = self.calls, []
        return calls


@pytest.fixture
def recording() -> Iterator[tuple[Memory, Recording]]:
    store = Recording()
    memory = Memory(store=store, embed=False, load_entrypoints=False)
    yield memory, store
    memory.close()


# -- LangChain -------------------------------------------------------------------------------------


def test_a_langchain_turn_reads_once_and_writes_its_steps_once_at_its_end(
    recording: tuple[Memory, Recording],
) -> None:
    memory, store = recording
    seen_while_running: list[int] = []

    @tool
    def lookup(q: str) -> str:
        """Looks up."""
        with memory.session(conversation_id="t"):
            seen_while_running.append(memory.conversation.last_seq())
        return f"found {q}"

    def reply(messages: list[Any]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content="done")
        return call_tool("lookup", q="x")

    agent: Any = create_agent(
        ScriptedChatModel([reply]), tools=[lookup], middleware=[MemoryMiddleware(memory)]
    )
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [("user", "first")]}, config)
    store.taken()
    agent.invoke({"messages": [("user", "second")]}, config)
    calls = store.taken()
    # the window and the working memory in one batch; the run's three steps (its input, the
    # model's call with the tool's result, the answer) in one batch at the end: nothing else
    assert calls == [
        ("batch", ["head_and_tail", "list_facts"]),
        ("head_and_tail", None),
        ("list_facts", "default#working"),
        ("batch", ["append", "append", "append"]),
        ("append", 1),
        ("append", 2),
        ("append", 1),
    ]
    assert seen_while_running == [0, 4]  # nothing of a run is written while it runs
    with memory.session(conversation_id="t"):
        records = memory.conversation.read()
    assert [r.message.role for r in records[4:]] == ["user", "assistant", "tool", "assistant"]
    assert [r.batch for r in records[4:]] == [5, 6, 6, 8]  # each step a batch of its own


def test_a_langchain_run_replayed_or_retried_under_its_run_id_stores_no_step_twice(
    recording: tuple[Memory, Recording],
) -> None:
    """Each step of a run is a batch keyed by the run and the step: a run that failed and is
    retried under the same run id stores its input once, and a run that succeeded and is
    run again under its run id (a client retrying a request) is refused and stores nothing
    again."""
    memory, _ = recording
    attempts = {"n": 0}

    def reply(messages: list[Any]) -> Any:
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise RuntimeError("the provider went away")
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content="oolong")
        return call_tool("lookup", q="tea")

    @tool
    def lookup(q: str) -> str:
        """Looks up."""
        return f"found {q}"

    agent: Any = create_agent(
        ScriptedChatModel([reply]), tools=[lookup], middleware=[MemoryMiddleware(memory)]
    )
    retried: Any = {"configurable": {"thread_id": "r"}, "run_id": uuid.uuid4()}
    with pytest.raises(RuntimeError):
        agent.invoke({"messages": [("user", "which tea?")]}, retried)
    agent.invoke({"messages": [("user", "which tea?")]}, retried)
    replayed: Any = {"configurable": {"thread_id": "p"}, "run_id": uuid.uuid4()}
    agent.invoke({"messages": [("user", "which tea?")]}, replayed)
    with pytest.raises(RunCompleted):
        agent.invoke({"messages": [("user", "which tea?")]}, replayed)
    expected = [("user", "which tea?"), ("assistant", ""), ("tool", ""), ("assistant", "oolong")]
    for thread in ("r", "p"):
        with memory.session(conversation_id=thread):
            records = memory.conversation.read()
        assert [(r.message.role, r.message.text) for r in records] == expected


def test_a_working_memory_write_in_a_run_is_shown_to_the_next_model_call(
    recording: tuple[Memory, Recording],
) -> None:
    memory, store = recording

    @tool
    def note(value: str) -> str:
        """Takes a note."""
        memory.working.set("plan", value)
        return "noted"

    def reply(messages: list[Any]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content="ok")
        return call_tool("note", value="step two")

    model = ScriptedChatModel([reply])
    agent: Any = create_agent(model, tools=[note], middleware=[MemoryMiddleware(memory)])
    agent.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "w"}})
    working_reads = [c for c in store.taken() if c == ("list_facts", "default#working")]
    assert len(working_reads) == 2  # at the start, and once more after the tool's write
    first, second = (str(call[0].content) for call in model.calls)
    assert "plan" not in first
    assert "- plan: step two" in second


def test_a_raising_tool_writes_what_completed_at_once(
    recording: tuple[Memory, Recording],
) -> None:
    memory, store = recording

    @tool
    def explode(q: str) -> str:
        """Fails."""
        raise RuntimeError(q)

    agent: Any = create_agent(
        ScriptedChatModel([call_tool("explode", q="boom")]),
        tools=[explode],
        middleware=[MemoryMiddleware(memory)],
    )
    with pytest.raises(RuntimeError):
        agent.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "f"}})
    writes = [c for c in store.taken() if c[0] == "batch" and "append" in c[1]]
    assert writes == [("batch", ["append", "append"])]  # the input; the call that raised
    with memory.session(conversation_id="f"):
        assert [r.message.role for r in memory.conversation.read()] == ["user", "assistant"]


# -- pydantic-ai -----------------------------------------------------------------------------------


def _model(messages: list[Any], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(p.part_kind == "user-prompt" for p in last.parts):
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"})])
    return ModelResponse(parts=[TextPart("done")])


def test_a_pydantic_ai_turn_reads_once_and_writes_once(
    recording: tuple[Memory, Recording], monkeypatch: pytest.MonkeyPatch
) -> None:
    memory, store = recording
    built: list[object] = []
    make = toolset.memory_toolset

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(args)
        return make(*args, **kwargs)

    monkeypatch.setattr(capability, "memory_toolset", counted)
    agent = Agent(FunctionModel(_model))

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f"found {q}"

    wrapped = memory.wrap(agent)
    with memory.session(conversation_id="p"):
        asyncio.run(wrapped.run("first"))
        store.taken()
        asyncio.run(wrapped.run("second"))
        second = store.taken()
    assert second == [
        ("batch", ["head_and_tail", "list_facts"]),
        ("head_and_tail", None),
        ("list_facts", "default#working"),
        ("append", 4),
    ]
    assert len(built) == 1  # the memory toolset is built once, not per run


# -- the stored form -------------------------------------------------------------------------------

_texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=30)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _texts,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(_texts, c, max_size=3),
    max_leaves=8,
)
_messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "system"]),
    text=_texts,
    framework=st.none() | st.just("x"),
    raw=st.none() | _json | _json.map(lambda v: RawJSON(json.dumps(v))),
    meta=st.dictionaries(_texts, _json, max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_messages, min_size=1, max_size=6))
def test_stored_messages_read_back_exactly_one_by_one_or_all_at_once(
    messages: list[Message],
) -> None:
    rows = [(i + 1, m.serialize(1 << 20), 3, 1, None, 0.0) for i, m in enumerate(messages)]
    one_by_one = [Record.from_row(*row) for row in rows]
    at_once = Record.from_rows(rows)
    assert [r.message for r in at_once] == [r.message for r in one_by_one] == messages
    for m, r in zip(messages, at_once, strict=True):
        assert type(r.message.raw) is type(m.raw)  # JSON text stays text, a value a value


_json_messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "system"]),
    text=_texts,
    tool_calls=st.lists(
        st.builds(ToolCall, id=_texts, name=_texts, args=st.dictionaries(_texts, _json)),
        max_size=2,
    ),
    framework=st.none() | st.just("x"),
    raw=st.none() | _json | _json.map(lambda v: RawJSON(json.dumps(v))),
    meta=st.dictionaries(_texts, _json, max_size=2),
).map(lambda m: m if m.role == "assistant" else Message(m.role, m.text, raw=m.raw, meta=m.meta))


def _scribble(value: Any) -> None:
    """Change in place every dict, list and dataclass inside ``value`` (each str field of a
    dataclass too)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for name, v in list(vars(value).items()):
            _scribble(v)
            if isinstance(v, str):
                object.__setattr__(value, name, v + "~")
    elif isinstance(value, dict):
        for v in list(value.values()):
            _scribble(v)
        value["scribbled"] = True
    elif isinstance(value, list):
        for v in value:
            _scribble(v)
        value.append("scribbled")


@settings(max_examples=200, deadline=None)
@given(st.lists(_json_messages, min_size=1, max_size=5), st.booleans())
def test_a_message_read_again_is_decoded_from_the_cache_as_a_copy_of_its_own(
    messages: list[Message], results: bool
) -> None:
    """Rows read again (the next turn's window) come from the decoded-message cache: equal to
    what was stored, and each read's messages are its own, so changing one (a hook, a user
    editing a window) never changes what a later read returns."""
    if results:
        messages = [
            *messages,
            Message.tool(ToolResult("c", {"rows": [1, {"a": []}]}, "f"), ToolResult("d", "x")),
        ]
    rows = [(i + 1, m.serialize(1 << 20), 3, 1, None, 0.0) for i, m in enumerate(messages)]
    first = Record.from_rows(rows)
    assert [r.message for r in first] == messages
    for r in first:  # scribble over everything the first read handed out
        m = r.message
        _scribble(m.meta)
        _scribble(m.raw)
        for c in m.tool_calls:
            _scribble(c.args)
        for t in m.tool_results:
            _scribble(t.content)
        m.tool_calls.append(ToolCall("x", "y"))
    fresh_texts = [(seq, "".join(list(data)), n, b, r, t) for seq, data, n, b, r, t in rows]
    again = Record.from_rows(fresh_texts)  # equal texts, other objects: as a store reads them
    assert [r.message for r in again] == messages
    assert Record.from_row(*rows[0]).message == messages[0]


def test_the_decoded_message_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_adapters import messages as module

    module._decoded.clear()
    monkeypatch.setattr(module, "DECODED_CACHE_CHARS", 10_000)
    rows = [
        (i, Message.user(f"{i} " + "x" * 400).serialize(1 << 20), 3, 1, None, 0.0)
        for i in range(1, 200)
    ]
    for row in rows:
        assert Record.from_row(*row).message.text.startswith(f"{row[0]} ")
    assert 0 < module._decoded.chars <= 10_000
    assert module._decoded.chars == sum(map(len, module._decoded.entries))
    assert Record.from_rows(rows)[-1].message == Message.user("199 " + "x" * 400)
    monkeypatch.setattr(module, "DECODED_CACHE_CHARS", 0)
    module._decoded.clear()
    Record.from_rows(rows)
    assert not module._decoded.entries


def test_raw_json_text_is_kept_as_text_and_never_escaped() -> None:
    raw = RawJSON('{"parts": [{"content": "say \\"hi\\""}]}')
    message = Message("assistant", "hi", [ToolCall("c", "f", {})], framework="x", raw=raw)
    stored = message.serialize(1 << 20)
    head, sep, tail = stored.partition(RAW_SEPARATOR)
    assert sep and tail == raw and "raw" not in json.loads(head)
    # a raw text holding the separator (not JSON a framework makes) is kept escaped instead
    odd = Message("tool", tool_results=[ToolResult("c", 1)], raw=RawJSON('"a\x1eb"'))
    assert RAW_SEPARATOR not in odd.serialize(1 << 20)
    assert Record.from_row(1, odd.serialize(1 << 20), 1, 1, None, 0.0).message == odd


# -- PostgreSQL: async without worker threads ------------------------------------------------------


def test_postgres_async_calls_use_connections_of_their_own_loop(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = Memory(
        postgres_url, store_options={"schema": "t_" + uuid.uuid4().hex[:12]}, embed=False
    )

    def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an async call hopped to a worker thread")

    async def turn(n: int) -> list[str]:
        async with memory.session(conversation_id="a"):
            await memory.conversation.aappend([Message.user(f"q{n}"), Message.assistant("a")])
            await memory.working.aset("k", n)
            window = await memory.conversation.awindow()
            return [m.text for m in window.messages()]

    try:
        monkeypatch.setattr(asyncio, "to_thread", no_thread)
        assert asyncio.run(turn(1)) == ["q1", "a"]
        assert asyncio.run(turn(2)) == ["q1", "a", "q2", "a"]  # a new loop, new connections
        store: Any = memory.store
        assert sum(len(c.idle) for c in store._loops.values()) <= 1  # the closed loop's went
    finally:
        memory.close()
    assert memory.store._loops == {}  # type: ignore[attr-defined]


_blocks = st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": _texts})
    | st.fixed_dictionaries({"type": st.just("data"), "value": _json}),
    max_size=2,
)
_lc_content = _texts | _blocks
_lc_metadata = st.dictionaries(_texts, _json, max_size=2)
_lc_calls = st.lists(
    st.fixed_dictionaries(
        {"id": _texts, "name": _texts, "args": st.dictionaries(_texts, _json, max_size=2)}
    ),
    max_size=2,
)
_lc_messages = st.one_of(
    st.builds(HumanMessage, content=_lc_content, additional_kwargs=_lc_metadata, id=_texts),
    st.builds(
        AIMessage,
        content=_lc_content,
        tool_calls=_lc_calls,
        response_metadata=_lc_metadata,
        id=_texts,
    ),
    st.builds(
        ToolMessage,
        content=_lc_content,
        tool_call_id=_texts,
        artifact=_json,
        id=_texts,
    ),
    st.builds(SystemMessage, content=_lc_content, id=_texts),
)


def _scribble_lc(message: BaseMessage) -> None:
    """Change every list and dict of ``message``'s fields in place, and its id."""
    for value in [*message.__dict__.values(), *(message.__pydantic_extra__ or {}).values()]:
        _scribble(value)
    message.id = "scribbled"


@settings(max_examples=200, deadline=None)
@given(st.lists(_lc_messages, min_size=1, max_size=5))
def test_a_langchain_window_read_again_is_rebuilt_from_the_cache_as_messages_of_its_own(
    messages: list[BaseMessage],
) -> None:
    """A LangChain message read again (the next turn's window) is a copy of the one LangChain's
    loader rebuilt the first time: equal to what was stored, and each read's messages are its
    own, so a model, a middleware or a user changing one never changes a later read."""
    neutral = lc_mapping.to_messages(messages)
    assert all(isinstance(m.raw, RawJSON) for m in neutral)
    expected = [  # an empty system message is left out (it says nothing)
        m
        for m in messages_from_dict(json.loads(json.dumps(messages_to_dict(messages))))
        if not isinstance(m, SystemMessage) or m.text
    ]
    rows = [(i + 1, m.serialize(1 << 20), 3, 1, None, 0.0) for i, m in enumerate(neutral)]
    first = lc_mapping.from_messages(r.message for r in Record.from_rows(rows))
    assert first == expected
    for m in first:
        _scribble_lc(m)
    fresh_texts = [(seq, "".join(list(data)), n, b, r, t) for seq, data, n, b, r, t in rows]
    again = lc_mapping.from_messages(r.message for r in Record.from_rows(fresh_texts))
    assert again == expected
    assert [type(m) for m in again] == [type(m) for m in expected]
    assert lc_mapping.from_messages(r.message for r in Record.from_rows(rows)) == expected


def test_a_langchain_row_whose_raw_is_a_parsed_dict_is_read_exactly() -> None:
    """Rows written while LangChain's ``raw`` was kept as a parsed dict read back as written."""
    call = {"id": "c1", "name": "f", "args": {"q": [1, 2]}}
    original = [HumanMessage("hi", id="h"), AIMessage("", tool_calls=[call], id="a")]
    neutral = lc_mapping.to_messages(original)
    for m in neutral:
        m.raw = json.loads(m.raw)
    rows = [(i + 1, m.serialize(1 << 20), 3, 1, None, 0.0) for i, m in enumerate(neutral)]
    for _ in range(2):
        assert lc_mapping.from_messages(r.message for r in Record.from_rows(rows)) == original


_pai_request_parts: st.SearchStrategy[Any] = st.one_of(
    st.builds(
        UserPromptPart,
        content=_texts
        | st.lists(
            _texts
            | st.builds(ImageUrl, url=_texts.map(lambda t: "https://x.test/" + t))
            | st.builds(BinaryContent, data=st.binary(max_size=8), media_type=st.just("image/png")),
            max_size=2,
        ),
    ),
    st.builds(SystemPromptPart, content=_texts),
    st.builds(
        ToolReturnPart,
        tool_name=_texts,
        content=_json,
        tool_call_id=_texts,
        outcome=st.sampled_from(["success", "failed", "denied", "interrupted", "retried"]),
    ),
)
_pai_response_parts: st.SearchStrategy[Any] = st.one_of(
    st.builds(TextPart, content=_texts),
    st.builds(
        ToolCallPart,
        tool_name=_texts,
        args=st.dictionaries(_texts, _json, max_size=2),
        tool_call_id=_texts,
    ),
    st.builds(ThinkingPart, content=_texts),
)
_pai_messages = st.one_of(
    st.builds(ModelRequest, parts=st.lists(_pai_request_parts, min_size=1, max_size=3)),
    st.builds(
        ModelResponse,
        parts=st.lists(_pai_response_parts, min_size=1, max_size=3),
        usage=st.builds(
            RequestUsage,
            input_tokens=st.integers(0, 1000),
            details=st.dictionaries(_texts, st.integers(0, 9), max_size=2),
        ),
        provider_details=st.none() | st.dictionaries(_texts, _json, max_size=2),
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_pai_messages, min_size=1, max_size=5))
def test_a_pydantic_ai_window_read_again_is_copied_from_the_cache_as_messages_of_its_own(
    messages: list[ModelMessage],
) -> None:
    """A pydantic-ai message read again (the next turn's window) is a copy of the one
    validated the first time, not validated again: equal to what was stored, and each read's
    messages are its own, so a model, a capability or a user changing one never changes a
    later read."""
    neutral = pai_mapping.to_messages(messages)
    expected = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))
    rows = [(i + 1, m.serialize(1 << 20), 3, 1, None, 0.0) for i, m in enumerate(neutral)]
    first = pai_mapping.from_messages(r.message for r in Record.from_rows(rows))
    assert first == expected
    for m in first:
        _scribble(m)
    fresh_texts = [(seq, "".join(list(data)), n, b, r, t) for seq, data, n, b, r, t in rows]
    validated = pai_mapping._validated
    calls: list[int] = []
    pai_mapping._validated = lambda raws: calls.append(len(raws)) or validated(raws)  # type: ignore[func-returns-value]
    try:
        again = pai_mapping.from_messages(r.message for r in Record.from_rows(fresh_texts))
    finally:
        pai_mapping._validated = validated
    assert again == expected
    assert [[type(p) for p in m.parts] for m in again] == [
        [type(p) for p in m.parts] for m in expected
    ]
    assert calls == []  # every message copied from the cache
    for m in again:
        _scribble(m)
    assert pai_mapping.from_messages(r.message for r in Record.from_rows(rows)) == expected


def test_a_value_the_pydantic_ai_cache_cannot_copy_is_never_kept() -> None:
    """A message holding a value of a type the copier does not know (a set, a dataclass with
    slots) is handed out as validated and never kept: what is kept is only what can be copied
    whole."""

    @dataclasses.dataclass(slots=True)
    class Slotted:
        items: list[int]

    for odd in ({1, 2}, Slotted([1])):
        with pytest.raises(pai_mapping._Unknown):
            pai_mapping._clone({"x": [odd]})
    message = ModelRequest(parts=[UserPromptPart("hi")])
    copy = pai_mapping._clone(message)
    assert copy == message and copy is not message
    assert copy.parts is not message.parts and copy.parts[0] is not message.parts[0]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX only")
def test_a_child_forked_while_a_cache_or_the_token_counter_was_locked_reads_and_counts() -> None:
    """A process forked while a thread held the decoded-message caches' or the token counter's
    lock (a server forking workers while serving) does not hang on its first read."""
    from memory_adapters import messages as module
    from memory_adapters import tokens

    rows = [(1, Message.user("forked").serialize(1 << 20), 3, 1, None, 0.0)]
    held = [module._decoded.lock, lc_mapping._restored.lock, tokens._lock]
    for lock in held:
        lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if nothing hangs (the alarm kills it otherwise)
            signal.alarm(20)
            ok = Record.from_rows(rows)[0].message.text == "forked"
            ok = ok and not lc_mapping.from_messages(lc_mapping.to_messages([AIMessage("x")]))[0].id
            ok = ok and tokens.count(["forked"])[0] > 0
            os._exit(0 if ok else 1)
    finally:
        for lock in held:
            lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


_junk = st.one_of(
    _json,  # any JSON value: a plain string, a list, a dict that is no framework's message
    _json.map(lambda v: RawJSON(json.dumps(v))),  # JSON text of the same
    st.just(RawJSON("{not json")),
    st.just(RawJSON('{"type": "ai", "data": {"content": 5}}')),  # LangChain's shape, invalid
    st.just({"parts": [{"part_kind": "nonsense"}], "kind": "request"}),  # pydantic-ai's shape
)


def _said(messages: Sequence[Message]) -> list[tuple[Any, ...]]:
    return [
        (
            m.role,
            m.text,
            [(c.name, c.args) for c in m.tool_calls],
            [r.content for r in m.tool_results],
        )
        for m in messages
    ]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_raw_a_hook_rewrote_into_something_else_is_rebuilt_from_the_neutral_form(
    data: st.DataObject,
) -> None:
    """``raw`` is the framework's own message, but a plugin may rewrite it (a redaction that
    masks its text, say) into anything JSON can hold. Reading it back never fails: what is not
    the framework's message is rebuilt from the neutral form, as a message with no ``raw``."""
    from memory_adapters_pydantic_ai import mapping as pai_mapping

    call = f"call-{data.draw(st.integers(0, 9))}"
    lc = lc_mapping.to_messages(
        [
            HumanMessage("hi", id="h"),
            AIMessage("", tool_calls=[{"id": call, "name": "f", "args": {"q": 1}}], id="a"),
            ToolMessage("done", tool_call_id=call, name="f", id="t"),
            AIMessage("bye", id="b"),
        ]
    )
    pai = pai_mapping.to_messages(
        [
            ModelRequest.user_text_prompt("hi"),
            ModelResponse(parts=[ToolCallPart("f", {"q": 1}, call)]),
            ModelRequest(parts=[ToolReturnPart("f", "done", call)]),
            ModelResponse(parts=[TextPart("bye")]),
        ]
    )
    for window, mapping in ((lc, lc_mapping), (pai, pai_mapping)):
        junked = list(window)
        plain = list(window)
        for i in data.draw(st.sets(st.sampled_from(range(len(window))), min_size=1)):
            junked[i] = Message(**{**_fields(window[i]), "raw": data.draw(_junk)})
            plain[i] = Message(**{**_fields(window[i]), "raw": None})
        shown = mapping.to_messages(mapping.from_messages(junked))
        assert _said(shown) == _said(mapping.to_messages(mapping.from_messages(plain)))


def _fields(m: Message) -> dict[str, Any]:
    return {
        "role": m.role,
        "text": m.text,
        "tool_calls": m.tool_calls,
        "tool_results": m.tool_results,
        "framework": m.framework,
        "raw": m.raw,
        "meta": m.meta,
    }


class _RawAsPlainText:
    """A redaction written the easy way: ``raw`` run through a text substitution, which makes
    the framework's JSON text plain text."""

    @hookimpl
    def before_save(self, messages: list[Message]) -> None:
        for i, m in enumerate(messages):
            if m.raw is not None:
                messages[i] = Message(**{**_fields(m), "raw": str(m.raw).replace("@", "[at]")})


def test_agents_go_on_when_a_plugin_turned_raw_into_plain_text() -> None:
    """Both adapters' next runs work, and show the model the earlier turn (from the neutral
    form), when a plugin made every ``raw`` plain text."""
    memory = Memory("memory://", embed=False, plugins=[_RawAsPlainText()])
    seen: list[list[str]] = []

    def reply(messages: list[Any], info: AgentInfo) -> ModelResponse:
        seen.append([p.content for m in messages for p in m.parts if isinstance(p, TextPart)])
        return ModelResponse(parts=[TextPart("mail me at a@b.c")])

    agent = memory.wrap(Agent(FunctionModel(reply)))
    agent.run_sync("first", conversation_id="p")
    assert agent.run_sync("second", conversation_id="p").output == "mail me at a@b.c"
    assert seen[-1] == ["mail me at a@b.c"]
    lc: Any = create_agent(
        ScriptedChatModel([lambda m: AIMessage("x@y.z"), lambda m: AIMessage(m[-2].text)]),
        middleware=[MemoryMiddleware(memory, tools=False)],
    )
    config: Any = {"configurable": {"thread_id": "l"}}
    lc.invoke({"messages": [("user", "first")]}, config)
    out = lc.invoke({"messages": [("user", "second")]}, config)
    assert out["messages"][-1].text == "x@y.z"
