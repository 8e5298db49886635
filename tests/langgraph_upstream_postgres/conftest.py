"""LangGraph's own ``PostgresStore`` tests (``test_store.py`` of ``langgraph-checkpoint-postgres``,
vendored; see README.md) run against ``MemoryStore``, each test once per store — in-memory,
SQLite, PostgreSQL without and with pgvector.

The adapter is this file. The vendored ``store`` fixture and ``_create_vector_store`` (which
create a database on LangGraph's test server and open a ``PostgresStore`` on it) are replaced,
before pytest reads the module, by ones that build a ``MemoryStore`` with the same ``index=``
and ``ttl=`` over a fresh ``Memory`` of the test's backend; the tests listed in README.md are
deselected, each for the reason given there.
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
from langchain_core.embeddings import Embeddings

from memory_adapters import Memory
from memory_adapters.facts import supports_vectors
from memory_adapters.langchain import MemoryStore
from memory_adapters.store import Store

from . import test_async_store, test_store

suite: Any = test_store
"""The vendored module, untyped (mypy does not check it)."""

async_suite: Any = test_async_store

MODULES = (test_store, test_async_store)

BACKENDS = ("memory", "sqlite", "postgres", "postgres-pgvector")

DESELECTED: dict[str, str] = {
    # LangGraph's helpers, no store of ours takes part
    "test_escape_like_literal": "tests a PostgresStore helper (_escape_like_literal)",
    "test_namespace_match_pattern": "tests a PostgresStore helper (_namespace_match_pattern)",
    "test_nonnull_migrations": "tests PostgresStore's SQL migrations",
    # PostgresStore's own table, read and written with SQL
    "test_omit_expired_filters_read_paths": (
        "expires rows with SQL on PostgresStore's table, and sets ttl_config['omit_expired'] "
        "(MemoryStore never returns an expired item: there is no such option)"
    ),
    "test_omit_expired_disabled_preserves_expired_rows": (
        "omit_expired=False returns expired rows until the sweeper deletes them; MemoryStore "
        "never returns an expired item"
    ),
    "test_omit_expired_refresh_ttl_only_refreshes_live_rows": (
        "expires rows with SQL on PostgresStore's table (_expire_now, _stored_expires_at)"
    ),
    "test_namespace_labels_with_trailing_newline": (
        "MemoryStore refuses control characters in labels (InvalidNamespace, documented): a "
        "label is a fact scope, checked as the library's identifiers"
    ),
    "test_no_running_loop": (
        "expects AsyncPostgresStore's sync methods to raise InvalidStateError on the event "
        "loop; MemoryStore is one class with both, and its sync methods work anywhere"
    ),
    "test_abatch_uses_single_pool_checkout": (
        "counts AsyncPostgresStore's checkouts of its own connection pool (_ainternal)"
    ),
    "test_omit_expired_search_pagination": (
        "expires rows with SQL on PostgresStore's table (_expire_now)"
    ),
}
"""Every deselected test, with its reason (README.md lists them too)."""


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


class _Factory:
    make_memory: Callable[[], Memory] | None = None


def _ttl(ttl: Any) -> Any:
    """LangGraph's TTLConfig without ``sweep_interval_minutes``: ``MemoryStore`` has no
    sweeper (expired items are never returned; ``memory.store.prune()`` deletes them)."""
    if ttl is None:
        return None
    return {k: v for k, v in ttl.items() if k != "sweep_interval_minutes"}


class UpstreamStore(MemoryStore):
    """A ``MemoryStore`` with the few ``PostgresStore`` methods the vendored tests call on
    the stores they are given (the sweeper's start and stop: no sweeper here)."""

    def __init__(self, *, index: Any = None, ttl: Any = None) -> None:
        assert _Factory.make_memory is not None
        super().__init__(_Factory.make_memory(), index=index, ttl=_ttl(ttl))

    def start_ttl_sweeper(self) -> Any:
        """No sweeper: expired items are never returned. Returns nothing, awaitable (the
        async tests await it)."""
        return _Done()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> Any:
        return _Done()


class _Done:
    """Nothing, awaitable."""

    def __await__(self) -> Any:
        return iter(())


def _upstream_store() -> Iterator[UpstreamStore]:
    """The vendored ``store`` fixture: LangGraph's TTL config on the test's backend."""
    yield UpstreamStore(
        ttl={
            "default_ttl": suite.TTL_MINUTES,
            "refresh_on_read": True,
            "sweep_interval_minutes": suite.TTL_MINUTES / 2,
        }
    )


@contextmanager
def _create_vector_store(
    vector_type: str,
    distance_type: str,
    fake_embeddings: Embeddings,
    text_fields: list[str] | None = None,
    enable_ttl: bool = True,
) -> Iterator[UpstreamStore]:
    """The vendored ``_create_vector_store``: the same ``index=`` and ``ttl=``."""
    index = {
        "dims": fake_embeddings.dims,  # type: ignore[attr-defined]
        "embed": fake_embeddings,
        "ann_index_config": {"vector_type": vector_type},
        "distance_type": distance_type,
        "fields": text_fields,
    }
    yield UpstreamStore(
        index=index, ttl={"default_ttl": 2, "refresh_on_read": True} if enable_ttl else None
    )


@asynccontextmanager
async def _acreate_vector_store(
    vector_type: str,
    distance_type: str,
    fake_embeddings: Embeddings,
    text_fields: list[str] | None = None,
) -> AsyncIterator[UpstreamStore]:
    """The vendored async ``_create_vector_store``: the same ``index=``, no TTL."""
    with _create_vector_store(
        vector_type, distance_type, fake_embeddings, text_fields, enable_ttl=False
    ) as store:
        yield store


def _async_store() -> Iterator[UpstreamStore]:
    """The vendored async ``store`` fixture (an ``async def`` fixture: pytest-asyncio's)."""
    yield UpstreamStore(
        ttl={
            "default_ttl": async_suite.TTL_MINUTES,
            "refresh_on_read": True,
            "sweep_interval_minutes": async_suite.TTL_MINUTES / 2,
        }
    )


def _async_vector_store(request: pytest.FixtureRequest, fake_embeddings: Any) -> Iterator[Any]:
    """The vendored async ``vector_store`` fixture, made here."""
    vector_type, distance_type = request.param
    with _create_vector_store(vector_type, distance_type, fake_embeddings, enable_ttl=False) as s:
        yield s


_VECTOR_PARAMS = [(v, d) for v in ("vector", "halfvec") for d in ("l2", "inner_product", "cosine")]

# replaced before pytest reads the module's fixtures (it is imported already, here)
async_suite.store = pytest.fixture(name="store")(_async_store)
async_suite.vector_store = pytest.fixture(
    name="vector_store", params=_VECTOR_PARAMS, ids=lambda p: f"{p[0]}_{p[1]}"
)(_async_vector_store)
async_suite._create_vector_store = _acreate_vector_store
suite.store = pytest.fixture(name="store")(_upstream_store)
suite._create_vector_store = _create_vector_store


@pytest.fixture
def fake_embeddings() -> Any:
    """LangGraph's ``fake_embeddings`` fixture (its tests/conftest.py)."""
    return suite.CharacterEmbeddings(dims=500)


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
        if item.originalname in DESELECTED or (indexed and not _has_vectors(str(backend))):
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
def _memory_factory(
    request: pytest.FixtureRequest, upstream_backend: str, tmp_path: Path
) -> Iterator[None]:
    """Every ``UpstreamStore`` of the test is over a new ``Memory`` of its backend; each is
    closed (and its PostgreSQL schema dropped) after the test."""
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

            schema = "lgpg_" + uuid.uuid4().hex[:12]
            schemas.append(schema)
            store = PostgresStore(postgres_url, schema=schema, **options)  # type: ignore[arg-type]
            memory = Memory(store=store, embed=False)
        assert backend == "sqlite" or supports_vectors(memory.store) == _has_vectors(backend)
        made.append(memory)
        return memory

    _Factory.make_memory = make_memory
    yield
    _Factory.make_memory = None
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
