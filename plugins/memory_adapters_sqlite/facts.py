"""Facts of the SQLite store (long-term memory and working memory): writes, reads, keyword
candidates with their statistics, vectors, history and restore (:class:`FactStore`, which
:class:`~memory_adapters_sqlite.store.SQLiteStore` extends with connections and the log).

* A fact is a row of ``ma_facts``: its value (JSON text), version, importance, times, expiry,
  metadata (JSON object text, never indexed) and ``length``, the number of index terms it was
  put with (the core's :func:`memory_adapters.ranking.index_terms`, given as ``text``).
* Keyword search: ``ma_fact_terms`` holds one posting per (scope, term, fact) with the term's
  count; its primary key starts with a 64-bit hash of the namespace and scope
  (:func:`term_owner`), so the facts of a scope holding a term are one range of it, whatever
  other scopes hold. ``ma_fact_stats`` (kept by triggers) counts each scope's facts and their
  total length. :meth:`FactStore.match_terms` reads those and never ranks: the core scores.
* Filters (:class:`~memory_adapters.facts.FactFilter`) are SQL conditions on the fact's row
  (:func:`filter_sql`), with SQLite's JSON functions for metadata.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from abc import abstractmethod
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from memory_adapters.embedders import Embedding
from memory_adapters.errors import InvalidInput, VersionConflict
from memory_adapters.exact_vectors import Candidate, order, pack, screen
from memory_adapters.facts import FILTER_KEY, Fact, FactFilter, index_text
from memory_adapters.operations import DEFAULT_HISTORY_LIMIT, FactChange, Writer
from memory_adapters.ranking import TermHit, TermMatches
from memory_adapters.store import Store, prefix_upper_bound
from memory_adapters.validation import dumps

FACT_COLUMNS = "key, data, version, importance, created_at, updated_at, expires_at, metadata"
"""The columns :func:`row_fact` builds a :class:`Fact` from, in order."""

OLD_FACTS_BATCH = 500
"""How many facts of before schema version 5 one transaction indexes when the store opens."""


def row_fact(row: Sequence[Any], score: float | None = None) -> Fact:
    """The fact of a row of :data:`FACT_COLUMNS`."""
    return Fact.from_row(row[0], row[1], row[2], row[3], row[4], row[5], row[6], score, row[7])


def owner(namespace: str, scope: str) -> str:
    """The scope's token in ``ma_fact_vectors``."""
    return "o" + hashlib.sha256(f"{namespace}\x00{scope}".encode()).hexdigest()[:32]


def term_owner(namespace: str, scope: str) -> int:
    """The scope's key in ``ma_fact_terms``: a signed 64-bit hash of the namespace and scope
    (a collision only adds postings that the join with ``ma_facts`` leaves out)."""
    digest = hashlib.sha256(f"{namespace}\x00{scope}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def index_terms(
    db: sqlite3.Connection, fact_id: int, namespace: str, scope: str, text: str
) -> None:
    """Write the postings of fact ``fact_id`` for ``text`` (terms separated by spaces) and
    its ``length``, replacing what it had, in the caller's transaction."""
    counts = Counter(text.split())
    db.execute("DELETE FROM ma_fact_terms WHERE fact_id = ?", (fact_id,))
    key = term_owner(namespace, scope)
    db.executemany(
        "INSERT INTO ma_fact_terms (owner, term, fact_id, tf) VALUES (?, ?, ?, ?)",
        [(key, term, fact_id, tf) for term, tf in counts.items()],
    )
    db.execute("UPDATE ma_facts SET length = ? WHERE id = ?", (sum(counts.values()), fact_id))


def _number(value: int | float) -> int | float:
    """A number as SQLite can bind it (an int beyond 64 bits as a float)."""
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return float(value)
    return value


def filter_sql(where: FactFilter | None, alias: str = "f") -> tuple[str, list[Any]]:
    """Conditions on the facts ``alias`` (each starting with ``" AND "``) that keep exactly
    those :meth:`FactFilter.passes <memory_adapters.facts.FactFilter.passes>` lets through,
    and their parameters. A metadata value is compared by its JSON type: ``true``/``false``
    only with a bool, numbers by value (``1`` equals ``1.0``), text exactly, ``null`` only
    with ``None``; a missing key never passes."""
    if where is None:
        return "", []
    conditions: list[str] = []
    params: list[Any] = []
    if where.since is not None:
        conditions.append(f"{alias}.updated_at >= ?")
        params.append(float(where.since))
    if where.until is not None:
        conditions.append(f"{alias}.updated_at < ?")
        params.append(float(where.until))
    for key, value in where.metadata:
        if not FILTER_KEY.fullmatch(key):
            raise InvalidInput(f"invalid metadata filter key {key!r}")
        path = f'$."{key}"'
        kind = f"json_type({alias}.metadata, ?)"
        extract = f"json_extract({alias}.metadata, ?)"
        if isinstance(value, bool):
            conditions.append(f"{kind} = ?")
            params += [path, "true" if value else "false"]
        elif value is None:
            conditions.append(f"{kind} = 'null'")
            params.append(path)
        elif isinstance(value, int | float):
            conditions.append(f"{kind} IN ('integer', 'real') AND {extract} = ?")
            params += [path, path, _number(value)]
        elif isinstance(value, str):
            conditions.append(f"{kind} = 'text' AND {extract} = ?")
            params += [path, path, value]
        else:  # not a JSON scalar: equal to nothing (json_equal)
            conditions.append("0")
    return "".join(f" AND {c}" for c in conditions), params


def insert_vectors(
    db: sqlite3.Connection, fact_id: int, token: str, expires_at: float | None, embedding: Embedding
) -> None:
    db.executemany(
        "INSERT INTO ma_fact_vectors (fact_id, field, owner, model, dims, expires_at, vector) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (fact_id, field, token, embedding.model, embedding.dims, expires_at, pack(vector))
            for field, vector in embedding.vectors.items()
        ],
    )


def record(
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


def in_ranges(column: str, exact: Sequence[str], prefixes: Sequence[str]) -> tuple[str, list[str]]:
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


def delete_facts(
    db: sqlite3.Connection, namespace: str, exact: Sequence[str], prefixes: Sequence[str]
) -> tuple[int, int, int]:
    """Delete the facts of ``namespace`` in the scopes ``exact`` or under ``prefixes``, with
    their postings and vectors (by trigger) and history: (facts, vectors, history rows)."""
    cond, params = in_ranges("scope", exact, prefixes)
    args = (namespace, *params)
    (vectors,) = db.execute(
        "SELECT count(*) FROM ma_fact_vectors WHERE fact_id IN "
        f"(SELECT id FROM ma_facts WHERE namespace = ? AND {cond})",
        args,
    ).fetchone()
    n = db.execute(f"DELETE FROM ma_facts WHERE namespace = ? AND {cond}", args).rowcount
    history = db.execute(
        f"DELETE FROM ma_fact_history WHERE namespace = ? AND {cond}", args
    ).rowcount
    return int(n), int(vectors), int(history)


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


MATCH_SQL = (
    "SELECT f.key, f.length, f.importance, f.updated_at, t.term, t.tf "
    "FROM ma_fact_terms AS t CROSS JOIN ma_facts AS f ON f.id = t.fact_id "
    "WHERE t.owner = ? AND t.term IN (SELECT value FROM json_each(?)) "
    "AND f.namespace = ? AND f.scope = ? AND (f.expires_at IS NULL OR f.expires_at > ?)"
)
"""The postings of a scope for some terms (a JSON array), joined with their unexpired facts
(parameters: the term owner, the terms, namespace, scope, now; then a filter's). ``CROSS
JOIN`` makes SQLite read the postings first, whatever its statistics say (with ``ANALYZE``
statistics it may otherwise prefer reading every fact of the scope)."""

STATS_SQL = (
    "SELECT coalesce((SELECT documents FROM ma_fact_stats WHERE namespace = :ns "
    "AND scope = :sc), 0), coalesce((SELECT total_length FROM ma_fact_stats "
    "WHERE namespace = :ns AND scope = :sc), 0), count(length), coalesce(sum(length), 0) "
    "FROM ma_facts WHERE namespace = :ns AND scope = :sc AND expires_at IS NOT NULL "
    "AND expires_at <= :now"
)
"""A scope's facts and total length (``ma_fact_stats``), and those of its facts that expired
but are still there (one range of the partial index ``ma_facts_expiring``)."""


class FactStore(Store):
    """The fact methods of the store contract over SQLite; the connections are the
    subclass's (:meth:`_connection`: any connection; :meth:`_write`: in a write
    transaction holding the database's write lock)."""

    @abstractmethod
    def _connection(self) -> AbstractContextManager[sqlite3.Connection]: ...

    @abstractmethod
    def _write(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def _index_old_facts(self) -> int:
        """Index the facts written before schema version 5 (``length IS NULL``): their terms
        are the core's (:func:`memory_adapters.facts.index_text`), so they are computed here,
        :data:`OLD_FACTS_BATCH` facts per write transaction. Idempotent, and safe when
        several processes open the database at once (each batch takes the write lock and
        reads only facts still unindexed). How many facts this call indexed."""
        done = 0
        while True:
            with self._connection() as db:  # through the partial index: nothing to do is free
                left = db.execute("SELECT 1 FROM ma_facts WHERE length IS NULL LIMIT 1").fetchone()
            if left is None:
                return done
            with self._write() as db:
                rows = db.execute(
                    "SELECT id, namespace, scope, key, data FROM ma_facts WHERE length IS NULL "
                    "LIMIT ?",
                    (OLD_FACTS_BATCH,),
                ).fetchall()
                for fact_id, namespace, scope, key, data in rows:
                    try:
                        value = json.loads(data)
                    except ValueError:
                        value = data
                    index_terms(db, fact_id, namespace, scope, index_text(key, value))
            done += len(rows)

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
        metadata: str | None = None,
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
                extra = (model, metadata)
                fact_id = db.execute(
                    "INSERT INTO ma_facts (namespace, scope, key, data, version, importance, "
                    "created_at, updated_at, expires_at, embed_model, metadata) "
                    "VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)",
                    (namespace, scope, key, data, importance, now, now, expires_at, *extra),
                ).lastrowid
                assert fact_id is not None
            else:
                fact_id, _, created = current
                db.execute(
                    "UPDATE ma_facts SET data = ?, version = version + 1, importance = ?, "
                    "updated_at = ?, expires_at = ?, embed_model = ?, metadata = ? WHERE id = ?",
                    (data, importance, now, expires_at, model, metadata, fact_id),
                )
                db.execute("DELETE FROM ma_fact_vectors WHERE fact_id = ?", (fact_id,))
            index_terms(db, fact_id, namespace, scope, text)
            if embedding is not None:
                insert_vectors(db, fact_id, owner(namespace, scope), expires_at, embedding)
            if writer is not None:
                change = (key, version + 1, "put", data, now, writer.to_json())
                record(db, namespace, scope, change, history_limit)
        return Fact.from_row(
            key, data, version + 1, importance, created, now, expires_at, None, metadata
        )

    def get_fact(self, namespace: str, scope: str, key: str) -> Fact | None:
        with self._connection() as db:
            row = db.execute(
                f"SELECT {FACT_COLUMNS} FROM ma_facts WHERE namespace = ? AND scope = ? "
                "AND key = ? AND (expires_at IS NULL OR expires_at > ?)",
                (namespace, scope, key, time.time()),
            ).fetchone()
        return None if row is None else row_fact(row)

    def get_facts(self, namespace: str, scope: str, keys: Sequence[str]) -> list[Fact]:
        """One query: the keys as a JSON array, each looked up in the unique index
        ``(namespace, scope, key)``."""
        if not keys:
            return []
        with self._connection() as db:
            rows = db.execute(
                f"SELECT {FACT_COLUMNS} FROM ma_facts WHERE namespace = ? AND scope = ? "
                "AND key IN (SELECT value FROM json_each(?)) "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (namespace, scope, json.dumps(list(keys)), time.time()),
            ).fetchall()
        found = {row[0]: row for row in rows}
        return [row_fact(found[k]) for k in keys if k in found]

    def list_facts(self, namespace: str, scope: str, *, limit: int | None = None) -> list[Fact]:
        with self._connection() as db:
            rows = db.execute(
                f"SELECT {FACT_COLUMNS} FROM ma_facts WHERE namespace = ? AND scope = ? "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY key LIMIT ?",
                (namespace, scope, time.time(), -1 if limit is None else limit),
            ).fetchall()
        return [row_fact(r) for r in rows]

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
            if writer is not None:
                change = (key, current[1], "forget", None, now, writer.to_json())
                record(db, namespace, scope, change, history_limit)
        return True

    def match_terms(
        self,
        namespace: str,
        scope: str,
        terms: Sequence[str],
        *,
        where: FactFilter | None = None,
    ) -> TermMatches:
        """One snapshot: the scope's statistics (:data:`STATS_SQL`: a row of
        ``ma_fact_stats`` less the expired facts not yet pruned) and, for the terms, their
        postings in the scope (ranges of the primary key of ``ma_fact_terms``) joined with
        the unexpired facts passing ``where`` (:data:`MATCH_SQL`)."""
        now = time.time()
        wanted = list(dict.fromkeys(terms))
        condition, params = filter_sql(where)
        with self._connection() as db:
            db.execute("BEGIN")  # one snapshot for both reads
            try:
                docs, total, gone, gone_length = db.execute(
                    STATS_SQL, {"ns": namespace, "sc": scope, "now": now}
                ).fetchone()
                rows = (
                    db.execute(
                        MATCH_SQL + condition,
                        (
                            term_owner(namespace, scope),
                            json.dumps(wanted),
                            namespace,
                            scope,
                            now,
                            *params,
                        ),
                    ).fetchall()
                    if wanted
                    else []
                )
            finally:
                db.execute("COMMIT")
        found: dict[str, tuple[int, float, float, dict[str, int]]] = {}
        for key, length, importance, updated_at, term, tf in rows:
            found.setdefault(key, (length, importance, updated_at, {}))[3][term] = tf
        hits = [
            TermHit(key, length, tuple(counts.get(t, 0) for t in terms), importance, updated_at)
            for key, (length, importance, updated_at, counts) in found.items()
        ]
        return TermMatches(int(docs - gone), int(total - gone_length), hits)

    # -- fact embeddings ---------------------------------------------------------------------

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
        """Exact cosine search: one range of the index ``(owner, model, dims, expires_at)``
        reads the scope's live vectors of ``model`` and ``len(vector)`` dimensions (nothing
        else), :func:`memory_adapters.exact_vectors.screen` keeps the facts that can be in
        the result (numpy when importable), and only those facts are read and ranked
        exactly. The cost is linear in the scope's vectors (see docs/stores.md for measured
        times); other scopes cost nothing. With ``keys`` the vectors read are those of the
        facts under those keys (found through the unique index ``(namespace, scope, key)``);
        with ``where`` only those of facts passing it."""
        query = [float(x) for x in vector]
        if limit <= 0 or not query or (keys is not None and not keys):
            return []
        now = time.time()
        vectors = (
            "v.owner = ? AND v.model = ? AND v.dims = ? "
            "AND (v.expires_at IS NULL OR v.expires_at > ?)"
        )
        params: list[Any] = [owner(namespace, scope), model, len(query), now]
        if keys is None and where is None:
            sql = f"SELECT v.fact_id, v.vector FROM ma_fact_vectors AS v WHERE {vectors}"
        else:  # the facts' conditions too
            condition, extra = filter_sql(where)
            if keys is not None:
                condition = " AND f.key IN (SELECT value FROM json_each(?))" + condition
                extra.insert(0, json.dumps(list(keys)))
            sql = (
                "SELECT v.fact_id, v.vector FROM ma_fact_vectors AS v "
                f"JOIN ma_facts AS f ON f.id = v.fact_id WHERE {vectors} "
                f"AND f.namespace = ? AND f.scope = ?{condition}"
            )
            params += [namespace, scope, *extra]
        with self._connection() as db:
            db.execute("BEGIN")  # one snapshot for both reads
            try:
                rows = db.execute(sql, params).fetchall()
                kept = screen(query, rows, limit)
                ids = list(kept)
                facts = []
                for at in range(0, len(ids), 500):  # within SQLite's limit of parameters
                    chunk = ids[at : at + 500]
                    facts += db.execute(
                        f"SELECT id, {FACT_COLUMNS} FROM ma_facts WHERE namespace = ? "
                        f"AND scope = ? AND id IN ({', '.join('?' * len(chunk))})",
                        (namespace, scope, *chunk),
                    ).fetchall()
            finally:
                db.execute("COMMIT")
        candidates = [Candidate(r[4], r[6], r[1], kept[r[0]]) for r in facts]
        return [row_fact(facts[i][1:], score) for i, score in order(query, candidates, limit)]

    def facts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> list[Fact]:
        with self._connection() as db:
            rows = db.execute(
                f"SELECT {FACT_COLUMNS} FROM ma_facts WHERE namespace = ? AND scope = ? "
                "AND (embed_model IS NULL OR embed_model <> ?) "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY key LIMIT ?",
                (namespace, scope, model, time.time(), limit),
            ).fetchall()
        return [row_fact(r) for r in rows]

    def refresh_fact(self, namespace: str, scope: str, key: str, version: int, ttl: float) -> bool:
        now = time.time()
        with self._write() as db:
            row = db.execute(
                "SELECT id FROM ma_facts WHERE namespace = ? AND scope = ? AND key = ? "
                "AND version = ? AND (expires_at IS NULL OR expires_at > ?)",
                (namespace, scope, key, version, now),
            ).fetchone()
            if row is None:
                return False
            db.execute(
                "UPDATE ma_facts SET version = version + 1, updated_at = ?, expires_at = ? "
                "WHERE id = ?",
                (now, now + ttl, row[0]),
            )
            # the vectors keep their own copy of the expiry (searches read nothing else)
            db.execute(
                "UPDATE ma_fact_vectors SET expires_at = ? WHERE fact_id = ?",
                (now + ttl, row[0]),
            )
        return True

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
            insert_vectors(db, row[0], owner(namespace, scope), row[1], embedding)
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
            n = db.execute(
                "DELETE FROM ma_facts WHERE expires_at IS NOT NULL AND expires_at <= ?",
                (time.time(),),
            ).rowcount
        return int(n)

    # -- history and restore -----------------------------------------------------------------

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
        metadata = None if fact.metadata is None else dumps(fact.metadata, "metadata")
        model = None if embedding is None else embedding.model
        values = (
            data,
            fact.version,
            fact.importance,
            fact.created_at,
            fact.updated_at,
            fact.expires_at,
            model,
            metadata,
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
                    "created_at, updated_at, expires_at, embed_model, metadata) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (namespace, scope, fact.key, *values),
                ).lastrowid
                assert fact_id is not None
            else:
                fact_id = row[0]
                db.execute(
                    "UPDATE ma_facts SET data = ?, version = ?, importance = ?, created_at = ?, "
                    "updated_at = ?, expires_at = ?, embed_model = ?, metadata = ? WHERE id = ?",
                    (*values, fact_id),
                )
                db.execute("DELETE FROM ma_fact_vectors WHERE fact_id = ?", (fact_id,))
            index_terms(db, fact_id, namespace, scope, index_text(fact.key, fact.value))
            if embedding is not None:
                insert_vectors(db, fact_id, owner(namespace, scope), fact.expires_at, embedding)
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
