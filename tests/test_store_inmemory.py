"""The in-memory store passes the conformance kit."""

from __future__ import annotations

import pytest
from memory_adapters_inmemory import InMemoryStore

from memory_adapters import Memory, StoreUnavailable
from memory_adapters.testing import StoreConformance


class TestInMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self) -> InMemoryStore:
        return InMemoryStore()


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
