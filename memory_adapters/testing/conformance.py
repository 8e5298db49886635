"""The store conformance suite (see :mod:`memory_adapters.testing`)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_adapters import (
    AppendConflict,
    InvalidId,
    InvalidInput,
    InvalidTTL,
    InvalidValue,
    Memory,
    MergeConflict,
    Message,
    NoScope,
    Store,
    StoreUnavailable,
    ToolCall,
    ToolResult,
    Unsupported,
    ValueTooLarge,
    VersionConflict,
    hookimpl,
)
from memory_adapters.facts import Fact
from memory_adapters.messages import AppendResult, Entry, Record, Summary
from memory_adapters.steps import StoreCall
from memory_adapters.validation import MAX_ID_LENGTH, MAX_INT, MAX_VALUE_BYTES, describe

from .conversation_search import (
    MP_NS,
    ConversationSearchConformance,
    ConversationSearchProperties,
    CountingEmbedder,
    embed_once_across_restarts,
    kill_between_turn_and_embedding,
    mp_searcher,
    mp_writer,
)
from .hostile import (
    BAD_FLAGS,
    BAD_IDS,
    BOUNDARY_CONVERSATION,
    BOUNDARY_FACTS,
    BOUNDARY_NOTES,
    Case,
    bad_ints,
    boundary_cases,
    hostile_cases,
)
from .operations import OperationsConformance
from .ranking import RankingConformance, RankingProperties
from .semantic import SemanticConformance
from .windows import WindowProperties

StoreFactory = Callable[[], Store]

HOSTILE_KEYS = [
    "$gt",
    "$where",
    "$ne",
    "a.b",
    "a.$b",
    '{"$gt": ""}',
    "'; DROP TABLE ma_facts; --",
    '" OR 1=1 --',
    "x' OR '1'='1",
    "%",
    "_",
    "*",
    "\\",
    "NULL",
    "owner : anything",
    "ünïcødé ✓ 🦜",
    "key with spaces",
    "k" * MAX_ID_LENGTH,
]

SCOPE_NAMES = [
    "user:alice",
    "user:alice/agent:planner",
    "user:alice2",
    "user:bob",
    "user:%",
    "user:_",
    "conversation:default::c-1",
    "lg:a/",
    "lg:a/b/",
    "lg:ab/",
    "%",
    "%%",
    "%x",
    "_",
    "_y",
    "a_b",
    "axb",
    "a%b",
    "\\",
    "\\\\",
    "a\\b",
    "*",
    "a*",
    "a.b",
    "a.c",
    "ab",
    "^a",
    "$x",
    "(x|y)",
    "[a-z]",
    "a+",
    "a?",
    "{1}",
    "'; DROP TABLE ma_facts; --",
    '"q"',
    "ünïcødé ✓ 🦜",
    "ü",
    "u",
    "a\U0010ffff",
    "a\U0010ffffz",
    "a\U0010ffff\U0010ffff",
    "b",
    "\ud7ff",
    "\ud7ffx",
    "\ue000",
]
"""Scope strings shaped like the library's own, and like SQL ``LIKE`` and regular-expression
patterns, for :meth:`~memory_adapters.store.Store.list_fact_scopes`."""

HOSTILE_PREFIXES = [
    "",
    "user:",
    "user:alice",
    "user:alice/",
    "user:alice/agent:planner/more",
    "lg:",
    "lg:a",
    "lg:a/",
    "%",
    "_",
    "\\",
    "a",
    "a_",
    "a%",
    "a\\",
    "a.",
    ".",
    ".*",
    "*",
    "^",
    "$",
    "(",
    "[",
    "[a-z]",
    "'",
    '"',
    "ü",
    "a\U0010ffff",
    "\U0010ffff",
    "\ud7ff",
    "nothing starts like this",
    *SCOPE_NAMES,
]
"""Prefixes that must match literally: every character is itself, never a pattern."""

HOSTILE_VALUES: list[Any] = [
    {"$gt": ""},
    {"$where": "sleep(1000)"},
    {"a.b": 1, "$set": {"x.y": [1, {"$inc": 2}]}},
    "text with a NUL \x00 inside",
    {"nul\x00key": "nul\x00value"},
    "'; DROP TABLE ma_messages; --",
    "emoji 🦜, RTL \u05e9\u05dc\u05d5\u05dd, combining e\u0301, line sep \u2028, tab\t, newline\n",
    [1, 2.5, -3, True, False, None, "", [], {}],
    10**18,
    -(2**53) + 1,
    1e-300,
    "",
    {"": ""},
]


def turn(tag: str, tokens_hint: int = 0) -> list[Message]:
    """A 4-message turn with a tool call, tagged so tests can find it again."""
    call = ToolCall(f"call-{tag}", "lookup", {"tag": tag})
    return [
        Message.user(f"question {tag}" + " pad" * tokens_hint),
        Message.assistant("", [call]),
        Message.tool(ToolResult(call.id, {"answer": tag}, name="lookup")),
        Message.assistant(f"answer {tag}"),
    ]


def _entries(tag: str, n: int) -> list[Entry]:
    return [Entry.of(Message.user(f"{tag}:{i}"), 10, 1 << 20) for i in range(n)]


def _append_worker(factory: StoreFactory, conversation: str, writer: int, batches: int) -> None:
    store = factory()
    try:
        for i in range(batches):
            store.append(conversation, _entries(f"w{writer}b{i}", 3))
    finally:
        store.close()


def _inherited_writer(store: Store, conversation: str, writer: int, batches: int) -> None:
    """A forked child's turns through the ``store`` its parent opened, then its close."""
    try:
        for i in range(batches):
            store.append(conversation, _entries(f"w{writer}b{i}", 3))
    finally:
        store.close()


def check_log(records: list[Record], writers: int, batches: int, size: int) -> None:
    """Assert a log written by concurrent writers: no loss, no duplicate, no gap, no split."""
    assert [r.seq for r in records] == list(range(1, writers * batches * size + 1)), "gap or loss"
    texts = [r.message.text for r in records]
    assert len(set(texts)) == len(texts), "duplicated messages"
    last_batch_of: dict[int, int] = {}
    for start in range(0, len(records), size):
        chunk = records[start : start + size]
        tags = {r.message.text.split(":")[0] for r in chunk}
        assert len(tags) == 1, f"a batch was split or interleaved at seq {chunk[0].seq}: {tags}"
        assert [r.message.text.split(":")[1] for r in chunk] == [str(i) for i in range(size)]
        assert {r.batch for r in chunk} == {chunk[0].seq}, "batch field is not the first seq"
        tag = tags.pop()
        writer, batch = (int(x) for x in tag[1:].split("b"))
        assert batch == last_batch_of.get(writer, -1) + 1, f"writer {writer} out of order"
        last_batch_of[writer] = batch
    assert all(last_batch_of[w] == batches - 1 for w in range(writers))


class StoreConformance(
    WindowProperties,
    ConversationSearchConformance,
    ConversationSearchProperties,
    SemanticConformance,
    OperationsConformance,
    RankingConformance,
    RankingProperties,
):
    """The suite. Subclass it and provide a ``store`` fixture yielding a fresh, empty store."""

    @pytest.fixture
    def store(self) -> Iterator[Store]:  # pragma: no cover - replaced by the subclass
        raise NotImplementedError("give the conformance suite a `store` fixture")

    @pytest.fixture
    def memory(self, store: Store) -> Memory:
        """A ``Memory`` over the store under test, with no third-party plugins and no embedder:
        a fact it writes has a vector only when a test gives one (the suite counts rows;
        semantic recall is tested with an embedder of its own)."""
        return Memory(store=store, load_entrypoints=False, embed=False)

    @pytest.fixture(autouse=True)
    def _memories_settle(self, store: Store) -> Iterator[None]:
        """Every ``Memory`` a test makes: its worker (conversation indexing, summaries) drained
        and stopped after the test, before the store closes (a job still running then would
        write to a closed store, or be cut off at the interpreter's exit)."""
        made: list[Memory] = []
        init = Memory.__init__

        def tracked(self: Memory, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            made.append(self)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Memory, "__init__", tracked)
            yield
        for memory in made:
            memory.worker.close(60)

    # -- conversation log: round trips, order ---------------------------------------------------

    def test_round_trip_is_exact(self, memory: Memory) -> None:
        call = ToolCall(
            "c1", "get_weather", {"city": "Lisbon", "units": ["C"], "nested": {"$gt": 1}}
        )
        sent = [
            Message.system("be brief"),
            Message.user("héllo \x00 🦜 \u2028"),
            Message(
                "assistant",
                "",
                [call],
                framework="pydantic-ai",
                raw={"parts": [{"k": "$v"}]},
                meta={"model": "test"},
            ),
            Message.tool(ToolResult("c1", {"temp": 21.5, "ok": True}, name="get_weather")),
            Message.tool(ToolResult("c2", "boom", is_error=True)),
            Message.assistant("It is 21.5°C."),
        ]
        with memory.session(user_id="u", conversation_id="c"):
            result = memory.conversation.append(sent, run_id="run-1")
            assert (result.first_seq, result.last_seq, result.duplicate) == (1, 6, False)
            got = memory.conversation.read()
        assert [r.message.to_dict() for r in got] == [m.to_dict() for m in sent]
        assert [r.seq for r in got] == [1, 2, 3, 4, 5, 6]
        assert {r.batch for r in got} == {1}
        assert {r.run_id for r in got} == {"run-1"}
        assert all(r.tokens > 0 for r in got)

    def test_async_round_trip(self, memory: Memory) -> None:
        async def go() -> list[Record]:
            async with memory.session(user_id="u", conversation_id="c"):
                await memory.conversation.aappend(turn("a"))
                await memory.conversation.aappend(turn("b"))
                assert await memory.conversation.alast_seq() == 8
                window = await memory.conversation.awindow(max_messages=4)
                assert [r.seq for r in window.records] == [5, 6, 7, 8]
                return await memory.conversation.aread()

        records = asyncio.run(go())
        assert [r.message.to_dict() for r in records] == [
            m.to_dict() for m in turn("a") + turn("b")
        ]

    def test_empty_and_unknown_conversations(self, store: Store, memory: Memory) -> None:
        assert store.last_seq("nobody") == 0
        assert store.tail("nobody", max_tokens=100) == []
        assert store.tail("nobody", max_messages=5) == []
        assert store.read("nobody") == []
        assert store.latest_summary("nobody") is None
        with memory.session(conversation_id="empty"):
            assert memory.conversation.window().messages() == []

    def test_order_and_seq_are_gapless(self, store: Store) -> None:
        for i in range(30):
            store.append("conv", _entries(f"w0b{i}", 1 + i % 3))
        records = store.read("conv")
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        tags = [r.message.text for r in records]
        expected = [f"w0b{i}:{j}" for i in range(30) for j in range(1 + i % 3)]
        assert tags == expected
        assert store.last_seq("conv") == len(expected)
        assert [r.seq for r in store.read("conv", start_seq=5, end_seq=9)] == [5, 6, 7, 8, 9]
        assert [r.seq for r in store.read("conv", start_seq=5, limit=2)] == [5, 6]

    def test_delete_conversation(self, store: Store, memory: Memory) -> None:
        with memory.session(conversation_id="gone"):
            memory.conversation.append(turn("x"))
        with memory.session(conversation_id="kept"):
            memory.conversation.append(turn("y"))
            assert memory.conversation.last_seq() == 4
        with memory.session(conversation_id="gone"):
            assert memory.conversation.clear() == 4
            assert memory.conversation.last_seq() == 0
            assert memory.conversation.append(turn("z")).first_seq == 1
        with memory.session(conversation_id="kept"):
            assert memory.conversation.last_seq() == 4

    # -- windows --------------------------------------------------------------------------------

    def test_windows_at_the_tail_of_10000_messages(self, store: Store) -> None:
        # windows, not search: nothing indexed (the worker would index 10,000 messages after)
        memory = Memory(store=store, load_entrypoints=False, embed=False, index_conversations=False)
        with memory.session(user_id="u", conversation_id="long"):
            conv = memory.conversation
            conv.append([Message.system("you are a test")])
            for i in range(2500):
                conv.append(turn(f"{i}", tokens_hint=i % 7))
            assert conv.last_seq() == 10001
            all_records = conv.read(start_seq=9000)
            by_seq = {r.seq: r for r in all_records}

            for budget in (50, 300, 1000, 2500):
                w = conv.window(max_tokens=budget, pin_system=False)
                seqs = [r.seq for r in w.records]
                assert seqs == list(range(seqs[0], 10002)), "window is not a contiguous tail"
                assert w.tokens <= budget
                assert w.records[0].message.role == "user"
                # maximal: the previous user turn would not have fitted
                prev_user = max(
                    s for s in by_seq if s < seqs[0] and by_seq[s].message.role == "user"
                )
                extra = sum(by_seq[s].tokens for s in range(prev_user, seqs[0]))
                assert w.tokens + extra > budget

            w = conv.window(max_messages=10, max_tokens=None, pin_system=False)
            assert [r.seq for r in w.records] == list(
                range(9994, 10002)
            )  # 10 → starts at a user turn
            w = conv.window(max_messages=10, max_tokens=30, pin_system=False)
            assert w.tokens <= 30 and len(w.records) <= 10
            w = conv.window(max_tokens=500)
            assert w.pinned[0].seq == 1 and w.pinned[0].message.role == "system"
            assert w.messages()[0].text == "you are a test"
            assert w.tokens <= 500

    def test_window_never_splits_tool_calls(self, memory: Memory) -> None:
        with memory.session(conversation_id="tools"):
            conv = memory.conversation
            conv.append(turn("a"))
            # a failed run: the tool call was stored, its result never came
            conv.append(
                [
                    Message.user("failing"),
                    Message.assistant("let me look", [ToolCall("lost", "f", {})]),
                ]
            )
            # a stray result whose call is gone
            conv.append(
                [
                    Message.user("again"),
                    Message.tool(ToolResult("ghost", "x")),
                    Message.assistant("ok"),
                ]
            )
            conv.append(turn("b"))
            w = conv.window(max_tokens=100_000)
            msgs = w.messages()
            calls = {c.id for m in msgs for c in m.tool_calls}
            results = {r.id for m in msgs for r in m.tool_results}
            assert calls == results == {"call-a", "call-b"}
            assert msgs[0].role == "user"
            trimmed = [m for m in msgs if m.meta.get("trimmed")]
            assert [m.text for m in trimmed] == ["let me look"]
            assert trimmed[0].raw is None
            # a window cut inside a turn starts at the next user turn
            for n in range(1, 8):
                w = conv.window(max_messages=n)
                assert not w.records or w.records[0].message.role == "user"
                ids = [c.id for r in w.records for c in r.message.tool_calls]
                rids = [t.id for r in w.records for t in r.message.tool_results]
                assert sorted(ids) == sorted(rids)

    def test_window_pins_first_turn(self, memory: Memory) -> None:
        with memory.session(conversation_id="pin"):
            conv = memory.conversation
            conv.append([Message.system("sys"), *turn("first")])
            for i in range(20):
                conv.append(turn(f"{i}"))
            w = conv.window(max_tokens=120, pin_first_turn=True)
            assert [r.seq for r in w.pinned] == [1, 2, 3, 4, 5]
            assert w.records[0].seq > 5 and w.records[-1].seq == conv.last_seq()
            assert w.tokens <= 120

    def test_summaries_are_stored_once_per_range(self, store: Store) -> None:
        calls: list[tuple[int, str | None]] = []

        class Summarizer:
            @hookimpl
            def summarize(
                self,
                messages: list[Message],
                previous: str | None,
                max_tokens: int,
                model: str | None,
            ) -> Any:
                calls.append((len(messages), previous))

                async def make() -> str:
                    return f"summary #{len(calls)} of {len(messages)} messages"

                return make()  # an async answer, as the hook spec allows

        memory = Memory(
            store=store,
            load_entrypoints=False,
            plugins=[Summarizer()],
            history_tokens=200,
            summary_tokens=50,
        )
        with memory.session(conversation_id="sum"):
            conv = memory.conversation
            for i in range(60):
                conv.append(turn(f"{i}"))
                w = conv.window()
                assert w.tokens <= 200
                if w.summary is not None:
                    assert w.messages()[0].text.endswith(w.summary.text)
                    assert w.summary.end_seq < w.records[0].seq
        assert 0 < len(calls) < 30, "summaries must be reused, not recomputed every turn"
        latest = store.latest_summary(conv.key)
        assert latest is not None and latest.start_seq == 1
        assert latest.text == f"summary #{len(calls)} of {calls[-1][0]} messages"
        assert calls[-1][1] is not None  # each summary continues the previous one

    def test_summaries_record_their_model(self, store: Store) -> None:
        store.append("sm", _entries("m", 4))
        store.put_summary("sm", Summary(1, 2, "old", 5, 1.0))
        assert store.latest_summary("sm") == Summary(1, 2, "old", 5, 1.0, None)
        store.put_summary("sm", Summary(1, 4, "new", 6, 2.0, "openai:gpt-4o-mini"))
        assert store.latest_summary("sm") == Summary(1, 4, "new", 6, 2.0, "openai:gpt-4o-mini")

    def test_summary_claims(self, store: Store) -> None:
        """One summary under way per conversation across processes; never for a range a
        stored summary covers; a claim ends with its lease or with the summary it was for."""
        store.append("cl", _entries("c", 30))
        assert store.claim_summary("cl", 10, "a", lease_seconds=600) is True
        assert store.claim_summary("cl", 10, "b", lease_seconds=600) is False
        assert store.claim_summary("cl", 12, "b", lease_seconds=600) is False
        assert store.claim_summary("cl", 10, "a", lease_seconds=600) is True  # renewed
        assert store.claim_summary("other", 10, "b", lease_seconds=600) is True
        assert store.latest_summary("cl") is None  # a claim is not a summary
        store.put_summary("cl", Summary(1, 10, "s", 3, time.time(), "m"))
        latest = store.latest_summary("cl")
        assert latest is not None and (latest.end_seq, latest.text) == (10, "s")
        assert store.claim_summary("cl", 10, "b", lease_seconds=600) is False  # covered
        assert store.claim_summary("cl", 8, "b", lease_seconds=600) is False
        assert store.claim_summary("cl", 20, "b", lease_seconds=600) is True  # a's claim ended
        latest = store.latest_summary("cl")
        assert latest is not None and latest.end_seq == 10
        # a lease that ended frees the conversation for another owner
        assert store.claim_summary("lease", 5, "a", lease_seconds=0) is True
        assert store.claim_summary("lease", 5, "b", lease_seconds=600) is True
        assert store.claim_summary("lease", 5, "a", lease_seconds=600) is False
        # a claim goes with its conversation
        store.delete_conversation("cl")
        assert store.claim_summary("cl", 20, "c", lease_seconds=600) is True
        assert store.latest_summary("cl") is None

    def test_racing_claims_make_one_winner(self, store: Store) -> None:
        owners = 6
        barrier = threading.Barrier(owners)
        won: list[str] = []
        lock = threading.Lock()

        def claim(owner: str) -> None:
            barrier.wait()
            if store.claim_summary("race", 40, owner, lease_seconds=600):
                with lock:
                    won.append(owner)

        threads = [threading.Thread(target=claim, args=(f"o{i}",)) for i in range(owners)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1

    def test_async_summary_claims(self, store: Store) -> None:
        async def go() -> list[bool]:
            return [
                await store.aclaim_summary("acl", 5, "a", lease_seconds=600),
                await store.aclaim_summary("acl", 5, "b", lease_seconds=600),
            ]

        assert asyncio.run(go()) == [True, False]

    # -- conditional appends and idempotency ------------------------------------------------------

    def test_conditional_append(self, memory: Memory) -> None:
        with memory.session(conversation_id="cas"):
            conv = memory.conversation
            assert conv.append(turn("a"), expected_last_seq=0).last_seq == 4
            with pytest.raises(AppendConflict) as info:
                conv.append(turn("b"), expected_last_seq=0)
            assert (info.value.expected, info.value.actual) == (0, 4)
            with pytest.raises(AppendConflict):
                conv.append(turn("b"), expected_last_seq=5)
            assert conv.last_seq() == 4
            assert conv.append(turn("b"), expected_last_seq=4).first_seq == 5
            assert [r.message.text for r in conv.read()][-1] == "answer b"

    def test_idempotency_key_makes_retries_a_no_op(self, memory: Memory) -> None:
        with memory.session(conversation_id="idem"):
            conv = memory.conversation
            first = conv.append(turn("a"), idempotency_key="run-1")
            again = conv.append(turn("a"), idempotency_key="run-1")
            assert (again.first_seq, again.last_seq, again.duplicate) == (1, 4, True)
            assert not first.duplicate
            conv.append(turn("b"), idempotency_key="run-2")
            assert conv.append(turn("a"), idempotency_key="run-1").duplicate
            assert conv.last_seq() == 8
        with memory.session(conversation_id="other"):
            assert not memory.conversation.append(turn("a"), idempotency_key="run-1").duplicate

        async def retry() -> bool:
            async with memory.session(conversation_id="idem"):
                return (
                    await memory.conversation.aappend(turn("b"), idempotency_key="run-2")
                ).duplicate

        assert asyncio.run(retry())

    def test_keyed_appends_batched_together_do_what_they_do_one_after_the_other(
        self, store: Store
    ) -> None:
        """A run's steps (keyed appends to one conversation) made as one batch
        (:meth:`Store.batch` / ``abatch``; PostgreSQL sends them as one statement) answer and
        store exactly what the same appends made one by one do, whichever keys were used
        before (a run replayed or retried under its run id)."""

        @settings(max_examples=40, deadline=None, database=None)
        @given(
            sizes=st.lists(st.integers(1, 3), min_size=2, max_size=4),
            used=st.lists(st.booleans(), min_size=4, max_size=4),
            before=st.integers(0, 2),
            run_id=st.none() | st.just("run-1"),
            asynchronous=st.booleans(),
        )
        def check(
            sizes: list[int], used: list[bool], before: int, run_id: str | None, asynchronous: bool
        ) -> None:
            base = uuid.uuid4().hex
            logs: list[list[tuple[Any, ...]]] = []
            answers: list[list[AppendResult]] = []
            for together in (False, True):
                conversation = f"{base}-{together}"
                for i in range(before):  # earlier turns, unkeyed
                    store.append(conversation, _entries(f"old{i}", 2))
                for k, size in enumerate(sizes):  # steps stored before (a replay finds them)
                    if used[k]:
                        store.append(conversation, _entries(f"s{k}", size), idempotency_key=f"k{k}")
                calls = [
                    StoreCall(
                        "append",
                        (conversation, _entries(f"s{k}", size)),
                        {"run_id": run_id, "expected_last_seq": None, "idempotency_key": f"k{k}"},
                    )
                    for k, size in enumerate(sizes)
                ]
                if not together:
                    got = [store.append(*c.args, **c.kwargs) for c in calls]
                elif asynchronous:
                    got = asyncio.run(store.abatch(calls))
                else:
                    got = store.batch(calls)
                answers.append(got)
                logs.append(
                    [
                        (r.seq, r.message.text, r.tokens, r.batch, r.run_id)
                        for r in store.read(conversation)
                    ]
                )
                assert store.last_seq(conversation) == len(logs[-1])
            assert answers[1] == answers[0]
            assert logs[1] == logs[0]

        check()

    # -- many writers --------------------------------------------------------------------------

    def test_many_threads_append_without_loss_or_interleaving(self, store: Store) -> None:
        writers, batches, size = 8, 25, 3
        errors: list[BaseException] = []
        barrier = threading.Barrier(writers)

        def write(w: int) -> None:
            try:
                barrier.wait()
                for b in range(batches):
                    store.append("shared", _entries(f"w{w}b{b}", size))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        check_log(store.read("shared"), writers, batches, size)

    def test_many_async_writers(self, store: Store) -> None:
        writers, batches, size = 6, 10, 2

        async def write(w: int) -> None:
            for b in range(batches):
                await store.aappend("async", _entries(f"w{w}b{b}", size))

        async def main() -> None:
            await asyncio.gather(*(write(w) for w in range(writers)))

        asyncio.run(main())
        check_log(store.read("async"), writers, batches, size)

    def test_concurrent_conditional_appends_never_fork(self, store: Store) -> None:
        wins: list[int] = []
        conflicts: list[int] = []
        lock = threading.Lock()

        def attempt(w: int) -> None:
            for _ in range(20):
                last = store.last_seq("race")
                try:
                    store.append("race", _entries(f"w{w}b{last}", 1), expected_last_seq=last)
                    with lock:
                        wins.append(w)
                except AppendConflict:
                    with lock:
                        conflicts.append(w)

        threads = [threading.Thread(target=attempt, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        records = store.read("race")
        assert len(records) == len(wins)
        assert [r.seq for r in records] == list(range(1, len(wins) + 1))
        # each winner appended exactly at the seq it read: no two writers claimed one seq
        assert [int(r.message.text.split("b")[1].split(":")[0]) for r in records] == list(
            range(len(wins))
        )

    # -- facts -----------------------------------------------------------------------------------

    def test_facts_upsert_and_compare_and_swap(self, memory: Memory) -> None:
        with memory.session(user_id="alice"):
            facts = memory.facts
            assert facts.get("tea") is None
            f1 = facts.put("tea", "green", importance=0.5)
            assert (f1.version, f1.value, f1.importance) == (1, "green", 0.5)
            f2 = facts.put("tea", "oolong")
            assert (
                f2.version == 2
                and f2.created_at == f1.created_at
                and f2.updated_at >= f1.updated_at
            )
            with pytest.raises(VersionConflict) as info:
                facts.put("tea", "black", expected_version=1)
            assert (info.value.expected, info.value.actual) == (1, 2)
            got = facts.get("tea")
            assert got is not None and got.value == "oolong"
            assert facts.put("tea", "black", expected_version=2).version == 3
            with pytest.raises(VersionConflict):
                facts.put("tea", "x", expected_version=0)
            assert facts.put("coffee", "none", expected_version=0).version == 1
            with pytest.raises(VersionConflict):
                facts.forget("tea", expected_version=1)
            assert facts.forget("tea", expected_version=3)
            assert not facts.forget("tea")
            assert facts.get("tea") is None
            assert [f.key for f in facts.all()] == ["coffee"]

    def test_concurrent_compare_and_swap(self, memory: Memory) -> None:
        with memory.session(user_id="alice"):
            memory.facts.put("counter", 0)
        scope = memory.session(user_id="alice").scope

        def bump() -> None:
            for _ in range(15):
                with memory.session(user_id=scope.user_id):
                    while True:
                        cur = memory.facts.get("counter")
                        assert cur is not None
                        try:
                            memory.facts.put("counter", cur.value + 1, expected_version=cur.version)
                            break
                        except VersionConflict:
                            continue

        threads = [threading.Thread(target=bump) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with memory.session(user_id="alice"):
            final = memory.facts.get("counter")
        assert final is not None and final.value == 60 and final.version == 61

    def test_facts_expire(self, store: Store, memory: Memory) -> None:
        with memory.session(user_id="alice"):
            facts = memory.facts
            facts.put("soon", "gone soon", ttl=0.4)
            facts.put("stays", "gone never")
            assert facts.get("soon") is not None
            assert [f.key for f in facts.search("gone")] != []
            time.sleep(0.6)
            assert facts.get("soon") is None
            assert [f.key for f in facts.all()] == ["stays"]
            assert [f.key for f in facts.search("gone soon")] == ["stays"]
            with pytest.raises(VersionConflict):
                facts.put("soon", "x", expected_version=1)
            assert facts.put("soon", "back", expected_version=0).version == 1
            facts.put("later", "x", expires_at=time.time() + 0.3)
            time.sleep(0.5)
            assert store.prune() >= 1
            assert facts.get("later") is None
            assert facts.get("soon") is not None

    def test_fact_search_ranks_by_relevance(self, memory: Memory) -> None:
        with memory.session(user_id="alice"):
            facts = memory.facts
            facts.put("favourite_tea", "Alice drinks oolong tea every morning; tea is her thing")
            facts.put("coffee", "Alice dislikes coffee")
            facts.put("city", {"name": "Lisbon", "since": 2019})
            facts.put("pet", "a parrot called Kiwi")
            found = facts.search("what TEA does she like?")
            assert [f.key for f in found][:1] == ["favourite_tea"]
            assert all(f.score is not None for f in found)
            assert [f.key for f in facts.search("Lisbon")] == ["city"]
            assert [f.key for f in facts.search("parrot kiwi coffee", limit=2)] != []
            assert len(facts.search("parrot kiwi coffee", limit=1)) == 1
            assert facts.search("") == []
            assert facts.search("   ?!* ") == []
            assert facts.search("zebra") == []
            assert [f.key for f in facts.search('" OR 1=1 -- owner : *')] == []

    def test_list_facts_is_ordered_and_limited(self, memory: Memory) -> None:
        with memory.session(user_id="alice"):
            for k in ("b", "a", "c"):
                memory.facts.put(k, k)
            assert [f.key for f in memory.facts.all()] == ["a", "b", "c"]
            assert [f.key for f in memory.facts.all(limit=2)] == ["a", "b"]

    def test_async_facts(self, memory: Memory) -> None:
        async def go() -> None:
            async with memory.session(user_id="alice"):
                f = await memory.facts.aput("tea", "oolong")
                assert f.version == 1
                got = await memory.facts.aget("tea")
                assert got is not None and got.value == "oolong"
                assert [x.key for x in await memory.facts.asearch("oolong")] == ["tea"]
                assert [x.key for x in await memory.facts.aall()] == ["tea"]
                assert await memory.facts.aforget("tea")

        asyncio.run(go())

    # -- listing fact scopes ----------------------------------------------------------------------

    @staticmethod
    def _lists_scopes(store: Store) -> None:
        """Skip when the store does not offer the optional ``list_fact_scopes``."""
        try:
            store.list_fact_scopes("ns", "")
        except Unsupported as exc:
            pytest.skip(f"the store does not list fact scopes: {exc}")

    @staticmethod
    def _put(store: Store, namespace: str, scope: str, key: str = "k", **kw: Any) -> None:
        store.put_fact(namespace, scope, key, '"v"', text="v", **kw)

    def test_list_fact_scopes_matches_prefixes_literally(self, store: Store) -> None:
        self._lists_scopes(store)
        for scope in SCOPE_NAMES:
            self._put(store, "ns", scope)
        self._put(store, "ns", "user:alice", "second")  # two facts: the scope is listed once
        expected = {p: sorted(s for s in SCOPE_NAMES if s.startswith(p)) for p in HOSTILE_PREFIXES}
        for prefix, want in expected.items():
            assert store.list_fact_scopes("ns", prefix) == want, prefix

        async def listed() -> list[list[str]]:
            return list(await asyncio.gather(*(store.alist_fact_scopes("ns", p) for p in expected)))

        assert asyncio.run(listed()) == list(expected.values())

    def test_list_fact_scopes_limit(self, store: Store) -> None:
        self._lists_scopes(store)
        for scope in SCOPE_NAMES:
            self._put(store, "ns", scope)
        everything = sorted(SCOPE_NAMES)
        users = [s for s in everything if s.startswith("user:")]
        for limit in (1, 2, 3, len(everything), len(everything) + 5):
            assert store.list_fact_scopes("ns", "", limit=limit) == everything[:limit]
            assert store.list_fact_scopes("ns", "user:", limit=limit) == users[:limit]
            got = asyncio.run(store.alist_fact_scopes("ns", "user:", limit=limit))
            assert got == users[:limit]

    def test_list_fact_scopes_keeps_namespaces_apart(self, store: Store) -> None:
        self._lists_scopes(store)
        self._put(store, "ns", "user:alice")
        self._put(store, "ns2", "user:alice")
        self._put(store, "ns2", "only-in-ns2")
        self._put(store, "n", "only-in-n")
        self._put(store, "ns#working", "a/b")
        assert store.list_fact_scopes("ns", "") == ["user:alice"]
        assert store.list_fact_scopes("ns2", "") == ["only-in-ns2", "user:alice"]
        assert store.list_fact_scopes("n", "") == ["only-in-n"]
        assert store.list_fact_scopes("ns#working", "") == ["a/b"]
        assert store.list_fact_scopes("nobody", "") == []
        assert store.list_fact_scopes("%", "") == []
        assert store.list_fact_scopes("n_", "") == []
        assert asyncio.run(store.alist_fact_scopes("ns2", "only")) == ["only-in-ns2"]
        store.delete_fact("ns2", "only-in-ns2", "k")  # a scope with no facts left is gone
        assert store.list_fact_scopes("ns2", "") == ["user:alice"]

    def test_list_fact_scopes_skips_expired_facts(self, store: Store) -> None:
        self._lists_scopes(store)
        soon = time.time() + 0.3
        self._put(store, "ns", "dying", expires_at=soon)
        self._put(store, "ns", "half", "old", expires_at=soon)
        self._put(store, "ns", "half", "new")
        self._put(store, "ns", "later", expires_at=time.time() + 3600)
        while time.time() <= soon + 0.05:
            time.sleep(0.1)
        assert store.list_fact_scopes("ns", "") == ["half", "later"]
        assert store.list_fact_scopes("ns", "d") == []
        assert asyncio.run(store.alist_fact_scopes("ns", "")) == ["half", "later"]
        assert store.list_fact_scopes("ns", "", limit=1) == ["half"]

    # -- working memory ---------------------------------------------------------------------------

    def test_working_memory_fork_and_merge(self, memory: Memory) -> None:
        with memory.session(user_id="alice", conversation_id="task"):
            root = memory.working
            root.set("goal", "plan a trip", importance=1.0)
            root.set("budget", 1000)
            root.set("scratch", "x")
            child = root.fork("researcher")
            assert child.get("goal") == "plan a trip"  # reads through
            child.set("flights", ["TAP 123"])
            child.set("budget", 900)
            child.delete("scratch")
            assert child.get("scratch") is None and root.get("scratch") == "x"
            assert root.get("flights") is None  # writes stay in the fork
            assert set(child.items()) == {"goal", "budget", "flights"}
            grandchild = child.fork("pricing")
            assert grandchild.get("flights") == ["TAP 123"]
            grandchild.set("price", 250)
            assert child.get("price") is None
            assert grandchild.merge().applied == ["price"]
            assert child.get("price") == 250
            report = child.merge()
            assert sorted(report.applied) == ["budget", "flights", "price"]
            assert report.deleted == ["scratch"] and report.conflicts == []
            assert root.get("budget") == 900 and root.get("flights") == ["TAP 123"]
            assert root.get("scratch") is None
            assert child.items().keys() == root.items().keys()  # the fork's delta was consumed
            text = root.render(max_tokens=1000)
            assert text.splitlines()[0] == "- goal: plan a trip"
            assert root.render(max_tokens=8).count("\n") == 0

    def test_working_memory_merge_conflicts(self, memory: Memory) -> None:
        with memory.session(conversation_id="conflicts"):
            root = memory.working
            root.set("k", "base")
            for policy, expected in (("child", "child"), ("parent", "parent")):
                root.set("k", "base")
                fork = root.fork(f"f-{policy}")
                fork.set("k", "child")
                fork.set("free", policy)
                root.set("k", "parent")  # changed on both sides
                report = fork.merge(policy)  # type: ignore[arg-type]
                assert [c.key for c in report.conflicts] == ["k"]
                assert (
                    report.conflicts[0].parent == "parent" and report.conflicts[0].child == "child"
                )
                assert root.get("k") == expected
                assert root.get("free") == policy
            fork = root.fork("f-raise")
            fork.set("k", "mine")
            root.set("k", "theirs")
            with pytest.raises(MergeConflict) as info:
                fork.merge("raise")
            assert [c.key for c in info.value.report.conflicts] == ["k"]
            assert root.get("k") == "theirs" and fork.get("k") == "mine"
            with pytest.raises(InvalidInput):
                fork.merge("whatever")  # type: ignore[arg-type]
            with pytest.raises(InvalidInput):
                root.merge()

    def test_working_memory_expiry_and_async(self, memory: Memory) -> None:
        async def go() -> None:
            async with memory.session(conversation_id="wm-async"):
                wm = memory.working
                await wm.aset("short", 1, ttl=0.3)
                await wm.aset("long", 2)
                assert await wm.aget("short") == 1
                await asyncio.sleep(0.5)
                assert await wm.aget("short") is None
                assert set(await wm.aitems()) == {"long"}
                fork = wm.fork("f")
                await fork.aset("x", 1)
                assert (await fork.amerge()).applied == ["x"]
                assert await wm.adelete("x")
                assert "long" in await wm.arender()

        asyncio.run(go())

    # -- scope isolation ---------------------------------------------------------------------------

    def test_scopes_are_isolated(self, store: Store) -> None:
        memory = Memory(store=store, load_entrypoints=False)
        other_ns = Memory(store=store, load_entrypoints=False, namespace="tenant-2")
        with memory.session(user_id="alice", conversation_id="c"):
            memory.conversation.append(turn("alice"))
            memory.facts.put("secret", "alice's")
            memory.working.set("note", "alice's")
        with memory.session(user_id="bob", conversation_id="c"):
            assert memory.conversation.window().messages() == []
            assert memory.facts.get("secret") is None
            assert memory.facts.search("alice") == []
            assert memory.facts.all() == []
            assert memory.working.get("note") is None
            assert memory.tools.call("search_memory", {"query": "alice"}) == "[]"
        with other_ns.session(user_id="alice", conversation_id="c"):
            assert other_ns.conversation.last_seq() == 0
            assert other_ns.facts.get("secret") is None
        with memory.session(user_id="alice", conversation_id="d"):
            assert memory.conversation.last_seq() == 0
            assert memory.working.get("note") is None
            got = memory.facts.get("secret")  # facts belong to the user, across conversations
            assert got is not None and got.value == "alice's"
        with memory.session(user_id="alice", agent_id="planner"):
            assert memory.facts.get("secret") is None  # an agent's own facts are separate

    def test_no_scope_is_an_error(self, memory: Memory) -> None:
        with pytest.raises(NoScope):
            memory.conversation.append(turn("x"))
        with pytest.raises(NoScope):
            memory.facts.get("k")
        with pytest.raises(NoScope):
            memory.working.set("k", 1)

    def test_tools_bind_the_scope_from_the_host(self, memory: Memory) -> None:
        from memory_adapters import ToolArgumentError

        for spec in memory.tools.specs:
            params = set(spec.parameters["properties"])
            assert not params & {"user", "user_id", "scope", "namespace", "conversation_id"}
            assert spec.parameters["additionalProperties"] is False
        with memory.session(user_id="alice"):
            memory.tools.call("save_memory", {"key": "tea", "value": "oolong"})
            with pytest.raises(ToolArgumentError):
                memory.tools.call("save_memory", {"key": "tea", "value": "x", "user_id": "bob"})
            with pytest.raises(ToolArgumentError):
                memory.tools.call("recall_memory", {"key": ""})
            assert '"oolong"' in memory.tools.call("recall_memory", {"key": "tea"})
        with memory.session(user_id="bob"):
            assert memory.tools.call("list_memories", {}) == "[]"

    # -- bad input ---------------------------------------------------------------------------------

    def _snapshot(self, memory: Memory) -> Any:
        with memory.session(user_id="keeper", conversation_id="keeper"):
            return (
                [r.message.to_dict() for r in memory.conversation.read()],
                [(f.key, f.value, f.version) for f in memory.facts.all()],
                {k: n.value for k, n in memory.working.items().items()},
            )

    def test_bad_input_is_refused_and_nothing_is_lost(self, memory: Memory) -> None:
        with memory.session(user_id="keeper", conversation_id="keeper"):
            memory.conversation.append(turn("kept"))
            memory.facts.put("kept", {"v": 1})
            memory.working.set("kept", [1])
        before = self._snapshot(memory)
        tried: list[str] = []

        def refused(name: str, exc: type[BaseException], fn: Callable[[], Any]) -> None:
            tried.append(name)
            with pytest.raises(exc):
                fn()

        with memory.session(user_id="keeper", conversation_id="keeper"):
            conv: Any = memory.conversation
            facts: Any = memory.facts
            wm: Any = memory.working
            session: Any = memory.session
            message: Any = Message
            tool_call: Any = ToolCall
            not_json: list[Any] = [
                {1, 2},
                b"bytes",
                object(),
                float("nan"),
                float("inf"),
                {1: "int key"},
                (1, 2),
                {"deep": [complex(1, 2)]},
                "lone \ud800 surrogate",
            ]
            for i, value in enumerate(not_json):
                refused(f"fact value not json #{i}", InvalidValue, partial(facts.put, "k", value))
                refused(f"working value not json #{i}", InvalidValue, partial(wm.set, "k", value))
            deep: Any = []
            for _ in range(150):
                deep = [deep]
            refused("too deep", InvalidValue, lambda: facts.put("k", deep))
            refused("huge fact", ValueTooLarge, lambda: facts.put("k", "x" * (MAX_VALUE_BYTES + 1)))
            refused("huge note", ValueTooLarge, lambda: wm.set("k", "x" * (MAX_VALUE_BYTES + 1)))
            big = Memory(store=memory.store, load_entrypoints=False, max_turn_bytes=10_000)
            with big.session(user_id="keeper", conversation_id="keeper"):
                refused(
                    "huge turn",
                    ValueTooLarge,
                    lambda: big.conversation.append([Message.user("y" * 20_000)]),
                )
            bad_keys: list[Any] = [
                "",
                "k" * (MAX_ID_LENGTH + 1),
                "nul\x00key",
                "new\nline",
                None,
                42,
                b"k",
                ["k"],
                "\ud800",
            ]
            for i, key in enumerate(bad_keys):
                refused(f"fact key #{i}", InvalidId, partial(facts.put, key, 1))
                refused(f"fact get key #{i}", InvalidId, partial(facts.get, key))
                refused(f"note key #{i}", InvalidId, partial(wm.set, key, 1))
            for i, ident in enumerate(["", "c" * (MAX_ID_LENGTH + 1), "a\x00b", 7, None]):
                if ident is None:
                    continue
                refused(
                    f"conversation id #{i}",
                    InvalidId,
                    partial(session, conversation_id=ident),
                )
                refused(f"user id #{i}", InvalidId, partial(session, user_id=ident))
            refused("namespace", InvalidId, lambda: Memory(store=memory.store, namespace=""))
            refused("ttl zero", InvalidTTL, lambda: facts.put("k", 1, ttl=0))
            refused("ttl negative", InvalidTTL, lambda: facts.put("k", 1, ttl=-5))
            refused("ttl nan", InvalidTTL, lambda: facts.put("k", 1, ttl=float("nan")))
            refused("ttl str", InvalidTTL, lambda: facts.put("k", 1, ttl="10"))
            refused("expired", InvalidTTL, lambda: facts.put("k", 1, expires_at=time.time() - 1))
            refused("note ttl", InvalidTTL, lambda: wm.set("k", 1, ttl=-1))
            refused("importance str", InvalidValue, lambda: facts.put("k", 1, importance="high"))
            refused(
                "importance nan", InvalidValue, lambda: facts.put("k", 1, importance=float("nan"))
            )
            refused("limit str", InvalidInput, lambda: facts.search("x", limit="5"))
            refused("limit zero", InvalidInput, lambda: facts.all(limit=0))
            refused("query type", InvalidInput, lambda: facts.search(None))
            refused(
                "cas version type", InvalidInput, lambda: facts.put("k", 1, expected_version="1")
            )
            refused("append one message", InvalidInput, lambda: conv.append(Message.user("x")))
            refused("append nothing", InvalidInput, lambda: conv.append([]))
            refused("append dicts", InvalidInput, lambda: conv.append([{"role": "user"}]))
            refused("bad role", InvalidValue, lambda: conv.append([message("boss", "x")]))
            refused("text type", InvalidValue, lambda: conv.append([message("user", 5)]))
            refused(
                "tool args type",
                InvalidValue,
                lambda: conv.append([Message.assistant("", [tool_call("i", "n", "args")])]),
            )
            refused(
                "tool args not json",
                InvalidValue,
                lambda: conv.append([Message.assistant("", [ToolCall("i", "n", {"x": {1}})])]),
            )
            refused(
                "raw not json",
                InvalidValue,
                lambda: conv.append([Message("user", "x", raw=object())]),
            )
            refused("text surrogate", InvalidValue, lambda: conv.append([Message.user("\udfff")]))
            refused(
                "expected seq", InvalidInput, lambda: conv.append(turn("x"), expected_last_seq=-1)
            )
            refused(
                "idempotency key", InvalidId, lambda: conv.append(turn("x"), idempotency_key="")
            )
            refused("window budget", InvalidInput, lambda: conv.window(max_tokens=-1))
            refused("fork name", InvalidId, lambda: wm.fork(""))
            refused("fork slash", InvalidInput, lambda: wm.fork("a/b"))
        assert len(tried) >= 60
        assert self._snapshot(memory) == before, "bad input changed what was stored"

    # -- the hostile-argument table (memory_adapters.testing.hostile) --------------------------

    @staticmethod
    def _table_target(memory: Memory, target: str) -> Any:
        if target == "conversation":
            return memory.conversation
        if target == "facts":
            return memory.facts
        if target == "working":
            return memory.working
        if target == "fork":
            return memory.working.fork("f")
        assert target == "tools", target
        return memory.tools

    @staticmethod
    def _judge(case: Case, how: str, result: Any, exc: Exception | None) -> str | None:
        """What is wrong with a call's outcome, or ``None``."""
        if case.error is None:
            if exc is not None:
                return f"{how} {case.name}: raised {type(exc).__name__}: {exc}"
            if case.check is not None and not case.check(result):
                return f"{how} {case.name}: unexpected result {describe(result)}"
            return None
        if exc is None:
            return f"{how} {case.name}: accepted, expected {case.error.__name__}"
        if type(exc) is not case.error:
            return (
                f"{how} {case.name}: raised {type(exc).__name__}: {describe(str(exc))}, "
                f"expected {case.error.__name__}"
            )
        return None

    def _run_table(self, memory: Memory, cases: list[Case]) -> tuple[int, list[str]]:
        """Run every case with the sync method and then with its async twin, in the current
        session; return how many calls were made and what went wrong."""
        failures: list[str] = []
        tried = 0
        for case in cases:
            fn = getattr(self._table_target(memory, case.target), case.method)
            tried += 1
            try:
                result = fn(*case.args, **case.kwargs)
            except Exception as exc:
                problem = self._judge(case, "sync", None, exc)
            else:
                problem = self._judge(case, "sync", result, None)
            if problem:
                failures.append(problem)

        async def run_async() -> int:
            calls = 0
            for case in cases:
                fn = getattr(self._table_target(memory, case.target), "a" + case.method)
                calls += 1
                try:
                    result = await fn(*case.args, **case.kwargs)
                except Exception as exc:
                    problem = self._judge(case, "async", None, exc)
                else:
                    problem = self._judge(case, "async", result, None)
                if problem:
                    failures.append(problem)
            return calls

        tried += asyncio.run(run_async())
        return tried, failures

    def _full_snapshot(self, memory: Memory) -> Any:
        with memory.session(user_id="keeper", conversation_id="keeper"):
            fork = memory.working.fork("f")
            return (
                self._snapshot(memory),
                memory.conversation.last_seq(),
                [
                    (f.key, f.value, f.version, f.importance, f.expires_at)
                    for f in memory.facts.all()
                ],
                {k: (n.value, n.path, n.version) for k, n in fork.items().items()},
            )

    def test_hostile_arguments_get_one_error_on_every_store_and_change_nothing(
        self, memory: Memory
    ) -> None:
        """Every public method, sync and async, with huge, negative, zero, wrong-typed,
        non-finite and out-of-range arguments: the exact error class of the table, on every
        store, and nothing stored changes."""
        with memory.session(user_id="keeper", conversation_id="keeper"):
            memory.conversation.append(turn("kept"))
            memory.facts.put("kept", {"v": 1})
            memory.facts.put("tea", "oolong tea", importance=0.5, ttl=3600)
            memory.working.set("kept", [1])
            memory.working.fork("f").set("forked", "yes")
        before = self._full_snapshot(memory)
        cases = hostile_cases(time.time())
        with memory.session(user_id="keeper", conversation_id="keeper"):
            tried, failures = self._run_table(memory, cases)
        assert not failures, f"{len(failures)} of {tried} calls went wrong:\n" + "\n".join(
            failures[:40]
        )
        assert tried == 2 * len(cases) and tried >= 1000, tried
        assert self._full_snapshot(memory) == before, "a refused call changed what was stored"

    def test_boundary_arguments_are_accepted_alike_on_every_store(self, memory: Memory) -> None:
        """The largest limits (``MAX_INT``), ttls just within ``MAX_TTL``, the longest keys,
        the largest values and hostile search strings: accepted, with the same answer."""
        with memory.session(user_id="edge", conversation_id="edge"):
            memory.conversation.append(BOUNDARY_CONVERSATION)
            for key, value in BOUNDARY_FACTS.items():
                memory.facts.put(key, value)
            for key, value in BOUNDARY_NOTES.items():
                memory.working.set(key, value)
            cases = boundary_cases(time.time())
            tried, failures = self._run_table(memory, cases)
        assert not failures, f"{len(failures)} of {tried} calls went wrong:\n" + "\n".join(
            failures[:40]
        )
        assert tried == 2 * len(cases) and tried >= 100, tried

    def test_memory_options_refuse_bad_values(self, store: Store) -> None:
        """``Memory(...)`` options: the same checks as the methods' arguments; the largest
        accepted values work on every store."""
        tried = 0

        def refused(error: type[BaseException], **options: Any) -> None:
            nonlocal tried
            tried += 1
            with pytest.raises(error) as info:
                Memory(store=store, load_entrypoints=False, **options)
            assert type(info.value) is error, (options, info.value)

        for option, minimum, none_ok in (
            ("history_tokens", 1, True),
            ("summary_tokens", 0, False),
            ("working_tokens", 1, False),
            ("max_turn_bytes", 1, False),
        ):
            for value in bad_ints(minimum, none_ok=none_ok):
                refused(InvalidInput, **{option: value})
        for flag in ("pin_system", "pin_first_turn"):
            for value in (*BAD_FLAGS, None):
                refused(InvalidInput, **{flag: value})
        for model in (5, 5.0, True, b"gpt-4o", ["gpt-4o"], float("nan")):
            refused(InvalidInput, model=model)
        for namespace in BAD_IDS:
            refused(InvalidId, namespace=namespace)
        memory = Memory(store=store, load_entrypoints=False)
        bad_counts: list[tuple[Any, Any]] = [
            ("a string", None),
            (b"bytes", None),
            (5, None),
            (None, None),
            ([1, "x"], None),
            (["x", None], None),
            (["x"], 5),
            (["x"], b"gpt-4o"),
        ]
        for texts, tokenizer in bad_counts:
            tried += 2
            with pytest.raises(InvalidInput) as info:
                memory.count_tokens(texts, tokenizer)
            assert type(info.value) is InvalidInput, (texts, tokenizer)
            with pytest.raises(InvalidInput) as info:
                asyncio.run(memory.acount_tokens(texts, tokenizer))
            assert type(info.value) is InvalidInput, (texts, tokenizer)
        assert tried >= 90, tried
        edge = Memory(
            store=store,
            load_entrypoints=False,
            history_tokens=MAX_INT,
            summary_tokens=MAX_INT,
            working_tokens=MAX_INT,
            max_turn_bytes=MAX_INT,
        )
        with edge.session(user_id="edge", conversation_id="edge"):
            edge.conversation.append(turn("e"))
            assert len(edge.conversation.window().records) == 4
            edge.working.set("note", "kept")
            assert edge.working.render() == "- note: kept"

    def test_hostile_keys_and_values_round_trip_exactly(self, memory: Memory) -> None:
        with memory.session(user_id="mallory", conversation_id="hostile"):
            for i, key in enumerate(HOSTILE_KEYS):
                memory.facts.put(key, HOSTILE_VALUES[i % len(HOSTILE_VALUES)])
            for i, value in enumerate(HOSTILE_VALUES):
                memory.facts.put(f"value-{i}", value)
                memory.working.set(f"value-{i}", value)
            for i, key in enumerate(HOSTILE_KEYS):
                got = memory.facts.get(key)
                assert got is not None and got.key == key
                assert got.value == HOSTILE_VALUES[i % len(HOSTILE_VALUES)]
                assert got.version == 1  # no key matched another as a pattern
            for i, value in enumerate(HOSTILE_VALUES):
                got = memory.facts.get(f"value-{i}")
                assert got is not None and got.value == value and type(got.value) is type(value)
                assert memory.working.get(f"value-{i}") == value
            keys = [f.key for f in memory.facts.all()]
            assert sorted(keys) == sorted(
                [*HOSTILE_KEYS, *(f"value-{i}" for i in range(len(HOSTILE_VALUES)))]
            )
            for pattern in ("%", "_", "*", "$gt", "$where", "a.b"):
                assert memory.facts.get(pattern + "x") is None
            messages = [Message.user(str(v)) for v in HOSTILE_VALUES if isinstance(v, str)]
            messages.append(
                Message.assistant("", [ToolCall("$where", "$gt", {"$gt": "", "a.b": {"$ne": 1}})])
            )
            messages.append(Message.tool(ToolResult("$where", {"$set": "\x00"})))
            memory.conversation.append(messages)
            back = memory.conversation.read()
            assert [r.message.to_dict() for r in back] == [m.to_dict() for m in messages]
        for key in HOSTILE_KEYS:
            with memory.session(user_id=key, conversation_id=key):
                assert memory.facts.all() == []  # a user id shaped like a pattern matches nobody
                assert memory.conversation.last_seq() == 0
                memory.facts.put("own", key)
        with memory.session(user_id="mallory"):
            assert len(memory.facts.all()) == len(HOSTILE_KEYS) + len(HOSTILE_VALUES)

    # -- closing -----------------------------------------------------------------------------------

    def test_a_closed_store_raises_store_unavailable(self, store: Store, memory: Memory) -> None:
        """After ``close()`` every method, sync and async, raises ``StoreUnavailable`` (a
        store that quietly kept working would hide a use after close), through ``Memory`` as
        well; closing again does nothing."""
        with memory.session(user_id="alice", conversation_id="c"):
            memory.conversation.append(turn("before"))
            memory.facts.put("tea", "oolong")
        memory.close()
        calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
            ("append", ("c", _entries("after", 1)), {}),
            ("tail", ("c",), {"max_tokens": 100}),
            ("head_and_tail", ("c",), {"head": 1, "max_tokens": 100}),
            ("read", ("c",), {}),
            ("last_seq", ("c",), {}),
            ("delete_conversation", ("c",), {}),
            ("put_summary", ("c", Summary(1, 1, "s", 1, time.time())), {}),
            ("latest_summary", ("c",), {}),
            ("claim_summary", ("c", 1, "me"), {"lease_seconds": 60.0}),
            ("put_fact", ("ns", "sc", "k", '"v"'), {"text": "v"}),
            ("get_fact", ("ns", "sc", "k"), {}),
            ("list_facts", ("ns", "sc"), {}),
            ("delete_fact", ("ns", "sc", "k"), {}),
            ("match_terms", ("ns", "sc", ["v"]), {}),
            ("get_facts", ("ns", "sc", ["k"]), {}),
            ("list_fact_scopes", ("ns", ""), {}),
            ("prune", (), {}),
            ("list_conversations", ("",), {}),
            ("erase", ("ns", "u"), {}),
            ("delete_idle_conversations", ("", time.time()), {}),
            ("fact_history", ("ns", "sc", "k"), {}),
            ("restore_fact", ("ns", "sc", Fact("k", 1, 1)), {}),
        ]
        expected: tuple[type[Exception], ...] = (StoreUnavailable,)
        for name, args, kwargs in calls:
            if name == "list_fact_scopes":  # optional: a store without it says Unsupported
                expected = (StoreUnavailable, Unsupported)
            with pytest.raises(expected):
                getattr(store, name)(*args, **kwargs)
            with pytest.raises(expected):
                asyncio.run(getattr(store, "a" + name)(*args, **kwargs))
        with memory.session(user_id="alice", conversation_id="c"):
            with pytest.raises(StoreUnavailable, match="is closed"):
                memory.conversation.window(max_tokens=1000)
            with pytest.raises(StoreUnavailable, match="is closed"):
                memory.facts.get("tea")
            with pytest.raises(StoreUnavailable, match="is closed"):
                memory.working.set("k", 1)
        store.close()
        asyncio.run(store.aclose())


class MultiProcessConformance:
    """Extra tests for stores that several processes share. Needs a ``store_factory``
    fixture: a picklable zero-argument callable opening the same store."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:  # pragma: no cover - replaced by the subclass
        raise NotImplementedError("give the multi-process suite a `store_factory` fixture")

    @pytest.mark.processes
    def test_many_processes_append_without_loss_or_interleaving(
        self, store_factory: StoreFactory
    ) -> None:
        writers, batches, size = 4, 40, 3
        ctx = multiprocessing.get_context("spawn")
        procs = [
            ctx.Process(target=_append_worker, args=(store_factory, "procs", w, batches))
            for w in range(writers)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0, f"writer process failed with exit code {p.exitcode}"
        store = store_factory()
        try:
            check_log(store.read("procs"), writers, batches, size)
        finally:
            store.close()

    @pytest.mark.processes
    @pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
    def test_a_forked_child_goes_on_with_the_store_its_parent_opened(
        self, store_factory: StoreFactory
    ) -> None:
        """A child forked after its parent used the store (``multiprocessing``'s fork start
        method, a pre-forking server) appends through that store object while the parent
        appends too, then closes it: nothing is lost or torn, and the parent's store still
        works afterwards (the child used none of the parent's connections, and its close
        closed none). See :meth:`Store.after_fork <memory_adapters.store.Store.after_fork>`."""
        batches = 20
        store = store_factory()
        try:
            store.append("forked", _entries("w0b0", 3))  # the parent's connections are open
            ctx = multiprocessing.get_context("fork")
            child = ctx.Process(target=_inherited_writer, args=(store, "forked", 1, batches))
            child.start()
            for i in range(1, batches):
                store.append("forked", _entries(f"w0b{i}", 3))
            child.join(120)
            if child.exitcode is None:  # hung: end it, so that its locks hold up no later test
                child.kill()
                child.join(10)
                raise AssertionError("the forked child did not finish in 120 s")
            assert child.exitcode == 0, f"the forked child failed with exit code {child.exitcode}"
            check_log(store.read("forked"), 2, batches, 3)
            store.append("after", _entries("w0b0", 3))
            assert [r.seq for r in store.read("after")] == [1, 2, 3]
        finally:
            store.close()

    @pytest.mark.processes
    def test_a_conversation_appended_from_several_processes_while_another_searches(
        self, store_factory: StoreFactory, tmp_path: Any
    ) -> None:
        """Processes append turns to one conversation (each indexing on its worker) while
        another searches it (indexing what it finds unindexed): afterwards every message is
        found exactly once, and none was embedded twice, by any process."""
        writers, turns = 3, 10
        ctx = multiprocessing.get_context("spawn")
        stop, searches = ctx.Event(), ctx.Value("i", 0)
        searcher = ctx.Process(
            target=mp_searcher, args=(store_factory, stop, str(tmp_path / "s.json"), searches)
        )
        searcher.start()
        procs = [
            ctx.Process(
                target=mp_writer, args=(store_factory, w, turns, str(tmp_path / f"w{w}.json"))
            )
            for w in range(writers)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(180)
            assert p.exitcode == 0, f"writer process failed with exit code {p.exitcode}"
        stop.set()
        searcher.join(180)
        assert searcher.exitcode == 0, f"the searcher failed with exit code {searcher.exitcode}"
        assert searches.value > 0
        embed = CountingEmbedder()
        memory = Memory(store=store_factory(), load_entrypoints=False, embed=embed)
        try:
            with memory.session(namespace=MP_NS, user_id="u", conversation_id="shared"):
                hits = memory.conversation.search("tea oolong", limit=1000)
                texts = sorted(h.message.text for h in hits)
                assert texts == sorted(
                    f"{word} w{w}{kind}{i}"
                    for w in range(writers)
                    for i in range(turns)
                    for word, kind in (("tea", "q"), ("oolong", "a"))
                )
                assert sorted(h.seq for h in hits) == list(range(1, writers * turns * 2 + 1))
                semantic = memory.conversation.search("beverage", limit=1000, mode="semantic")
                assert len(semantic) == writers * turns * 2
        finally:
            memory.close()
        embedded = Counter(embed.documents)
        for name in ["s.json", *(f"w{w}.json" for w in range(writers))]:
            embedded.update(json.loads((tmp_path / name).read_text()))
        assert [t for t, n in embedded.items() if n > 1] == [], "a message was embedded twice"
        assert len(embedded) == writers * turns * 2

    @pytest.mark.processes
    @pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
    def test_a_process_killed_between_a_turn_and_its_embedding_loses_nothing(
        self, store_factory: StoreFactory
    ) -> None:
        """A process that stored turns and died before indexing them, and one killed while
        its worker was embedding them (holding the conversation's lease): the next search
        (once the lease is over) finds every message and embeds each once; after a restart
        (the store closed and opened again) nothing is embedded again."""
        kill_between_turn_and_embedding(store_factory)

    @pytest.mark.processes
    def test_each_message_is_embedded_once_across_restarts(
        self, store_factory: StoreFactory
    ) -> None:
        """Lives of a ``Memory`` (opened on the store, turns, a search, closed): each message
        is embedded once over all of them, and found afterwards."""
        embed_once_across_restarts(store_factory)
