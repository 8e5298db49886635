"""``SQLiteStore``: the store contract over SQLite (stdlib ``sqlite3``, WAL).

* Every append is one ``BEGIN IMMEDIATE`` transaction: it takes the database's write lock,
  so seqs are gapless and batches never interleave, across threads and processes.
* Each message stores the running token total before it (``start_tokens``); the tail within
  a token budget starts at the first seq the index ``(conversation, start_tokens)`` finds
  within it, and is read as a range of the primary key ``(conversation, seq)``.
* Facts are :class:`~memory_adapters_sqlite.facts.FactStore`'s (:mod:`.facts`), the schema
  and its migrations :mod:`.schema`'s. Keyword search finds candidates through postings per
  (scope, term) and counts each scope's statistics; the core ranks them.
* Fact vectors (semantic recall) live in ``ma_fact_vectors``, one row per (fact, field): the
  model, the dimensions and the vector as little-endian float32 bytes; ``ma_facts.embed_model``
  names the model that embedded the fact (``NULL``: none). A trigger deletes a fact's vectors
  with it. A search reads one scope's vectors of one model and dimensions and ranks them
  exactly (:mod:`memory_adapters.exact_vectors`: numpy when importable, else pure Python):
  linear in the scope's facts, with no extension to load.
* The scopes under a prefix (``list_fact_scopes``) are listed by a skip scan of the unique
  index ``(namespace, scope, key)``: one index seek per distinct scope (:func:`.facts.scopes_sql`).
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
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from memory_adapters.errors import AppendConflict, StoreUnavailable
from memory_adapters.messages import AppendResult, Entry, Record, Summary
from memory_adapters.operations import (
    ConversationInfo,
    EraseReport,
    user_keys,
    working_namespace_of,
)
from memory_adapters.store import renew_after_fork, run_steps, store_closed

from .facts import FactStore, delete_facts, in_ranges
from .schema import MIGRATIONS, SCHEMA_VERSION, statements

if TYPE_CHECKING:
    from memory_adapters.steps import StoreCall

_MSG = "seq, data, tokens, batch, run_id, created_at"


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


class SQLiteStore(FactStore):
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
        self._index_old_facts()
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
                    if self._closed:  # close() left it open for this call: close it now
                        self._close_connection(db)
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
                    for statement in statements(script):
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
            else:  # another call connected meanwhile: one connection per thread, not one each
                with self._all_lock:
                    self._all.remove(made)
                made.close()
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
        """Close every connection; one another thread is using (a ``Memory``'s worker whose
        job outlived ``Memory.close``'s timeout) is closed when its call ends: closing a
        connection in the middle of a statement crashes the interpreter."""
        self._closed = True
        # a call on the shared in-memory database ends first (it holds _shared_lock)
        with self._shared_lock, self._all_lock:
            busy = set(self._busy)
            for db in [db for db in self._all if id(db) not in busy]:
                db.close()
                self._all.remove(db)

    def _close_connection(self, db: sqlite3.Connection) -> None:
        with self._all_lock:
            if db in self._all:
                self._all.remove(db)
                db.close()

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

    # -- operations --------------------------------------------------------------------------

    def list_conversations(
        self, prefix: str, *, limit: int = 100, before: tuple[float, str] | None = None
    ) -> list[ConversationInfo]:
        where, params = in_ranges("key", (), (prefix,))
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

    def erase(self, namespace: str, user_id: str) -> EraseReport:
        keys = user_keys(namespace, user_id)
        where, params = in_ranges("{col}", (), (keys.conversation_prefix,))
        with self._write() as db:
            conversations, messages, summaries = self._delete_log(db, where, params)
            facts, vectors, history = delete_facts(
                db,
                namespace,
                (keys.user_scope,),
                (keys.beneath_prefix, keys.conversation_scope_prefix),
            )
            working, wvectors, whistory = delete_facts(
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
        where, params = in_ranges("key", (), (namespace_prefix,))
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
                delete_facts(db, working_namespace_of(key), (key,), (key + "/",))
        return len(idle)
