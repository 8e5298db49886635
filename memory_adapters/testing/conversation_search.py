"""Conversation search in the conformance kit (:mod:`memory_adapters.conversation_search`).

:class:`ConversationSearchConformance` and :class:`ConversationSearchProperties` are mixed
into :class:`~memory_adapters.testing.StoreConformance` and use its ``store`` fixture (and
``store_dump`` when the store's test module gives one): the hits and their context, scope
isolation, since/until, prefix stability, the same ranking as the in-memory reference, and
``clear()``, ``erase`` and retention leaving nothing searchable; that a turn never calls the
embedder and that each message is embedded once in its life. The multi-process tests
(several processes appending while another searches; a process killed between a turn and
its embedding) are in :class:`~memory_adapters.testing.MultiProcessConformance`, with the
helpers here.

Conversations are the user's: they are keyed by namespace, user and conversation id, and a
session's ``agent_id`` does not separate them, so another user's or another namespace's
messages are never hits, and an agent of the same user finds the user's messages.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_adapters import InvalidInput, Memory, Message, ToolCall, ToolResult
from memory_adapters.conversation_search import (
    MessageHit,
    doc_text,
    index_namespace,
    state_scope,
)
from memory_adapters.embedders import InputType
from memory_adapters.errors import EmbeddingWarning
from memory_adapters.facts import SearchMode, supports_vectors
from memory_adapters.messages import Summary
from memory_adapters.scope import Scope
from memory_adapters.store import Store

from .embedders import ConceptEmbedder, FailingEmbedder
from .operations import Dump, _needs, _wait_past
from .ranking import VOCABULARY

NS = "cs"
WORKER = "memory-adapters-worker"
"""The name of a ``Memory``'s worker thread (:class:`~memory_adapters.worker.Worker`)."""


class CountingEmbedder(ConceptEmbedder):
    """A :class:`ConceptEmbedder` that also records each call: the thread that made it, the
    input type and the texts (``log``)."""

    def __init__(self, name: str = "concepts-v1", delay: float = 0.0) -> None:
        super().__init__(name)
        self.delay = delay
        """Seconds each call takes (a remote embedder's latency)."""
        self.log: list[tuple[int, str, str, tuple[str, ...]]] = []

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        thread = threading.current_thread()
        with self._lock:
            self.log.append((thread.ident or 0, thread.name, input_type, tuple(texts)))
        if self.delay:
            time.sleep(self.delay)
        return super().embed(texts, input_type)

    def calls_on(self, ident: int | None) -> int:
        """How many calls the thread ``ident`` made."""
        with self._lock:
            return sum(1 for entry in self.log if entry[0] == ident)

    def document_threads(self) -> set[str]:
        """The names of the threads that embedded documents."""
        with self._lock:
            return {name for _, name, kind, _ in self.log if kind == "document"}


class BlockingEmbedder(ConceptEmbedder):
    """Embeds once ``release`` is set (``entered`` says that a call is waiting)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        self.entered.set()
        self.release.wait(60)
        return super().embed(texts, input_type)


def _memory(store: Store, embed: object = False, **options: Any) -> Memory:
    return Memory(store=store, load_entrypoints=False, embed=embed, **options)


def _key(user: str | None, conversation: str, namespace: str = NS) -> str:
    return Scope(namespace=namespace, user_id=user, conversation_id=conversation).conversation_key


def _user_scope(user: str) -> str:
    return "user:" + quote(user, safe="")


def _documents(store: Store, user: str, namespace: str = NS) -> list[str]:
    """The keys of the documents of ``user``'s conversation index."""
    return [f.key for f in store.list_facts(index_namespace(namespace), _user_scope(user))]


def _where(hits: Sequence[MessageHit]) -> list[tuple[str, int]]:
    return [(h.conversation_id, h.seq) for h in hits]


def _rows(store_dump: Dump) -> str:
    return "\n".join(row for table in store_dump().values() for row in table)


@contextmanager
def _clock(start: float) -> Iterator[list[float]]:
    """``time.time()`` reads ``now[0]`` inside (set it before each write): messages written
    to two stores at the same moments rank alike, ties included."""
    now = [start]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: now[0])
        yield now


def _turns(memory: Memory, *pairs: tuple[str, str]) -> None:
    for question, answer in pairs:
        memory.conversation.append([Message.user(question), Message.assistant(answer)])


class ConversationSearchConformance:
    """``memory.conversation.search`` on the store under test."""

    # -- hits and their context ----------------------------------------------------------------

    def test_conversation_search_finds_each_message_with_its_context(self, store: Store) -> None:
        memory = _memory(store)
        with memory.session(namespace=NS, user_id="ann", conversation_id="c"):
            _turns(
                memory,
                ("My favourite tea is oolong", "Noted: oolong tea."),
                ("Which colour should the new bike be?", "Blue, like the old one."),
                ("I moved to Lisbon in May", "Lisbon is lovely in spring."),
                ("yes", "Then blue it is"),
            )
            records = memory.conversation.read()
            hits = memory.conversation.search("oolong", limit=10)
            # the two that say it, and the one after them (indexed with the end of its
            # predecessor)
            assert set(_where(hits)) == {("c", 1), ("c", 2), ("c", 3)}
            for hit in hits:
                record = records[hit.seq - 1]
                assert hit.conversation_id == "c"
                assert hit.message == record.message and hit.text == record.message.text
                assert hit.created_at == record.created_at
                assert hit.score > 0
                want = [r.seq for r in records if abs(r.seq - hit.seq) <= 1]
                assert [r.seq for r in hit.context] == want
                assert [r.message for r in hit.context] == [records[s - 1].message for s in want]
            first = memory.conversation.search("favourite", limit=10)
            assert set(_where(first)) == {("c", 1), ("c", 2)}
            (one,) = [h for h in first if h.seq == 1]
            assert [r.seq for r in one.context] == [1, 2]  # the first message: no before
            last = memory.conversation.search("Then blue it is", limit=1)
            assert _where(last) == [("c", 8)]
            assert [r.seq for r in last[0].context] == [7, 8]  # the last message: no after
            # a short message is found by the one it answers ("yes" by "bike")
            bike = memory.conversation.search("bike", limit=10)
            assert ("c", 3) in _where(bike) and ("c", 4) in _where(bike)
            assert memory.conversation.search("zebra") == []
            assert memory.conversation.search("") == []
            assert asyncio.run(memory.conversation.asearch("oolong", limit=10)) == hits
            with pytest.raises(InvalidInput):
                memory.conversation.search("tea", limit=0)
            with pytest.raises(InvalidInput):
                memory.conversation.search("tea", mode="fuzzy")  # type: ignore[arg-type]

    def test_conversation_search_leaves_out_tools_system_prompts_and_summaries(
        self, store: Store
    ) -> None:
        call = ToolCall("t1", "weather_lookup", {"city": "Reykjavik"})
        turn = [
            Message.system("You are a terse butler"),
            Message.user("Will it rain?"),
            Message.assistant("", [call]),
            Message.tool(ToolResult("t1", {"forecast": "drizzle"}, name="weather_lookup")),
            Message.assistant("Bring an umbrella"),
        ]
        plain, tools = _memory(store), _memory(store, index_tool_messages=True)
        for memory, conversation in ((plain, "plain"), (tools, "tools")):
            with memory.session(namespace=NS, user_id="ann", conversation_id=conversation):
                memory.conversation.append(turn)
        key = _key("ann", "plain")
        store.put_summary(key, Summary(1, 5, "a summary about glaciers", 4, time.time()))
        with plain.session(namespace=NS, user_id="ann", conversation_id="plain"):
            for query in ("butler", "terse", "weather_lookup", "Reykjavik", "drizzle", "glaciers"):
                assert plain.conversation.search(query) == [], query
            assert _where(plain.conversation.search("umbrella")) == [("plain", 5)]
        with tools.session(namespace=NS, user_id="ann", conversation_id="tools"):
            # the call, and its result (indexed with the end of the call)
            assert set(_where(tools.conversation.search("Reykjavik"))) == {
                ("tools", 3),
                ("tools", 4),
            }
            assert set(_where(tools.conversation.search("drizzle"))) == {
                ("tools", 4),
                ("tools", 5),
            }
            assert tools.conversation.search("butler") == []

    # -- scope -----------------------------------------------------------------------------------

    def test_conversation_search_is_the_users_never_anothers(self, store: Store) -> None:
        """Another user's (ids that are prefixes or extensions of the user's, or shaped like
        patterns) or another namespace's messages are never hits, nor a conversation's with
        no user; the user's own conversations are, with ``all_conversations``, and an agent
        of the same user finds them (conversations are the user's, not the agent's)."""
        memory = _memory(store)
        writers = [
            ("ann", NS, "c1"),
            ("ann", NS, "c2"),
            ("ann", NS + "-other", "c1"),
            ("an", NS, "c1"),
            ("anna", NS, "c1"),
            ("ann:c1", NS, "c1"),
            ("ann/agent:x", NS, "c1"),
            ("%", NS, "c1"),
            (None, NS, "c1"),
            (None, NS, "ann"),
        ]
        for user, namespace, conversation in writers:
            with memory.session(namespace=namespace, user_id=user, conversation_id=conversation):
                _turns(memory, (f"oolong tea for {user} in {conversation}", "noted oolong"))

        def found(
            user: str | None,
            conversation: str,
            namespace: str = NS,
            agent: str | None = None,
            **options: Any,
        ) -> set[tuple[str, int]]:
            with memory.session(
                namespace=namespace, user_id=user, conversation_id=conversation, agent_id=agent
            ):
                hits = memory.conversation.search("oolong tea", limit=50, **options)
                text = f"for {user} in "
                assert all(text in r.message.text for h in hits for r in h.context[:1]), hits
                return set(_where(hits))

        assert found("ann", "c1") == {("c1", 1), ("c1", 2)}
        everything = {("c1", 1), ("c1", 2), ("c2", 1), ("c2", 2)}
        assert found("ann", "c1", all_conversations=True) == everything
        assert found("ann", "c3", all_conversations=True) == everything
        assert found("ann", "c3") == set()
        assert found("ann", "c1", agent="planner") == {("c1", 1), ("c1", 2)}
        assert found("ann", "c1", agent="planner", all_conversations=True) == everything
        assert found("ann", "c1", NS + "-other", all_conversations=True) == {("c1", 1), ("c1", 2)}
        for user in ("an", "anna", "ann:c1", "ann/agent:x", "%"):
            assert found(user, "c1", all_conversations=True) == {("c1", 1), ("c1", 2)}, user
        assert found("nobody", "c1", all_conversations=True) == set()
        # a conversation with no user: its own messages, whatever all_conversations says
        assert found(None, "c1") == {("c1", 1), ("c1", 2)}
        assert found(None, "c1", all_conversations=True) == {("c1", 1), ("c1", 2)}
        assert found(None, "c2", all_conversations=True) == set()
        # through the tool-facing scope too: every hit names one of the user's conversations
        with memory.session(namespace=NS, user_id="anna", conversation_id="c9"):
            hits = memory.conversation.search("ann", limit=50, all_conversations=True)
            assert {h.conversation_id for h in hits} <= {"c1"}
            assert all("anna" in h.context[0].message.text for h in hits)

    # -- time ------------------------------------------------------------------------------------

    def test_conversation_search_since_and_until(self, store: Store) -> None:
        memory = _memory(store)
        start = float(int(time.time()))  # whole seconds: exact as datetimes too
        with memory.session(namespace=NS, user_id="ann", conversation_id="c"):
            with _clock(start) as now:
                for i in range(3):
                    now[0] = start + 10 * i
                    memory.conversation.append([Message.user(f"tea number {i}")])
            records = memory.conversation.read()
            assert [r.created_at for r in records] == [start, start + 10, start + 20]

            def seqs(**options: Any) -> list[int]:
                hits = memory.conversation.search("tea", limit=10, **options)
                return sorted(h.seq for h in hits)

            assert seqs() == [1, 2, 3]
            assert seqs(since=start + 10) == [2, 3]  # since is inclusive
            assert seqs(until=start + 10) == [1]  # until is exclusive
            assert seqs(since=start + 5, until=start + 20) == [2]
            assert seqs(since=start + 21) == []
            assert seqs(since=datetime.fromtimestamp(start + 10, UTC)) == [2, 3]
            assert seqs(until=datetime.fromtimestamp(start + 20, UTC), all_conversations=True) == [
                1,
                2,
            ]
            got = asyncio.run(memory.conversation.asearch("tea", since=start + 20))
            assert [h.seq for h in got] == [3]
            for bad in ("yesterday", float("nan"), datetime(2024, 1, 1), True, [1]):
                with pytest.raises(InvalidInput):
                    memory.conversation.search("tea", since=bad)  # type: ignore[arg-type]
                with pytest.raises(InvalidInput):
                    memory.conversation.search("tea", until=bad)  # type: ignore[arg-type]

    # -- ranking -----------------------------------------------------------------------------------

    def test_conversation_search_is_prefix_stable_in_every_mode(self, store: Store) -> None:
        """Many messages sharing words, stored in the same second (ties): the first ``k`` hits
        at any limit are the first ``k`` of a longer search, in every mode."""
        embed = ConceptEmbedder()
        memory = _memory(store, embed=embed)
        modes: tuple[SearchMode, ...] = (
            ("keyword", "semantic", "hybrid") if supports_vectors(store) else ("keyword",)
        )
        words = ["tea", "oolong", "coffee", "lisbon", "home", "jazz", "dog", "work"]
        with memory.session(namespace=NS, user_id="ann", conversation_id="c"):
            with _clock(time.time()):
                for i in range(40):
                    text = " ".join(words[(i * j) % len(words)] for j in range(1, 2 + i % 5))
                    memory.conversation.append([Message.user(text), Message.assistant("ok")])
            for mode in modes:
                for query in ("tea", "oolong coffee", "my home in lisbon", "my dog at work"):
                    longest = memory.conversation.search(query, limit=60, mode=mode)
                    assert longest, (mode, query)
                    assert len(set(_where(longest))) == len(longest)
                    scores = [h.score for h in longest]
                    assert scores == sorted(scores, reverse=True)
                    for k in (1, 2, 5, 13):
                        short = memory.conversation.search(query, limit=k, mode=mode)
                        assert _where(short) == _where(longest[:k]), (mode, query, k)
                        for got, want in zip(short, longest, strict=False):
                            assert math.isclose(got.score, want.score, rel_tol=1e-9, abs_tol=1e-9)

    # -- deleting --------------------------------------------------------------------------------

    def test_clear_leaves_nothing_searchable(self, store: Store, store_dump: Dump | None) -> None:
        embed = ConceptEmbedder()
        memory = _memory(store, embed=embed)
        with memory.session(namespace=NS, user_id="ann", conversation_id="kept"):
            _turns(memory, ("keptword oolong tea", "keptword noted"))
        with memory.session(namespace=NS, user_id="ann", conversation_id="gone"):
            _turns(memory, ("goneword oolong tea", "goneword noted"), ("more goneword", "ok"))
            assert len(memory.conversation.search("goneword", limit=10)) == 4
            assert memory.conversation.clear() == 4
            assert memory.conversation.search("goneword oolong", limit=10) == []
            assert memory.conversation.search("goneword", limit=10, mode="semantic") == []
            hits = memory.conversation.search("oolong noted", limit=10, all_conversations=True)
            assert {h.conversation_id for h in hits} == {"kept"}
        assert sorted(_documents(store, "ann")) == ["1@kept", "2@kept"]
        state = store.get_fact(index_namespace(NS), state_scope("user:ann"), _key("ann", "gone"))
        assert state is None
        if store_dump is not None:
            assert "goneword" not in _rows(store_dump)
        with memory.session(namespace=NS, user_id="ann", conversation_id="gone"):
            # the conversation starts again at seq 1: its new messages are found, not the old
            _turns(memory, ("a fresh start", "freshword"))
            assert _where(memory.conversation.search("fresh start", limit=10)) == [
                ("gone", 1),
                ("gone", 2),
            ]
            assert memory.conversation.search("goneword", limit=10, mode="keyword") == []
            again = memory.conversation.search("goneword", limit=10)  # hybrid: the nearest
            assert all("goneword" not in r.message.text for h in again for r in h.context)
            assert asyncio.run(memory.conversation.aclear()) == 2
            assert memory.conversation.search("fresh", limit=10) == []
        if store_dump is not None:
            rows = _rows(store_dump)
            assert "goneword" not in rows and "freshword" not in rows and "keptword" in rows

    def test_erase_leaves_nothing_searchable(self, store: Store, store_dump: Dump | None) -> None:
        """After ``memory.erase`` every table is what it was before the user wrote anything:
        documents, vectors and watermarks of the conversation index included."""
        _needs(store, "erase")
        embed = ConceptEmbedder()
        memory = _memory(store, embed=embed)
        for user, namespace in (("bob", NS), ("ann", NS + "-other"), ("annie", NS)):
            with memory.session(namespace=namespace, user_id=user, conversation_id="c1"):
                _turns(memory, (f"oolong tea for {user}", "noted"))
                assert memory.conversation.search("oolong", mode="hybrid")
        memory.conversation_index.wait()
        before = store_dump() if store_dump is not None else None
        for conversation in ("c1", "c2"):
            with memory.session(namespace=NS, user_id="ann", conversation_id=conversation):
                _turns(memory, ("annword oolong tea", "annword noted"))
                assert memory.conversation.search("annword", mode="semantic")
        with memory.session(namespace=NS, user_id="ann", conversation_id="c3"):
            _turns(memory, ("annword not yet indexed", "ok"))  # the worker may be at it
        memory.erase(user_id="ann", namespace=NS)
        if before is not None and store_dump is not None:
            after = store_dump()
            for table in before:
                assert after[table] == before[table], f"erase left something in {table}"
        assert _documents(store, "ann") == []
        with memory.session(namespace=NS, user_id="ann", conversation_id="c1"):
            for mode in ("keyword", "semantic", "hybrid"):
                assert memory.conversation.search("annword oolong", mode=mode) == []
                assert (
                    memory.conversation.search("annword tea", mode=mode, all_conversations=True)
                    == []
                )
        for user, namespace in (("bob", NS), ("ann", NS + "-other"), ("annie", NS)):
            with memory.session(namespace=namespace, user_id=user, conversation_id="c1"):
                assert len(memory.conversation.search("oolong tea", all_conversations=True)) == 2
        assert asyncio.run(memory.aerase(user_id="bob", namespace=NS)).conversations == 1
        with memory.session(namespace=NS, user_id="bob", conversation_id="c1"):
            assert memory.conversation.search("oolong", all_conversations=True) == []

    def test_retention_leaves_nothing_searchable(
        self, store: Store, store_dump: Dump | None
    ) -> None:
        _needs(store, "list_conversations", "delete_idle_conversations")
        memory = _memory(store, embed=ConceptEmbedder())
        for conversation in ("old1", "old2"):
            with memory.session(namespace=NS, user_id="ann", conversation_id=conversation):
                _turns(memory, (f"{conversation}word oolong", "noted"))
                assert memory.conversation.search("oolong")
        _wait_past(max(c.last_activity for c in memory.conversations("ann", NS)) + 1.0)
        with memory.session(namespace=NS, user_id="ann", conversation_id="new"):
            _turns(memory, ("newword oolong", "noted"))
        # idle for more than half a second: the old ones (a second), not the new one
        report = memory.retain(idle_seconds=0.5, namespace=NS)
        assert report.conversations == 2
        with memory.session(namespace=NS, user_id="ann", conversation_id="new"):
            hits = memory.conversation.search("oolong noted", limit=20, all_conversations=True)
            assert {h.conversation_id for h in hits} == {"new"}
            query = "old1word old2word"
            assert memory.conversation.search(query, mode="keyword", all_conversations=True) == []
            nearest = memory.conversation.search(query, mode="semantic", all_conversations=True)
            assert {h.conversation_id for h in nearest} == {"new"}
        assert sorted(_documents(store, "ann")) == ["1@new", "2@new"]
        if store_dump is not None:
            rows = _rows(store_dump)
            assert "old1word" not in rows and "old2word" not in rows and "newword" in rows

    # -- embedding: off the hot path, once --------------------------------------------------------

    def test_a_turn_never_waits_for_the_embedder(self, store: Store) -> None:
        """With the embedder stuck, turns are stored and return; the embedding happens on the
        worker afterwards, and a search then finds every message."""
        embed = BlockingEmbedder()
        memory = _memory(store, embed=embed)
        done = threading.Event()

        def turns() -> None:
            with memory.session(namespace=NS, user_id="ann", conversation_id="c"):
                for i in range(5):
                    _turns(memory, (f"tea question {i}", f"tea answer {i}"))
            done.set()

        try:
            thread = threading.Thread(target=turns)
            thread.start()
            assert embed.entered.wait(30), "the worker never embedded the first turn"
            thread.join(30)
            assert done.is_set(), "a turn waited for the embedder"
            assert not embed.release.is_set()
        finally:
            embed.release.set()
        with memory.session(namespace=NS, user_id="ann", conversation_id="c"):
            assert len(memory.conversation.search("tea", limit=20)) == 10

    def test_each_message_is_embedded_once_over_turns_searches_and_restarts(
        self, store: Store
    ) -> None:
        """Turns (sync, async, and a pydantic-ai agent's runs when pydantic-ai is installed)
        never call the embedder on their own thread; over many turns, searches of every mode,
        new ``Memory`` objects over the store (a restart) and one that stored turns without
        indexing them (a process gone before its worker ran), each message is embedded once,
        on the worker or by the search that first needed it."""
        embed = CountingEmbedder()
        expected: list[str] = []  # the indexed texts of the user's and assistant's messages
        on_turn_threads = 0
        serial = iter(range(1_000_000))

        def turn(memory: Memory, conversation: str, asynchronous: bool = False) -> None:
            nonlocal on_turn_threads
            n = next(serial)
            question, answer = f"tea question q{n}", f"oolong answer a{n}"
            me = threading.get_ident()
            before = embed.calls_on(me)
            with memory.session(namespace=NS, user_id="ann", conversation_id=conversation):
                last = memory.conversation.last_seq()
                previous = memory.conversation.read(start_seq=last) if last else []
                messages = [Message.user(question), Message.assistant(answer)]
                if asynchronous:
                    asyncio.run(memory.conversation.aappend(messages))
                else:
                    memory.conversation.append(messages)
            on_turn_threads += embed.calls_on(me) - before
            context = previous[-1].message.text if previous else ""
            expected.extend([doc_text(question, context), doc_text(answer, question)])

        def search(memory: Memory, conversation: str, mode: SearchMode) -> None:
            with memory.session(namespace=NS, user_id="ann", conversation_id=conversation):
                memory.conversation.search("tea oolong", limit=3, mode=mode)

        first = _memory(store, embed=embed)
        for i in range(12):
            turn(first, f"c{i % 3}", asynchronous=i % 4 == 3)
            if i % 5 == 4:
                modes: tuple[SearchMode, ...] = ("keyword", "hybrid", "semantic")
                search(first, f"c{i % 3}", modes[i % 3])
        agent_runs = self._agent_turns(first, embed)
        first.worker.close(60)  # a restart: a new Memory over the same store
        second = _memory(store, embed=embed)
        for i in range(8):
            turn(second, f"c{i % 4}")
            search(second, "c0", "hybrid")
        search(second, "c1", "semantic")
        gone = _memory(store, embed=embed, index_conversations=False)  # stored, never indexed
        for _ in range(5):
            turn(gone, "c5")
        del gone
        third = _memory(store, embed=embed)
        with third.session(namespace=NS, user_id="ann", conversation_id="c0"):
            found = third.conversation.search("oolong tea", limit=200, all_conversations=True)
            third.conversation.search("tea", limit=200, mode="semantic", all_conversations=True)
        assert on_turn_threads == 0, "a turn called the embedder"
        # documents are embedded on the worker, or by a search (on this thread)
        assert embed.document_threads() <= {WORKER, threading.current_thread().name}
        documents = Counter(embed.documents)
        assert [t for t, n in documents.items() if n > 1] == [], "a message was embedded twice"
        if agent_runs == 0:
            assert sorted(documents) == sorted(expected)
        assert set(expected) <= set(documents)
        assert len(found) == len(_documents(store, "ann")) == len(documents)

    @staticmethod
    def _agent_turns(memory: Memory, embed: CountingEmbedder) -> int:
        """A few runs of a pydantic-ai agent wrapped by ``memory`` (when pydantic-ai is
        installed): none calls the embedder on the run's thread. Returns how many ran."""
        try:
            from pydantic_ai import Agent
            from pydantic_ai.messages import ModelResponse, TextPart
            from pydantic_ai.models.function import AgentInfo, FunctionModel
        except ImportError:
            return 0
        replies = iter(range(1_000_000))

        def reply(messages: list[Any], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[TextPart(f"agent reply r{next(replies)}")])

        agent = memory.wrap(Agent(FunctionModel(reply)))
        me = threading.get_ident()
        runs = 4
        for i in range(runs):
            before = embed.calls_on(me)
            with memory.session(namespace=NS, user_id="ann", conversation_id="agent"):
                agent.run_sync(f"agent prompt p{i} about tea")
            assert embed.calls_on(me) == before, "an agent's run called the embedder"
        return runs

    def test_one_memory_shared_by_threads_embeds_each_message_once(self, store: Store) -> None:
        """Threads of one ``Memory`` search a conversation whose messages are not indexed yet
        (stored by another process, or before an upgrade), all at once, while others append
        to it: each message is embedded once (the worker and the searches of one ``Memory``
        never index a range twice)."""
        embed = CountingEmbedder(delay=0.02)
        stored = _memory(store, index_conversations=False)
        with stored.session(namespace=NS, user_id="ann", conversation_id="c"):
            for i in range(20):
                _turns(stored, (f"tea stored q{i}", f"oolong stored a{i}"))
        memory = _memory(store, embed=embed)
        writers, turns, searchers = 2, 6, 3
        stop = threading.Event()
        start = threading.Barrier(searchers)
        errors: list[BaseException] = []

        def write(w: int) -> None:
            try:
                with memory.session(namespace=NS, user_id="ann", conversation_id="c"):
                    for i in range(turns):
                        _turns(memory, (f"tea w{w}q{i}", f"oolong w{w}a{i}"))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def search() -> None:
            try:
                with memory.session(namespace=NS, user_id="ann", conversation_id="c"):
                    start.wait(30)
                    memory.conversation.search("tea oolong", limit=5, mode="hybrid")
                    while not stop.is_set():
                        memory.conversation.search("tea oolong", limit=5, mode="hybrid")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        searching = [threading.Thread(target=search) for _ in range(searchers)]
        for t in searching + threads:
            t.start()
        for t in threads:
            t.join(120)
        stop.set()
        for t in searching:
            t.join(120)
        assert not errors, errors
        total = 40 + writers * turns * 2
        with memory.session(namespace=NS, user_id="ann", conversation_id="c"):
            hits = memory.conversation.search("tea oolong", limit=500)
        assert len(hits) == len(set(_where(hits))) == total
        documents = Counter(embed.documents)
        assert [t for t, n in documents.items() if n > 1] == [], "a message was embedded twice"
        assert len(documents) == total

    def test_an_embedder_that_fails_leaves_keyword_search_and_embeds_later(
        self, store: Store
    ) -> None:
        if not supports_vectors(store):
            pytest.skip(f"{type(store).__name__} keeps no vectors")
        failing = _memory(store, embed=FailingEmbedder())
        with (
            pytest.warns(EmbeddingWarning),
            failing.session(namespace=NS, user_id="ann", conversation_id="c"),
        ):
            _turns(failing, ("oolong tea please", "noted"), ("and jazz", "sure"))
            failing.conversation_index.wait()
            hits = failing.conversation.search("oolong", mode="keyword")
            assert {("c", 1), ("c", 2)} == set(_where(hits))
            # hybrid, its embedder failing: keywords
            assert _where(failing.conversation.search("jazz"))[0] == ("c", 3)
        embed = CountingEmbedder()
        later = _memory(store, embed=embed)
        with later.session(namespace=NS, user_id="ann", conversation_id="c"):
            assert later.conversation.search("beverage", mode="semantic")[0].seq in (1, 2)
            later.conversation.search("music", mode="semantic")
        assert sorted(Counter(embed.documents).values()) == [1, 1, 1, 1]


# -- one ranking on every store, and no other scope changes it: a property ------------------------

_TEXT = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=8).map(" ".join)
_TURNS = st.lists(st.tuples(_TEXT, _TEXT, st.integers(0, 1)), min_size=1, max_size=4)
_CONVERSATIONS = st.lists(_TURNS, min_size=1, max_size=3)
_WINDOWS = st.sampled_from([(None, None), (1, None), (None, 2), (1, 3)])

CONVERSATION_EXAMPLES = 10
"""Random users the conversation-search property draws per store."""


def _write(
    memory: Memory,
    namespace: str,
    user: str | None,
    conversations: Any,
    now: list[float],
    start: float,
) -> None:
    """Write ``conversations`` (turns of a user's text, a reply and a step of the clock)."""
    for c, turns in enumerate(conversations):
        at = start
        with memory.session(namespace=namespace, user_id=user, conversation_id=f"c{c}"):
            for question, answer, step in turns:
                at += step
                now[0] = at
                memory.conversation.append([Message.user(question), Message.assistant(answer)])


def _same_hits(got: list[MessageHit], want: list[MessageHit]) -> None:
    assert _where(got) == _where(want)
    for g, w in zip(got, want, strict=True):
        assert math.isclose(g.score, w.score, rel_tol=1e-9, abs_tol=1e-9), (g, w)
        assert g.message == w.message and g.created_at == w.created_at
        assert [r.message for r in g.context] == [r.message for r in w.context]


class ConversationSearchProperties:
    """Over random users, conversations and queries: conversation search on every store
    answers as the in-memory reference holding only the user's messages (the same hits in
    the same order with the same scores, in every mode, with and without
    ``all_conversations``, ``since`` and ``until``), whatever other users, namespaces and
    user-less conversations hold with the same words; and a shorter search is a prefix of a
    longer one."""

    def test_conversation_search_ranks_as_the_reference_whatever_other_scopes_hold(
        self, store: Store
    ) -> None:
        @settings(
            max_examples=CONVERSATION_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(
            mine=_CONVERSATIONS,
            noise=_CONVERSATIONS,
            queries=st.lists(_TEXT, min_size=1, max_size=2),
            window=_WINDOWS,
        )
        def check(mine: Any, noise: Any, queries: list[str], window: tuple[Any, Any]) -> None:
            _searches_as_the_reference(store, mine, noise, queries, window)

        check()


def _searches_as_the_reference(
    store: Store, mine: Any, noise: Any, queries: list[str], window: tuple[Any, Any]
) -> None:
    from memory_adapters_inmemory import InMemoryStore

    model = "kit-concepts"
    user = f"u-{uuid.uuid4().hex[:10]}"
    namespace = "cs-prop"
    reference = InMemoryStore()
    memories = [
        _memory(s, embed=ConceptEmbedder(model), index_conversations=False)
        for s in (store, reference)
    ]
    start = float(int(time.time()))
    try:
        with _clock(start) as now:
            _write(memories[0], namespace, user, mine, now, start)
            _write(memories[1], namespace, user, mine, now, start)
            # the same words elsewhere: other users (a prefix of the id, an extension, one
            # with a separator), the user in another namespace, conversations with no user
            for other, ns in (
                (user + "2", namespace),
                (user[:-1], namespace),
                (user + ":c0", namespace),
                (user, namespace + "-other"),
                (None, namespace),
            ):
                _write(memories[0], ns, other, noise, now, start)
        modes: tuple[SearchMode, ...] = (
            ("keyword", "semantic", "hybrid") if supports_vectors(store) else ("keyword",)
        )
        since = None if window[0] is None else start + window[0]
        until = None if window[1] is None else start + window[1]
        for query in queries:
            for mode in modes:
                for everywhere in (False, True):
                    found: list[list[MessageHit]] = []
                    for memory in memories:
                        session = memory.session(
                            namespace=namespace, user_id=user, conversation_id="c0"
                        )
                        with session:
                            options: dict[str, Any] = {
                                "mode": mode,
                                "all_conversations": everywhere,
                                "since": since,
                                "until": until,
                            }
                            longest = memory.conversation.search(query, limit=30, **options)
                            if memory is memories[0]:
                                for k in (1, 3):
                                    short = memory.conversation.search(query, limit=k, **options)
                                    _same_hits(short, longest[:k])  # prefix-stable
                            found.append(longest)
                    _same_hits(found[0], found[1])
                    for hit in found[0]:
                        assert since is None or hit.created_at >= since
                        assert until is None or hit.created_at < until
                        assert everywhere or hit.conversation_id == "c0"
    finally:
        for memory in memories:
            memory.worker.close(60)
        reference.close()


# -- several processes ----------------------------------------------------------------------------

StoreFactory = Callable[[], Store]
MP_NS = "cs-mp"


def _record(path: str, embed: ConceptEmbedder) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(embed.documents, out)


def mp_writer(factory: StoreFactory, writer: int, turns: int, path: str) -> None:
    """A process appending ``turns`` turns to the shared conversation, indexing them on its
    worker; writes the texts it embedded to ``path``."""
    embed = ConceptEmbedder()
    memory = Memory(store=factory(), load_entrypoints=False, embed=embed)
    try:
        with memory.session(namespace=MP_NS, user_id="u", conversation_id="shared"):
            for i in range(turns):
                memory.conversation.append(
                    [Message.user(f"tea w{writer}q{i}"), Message.assistant(f"oolong w{writer}a{i}")]
                )
    finally:
        memory.close(None)
        _record(path, embed)


def mp_searcher(factory: StoreFactory, stop: Any, path: str, found: Any) -> None:
    """A process searching the shared conversation until ``stop`` is set; writes the texts it
    embedded to ``path`` and how many searches it made to ``found``."""
    embed = ConceptEmbedder()
    memory = Memory(store=factory(), load_entrypoints=False, embed=embed)
    searches = 0
    try:
        with memory.session(namespace=MP_NS, user_id="u", conversation_id="shared"):
            while not stop.is_set() or searches == 0:
                for hit in memory.conversation.search("tea oolong", limit=10):
                    assert hit.conversation_id == "shared"
                searches += 1
    finally:
        found.value = searches
        memory.close(None)
        _record(path, embed)


def _killed_child(
    factory: StoreFactory, conversation: str, hang: bool, turns: int
) -> None:  # pragma: no cover - runs in a forked child
    """In a forked child: store ``turns`` turns; with ``hang``, index them with an embedder
    that never answers (the lease taken, nothing embedded), else without indexing; then wait
    to be killed (or leave at once, without closing anything)."""
    from memory_adapters import conversation_search

    conversation_search.LEASE_SECONDS = 1.0  # a dead process holds the conversation back 1 s
    embed: object = HangingEmbedder() if hang else False
    memory = Memory(store=factory(), load_entrypoints=False, embed=embed, index_conversations=hang)
    with memory.session(namespace=MP_NS, user_id="u", conversation_id=conversation):
        for i in range(turns):
            memory.conversation.append(
                [
                    Message.user(f"tea question {conversation}q{i}"),
                    Message.assistant(f"oolong answer {conversation}a{i}"),
                ]
            )
    if hang:
        time.sleep(120)  # killed meanwhile
    os._exit(0)


class HangingEmbedder(ConceptEmbedder):
    """Never answers."""

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        threading.Event().wait()
        raise AssertionError("unreachable")  # pragma: no cover


def _fork(target: Callable[[], None]) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        try:
            signal.alarm(150)
            target()
        finally:
            os._exit(1)
    return pid


def kill_between_turn_and_embedding(factory: StoreFactory, turns: int = 4) -> None:
    """The body of :meth:`MultiProcessConformance.test_a_process_killed_between_a_turn_and_
    its_embedding_loses_nothing <memory_adapters.testing.MultiProcessConformance>`."""
    store = factory()
    try:
        # 1. gone before its worker ran: the turns are stored, nothing is indexed
        pid = _fork(lambda: _killed_child(factory, "exited", False, turns))
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # 2. killed while its worker was embedding: the lease is taken, nothing embedded
        pid = _fork(lambda: _killed_child(factory, "killed", True, turns))
        key = _key("u", "killed", MP_NS)
        deadline = time.monotonic() + 60
        lease: Any = None
        try:
            while time.monotonic() < deadline:
                state = store.get_fact(index_namespace(MP_NS), state_scope("user:u"), key)
                stored = store.last_seq(key) == 2 * turns  # killed after its last turn
                value = state.value if state is not None else None
                if stored and isinstance(value, dict) and "owner" in value:
                    lease = value
                    break
                time.sleep(0.02)
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        assert lease is not None, "the child never stored its turns and started indexing"
        assert lease["through"] == 0
        _wait_past(lease["until"])  # a dead process's lease runs out
    finally:
        store.close()
    expected = sorted(
        f"{word}{c}{kind}{i}"
        for c in ("exited", "killed")
        for i in range(turns)
        for word, kind in (("tea question ", "q"), ("oolong answer ", "a"))
    )
    embed = CountingEmbedder()
    for restart in range(2):
        memory = Memory(store=factory(), load_entrypoints=False, embed=embed)
        try:
            with memory.session(namespace=MP_NS, user_id="u", conversation_id="exited"):
                hits = memory.conversation.search("tea oolong", limit=100, all_conversations=True)
                texts = sorted(h.message.text for h in hits)
                assert texts == expected, (restart, sorted(set(expected) - set(texts)))
                semantic = memory.conversation.search(
                    "beverage", limit=100, mode="semantic", all_conversations=True
                )
                assert len(semantic) == len(expected)
        finally:
            memory.close()
    assert sorted(Counter(embed.documents).values()) == [1] * len(expected)


def embed_once_across_restarts(factory: StoreFactory, lives: int = 3, turns: int = 3) -> None:
    """The body of :meth:`MultiProcessConformance.test_each_message_is_embedded_once_across_
    restarts <memory_adapters.testing.MultiProcessConformance>`."""
    embed = CountingEmbedder()
    texts: list[str] = []
    for life in range(lives):
        memory = Memory(store=factory(), load_entrypoints=False, embed=embed)
        try:
            with memory.session(namespace=MP_NS, user_id="u", conversation_id="lives"):
                for i in range(turns):
                    question, answer = f"tea question l{life}q{i}", f"oolong answer l{life}a{i}"
                    memory.conversation.append([Message.user(question), Message.assistant(answer)])
                    texts += [question, answer]
                if life % 2:  # a search while the worker may be indexing the last turns
                    memory.conversation.search("tea oolong", mode="hybrid")
        finally:
            memory.close()  # drains the worker: what it left, the next life's search indexes
    memory = Memory(store=factory(), load_entrypoints=False, embed=embed)
    try:
        with memory.session(namespace=MP_NS, user_id="u", conversation_id="lives"):
            hits = memory.conversation.search("tea oolong", limit=100)
            assert sorted(h.message.text for h in hits) == sorted(texts)
    finally:
        memory.close()
    documents = Counter(embed.documents)
    assert [t for t, n in documents.items() if n > 1] == [], "a message was embedded twice"
    assert len(documents) == len(texts)
