"""The in-memory store passes the conformance kit."""

from __future__ import annotations

import pytest
from memory_adapters_inmemory import InMemoryStore

from memory_adapters import Memory
from memory_adapters.testing import StoreConformance


class TestInMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self) -> InMemoryStore:
        return InMemoryStore()


def test_named_stores_are_shared_within_the_process() -> None:
    a = Memory("memory://shared-test")
    b = Memory("memory://shared-test")
    c = Memory("memory://")
    assert a.store is b.store and a.store is not c.store
