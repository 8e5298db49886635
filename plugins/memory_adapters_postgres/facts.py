"""Facts as operations (see :mod:`.sql`).

A fact is a row of ``facts`` (its value as the core's JSON text, ``metadata`` as ``json``
text kept exactly as given, never indexed). Keyword search finds it through its postings:
one row of ``fact_terms`` per distinct term of the fact, ``(namespace, scope, term, key)``
with the term's count, written by the same statement as the fact (CTEs over ``unnest``), so
that the candidates of a search are read from the scope's own posting lists and no other
scope's facts make them longer. ``facts.length`` is the fact's number of terms; the scope's
statistics (``match_terms``' ``documents`` and ``total_length``) are an index-only read of
``facts_by_scope (namespace, scope) INCLUDE (length, expires_at)``. Postings go with their
fact (a foreign key, ``ON DELETE CASCADE``): delete, prune, erase and retention need nothing
more. Facts stored before migration 6 get their postings when a store opens
(:meth:`FactOps._index_old_facts`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from memory_adapters.embedders import Embedding
from memory_adapters.errors import VersionConflict
from memory_adapters.facts import Fact, FactFilter, index_text
from memory_adapters.operations import DEFAULT_HISTORY_LIMIT, FactChange, Writer
from memory_adapters.ranking import TermHit, TermMatches
from memory_adapters.store import prefix_upper_bound
from memory_adapters.validation import dumps

from .sql import (
    FACT,
    WRITE_HISTORY,
    WRITE_TERMS,
    WRITE_VECTORS,
    Op,
    Q,
    fact_of,
    filter_sql,
    postings,
    vector_rows,
)
from .vectors import VectorOps


class FactOps(VectorOps):
    """The operations of facts (and of their vectors, :class:`~.vectors.VectorOps`)."""

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
        metadata: str | None = None,
    ) -> Op[Fact]:
        now = time.time()
        terms, tfs, length = postings(text)
        model, dims, fields, flat = vector_rows(embedding)
        if fields:
            yield from self._ensure_index(dims)
        p = {
            "ns": namespace,
            "sc": scope,
            "k": key,
            "d": data,
            "terms": terms,
            "tfs": tfs,
            "len": length,
            "md": metadata,
            "i": importance,
            "now": now,
            "exp": expires_at,
            "ev": expected_version,
            "m": model,
            "dims": dims,
            "fields": fields,
            "flat": flat,
        }
        tail = self._history_ctes(p, writer, history_limit, "put") + WRITE_TERMS + WRITE_VECTORS
        live = "(f.expires_at IS NULL OR f.expires_at > %(now)s)"
        if expected_version is None or expected_version == 0:
            guard = "" if expected_version is None else f"WHERE NOT {live}"
            row = yield Q(
                self.q(
                    "WITH w AS (INSERT INTO {s}.facts AS f (namespace, scope, key, data, version, "
                    "importance, created_at, updated_at, expires_at, length, metadata, "
                    "embed_model) VALUES (%(ns)s, %(sc)s, %(k)s, %(d)s, 1, %(i)s, %(now)s, "
                    "%(now)s, %(exp)s, %(len)s, %(md)s::json, %(m)s) "
                    "ON CONFLICT (namespace, scope, key) DO UPDATE SET data = excluded.data, "
                    f"version = CASE WHEN {live} THEN f.version + 1 ELSE 1 END, "
                    f"created_at = CASE WHEN {live} THEN f.created_at "
                    "ELSE excluded.created_at END, "
                    "importance = excluded.importance, updated_at = excluded.updated_at, "
                    "expires_at = excluded.expires_at, length = excluded.length, "
                    "metadata = excluded.metadata, "
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
                    "length = %(len)s, metadata = %(md)s::json, embed_model = %(m)s "
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
        return Fact.from_row(
            key, data, int(row[0]), importance, float(row[1]), now, expires_at, None, metadata
        )

    def _get_fact(self, namespace: str, scope: str, key: str) -> Op[Fact | None]:
        row = yield Q(
            self.q(
                f"SELECT {FACT} FROM {{s}}.facts WHERE namespace = %s AND scope = %s "
                "AND key = %s AND (expires_at IS NULL OR expires_at > %s)"
            ),
            (namespace, scope, key, time.time()),
            "one",
        )
        return None if row is None else fact_of(row)

    def _list_facts(
        self, namespace: str, scope: str, *, limit: int | None = None
    ) -> Op[list[Fact]]:
        rows = yield Q(
            self.q(
                f"SELECT {FACT} FROM {{s}}.facts WHERE namespace = %s AND scope = %s "
                'AND (expires_at IS NULL OR expires_at > %s) ORDER BY key COLLATE "C" LIMIT %s'
            ),
            (namespace, scope, time.time(), limit),
        )
        return [fact_of(r) for r in rows]

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

    def _get_facts(self, namespace: str, scope: str, keys: Sequence[str]) -> Op[list[Fact]]:
        if not keys:
            return []
        rows = yield Q(
            self.q(
                f"SELECT {FACT} FROM unnest(%(keys)s::text[]) WITH ORDINALITY AS u(k, n) "
                "JOIN {s}.facts f ON f.namespace = %(ns)s AND f.scope = %(sc)s AND f.key = u.k "
                "WHERE f.expires_at IS NULL OR f.expires_at > %(now)s ORDER BY u.n"
            ),
            {"keys": list(keys), "ns": namespace, "sc": scope, "now": time.time()},
        )
        return [fact_of(r) for r in rows]

    def _match_terms(
        self,
        namespace: str,
        scope: str,
        terms: Sequence[str],
        *,
        where: FactFilter | None = None,
    ) -> Op[TermMatches]:
        # One statement: the scope's statistics (an index-only read of facts_by_scope), then
        # the hits: each term's posting list in the scope (the primary key of fact_terms),
        # joined to the facts of the postings' version, unexpired and passing the filter.
        # A hit's counts come back as the positions of its terms and their counts.
        p: dict[str, Any] = {
            "ns": namespace,
            "sc": scope,
            "now": time.time(),
            "terms": list(terms),
        }
        rows = yield Q(
            self.q(
                "WITH st AS (SELECT count(*) AS n, coalesce(sum(length), 0) AS total "
                'FROM {s}.facts WHERE namespace = %(ns)s AND scope COLLATE "C" = %(sc)s '
                "AND (expires_at IS NULL OR expires_at > %(now)s)), "
                "h AS (SELECT f.key, coalesce(f.length, 0) AS length, f.importance, "
                "f.updated_at, array_agg(u.n) AS at, array_agg(t.tf) AS tf "
                "FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS u(term, n) "
                "JOIN {s}.fact_terms t ON t.namespace = %(ns)s AND t.scope = %(sc)s "
                "AND t.term = u.term JOIN {s}.facts f ON f.namespace = t.namespace "
                "AND f.scope = t.scope AND f.key = t.key AND f.version = t.version "
                "WHERE (f.expires_at IS NULL OR f.expires_at > %(now)s)"
                + filter_sql(where, "f", p)
                + " GROUP BY f.key, f.length, f.importance, f.updated_at) "
                "SELECT st.n, st.total, h.key, h.length, h.importance, h.updated_at, h.at, h.tf "
                "FROM st LEFT JOIN h ON true"
            ),
            p,
        )
        hits: list[TermHit] = []
        for row in rows:
            if row[2] is None:
                continue
            counts = [0] * len(terms)
            for at, tf in zip(row[6], row[7], strict=True):
                counts[int(at) - 1] = int(tf)
            hits.append(TermHit(row[2], int(row[3]), tuple(counts), float(row[4]), float(row[5])))
        first = rows[0]
        return TermMatches(int(first[0]), int(first[1]), hits)

    def _index_old_facts(self, batch: int = 500) -> Op[int]:
        """Give the facts stored before migration 6 (``length IS NULL``: no postings) their
        postings and length, ``batch`` facts per statement; return how many it indexed. Their
        terms come from the core's analyzer (:func:`~memory_adapters.facts.index_text`), so
        this runs here, when a store opens, not in SQL. Idempotent and safe when several
        processes open at once: a fact is indexed only while its length is still NULL and its
        version the one read (a put since then indexed it already)."""
        done = 0
        after: tuple[str, str, str] | None = None
        while True:
            rows = yield Q(
                self.q(
                    "SELECT namespace, scope, key, data, version FROM {s}.facts "
                    "WHERE length IS NULL AND (%(a)s::boolean IS NULL "
                    "OR (namespace, scope, key) > (%(ans)s, %(asc)s, %(ak)s)) "
                    "ORDER BY namespace, scope, key LIMIT %(n)s"
                ),
                {
                    "a": None if after is None else True,
                    "ans": None if after is None else after[0],
                    "asc": None if after is None else after[1],
                    "ak": None if after is None else after[2],
                    "n": batch,
                },
            )
            if not rows:
                return done
            facts: dict[str, list[Any]] = {"ns": [], "sc": [], "k": [], "v": [], "len": []}
            post: dict[str, list[Any]] = {"pns": [], "psc": [], "pk": [], "pt": [], "ptf": []}
            for ns, sc, key, data, version in rows:
                terms, tfs, length = postings(index_text(key, json.loads(data)))
                for name, value in zip(facts, (ns, sc, key, version, length), strict=True):
                    facts[name].append(value)
                post["pns"] += [ns] * len(terms)
                post["psc"] += [sc] * len(terms)
                post["pk"] += [key] * len(terms)
                post["pt"] += terms
                post["ptf"] += tfs
            count = yield Q(
                self.q(
                    "WITH w AS (UPDATE {s}.facts AS f SET length = x.len FROM unnest("
                    "%(ns)s::text[], %(sc)s::text[], %(k)s::text[], %(v)s::bigint[], "
                    "%(len)s::integer[]) AS x(ns, sc, k, v, len) WHERE f.namespace = x.ns "
                    "AND f.scope = x.sc AND f.key = x.k AND f.version = x.v "
                    "AND f.length IS NULL RETURNING f.namespace, f.scope, f.key, f.version), "
                    "i AS (INSERT INTO {s}.fact_terms (namespace, scope, term, key, tf, version) "
                    "SELECT w.namespace, w.scope, p.term, w.key, p.tf, w.version FROM w "
                    "JOIN unnest(%(pns)s::text[], %(psc)s::text[], %(pk)s::text[], "
                    "%(pt)s::text[], %(ptf)s::integer[]) AS p(ns, sc, k, term, tf) "
                    "ON p.ns = w.namespace AND p.sc = w.scope AND p.k = w.key "
                    "ON CONFLICT (namespace, scope, term, key) DO UPDATE SET tf = excluded.tf, "
                    "version = excluded.version) "
                    "SELECT count(*) FROM w"
                ),
                {**facts, **post},
                "one",
            )
            done += int(count[0])
            last = rows[-1]
            after = (last[0], last[1], last[2])
            if len(rows) < batch:
                return done

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
        return WRITE_HISTORY.format(
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
        model, dims, fields, flat = vector_rows(embedding)
        if fields:
            yield from self._ensure_index(dims)
        changes = list(reversed(history))  # given newest first: ids in time order
        terms, tfs, length = postings(index_text(fact.key, fact.value))
        p = {
            "ns": namespace,
            "sc": scope,
            "k": fact.key,
            "d": dumps(fact.value),
            "terms": terms,
            "tfs": tfs,
            "len": length,
            "md": None if fact.metadata is None else dumps(fact.metadata),
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
                "importance, created_at, updated_at, expires_at, length, metadata, embed_model) "
                "VALUES (%(ns)s, %(sc)s, %(k)s, %(d)s, %(v)s, %(i)s, %(ca)s, %(ua)s, %(exp)s, "
                "%(len)s, %(md)s::json, %(m)s) "
                "ON CONFLICT (namespace, scope, key) DO UPDATE SET data = excluded.data, "
                "version = excluded.version, importance = excluded.importance, "
                "created_at = excluded.created_at, updated_at = excluded.updated_at, "
                "expires_at = excluded.expires_at, length = excluded.length, "
                "metadata = excluded.metadata, "
                "embed_model = excluded.embed_model WHERE f.version < excluded.version "
                "OR NOT (f.expires_at IS NULL OR f.expires_at > %(now)s) "
                "RETURNING version, created_at), "
                "hd AS (DELETE FROM {s}.fact_history WHERE namespace = %(ns)s "
                'AND scope COLLATE "C" = %(sc)s AND key = %(k)s AND EXISTS (SELECT 1 FROM w)), '
                "hi AS (INSERT INTO {s}.fact_history (namespace, scope, key, version, op, data, "
                "at, writer) SELECT %(ns)s, %(sc)s, %(k)s, u.v, u.op, u.d, u.at, u.wr "
                "FROM w, unnest(%(hv)s::bigint[], %(hop)s::text[], %(hd)s::text[], "
                "%(hat)s::float8[], %(hw)s::text[]) WITH ORDINALITY AS u(v, op, d, at, wr, n) "
                "ORDER BY u.n)" + WRITE_TERMS + WRITE_VECTORS
            ),
            p,
            "one",
        )
        return row is not None
