"""Exact cosine ranking of one scope's fact vectors, for stores without a vector index.

The SQLite and MongoDB stores (and any store that keeps vectors as bytes) read every vector
of one scope made by the requested model, and rank them here. The cost is linear in the
scope's vectors: one pass of multiply-adds over ``facts x fields x dims`` numbers.

* Vectors are kept as little-endian float32 bytes (:func:`pack`, :func:`unpack`), 4 bytes per
  dimension.
* With numpy importable (it is not a dependency of the core; the ``embeddings`` extra brings
  it), one matrix-vector product over the scope's vectors, read with ``np.frombuffer`` from
  one joined buffer, screens the candidates in float32; without numpy, a pure-Python
  ``sum(map(mul, ...))`` per vector does.
* Either way (:func:`screen`) the few candidates that can be in the result (those within
  float32 rounding of the ``limit``-th best) are then scored exactly (:func:`order`,
  ``math.fsum`` in double precision) and sorted: so both paths give the same scores and the
  same order, to the last bit.

Ties are broken as the store contract says: higher importance, then newer, then key order.
"""

from __future__ import annotations

import heapq
import math
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from operator import mul
from typing import Any

_SWAP = sys.byteorder != "little"


def pack(vector: Sequence[float]) -> bytes:
    """``vector`` as little-endian float32 bytes."""
    values = array("f", vector)
    if _SWAP:  # pragma: no cover - big-endian machines
        values.byteswap()
    return values.tobytes()


def unpack(blob: bytes) -> list[float]:
    """The floats of bytes made by :func:`pack`."""
    values = array("f")
    values.frombytes(blob)
    if _SWAP:  # pragma: no cover - big-endian machines
        values.byteswap()
    return values.tolist()


def exact_dot(blob: bytes, query: Sequence[float]) -> float:
    """The dot product of a packed vector and ``query``, correctly rounded (``math.fsum``):
    the score every path reports."""
    return math.fsum(map(mul, unpack(blob), query))


@dataclass(frozen=True, slots=True)
class Candidate:
    """One fact that may be in the result: what breaks ties between equal scores, and its
    vectors (``blobs``, one per indexed field, each of the query's dimensions)."""

    importance: float
    updated_at: float
    key: str
    blobs: Sequence[bytes]


def _numpy() -> Any:
    """numpy, or ``None`` when it is not installed."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _screen_numpy(
    np: Any, query: Sequence[float], owners: list[int], blobs: list[bytes], limit: int
) -> set[int]:
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), len(query))
    scores = matrix @ np.asarray(query, dtype=np.float32)
    ids, inverse = np.unique(np.asarray(owners, dtype=np.int64), return_inverse=True)
    if len(ids) == len(owners):  # one vector per fact: the usual case
        best = np.empty_like(scores)
        best[inverse] = scores
    else:
        best = np.full(len(ids), -np.inf, dtype=scores.dtype)
        np.maximum.at(best, inverse, scores)
    if len(ids) > limit:
        kth = np.partition(best, len(ids) - limit)[len(ids) - limit]
        ids = ids[best >= kth - slack(len(query))]
    return set(ids.tolist())


def _screen_python(
    query: Sequence[float], owners: list[int], blobs: list[bytes], limit: int
) -> set[int]:
    q = list(query)
    best: dict[int, float] = {}
    for owner, blob in zip(owners, blobs, strict=True):
        score = sum(map(mul, unpack(blob), q))
        if owner not in best or score > best[owner]:
            best[owner] = score
    if len(best) <= limit:
        return set(best)
    kth = heapq.nlargest(limit, best.values())[-1] - slack(len(q))
    return {o for o, s in best.items() if s >= kth}


def slack(dims: int) -> float:
    """A margin of at least twice the float32 rounding error of a dot product of two unit
    vectors of ``dims`` dimensions (the query rounded to float32 included): a fact whose
    float32 score is more than this below the ``limit``-th best cannot be among the ``limit``
    best exactly. The PostgreSQL store's screening with pgvector uses it too."""
    return 2.4e-7 * (dims + 2) + 1e-9


def screen(
    query: Sequence[float],
    rows: Sequence[tuple[int, bytes]],
    limit: int,
    *,
    use_numpy: bool | None = None,
) -> dict[int, list[bytes]]:
    """The facts that can be among the best ``limit`` for the unit vector ``query``, with all
    their vectors: ``rows`` are (fact id, packed vector) pairs, several per fact when it
    has several fields, every vector of ``len(query)`` dimensions.

    A fact's screening score is its best vector's dot product, in float32 with numpy
    (``use_numpy``: ``None`` when importable, ``False`` never), else in double precision;
    every fact within rounding of the ``limit``-th best is kept, so the exact ranking of
    :func:`order` over what is returned is the exact ranking over all of ``rows``.
    """
    if limit <= 0 or not rows:
        return {}
    np = _numpy() if use_numpy is not False else None
    owners = [r[0] for r in rows]
    blobs = [r[1] for r in rows]
    if np is not None:
        keep = _screen_numpy(np, query, owners, blobs, limit)
    else:
        keep = _screen_python(query, owners, blobs, limit)
    out: dict[int, list[bytes]] = {}
    for owner, blob in rows:
        if owner in keep:
            out.setdefault(owner, []).append(blob)
    return out


def order(
    query: Sequence[float], candidates: Sequence[Candidate], limit: int
) -> list[tuple[int, float]]:
    """The best ``limit`` of ``candidates``, as (index into ``candidates``, score) pairs, best
    first: a fact's score is the exact cosine similarity (:func:`exact_dot`) of its best
    vector; ties go to higher importance, then newer, then key order."""
    scored = []
    for i, fact in enumerate(candidates):
        if not fact.blobs:
            continue
        score = max(exact_dot(b, query) for b in fact.blobs)
        scored.append((-score, -fact.importance, -fact.updated_at, fact.key, i))
    scored.sort(key=lambda s: s[:4])
    return [(s[4], -s[0]) for s in scored[: max(limit, 0)]]
