"""Shared fixtures: every test gets a fresh, isolated Memory over a fresh store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_adapters import Memory


@pytest.fixture(params=["memory", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of each built-in store, pointing at fresh storage."""
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'memory.db'}"


@pytest.fixture
def memory(url: str) -> Iterator[Memory]:
    """A Memory over each built-in store."""
    m = Memory(url)
    yield m
    m.close()
