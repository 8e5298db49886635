"""``MemoryChatMessageHistory`` under LangChain's ``RunnableWithMessageHistory``, on every store:
memory://, SQLite, PostgreSQL and MongoDB (mongomock, with mongomock-motor for the async path).

Store work is counted by wrapping the store's methods (:class:`StoreCalls`), never timed."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mongomock
import psycopg
import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable
from langchain_core.runnables.history import RunnableWithMessageHistory
from memory_adapters_langchain import MemoryChatMessageHistory, to_messages
from memory_adapters_mongo import MongoStore
from mongomock_motor import AsyncMongoMockClient
from test_store_mongo import Locked

from memory_adapters import (
    InvalidId,
    InvalidInput,
    Memory,
    Message,
    NoScope,
    ToolCall,
    ToolResult,
)
from memory_adapters.store import Store
from memory_adapters.testing.langchain import ScriptedChatModel
from memory_adapters.tokens import MESSAGE_OVERHEAD

pytestmark = pytest.mark.filterwarnings(
    # RunnableWithMessageHistory is deprecated in LangChain, and still what this serves
    "ignore::langchain_core._api.deprecation.LangChainDeprecationWarning"
)

STORES = ["memory", "sqlite", "postgres", "mongo"]
MODES = ["invoke", "ainvoke", "stream", "astream"]
SYSTEM = "Be brief."


# -- stores ---------------------------------------------------------------------------------------


@dataclass
class Backend:
    """A store kind with a fresh Memory over it, and a way to open a second Memory over the same
    storage (a new process would do the same)."""

    kind: str
    memory: Memory
    open_again: Callable[[], Memory] | None
    opened: list[Memory] = field(default_factory=list)

    def reopen(self) -> Memory:
        assert self.open_again is not None, f"{self.kind} keeps nothing between Memory objects"
        memory = self.open_again()
        self.opened.append(memory)
        return memory


def _mongo(raw: Any) -> Memory:
    """A Memory over mongomock: sync calls on it, async calls on mongomock-motor, same data."""
    return Memory(
        store=MongoStore(
            client=Locked(raw),
            async_client=AsyncMongoMockClient(mock_mongo_client=raw),
            database="ma_langchain",
        )
    )


def open_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh Memory over one kind of store, closed (and its schema dropped) afterwards."""
    schema: str | None = None
    url = ""
    if kind == "memory":
        b = Backend(kind, Memory("memory://"), None)
    elif kind == "sqlite":
        path = tmp_path / "memory.db"
        b = Backend(kind, Memory(f"sqlite:///{path}"), lambda: Memory(f"sqlite:///{path}"))
    elif kind == "mongo":
        raw: Any = mongomock.MongoClient()
        b = Backend(kind, _mongo(raw), lambda: _mongo(raw))
    else:
        url = request.getfixturevalue("postgres_url")
        schema = "t_" + uuid.uuid4().hex[:12]
        options = {"schema": schema}
        b = Backend(
            kind,
            Memory(url, store_options=options),
            lambda: Memory(url, store_options=options),
        )
    try:
        yield b
    finally:
        for m in [b.memory, *b.opened]:
            m.close()
        if schema is not None:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=STORES)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from open_backend(request.param, request, tmp_path)


@pytest.fixture(params=["sqlite", "postgres", "mongo"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The stores whose data outlives a Memory object."""
    yield from open_backend(request.param, request, tmp_path)


@pytest.fixture
def memory(backend: Backend) -> Memory:
    return backend.memory


# -- counting store calls ------------------------------------------------------------------------

_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("inside_store_call", default=False)


WORKER = "memory-adapters-worker"
"""The thread of the Memory's background work (indexing turns for conversation search): its
calls are not the turn's."""


class StoreCalls:
    """Wraps a store's conversation methods (sync and async) and records each call the core
    makes, by name; calls a store method makes to another (a default ``ahead_and_tail`` running
    ``head_and_tail`` in a thread) are not counted again, nor the worker's."""

    READS = ("tail", "head_and_tail", "read", "last_seq", "latest_summary")
    WRITES = ("append", "delete_conversation", "put_summary")

    def __init__(self, store: Store) -> None:
        self.names: list[str] = []
        for name in self.READS + self.WRITES:
            self._wrap(store, name)
            self._wrap(store, "a" + name)

    def _wrap(self, store: Store, name: str) -> None:
        method = getattr(store, name)
        names = self.names
        if asyncio.iscoroutinefunction(method):

            @functools.wraps(method)
            async def acall(*args: Any, **kwargs: Any) -> Any:
                if _INSIDE.get() or threading.current_thread().name == WORKER:
                    return await method(*args, **kwargs)
                token = _INSIDE.set(True)
                try:
                    names.append(name)
                    return await method(*args, **kwargs)
                finally:
                    _INSIDE.reset(token)

            setattr(store, name, acall)
        else:

            @functools.wraps(method)
            def call(*args: Any, **kwargs: Any) -> Any:
                if _INSIDE.get() or threading.current_thread().name == WORKER:
                    return method(*args, **kwargs)
                token = _INSIDE.set(True)
                try:
                    names.append(name)
                    return method(*args, **kwargs)
                finally:
                    _INSIDE.reset(token)

            setattr(store, name, call)

    def take(self) -> list[str]:
        """The calls since the last ``take``."""
        out = list(self.names)
        self.names.clear()
        return out

    @classmethod
    def is_async(cls, name: str) -> bool:
        return name.startswith("a") and name[1:] in cls.READS + cls.WRITES

    @classmethod
    def reads(cls, names: Sequence[str]) -> list[str]:
        return [n for n in names if (n[1:] if cls.is_async(n) else n) in cls.READS]

    @classmethod
    def appends(cls, names: Sequence[str]) -> list[str]:
        return [n for n in names if n in ("append", "aappend")]


# -- chains ---------------------------------------------------------------------------------------

SHAPES = ["history_key", "prepended", "prepended_key"]
"""How the chain gets its history: under its own key (``history_messages_key``); prepended to
the input messages (a bare model, no keys); prepended under the input key."""


def factory(memory: Memory, **options: Any) -> Callable[[str], MemoryChatMessageHistory]:
    """The factory LangChain users write: one history object per session id (and per turn)."""

    def get(session_id: str) -> MemoryChatMessageHistory:
        return MemoryChatMessageHistory(memory, conversation_id=session_id, **options)

    return get


def chain(
    shape: str,
    model: ScriptedChatModel,
    history: Callable[[str], MemoryChatMessageHistory],
) -> RunnableWithMessageHistory:
    if shape == "history_key":
        prompt = ChatPromptTemplate.from_messages(
            [("system", SYSTEM), MessagesPlaceholder("history"), ("human", "{question}")]
        )
        return RunnableWithMessageHistory(
            prompt | model,
            history,
            input_messages_key="question",
            history_messages_key="history",
        )
    if shape == "prepended":
        return RunnableWithMessageHistory(model, history)
    prompt = ChatPromptTemplate.from_messages([("system", SYSTEM), MessagesPlaceholder("messages")])
    return RunnableWithMessageHistory(prompt | model, history, input_messages_key="messages")


def chain_input(shape: str, question: str) -> Any:
    if shape == "history_key":
        return {"question": question}
    if shape == "prepended":
        return question
    return {"messages": [HumanMessage(question)]}


async def _collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [chunk async for chunk in stream]


def run_turn(runnable: Runnable[Any, Any], mode: str, value: Any, session: str) -> Any:
    """One turn through ``mode`` (each async turn on a fresh event loop, as a script would)."""
    config: Any = {"configurable": {"session_id": session}}
    if mode == "invoke":
        return runnable.invoke(value, config)
    if mode == "stream":
        return list(runnable.stream(value, config))
    if mode == "ainvoke":
        return asyncio.run(runnable.ainvoke(value, config))
    return asyncio.run(_collect(runnable.astream(value, config)))


def stored(memory: Memory, conversation_id: str, **scope: Any) -> list[tuple[str, str, int]]:
    """(role, text, batch) of every stored message of a conversation."""
    with memory.session(conversation_id=conversation_id, **scope):
        return [(r.message.role, r.message.text, r.batch) for r in memory.conversation.read()]


def texts(messages: Sequence[BaseMessage]) -> list[str]:
    return [str(m.text) for m in messages]


def check_tool_pairs(messages: Sequence[BaseMessage]) -> None:
    """Every tool call is answered by the tool messages right after it, and every tool message
    answers a call of the assistant message before it; nothing ends in an unanswered call."""
    i = 0
    while i < len(messages):
        m = messages[i]
        if isinstance(m, ToolMessage):
            raise AssertionError(f"a tool result without its call at {i}: {m!r}")
        i += 1
        if isinstance(m, AIMessage) and m.tool_calls:
            called = {c["id"] for c in m.tool_calls}
            answered: set[str | None] = set()
            while i < len(messages) and isinstance(messages[i], ToolMessage):
                result = messages[i]
                assert isinstance(result, ToolMessage)
                assert result.tool_call_id in called, f"result {result.tool_call_id} not called"
                answered.add(result.tool_call_id)
                i += 1
            assert answered == called, f"calls {called - answered} left unanswered"


# -- turns: what the model sees, what is stored, what is read ----------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
def test_turns_are_seen_stored_once_and_read_once(memory: Memory, shape: str, mode: str) -> None:
    model = ScriptedChatModel(["Hello Ann.", "Oolong.", "You said hi, then asked about tea."])
    runnable = chain(shape, model, factory(memory))
    calls = StoreCalls(memory.store)
    questions = ["Hi, I'm Ann.", "My tea?", "What did I say?"]
    seen_before: list[str] = []
    for n, question in enumerate(questions):
        calls.take()
        out = run_turn(runnable, mode, chain_input(shape, question), "c-1")
        names = calls.take()
        answer = model.script[n]
        got = out if mode in ("invoke", "ainvoke") else functools.reduce(lambda a, b: a + b, out)
        assert got.text == answer
        # the model was given every earlier turn, then the question
        head = [] if shape == "prepended" else [SYSTEM]
        assert model.seen_texts() == [*head, *seen_before, question]
        seen_before += [question, answer]
        # each turn stored exactly once, as one batch: no history stored again
        rows = stored(memory, "c-1")
        assert [(role, text) for role, text, _ in rows] == [
            (role, text)
            for role, text in zip(["user", "assistant"] * (n + 1), seen_before, strict=True)
        ]
        assert [batch for _, _, batch in rows] == [
            b for k in range(n + 1) for b in (2 * k + 1,) * 2
        ]
        # one store read and one append per turn, on the async path for async turns
        assert len(StoreCalls.reads(names)) == 1, names
        assert len(StoreCalls.appends(names)) == 1, names
        is_async = mode.startswith("a")
        assert all(StoreCalls.is_async(name) == is_async for name in names), names


def test_a_history_object_kept_across_turns_still_reads_once_per_turn(memory: Memory) -> None:
    """Applications that keep one history object per session (LangChain's docs do, with a
    dict) get the same: the turn's write drops the kept window, the next turn reads afresh."""
    kept: dict[str, MemoryChatMessageHistory] = {}

    def get(session_id: str) -> MemoryChatMessageHistory:
        if session_id not in kept:
            kept[session_id] = MemoryChatMessageHistory(memory, conversation_id=session_id)
        return kept[session_id]

    model = ScriptedChatModel(["one", "two", "three"])
    runnable = RunnableWithMessageHistory(model, get)
    calls = StoreCalls(memory.store)
    for n, mode in enumerate(["invoke", "ainvoke", "stream"]):
        run_turn(runnable, mode, f"q{n}", "s")
        assert len(StoreCalls.reads(calls.take())) == 1
    assert model.seen_texts() == ["q0", "one", "q1", "two", "q2"]
    assert [t for _, t, _ in stored(memory, "s")] == ["q0", "one", "q1", "two", "q2", "three"]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_write_by_someone_else_during_the_turn_loses_and_repeats_nothing(
    memory: Memory, mode: str
) -> None:
    """While the model runs, another writer appends a turn to the same conversation. The end of
    the turn must strip exactly the history that was prepended: a fresh read there would return
    a longer window, and the new user message would be cut off (or history stored twice)."""
    other = MemoryChatMessageHistory(memory, conversation_id="c")
    other.add_messages([HumanMessage("first"), AIMessage("ok")])

    def answer(seen: list[BaseMessage]) -> str:
        if texts(seen)[-1] == "second":
            other.add_messages([HumanMessage("meanwhile"), AIMessage("noted")])
        return f"re: {texts(seen)[-1]}"

    model = ScriptedChatModel([answer])
    runnable = RunnableWithMessageHistory(model, factory(memory))
    run_turn(runnable, mode, "second", "c")
    assert [t for _, t, _ in stored(memory, "c")] == [
        *("first", "ok"),
        *("meanwhile", "noted"),
        *("second", "re: second"),
    ]
    # the next turn's read sees the other writer's messages
    run_turn(runnable, mode, "third", "c")
    assert model.seen_texts() == [
        *("first", "ok", "meanwhile", "noted", "second", "re: second", "third")
    ]
    assert len(stored(memory, "c")) == 8


def test_a_failed_turn_stores_nothing_and_its_kept_window_can_be_dropped(memory: Memory) -> None:
    kept = MemoryChatMessageHistory(memory, conversation_id="f")
    kept.add_messages([HumanMessage("q0"), AIMessage("a0")])

    def down(seen: list[BaseMessage]) -> str:
        raise RuntimeError("provider down")

    model = ScriptedChatModel([down, "a1"])
    runnable = RunnableWithMessageHistory(model, lambda session_id: kept)
    with pytest.raises(RuntimeError, match="provider down"):
        run_turn(runnable, "invoke", "q1", "f")
    assert [t for _, t, _ in stored(memory, "f")] == ["q0", "a0"]
    # the failed turn's window is still kept (documented); someone else appends meanwhile
    MemoryChatMessageHistory(memory, conversation_id="f").add_messages(
        [HumanMessage("x"), AIMessage("y")]
    )
    kept.invalidate()
    run_turn(runnable, "invoke", "q1", "f")
    assert model.seen_texts() == ["q0", "a0", "x", "y", "q1"]
    assert [t for _, t, _ in stored(memory, "f")] == ["q0", "a0", "x", "y", "q1", "a1"]


def test_the_kept_window_is_returned_once_and_dropped_by_writes(memory: Memory) -> None:
    """The cache rules the module docstring states, one by one."""
    history = MemoryChatMessageHistory(memory, conversation_id="c")
    history.add_messages([HumanMessage("q1"), AIMessage("a1")])
    calls = StoreCalls(memory.store)

    first = history.messages
    assert texts(first) == ["q1", "a1"] and len(StoreCalls.reads(calls.take())) == 1
    first.append(HumanMessage("callers may change their copy"))
    assert texts(history.messages) == ["q1", "a1"] and calls.take() == []  # kept, once
    assert texts(history.messages) == ["q1", "a1"] and calls.take() == ["head_and_tail"]

    other = MemoryChatMessageHistory(memory, conversation_id="c")
    other.add_messages([HumanMessage("q2"), AIMessage("a2")])
    calls.take()
    assert texts(history.messages) == ["q1", "a1"]  # the kept window, as documented
    assert texts(history.messages) == ["q1", "a1", "q2", "a2"]  # and then a fresh read

    history.messages  # noqa: B018 - keeps a window
    history.add_messages([HumanMessage("q3"), AIMessage("a3")])
    assert texts(history.messages)[-2:] == ["q3", "a3"]  # the write dropped it

    history.messages  # noqa: B018
    history.invalidate()
    calls.take()
    history.messages  # noqa: B018
    assert len(StoreCalls.reads(calls.take())) == 1

    history.messages  # noqa: B018
    history.clear()
    assert history.messages == [] and stored(memory, "c") == []

    async def go() -> None:
        await history.aadd_messages([HumanMessage("q4"), AIMessage("a4")])
        calls.take()
        assert texts(await history.aget_messages()) == ["q4", "a4"]
        assert texts(await history.aget_messages()) == ["q4", "a4"]
        assert StoreCalls.reads(calls.take()) == ["ahead_and_tail"]
        await history.aget_messages()
        await history.aclear()
        assert await history.aget_messages() == []
        assert StoreCalls.reads(calls.take()) == ["ahead_and_tail", "ahead_and_tail"]

    asyncio.run(go())
    assert stored(memory, "c") == []


# -- the window --------------------------------------------------------------------------------


def _tool_turn(n: int) -> list[BaseMessage]:
    """A question, an assistant calling one or two tools, their results, the answer."""
    calls = [{"id": f"c{n}-{k}", "name": "lookup", "args": {"q": f"item {n}.{k}"}} for k in (1, 2)]
    calls = calls[: 1 + n % 2]
    return [
        HumanMessage(f"Question {n}: where is item {n}?"),
        AIMessage("", tool_calls=calls),
        *[
            ToolMessage(f"item {n}.{i + 1} is on shelf {n * 7 % 13}", tool_call_id=c["id"])
            for i, c in enumerate(calls)
        ],
        AIMessage(f"Answer {n}: shelf {n * 7 % 13}, " + "and more detail " * (n % 5)),
    ]


def test_the_window_keeps_the_budget_and_never_splits_a_tool_call(memory: Memory) -> None:
    expected = 0
    with memory.session(conversation_id="long"):
        for n in range(60):
            turn = _tool_turn(n)
            if n % 3:  # some turns in the neutral form directly, as other adapters write
                memory.conversation.append(to_messages(turn))
                expected += len(turn)
            else:
                expected += 4
                memory.conversation.append(
                    [
                        Message.user(str(turn[0].text)),
                        Message.assistant(tool_calls=[ToolCall(f"n{n}", "lookup", {"q": n})]),
                        Message.tool(ToolResult(f"n{n}", {"shelf": n % 13}, "lookup")),
                        Message.assistant(str(turn[-1].text)),
                    ]
                )
        # an unfinished turn: its tool call has no result yet
        memory.conversation.append(
            [Message.user("one more?"), Message.assistant(tool_calls=[ToolCall("open", "lookup")])]
        )
        everything = MemoryChatMessageHistory(memory, max_tokens=None, max_messages=10_000).messages
    assert len(everything) == expected + 1  # and the last question; its open call is trimmed
    assert isinstance(everything[-1], HumanMessage)

    def tokens(messages: list[BaseMessage]) -> int:
        counts = memory.count_tokens([m.token_text() for m in to_messages(messages)])
        return sum(counts) + MESSAGE_OVERHEAD * len(counts)

    calls = StoreCalls(memory.store)
    for max_tokens in (1, 40, 80, 120, 200, 333, 500, 800, 1500):
        for max_messages in (None, 2, 5, 9):
            history = MemoryChatMessageHistory(
                memory, conversation_id="long", max_tokens=max_tokens, max_messages=max_messages
            )
            window = history.messages
            assert len(StoreCalls.reads(calls.take())) == 1
            assert tokens(window) <= max_tokens
            assert max_messages is None or len(window) <= max_messages
            assert not window or isinstance(window[0], HumanMessage)
            check_tool_pairs(window)
            assert window == everything[len(everything) - len(window) :]  # the newest ones
            if max_tokens >= 500 and max_messages is None:
                assert any(isinstance(m, ToolMessage) for m in window)

    # through a chain: the model is given a window that keeps the pairs and the budget
    model = ScriptedChatModel(["fine"])
    runnable = chain("history_key", model, factory(memory, max_tokens=150))
    run_turn(runnable, "invoke", chain_input("history_key", "and now?"), "long")
    given = model.calls[-1][1:-1]
    assert given and isinstance(given[0], HumanMessage) and tokens(given) <= 150
    check_tool_pairs(given)


# -- across Memory objects, frameworks, and exact round trips -----------------------------------


def test_a_second_memory_over_the_same_storage_remembers(durable: Backend) -> None:
    first = ScriptedChatModel(["Noted: oolong."])
    runnable = chain("history_key", first, factory(durable.memory))
    run_turn(runnable, "invoke", {"question": "My tea is oolong."}, "tea")
    again = durable.reopen()
    second = ScriptedChatModel(["Oolong."])
    run_turn(
        chain("history_key", second, factory(again)), "ainvoke", {"question": "My tea?"}, "tea"
    )
    assert second.seen_texts() == [SYSTEM, "My tea is oolong.", "Noted: oolong.", "My tea?"]
    assert len(stored(again, "tea")) == 4


def test_messages_another_framework_wrote_read_as_sane_langchain_messages(memory: Memory) -> None:
    """A pydantic-ai conversation (framework "pydantic-ai", its own JSON in ``raw``), and a
    message of an unknown framework, come back rebuilt from the neutral form."""
    from memory_adapters_pydantic_ai import to_messages as pydantic_to_messages

    from memory_adapters.testing.pydantic_ai import sample_messages

    with memory.session(conversation_id="mixed"):
        memory.conversation.append(pydantic_to_messages(sample_messages()))
        odd = Message.assistant("From elsewhere.")
        odd.framework, odd.raw = "other-framework", {"kind": "whatever", "parts": [1, 2]}
        memory.conversation.append([Message.user("And you?"), odd])
    got = MemoryChatMessageHistory(memory, conversation_id="mixed").messages
    assert [type(m) for m in got] == [
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
        ToolMessage,
        AIMessage,
        HumanMessage,
        AIMessage,
        HumanMessage,
        AIMessage,
    ]
    assert all(isinstance(m.content, str) for m in got)
    assert texts(got)[:2] == ["Be brief.", "Weather in Lisbon?"]
    call = got[2]
    assert isinstance(call, AIMessage) and call.text == "Let me check."
    assert [(c["id"], c["name"], c["args"]) for c in call.tool_calls] == [
        ("call-1", "get_weather", {"city": "Lisbon", "units": ["c"]}),
        ("call-2", "get_time", {"tz": "WET"}),
    ]
    ok, failed = got[3], got[4]
    assert isinstance(ok, ToolMessage) and isinstance(failed, ToolMessage)
    assert (ok.tool_call_id, ok.status, ok.name) == ("call-1", "success", "get_weather")
    assert (failed.tool_call_id, failed.status, failed.content) == ("call-2", "error", "boom")
    assert texts(got)[-2:] == ["And you?", "From elsewhere."]
    check_tool_pairs(got)

    # and a LangChain chain carries on from there
    model = ScriptedChatModel(["Sunny again."])
    run_turn(chain("history_key", model, factory(memory)), "ainvoke", {"question": "Now?"}, "mixed")
    assert model.seen_texts()[1:3] == ["Be brief.", "Weather in Lisbon?"]
    assert len(model.calls[-1]) == 1 + len(got) + 1
    assert stored(memory, "mixed")[-2:] == [("user", "Now?", 10), ("assistant", "Sunny again.", 10)]


def _rich_messages() -> list[BaseMessage]:
    """LangChain messages with everything a lossy store drops: ids, names, additional_kwargs,
    response metadata, usage, content blocks, a failed tool's status and an artifact."""
    return [
        SystemMessage("You are a librarian.", id="sys-1"),
        HumanMessage(
            [
                {"type": "text", "text": "What is on this page?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
            id="human-1",
            name="ann",
            additional_kwargs={"client": {"lang": "pt", "tags": ["a", "b"]}},
        ),
        AIMessage(
            "Let me look it up.",
            id="ai-1",
            tool_calls=[{"id": "call-9", "name": "catalog", "args": {"isbn": "978-0", "n": 2}}],
            response_metadata={"model_name": "scripted", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
            additional_kwargs={"reasoning": "check the catalog"},
        ),
        ToolMessage(
            "catalog offline",
            tool_call_id="call-9",
            name="catalog",
            status="error",
            id="tool-1",
            artifact={"retry_after": 30},
        ),
        AIMessage([{"type": "text", "text": "The catalog is down; try later."}], id="ai-2"),
        HumanMessage("Thanks \N{SMILING FACE WITH SMILING EYES} \x00 nul and all", id="human-2"),
    ]


def test_langchain_messages_round_trip_exactly(memory: Memory) -> None:
    sent = _rich_messages()
    history = MemoryChatMessageHistory(memory, conversation_id="exact")
    history.add_messages(sent[:4])
    asyncio.run(history.aadd_messages(sent[4:]))
    assert history.messages == sent
    fresh = MemoryChatMessageHistory(memory, conversation_id="exact")
    assert asyncio.run(fresh.aget_messages()) == sent
    got = fresh.messages
    assert [m.id for m in got] == [m.id for m in sent]
    tool = got[3]
    assert (
        isinstance(tool, ToolMessage)
        and tool.status == "error"
        and tool.artifact == {"retry_after": 30}
    )
    assert got[1].content == sent[1].content and got[1].additional_kwargs == {
        "client": {"lang": "pt", "tags": ["a", "b"]}
    }
    assert "\x00" in str(got[5].content)  # NUL is text like any other, stored exactly


# -- bad input -----------------------------------------------------------------------------------


def test_bad_input_raises_typed_errors_and_loses_nothing(memory: Memory) -> None:
    history = MemoryChatMessageHistory(memory, conversation_id="bad")
    history.add_messages([HumanMessage("keep me"), AIMessage("kept")])
    before = stored(memory, "bad")
    bad: list[Any] = [
        "a string",
        HumanMessage("a message, not a list of them"),
        [HumanMessage("fine"), "not a message"],
        [HumanMessage("fine"), {"role": "user", "content": "a dict"}],
        [HumanMessage("fine"), object()],
        None,
        42,
    ]
    for value in bad:
        with pytest.raises(InvalidInput, match="LangChain"):
            history.add_messages(value)
        with pytest.raises(InvalidInput, match="LangChain"):
            asyncio.run(history.aadd_messages(value))
    assert stored(memory, "bad") == before
    assert texts(history.messages) == ["keep me", "kept"]

    # an empty batch stores nothing, and is no error
    history.add_messages([])
    assert stored(memory, "bad") == before

    # a value LangChain cannot serialize is kept in the neutral form (its text), not lost
    history.add_messages([HumanMessage("odd"), AIMessage("kept too", additional_kwargs={"o": {1}})])
    assert texts(history.messages)[-2:] == ["odd", "kept too"]
    assert len(stored(memory, "bad")) == 4

    # what a model made and JSON cannot hold (a lone surrogate, NaN arguments) is stored,
    # encoded, never refused: the turn is not lost
    made = AIMessage(
        "half \ud800 a character",
        tool_calls=[{"name": "f", "args": {"x": float("nan")}, "id": "c1"}],
    )
    history.add_messages([HumanMessage("fine"), made])
    asyncio.run(history.aadd_messages([HumanMessage("again"), made]))
    assert [text for _, text, _ in stored(memory, "bad")[-4:]] == [
        "fine",
        "half \ufffd a character",
        "again",
        "half \ufffd a character",
    ]
    with memory.session(conversation_id="bad"):
        assert memory.conversation.read()[-1].message.tool_calls[0].args == {"x": "NaN"}


def test_a_model_answer_json_cannot_hold_is_stored_encoded_not_lost(memory: Memory) -> None:
    """RunnableWithMessageHistory saves in a callback, and LangChain logs (does not raise) what a
    callback raises: a turn refused there would be lost without a word. What a model made is
    stored whatever it holds, in the documented encoding."""
    model = ScriptedChatModel(["fine", "broken \udfff", "fine again"])
    runnable = RunnableWithMessageHistory(model, factory(memory))
    for n in range(3):
        run_turn(runnable, "invoke", f"q{n}", "c")
    assert [t for _, t, _ in stored(memory, "c")] == [
        "q0",
        "fine",
        "q1",
        "broken \ufffd",
        "q2",
        "fine again",
    ]


def test_scope_comes_from_the_session_and_the_arguments(memory: Memory) -> None:
    with memory.session(user_id="ann", conversation_id="from-session"):
        ann = MemoryChatMessageHistory(memory)
        ann_other = MemoryChatMessageHistory(memory, conversation_id="explicit")
        bob = MemoryChatMessageHistory(memory, user_id="bob")
    assert (ann.scope.user_id, ann.scope.conversation_id) == ("ann", "from-session")
    assert (ann_other.scope.user_id, ann_other.scope.conversation_id) == ("ann", "explicit")
    assert (bob.scope.user_id, bob.scope.conversation_id) == ("bob", "from-session")
    tenant = MemoryChatMessageHistory(memory, conversation_id="from-session", namespace="t2")
    ann.add_messages([HumanMessage("ann's")])
    bob.add_messages([HumanMessage("bob's")])
    tenant.add_messages([HumanMessage("tenant's")])
    # the scope was fixed when each object was built: outside the session it is unchanged
    assert texts(ann.messages) == ["ann's"]
    assert texts(bob.messages) == ["bob's"]
    assert texts(tenant.messages) == ["tenant's"]
    assert ann_other.messages == []
    assert stored(memory, "from-session", user_id="ann") == [("user", "ann's", 1)]


def test_no_conversation_is_an_error_never_a_shared_log() -> None:
    memory = Memory("memory://")
    with pytest.raises(NoScope):
        MemoryChatMessageHistory(memory)
    with memory.session(user_id="ann"), pytest.raises(NoScope):
        MemoryChatMessageHistory(memory)
    # the factory raises inside the run, as the run starts
    runnable = RunnableWithMessageHistory(ScriptedChatModel(["x"]), factory(memory))
    with pytest.raises(InvalidId):
        run_turn(runnable, "invoke", "hi", "")
    with pytest.raises(InvalidId):
        MemoryChatMessageHistory(memory, conversation_id="bad\x00id")
    with pytest.raises(InvalidInput, match="Memory"):
        MemoryChatMessageHistory("sqlite:///x.db", conversation_id="c")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="max_tokens"):
        MemoryChatMessageHistory(memory, conversation_id="c", max_tokens="8000")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="max_tokens"):
        MemoryChatMessageHistory(memory, conversation_id="c", max_tokens=-1)
    with pytest.raises(InvalidInput, match="max_tokens or max_messages"):
        MemoryChatMessageHistory(memory, conversation_id="c", max_tokens=None)
    unbounded = Memory("memory://", history_tokens=None)
    with pytest.raises(InvalidInput, match="max_tokens or max_messages"):
        MemoryChatMessageHistory(unbounded, conversation_id="c")
    assert MemoryChatMessageHistory(unbounded, conversation_id="c", max_messages=5).messages == []
