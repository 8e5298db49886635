"""LangGraph's own BaseStore tests (``test_store.py``, vendored; see README.md) run against
``MemoryStore``: every ``InMemoryStore(...)`` they build is a ``MemoryStore`` over a fresh
``Memory`` of one built-in store — in-memory, SQLite, PostgreSQL — each test once per store.

The adapter is this file: ``InMemoryStore`` in the test module is replaced by
:class:`UpstreamStore` (a ``MemoryStore`` subclass taking ``InMemoryStore``'s arguments), async
tests are run with ``asyncio.run``, and the tests listed in README.md are deselected, each for
the reason given there.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_adapters import Memory
from memory_adapters.facts import supports_vectors
from memory_adapters.langchain import MemoryStore
from memory_adapters.store import Store

from . import test_store

BACKENDS = ("memory", "sqlite", "postgres", "postgres-pgvector")
"""``postgres`` is a server without pgvector (exact search in Python); ``postgres-pgvector``
the ``pgserver`` wheel's PostgreSQL 16 with pgvector (exact search in SQL)."""

HELPER_TESTS = {
    "test_dedupe_ops_maps_repeated_reads_and_puts_to_one_op",
    "test_get_text_at_path",
    "test_get_text_at_path_with_non_dict_mapping",
    "test_async_batch_store",
    "test_async_batch_store_handles_cancellation",
    "test_validate_op_namespace_rejects_invalid_labels",
    "test_validate_op_namespace_allows_empty_prefix_and_wildcards",
}
"""Tests of LangGraph's own helpers (``get_text_at_path``, ``_dedupe_ops``,
``validate_op_namespace``, ``AsyncBatchedBaseStore`` over a mock store): no store of ours
takes part, so they are deselected rather than counted."""

DESELECTED: dict[str, str] = dict.fromkeys(
    HELPER_TESTS, "tests a LangGraph helper, not a store (README.md)"
)


def _store_class(backend: str) -> type[Store]:
    if backend == "memory":
        from memory_adapters_inmemory.store import InMemoryStore

        return InMemoryStore
    if backend == "sqlite":
        from memory_adapters_sqlite.store import SQLiteStore

        return SQLiteStore
    from memory_adapters_postgres.store import PostgresStore

    return PostgresStore


def _has_vectors(backend: str) -> bool:
    cls = _store_class(backend)
    return cls.search_fact_vectors is not Store.search_fact_vectors


class UpstreamStore(MemoryStore):
    """What the vendored tests get for ``InMemoryStore(index=...)``: a ``MemoryStore`` over a
    new ``Memory`` made by :attr:`make_memory` (set per test by the ``backend`` fixture)."""

    make_memory: Callable[[], Memory]

    def __init__(self, *, index: Any = None) -> None:
        super().__init__(type(self).make_memory(), index=index)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each vendored test runs once per backend."""
    if metafunc.module is test_store:
        metafunc.parametrize("upstream_backend", BACKENDS, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (never skip: CI fails on skips) what README.md lists, and on a store without
    vector search (``Store.search_fact_vectors``) the tests that configure an index."""
    kept, dropped = [], []
    for item in items:
        if not isinstance(item, pytest.Function) or item.module is not test_store:
            kept.append(item)
            continue
        name = item.originalname
        backend = (
            item.callspec.params.get("upstream_backend") if hasattr(item, "callspec") else None
        )
        if name in DESELECTED or (
            backend is not None
            and "fake_embeddings" in item.fixturenames
            and not _has_vectors(str(backend))
        ):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def upstream_backend(request: pytest.FixtureRequest) -> str:
    """The backend of a vendored test (parametrized by :func:`pytest_generate_tests`)."""
    return str(request.param)


@pytest.fixture(autouse=True)
def _memory_store(
    request: pytest.FixtureRequest,
    upstream_backend: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[None]:
    """``InMemoryStore`` in the vendored module is :class:`UpstreamStore` over the test's
    backend; every ``Memory`` made is closed after the test."""
    backend = upstream_backend
    made: list[Memory] = []
    schemas: list[str] = []
    postgres_url = ""
    if backend.startswith("postgres"):
        fixture = "pgvector_url" if backend == "postgres-pgvector" else "postgres_url"
        postgres_url = request.getfixturevalue(fixture)
    options = {"vector_search": "pgvector"} if backend == "postgres-pgvector" else {}

    def make_memory() -> Memory:
        if backend == "memory":
            memory = Memory("memory://", embed=False)
        elif backend == "sqlite":
            memory = Memory(f"sqlite:///{tmp_path / f'{len(made)}.db'}", embed=False)
        else:
            from memory_adapters_postgres.store import PostgresStore

            schema = "lg_" + uuid.uuid4().hex[:12]
            schemas.append(schema)
            store = PostgresStore(postgres_url, schema=schema, **options)  # type: ignore[arg-type]
            memory = Memory(store=store, embed=False)
        assert backend == "sqlite" or supports_vectors(memory.store) == _has_vectors(backend)
        made.append(memory)
        return memory

    store_cls = type("InMemoryStore", (UpstreamStore,), {"make_memory": staticmethod(make_memory)})
    monkeypatch.setattr(test_store, "InMemoryStore", store_cls)
    yield
    for memory in made:
        memory.close()
    if schemas:
        import psycopg

        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run the vendored ``async def`` tests (LangGraph runs them with pytest-asyncio's auto
    mode) with ``asyncio.run``."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**args))
    return True
