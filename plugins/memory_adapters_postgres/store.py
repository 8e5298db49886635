"""``PostgresStore``: the store contract over PostgreSQL with psycopg 3 and psycopg-pool.

* An append is one call of the ``append_batch`` function (one round trip): it locks the
  conversation's head row, so seq order is commit order, batches never interleave and
  readers never see gaps; a conditional append raises a conflict; an idempotency key makes a
  retried persist a no-op.
* Each message stores the running token total before it, so the tail within a token budget
  is one index range scan on ``(conversation, start_tokens, seq)``, whatever the length of
  the conversation.
* Keyword search: the store finds candidates and counts statistics
  (:meth:`~memory_adapters.store.Store.match_terms`); :mod:`memory_adapters.ranking` scores
  them. A fact's terms are postings of ``fact_terms`` (one row per distinct term, keyed
  ``(namespace, scope, term, key)``), written by the same statement as the fact (migration 6,
  :mod:`.facts`); a search reads the scope's own posting lists. Metadata is a ``json``
  column, returned with the fact and used by filters, never indexed.
* The scopes under a prefix (``list_fact_scopes``) are listed by a skip scan of the index
  ``(namespace, scope COLLATE "C")`` (migration 2): one index seek per distinct scope.
* Semantic recall (migration 3): a fact's vectors are rows of ``fact_vectors`` (one per
  field, a ``real[]``), written in the same statement as the fact and removed with it by a
  foreign key. With pgvector the scope's vectors are compared in SQL, which answers only the
  facts within float32 rounding of the best, with their vectors, scored exactly in Python
  (the ``vector_candidates`` function, migration 7: the reference's scores and order); only
  when ``hnsw_min_vectors`` is given does a scope of more vectors than that go through a
  partial HNSW index per dims (approximate, see docs/postgres.md); without pgvector (or
  ``vector_search="exact"``) the scope's vectors are fetched and compared in Python (numpy
  when importable), linear in the scope's facts.
* Every operation is written once, as a generator of SQL statements (:mod:`.sql`; the
  operations by concern in :mod:`.log`, :mod:`.facts`, :mod:`.vectors` and
  :mod:`.operations`), and driven by a sync
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
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from memory_adapters.embedders import Embedding
from memory_adapters.errors import (
    InvalidInput,
    StoreNotReady,
    StoreUnavailable,
)
from memory_adapters.facts import Fact, FactFilter
from memory_adapters.messages import AppendResult, Entry, Record, Summary
from memory_adapters.operations import (
    DEFAULT_HISTORY_LIMIT,
    ConversationInfo,
    EraseReport,
    FactChange,
    Writer,
)
from memory_adapters.ranking import TermMatches
from memory_adapters.store import (
    Store,
    renew_after_fork,
    run_steps,
    store_closed,
)

from .diagnose import (
    connect_error,
    grants,
    ident,
    no_pgvector,
    not_migrated,
    safe_url,
    schema_error,
)
from .facts import FactOps
from .log import LogOps
from .operations import Operations
from .schema import MIGRATIONS, SCHEMA_VERSION, check_schema_name
from .sql import Op, Q

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    from memory_adapters.steps import StoreCall

T = TypeVar("T")
CONFLICT = "MA409"
VectorSearch = Literal["auto", "pgvector", "exact"]

_PIPELINED = frozenset(
    (
        "tail",
        "head_and_tail",
        "read",
        "last_seq",
        "latest_summary",
        "get_fact",
        "get_facts",
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


_carried: list[Any] = []
"""What a forked child inherited of its parent's connections: kept, so that it is never
closed (nor used) in the child."""


class PostgresStore(LogOps, FactOps, Operations, Store):
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
        index (approximate: what the index finds is scored exactly, but it may miss facts);
        ``None`` (the default): every search is exact."""
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
            self._run(self._index_old_facts)
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
        metadata: str | None = None,
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
                metadata=metadata,
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

    def match_terms(
        self,
        namespace: str,
        scope: str,
        terms: Sequence[str],
        *,
        where: FactFilter | None = None,
    ) -> TermMatches:
        return self._run(lambda: self._match_terms(namespace, scope, terms, where=where))

    def get_facts(self, namespace: str, scope: str, keys: Sequence[str]) -> list[Fact]:
        return self._run(lambda: self._get_facts(namespace, scope, keys))

    def search_fact_vectors(
        self,
        namespace: str,
        scope: str,
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
        keys: Sequence[str] | None = None,
        where: FactFilter | None = None,
    ) -> list[Fact]:
        """See :meth:`Store.search_fact_vectors`: with pgvector in SQL (HNSW for a scope of
        more than ``hnsw_min_vectors`` vectors), else exactly in Python."""
        return self._run(
            lambda: self._search_fact_vectors(
                namespace, scope, vector, model=model, limit=limit, keys=keys, where=where
            )
        )

    def facts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> list[Fact]:
        return self._run(lambda: self._facts_to_embed(namespace, scope, model, limit=limit))

    def refresh_fact(self, namespace: str, scope: str, key: str, version: int, ttl: float) -> bool:
        return self._run(lambda: self._refresh_fact(namespace, scope, key, version, ttl))

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
