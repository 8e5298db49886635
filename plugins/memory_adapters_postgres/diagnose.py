"""What went wrong reaching or using PostgreSQL, said as what is wrong and what fixes it.

libpq reports a failed connection as text (no SQLSTATE) and psycopg-pool only as "pool
initialization incomplete"; :func:`connect_error` reads the driver's message and the failed
connection's parameters and turns them into a
:class:`~memory_adapters.errors.StoreUnavailable` that names the database, role, host and
port involved and the fix. :func:`schema_error` does the same for a reachable server whose
schema is missing, out of date or not usable by the role
(:class:`~memory_adapters.errors.StoreNotReady`). No message ever holds a password: the URL
is shown through :func:`safe_url`, and the driver's parameters are read field by field.

The patterns are libpq's English messages; a server or client speaking another language
still gets a ``StoreUnavailable``, with the driver's own message.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from memory_adapters.errors import StoreNotReady, StoreUnavailable

from .schema import IDENTIFIER, SCHEMA_VERSION

PASSWORD_HINT = "or set PGPASSWORD or ~/.pgpass"

INSUFFICIENT_PRIVILEGE = "42501"
UNDEFINED_TABLE = "42P01"
UNDEFINED_FUNCTION = "42883"
INVALID_SCHEMA_NAME = "3F000"


def safe_url(url: str) -> str:
    """``url`` without its password (in the user part or a ``password=`` parameter)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "the URL given"
    netloc = parts.netloc
    if "@" in netloc:
        creds, host = netloc.rsplit("@", 1)
        netloc = creds.split(":", 1)[0] + "@" + host
    query = "&".join(
        p for p in parts.query.split("&") if p and not p.lower().startswith("password=")
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def ident(name: str) -> str:
    """``name`` as SQL writes it: bare when it is a plain identifier, else double-quoted."""
    return name if IDENTIFIER.match(name) else '"' + name.replace('"', '""') + '"'


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value or None


def _target(exc: Exception, url: str) -> dict[str, str]:
    """The host, port, database and user the failed connection used: from the driver's
    connection when it kept one, else from the URL (never the password)."""
    found: dict[str, str] = {}
    pgconn = getattr(exc, "pgconn", None)
    if pgconn is not None:
        for key, attr in (("host", "host"), ("port", "port"), ("dbname", "db"), ("user", "user")):
            try:
                value = _text(getattr(pgconn, attr))
            except Exception:  # a connection object that no longer answers
                value = None
            if value:
                found[key] = value
    if len(found) < 4:
        try:
            from psycopg.conninfo import conninfo_to_dict

            given = conninfo_to_dict(url)
        except Exception:
            given = {}
        for key in ("host", "port", "dbname", "user"):
            if key not in found and given.get(key):
                found[key] = str(given[key])
    found.setdefault("host", "localhost")
    found.setdefault("port", "5432")
    return found


def where(target: dict[str, str]) -> str:
    """``host:port``, or the Unix socket a host that is a directory names."""
    host, port = target["host"], target["port"]
    if host.startswith("/"):
        return f"the socket {host.rstrip('/')}/.s.PGSQL.{port}"
    return f"{host}:{port}"


def connect_error(exc: Exception, url: str, connect_timeout: float) -> StoreUnavailable:
    """The error for a connection attempt to ``url`` that failed with ``exc``."""
    message = str(exc)
    t = _target(exc, url)
    at = where(t)
    server = f"the PostgreSQL server at {at}"
    user = t.get("user", "")
    if m := re.search(r'database "([^"]*)" does not exist', message):
        db = m.group(1)
        return StoreUnavailable(
            f'database "{db}" does not exist on {server}: create it (createdb {ident(db)}, or '
            f"CREATE DATABASE {ident(db)}), or fix the database name in the URL"
        )
    if m := re.search(r'role "([^"]*)" does not exist', message):
        role = m.group(1)
        return StoreUnavailable(
            f'role "{role}" does not exist on {server}: create it (createuser {ident(role)}, '
            f"or CREATE ROLE {ident(role)} LOGIN), or fix the user name in the URL"
        )
    if m := re.search(r'password authentication failed for user "([^"]*)"', message):
        role = m.group(1)
        return StoreUnavailable(
            f'password authentication failed for user "{role}" on {server}: fix the user or '
            f"the password in the URL (postgresql://{role}:PASSWORD@host/db), {PASSWORD_HINT}"
        )
    if "no password supplied" in message:
        return StoreUnavailable(
            f'{server} asks a password for user "{user}" and none was given: put it in the URL '
            f"(postgresql://{user}:PASSWORD@host/db), {PASSWORD_HINT}"
        )
    if "Connection refused" in message:
        return StoreUnavailable(
            f"no PostgreSQL server at {at} (connection refused): is PostgreSQL running, and "
            "listening on that host and port? Start it, or fix the host and port in the URL"
        )
    if "socket" in message and "No such file or directory" in message:
        return StoreUnavailable(
            f"no PostgreSQL server at {at}: is PostgreSQL running on this machine? Start it, "
            "or name the server's host and port in the URL (postgresql://user@host:5432/db)"
        )
    if m := re.search(
        r"failed to resolve host '([^']*)'|could not translate host name \"([^\"]*)\"", message
    ):
        host = m.group(1) or m.group(2)
        return StoreUnavailable(f'unknown host "{host}": fix the host name in the URL')
    if "timeout expired" in message:
        return StoreUnavailable(
            f"no answer from {at} within connect_timeout={connect_timeout:g} s: is the host "
            "reachable and the port open to this machine? On a slow network raise "
            'connect_timeout (Memory(url, store_options={"connect_timeout": 30}))'
        )
    if "no pg_hba.conf entry" in message:
        return StoreUnavailable(
            f'{server} accepts no connection from this machine for user "{user}" to database '
            f'"{t.get("dbname", "")}" (no pg_hba.conf entry): add one on the server, or '
            "connect as a user it accepts"
        )
    if "too many clients" in message or "connection slots are reserved" in message:
        return StoreUnavailable(
            f"{server} has no free connection (too many clients): lower max_size in "
            "store_options, or raise the server's max_connections"
        )
    return StoreUnavailable(f"cannot connect to PostgreSQL at {safe_url(url)}: {message}")


def grants(schema: str, role: str) -> str:
    """The statements that let ``role`` use the tables in ``schema``."""
    return (
        f"GRANT USAGE ON SCHEMA {ident(schema)} TO {ident(role)}; GRANT SELECT, INSERT, "
        f"UPDATE, DELETE ON ALL TABLES IN SCHEMA {ident(schema)} TO {ident(role)}"
    )


def not_migrated(schema: str, database: str, url: str, version: int | None) -> StoreNotReady:
    """The error for ``migrate=False`` on a schema without this version's tables."""
    run = f"memory-adapters migrate {url}"
    if version is None:
        return StoreNotReady(
            f'the schema {ident(schema)} in database "{database}" has no memory-adapters '
            f"tables and migrate=False: create them once with {run} (or "
            'Memory(url, store_options={"migrate": True})), or name the schema that has them '
            '(store_options={"schema": ...})'
        )
    return StoreNotReady(
        f'the schema {ident(schema)} in database "{database}" is at version {version}, this '
        f"memory-adapters needs {SCHEMA_VERSION}, and migrate=False: upgrade it with {run} "
        '(or Memory(url, store_options={"migrate": True}))'
    )


def schema_error(
    exc: Any, *, schema: str, role: str, database: str, url: str, migrating: bool
) -> StoreNotReady | None:
    """The error for a statement that failed with ``exc`` (a ``psycopg.Error``) because the
    schema is missing or the role may not use it; ``None`` for any other failure."""
    state = getattr(exc, "sqlstate", None)
    primary = getattr(getattr(exc, "diag", None), "message_primary", None) or str(exc)
    run = f"memory-adapters migrate {url}"
    if state == INSUFFICIENT_PRIVILEGE:
        if migrating and "for database" in primary:
            return StoreNotReady(
                f'{primary} to role "{role}": the first open creates the schema '
                f"{ident(schema)}, which needs CREATE on the database. Grant it (GRANT CREATE "
                f"ON DATABASE {ident(database)} TO {ident(role)}), or create the tables once "
                f"as a role that may (memory-adapters migrate, with that role's URL) and "
                f"grant this one their use ({grants(schema, role)})"
            )
        if migrating and "must be owner" in primary:
            return StoreNotReady(
                f'{primary} to role "{role}": the schema {ident(schema)} needs an upgrade to '
                f"version {SCHEMA_VERSION}, which only its owner may make: run memory-adapters "
                "migrate with the owner's URL"
            )
        return StoreNotReady(f'{primary} to role "{role}": grant it ({grants(schema, role)})')
    if state in (UNDEFINED_TABLE, UNDEFINED_FUNCTION, INVALID_SCHEMA_NAME):
        return StoreNotReady(
            f'the schema {ident(schema)} in database "{database}" lacks memory-adapters '
            f"tables ({primary}): they were dropped, or the store was opened with "
            f"migrate=False before they were made. Create them with {run}"
        )
    return None


def no_pgvector(database: str, url: str, *, available: bool) -> StoreNotReady:
    """The error of ``vector_search="pgvector"`` on a database without the extension: what
    to install or run, or the option that does without it."""
    if available:
        fix = (
            f'the server has it: run "CREATE EXTENSION vector" in database "{database}" as a '
            "superuser (or a role the extension's owner allows), then open the store again"
        )
    else:
        fix = (
            "the server does not have it: install pgvector on the server (for example "
            'apt-get install postgresql-<version>-pgvector), then run "CREATE EXTENSION '
            f'vector" in database "{database}" as a superuser'
        )
    return StoreNotReady(
        f'vector_search="pgvector" needs the pgvector extension, which database "{database}" '
        f'at {url} does not have: {fix}; or use vector_search="auto" (exact search without '
        "it)"
    )
