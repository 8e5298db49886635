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
* Every operation is written once, as a generator of SQL statements, and driven by a sync
  connection or an async one. Async calls use an ``AsyncConnectionPool`` when the store was
  given one, and otherwise run the sync path in a worker thread.
* A lost connection raises :class:`~memory_adapters.errors.StoreUnavailable`. An operation
  that fails before it commits is retried once on a fresh connection, so the first call after
  the server comes back works.
* Opening a store from a URL makes one direct connection before the pool's, so that a wrong
  URL fails at once with what is wrong and what fixes it (:mod:`.diagnose`: a database or role
  that does not exist, a failed password, no server at host:port) rather than with the pool's
  timeout. Then the schema is migrated (``migrate=True``) or checked, and the role's
  privileges on its tables too: a schema without this version's tables, or a role that may
  not use them, raises :class:`~memory_adapters.errors.StoreNotReady` saying what to run or
  grant, at open and on any later call.

Values never reach PostgreSQL raw: messages and facts are stored as the JSON text the core
produced, in which a NUL character is the escape ``\\u0000``, so PostgreSQL's refusal of NUL
in ``text`` never loses or truncates content.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from memory_adapters.errors import (
    AppendConflict,
    StoreNotReady,
    StoreUnavailable,
    VersionConflict,
)
from memory_adapters.facts import Fact, bound_search_text
from memory_adapters.messages import AppendResult, Entry, Record, Summary
from memory_adapters.store import Store, prefix_upper_bound, store_closed

from .diagnose import connect_error, grants, ident, not_migrated, safe_url, schema_error
from .schema import MIGRATIONS, SCHEMA_VERSION, check_schema_name

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

T = TypeVar("T")
CONFLICT = "MA409"


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
_FACT = "key, data, version, importance, created_at, updated_at, expires_at"


def _record(row: Sequence[Any]) -> Record:
    return Record.from_row(row[0], row[1], row[2], row[3], row[4], row[5])


def _fact(row: Sequence[Any], score: float | None = None) -> Fact:
    return Fact.from_row(row[0], row[1], row[2], row[3], row[4], row[5], row[6], score)


def _tsquery(terms: Sequence[str]) -> str:
    """A tsquery matching any of ``terms`` (plain words: the core splits queries on \\w+)."""
    return " | ".join("'" + t.replace("'", "''").replace("\\", "\\\\") + "'" for t in terms)


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
    ) -> None:
        import psycopg
        from psycopg import sql
        from psycopg_pool import ConnectionPool

        self._psycopg = psycopg
        self.schema = check_schema_name(schema)
        self._s = sql.Identifier(self.schema).as_string(None)
        self._own_pool = pool is None
        self._closed = False
        self._url = "URL" if url is None else safe_url(url)
        self._role = self._database = "?"  # known once connected
        if pool is None:
            if url is None:
                raise ValueError("PostgresStore needs a url or a pool")
            try:
                psycopg.connect(
                    _libpq_url(url), autocommit=True, connect_timeout=connect_timeout
                ).close()
            except psycopg.OperationalError as exc:
                raise connect_error(exc, url, connect_timeout) from exc
            pool = ConnectionPool(
                _libpq_url(url),
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                kwargs={"autocommit": True, "connect_timeout": connect_timeout},
                open=False,
                name="memory-adapters",
            )
            try:
                pool.open(wait=True, timeout=timeout)
            except Exception as exc:
                pool.close()
                raise StoreUnavailable(
                    f"cannot connect to PostgreSQL at {safe_url(url)}: {exc}"
                ) from exc
        self.pool: ConnectionPool[Any] = pool
        self.async_pool = async_pool
        self._sql: dict[str, str] = {}
        try:
            if migrate:
                self.migrate()
            else:
                self.check()
        except BaseException:
            if self._own_pool:
                pool.close()
            raise

    @classmethod
    def from_pool(
        cls,
        pool: ConnectionPool[Any],
        *,
        async_pool: AsyncConnectionPool[Any] | None = None,
        schema: str = "memory_adapters",
        migrate: bool = True,
    ) -> PostgresStore:
        """A store over an application's existing pool(s); the application closes them."""
        return cls(pool=pool, async_pool=async_pool, schema=schema, migrate=migrate)

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
        pool = self.async_pool
        assert pool is not None
        psycopg = self._psycopg
        for attempt in (0, 1):
            done = False
            try:
                async with pool.connection() as conn:
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
                    await pool.check()
                    continue
                raise StoreUnavailable(f"PostgreSQL: {exc}") from exc
            except psycopg.Error as exc:
                mapped = self._not_ready(exc)
                if mapped is not None:
                    raise mapped from exc
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _offload(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Async twins: native on the async pool when there is one, else a worker thread."""
        op = getattr(self, f"_{fn.__name__}", None)
        if self.async_pool is None or op is None:
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
                self.q("SELECT * FROM {s}.tail_within(%s, %s, %s)"),
                (conversation, max_tokens, max_messages),
            )
        return [_record(r) for r in reversed(rows)]

    def _head_and_tail(
        self,
        conversation: str,
        *,
        head: int,
        max_tokens: int | None = None,
        max_messages: int | None = None,
    ) -> Op[tuple[list[Record], list[Record]]]:
        rows = yield Q(
            self.q("SELECT * FROM {s}.head_and_tail(%s, %s, %s, %s)"),
            (conversation, head, max_tokens, max_messages),
        )
        first = [_record(r[1:]) for r in rows if r[0] == 0]
        last = [_record(r[1:]) for r in rows if r[0] == 1]
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
        return [_record(r) for r in rows]

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
        yield Q(
            self.q(
                "INSERT INTO {s}.summaries (conversation, end_seq, start_seq, text, tokens, "
                "created_at) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (conversation, end_seq) "
                "DO UPDATE SET start_seq = excluded.start_seq, text = excluded.text, "
                "tokens = excluded.tokens, created_at = excluded.created_at"
            ),
            (
                conversation,
                summary.end_seq,
                summary.start_seq,
                json.dumps(summary.text),
                summary.tokens,
                summary.created_at or time.time(),
            ),
            "none",
        )

    def _latest_summary(self, conversation: str) -> Op[Summary | None]:
        row = yield Q(
            self.q(
                "SELECT start_seq, end_seq, text, tokens, created_at FROM {s}.summaries "
                "WHERE conversation = %s ORDER BY end_seq DESC LIMIT 1"
            ),
            (conversation,),
            "one",
        )
        if row is None:
            return None
        return Summary(int(row[0]), int(row[1]), json.loads(row[2]), int(row[3]), float(row[4]))

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
    ) -> Op[Fact]:
        now = time.time()
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
        }
        live = "(f.expires_at IS NULL OR f.expires_at > %(now)s)"
        if expected_version is None or expected_version == 0:
            guard = "" if expected_version is None else f"WHERE NOT {live}"
            row = yield Q(
                self.q(
                    "INSERT INTO {s}.facts AS f (namespace, scope, key, data, version, importance, "
                    "created_at, updated_at, expires_at, search) VALUES (%(ns)s, %(sc)s, %(k)s, "
                    "%(d)s, 1, %(i)s, %(now)s, %(now)s, %(exp)s, to_tsvector('simple', %(t)s)) "
                    "ON CONFLICT (namespace, scope, key) DO UPDATE SET data = excluded.data, "
                    f"version = CASE WHEN {live} THEN f.version + 1 ELSE 1 END, "
                    f"created_at = CASE WHEN {live} THEN f.created_at "
                    "ELSE excluded.created_at END, "
                    "importance = excluded.importance, updated_at = excluded.updated_at, "
                    f"expires_at = excluded.expires_at, search = excluded.search {guard} "
                    "RETURNING version, created_at"
                ),
                p,
                "one",
            )
        else:
            row = yield Q(
                self.q(
                    "UPDATE {s}.facts AS f SET data = %(d)s, version = f.version + 1, "
                    "importance = %(i)s, updated_at = %(now)s, expires_at = %(exp)s, "
                    "search = to_tsvector('simple', %(t)s) WHERE namespace = %(ns)s AND "
                    f"scope = %(sc)s AND key = %(k)s AND version = %(ev)s AND {live} "
                    "RETURNING version, created_at"
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
        self, namespace: str, scope: str, key: str, *, expected_version: int | None = None
    ) -> Op[bool]:
        now = time.time()
        row = yield Q(
            self.q(
                "DELETE FROM {s}.facts WHERE namespace = %(ns)s AND scope = %(sc)s AND key = %(k)s "
                "AND (%(ev)s::bigint IS NULL OR (version = %(ev)s AND "
                "(expires_at IS NULL OR expires_at > %(now)s))) "
                "RETURNING expires_at IS NULL OR expires_at > %(now)s"
            ),
            {"ns": namespace, "sc": scope, "k": key, "ev": expected_version, "now": now},
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
                "ORDER BY rank DESC, importance DESC, updated_at DESC LIMIT %(n)s"
            ),
            {"q": _tsquery(terms), "ns": namespace, "sc": scope, "now": time.time(), "n": limit},
        )
        return [_fact(r[:7], float(r[7])) for r in rows]

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

    def _prune(self) -> Op[int]:
        count: int = yield Q(
            self.q("DELETE FROM {s}.facts WHERE expires_at IS NOT NULL AND expires_at <= %s"),
            (time.time(),),
            "rowcount",
        )
        return count

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
            )
        )

    def get_fact(self, namespace: str, scope: str, key: str) -> Fact | None:
        return self._run(lambda: self._get_fact(namespace, scope, key))

    def list_facts(self, namespace: str, scope: str, *, limit: int | None = None) -> list[Fact]:
        return self._run(lambda: self._list_facts(namespace, scope, limit=limit))

    def delete_fact(
        self, namespace: str, scope: str, key: str, *, expected_version: int | None = None
    ) -> bool:
        return self._run(
            lambda: self._delete_fact(namespace, scope, key, expected_version=expected_version)
        )

    def search_facts(
        self, namespace: str, scope: str, terms: Sequence[str], *, limit: int = 10
    ) -> list[Fact]:
        return self._run(lambda: self._search_facts(namespace, scope, terms, limit=limit))

    def list_fact_scopes(
        self, namespace: str, prefix: str, *, limit: int | None = None
    ) -> list[str]:
        return self._run(lambda: self._list_fact_scopes(namespace, prefix, limit=limit))

    def prune(self) -> int:
        return self._run(self._prune)

    def close(self) -> None:
        """Close the store (and its pool, unless the application gave it one)."""
        self._closed = True
        if self._own_pool:
            self.pool.close()


def _libpq_url(url: str) -> str:
    """psycopg takes ``postgresql://`` and ``postgres://``; drop a SQLAlchemy-style driver."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgres") else url
