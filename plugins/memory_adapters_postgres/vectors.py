"""Semantic recall as operations (see :mod:`.sql`): a fact's vectors are rows of
``fact_vectors`` (one per field, a ``real[]``), written in the same statement as the fact and
removed with it by a foreign key. With pgvector the scope's vectors are compared in SQL (the
``vector_candidates`` function, migration 7; the whole scope, or through a partial HNSW index
per dims for scopes of more than ``hnsw_min_vectors`` vectors), which answers only the facts
within float32 rounding of the best, with their vectors: they are scored here exactly
(:mod:`memory_adapters.exact_vectors`), so the scores and the order are the reference's to
the last bit. Without pgvector the scope's vectors are fetched and compared here."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from memory_adapters.embedders import Embedding
from memory_adapters.exact_vectors import Candidate, order, pack, slack
from memory_adapters.facts import Fact, FactFilter

from .sql import (
    FACT,
    WRITE_VECTORS,
    Op,
    Q,
    Statements,
    fact_of,
    filter_params,
    filter_sql,
    similarities,
    vector_rows,
)

HNSW_MAX_DIMS = 2000
"""pgvector's limit for an HNSW index on ``vector``: larger vectors are always searched
exactly."""

EXACT_ONLY = 2**31 - 2  # p_exact_below + 1 must fit an integer
"""The ``p_exact_below`` that makes ``vector_candidates`` screen every vector of the scope."""


class VectorOps(Statements):
    """The operations of semantic recall."""

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
        keys: Sequence[str] | None = None,
        where: FactFilter | None = None,
    ) -> Op[list[Fact]]:
        query = [float(x) for x in vector]
        if limit <= 0 or not query or (keys is not None and not keys):
            return []
        now = time.time()
        chosen = None if keys is None else list(dict.fromkeys(keys))
        if self.pgvector_schema is not None:
            # The server screens (vector_candidates, migration 7): the facts that can be
            # among the best, by pgvector's float32 inner product within a margin of its
            # rounding, with their vectors; they are scored here exactly, as every store.
            ef = min(1000, max(100, 4 * limit))
            f = filter_params(where)
            rows = yield Q(
                self.q(
                    "SELECT * FROM {s}.vector_candidates(%s, %s, %s, %s::real[], %s, %s, %s, "
                    "%s, %s, %s::text[], %s::text[], %s::text[], %s, %s, %s)"
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
                    chosen,
                    f["fk"],
                    f["fv"],
                    f["since"],
                    f["until"],
                    slack(len(query)) * max(1.0, math.sqrt(math.fsum(x * x for x in query))),
                ),
                binary=True,  # real[] as float4: the stored floats exactly
            )
            candidates = [
                Candidate(float(r[3]), float(r[5]), r[0], [pack(v) for v in r[8] or ()])
                for r in rows
            ]
            return [fact_of(rows[i][:8], score) for i, score in order(query, candidates, limit)]
        # The exact search without pgvector: every vector of the scope by this model and size
        # (the index on (namespace, scope, model, dims)), or of the given keys (the primary
        # key), of facts passing the filter, compared here.
        p: dict[str, Any] = {
            "ns": namespace,
            "sc": scope,
            "m": model,
            "dims": len(query),
            "now": now,
            "keys": chosen,
        }
        within = "" if chosen is None else " AND v.key = ANY(%(keys)s::text[])"
        rows = yield Q(
            self.q(
                "SELECT v.key, array_send(v.embedding), f.importance, f.updated_at "
                "FROM {s}.fact_vectors v JOIN {s}.facts f ON f.namespace = v.namespace "
                "AND f.scope = v.scope AND f.key = v.key AND f.embed_model = v.model "
                "WHERE v.namespace = %(ns)s AND v.scope = %(sc)s AND v.model = %(m)s "
                "AND v.dims = %(dims)s AND (f.expires_at IS NULL OR f.expires_at > %(now)s)"
                + within
                + filter_sql(where, "f", p)
            ),
            p,
            binary=True,
        )
        if not rows:
            return []
        sims = similarities([bytes(r[1]) for r in rows], query)
        best: dict[str, tuple[float, float, float]] = {}
        for r, sim in zip(rows, sims, strict=True):
            got = best.get(r[0])
            if got is None or sim > got[0]:
                best[r[0]] = (sim, float(r[2]), float(r[3]))
        top = sorted(best.items(), key=lambda kv: (-kv[1][0], -kv[1][1], -kv[1][2], kv[0]))
        top = top[:limit]
        facts = yield Q(
            self.q(
                f"SELECT {FACT} FROM {{s}}.facts WHERE namespace = %s AND scope = %s "
                "AND key = ANY(%s::text[])"
            ),
            (namespace, scope, [k for k, _ in top]),
        )
        by_key = {r[0]: r for r in facts}
        return [fact_of(by_key[k], v[0]) for k, v in top if k in by_key]

    def _facts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> Op[list[Fact]]:
        rows = yield Q(
            self.q(
                f"SELECT {FACT} FROM {{s}}.facts WHERE namespace = %s AND scope = %s "
                "AND embed_model IS DISTINCT FROM %s "
                'AND (expires_at IS NULL OR expires_at > %s) ORDER BY key COLLATE "C" LIMIT %s'
            ),
            (namespace, scope, model, time.time(), limit),
        )
        return [fact_of(r) for r in rows]

    def _refresh_fact(
        self, namespace: str, scope: str, key: str, version: int, ttl: float
    ) -> Op[bool]:
        now = time.time()
        row = yield Q(
            self.q(
                "WITH w AS (UPDATE {s}.facts SET version = version + 1, updated_at = %(now)s, "
                "expires_at = %(exp)s WHERE namespace = %(ns)s AND scope = %(sc)s "
                "AND key = %(k)s AND version = %(v)s "
                "AND (expires_at IS NULL OR expires_at > %(now)s) RETURNING version), "
                # the postings name the version they were written with: the same terms
                "t AS (UPDATE {s}.fact_terms SET version = w.version FROM w "
                "WHERE namespace = %(ns)s AND scope = %(sc)s AND key = %(k)s) "
                "SELECT version FROM w"
            ),
            {"ns": namespace, "sc": scope, "k": key, "v": version, "now": now, "exp": now + ttl},
            "one",
        )
        return row is not None

    def _set_fact_embedding(
        self, namespace: str, scope: str, key: str, version: int, embedding: Embedding
    ) -> Op[bool]:
        model, dims, fields, flat = vector_rows(embedding)
        if fields:
            yield from self._ensure_index(dims)
        row = yield Q(
            self.q(
                "WITH w AS (UPDATE {s}.facts SET embed_model = %(m)s WHERE namespace = %(ns)s "
                "AND scope = %(sc)s AND key = %(k)s AND version = %(v)s "
                "AND (expires_at IS NULL OR expires_at > %(now)s) RETURNING version)"
                + WRITE_VECTORS
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
