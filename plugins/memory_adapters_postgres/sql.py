"""What every part of the PostgreSQL store shares: the statement an operation yields
(:class:`Q`), the CTEs that write a fact's postings, vectors and history with the fact, the
SQL of a :class:`~memory_adapters.facts.FactFilter`, and :class:`Statements`, the base of the
operation mixins (:mod:`.log`, :mod:`.facts`, :mod:`.vectors`, :mod:`.operations`).

An operation is a generator of :class:`Q`: it yields a statement, gets its result back, and
returns its answer; :class:`~.store.PostgresStore` drives it on a sync connection or an async
one, so each operation is written once.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from memory_adapters.embedders import Embedding
from memory_adapters.errors import InvalidInput
from memory_adapters.facts import Fact, FactFilter

T = TypeVar("T")


@dataclass(slots=True)
class Q:
    """One SQL statement of an operation, and what to fetch from it."""

    sql: str
    params: Any = None
    fetch: Literal["all", "one", "none", "rowcount"] = "all"
    binary: bool = False
    """Send the parameters in binary: arrays of text then need no escaping."""


Op = Generator[Q, Any, T]

FACT = "key, data, version, importance, created_at, updated_at, expires_at, metadata::text"
"""The columns a :class:`~memory_adapters.facts.Fact` is built from (:func:`fact_of`)."""

# After a CTE "w" that wrote (or not) the fact %(ns)s/%(sc)s/%(k)s: replace its vectors by
# those of %(fields)s (%(dims)s floats each, concatenated in %(flat)s) in the same statement.
# The old fields that are not rewritten are deleted, the others upserted (a DELETE and an
# INSERT of one key in one statement would collide). A concurrent put may leave a row this
# statement's snapshot did not see: searches only count vectors of the model the fact
# records (facts.embed_model), and the next put or re-embedding replaces them.
WRITE_VECTORS = (
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

# After a CTE "w" that wrote (or not) the fact %(ns)s/%(sc)s/%(k)s and returns its "version":
# replace its postings by %(terms)s with their counts %(tfs)s (distinct terms), in the same
# statement. As for vectors, the postings of terms the fact no longer holds are deleted and
# the others upserted. Each posting records the version of the fact it was written with, and
# keyword search counts only postings of the fact's current version: a posting that a
# concurrent put left behind (this statement's snapshot did not see it) is never counted,
# and the next put of the fact deletes it. For ", ..." before the final SELECT.
WRITE_TERMS = (
    ", td AS (DELETE FROM {s}.fact_terms AS t WHERE t.namespace = %(ns)s "
    "AND t.scope = %(sc)s AND t.key = %(k)s AND EXISTS (SELECT 1 FROM w) "
    "AND t.term NOT IN (SELECT unnest(%(terms)s::text[]))), "
    "ti AS (INSERT INTO {s}.fact_terms (namespace, scope, term, key, tf, version) "
    "SELECT %(ns)s, %(sc)s, u.term, %(k)s, u.tf, w.version "
    "FROM w, unnest(%(terms)s::text[], %(tfs)s::integer[]) AS u(term, tf) "
    "ON CONFLICT (namespace, scope, term, key) DO UPDATE SET tf = excluded.tf, "
    "version = excluded.version) "
)

# After a CTE "w" that wrote (or deleted) the fact %(ns)s/%(sc)s/%(k)s and returns its
# "version" (and "live", for a delete): record the change in its history, written by %(wr)s,
# and keep the newest %(keep)s + 1 versions (the row inserted here is not visible to the
# DELETE of the same statement, hence keep = limit - 1). For ", ..." before the final SELECT.
WRITE_HISTORY = (
    ", h AS (INSERT INTO {s}.fact_history (namespace, scope, key, version, op, data, at, "
    "writer) SELECT %(ns)s, %(sc)s, %(k)s, w.version, {op}, {data}, %(now)s, %(wr)s "
    "FROM w WHERE {live}), "
    "hp AS (DELETE FROM {s}.fact_history WHERE namespace = %(ns)s "
    'AND scope COLLATE "C" = %(sc)s AND key = %(k)s AND EXISTS (SELECT 1 FROM w WHERE {live}) '
    "AND id <= (SELECT id FROM {s}.fact_history WHERE namespace = %(ns)s "
    'AND scope COLLATE "C" = %(sc)s AND key = %(k)s ORDER BY id DESC OFFSET %(keep)s LIMIT 1)) '
)


def fact_of(row: Sequence[Any], score: float | None = None) -> Fact:
    """The fact of a row of :data:`FACT`."""
    return Fact.from_row(row[0], row[1], row[2], row[3], row[4], row[5], row[6], score, row[7])


def postings(text: str) -> tuple[list[str], list[int], int]:
    """A fact's terms (``text`` as :meth:`Store.put_fact
    <memory_adapters.store.Store.put_fact>` takes it: space-separated, repeats kept) as
    statement parameters: its distinct terms, their counts, and its length (the number of
    terms)."""
    counts: dict[str, int] = {}
    length = 0
    for term in text.split():
        counts[term] = counts.get(term, 0) + 1
        length += 1
    return list(counts), list(counts.values()), length


def filter_params(where: FactFilter | None) -> dict[str, Any]:
    """A filter as the parameters of :func:`filter_sql` (and of the ``vector_candidates``
    function): metadata keys, their values as JSON text, ``since`` and ``until``."""
    if where is None:
        return {"fk": [], "fv": [], "since": None, "until": None}
    return {
        "fk": [k for k, _ in where.metadata],
        "fv": [json.dumps(v) for _, v in where.metadata],
        "since": where.since,
        "until": where.until,
    }


def filter_sql(where: FactFilter | None, alias: str, params: dict[str, Any]) -> str:
    """``" AND ..."``: the condition of ``where`` on the facts row ``alias``, its parameters
    added to ``params`` (``""`` without a filter). :meth:`FactFilter.passes
    <memory_adapters.facts.FactFilter.passes>` exactly: each key present in the metadata with
    a value equal as ``jsonb`` (``true`` only to ``true``, numbers by value, strings exactly,
    ``null`` only to a JSON ``null``: a missing key is SQL NULL, never equal), and
    ``since <= updated_at < until``."""
    if where is None:
        return ""
    params.update(filter_params(where))
    out = ""
    for i in range(len(where.metadata)):
        out += (
            f" AND ({alias}.metadata -> (%(fk)s::text[])[{i + 1}])::jsonb"
            f" = ((%(fv)s::text[])[{i + 1}])::jsonb"
        )
    if where.since is not None:
        out += f" AND {alias}.updated_at >= %(since)s"
    if where.until is not None:
        out += f" AND {alias}.updated_at < %(until)s"
    return out


def vector_rows(embedding: Embedding | None) -> tuple[str | None, int, list[str], list[float]]:
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


def similarities(blobs: Sequence[bytes], query: Sequence[float]) -> list[float]:
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


class Statements:
    """The base of the operation mixins: the schema-qualified SQL (:meth:`q`) and what the
    store decides when it opens (set by :class:`~.store.PostgresStore`)."""

    _s: str
    _sql: dict[str, str]
    _psycopg: Any
    pgvector_schema: str | None
    hnsw_min_vectors: int | None
    _hnsw_dims: set[int]

    def q(self, text: str) -> str:
        """``text`` with ``{s}`` replaced by the quoted schema name (cached)."""
        got = self._sql.get(text)
        if got is None:
            got = self._sql[text] = text.replace("{s}", self._s)
        return got
