"""Each PostgreSQL mistake a new user makes is a typed error that says what is wrong and what
fixes it, against real servers the tests start: the session's (trusting every connection) and,
for passwords, a second one that asks for them (``postgres_password_server``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from memory_adapters_postgres import PostgresStore
from memory_adapters_postgres.diagnose import connect_error, safe_url
from memory_adapters_postgres.schema import SCHEMA_VERSION
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from memory_adapters import Memory, Message, StoreNotReady, StoreUnavailable
from memory_adapters.testing.postgres_server import TemporaryPostgres

COMMAND = [sys.executable, "-m", "memory_adapters"]


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _where(url: str) -> str:
    info = conninfo_to_dict(url)
    return f"{info['host']}:{info['port']}"


def _with(url: str, *, user: str | None = None, database: str | None = None) -> str:
    """``url`` (``postgresql://user@host:port/db``) with another user or database."""
    info = conninfo_to_dict(url)
    return (
        f"postgresql://{user or info['user']}@{info['host']}:{info['port']}/"
        f"{database or info['dbname']}"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _superuser(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    name = _name("t")
    yield name
    with _superuser(postgres_url) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def role(postgres_url: str) -> Iterator[str]:
    """A role that may log in and do nothing else (no CREATE on the database)."""
    name = _name("ma_role")
    with _superuser(postgres_url) as conn:
        conn.execute(f'CREATE ROLE "{name}" LOGIN')
    yield name
    with _superuser(postgres_url) as conn:
        conn.execute(f'DROP OWNED BY "{name}"')
        conn.execute(f'DROP ROLE "{name}"')


def _grants(schema: str, role: str) -> str:
    return (
        f"GRANT USAGE ON SCHEMA {schema} TO {role}; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL "
        f"TABLES IN SCHEMA {schema} TO {role}"
    )


# -- connecting ----------------------------------------------------------------------------------


def test_a_database_that_does_not_exist(postgres_url: str) -> None:
    db = _name("nodb")
    with pytest.raises(StoreUnavailable) as caught:
        Memory(_with(postgres_url, database=db))
    assert not isinstance(caught.value, StoreNotReady)
    assert str(caught.value) == (
        f'database "{db}" does not exist on the PostgreSQL server at {_where(postgres_url)}: '
        f"create it (createdb {db}, or CREATE DATABASE {db}), or fix the database name in the URL"
    )


def test_a_role_that_does_not_exist(postgres_url: str) -> None:
    ghost = _name("ghost")
    with pytest.raises(StoreUnavailable) as caught:
        Memory(_with(postgres_url, user=ghost))
    assert str(caught.value) == (
        f'role "{ghost}" does not exist on the PostgreSQL server at {_where(postgres_url)}: '
        f"create it (createuser {ghost}, or CREATE ROLE {ghost} LOGIN), or fix the user name "
        "in the URL"
    )


def test_no_server_at_host_and_port() -> None:
    port = _free_port()
    with pytest.raises(StoreUnavailable) as caught:
        Memory(f"postgresql://app@127.0.0.1:{port}/app")
    assert str(caught.value) == (
        f"no PostgreSQL server at 127.0.0.1:{port} (connection refused): is PostgreSQL "
        "running, and listening on that host and port? Start it, or fix the host and port in "
        "the URL"
    )


def test_no_server_at_a_unix_socket(tmp_path: Any) -> None:
    with pytest.raises(StoreUnavailable) as caught:
        Memory(f"postgresql:///app?host={tmp_path}")
    assert str(caught.value).startswith(
        f"no PostgreSQL server at the socket {tmp_path}/.s.PGSQL.5432: is PostgreSQL running "
        "on this machine?"
    )


def test_a_wrong_password_never_shows_a_password(
    postgres_password_server: TemporaryPostgres,
) -> None:
    password = postgres_password_server.password
    assert password
    wrong = "not-the-" + password
    url = f"postgresql://postgres:{wrong}@127.0.0.1:{postgres_password_server.port}/app"
    with pytest.raises(StoreUnavailable) as caught:
        Memory(url)
    message = str(caught.value)
    assert message == (
        'password authentication failed for user "postgres" on the PostgreSQL server at '
        f"127.0.0.1:{postgres_password_server.port}: fix the user or the password in the URL "
        "(postgresql://postgres:PASSWORD@host/db), or set PGPASSWORD or ~/.pgpass"
    )
    shown = "".join(traceback.format_exception(caught.value))  # the cause's message too
    assert wrong not in shown and password not in shown
    assert wrong not in repr(caught.value)


def test_no_password_given(
    postgres_password_server: TemporaryPostgres, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    with pytest.raises(StoreUnavailable) as caught:
        Memory(f"postgresql://postgres@127.0.0.1:{postgres_password_server.port}/app")
    assert str(caught.value) == (
        f"the PostgreSQL server at 127.0.0.1:{postgres_password_server.port} asks a password "
        'for user "postgres" and none was given: put it in the URL '
        "(postgresql://postgres:PASSWORD@host/db), or set PGPASSWORD or ~/.pgpass"
    )


def test_the_right_password_works(postgres_password_server: TemporaryPostgres) -> None:
    with Memory(postgres_password_server.url) as memory, memory.session(user_id="u"):
        memory.facts.put("k", "v")
        assert memory.facts.get("k") is not None


@pytest.mark.parametrize(
    ("driver_says", "we_say"),
    [
        (
            "failed to resolve host 'db.example': [Errno -2] Name or service not known",
            'unknown host "db.example": fix the host name in the URL',
        ),
        (
            'could not translate host name "db.example" to address: Name or service not known',
            'unknown host "db.example": fix the host name in the URL',
        ),
        (
            "connection timeout expired",
            "no answer from db.example:5432 within connect_timeout=5 s: is the host reachable",
        ),
        (
            'connection to server at "10.0.0.1", port 5432 failed: FATAL:  no pg_hba.conf entry '
            'for host "10.0.0.2", user "app", database "app", no encryption',
            "the PostgreSQL server at db.example:5432 accepts no connection from this machine "
            'for user "app" to database "app" (no pg_hba.conf entry)',
        ),
        (
            "FATAL:  sorry, too many clients already",
            "the PostgreSQL server at db.example:5432 has no free connection (too many "
            "clients): lower max_size in store_options",
        ),
        (
            "FATAL:  the database system is starting up",
            "cannot connect to PostgreSQL at postgresql://app@db.example/app: FATAL:  the "
            "database system is starting up",
        ),
    ],
)
def test_what_the_driver_says_is_explained(driver_says: str, we_say: str) -> None:
    """The failures no local test server gives, from the driver's message alone."""
    error = connect_error(
        psycopg.OperationalError(driver_says), "postgresql://app:pw@db.example/app", 5
    )
    assert isinstance(error, StoreUnavailable)
    assert str(error).startswith(we_say)
    assert "pw" not in str(error).replace("pwd", "")


@pytest.mark.parametrize(
    ("url", "safe"),
    [
        ("postgresql://app:secret@db/app", "postgresql://app@db/app"),
        (
            "postgresql://app:p%40ss@db:5432/app?sslmode=require",
            "postgresql://app@db:5432/app?sslmode=require",
        ),
        (
            "postgresql://app@db/app?password=secret&sslmode=require",
            "postgresql://app@db/app?sslmode=require",
        ),
        ("postgresql://db/app", "postgresql://db/app"),
    ],
)
def test_urls_in_messages_have_no_password(url: str, safe: str) -> None:
    assert safe_url(url) == safe


# -- the schema: missing, out of date, not the role's to use ------------------------------------


def test_migrate_false_on_an_empty_schema(postgres_url: str, schema: str) -> None:
    with pytest.raises(StoreNotReady) as caught:
        Memory(postgres_url, store_options={"schema": schema, "migrate": False})
    database = conninfo_to_dict(postgres_url)["dbname"]
    assert str(caught.value) == (
        f'the schema {schema} in database "{database}" has no memory-adapters tables and '
        f"migrate=False: create them once with memory-adapters migrate {postgres_url} (or "
        'Memory(url, store_options={"migrate": True})), or name the schema that has them '
        '(store_options={"schema": ...})'
    )
    assert isinstance(caught.value, StoreUnavailable)


def test_migrate_false_on_an_old_schema(postgres_url: str, schema: str) -> None:
    PostgresStore(postgres_url, schema=schema).close()
    with _superuser(postgres_url) as conn:
        conn.execute(f'DELETE FROM "{schema}".schema_version WHERE version = %s', (SCHEMA_VERSION,))
    with pytest.raises(StoreNotReady, match=rf"is at version {SCHEMA_VERSION - 1}, this "):
        Memory(postgres_url, store_options={"schema": schema, "migrate": False})


def test_the_migrate_command_then_migrate_false(postgres_url: str, schema: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memory_adapters",
            "migrate",
            postgres_url,
            "-o",
            f"schema={schema}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"PostgresStore: the tables are ready (schema version {SCHEMA_VERSION})\n"
    options = {"schema": schema, "migrate": False}
    with Memory(postgres_url, store_options=options) as memory, memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("hi")])


def test_a_role_that_may_not_create_the_schema(postgres_url: str, schema: str, role: str) -> None:
    database = conninfo_to_dict(postgres_url)["dbname"]
    with pytest.raises(StoreNotReady) as caught:
        Memory(_with(postgres_url, user=role), store_options={"schema": schema})
    assert str(caught.value) == (
        f'permission denied for database {database} to role "{role}": the first open creates '
        f"the schema {schema}, which needs CREATE on the database. Grant it (GRANT CREATE ON "
        f"DATABASE {database} TO {role}), or create the tables once as a role that may "
        "(memory-adapters migrate, with that role's URL) and grant this one their use "
        f"({_grants(schema, role)})"
    )


def test_a_role_without_privileges_on_the_tables(postgres_url: str, schema: str, role: str) -> None:
    PostgresStore(postgres_url, schema=schema).close()  # created by the owner
    url = _with(postgres_url, user=role)
    with pytest.raises(StoreNotReady) as caught:
        Memory(url, store_options={"schema": schema})
    assert str(caught.value) == (
        f'permission denied for schema {schema} to role "{role}": grant it '
        f"({_grants(schema, role)})"
    )
    with _superuser(postgres_url) as conn:
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        conn.execute(f'GRANT SELECT ON "{schema}".schema_version TO "{role}"')
    for migrate in (True, False):
        with pytest.raises(StoreNotReady) as caught:
            Memory(url, store_options={"schema": schema, "migrate": migrate})
        assert str(caught.value) == (
            f'role "{role}" may not read and write the tables {schema}.batches, '
            f"{schema}.conversations, {schema}.fact_history, {schema}.fact_terms, "
            f"{schema}.fact_vectors, "
            f"{schema}.facts, {schema}.messages, {schema}.summaries: grant it "
            f"({_grants(schema, role)})"
        )
    with _superuser(postgres_url) as conn:
        conn.execute(_grants(f'"{schema}"', f'"{role}"'))
    # granted: the role opens the store (the schema is current, so no DDL is tried) and uses it
    memory = Memory(url, store_options={"schema": schema})
    with memory, memory.session(user_id="u", conversation_id="c"):
        memory.conversation.append([Message.user("hi")])
        memory.facts.put("k", "v")
        ns = memory.facts.namespace
        (scope,) = memory.store.list_fact_scopes(ns, "")
        assert [h.key for h in memory.store.match_terms(ns, scope, ["v"]).hits] == ["k"]


def test_privileges_revoked_while_open(postgres_url: str, schema: str, role: str) -> None:
    PostgresStore(postgres_url, schema=schema).close()
    with _superuser(postgres_url) as conn:
        conn.execute(_grants(f'"{schema}"', f'"{role}"'))
    with Memory(_with(postgres_url, user=role), store_options={"schema": schema}) as memory:
        with _superuser(postgres_url) as conn:
            conn.execute(f'REVOKE ALL ON ALL TABLES IN SCHEMA "{schema}" FROM "{role}"')
        with memory.session(user_id="u", conversation_id="c"):
            with pytest.raises(StoreNotReady, match=r"permission denied for table facts to role"):
                memory.facts.put("k", "v")
            with pytest.raises(StoreNotReady, match=r"permission denied for table"):
                memory.conversation.window()


def test_tables_dropped_while_open(postgres_url: str, schema: str) -> None:
    with Memory(postgres_url, store_options={"schema": schema}) as memory:
        with _superuser(postgres_url) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        with memory.session(user_id="u", conversation_id="c"):
            with pytest.raises(StoreNotReady, match=r"lacks memory-adapters tables \(relation"):
                memory.facts.get("k")
            with pytest.raises(StoreNotReady, match=r"Create them with memory-adapters migrate"):
                memory.conversation.append([Message.user("hi")])


def test_an_applications_pool_with_migrate_false(postgres_url: str, schema: str) -> None:
    with ConnectionPool(postgres_url, min_size=1, kwargs={"autocommit": True}) as pool:
        with pytest.raises(StoreNotReady, match=r"has no memory-adapters tables"):
            PostgresStore.from_pool(pool, schema=schema, migrate=False)
        PostgresStore.from_pool(pool, schema=schema).close()
        PostgresStore.from_pool(pool, schema=schema, migrate=False).close()
