"""``PostgresStore``: the store contract over PostgreSQL with psycopg 3 and psycopg-pool.

* An append is one call of the ``append_batch`` function (one round trip): it locks the
  conversation's head row, so seq order is commit order, batches never interleave and
  readers never see gaps; a conditional append raises a conflict; an idempotency key makes a
  retried persist a no-op.
* Each message stores the running token total before it, so the tail within a token budget
  is one index range scan on ``(conversation, start_tokens, seq)``, whatever the length of
  the conversation.
* Facts are searched with a ``tsvector`` column and a GIN index (the ``simple``
  configuration: no stemming, any language), ranked by ``ts_rank``. The text indexed is at
  most :data:`~memory_adapters.facts.MAX_SEARCH_TEXT_BYTES`, so that the ``tsvector`` of any
  value stays within PostgreSQL's 1 MiB limit.
* The scopes under a prefix (``list_fact_scopes``) are listed by a skip scan of the index
  ``(namespace, scope COLLATE "C")`` (migration 2): one index seek per distinct scope.
* Semantic recall (migration 3): a fact's vectors are rows of ``fact_vectors`` (one per
  field, a ``real[]``), written in the same statement as the fact and removed with it by a
  foreign key. With pgvector the scope's vectors are compared in SQL (exact); only when
  ``hnsw_min_vectors`` is given does a scope of more vectors than that go through a partial
  HNSW index per dims (the ``vector_search`` function; approximate, see docs/postgres.md);
  without pgvector (or ``vector_search="exact"``) the scope's vectors are fetched and
  compared in Python (numpy when importable), linear in the scope's facts.
* Every operation is written once, as a generator of SQL statements, and driven by a sync
  connection or an async one. Async calls use an ``AsyncConnectionPool`` when the store was
  given one; a store opened from a URL keeps async connections of its own, per event loop;
  a store given only a sync pool runs the sync path in a worker thread.
* Reads that do not depend on each other (a run's window and working memory) go as one
  pipeline: one round trip, one implicit transaction. The keyed appends of a run's steps go as
  one call of the ``append_batches`` function (migration 5): one statement.
* A lost connection raises :class:`~memory_adapters.errors.StoreUnavailable`. An operation
  that fails before it commits is retried once on a fresh connection, so the first call after
  the server comes back works.
* Behind PgBouncer in transaction pooling mode (``pgbouncer=True``, or ``?pgbouncer=true`` in
  the URL) the store's connections never prepare statements on the server; it keeps no
  session state (no ``SET``, no session advisory lock: migrations take a transaction-level
  ``pg_advisory_xact_lock`` inside their transaction), so it works there as it does directly.
* Opening a store from a URL makes one direct connection before the pool's, so that a wrong
  URL fails at once with what is wrong and what fixes it (:mod:`.diagnose`: a database or role
  that does not exist, a failed password, no server at host:port) rather than with the pool's
  timeout. Then the schema is migrated (``migrate=True``) or checked, and the role's
  privileges on its tables too: a schema without this version's tables, or a role that may
  not use them, raises :class:`~memory_adapters.errors.StoreNotReady` saying what to run or
  grant, at open and on any later call.
* A process forked from one whose store had connections open (``multiprocessing``'s fork
  start method, a pre-forking server) must not use them: they are sessions of the parent,
  over sockets it shares. In the child, a store opened from a URL sets the parent's pool and
  async connections aside, never using nor closing them (closing would end the parent's
  sessions), and opens a new pool of its own. A pool the application gave
  (:meth:`PostgresStore.from_pool`) is the application's to reopen in the child.

Values never reach PostgreSQL raw: messages and facts are stored as the JSON text the core
produced, in which a NUL character is the escape ``\\u0000``, so PostgreSQL's refusal of NUL
in ``text`` never loses or truncates content.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from memory_adapters.embedders import Embedding
from memory_adapters.errors import (
    AppendConflict,
    InvalidInput,
    StoreNotReady,
    StoreUnavailable,
    VersionConflict,
)
from memory_adapters.facts import Fact, bound_search_text, search_text
from memory_adapters.messages import AppendResult, Entry, Record, Summary
from memory_adapters.operations import (
    DEFAULT_HISTORY_LIMIT,
    ConversationInfo,
    EraseReport,
    FactChange,
    Writer,
    user_keys,
    working_namespace_of,
)
from memory_adapters.store import (
    Store,
    prefix_upper_bound,
    renew_after_fork,
    run_steps,
    store_closed,
)
from memory_adapters.validation import dumps

from .diagnose import (
    connect_error,
    grants,
    ident,
    no_pgvector,
    not_migrated,
    safe_url,
    schema_error,
)
from .schema import MIGRATIONS, SCHEMA_VERSION, check_schema_name

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    from memory_adapters.steps import StoreCall

T = TypeVar("T")
CONFLICT = "MA409"
VectorSearch = Literal["auto", "pgvector", "exact"]
HNSW_MAX_DIMS = 2000
"""pgvector's limit for an HNSW index on ``vector``: larger vectors are always searched
exactly."""

EXACT_ONLY = 2**31 - 2  # p_exact_below + 1 must fit an integer
"""The ``p_exact_below`` that makes ``vector_search`` compare every vector of the scope."""


@dataclass(slots=True)
class Q:
    """One SQL statement of an operation, and what to fetch from it."""

    sql: str
    params: Any = None
    fetch: Literal["all", "one", "none", "rowcount"] = "all"
    binary: bool = False
    """Send the parameters in binary: arrays of text then need no escaping."""


Op = Generator[Q, Any, T]

_MSG = "seq, data, tokens, batch, run_id, created_at"

# The tail within a token budget %(b)s (at most %(n)s messages): one range of the index
# (conversation, start_tokens, seq), read backwards from the conversation's running total, a
# plain statement (no function: the planner sees it whole, and it is one short plan to run).
# The range is closed on both sides (BETWEEN): the planner then estimates a narrow range and
# keeps the index range scan even in a generic (cached) plan; an open ">=" is guessed at a
# third of the table and may be planned as a full scan and a sort.
_TAIL_WITHIN = (
    f"SELECT {_MSG} FROM {{s}}.messages WHERE conversation = %(c)s AND start_tokens BETWEEN "
    "(SELECT total_tokens FROM {s}.conversations WHERE key = %(c)s) - %(b)s "
    "AND (SELECT total_tokens FROM {s}.conversations WHERE key = %(c)s) "
    "ORDER BY start_tokens DESC, seq DESC LIMIT %(n)s"
)
# The first %(h)s messages (part 0) and the tail (part 1) of a window, in one statement.
_HEAD = f"SELECT 0, {_MSG} FROM {{s}}.messages WHERE conversation = %(c)s ORDER BY seq LIMIT %(h)s"
_HEAD_AND_TAIL_WITHIN = f"({_HEAD}) UNION ALL (SELECT 1, {_TAIL_WITHIN[7:]})"
_HEAD_AND_TAIL = (
    f"({_HEAD}) UNION ALL (SELECT 1, {_MSG} FROM {{s}}.messages WHERE conversation = %(c)s "
    "ORDER BY seq DESC LIMIT %(n)s)"
)

# After a CTE "w" that wrote (or not) the fact %(ns)s/%(sc)s/%(k)s: replace its vectors by
# those of %(fields)s (%(dims)s floats each, concatenated in %(flat)s) in the same statement.
# The old fields that are not rewritten are deleted, the others upserted (a DELETE and an
# INSERT of one key in one statement would collide). A concurrent put may leave a row this
# statement's snapshot did not see: searches only count vectors of the model the fact
# records (facts.embed_model), and the next put or re-embedding replaces them.
_WRITE_VECTORS = (
    ", d AS (DELETE FROM {s}.fact_vectors AS v WHERE v.namespace = %(ns)s "
    "AND v.scope = %(sc)s AND v.key = %(k)s AND EXISTS (SELECT 1 FROM w) "
    "AND v.field <> ALL(%(fields)s::text[])), "
    "i AS (INSERT INTO {s}.fact_vectors (namespace, scope, key, field, model, dims, embedding) "
    "SELECT %(ns)s, %(sc)s, %(k)s, u.field, %(m)s, %(dims)s, "
    "(%(flat)s::real[])[(u.n - 1) * %(dims)s + 1 : u.n * %(dims)s] "
    "FROM w, unnest(%(fields)s::text[]) WITH ORDINALITY AS u(field, n) "
    "ON CONFLICT (namespace, scope, key, field) DO UPDATE SET model = excluded.model, "
    "dims = excluded.dims, embedding = excluded.embedding) "
    "SELECT * FROM w"
)

# After a CTE "w" that wrote (or deleted) the fact %(ns)s/%(sc)s/%(k)s and returns its
# "version" (and "live", for a delete): record the change in its history, written by %(wr)s,
# and keep the newest %(keep)s + 1 versions (the row inserted here is not visible to the
# DELETE of the same statement, hence keep = limit - 1). For ", ..." before the final SELECT.
_WRITE_HISTORY = (
    ", h AS (INSERT INTO {s}.fact_history (namespace, scope, key, version, op, data, at, "
    "writer) SELECT %(ns)s, %(sc)s, %(k)s, w.version, {op}, {data}, %(now)s, %(wr)s "
    "FROM w WHERE {live}), "
    "hp AS (DELETE FROM {s}.fact_history WHERE namespace = %(ns)s "
    'AND scope COLLATE "C" = %(sc)s AND key = %(k)s AND EXISTS (SELECT 1 FROM w WHERE {live}) '
    "AND id <= (SELECT id FROM {s}.fact_history WHERE namespace = %(ns)s "
    'AND scope COLLATE "C" = %(sc)s AND key = %(k)s ORDER BY id DESC OFFSET %(keep)s LIMIT 1)) '
)
_FACT = "key, data, version, importance, created_at, updated_at, expires_at"


_PIPELINED = frozenset(
    (
        "tail",
        "head_and_tail",
        "read",
        "last_seq",
        "latest_summary",
        "get_fact",
        "list_facts",
        "append",
    )
)
"""The operations :meth:`PostgresStore.batch` sends together in one pipeline: reads, and
unconditional appends (a run's steps), which then commit together."""


def _fetched(cur: Any, fetch: str) -> Any:
    if fetch == "all":
        return cur.fetchall()
    if fetch == "one":
        return cur.fetchone()
    if fetch == "rowcount":
        return cur.rowcount
    return None


async def _afetched(cur: Any, fetch: str) -> Any:
    if fetch == "all":
        return await cur.fetchall()
    if fetch == "one":
        return await cur.fetchone()
    if fetch == "rowcount":
        return cur.rowcount
    return None


class _LoopConnections:
    """The store's own async connections of one event loop."""

    __slots__ = ("idle", "slots")

    def __init__(self, size: int) -> None:
        self.idle: list[Any] = []
        self.slots = asyncio.Semaphore(size)

    def finish(self) -> None:
        """Close the idle connections without their loop (which may be closed)."""
        idle, self.idle = self.idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.pgconn.finish()


async def _aclose_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):
        await conn.close()


def _fact(row: Sequence[Any], score: float | None = None) -> Fact:
    return Fact.from_row(row[0], row[1], row[2], row[3], row[4], row[5], row[6], score)


def _vector_rows(embedding: Embedding | None) -> tuple[str | None, int, list[str], list[float]]:
    """An embedding as statement parameters: model, dims, field names, and every vector
    concatenated (the statement slices it); ``InvalidInput`` for a vector of the wrong
    length."""
    if embedding is None:
        return None, 0, [], []
    dims = int(embedding.dims)
    fields: list[str] = []
    flat: list[float] = []
    for field, vector in embedding.vectors.items():
        values = [float(x) for x in vector]
        if len(values) != dims:
            raise InvalidInput(
                f"field {field!r} has a vector of {len(values)} dimensions, not {dims}"
            )
        fields.append(field)
        flat.extend(values)
    return embedding.model, dims, fields, flat


def _similarities(blobs: Sequence[bytes], query: Sequence[float]) -> list[float]:
    """The dot product of ``query`` with each vector, given as ``array_send`` of a 1-D
    ``real[]`` without NULLs: a 20-byte header, then a 4-byte length and a big-endian float4
    per element. numpy when importable, else pure Python."""
    dims = len(query)
    if not blobs:
        return []
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is there in the tests
        layout = struct.Struct(f">{2 * dims}f")
        return [
            sum(a * b for a, b in zip(layout.unpack_from(blob, 20)[1::2], query, strict=True))
            for blob in blobs
        ]
    matrix = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(blobs), 5 + 2 * dims)
    sims = matrix[:, 6::2].astype(np.float64) @ np.asarray(query, dtype=np.float64)
    return [float(x) for x in sims]


def _tsquery(terms: Sequence[str]) -> str:
    """A tsquery matching any of ``terms`` (plain words: the core splits queries on \\w+)."""
    return " | ".join("'" + t.replace("'", "''").replace("\\", "\\\\") + "'" for t in terms)


_carried: list[Any] = []
"""What a forked child inherited of its parent's connections: kept, so that it is never
closed (nor used) in the child."""


class PostgresStore(Store):
    """A store in a PostgreSQL database, in its own schema.

    Give it a URL (``postgresql://user@host/db``) and it opens its own pool, or give it an
    application's ``psycopg_pool.ConnectionPool`` (and optionally an
    ``AsyncConnectionPool`` for native async calls) with :meth:`from_pool`.
    """

    scheme = "postgresql"

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: ConnectionPool[Any] | None = None,
        async_pool: AsyncConnectionPool[Any] | None = None,
        schema: str = "memory_adapters",
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 5.0,
        connect_timeout: int = 5,
        migrate: bool = True,
        vector_search: VectorSearch = "auto",
        hnsw_min_vectors: int | None = None,
        pgbouncer: bool | None = None,
    ) -> None:
        import psycopg
        from psycopg import sql
        from psycopg_pool import ConnectionPool

        self._psycopg = psycopg
        if vector_search not in ("auto", "pgvector", "exact"):
            raise InvalidInput(
                f"vector_search is 'auto', 'pgvector' or 'exact', not {vector_search!r}"
            )
        if hnsw_min_vectors is not None and (
            isinstance(hnsw_min_vectors, bool) or not isinstance(hnsw_min_vectors, int)
        ):
            raise InvalidInput(f"hnsw_min_vectors is an int or None, not {hnsw_min_vectors!r}")
        self.vector_search: VectorSearch = vector_search
        self.hnsw_min_vectors = None if hnsw_min_vectors is None else max(0, hnsw_min_vectors)
        """With pgvector, scopes with more vectors than this are searched through the HNSW
        index (approximate); ``None`` (the default): every search is exact."""
        self.pgvector_schema: str | None = None
        """The schema of the pgvector extension when searches use it, else ``None``."""
        self._hnsw_dims: set[int] = set()
        self.schema = check_schema_name(schema)
        self._s = sql.Identifier(self.schema).as_string(None)
        self._own_pool = pool is None
        self._closed = False
        if url is not None:
            url, in_url = _pgbouncer_param(url)
            pgbouncer = in_url if pgbouncer is None else pgbouncer
        if pgbouncer is not None and not isinstance(pgbouncer, bool):
            raise InvalidInput(f"pgbouncer is True, False or None, not {pgbouncer!r}")
        self.pgbouncer = bool(pgbouncer)
        """Behind a pooler in transaction mode (PgBouncer): the store's own connections never
        prepare statements on the server (``prepare_threshold=None``)."""
        connection: dict[str, Any] = {"autocommit": True, "connect_timeout": connect_timeout}
        if self.pgbouncer:
            connection["prepare_threshold"] = None
        self._url = "URL" if url is None else safe_url(url)
        self._role = self._database = "?"  # known once connected
        if pool is None:
            if url is None:
                raise ValueError("PostgresStore needs a url or a pool")
            try:
                psycopg.connect(_libpq_url(url), **connection).close()
            except psycopg.OperationalError as exc:
                raise connect_error(exc, url, connect_timeout) from exc
            self._pool_options: dict[str, Any] = {
                "conninfo": _libpq_url(url),
                "min_size": min_size,
                "max_size": max_size,
                "timeout": timeout,
                "kwargs": connection,
                "name": "memory-adapters",
            }
            pool = ConnectionPool(open=False, **self._pool_options)
            try:
                pool.open(wait=True, timeout=timeout)
            except Exception as exc:
                pool.close()
                raise StoreUnavailable(
                    f"cannot connect to PostgreSQL at {safe_url(url)}: {exc}"
                ) from exc
        self.pool: ConnectionPool[Any] = pool
        self.async_pool = async_pool
        # Without an async pool, async calls use connections of the store's own, kept per
        # event loop (a connection serves the loop it was made in): see _aconnection.
        self._aconninfo = _libpq_url(url) if url is not None and async_pool is None else None
        self._connection = connection
        self._max_size = max_size
        self._loops: dict[Any, _LoopConnections] = {}
        self._loops_lock = threading.Lock()
        self._sql: dict[str, str] = {}
        try:
            if migrate:
                self.migrate()
            else:
                self.check()
            self._detect_pgvector()
        except BaseException:
            if self._own_pool:
                pool.close()
            raise
        if self._own_pool:  # a store that failed to open has nothing for a child to renew
            renew_after_fork(self)

    @classmethod
    def from_pool(
        cls,
        pool: ConnectionPool[Any],
        *,
        async_pool: AsyncConnectionPool[Any] | None = None,
        schema: str = "memory_adapters",
        migrate: bool = True,
        vector_search: VectorSearch = "auto",
        hnsw_min_vectors: int | None = None,
    ) -> PostgresStore:
        """A store over an application's existing pool(s); the application closes them."""
        return cls(
            pool=pool,
            async_pool=async_pool,
            schema=schema,
            migrate=migrate,
            vector_search=vector_search,
            hnsw_min_vectors=hnsw_min_vectors,
        )

    def q(self, text: str) -> str:
        """``text`` with ``{s}`` replaced by the quoted schema name (cached)."""
        got = self._sql.get(text)
        if got is None:
            got = self._sql[text] = text.replace("{s}", self._s)
        return got

    # -- schema -------------------------------------------------------------------------------

    def migrate(self) -> int:
        """Create or upgrade the schema, then :meth:`check` it; safe when several processes
        start at once. A schema already at this version is only read (no DDL), so a role
        without the right to create it can open a store an owner migrated."""
        with self._errors(migrating=True), self.pool.connection() as conn, conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", ("memory_adapters:" + self.schema,)
            )
            current = self._schema_version(conn) or 0
            if current < SCHEMA_VERSION:
                conn.execute(self.q("CREATE SCHEMA IF NOT EXISTS {s}"))
                conn.execute(
                    self.q(
                        "CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer NOT NULL)"
                    )
                )
                for version in range(current + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS[version - 1]:
                        conn.execute(self.q(statement))
                    conn.execute(self.q("INSERT INTO {s}.schema_version VALUES (%s)"), (version,))
        return self.check()

    def check(self) -> int:
        """Raise :class:`~memory_adapters.errors.StoreNotReady` unless the schema holds this
        version's tables and the role may use them (what ``migrate=False`` runs at open);
        return the schema version."""
        with self._errors(), self.pool.connection() as conn:
            version = self._schema_version(conn)
            if version is None or version < SCHEMA_VERSION:
                raise not_migrated(self.schema, self._database, self._url, version)
            row = conn.execute(
                "SELECT ARRAY(SELECT c.relname::text FROM pg_catalog.pg_class c "
                "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') "
                "AND c.relname <> 'schema_version' AND NOT ("
                "has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT') "
                "AND has_table_privilege(c.oid, 'UPDATE') "
                "AND has_table_privilege(c.oid, 'DELETE')) ORDER BY 1)",
                (self.schema,),
            ).fetchone()
        denied: list[str] = row[0] if row else []
        if denied:
            tables = ", ".join(f"{ident(self.schema)}.{ident(t)}" for t in denied)
            raise StoreNotReady(
                f'role "{self._role}" may not read and write the tables {tables}: grant it '
                f"({grants(self.schema, self._role)})"
            )
        return version

    def _detect_pgvector(self) -> None:
        """Decide how vectors are searched: with pgvector when it is installed in the database
        (and ``vector_search`` is not ``"exact"``); ``vector_search="pgvector"`` without it
        raises :class:`~memory_adapters.errors.StoreNotReady` naming the fix."""
        self.pgvector_schema = None
        if self.vector_search == "exact":
            return
        with self._errors(), self.pool.connection() as conn:
            row = conn.execute(
                "SELECT (SELECT n.nspname::text FROM pg_catalog.pg_extension e "
                "JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace "
                "WHERE e.extname = 'vector'), EXISTS (SELECT 1 FROM "
                "pg_catalog.pg_available_extensions WHERE name = 'vector')"
            ).fetchone()
        if row is not None and row[0] is not None:
            self.pgvector_schema = str(row[0])
        elif self.vector_search == "pgvector":
            raise no_pgvector(self._database, self._url, available=bool(row and row[1]))

    def _schema_version(self, conn: Any) -> int | None:
        """The schema's version, ``None`` without a ``schema_version`` table; records the
        role and database for messages."""
        row = conn.execute(
            "SELECT current_user, current_database(), EXISTS (SELECT 1 FROM "
            "pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = 'schema_version')",
            (self.schema,),
        ).fetchone()
        self._role, self._database = str(row[0]), str(row[1])
        if not row[2]:
            return None
        got = conn.execute(self.q("SELECT max(version) FROM {s}.schema_version")).fetchone()
        return int(got[0]) if got and got[0] is not None else 0

    # -- drivers ------------------------------------------------------------------------------

    def _not_ready(self, exc: BaseException, *, migrating: bool = False) -> StoreNotReady | None:
        """:class:`StoreNotReady` for a statement that failed because the schema is missing or
        the role may not use it, else ``None``."""
        return schema_error(
            exc,
            schema=self.schema,
            role=self._role,
            database=self._database,
            url=self._url,
            migrating=migrating,
        )

    def _errors(self, *, migrating: bool = False) -> Any:
        store = self

        class _Map:
            def __enter__(self) -> None:
                return None

            def __exit__(self, et: Any, e: BaseException | None, tb: Any) -> None:
                if isinstance(e, store._psycopg.OperationalError):
                    raise StoreUnavailable(f"PostgreSQL: {e}") from e
                if isinstance(e, store._psycopg.Error):
                    mapped = store._not_ready(e, migrating=migrating)
                    if mapped is not None:
                        raise mapped from e

        return _Map()

    def _run(self, make: Callable[[], Op[T]]) -> T:
        if self._closed:
            raise store_closed(type(self).__name__)
        psycopg = self._psycopg
        for attempt in (0, 1):
            done = False
            try:
                with self.pool.connection() as conn:
                    op = make()
                    result: Any = None
                    try:
                        while True:
                            try:
                                step = op.send(result)
                            except StopIteration as stop:
                                value: T = stop.value
                                done = True
                                break
                            result = self._execute(conn, step, op)
                    finally:
                        op.close()
                return value
            except psycopg.OperationalError as exc:
                if attempt == 0 and not done:
                    # a connection broken by a server restart: drop stale ones, retry once
                    self.pool.check()
                    continue
                raise StoreUnavailable(f"PostgreSQL: {exc}") from exc
            except psycopg.Error as exc:
                mapped = self._not_ready(exc)
                if mapped is not None:
                    raise mapped from exc
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _execute(self, conn: Any, step: Q, op: Op[Any]) -> Any:
        try:
            cur = conn.execute(step.sql, step.params, binary=step.binary)
        except self._psycopg.errors.RaiseException as exc:
            if exc.sqlstate == CONFLICT:
                return op.throw(exc)  # the operation turns it into its own error
            raise
        except self._psycopg.Error as exc:
            if exc.sqlstate == CONFLICT:
                return op.throw(exc)
            raise
        if step.fetch == "all":
            return cur.fetchall()
        if step.fetch == "one":
            return cur.fetchone()
        if step.fetch == "rowcount":
            return cur.rowcount
        return None

    async def _arun(self, make: Callable[[], Op[T]]) -> T:
        if self._closed:
            raise store_closed(type(self).__name__)
        psycopg = self._psycopg
        for attempt in (0, 1):
            done = False
            try:
                async with self._aconnection() as conn:
                    op = make()
                    result: Any = None
                    try:
                        while True:
                            try:
                                step = op.send(result)
                            except StopIteration as stop:
                                value: T = stop.value
                                done = True
                                break
                            try:
                                cur = await conn.execute(step.sql, step.params, binary=step.binary)
                            except psycopg.Error as exc:
                                if exc.sqlstate != CONFLICT:
                                    raise
                                result = op.throw(exc)
                                continue
                            if step.fetch == "all":
                                result = await cur.fetchall()
                            elif step.fetch == "one":
                                result = await cur.fetchone()
                            elif step.fetch == "rowcount":
                                result = cur.rowcount
                            else:
                                result = None
                    finally:
                        op.close()
                return value
            except psycopg.OperationalError as exc:
                if attempt == 0 and not done:
                    await self._acheck()
                    continue
                raise StoreUnavailable(f"PostgreSQL: {exc}") from exc
            except psycopg.Error as exc:
                mapped = self._not_ready(exc)
                if mapped is not None:
                    raise mapped from exc
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _ops(self, calls: Sequence[StoreCall]) -> list[Callable[[], Op[Any]]] | None:
        """The operations of ``calls``, or ``None`` when one has none (then no pipeline)."""
        makes: list[Callable[[], Op[Any]]] = []
        for c in calls:
            op = getattr(self, f"_{c.method}", None)
            if c.method not in _PIPELINED or op is None:
                return None
            if c.method == "append" and (
                c.kwargs.get("expected_last_seq") is not None
                or c.kwargs.get("idempotency_key") is None
            ):
                # a conditional append answers with a conflict, and only a keyed one may be
                # sent again after a lost connection: one at a time
                return None
            makes.append(functools.partial(op, *c.args, **c.kwargs))
        return makes

    def _steps(self, calls: Sequence[StoreCall]) -> list[Callable[[], Op[Any]]] | None:
        """A run's steps (:func:`~memory_adapters.store.run_steps`) as one operation: one
        ``append_batches`` statement, whose results are the calls' results, in order. ``None``
        for any other calls."""
        steps = run_steps(calls)
        if steps is None:
            return None
        return [
            functools.partial(
                self._append_batches, steps.conversation, steps.batches, steps.keys, steps.run_id
            )
        ]

    def _append_batches(
        self,
        conversation: str,
        batches: Sequence[Sequence[Entry]],
        keys: Sequence[str],
        run_id: str | None,
    ) -> Op[list[AppendResult]]:
        """Append ``batches``, each keyed by its key in ``keys``, as :meth:`append` would one
        after the other, in one statement (and one transaction)."""
        entries = [e for batch in batches for e in batch]
        rows = yield Q(
            self.q("SELECT * FROM {s}.append_batches(%s, %b, %b, %b, %b, %s, %b, %s)"),
            (
                conversation,
                [e.role for e in entries],
                [e.data for e in entries],
                [e.tokens for e in entries],
                [len(batch) for batch in batches],
                run_id,
                list(keys),
                time.time(),
            ),
            "all",
            binary=True,
        )
        return [AppendResult(int(r[0]), int(r[1]), bool(r[2])) for r in rows]

    def batch(self, calls: Sequence[StoreCall]) -> list[Any]:
        """Reads that do not depend on each other in one round trip: a pipeline, in one
        implicit transaction (one snapshot); a run's steps in one statement."""
        steps = self._steps(calls)
        makes = steps or self._ops(calls)
        if makes is None or (len(makes) < 2 and steps is None):
            return super().batch(calls)
        if self._closed:
            raise store_closed(type(self).__name__)
        psycopg = self._psycopg
        for attempt in (0, 1):
            try:
                with self.pool.connection() as conn:
                    ops = [make() for make in makes]
                    try:
                        results = self._pipelined(conn, ops)
                        return results[0] if steps else results
                    finally:
                        for op in ops:
                            op.close()
            except psycopg.OperationalError as exc:
                if attempt == 0:  # reads, and appends that commit together or not at all
                    self.pool.check()
                    continue
                raise StoreUnavailable(f"PostgreSQL: {exc}") from exc
            except psycopg.Error as exc:
                mapped = self._not_ready(exc)
                if mapped is not None:
                    raise mapped from exc
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _pipelined(self, conn: Any, ops: list[Op[Any]]) -> list[Any]:
        results: list[Any] = [None] * len(ops)
        sent: list[Any] = [None] * len(ops)
        live = list(range(len(ops)))
        while live:
            steps: dict[int, Q] = {}
            for i in live:
                try:
                    steps[i] = ops[i].send(sent[i])
                except StopIteration as stop:
                    results[i] = stop.value
            live = list(steps)
            if len(live) == 1:
                i = live[0]
                sent[i] = self._execute(conn, steps[i], ops[i])
            elif live:
                with conn.pipeline():  # its end sends the one Sync and waits for every result
                    cursors = [
                        conn.execute(steps[i].sql, steps[i].params, binary=steps[i].binary)
                        for i in live
                    ]
                for i, cur in zip(live, cursors, strict=True):
                    sent[i] = _fetched(cur, steps[i].fetch)
        return results

    async def abatch(self, calls: Sequence[StoreCall]) -> list[Any]:
        """Async :meth:`batch`."""
        steps = self._steps(calls)
        makes = steps or self._ops(calls)
        together = makes is not None and (len(makes) >= 2 or steps is not None)
        if not together or not self._native_async:
            if together:  # one hop to a worker, not one per call
                return await asyncio.to_thread(self.batch, calls)
            return await super().abatch(calls)
        assert makes is not None
        if self._closed:
            raise store_closed(type(self).__name__)
        psycopg = self._psycopg
        for attempt in (0, 1):
            try:
                async with self._aconnection() as conn:
                    ops = [make() for make in makes]
                    try:
                        results = await self._apipelined(conn, ops)
                        return results[0] if steps else results
                    finally:
                        for op in ops:
                            op.close()
            except psycopg.OperationalError as exc:
                if attempt == 0:
                    await self._acheck()
                    continue
                raise StoreUnavailable(f"PostgreSQL: {exc}") from exc
            except psycopg.Error as exc:
                mapped = self._not_ready(exc)
                if mapped is not None:
                    raise mapped from exc
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _apipelined(self, conn: Any, ops: list[Op[Any]]) -> list[Any]:
        results: list[Any] = [None] * len(ops)
        sent: list[Any] = [None] * len(ops)
        live = list(range(len(ops)))
        while live:
            steps: dict[int, Q] = {}
            for i in live:
                try:
                    steps[i] = ops[i].send(sent[i])
                except StopIteration as stop:
                    results[i] = stop.value
            live = list(steps)
            if not live:
                break
            async with conn.pipeline():  # its end sends the one Sync and waits for the results
                cursors = [
                    await conn.execute(steps[i].sql, steps[i].params, binary=steps[i].binary)
                    for i in live
                ]
            for i, cur in zip(live, cursors, strict=True):
                sent[i] = await _afetched(cur, steps[i].fetch)
        return results

    @property
    def _native_async(self) -> bool:
        return self.async_pool is not None or self._aconninfo is not None

    @contextlib.asynccontextmanager
    async def _aconnection(self) -> AsyncIterator[Any]:
        """An async connection: from the application's async pool, or one of the store's own
        for the running event loop (opened on first use, at most ``max_size`` at once per
        loop, kept idle for the loop's next call; those of loops that have closed are closed)."""
        if self.async_pool is not None:
            async with self.async_pool.connection() as conn:
                yield conn
            return
        loop = asyncio.get_running_loop()
        with self._loops_lock:
            mine = self._loops.get(loop)
            if mine is None:
                for gone in [k for k in self._loops if k.is_closed()]:
                    self._loops.pop(gone).finish()
                mine = self._loops[loop] = _LoopConnections(self._max_size)
        async with mine.slots:
            conn = mine.idle.pop() if mine.idle else None
            if conn is None:
                assert self._aconninfo is not None
                conn = await self._psycopg.AsyncConnection.connect(
                    self._aconninfo, **self._connection
                )
            try:
                yield conn
            except BaseException:
                await _aclose_quietly(conn)  # its state is unknown: never reused
                raise
            if self._closed or conn.closed or conn.info.transaction_status != 0:
                await _aclose_quietly(conn)
            else:
                mine.idle.append(conn)

    async def _acheck(self) -> None:
        """After a lost connection: drop the connections that may be stale."""
        if self.async_pool is not None:
            await self.async_pool.check()
            return
        with self._loops_lock:
            mine = self._loops.get(asyncio.get_running_loop())
        if mine is not None:
            idle, mine.idle = mine.idle, []
            for conn in idle:
                await _aclose_quietly(conn)

    async def _offload(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Async twins: native on the async pool when there is one, else a worker thread."""
        op = getattr(self, f"_{fn.__name__}", None)
        if not self._native_async or op is None:
            return await super()._offload(fn, *args, **kwargs)
        return await self._arun(lambda: op(*args, **kwargs))

    # -- conversation log: operations ------------------------------------------------------

    def _append(
        self,
        conversation: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> Op[AppendResult]:
        try:
            row = yield Q(
                self.q("SELECT * FROM {s}.append_batch(%s, %b, %b, %b, %s, %s, %s, %s)"),
                (
                    conversation,
                    [e.role for e in entries],
                    [e.data for e in entries],
                    [e.tokens for e in entries],
                    run_id,
                    idempotency_key,
                    expected_last_seq,
                    time.time(),
                ),
                "one",
                binary=True,
            )
        except self._psycopg.Error as exc:
            actual = int(exc.diag.message_detail or 0)
            raise AppendConflict(conversation, expected_last_seq or 0, actual) from None
        return AppendResult(int(row[0]), int(row[1]), bool(row[2]))

    def _tail(
        self, conversation: str, *, max_tokens: int | None = None, max_messages: int | None = None
    ) -> Op[list[Record]]:
        if max_tokens is None:
            rows = yield Q(
                self.q(
                    f"SELECT {_MSG} FROM {{s}}.messages WHERE conversation = %s "
                    "ORDER BY seq DESC LIMIT %s"
                ),
                (conversation, max_messages),
            )
        else:
            rows = yield Q(
                self.q(_TAIL_WITHIN), {"c": conversation, "b": max_tokens, "n": max_messages}
            )
        return Record.from_rows(reversed(rows))

    def _head_and_tail(
        self,
        conversation: str,
        *,
        head: int,
        max_tokens: int | None = None,
        max_messages: int | None = None,
    ) -> Op[tuple[list[Record], list[Record]]]:
        rows = yield Q(
            self.q(_HEAD_AND_TAIL if max_tokens is None else _HEAD_AND_TAIL_WITHIN),
            {"c": conversation, "h": head, "b": max_tokens, "n": max_messages},
        )
        first = Record.from_rows(r[1:] for r in rows if r[0] == 0)
        last = Record.from_rows(r[1:] for r in rows if r[0] == 1)
        last.reverse()
        return first, last

    def _read(
        self,
        conversation: str,
        *,
        start_seq: int = 1,
        end_seq: int | None = None,
        limit: int | None = None,
    ) -> Op[list[Record]]:
        rows = yield Q(
            self.q(
                f"SELECT {_MSG} FROM {{s}}.messages WHERE conversation = %s AND seq >= %s "
                "AND seq <= %s ORDER BY seq LIMIT %s"
            ),
            (conversation, start_seq, end_seq if end_seq is not None else 2**62, limit),
        )
        return Record.from_rows(rows)

    def _last_seq(self, conversation: str) -> Op[int]:
        row = yield Q(
            self.q("SELECT last_seq FROM {s}.conversations WHERE key = %s"), (conversation,), "one"
        )
        return 0 if row is None else int(row[0])

    def _delete_conversation(self, conversation: str) -> Op[int]:
        row = yield Q(
            self.q(
                "WITH m AS (DELETE FROM {s}.messages WHERE conversation = %(c)s RETURNING 1), "
                "b AS (DELETE FROM {s}.batches WHERE conversation = %(c)s), "
                "s AS (DELETE FROM {s}.summaries WHERE conversation = %(c)s), "
                "h AS (DELETE FROM {s}.conversations WHERE key = %(c)s) "
                "SELECT count(*) FROM m"
            ),
            {"c": conversation},
            "one",
        )
        return int(row[0])

    def _put_summary(self, conversation: str, summary: Summary) -> Op[None]:
        # The text column holds JSON: the text alone, or with the model that made it. The
        # claim this summary answers (the row at end_seq -1, see _claim_summary) ends.
        text: Any = summary.text
        if summary.model is not None:
            text = {"text": summary.text, "model": summary.model}
        yield Q(
            self.q(
                "WITH r AS (DELETE FROM {s}.summaries WHERE conversation = %(c)s "
                "AND end_seq = -1 AND start_seq <= %(e)s) "
                "INSERT INTO {s}.summaries (conversation, end_seq, start_seq, text, tokens, "
                "created_at) VALUES (%(c)s, %(e)s, %(b)s, %(t)s, %(n)s, %(at)s) "
                "ON CONFLICT (conversation, end_seq) "
                "DO UPDATE SET start_seq = excluded.start_seq, text = excluded.text, "
                "tokens = excluded.tokens, created_at = excluded.created_at"
            ),
            {
                "c": conversation,
                "e": summary.end_seq,
                "b": summary.start_seq,
                "t": json.dumps(text),
                "n": summary.tokens,
                "at": summary.created_at or time.time(),
            },
            "none",
        )

    def _latest_summary(self, conversation: str) -> Op[Summary | None]:
        row = yield Q(
            self.q(
                "SELECT start_seq, end_seq, text, tokens, created_at FROM {s}.summaries "
                "WHERE conversation = %s AND end_seq >= 0 ORDER BY end_seq DESC LIMIT 1"
            ),
            (conversation,),
            "one",
        )
        if row is None:
            return None
        text = json.loads(row[2])
        model = None
        if isinstance(text, dict):
            text, model = text["text"], text.get("model")
        return Summary(int(row[0]), int(row[1]), text, int(row[3]), float(row[4]), model)

    def _claim_summary(
        self, conversation: str, end_seq: int, owner: str, *, lease_seconds: float
    ) -> Op[bool]:
        # A claim is the conversation's row at end_seq -1 (no migration: the claimed end seq
        # in start_seq, the owner in text, tokens -1, the lease's end in created_at). The
        # conflict arm takes the row's lock, so of owners claiming at once one wins.
        now = time.time()
        row = yield Q(
            self.q(
                "INSERT INTO {s}.summaries AS x (conversation, end_seq, start_seq, text, tokens, "
                "created_at) SELECT %(c)s, -1, %(e)s, %(o)s, -1, %(until)s "
                "WHERE NOT EXISTS (SELECT 1 FROM {s}.summaries WHERE conversation = %(c)s "
                "AND end_seq >= %(e)s) "
                "ON CONFLICT (conversation, end_seq) DO UPDATE SET start_seq = excluded.start_seq, "
                "text = excluded.text, created_at = excluded.created_at "
                "WHERE x.created_at <= %(now)s OR x.text = excluded.text RETURNING 1"
            ),
            {
                "c": conversation,
                "e": end_seq,
                "o": json.dumps(owner),
                "until": now + lease_seconds,
                "now": now,
            },
            "one",
        )
        return row is not None

    # -- facts: operations ---------------------------------------------------------------------

    def _version(self, namespace: str, scope: str, key: str, now: float) -> Op[int]:
        row = yield Q(
            self.q(
                "SELECT version FROM {s}.facts WHERE namespace = %s AND scope = %s AND key = %s "
                "AND (expires_at IS NULL OR expires_at > %s)"
            ),
            (namespace, scope, key, now),
            "one",
        )
        return 0 if row is None else int(row[0])

    def _put_fact(
        self,
        namespace: str,
        scope: str,
        key: str,
        data: str,
        *,
        text: str,
        importance: float = 0.0,
        expires_at: float | None = None,
        expected_version: int | None = None,
        embedding: Embedding | None = None,
        writer: Writer | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
    ) -> Op[Fact]:
        now = time.time()
        model, dims, fields, flat = _vector_rows(embedding)
        if fields:
            yield from self._ensure_index(dims)
        p = {
            "ns": namespace,
            "sc": scope,
            "k": key,
            "d": data,
            # a tsvector holds at most 1 MiB: index a bounded text (the core bounds it too)
            "t": bound_search_text(text),
            "i": importance,
            "now": now,
            "exp": expires_at,
            "ev": expected_version,
            "m": model,
            "dims": dims,
            "fields": fields,
            "flat": flat,
        }
        tail = self._history_ctes(p, writer, history_limit, "put") + _WRITE_VECTORS
        live = "(f.expires_at IS NULL OR f.expires_at > %(now)s)"
        if expected_version is None or expected_version == 0:
            guard = "" if expected_version is None else f"WHERE NOT {live}"
            row = yield Q(
                self.q(
                    "WITH w AS (INSERT INTO {s}.facts AS f (namespace, scope, key, data, version, "
                    "importance, created_at, updated_at, expires_at, search, embed_model) VALUES "
                    "(%(ns)s, %(sc)s, %(k)s, %(d)s, 1, %(i)s, %(now)s, %(now)s, %(exp)s, "
                    "to_tsvector('simple', %(t)s), %(m)s) "
                    "ON CONFLICT (namespace, scope, key) DO UPDATE SET data = excluded.data, "
                    f"version = CASE WHEN {live} THEN f.version + 1 ELSE 1 END, "
                    f"created_at = CASE WHEN {live} THEN f.created_at "
                    "ELSE excluded.created_at END, "
                    "importance = excluded.importance, updated_at = excluded.updated_at, "
                    f"expires_at = excluded.expires_at, search = excluded.search, "
                    f"embed_model = excluded.embed_model {guard} "
                    "RETURNING version, created_at)" + tail
                ),
                p,
                "one",
            )
        else:
            row = yield Q(
                self.q(
                    "WITH w AS (UPDATE {s}.facts AS f SET data = %(d)s, version = f.version + 1, "
                    "importance = %(i)s, updated_at = %(now)s, expires_at = %(exp)s, "
                    "search = to_tsvector('simple', %(t)s), embed_model = %(m)s "
                    "WHERE namespace = %(ns)s AND "
                    f"scope = %(sc)s AND key = %(k)s AND version = %(ev)s AND {live} "
                    "RETURNING version, created_at)" + tail
                ),
                p,
                "one",
            )
        if row is None:
            actual = yield from self._version(namespace, scope, key, now)
            raise VersionConflict(key, expected_version or 0, actual)
        return Fact.from_row(key, data, int(row[0]), importance, float(row[1]), now, expires_at)

    def _get_fact(self, namespace: str, scope: str, key: str) -> Op[Fact | None]:
        row = yield Q(
            self.q(
                f"SELECT {_FACT} FROM {{s}}.facts WHERE namespace = %s AND scope = %s "
                "AND key = %s AND (expires_at IS NULL OR expires_at > %s)"
            ),
            (namespace, scope, key, time.time()),
            "one",
        )
        return None if row is None else _fact(row)

    def _list_facts(
        self, namespace: str, scope: str, *, limit: int | None = None
    ) -> Op[list[Fact]]:
        rows = yield Q(
            self.q(
                f"SELECT {_FACT} FROM {{s}}.facts WHERE namespace = %s AND scope = %s "
                'AND (expires_at IS NULL OR expires_at > %s) ORDER BY key COLLATE "C" LIMIT %s'
            ),
            (namespace, scope, time.time(), limit),
        )
        return [_fact(r) for r in rows]

    def _delete_fact(
        self,
        namespace: str,
        scope: str,
        key: str,
        *,
        expected_version: int | None = None,
        writer: Writer | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
    ) -> Op[bool]:
        now = time.time()
        p = {"ns": namespace, "sc": scope, "k": key, "ev": expected_version, "now": now}
        history = self._history_ctes(p, writer, history_limit, "forget")
        row = yield Q(
            self.q(
                "WITH w AS (DELETE FROM {s}.facts WHERE namespace = %(ns)s AND scope = %(sc)s "
                "AND key = %(k)s AND (%(ev)s::bigint IS NULL OR (version = %(ev)s AND "
                "(expires_at IS NULL OR expires_at > %(now)s))) "
                "RETURNING version, expires_at IS NULL OR expires_at > %(now)s AS live)"
                + history
                + " SELECT live FROM w"
            ),
            p,
            "one",
        )
        if row is None and expected_version is not None:
            actual = yield from self._version(namespace, scope, key, now)
            if actual != expected_version:
                raise VersionConflict(key, expected_version, actual)
        return bool(row and row[0])

    def _search_facts(
        self, namespace: str, scope: str, terms: Sequence[str], *, limit: int = 10
    ) -> Op[list[Fact]]:
        if not terms:
            return []
        rows = yield Q(
            self.q(
                f"SELECT {_FACT}, ts_rank(search, q) AS rank FROM {{s}}.facts, "
                "to_tsquery('simple', %(q)s) AS q WHERE namespace = %(ns)s AND scope = %(sc)s "
                "AND search @@ q AND (expires_at IS NULL OR expires_at > %(now)s) "
                'ORDER BY rank DESC, importance DESC, updated_at DESC, key COLLATE "C" '
                "LIMIT %(n)s"
            ),
            {"q": _tsquery(terms), "ns": namespace, "sc": scope, "now": time.time(), "n": limit},
        )
        return [_fact(r[:7], float(r[7])) for r in rows]

    def _ensure_index(self, dims: int) -> Op[None]:
        """With pgvector, the HNSW index of vectors of ``dims`` dimensions, created the first
        time this store writes such vectors (the ``ensure_hnsw`` function; it answers
        ``false``, creating nothing, where the role may not or HNSW cannot)."""
        if (
            self.pgvector_schema is None
            or self.hnsw_min_vectors is None  # exact searches: no index to maintain
            or dims in self._hnsw_dims
            or dims > HNSW_MAX_DIMS
        ):
            return
        yield Q(self.q("SELECT {s}.ensure_hnsw(%s, %s)"), (dims, self.pgvector_schema), "one")
        self._hnsw_dims.add(dims)

    def _search_fact_vectors(
        self,
        namespace: str,
        scope: str,
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
    ) -> Op[list[Fact]]:
        query = [float(x) for x in vector]
        if limit <= 0 or not query:
            return []
        now = time.time()
        if self.pgvector_schema is not None:
            ef = min(1000, max(100, 4 * limit))
            rows = yield Q(
                self.q(
                    "SELECT * FROM {s}.vector_search(%s, %s, %s, %s::real[], %s, %s, %s, %s, %s)"
                ),
                (
                    namespace,
                    scope,
                    model,
                    query,
                    limit,
                    now,
                    EXACT_ONLY if self.hnsw_min_vectors is None else self.hnsw_min_vectors,
                    ef,
                    self.pgvector_schema,
                ),
            )
            return [_fact(r[:7], float(r[7])) for r in rows]
        # The exact search without pgvector: every vector of the scope by this model and size
        # (the index on (namespace, scope, model, dims)), compared here.
        rows = yield Q(
            self.q(
                "SELECT v.key, array_send(v.embedding), f.importance, f.updated_at "
                "FROM {s}.fact_vectors v JOIN {s}.facts f ON f.namespace = v.namespace "
                "AND f.scope = v.scope AND f.key = v.key AND f.embed_model = v.model "
                "WHERE v.namespace = %s AND v.scope = %s AND v.model = %s AND v.dims = %s "
                "AND (f.expires_at IS NULL OR f.expires_at > %s)"
            ),
            (namespace, scope, model, len(query), now),
            binary=True,
        )
        if not rows:
            return []
        sims = _similarities([bytes(r[1]) for r in rows], query)
        best: dict[str, tuple[float, float, float]] = {}
        for r, sim in zip(rows, sims, strict=True):
            got = best.get(r[0])
            if got is None or sim > got[0]:
                best[r[0]] = (sim, float(r[2]), float(r[3]))
        top = sorted(best.items(), key=lambda kv: (-kv[1][0], -kv[1][1], -kv[1][2], kv[0]))
        top = top[:limit]
        facts = yield Q(
            self.q(
                f"SELECT {_FACT} FROM {{s}}.facts WHERE namespace = %s AND scope = %s "
                "AND key = ANY(%s::text[])"
            ),
            (namespace, scope, [k for k, _ in top]),
        )
        by_key = {r[0]: r for r in facts}
        return [_fact(by_key[k], v[0]) for k, v in top if k in by_key]

    def _facts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> Op[list[Fact]]:
        rows = yield Q(
            self.q(
                f"SELECT {_FACT} FROM {{s}}.facts WHERE namespace = %s AND scope = %s "
                "AND embed_model IS DISTINCT FROM %s "
                'AND (expires_at IS NULL OR expires_at > %s) ORDER BY key COLLATE "C" LIMIT %s'
            ),
            (namespace, scope, model, time.time(), limit),
        )
        return [_fact(r) for r in rows]

    def _set_fact_embedding(
        self, namespace: str, scope: str, key: str, version: int, embedding: Embedding
    ) -> Op[bool]:
        model, dims, fields, flat = _vector_rows(embedding)
        if fields:
            yield from self._ensure_index(dims)
        row = yield Q(
            self.q(
                "WITH w AS (UPDATE {s}.facts SET embed_model = %(m)s WHERE namespace = %(ns)s "
                "AND scope = %(sc)s AND key = %(k)s AND version = %(v)s "
                "AND (expires_at IS NULL OR expires_at > %(now)s) RETURNING version)"
                + _WRITE_VECTORS
            ),
            {
                "ns": namespace,
                "sc": scope,
                "k": key,
                "v": version,
                "now": time.time(),
                "m": model,
                "dims": dims,
                "fields": fields,
                "flat": flat,
            },
            "one",
        )
        return row is not None

    def _list_fact_scopes(
        self, namespace: str, prefix: str, *, limit: int | None = None
    ) -> Op[list[str]]:
        # A skip scan on the index (namespace, scope COLLATE "C"): each step of the recursion
        # seeks the next distinct scope inside [prefix, upper bound), so the cost follows the
        # number of scopes, not of facts. substr() = prefix is the exact match (no LIKE, so
        # '%', '_' and '\' are plain characters); EXISTS drops scopes whose facts expired.
        upper = prefix_upper_bound(prefix)
        below = "" if upper is None else ' AND {col} COLLATE "C" < %(hi)s::text'
        rows = yield Q(
            self.q(
                "WITH RECURSIVE s(scope) AS ((SELECT f.scope FROM {s}.facts AS f "
                'WHERE f.namespace = %(ns)s AND f.scope COLLATE "C" >= %(lo)s::text'
                + below.format(col="f.scope")
                + ' ORDER BY f.scope COLLATE "C" LIMIT 1) UNION ALL '
                "SELECT (SELECT f.scope FROM {s}.facts AS f WHERE f.namespace = %(ns)s "
                'AND f.scope COLLATE "C" > s.scope COLLATE "C"'
                + below.format(col="f.scope")
                + ' ORDER BY f.scope COLLATE "C" LIMIT 1) FROM s WHERE s.scope IS NOT NULL) '
                "SELECT s.scope FROM s WHERE s.scope IS NOT NULL "
                "AND substr(s.scope, 1, length(%(lo)s::text)) = %(lo)s::text "
                "AND EXISTS (SELECT 1 FROM {s}.facts AS f WHERE f.namespace = %(ns)s "
                "AND f.scope = s.scope AND (f.expires_at IS NULL OR f.expires_at > %(now)s)) "
                'ORDER BY s.scope COLLATE "C" LIMIT %(n)s'
            ),
            {"ns": namespace, "lo": prefix, "hi": upper, "now": time.time(), "n": limit},
        )
        return [r[0] for r in rows]

    def _history_ctes(
        self,
        params: dict[str, Any],
        writer: Writer | None,
        limit: int,
        op: str,
    ) -> str:
        """The CTEs that record a change (``params`` gains theirs; a put's value is its
        ``%(d)s``), or ``""`` without a writer (no history: the statement stays as it was)."""
        if writer is None or limit <= 0:
            return ""
        params.update(wr=writer.to_json(), keep=limit - 1)
        put = op == "put"
        return _WRITE_HISTORY.format(
            s="{s}",
            live="true" if put else "w.live",
            op="'put'" if put else "'forget'",
            data="%(d)s" if put else "NULL",
        )

    def _prune(self) -> Op[int]:
        count: int = yield Q(
            self.q("DELETE FROM {s}.facts WHERE expires_at IS NOT NULL AND expires_at <= %s"),
            (time.time(),),
            "rowcount",
        )
        return count

    # -- operations --------------------------------------------------------------------------

    def _list_conversations(
        self, prefix: str, *, limit: int = 100, before: tuple[float, str] | None = None
    ) -> Op[list[ConversationInfo]]:
        upper = prefix_upper_bound(prefix)
        below = "" if upper is None else ' AND key COLLATE "C" < %(hi)s::text'
        rows = yield Q(
            self.q(
                "SELECT key, last_seq, total_tokens, last_activity, created_at "
                'FROM {s}.conversations WHERE key COLLATE "C" >= %(lo)s::text' + below + " "
                "AND last_seq > 0 AND (%(b0)s::float8 IS NULL OR last_activity < %(b0)s "
                'OR (last_activity = %(b0)s AND key COLLATE "C" < %(b1)s::text)) '
                'ORDER BY last_activity DESC, key COLLATE "C" DESC LIMIT %(n)s'
            ),
            {
                "lo": prefix,
                "hi": upper,
                "b0": None if before is None else before[0],
                "b1": None if before is None else before[1],
                "n": limit,
            },
        )
        return [ConversationInfo.of(*row) for row in rows]

    def _erase(self, namespace: str, user_id: str) -> Op[EraseReport]:
        keys = user_keys(namespace, user_id)

        def within(col: str, prefix: str) -> str:
            return f'({col} COLLATE "C" >= %({prefix})s AND {col} COLLATE "C" < %({prefix}_hi)s)'

        mine = f"(scope = %(us)s OR {within('scope', 'ap')} OR {within('scope', 'cp')})"
        work = within("scope", "lo")
        p: dict[str, Any] = {"ns": namespace, "wns": keys.working_namespace, "us": keys.user_scope}
        for name, prefix in (
            ("lo", keys.conversation_prefix),
            ("ap", keys.agent_prefix),
            ("cp", keys.conversation_scope_prefix),
        ):
            p[name], p[name + "_hi"] = prefix, prefix_upper_bound(prefix)
        row = yield Q(
            self.q(
                "WITH k AS (SELECT key FROM {s}.conversations WHERE "
                + within("key", "lo")
                + "), h AS (DELETE FROM {s}.conversations WHERE key IN (SELECT key FROM k) "
                "RETURNING 1), m AS (DELETE FROM {s}.messages WHERE conversation IN "
                "(SELECT key FROM k) RETURNING 1), b AS (DELETE FROM {s}.batches WHERE "
                "conversation IN (SELECT key FROM k)), su AS (DELETE FROM {s}.summaries WHERE "
                + within("conversation", "lo")
                + " RETURNING 1), v AS (SELECT count(*) AS n FROM {s}.fact_vectors WHERE "
                f"(namespace = %(ns)s AND {mine}) OR (namespace = %(wns)s AND {work})), "
                f"f AS (DELETE FROM {{s}}.facts WHERE namespace = %(ns)s AND {mine} RETURNING 1), "
                f"w AS (DELETE FROM {{s}}.facts WHERE namespace = %(wns)s AND {work} RETURNING 1), "
                "hi AS (DELETE FROM {s}.fact_history WHERE "
                f"(namespace = %(ns)s AND {mine}) OR (namespace = %(wns)s AND {work}) RETURNING 1) "
                "SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM m), "
                "(SELECT count(*) FROM su), (SELECT count(*) FROM f), (SELECT count(*) FROM w), "
                "(SELECT n FROM v), (SELECT count(*) FROM hi)"
            ),
            p,
            "one",
        )
        return EraseReport(*(int(x) for x in row))

    def _delete_idle_conversations(self, namespace_prefix: str, idle_before: float) -> Op[int]:
        upper = prefix_upper_bound(namespace_prefix)
        below = "" if upper is None else ' AND key COLLATE "C" < %(hi)s::text'
        rows = yield Q(
            self.q(
                'SELECT key FROM {s}.conversations WHERE key COLLATE "C" >= %(lo)s::text'
                + below
                + " AND last_activity < %(t)s"
            ),
            {"lo": namespace_prefix, "hi": upper, "t": idle_before},
        )
        if not rows:
            return 0
        idle = [r[0] for r in rows]
        # Deleted only if still idle (an append since the read keeps the conversation).
        row = yield Q(
            self.q(
                "WITH x AS (SELECT * FROM unnest(%(keys)s::text[], %(wns)s::text[]) "
                "AS x(key, wns)), h AS (DELETE FROM {s}.conversations c USING x "
                "WHERE c.key = x.key AND c.last_activity < %(t)s RETURNING c.key, x.wns), "
                "m AS (DELETE FROM {s}.messages WHERE conversation IN (SELECT key FROM h)), "
                "b AS (DELETE FROM {s}.batches WHERE conversation IN (SELECT key FROM h)), "
                "su AS (DELETE FROM {s}.summaries WHERE conversation IN (SELECT key FROM h)), "
                "w AS (DELETE FROM {s}.facts f USING h WHERE f.namespace = h.wns AND "
                "(f.scope = h.key OR (f.scope COLLATE \"C\" >= h.key || '/' "
                "AND f.scope COLLATE \"C\" < h.key || '0'))) "
                "SELECT count(*) FROM h"
            ),
            {"keys": idle, "wns": [working_namespace_of(k) for k in idle], "t": idle_before},
            "one",
        )
        return int(row[0])

    def _fact_history(
        self, namespace: str, scope: str, key: str, *, limit: int | None = None
    ) -> Op[list[FactChange]]:
        rows = yield Q(
            self.q(
                "SELECT key, version, op, data, at, writer FROM {s}.fact_history "
                'WHERE namespace = %s AND scope COLLATE "C" = %s AND key = %s '
                "ORDER BY id DESC LIMIT %s"
            ),
            (namespace, scope, key, limit),
        )
        return [FactChange.from_row(*row) for row in rows]

    def _restore_fact(
        self,
        namespace: str,
        scope: str,
        fact: Fact,
        *,
        history: Sequence[FactChange] = (),
        embedding: Embedding | None = None,
    ) -> Op[bool]:
        model, dims, fields, flat = _vector_rows(embedding)
        if fields:
            yield from self._ensure_index(dims)
        changes = list(reversed(history))  # given newest first: ids in time order
        p = {
            "ns": namespace,
            "sc": scope,
            "k": fact.key,
            "d": dumps(fact.value),
            "t": search_text(fact.key, fact.value),
            "v": fact.version,
            "i": fact.importance,
            "ca": fact.created_at,
            "ua": fact.updated_at,
            "exp": fact.expires_at,
            "now": time.time(),
            "m": model,
            "dims": dims,
            "fields": fields,
            "flat": flat,
            "hv": [c.version for c in changes],
            "hop": [c.op for c in changes],
            "hd": [c.data() for c in changes],
            "hat": [c.at for c in changes],
            "hw": [c.writer.to_json() for c in changes],
        }
        row = yield Q(
            self.q(
                "WITH w AS (INSERT INTO {s}.facts AS f (namespace, scope, key, data, version, "
                "importance, created_at, updated_at, expires_at, search, embed_model) VALUES "
                "(%(ns)s, %(sc)s, %(k)s, %(d)s, %(v)s, %(i)s, %(ca)s, %(ua)s, %(exp)s, "
                "to_tsvector('simple', %(t)s), %(m)s) "
                "ON CONFLICT (namespace, scope, key) DO UPDATE SET data = excluded.data, "
                "version = excluded.version, importance = excluded.importance, "
                "created_at = excluded.created_at, updated_at = excluded.updated_at, "
                "expires_at = excluded.expires_at, search = excluded.search, "
                "embed_model = excluded.embed_model WHERE f.version < excluded.version "
                "OR NOT (f.expires_at IS NULL OR f.expires_at > %(now)s) "
                "RETURNING version, created_at), "
                "hd AS (DELETE FROM {s}.fact_history WHERE namespace = %(ns)s "
                'AND scope COLLATE "C" = %(sc)s AND key = %(k)s AND EXISTS (SELECT 1 FROM w)), '
                "hi AS (INSERT INTO {s}.fact_history (namespace, scope, key, version, op, data, "
                "at, writer) SELECT %(ns)s, %(sc)s, %(k)s, u.v, u.op, u.d, u.at, u.wr "
                "FROM w, unnest(%(hv)s::bigint[], %(hop)s::text[], %(hd)s::text[], "
                "%(hat)s::float8[], %(hw)s::text[]) WITH ORDINALITY AS u(v, op, d, at, wr, n) "
                "ORDER BY u.n)" + _WRITE_VECTORS
            ),
            p,
            "one",
        )
        return row is not None

    # -- the contract: sync methods ------------------------------------------------------------

    def append(
        self,
        conversation: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        return self._run(
            lambda: self._append(
                conversation,
                entries,
                run_id=run_id,
                expected_last_seq=expected_last_seq,
                idempotency_key=idempotency_key,
            )
        )

    def tail(
        self, conversation: str, *, max_tokens: int | None = None, max_messages: int | None = None
    ) -> list[Record]:
        return self._run(
            lambda: self._tail(conversation, max_tokens=max_tokens, max_messages=max_messages)
        )

    def head_and_tail(
        self,
        conversation: str,
        *,
        head: int,
        max_tokens: int | None = None,
        max_messages: int | None = None,
    ) -> tuple[list[Record], list[Record]]:
        return self._run(
            lambda: self._head_and_tail(
                conversation, head=head, max_tokens=max_tokens, max_messages=max_messages
            )
        )

    def read(
        self,
        conversation: str,
        *,
        start_seq: int = 1,
        end_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        return self._run(
            lambda: self._read(conversation, start_seq=start_seq, end_seq=end_seq, limit=limit)
        )

    def last_seq(self, conversation: str) -> int:
        return self._run(lambda: self._last_seq(conversation))

    def delete_conversation(self, conversation: str) -> int:
        return self._run(lambda: self._delete_conversation(conversation))

    def put_summary(self, conversation: str, summary: Summary) -> None:
        self._run(lambda: self._put_summary(conversation, summary))

    def latest_summary(self, conversation: str) -> Summary | None:
        return self._run(lambda: self._latest_summary(conversation))

    def claim_summary(
        self, conversation: str, end_seq: int, owner: str, *, lease_seconds: float
    ) -> bool:
        return self._run(
            lambda: self._claim_summary(conversation, end_seq, owner, lease_seconds=lease_seconds)
        )

    def put_fact(
        self,
        namespace: str,
        scope: str,
        key: str,
        data: str,
        *,
        text: str,
        importance: float = 0.0,
        expires_at: float | None = None,
        expected_version: int | None = None,
        embedding: Embedding | None = None,
        writer: Writer | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
    ) -> Fact:
        return self._run(
            lambda: self._put_fact(
                namespace,
                scope,
                key,
                data,
                text=text,
                importance=importance,
                expires_at=expires_at,
                expected_version=expected_version,
                embedding=embedding,
                writer=writer,
                history_limit=history_limit,
            )
        )

    def get_fact(self, namespace: str, scope: str, key: str) -> Fact | None:
        return self._run(lambda: self._get_fact(namespace, scope, key))

    def list_facts(self, namespace: str, scope: str, *, limit: int | None = None) -> list[Fact]:
        return self._run(lambda: self._list_facts(namespace, scope, limit=limit))

    def delete_fact(
        self,
        namespace: str,
        scope: str,
        key: str,
        *,
        expected_version: int | None = None,
        writer: Writer | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
    ) -> bool:
        return self._run(
            lambda: self._delete_fact(
                namespace,
                scope,
                key,
                expected_version=expected_version,
                writer=writer,
                history_limit=history_limit,
            )
        )

    def search_facts(
        self, namespace: str, scope: str, terms: Sequence[str], *, limit: int = 10
    ) -> list[Fact]:
        return self._run(lambda: self._search_facts(namespace, scope, terms, limit=limit))

    def search_fact_vectors(
        self,
        namespace: str,
        scope: str,
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
    ) -> list[Fact]:
        """See :meth:`Store.search_fact_vectors`: with pgvector in SQL (HNSW for a scope of
        more than ``hnsw_min_vectors`` vectors), else exactly in Python."""
        return self._run(
            lambda: self._search_fact_vectors(namespace, scope, vector, model=model, limit=limit)
        )

    def facts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> list[Fact]:
        return self._run(lambda: self._facts_to_embed(namespace, scope, model, limit=limit))

    def set_fact_embedding(
        self, namespace: str, scope: str, key: str, version: int, embedding: Embedding
    ) -> bool:
        return self._run(
            lambda: self._set_fact_embedding(namespace, scope, key, version, embedding)
        )

    def list_fact_scopes(
        self, namespace: str, prefix: str, *, limit: int | None = None
    ) -> list[str]:
        return self._run(lambda: self._list_fact_scopes(namespace, prefix, limit=limit))

    def prune(self) -> int:
        return self._run(self._prune)

    def list_conversations(
        self, prefix: str, *, limit: int = 100, before: tuple[float, str] | None = None
    ) -> list[ConversationInfo]:
        return self._run(lambda: self._list_conversations(prefix, limit=limit, before=before))

    def erase(self, namespace: str, user_id: str) -> EraseReport:
        return self._run(lambda: self._erase(namespace, user_id))

    def delete_idle_conversations(self, namespace_prefix: str, idle_before: float) -> int:
        return self._run(lambda: self._delete_idle_conversations(namespace_prefix, idle_before))

    def fact_history(
        self, namespace: str, scope: str, key: str, *, limit: int | None = None
    ) -> list[FactChange]:
        return self._run(lambda: self._fact_history(namespace, scope, key, limit=limit))

    def restore_fact(
        self,
        namespace: str,
        scope: str,
        fact: Fact,
        *,
        history: Sequence[FactChange] = (),
        embedding: Embedding | None = None,
    ) -> bool:
        return self._run(
            lambda: self._restore_fact(namespace, scope, fact, history=history, embedding=embedding)
        )

    def after_fork(self) -> None:
        """In a child process just forked: set the parent's pool and async connections aside
        (kept, never used nor closed: closing would end the parent's sessions, and psycopg
        never closes a connection it collects in a process that did not open it) and open a
        pool of the child's own (its connections are made in the background)."""
        if self._closed:
            return
        from psycopg_pool import ConnectionPool

        _carried.append(self.pool)
        _carried.extend(self._loops.values())
        self._loops = {}
        self._loops_lock = threading.Lock()
        self.pool = ConnectionPool(open=False, **self._pool_options)
        self.pool.open(wait=False)

    def close(self) -> None:
        """Close the store (and its pool, unless the application gave it one)."""
        self._closed = True
        with self._loops_lock:
            loops, self._loops = self._loops, {}
        for connections in loops.values():
            connections.finish()
        if self._own_pool:
            self.pool.close()


def _pgbouncer_param(url: str) -> tuple[str, bool | None]:
    """``url`` without its ``pgbouncer=true|false`` query parameter (libpq does not know it),
    and the parameter's value (``None`` when absent)."""
    if "?" not in url:
        return url, None
    base, query = url.split("?", 1)
    kept: list[str] = []
    found: bool | None = None
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name != "pgbouncer":
            kept.append(part)
        elif value.lower() in ("true", "1", "yes", "on"):
            found = True
        elif value.lower() in ("false", "0", "no", "off"):
            found = False
        else:
            raise InvalidInput(f"pgbouncer in the URL is true or false, not {value!r}")
    return (base + "?" + "&".join(kept) if kept else base), found


def _libpq_url(url: str) -> str:
    """psycopg takes ``postgresql://`` and ``postgres://``; drop a SQLAlchemy-style driver."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgres") else url
