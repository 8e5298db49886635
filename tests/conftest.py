"""Shared fixtures: every test gets a fresh, isolated Memory over a fresh store."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

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
    """A Memory over each built-in store (keyword search: no embedder)."""
    m = Memory(url, embed=False)
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


REQUIRE_POSTGRES = "MEMORY_ADAPTERS_REQUIRE_POSTGRES"

SERVERS_NEEDED = (
    "the full suite needs PostgreSQL and PgBouncer installed (the tests start their own): "
    "apt-get install postgresql pgbouncer"
)
"""Said in every skip for want of a server, as in the README."""


def _unavailable(what: str, exc: Exception, require: str, needed: str = SERVERS_NEEDED) -> NoReturn:
    """Skip for want of ``what`` saying what to install, or fail where ``require`` is set."""
    message = f"no {what} could be started: {exc}; {needed}"
    if os.environ.get(require) == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server for the session: ``MEMORY_ADAPTERS_POSTGRES_URL`` if set,
    else one started with initdb + pg_ctl in a temporary directory. Where no server can be
    had the Postgres tests skip, unless ``MEMORY_ADAPTERS_REQUIRE_POSTGRES=1`` (set by CI),
    which makes that a failure."""
    given = os.environ.get("MEMORY_ADAPTERS_POSTGRES_URL")
    if given:
        yield given
        return
    from memory_adapters.testing.postgres_server import PostgresUnavailable, TemporaryPostgres

    server = TemporaryPostgres(
        {"fsync": "off", "synchronous_commit": "off", "max_connections": "200"}
    )
    try:
        server.start()
    except PostgresUnavailable as exc:
        server.cleanup()
        _unavailable("PostgreSQL server", exc, REQUIRE_POSTGRES)
    try:
        yield server.url
    finally:
        server.cleanup()


def _pgbouncer(postgres_url: str) -> Iterator[str]:
    from urllib.parse import urlsplit

    from memory_adapters.testing.postgres_server import PostgresUnavailable, TemporaryPgBouncer

    parts = urlsplit(postgres_url)
    bouncer = TemporaryPgBouncer(
        parts.hostname or "127.0.0.1",
        parts.port or 5432,
        user=parts.username or "postgres",
        password=parts.password,
    )
    try:
        bouncer.start()
    except PostgresUnavailable as exc:
        bouncer.cleanup()
        _unavailable("PgBouncer", exc, REQUIRE_POSTGRES)
    try:
        yield bouncer.url_for(parts.path.lstrip("/")) + "?pgbouncer=true"
    finally:
        bouncer.cleanup()


@pytest.fixture(scope="session")
def pgbouncer_url(postgres_url: str) -> Iterator[str]:
    """The database of :func:`postgres_url` through a PgBouncer in transaction pooling mode
    that the tests start (Debian's ``pgbouncer`` package), with ``?pgbouncer=true``. It
    skips where PgBouncer is not installed, unless ``MEMORY_ADAPTERS_REQUIRE_POSTGRES=1``
    (set by CI), which makes that a failure."""
    yield from _pgbouncer(postgres_url)


@pytest.fixture
def fresh_pgbouncer_url(postgres_url: str) -> Iterator[str]:
    """:func:`pgbouncer_url`, through a PgBouncer of this test's own. The conformance kit
    through the pooler uses it: run through one pooler, its tests exhaust the pooler's server
    connections after about 75 of them (async tests whose event loops end leave connections
    pinned; not understood yet)."""
    yield from _pgbouncer(postgres_url)


REQUIRE_PGVECTOR = "MEMORY_ADAPTERS_REQUIRE_PGVECTOR"


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A PostgreSQL server with the pgvector extension for the session:
    ``MEMORY_ADAPTERS_PGVECTOR_URL`` if set, else the PostgreSQL 16 of the ``pgserver`` wheel
    (a dev dependency) started in a temporary directory, the extension created in its
    database. Where none can be had the tests using it skip, unless
    ``MEMORY_ADAPTERS_REQUIRE_PGVECTOR=1`` (set by CI), which makes that a failure."""
    given = os.environ.get("MEMORY_ADAPTERS_PGVECTOR_URL")
    if given:
        yield given
        return
    from memory_adapters.testing.postgres_server import PostgresUnavailable, TemporaryPostgres

    server = TemporaryPostgres(
        {"fsync": "off", "synchronous_commit": "off", "max_connections": "200"},
        binaries="pgserver",
    )
    try:
        server.start()
        import psycopg

        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except (PostgresUnavailable, OSError) as exc:
        server.cleanup()
        _unavailable(
            "PostgreSQL server with pgvector",
            exc,
            REQUIRE_PGVECTOR,
            'it comes from the pgserver wheel of the dev extra: pip install -e ".[dev]"',
        )
    try:
        yield server.url
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def postgres_password_server() -> Iterator[Any]:
    """A second temporary PostgreSQL server, started on first use, on which every TCP
    connection must give a password (the superuser ``postgres``'s is its
    ``password``): for the failed-password errors, which a trusting server never
    gives. Like :func:`postgres_url`, it skips where no server can be started, unless
    ``MEMORY_ADAPTERS_REQUIRE_POSTGRES=1``."""
    from memory_adapters.testing.postgres_server import PostgresUnavailable, TemporaryPostgres

    server = TemporaryPostgres({"fsync": "off"}, database="app", password="s3cret-for-tests")
    try:
        server.start()
    except PostgresUnavailable as exc:
        server.cleanup()
        _unavailable("PostgreSQL server", exc, REQUIRE_POSTGRES)
    try:
        yield server
    finally:
        server.cleanup()


MIN_WINDOWS = "MEMORY_ADAPTERS_MIN_WINDOWS"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say how many windows the property suite checked, by store."""
    from memory_adapters.testing.windows import WINDOWS_CHECKED

    if WINDOWS_CHECKED:
        by_store = ", ".join(f"{k} {v}" for k, v in sorted(WINDOWS_CHECKED.items()))
        total = sum(WINDOWS_CHECKED.values())
        terminalreporter.write_line(f"windows checked: {total} ({by_store}), 0 invalid")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under ``MEMORY_ADAPTERS_MIN_WINDOWS=n`` (set by CI) fewer than n windows checked by the
    property suite, across the stores, is a failure."""
    from memory_adapters.testing.windows import WINDOWS_CHECKED

    wanted = os.environ.get(MIN_WINDOWS)
    total = sum(WINDOWS_CHECKED.values())
    if wanted and total < int(wanted) and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nonly {total} windows were checked; {MIN_WINDOWS} asks for {wanted}")


@pytest.fixture(params=["sqlite", "postgres"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """A store several processes can share, fresh for the test: its URL and store options
    (a temporary SQLite file, or a new schema of the session's PostgreSQL server)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}", {}
        return
    url: str = request.getfixturevalue("postgres_url")
    options = {"schema": "t_" + uuid.uuid4().hex[:12]}
    try:
        yield url, options
    finally:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{options["schema"]}" CASCADE')
