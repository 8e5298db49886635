"""``SQLiteStore``: the store contract over SQLite (stdlib ``sqlite3``, WAL, FTS5).

* Every append is one ``BEGIN IMMEDIATE`` transaction: it takes the database's write lock,
  so seqs are gapless and batches never interleave, across threads and processes.
* Each message stores the running token total before it (``start_tokens``); the tail within
  a token budget starts at the first seq the index ``(conversation, start_tokens)`` finds
  within it, and is read as a range of the primary key ``(conversation, seq)``.
* Fact search uses an FTS5 table whose rows also carry an ``owner`` token (a hash of the
  namespace and scope), so a search only ever matches the scope's own facts.
* Fact vectors (semantic recall) live in ``ma_fact_vectors``, one row per (fact, field): the
  model, the dimensions and the vector as little-endian float32 bytes; ``ma_facts.embed_model``
  names the model that embedded the fact (``NULL``: none). A trigger deletes a fact's vectors
  with it. A search reads one scope's vectors of one model and dimensions and ranks them
  exactly (:mod:`memory_adapters.exact_vectors`: numpy when importable, else pure Python):
  linear in the scope's facts, with no extension to load.
* The scopes under a prefix (``list_fact_scopes``) are listed by a skip scan of the unique
  index ``(namespace, scope, key)``: one index seek per distinct scope (:func:`scopes_sql`).
* A database file deleted or replaced while the store has it open would silently take later
  writes into the old, unlinked file, which no other connection sees. The store remembers
  the file's identity (device and inode) when it opens it and compares it on every operation
  (one ``os.stat``); once the file is gone or is another file, every call raises
  :class:`~memory_adapters.errors.StoreUnavailable`, and a new store must be opened. (The
  store's own connections keep the old inode allocated, so a new file cannot take its
  number.) Not for ``:memory:`` databases.
* A process forked while the store had connections open (``multiprocessing``'s fork start
  method, a pre-forking server) must not use them: SQLite's lock bookkeeping and the WAL
  index would be shared with the parent. In the child the store closes the connections it
  inherited (no other process sees that: a child holds none of the parent's locks) and opens
  its own as it needs them; one another thread of the parent was using at the fork is never
  used nor closed in the child (closing it could undo the parent's write in the shared WAL
  index). A ``:memory:`` database is the child's own copy.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from memory_adapters.embedders import Embedding
from memory_adapters.errors import AppendConflict, StoreUnavailable, VersionConflict
from memory_adapters.exact_vectors import Candidate, order, pack, screen
from memory_adapters.facts import Fact, search_text
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

if TYPE_CHECKING:
    from memory_adapters.steps import StoreCall

SCHEMA = """
CREATE TABLE IF NOT EXISTS ma_conversations (
    key TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    total_tokens INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ma_messages (
    conversation TEXT NOT NULL,
    seq INTEGER NOT NULL,
    batch INTEGER NOT NULL,
    start_tokens INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    role TEXT NOT NULL,
    data TEXT NOT NULL,
    run_id TEXT,
    idem_key TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (conversation, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ma_messages_tokens ON ma_messages (conversation, start_tokens);
CREATE UNIQUE INDEX IF NOT EXISTS ma_messages_idem
    ON ma_messages (conversation, idem_key) WHERE idem_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS ma_summaries (
    conversation TEXT NOT NULL,
    end_seq INTEGER NOT NULL,
    start_seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (conversation, end_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ma_facts (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    data TEXT NOT NULL,
    version INTEGER NOT NULL,
    importance REAL NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    UNIQUE (namespace, scope, key)
);
CREATE INDEX IF NOT EXISTS ma_facts_expiry ON ma_facts (expires_at) WHERE expires_at IS NOT NULL;
CREATE VIRTUAL TABLE IF NOT EXISTS ma_facts_fts USING fts5(
    owner, text, tokenize = 'unicode61 remove_diacritics 2'
);
"""
"""Version 1: the conversation log, summaries, facts and their full-text index."""

VECTORS = """
ALTER TABLE ma_facts ADD COLUMN embed_model TEXT;
CREATE TABLE IF NOT EXISTS ma_fact_vectors (
    fact_id INTEGER NOT NULL,
    field TEXT NOT NULL,
    owner TEXT NOT NULL,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    expires_at REAL,
    vector BLOB NOT NULL,
    UNIQUE (fact_id, field)
);
CREATE INDEX IF NOT EXISTS ma_fact_vectors_search
    ON ma_fact_vectors (owner, model, dims, expires_at);
CREATE TRIGGER IF NOT EXISTS ma_fact_vectors_gone AFTER DELETE ON ma_facts BEGIN
    DELETE FROM ma_fact_vectors WHERE fact_id = old.id;
END;
"""
"""Version 2: fact embeddings. ``ma_facts.embed_model`` is the model that embedded a fact
(``NULL``: none; set with no vectors: deliberately unindexed by that model);
``ma_fact_vectors`` holds one float32 vector per indexed field, with the fact's scope (as its
``owner`` hash) and expiry copied, so that a search is one range of the index
``(owner, model, dims, expires_at)`` and reads nothing but vectors. (It is a rowid table:
rows of a vector of up to ~1,000 dimensions stay on their page, where a ``WITHOUT ROWID``
table would spill every vector of 256 dimensions or more to an overflow page.) A fact's
vectors are rewritten whenever its expiry can change (every ``put_fact``). The trigger
deletes a fact's vectors with the fact (expiry, ``delete_fact``, ``prune``)."""

OPERATIONS = """
ALTER TABLE ma_conversations ADD COLUMN created_at REAL NOT NULL DEFAULT 0;
ALTER TABLE ma_conversations ADD COLUMN last_activity REAL NOT NULL DEFAULT 0;
UPDATE ma_conversations SET
    created_at = coalesce((SELECT m.created_at FROM ma_messages AS m
        WHERE m.conversation = ma_conversations.key ORDER BY m.seq LIMIT 1), 0),
    last_activity = coalesce((SELECT m.created_at FROM ma_messages AS m
        WHERE m.conversation = ma_conversations.key ORDER BY m.seq DESC LIMIT 1), 0);
CREATE TABLE IF NOT EXISTS ma_fact_history (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    op TEXT NOT NULL,
    data TEXT,
    at REAL NOT NULL,
    writer TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ma_fact_history_key ON ma_fact_history (namespace, scope, key, id);
"""
"""Version 3: operations (issue 14). ``ma_conversations`` records when a conversation was
created and last appended to (existing rows take the times of their first and newest
message), for listing and retention; it has no index on them, so an append updates its head
row as before (listing sorts the conversations of one key range). ``ma_fact_history`` keeps
each put and forget of a fact with its writer (JSON), written in the fact's transaction."""

SUMMARY_MODEL = """
ALTER TABLE ma_summaries ADD COLUMN model TEXT;
"""
"""Version 4: summaries made in the background (issue 15). ``ma_summaries.model`` names the
summarizer that made a summary (``NULL``: a ``summarize`` hook, or made before). A claim on a
conversation's next summary (``claim_summary``) is the row at ``end_seq = -1``: the claimed
end seq in ``start_seq``, the owner in ``text``, ``tokens = -1``, the lease's end in
``created_at``; it goes with the conversation like its summaries. Independent of version 3:
it applies after whatever comes before it."""

MIGRATIONS = (SCHEMA, VECTORS, OPERATIONS, SUMMARY_MODEL)
"""The scripts that bring a database from version ``i`` (``PRAGMA user_version``) to
``i + 1``, in order. A new database runs them all; an existing one the ones it lacks, in one
transaction. Add a script to change the schema; never edit one that was released."""

SCHEMA_VERSION = len(MIGRATIONS)

_MSG = "seq, data, tokens, batch, run_id, created_at"
_FACT = "key, data, version, importance, created_at, updated_at, expires_at"


def scopes_sql(*, bounded: bool) -> str:
    """The query of ``list_fact_scopes`` (parameters ``ns``, ``lo`` = the prefix, ``hi`` =
    its upper bound when ``bounded``, ``now``, ``n`` = the limit or -1).

    A skip scan on the unique index ``(namespace, scope, key)``: each step of the recursion
    seeks the next distinct scope inside ``[prefix, upper bound)``, so the cost follows the
    number of scopes, not of facts. ``substr() = prefix`` is the exact match (no ``LIKE``:
    ``%``, ``_`` and ``\\`` are plain characters); ``EXISTS`` drops scopes whose facts have
    all expired.
    """
    below = " AND {col} < :hi" if bounded else ""
    return (
        "WITH RECURSIVE s(scope) AS ("
        "SELECT (SELECT min(scope) FROM ma_facts WHERE namespace = :ns AND scope >= :lo"
        + below.format(col="scope")
        + ") UNION ALL SELECT (SELECT min(f.scope) FROM ma_facts AS f "
        "WHERE f.namespace = :ns AND f.scope > s.scope"
        + below.format(col="f.scope")
        + ") FROM s WHERE s.scope IS NOT NULL) "
        "SELECT scope FROM s WHERE scope IS NOT NULL "
        "AND substr(scope, 1, length(:lo)) = :lo AND EXISTS (SELECT 1 FROM ma_facts AS f "
        "WHERE f.namespace = :ns AND f.scope = s.scope "
        "AND (f.expires_at IS NULL OR f.expires_at > :now)) ORDER BY scope LIMIT :n"
    )


def _statements(script: str) -> list[str]:
    """The statements of a migration script (``sqlite3.complete_statement`` keeps a
    trigger's body, which has semicolons of its own, in one statement)."""
    out: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    if current.strip():
        out.append(current.strip())
    return out


def _owner(namespace: str, scope: str) -> str:
    return "o" + hashlib.sha256(f"{namespace}\x00{scope}".encode()).hexdigest()[:32]


def _insert_vectors(
    db: sqlite3.Connection, fact_id: int, owner: str, expires_at: float | None, embedding: Embedding
) -> None:
    db.executemany(
        "INSERT INTO ma_fact_vectors (fact_id, field, owner, model, dims, expires_at, vector) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (fact_id, field, owner, embedding.model, embedding.dims, expires_at, pack(vector))
            for field, vector in embedding.vectors.items()
        ],
    )


def _record(
    db: sqlite3.Connection,
    namespace: str,
    scope: str,
    change: tuple[str, int, str, str | None, float, str],
    limit: int,
) -> None:
    """Add ``change`` (key, version, op, data, at, writer JSON) to the fact's history and
    keep its newest ``limit`` versions, in the caller's transaction."""
    db.execute(
        "INSERT INTO ma_fact_history (namespace, scope, key, version, op, data, at, writer) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (namespace, scope, *change),
    )
    db.execute(
        "DELETE FROM ma_fact_history WHERE namespace = :ns AND scope = :sc AND key = :k "
        "AND id <= (SELECT id FROM ma_fact_history WHERE namespace = :ns AND scope = :sc "
        "AND key = :k ORDER BY id DESC LIMIT 1 OFFSET :keep)",
        {"ns": namespace, "sc": scope, "k": change[0], "keep": limit},
    )


def _in_ranges(column: str, exact: Sequence[str], prefixes: Sequence[str]) -> tuple[str, list[str]]:
    """A condition on ``column``: equal to one of ``exact`` or starting with one of
    ``prefixes`` (index ranges, no pattern syntax), and its parameters."""
    terms: list[str] = []
    params: list[str] = []
    for value in exact:
        terms.append(f"{column} = ?")
        params.append(value)
    for prefix in prefixes:
        upper = prefix_upper_bound(prefix)
        if upper is None:
            terms.append("1")
        else:
            terms.append(f"({column} >= ? AND {column} < ?)")
            params += [prefix, upper]
    return "(" + " OR ".join(terms or ["0"]) + ")", params


def _fact(row: tuple[Any, ...], score: float | None = None) -> Fact:
    return Fact.from_row(row[0], row[1], row[2], row[3], row[4], row[5], row[6], score)


_T = TypeVar("_T")

_QUICK_READS = frozenset(
    ("head_and_tail", "tail", "read", "last_seq", "latest_summary", "get_fact", "list_facts")
)


def _quick(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call of ``method`` is one :meth:`SQLiteStore._offload` makes on the event loop:
    one append (one transaction), a run's steps (:func:`~memory_adapters.store.run_steps`, one
    transaction), or reads of a window's size (a tail or a read with a bound, the working
    memory, one fact), alone or batched. A call that did nothing when the database was
    locked can be made again; a batch of several writes could not (the first may have
    happened), and a read of a whole conversation or of every fact of a scope is not kept
    on the event loop."""
    if method == "append":
        return True
    if method == "batch":
        calls: Sequence[StoreCall] = args[0] if args else kwargs["calls"]
        return (
            run_steps(calls) is not None
            or (len(calls) == 1 and calls[0].method == "append")
            or all(c.method in _QUICK_READS and _quick(c.method, c.args, c.kwargs) for c in calls)
        )
    if method == "tail":
        return kwargs.get("max_tokens") is not None or kwargs.get("max_messages") is not None
    if method == "read":
        return kwargs.get("limit") is not None or kwargs.get("end_seq") is not None
    if method == "list_facts":
        namespace = args[0] if args else kwargs.get("namespace", "")
        return kwargs.get("limit") is not None or str(namespace).endswith("#working")
    return method in _QUICK_READS


def _locked(exc: StoreUnavailable) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" (or "busy"): nothing happened."""
    cause = exc.__cause__
    if not isinstance(cause, sqlite3.OperationalError):
        return False
    code = getattr(cause, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(cause) or "busy" in str(cause)


_carried: list[sqlite3.Connection] = []
"""Connections a forked child inherited in use by another thread of its parent: kept, so
that they are never closed (nor used) in the child."""


class SQLiteStore(Store):
    """A store in one SQLite file, shared safely by threads and processes."""

    scheme = "sqlite"

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        self.timeout = timeout
        self._memory = self.path in (":memory:", "")
        # Connections of every thread open the file found here now, even if the process
        # changes its working directory later.
        self._file = self.path if self._memory else os.path.abspath(self.path)
        # (st_dev, st_ino) of the database file when the store opened it; and, once that
        # file was deleted or replaced, why the store can no longer be used.
        self._identity: tuple[int, int] | None = None
        self._lost: str | None = None
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        # A private in-memory database exists only in its one connection: share it, serialized.
        self._shared: sqlite3.Connection | None = None
        self._shared_lock = threading.RLock()
        self._closed = False
        # How many calls are using each connection (by id): a connection in use when the
        # process forks is not closed in the child (see after_fork).
        self._busy: dict[int, int] = {}
        with self._connection() as db:
            self._migrate(db)
        renew_after_fork(self)

    # -- connections ---------------------------------------------------------------------------

    def _connect(self, *, wait: bool = True) -> sqlite3.Connection:
        """A new connection to the file; with ``wait=False`` one whose statements never wait
        for a lock (``busy_timeout`` 0: "database is locked" at once), for :meth:`_offload`."""
        if self._closed:
            raise store_closed(type(self).__name__)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                db = sqlite3.connect(
                    self._file, timeout=self.timeout, isolation_level=None, check_same_thread=False
                )
                db.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
                if not self._memory:
                    # Switching a new file to WAL can report "locked" without waiting while
                    # another process does the same: retry until the timeout.
                    db.execute("PRAGMA journal_mode = WAL")
                    db.execute("PRAGMA synchronous = NORMAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise StoreUnavailable(
                        f"cannot open SQLite database {self.path!r}: {exc}"
                    ) from exc
                time.sleep(0.01)
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        if not wait:
            db.execute("PRAGMA busy_timeout = 0")
        with self._all_lock:
            self._all.append(db)
        return db

    def _stat(self) -> tuple[int, int] | None:
        """The identity (device, inode) of the file at the store's path, ``None`` if none."""
        try:
            st = os.stat(self._file)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:  # e.g. a directory made unreadable: perhaps only for now
            raise StoreUnavailable(f"cannot check SQLite database {self.path!r}: {exc}") from exc
        return st.st_dev, st.st_ino

    def _check_file(self) -> None:
        """Raise :class:`StoreUnavailable` if the database file was deleted or replaced since
        the store opened it, and on every call after that."""
        if self._lost is None and self._stat() != self._identity:
            self._lost = (
                f"the SQLite database file {self.path!r} was deleted or replaced while this "
                "store had it open; what this store would write would go to the old file, "
                "which nothing else sees. Open a new store (or Memory) on the path"
            )
        if self._lost is not None:
            raise StoreUnavailable(self._lost)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        try:
            if self._memory:
                with self._shared_lock:
                    if self._shared is None:
                        self._shared = self._connect()
                    yield self._shared
                return
            if self._identity is not None and not self._closed:
                self._check_file()  # before a new thread's connect could create a new file
            local = self._local
            db: sqlite3.Connection | None = getattr(local, "inline", None) or getattr(
                local, "db", None
            )
            if db is None:
                db = self._local.db = self._connect()
            if self._identity is None:
                self._identity = self._stat()  # the file the first connection opened
            key = id(db)  # a connection is used by one thread at a time: no lock needed
            busy = self._busy
            busy[key] = busy.get(key, 0) + 1
            try:
                yield db
            finally:
                left = busy.get(key, 1) - 1
                if left:
                    busy[key] = left
                else:
                    busy.pop(key, None)
        except sqlite3.OperationalError as exc:
            # locked past the timeout, disk full, file gone: the operation did not happen
            raise StoreUnavailable(f"SQLite database {self.path!r}: {exc}") from exc
        except sqlite3.ProgrammingError as exc:
            if self._closed:
                raise store_closed(type(self).__name__) from exc
            raise

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the database's write lock from its first statement."""
        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _migrate(self, db: sqlite3.Connection) -> None:
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version >= SCHEMA_VERSION:
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            (version,) = db.execute("PRAGMA user_version").fetchone()
            if version < SCHEMA_VERSION:
                for script in MIGRATIONS[version:]:
                    for statement in _statements(script):
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    async def abatch(self, calls: Sequence[StoreCall]) -> list[Any]:
        """Async :meth:`batch`: the calls together, on the event loop or in one worker thread
        (:meth:`_offload`), not one hop each."""
        return await self._offload(self.batch, calls)

    def _connect_inline(self) -> sqlite3.Connection:
        """The connection :meth:`_offload` uses on the event loop (of the file the store
        opened: checked first, as :meth:`_connection` does for a new thread's)."""
        with self._connection():  # raises as any call would: store closed, file lost
            pass
        return self._connect(wait=False)

    async def _offload(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """Make a quick call (:func:`_quick`: a turn's reads and writes) on the event loop, as
        a hand-written layer calling ``sqlite3`` does, on a connection that never waits for a
        lock; when the database is locked (another connection is writing), the call did
        nothing and is made again in a worker thread, where it waits up to ``timeout`` as the
        sync method does. Any other call is made in a worker thread."""
        if self._memory or not _quick(getattr(fn, "__name__", ""), args, kwargs):
            return await asyncio.to_thread(fn, *args, **kwargs)
        local = self._local
        inline: sqlite3.Connection | None = getattr(local, "nowait", None)
        if inline is None:  # connecting may wait (a new file turning to WAL): not on the loop
            made = await asyncio.to_thread(self._connect_inline)
            inline = getattr(local, "nowait", None)
            if inline is None:
                inline = local.nowait = made
        local.inline = inline
        try:
            return fn(*args, **kwargs)
        except StoreUnavailable as exc:
            if not _locked(exc):
                raise
        finally:
            local.inline = None
        return await asyncio.to_thread(fn, *args, **kwargs)

    def after_fork(self) -> None:
        """In a child process just forked: forget the parent's connections (closing those no
        thread was using, keeping the others open and unused for the child's lifetime), so
        that every thread of the child opens its own; new locks (another thread of the
        parent may have held one at the fork)."""
        if self._closed:
            return
        busy = set(self._busy)
        for db in self._all:
            if db is self._shared:
                continue
            if id(db) in busy:
                _carried.append(db)
                continue
            try:
                db.close()
            except sqlite3.Error:
                _carried.append(db)
        self._all = []
        self._busy = {}
        self._local = threading.local()
        self._all_lock = threading.Lock()
        self._shared_lock = threading.RLock()
        shared = self._shared
        if shared is not None:  # the child's own copy of the database: finish what was cut
            try:
                if shared.in_transaction:
                    shared.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._all.append(shared)

    def close(self) -> None:
        self._closed = True
        with self._all_lock:
            for db in self._all:
                db.close()
            self._all.clear()

    # -- conversation log ----------------------------------------------------------------------

    def append(
        self,
        conversation: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        with self._write() as db:
            return self._append(
                db, conversation, entries, run_id, expected_last_seq, idempotency_key, time.time()
            )

    def batch(self, calls: Sequence[StoreCall]) -> list[Any]:
        """A run's steps (:func:`~memory_adapters.store.run_steps`) in one write transaction;
        other calls one after the other."""
        steps = run_steps(calls)
        if steps is None:
            return super().batch(calls)
        now = time.time()
        with self._write() as db:
            return [
                self._append(db, steps.conversation, batch, steps.run_id, None, key, now)
                for batch, key in zip(steps.batches, steps.keys, strict=True)
            ]

    def _append(
        self,
        db: sqlite3.Connection,
        conversation: str,
        entries: Sequence[Entry],
        run_id: str | None,
        expected_last_seq: int | None,
        idempotency_key: str | None,
        now: float,
    ) -> AppendResult:
        """One append, inside the caller's write transaction."""
        if idempotency_key is not None:
            row = db.execute(
                "SELECT batch FROM ma_messages WHERE conversation = ? AND idem_key = ?",
                (conversation, idempotency_key),
            ).fetchone()
            if row is not None:
                (last,) = db.execute(
                    "SELECT max(seq) FROM ma_messages WHERE conversation = ? AND batch = ?",
                    (conversation, row[0]),
                ).fetchone()
                return AppendResult(row[0], last, duplicate=True)
        head = db.execute(
            "SELECT last_seq, total_tokens FROM ma_conversations WHERE key = ?", (conversation,)
        ).fetchone()
        last_seq, total = head if head is not None else (0, 0)
        if expected_last_seq is not None and expected_last_seq != last_seq:
            raise AppendConflict(conversation, expected_last_seq, last_seq)
        first = last_seq + 1
        rows = []
        for i, e in enumerate(entries):
            rows.append(
                (
                    conversation,
                    first + i,
                    first,
                    total,
                    e.tokens,
                    e.role,
                    e.data,
                    run_id,
                    idempotency_key if i == 0 else None,
                    now,
                )
            )
            total += e.tokens
        db.executemany(
            "INSERT INTO ma_messages (conversation, seq, batch, start_tokens, tokens, role, "
            "data, run_id, idem_key, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        db.execute(
            "INSERT INTO ma_conversations (key, last_seq, total_tokens, created_at, "
            "last_activity) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET last_seq = excluded.last_seq, "
            "total_tokens = excluded.total_tokens, last_activity = excluded.last_activity",
            (conversation, first + len(entries) - 1, total, now, now),
        )
        return AppendResult(first, first + len(entries) - 1)

    def tail(
        self, conversation: str, *, max_tokens: int | None = None, max_messages: int | None = None
    ) -> list[Record]:
        limit = -1 if max_messages is None else max_messages
        with self._connection() as db:
            if max_tokens is None:
                rows = db.execute(
                    f"SELECT {_MSG} FROM ma_messages WHERE conversation = ? "
                    "ORDER BY seq DESC LIMIT ?",
                    (conversation, limit),
                ).fetchall()
            else:
                # start_tokens grows with seq: the rows within the budget are the seqs from
                # the first one within it, found in the index (conversation, start_tokens)
                # alone, and read by a range of the primary key (not one lookup each)
                rows = db.execute(
                    f"SELECT {_MSG} FROM ma_messages WHERE conversation = :c AND seq >= ("
                    "SELECT seq FROM ma_messages WHERE conversation = :c AND start_tokens >= "
                    "(SELECT total_tokens FROM ma_conversations WHERE key = :c) - :budget "
                    "ORDER BY start_tokens, seq LIMIT 1) ORDER BY seq DESC LIMIT :n",
                    {"c": conversation, "budget": max_tokens, "n": limit},
                ).fetchall()
        return Record.from_rows(reversed(rows))

    def read(
        self,
        conversation: str,
        *,
        start_seq: int = 1,
        end_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        with self._connection() as db:
            rows = db.execute(
                f"SELECT {_MSG} FROM ma_messages WHERE conversation = ? AND seq >= ? AND seq <= ? "
                "ORDER BY seq LIMIT ?",
                (
                    conversation,
                    start_seq,
                    end_seq if end_seq is not None else 2**62,
                    -1 if limit is None else limit,
                ),
            ).fetchall()
        return Record.from_rows(rows)

    def last_seq(self, conversation: str) -> int:
        with self._connection() as db:
            row = db.execute(
                "SELECT last_seq FROM ma_conversations WHERE key = ?", (conversation,)
            ).fetchone()
        return 0 if row is None else int(row[0])

    def delete_conversation(self, conversation: str) -> int:
        with self._write() as db:
            n = db.execute(
                "DELETE FROM ma_messages WHERE conversation = ?", (conversation,)
            ).rowcount
            db.execute("DELETE FROM ma_summaries WHERE conversation = ?", (conversation,))
            db.execute("DELETE FROM ma_conversations WHERE key = ?", (conversation,))
        return int(n)

    def put_summary(self, conversation: str, summary: Summary) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO ma_summaries (conversation, end_seq, start_seq, text, "
                "tokens, created_at, model) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation,
                    summary.end_seq,
                    summary.start_seq,
                    summary.text,
                    summary.tokens,
                    summary.created_at or time.time(),
                    summary.model,
                ),
            )
            db.execute(  # the claim this summary answers ends
                "DELETE FROM ma_summaries WHERE conversation = ? AND end_seq = -1 "
                "AND start_seq <= ?",
                (conversation, summary.end_seq),
            )

    def latest_summary(self, conversation: str) -> Summary | None:
        with self._connection() as db:
            row = db.execute(
                "SELECT start_seq, end_seq, text, tokens, created_at, model FROM ma_summaries "
                "WHERE conversation = ? AND end_seq >= 0 ORDER BY end_seq DESC LIMIT 1",
                (conversation,),
            ).fetchone()
        return None if row is None else Summary(*row)

    def claim_summary(
        self, conversation: str, end_seq: int, owner: str, *, lease_seconds: float
    ) -> bool:
        now = time.time()
        with self._write() as db:
            covered = db.execute(
                "SELECT 1 FROM ma_summaries WHERE conversation = ? AND end_seq >= ? LIMIT 1",
                (conversation, end_seq),
            ).fetchone()
            if covered is not None:
                return False
            held = db.execute(
                "SELECT text, created_at FROM ma_summaries WHERE conversation = ? AND end_seq = -1",
                (conversation,),
            ).fetchone()
            if held is not None and held[0] != owner and held[1] > now:
                return False
            db.execute(
                "INSERT OR REPLACE INTO ma_summaries (conversation, end_seq, start_seq, text, "
                "tokens, created_at) VALUES (?, -1, ?, ?, -1, ?)",
                (conversation, end_seq, owner, now + lease_seconds),
            )
        return True

    # -- facts -------------------------------------------------------------------------------------

    def _current(
        self, db: sqlite3.Connection, namespace: str, scope: str, key: str, now: float
    ) -> tuple[int, int, float] | None:
        """(id, version, created_at) of the live fact, or None (an expired one is removed)."""
        row = db.execute(
            "SELECT id, version, created_at, expires_at FROM ma_facts "
            "WHERE namespace = ? AND scope = ? AND key = ?",
            (namespace, scope, key),
        ).fetchone()
        if row is None:
            return None
        if row[3] is not None and row[3] <= now:
            db.execute("DELETE FROM ma_facts WHERE id = ?", (row[0],))
            db.execute("DELETE FROM ma_facts_fts WHERE rowid = ?", (row[0],))
            return None
        return row[0], row[1], row[2]

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
        now = time.time()
        model = None if embedding is None else embedding.model
        with self._write() as db:
            current = self._current(db, namespace, scope, key, now)
            version = 0 if current is None else current[1]
            if expected_version is not None and expected_version != version:
                raise VersionConflict(key, expected_version, version)
            if current is None:
                created = now
                fact_id = db.execute(
                    "INSERT INTO ma_facts (namespace, scope, key, data, version, importance, "
                    "created_at, updated_at, expires_at, embed_model) "
                    "VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?)",
                    (namespace, scope, key, data, importance, now, now, expires_at, model),
                ).lastrowid
                assert fact_id is not None
            else:
                fact_id, _, created = current
                db.execute(
                    "UPDATE ma_facts SET data = ?, version = version + 1, importance = ?, "
                    "updated_at = ?, expires_at = ?, embed_model = ? WHERE id = ?",
                    (data, importance, now, expires_at, model, fact_id),
                )
                db.execute("DELETE FROM ma_facts_fts WHERE rowid = ?", (fact_id,))
                db.execute("DELETE FROM ma_fact_vectors WHERE fact_id = ?", (fact_id,))
            db.execute(
                "INSERT INTO ma_facts_fts (rowid, owner, text) VALUES (?, ?, ?)",
                (fact_id, _owner(namespace, scope), text),
            )
            if embedding is not None:
                owner = _owner(namespace, scope)
                _insert_vectors(db, fact_id, owner, expires_at, embedding)
            if writer is not None:
                change = (key, version + 1, "put", data, now, writer.to_json())
                _record(db, namespace, scope, change, history_limit)
        return Fact.from_row(key, data, version + 1, importance, created, now, expires_at)

    def get_fact(self, namespace: str, scope: str, key: str) -> Fact | None:
        with self._connection() as db:
            row = db.execute(
                f"SELECT {_FACT} FROM ma_facts WHERE namespace = ? AND scope = ? AND key = ? "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (namespace, scope, key, time.time()),
            ).fetchone()
        return None if row is None else _fact(row)

    def list_facts(self, namespace: str, scope: str, *, limit: int | None = None) -> list[Fact]:
        with self._connection() as db:
            rows = db.execute(
                f"SELECT {_FACT} FROM ma_facts WHERE namespace = ? AND scope = ? "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY key LIMIT ?",
                (namespace, scope, time.time(), -1 if limit is None else limit),
            ).fetchall()
        return [_fact(r) for r in rows]

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
        now = time.time()
        with self._write() as db:
            current = self._current(db, namespace, scope, key, now)
            version = 0 if current is None else current[1]
            if expected_version is not None and expected_version != version:
                raise VersionConflict(key, expected_version, version)
            if current is None:
                return False
            db.execute("DELETE FROM ma_facts WHERE id = ?", (current[0],))
            db.execute("DELETE FROM ma_facts_fts WHERE rowid = ?", (current[0],))
            if writer is not None:
                change = (key, current[1], "forget", None, now, writer.to_json())
                _record(db, namespace, scope, change, history_limit)
        return True

    def search_facts(
        self, namespace: str, scope: str, terms: Sequence[str], *, limit: int = 10
    ) -> list[Fact]:
        if not terms:
            return []
        words = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        query = f'owner : "{_owner(namespace, scope)}" AND text : ({words})'
        with self._connection() as db:
            rows = db.execute(
                f"SELECT {', '.join('f.' + c.strip() for c in _FACT.split(','))}, "
                "bm25(ma_facts_fts, 0.0, 1.0) AS rank FROM ma_facts_fts "
                "JOIN ma_facts AS f ON f.id = ma_facts_fts.rowid "
                "WHERE ma_facts_fts MATCH ? AND f.namespace = ? AND f.scope = ? "
                "AND (f.expires_at IS NULL OR f.expires_at > ?) "
                "ORDER BY rank, f.importance DESC, f.updated_at DESC LIMIT ?",
                (query, namespace, scope, time.time(), limit),
            ).fetchall()
        return [_fact(r[:7], -float(r[7])) for r in rows]

    # -- fact embeddings ---------------------------------------------------------------------

    def search_fact_vectors(
        self,
        namespace: str,
        scope: str,
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
    ) -> list[Fact]:
        """Exact cosine search: one range of the index ``(owner, model, dims, expires_at)``
        reads the scope's live vectors of ``model`` and ``len(vector)`` dimensions (nothing
        else), :func:`memory_adapters.exact_vectors.screen` keeps the facts that can be in
        the result (numpy when importable), and only those facts are read and ranked
        exactly. The cost is linear in the scope's vectors (see docs/stores.md for measured
        times); other scopes cost nothing."""
        query = [float(x) for x in vector]
        if limit <= 0 or not query:
            return []
        with self._connection() as db:
            db.execute("BEGIN")  # one snapshot for both reads
            try:
                rows = db.execute(
                    "SELECT fact_id, vector FROM ma_fact_vectors WHERE owner = ? AND model = ? "
                    "AND dims = ? AND (expires_at IS NULL OR expires_at > ?)",
                    (_owner(namespace, scope), model, len(query), time.time()),
                ).fetchall()
                kept = screen(query, rows, limit)
                ids = list(kept)
                facts = []
                for at in range(0, len(ids), 500):  # within SQLite's limit of parameters
                    chunk = ids[at : at + 500]
                    facts += db.execute(
                        f"SELECT id, {_FACT} FROM ma_facts WHERE namespace = ? AND scope = ? "
                        f"AND id IN ({', '.join('?' * len(chunk))})",
                        (namespace, scope, *chunk),
                    ).fetchall()
            finally:
                db.execute("COMMIT")
        candidates = [Candidate(r[4], r[6], r[1], kept[r[0]]) for r in facts]
        return [_fact(facts[i][1:], score) for i, score in order(query, candidates, limit)]

    def facts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> list[Fact]:
        with self._connection() as db:
            rows = db.execute(
                f"SELECT {_FACT} FROM ma_facts WHERE namespace = ? AND scope = ? "
                "AND (embed_model IS NULL OR embed_model <> ?) "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY key LIMIT ?",
                (namespace, scope, model, time.time(), limit),
            ).fetchall()
        return [_fact(r) for r in rows]

    def set_fact_embedding(
        self, namespace: str, scope: str, key: str, version: int, embedding: Embedding
    ) -> bool:
        with self._write() as db:
            row = db.execute(
                "SELECT id, expires_at FROM ma_facts WHERE namespace = ? AND scope = ? AND key = ? "
                "AND version = ? AND (expires_at IS NULL OR expires_at > ?)",
                (namespace, scope, key, version, time.time()),
            ).fetchone()
            if row is None:
                return False
            db.execute(
                "UPDATE ma_facts SET embed_model = ? WHERE id = ?", (embedding.model, row[0])
            )
            db.execute("DELETE FROM ma_fact_vectors WHERE fact_id = ?", (row[0],))
            _insert_vectors(db, row[0], _owner(namespace, scope), row[1], embedding)
        return True

    def list_fact_scopes(
        self, namespace: str, prefix: str, *, limit: int | None = None
    ) -> list[str]:
        upper = prefix_upper_bound(prefix)
        params = {
            "ns": namespace,
            "lo": prefix,
            "hi": upper,
            "now": time.time(),
            "n": -1 if limit is None else limit,
        }
        with self._connection() as db:
            rows = db.execute(scopes_sql(bounded=upper is not None), params).fetchall()
        return [r[0] for r in rows]

    def prune(self) -> int:
        with self._write() as db:
            now = time.time()
            ids = [
                r[0]
                for r in db.execute(
                    "SELECT id FROM ma_facts WHERE expires_at IS NOT NULL AND expires_at <= ?",
                    (now,),
                )
            ]
            for fact_id in ids:
                db.execute("DELETE FROM ma_facts WHERE id = ?", (fact_id,))
                db.execute("DELETE FROM ma_facts_fts WHERE rowid = ?", (fact_id,))
        return len(ids)

    # -- operations --------------------------------------------------------------------------

    def list_conversations(
        self, prefix: str, *, limit: int = 100, before: tuple[float, str] | None = None
    ) -> list[ConversationInfo]:
        where, params = _in_ranges("key", (), (prefix,))
        after: list[Any] = []
        if before is not None:
            where += " AND (last_activity < ? OR (last_activity = ? AND key < ?))"
            after = [before[0], before[0], before[1]]
        with self._connection() as db:
            rows = db.execute(
                "SELECT key, last_seq, total_tokens, last_activity, created_at "
                f"FROM ma_conversations WHERE {where} AND last_seq > 0 "
                "ORDER BY last_activity DESC, key DESC LIMIT ?",
                (*params, *after, limit),
            ).fetchall()
        return [ConversationInfo.of(*row) for row in rows]

    @staticmethod
    def _delete_log(db: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[int]:
        """Delete the conversations whose key matches ``where`` (a condition on ``{col}``):
        counts of head rows, messages and summaries."""
        return [
            int(
                db.execute(
                    f"DELETE FROM {table} WHERE {where.replace('{col}', column)}", params
                ).rowcount
            )
            for table, column in (
                ("ma_conversations", "key"),
                ("ma_messages", "conversation"),
                ("ma_summaries", "conversation"),
            )
        ]

    @staticmethod
    def _delete_facts(
        db: sqlite3.Connection, namespace: str, exact: Sequence[str], prefixes: Sequence[str]
    ) -> tuple[int, int, int]:
        """Delete the facts of ``namespace`` in the scopes ``exact`` or under ``prefixes``,
        with their search rows, vectors and history: (facts, vectors, history rows)."""
        cond, params = _in_ranges("scope", exact, prefixes)
        facts = f"SELECT id FROM ma_facts WHERE namespace = ? AND {cond}"
        args = (namespace, *params)
        (vectors,) = db.execute(
            f"SELECT count(*) FROM ma_fact_vectors WHERE fact_id IN ({facts})", args
        ).fetchone()
        db.execute(f"DELETE FROM ma_facts_fts WHERE rowid IN ({facts})", args)
        n = db.execute(f"DELETE FROM ma_facts WHERE namespace = ? AND {cond}", args).rowcount
        history = db.execute(
            f"DELETE FROM ma_fact_history WHERE namespace = ? AND {cond}", args
        ).rowcount
        return int(n), int(vectors), int(history)

    def erase(self, namespace: str, user_id: str) -> EraseReport:
        keys = user_keys(namespace, user_id)
        where, params = _in_ranges("{col}", (), (keys.conversation_prefix,))
        with self._write() as db:
            conversations, messages, summaries = self._delete_log(db, where, params)
            facts, vectors, history = self._delete_facts(
                db,
                namespace,
                (keys.user_scope,),
                (keys.agent_prefix, keys.conversation_scope_prefix),
            )
            working, wvectors, whistory = self._delete_facts(
                db, keys.working_namespace, (), (keys.conversation_prefix,)
            )
        return EraseReport(
            conversations,
            messages,
            summaries,
            facts,
            working,
            vectors + wvectors,
            history + whistory,
        )

    def delete_idle_conversations(self, namespace_prefix: str, idle_before: float) -> int:
        where, params = _in_ranges("key", (), (namespace_prefix,))
        with self._write() as db:
            idle = [
                r[0]
                for r in db.execute(
                    f"SELECT key FROM ma_conversations WHERE {where} AND last_activity < ?",
                    (*params, idle_before),
                )
            ]
            for key in idle:
                self._delete_log(db, "{col} = ?", (key,))
                self._delete_facts(db, working_namespace_of(key), (key,), (key + "/",))
        return len(idle)

    def fact_history(
        self, namespace: str, scope: str, key: str, *, limit: int | None = None
    ) -> list[FactChange]:
        with self._connection() as db:
            rows = db.execute(
                "SELECT key, version, op, data, at, writer FROM ma_fact_history "
                "WHERE namespace = ? AND scope = ? AND key = ? ORDER BY id DESC LIMIT ?",
                (namespace, scope, key, -1 if limit is None else limit),
            ).fetchall()
        return [FactChange.from_row(*row) for row in rows]

    def restore_fact(
        self,
        namespace: str,
        scope: str,
        fact: Fact,
        *,
        history: Sequence[FactChange] = (),
        embedding: Embedding | None = None,
    ) -> bool:
        data = dumps(fact.value)
        model = None if embedding is None else embedding.model
        values = (
            data,
            fact.version,
            fact.importance,
            fact.created_at,
            fact.updated_at,
            fact.expires_at,
            model,
        )
        with self._write() as db:
            current = self._current(db, namespace, scope, fact.key, time.time())
            if current is not None and current[1] >= fact.version:
                return False
            row = db.execute(
                "SELECT id FROM ma_facts WHERE namespace = ? AND scope = ? AND key = ?",
                (namespace, scope, fact.key),
            ).fetchone()
            if row is None:
                fact_id = db.execute(
                    "INSERT INTO ma_facts (namespace, scope, key, data, version, importance, "
                    "created_at, updated_at, expires_at, embed_model) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (namespace, scope, fact.key, *values),
                ).lastrowid
                assert fact_id is not None
            else:
                fact_id = row[0]
                db.execute(
                    "UPDATE ma_facts SET data = ?, version = ?, importance = ?, created_at = ?, "
                    "updated_at = ?, expires_at = ?, embed_model = ? WHERE id = ?",
                    (*values, fact_id),
                )
                db.execute("DELETE FROM ma_facts_fts WHERE rowid = ?", (fact_id,))
                db.execute("DELETE FROM ma_fact_vectors WHERE fact_id = ?", (fact_id,))
            owner = _owner(namespace, scope)
            db.execute(
                "INSERT INTO ma_facts_fts (rowid, owner, text) VALUES (?, ?, ?)",
                (fact_id, owner, search_text(fact.key, fact.value)),
            )
            if embedding is not None:
                _insert_vectors(db, fact_id, owner, fact.expires_at, embedding)
            db.execute(
                "DELETE FROM ma_fact_history WHERE namespace = ? AND scope = ? AND key = ?",
                (namespace, scope, fact.key),
            )
            db.executemany(
                "INSERT INTO ma_fact_history (namespace, scope, key, version, op, data, at, "
                "writer) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (namespace, scope, c.key, c.version, c.op, c.data(), c.at, c.writer.to_json())
                    for c in reversed(history)  # given newest first: ids in time order
                ],
            )
        return True
