"""Shared fixtures: every test gets a fresh, isolated Memory over a fresh store."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Under ``MEMORY_ADAPTERS_FAIL_ON_SKIP=1`` (set by CI) a skipped test is a failure:
    nothing that should run may quietly not run."""
    report = yield
    strict = os.environ.get("MEMORY_ADAPTERS_FAIL_ON_SKIP") == "1"
    if strict and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, which CI does not allow: {report.longrepr}"
    return report
