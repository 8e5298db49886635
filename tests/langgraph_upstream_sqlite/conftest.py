"""LangGraph's own ``SqliteStore`` tests (``test_store.py`` of ``langgraph-checkpoint-sqlite``,
vendored as it is; see README.md) run against ``MemoryStore``, each test once per store —
in-memory, SQLite, PostgreSQL without and with pgvector.

The adapter is this file: ``SqliteStore`` in the test module is replaced by
:class:`UpstreamSqliteStore`, whose ``from_conn_string`` (every store the tests open goes
through it) gives a ``MemoryStore`` with the same ``index=`` and ``ttl=`` over a fresh
``Memory`` of the test's backend; the tests listed in README.md are deselected, each for the
reason given there.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from memory_adapters import Memory
from memory_adapters.facts import supports_vectors
from memory_adapters.langchain import MemoryStore
from memory_adapters.store import Store

from . import test_async_store, test_store

suite: Any = test_async_store
"""The vendored async module, untyped (mypy does not check it)."""

MODULES = (test_store, test_async_store)

BACKENDS = ("memory", "sqlite", "postgres", "postgres-pgvector")

DESELECTED: dict[str, str] = {
    "test_escape_glob_literal": "tests a SqliteStore helper (_escape_glob_literal)",
    "test_namespace_match_pattern": "tests a SqliteStore helper (_namespace_match_pattern)",
    "test_list_namespaces_prefix_uses_indexable_condition": (
        "tests the SQL SqliteStore builds (BaseSqliteStore's WHERE clause)"
    ),
    "test_nonnull_migrations": "tests SqliteStore's SQL migrations",
    "test_store.py::test_vector_store_initialization": (
        "reads SqliteStore's own tables (store.conn, sqlite_master) after the checks of the "
        "config, which pass"
    ),
    "test_sql_injection_vulnerability": (
        "expects SqliteStore's whitelist of filter keys (ValueError 'Invalid filter key'): "
        "MemoryStore builds no SQL from filter keys, any key is a key, and the test's "
        "injection finds nothing"
    ),
    "test_filter_keys_with_hyphens_and_digits": (
        "reads a dotted filter key ('user.access-level') as a nested path, as SqliteStore "
        "does; MemoryStore matches top-level keys, as LangGraph's InMemoryStore does (the "
        "parity kit compares it with InMemoryStore); the hyphen and digit keys themselves work"
    ),
    "test_no_running_loop": (
        "expects AsyncSqliteStore's sync methods to raise InvalidStateError on the event "
        "loop; MemoryStore is one class with both, and its sync methods work anywhere"
    ),
    "test_namespace_labels_with_trailing_newline": (
        "MemoryStore refuses control characters in labels (InvalidNamespace, documented): a "
        "label is a fact scope, checked as the library's identifiers"
    ),
}
"""Every deselected test, with its reason (README.md lists them too): by name in both
modules, or ``module::name`` in one."""


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
    return _store_class(backend).search_fact_vectors is not Store.search_fact_vectors


class UpstreamSqliteStore(MemoryStore):
    """What the vendored tests get for ``SqliteStore.from_conn_string(...)``."""

    make_memory: Callable[[], Memory]

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str, *, index: Any = None, ttl: Any = None
    ) -> Iterator[UpstreamSqliteStore]:
        """A ``MemoryStore`` over a new ``Memory`` (the connection string is LangGraph's
        SQLite file or ``":memory:"``: not used)."""
        yield cls(cls.make_memory(), index=index, ttl=ttl)

    @classmethod
    @asynccontextmanager
    async def afrom_conn_string(
        cls, conn_string: str, *, index: Any = None, ttl: Any = None
    ) -> AsyncIterator[UpstreamSqliteStore]:
        """``AsyncSqliteStore.from_conn_string``: the same, as an async context manager."""
        yield cls(cls.make_memory(), index=index, ttl=ttl)

    def setup(self) -> Any:
        """Nothing to set up: the ``Memory``'s store makes its tables when it opens (awaitable
        too, for ``await AsyncSqliteStore.setup()``)."""
        return _Done()


class _Done:
    """What ``setup()`` returns: nothing, awaitable."""

    def __await__(self) -> Any:
        return iter(())


def _async_store() -> Iterator[MemoryStore]:
    """The vendored async ``store`` fixture (an ``async def`` fixture, which needs
    pytest-asyncio): the same store, made here."""
    cls = suite.AsyncSqliteStore
    yield cls(cls.make_memory())


# replaced before pytest reads the module's fixtures (it is imported already, here)
suite.store = pytest.fixture(name="store", params=["memory", "file"])(_async_store)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module in MODULES:
        metafunc.parametrize("upstream_backend", BACKENDS, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (never skip) what README.md lists, and on a store without vector search the
    tests that build an index."""
    kept, dropped = [], []
    for item in items:
        if not isinstance(item, pytest.Function) or item.module not in MODULES:
            kept.append(item)
            continue
        backend = item.callspec.params.get("upstream_backend")
        indexed = "fake_embeddings" in item.fixturenames
        named = f"{Path(str(item.fspath)).name}::{item.originalname}"
        listed = item.originalname in DESELECTED or named in DESELECTED
        if listed or (indexed and not _has_vectors(str(backend))):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def upstream_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _memory_store(
    request: pytest.FixtureRequest,
    upstream_backend: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[None]:
    """``SqliteStore`` in the vendored module is :class:`UpstreamSqliteStore` over the test's
    backend; every ``Memory`` made is closed (its PostgreSQL schema dropped) after the test."""
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

            schema = "lgsq_" + uuid.uuid4().hex[:12]
            schemas.append(schema)
            store = PostgresStore(postgres_url, schema=schema, **options)  # type: ignore[arg-type]
            memory = Memory(store=store, embed=False)
        assert backend == "sqlite" or supports_vectors(memory.store) == _has_vectors(backend)
        made.append(memory)
        return memory

    store_cls = type(
        "SqliteStore", (UpstreamSqliteStore,), {"make_memory": staticmethod(make_memory)}
    )
    monkeypatch.setattr(test_store, "SqliteStore", store_cls)
    async_cls = type(
        "AsyncSqliteStore",
        (UpstreamSqliteStore,),
        {
            "make_memory": staticmethod(make_memory),
            "from_conn_string": UpstreamSqliteStore.__dict__["afrom_conn_string"],
        },
    )
    monkeypatch.setattr(test_async_store, "AsyncSqliteStore", async_cls)
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
    if pyfuncitem.module not in MODULES or not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**args))
    return True
