"""The in-memory store passes the conformance kit."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest
from memory_adapters_inmemory import InMemoryStore
from stores import in_forked_child

from memory_adapters import Memory, Message, StoreUnavailable
from memory_adapters.testing import StoreConformance


def dump(store: InMemoryStore) -> dict[str, list[str]]:
    """Every record the store holds, by kind (the conformance kit's ``store_dump``)."""
    conversations, messages, summaries, facts, vectors = [], [], [], [], []
    for key, conv in store._conversations.items():
        conversations.append(repr((key, conv.total_tokens, conv.batches, conv.created_at)))
        messages += [repr((key, row)) for row in conv.rows]
        summaries += [repr((key, s)) for s in conv.summaries]
    for (ns, scope), rows in store._facts.items():
        for key, row in rows.items():
            facts.append(repr((ns, scope, key, row.data, row.version, row.expires_at)))
            vectors += [repr((ns, scope, key, v)) for v in row.vectors]
    history = [repr((k, c)) for k, changes in store._history.items() for c in changes]
    tables = {
        "conversations": conversations,
        "messages": messages,
        "summaries": summaries,
        "facts": facts,
        "vectors": vectors,
        "history": history,
    }
    return {name: sorted(rows) for name, rows in tables.items()}


class TestInMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self) -> InMemoryStore:
        return InMemoryStore()

    @pytest.fixture
    def store_dump(self, store: InMemoryStore) -> Callable[[], dict[str, list[str]]]:
        return lambda: dump(store)


def test_named_stores_are_shared_within_the_process() -> None:
    a = Memory("memory://shared-test")
    b = Memory("memory://shared-test")
    c = Memory("memory://")
    with a.session(user_id="u"), b.session(user_id="u"), c.session(user_id="u"):
        a.facts.put("k", "from a")
        got = b.facts.get("k")
        assert got is not None and got.value == "from a"
        assert c.facts.get("k") is None


def test_closing_one_memory_of_a_named_store_leaves_the_others_open() -> None:
    a = Memory("memory://closed-test")
    b = Memory("memory://closed-test")
    with a.session(user_id="u"):
        a.facts.put("k", "v")
    a.close()
    with a.session(user_id="u"), pytest.raises(StoreUnavailable, match="is closed"):
        a.facts.get("k")
    with b.session(user_id="u"):
        assert b.facts.get("k") is not None
    with Memory("memory://closed-test") as again, again.session(user_id="u"):
        assert again.facts.get("k") is not None  # the data lives as long as the process


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_child_forked_while_a_thread_held_the_lock_does_not_wait_for_it() -> None:
    """A child forked while another thread of the parent was inside a store call (holding
    the store's lock, which no thread of the child will ever release) works on its own copy
    of the data; stores sharing data (one ``memory://name``) still share it in the child."""
    memory = Memory("memory://forked")
    other = Memory("memory://forked")
    with memory.session(user_id="u", conversation_id="c"):
        memory.conversation.append([Message.user("before the fork")])
    store = memory.store
    assert isinstance(store, InMemoryStore)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store._lock:
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(30)

    def in_the_child() -> None:
        with memory.session(user_id="u", conversation_id="c"):
            memory.conversation.append([Message.user("child")])
        with other.session(user_id="u", conversation_id="c"):
            texts = [r.message.text for r in other.conversation.read()]
        assert texts == ["before the fork", "child"]

    try:
        assert in_forked_child(in_the_child, timeout=20) == 0
    finally:
        release.set()
        holder.join()
    with other.session(user_id="u", conversation_id="c"):
        assert [r.message.text for r in other.conversation.read()] == ["before the fork"]
    memory.close()
    other.close()
