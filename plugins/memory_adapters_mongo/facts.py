"""Facts (long-term memory and working memory), as plans (see :mod:`.ops`).

Layout. One document of ``ma_facts`` per (namespace, scope, key)::

    {scope, namespace, key, data, version, rev, importance, created_at, updated_at,
     expires_at, expires?, terms: [...], tf: {term: count}, length, metadata?, meta?,
     embed_model?, dims?, vector?, vector_field?, vectors?: [{field, vector}]}

``data`` is the value's JSON text as the core serialized it, a string, never a BSON
subdocument. ``expires_at`` is the expiry in seconds since the epoch (``null``: never) and is
what every read filters on; ``expires`` is the same instant as a BSON date, present only on
facts that expire, for the TTL index. ``terms``, ``tf`` and ``length`` are the terms keyword
search finds the fact by, and ``metadata`` / ``meta`` its metadata and what filters compare
(:mod:`.terms`). Facts of earlier versions had ``text`` and ``words`` instead: a write
removes them.

Embeddings (semantic recall): ``embed_model`` names the model that embedded the fact and
``dims`` its vectors' dimensions (both absent: not embedded; present with no vectors: left
unindexed by that model on purpose). ``vector`` is the vector of the fact's primary field
(the whole text, ``"$"``, when indexed, else the first field name in order), named by
``vector_field``; ``vectors`` holds the other fields' as ``{field, vector}`` documents (an
array, because a field name such as ``"$"`` or ``"a.b"`` cannot be a MongoDB field name).
Every vector is a BSON binary vector of float32 (subtype 9, as Atlas Vector Search indexes
it). A write without an embedding removes all five.

Compare-and-swap without transactions: a write reads the fact, checks the expected version,
then updates it only if its ``rev`` (a random token replaced on every write) is still the one
it read, or inserts it under the unique index ``(scope, namespace, key)``. Losing either race
means somebody else wrote in between: the write starts over, so versions grow by exactly one
per write.
"""

from __future__ import annotations

import math
import random
import re
import secrets
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from memory_adapters.embedders import WHOLE, Embedding
from memory_adapters.errors import InvalidTTL, StoreUnavailable, VersionConflict
from memory_adapters.exact_vectors import Candidate, order, pack, screen
from memory_adapters.facts import Fact, FactFilter
from memory_adapters.operations import DEFAULT_HISTORY_LIMIT, FactChange, Writer

from .ops import FACTS, HISTORY, DuplicateKey, Op, Plan, Sleep
from .schema import check_size, text_bound
from .terms import live as _live
from .terms import metadata_fields, postings, where_query

CAS_DEADLINE_SECONDS = 30.0
"""How long a fact write keeps retrying against other writers before it gives up."""

_FIELDS = {
    "_id": 0,
    "key": 1,
    "data": 1,
    "version": 1,
    "importance": 1,
    "created_at": 1,
    "updated_at": 1,
    "expires_at": 1,
    "metadata": 1,
}
_STATE = {"_id": 1, "version": 1, "rev": 1, "created_at": 1, "expires_at": 1}
_EMBEDDING = ("embed_model", "dims", "vector", "vector_field", "vectors")
"""The fields of a fact's embedding."""
_METADATA = ("metadata", "meta")
"""The fields of a fact's metadata."""
_LEGACY = ("text", "words")
"""The search fields of facts written by earlier versions, removed by any write."""
_VECTOR_HEADER = b"\x27\x00"
"""The first bytes of a BSON binary vector of float32 (dtype 0x27, no padding)."""


def _where(namespace: str, scope: str, key: str) -> dict[str, Any]:
    return {"scope": scope, "namespace": namespace, "key": key}


def _fact(doc: dict[str, Any], score: float | None = None) -> Fact:
    return Fact.from_row(
        doc["key"],
        doc["data"],
        doc["version"],
        doc["importance"],
        doc["created_at"],
        doc["updated_at"],
        doc.get("expires_at"),
        score,
        doc.get("metadata"),
    )


def _is_live(doc: dict[str, Any] | None, now: float) -> bool:
    if doc is None:
        return False
    expires = doc.get("expires_at")
    return expires is None or float(expires) > now


def _expires(expires_at: float) -> datetime:
    # BSON dates have millisecond precision: round down, so the TTL never fires early
    try:
        return datetime.fromtimestamp(math.floor(expires_at * 1000) / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):  # the core refuses these first (MAX_TTL)
        raise InvalidTTL(f"expires_at {expires_at!r} is not a date MongoDB can hold") from None


def _backoff(deadline: float, key: str) -> Plan[None]:
    """After a lost race: give up past ``deadline``, else wait a moment (a few ms at most)."""
    if time.monotonic() > deadline:
        raise StoreUnavailable(f"could not write fact {key!r}: too many concurrent writers")
    yield Sleep(random.uniform(0, 0.005))


def put(
    namespace: str,
    scope: str,
    key: str,
    data: str,
    *,
    text: str,
    importance: float,
    expires_at: float | None,
    expected_version: int | None,
    max_bytes: int,
    embedding: Embedding | None = None,
    writer: Writer | None = None,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    metadata: str | None = None,
) -> Plan[Fact]:
    """Create or replace a fact, with an optional compare-and-swap on its version; its
    terms, metadata and embedding replace the ones it had (``None``: removes them). With
    ``writer``, then record the change in the fact's history (:func:`record`)."""
    indexed = postings(text)
    described = metadata_fields(metadata)
    estimate = 512 + text_bound(namespace, scope, key, data) + 3 * text_bound(metadata)
    estimate += sum(32 + 2 * text_bound(t) for t in indexed["terms"])
    fields: dict[str, Any] = {
        "data": data,
        "importance": importance,
        "expires_at": expires_at,
        **indexed,
        **described,
    }
    embedded = embedding_fields(embedding)
    fields.update(embedded)
    if embedding is not None:
        estimate += 64 + text_bound(embedding.model)
        estimate += sum(32 + text_bound(f) + 4 * len(v) for f, v in embedding.vectors.items())
    if expires_at is not None:
        fields["expires"] = _expires(expires_at)
    check_size(estimate, lambda: {**_where(namespace, scope, key), **fields}, max_bytes, "the fact")
    deadline = time.monotonic() + CAS_DEADLINE_SECONDS
    while True:
        now = time.time()
        doc = yield Op(FACTS, "find_one", (_where(namespace, scope, key),), {"projection": _STATE})
        live = _is_live(doc, now)
        current = int(doc["version"]) if live else 0
        if expected_version is not None and expected_version != current:
            raise VersionConflict(key, expected_version, current)
        created = float(doc["created_at"]) if live else now
        state = {
            "version": current + 1,
            "rev": secrets.token_hex(8),
            "created_at": created,
            "updated_at": now,
        }
        try:
            if doc is None:
                yield Op(
                    FACTS, "insert_one", ({**_where(namespace, scope, key), **fields, **state},)
                )
                written = True
            else:
                update: dict[str, Any] = {"$set": {**fields, **state}}
                unset = {f: "" for f in _EMBEDDING if f not in embedded}
                unset.update({f: "" for f in _LEGACY + _METADATA if f not in fields})
                if expires_at is None:
                    unset["expires"] = ""
                if unset:
                    update["$unset"] = unset
                result = yield Op(
                    FACTS, "update_one", ({"_id": doc["_id"], "rev": doc["rev"]}, update)
                )
                written = result.matched_count == 1
        except DuplicateKey:
            written = False  # created meanwhile by somebody else
        if written:
            if writer is not None:
                change = (key, current + 1, "put", data, now, writer.to_json())
                yield from record(namespace, scope, change, history_limit)
            return Fact.from_row(
                key, data, current + 1, importance, created, now, expires_at, None, metadata
            )
        yield from _backoff(deadline, key)


def get(namespace: str, scope: str, key: str) -> Plan[Fact | None]:
    """The fact, unless absent or expired."""
    where = {**_where(namespace, scope, key), "expires_at": _live(time.time())}
    doc = yield Op(FACTS, "find_one", (where,), {"projection": _FIELDS})
    return None if doc is None else _fact(doc)


def list_(namespace: str, scope: str, limit: int | None) -> Plan[list[Fact]]:
    """Unexpired facts of a scope, by key."""
    where = {"scope": scope, "namespace": namespace, "expires_at": _live(time.time())}
    options: dict[str, Any] = {"projection": _FIELDS, "sort": [("key", 1)]}
    if limit is not None:
        options["limit"] = limit
    docs = yield Op(FACTS, "find", (where,), options)
    return [_fact(d) for d in docs]


def get_many(namespace: str, scope: str, keys: Sequence[str]) -> Plan[list[Fact]]:
    """The unexpired facts of a scope under ``keys``, in that order, in one query."""
    if not keys:
        return []
    where = {
        "scope": scope,
        "namespace": namespace,
        "key": {"$in": list(dict.fromkeys(keys))},
        "expires_at": _live(time.time()),
    }
    docs = yield Op(FACTS, "find", (where,), {"projection": _FIELDS})
    by_key = {d["key"]: d for d in docs}
    return [_fact(by_key[k]) for k in keys if k in by_key]


def delete(
    namespace: str,
    scope: str,
    key: str,
    expected_version: int | None,
    writer: Writer | None = None,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
) -> Plan[bool]:
    """Delete a fact, with an optional compare-and-swap on its version (and, with ``writer``,
    record the forget of a live fact in its history)."""
    deadline = time.monotonic() + CAS_DEADLINE_SECONDS
    while True:
        now = time.time()
        doc = yield Op(FACTS, "find_one", (_where(namespace, scope, key),), {"projection": _STATE})
        live = _is_live(doc, now)
        current = int(doc["version"]) if live else 0
        if expected_version is not None and expected_version != current:
            raise VersionConflict(key, expected_version, current)
        if doc is None:
            return False
        result = yield Op(FACTS, "delete_one", ({"_id": doc["_id"], "rev": doc["rev"]},))
        if result.deleted_count == 1:
            if live and writer is not None:
                change = (key, current, "forget", None, now, writer.to_json())
                yield from record(namespace, scope, change, history_limit)
            return live
        yield from _backoff(deadline, key)


# -- embeddings ------------------------------------------------------------------------------


def binary_vector(vector: Sequence[float]) -> Any:
    """``vector`` as a BSON binary vector of float32 (subtype 9)."""
    from bson.binary import Binary

    return Binary(_VECTOR_HEADER + pack(vector), 9)


def _packed(value: Any, dims: int) -> bytes | None:
    """A stored vector as float32 bytes (``None`` if it is not one of ``dims``)."""
    if isinstance(value, bytes):  # bson.Binary is a bytes subclass
        raw = bytes(value)
        if len(raw) == 4 * dims + 2 and raw[:2] == _VECTOR_HEADER:
            return raw[2:]
        return None
    if isinstance(value, list) and len(value) == dims:  # numbers, written by hand
        return pack(value)
    return None


def embedding_fields(embedding: Embedding | None) -> dict[str, Any]:
    """The document fields that hold ``embedding`` (none for ``None``)."""
    if embedding is None:
        return {}
    out: dict[str, Any] = {"embed_model": embedding.model, "dims": embedding.dims}
    names = sorted(embedding.vectors)
    if names:
        primary = WHOLE if WHOLE in embedding.vectors else names[0]
        out["vector"] = binary_vector(embedding.vectors[primary])
        out["vector_field"] = primary
        others = [
            {"field": f, "vector": binary_vector(embedding.vectors[f])}
            for f in names
            if f != primary
        ]
        if others:
            out["vectors"] = others
    return out


def _blobs(doc: dict[str, Any], dims: int) -> list[bytes]:
    found = [_packed(doc.get("vector"), dims)]
    found += [_packed(v.get("vector"), dims) for v in doc.get("vectors") or ()]
    return [b for b in found if b is not None]


def search_vectors(
    namespace: str,
    scope: str,
    query: Sequence[float],
    model: str,
    limit: int,
    keys: Sequence[str] | None = None,
    filtered: FactFilter | None = None,
) -> Plan[list[Fact]]:
    """Exact cosine search over the scope's facts embedded by ``model`` with ``len(query)``
    dimensions (only those under ``keys``, and passing ``filtered``, when given): one query
    on the index ``(scope, namespace, key)`` that projects only the vectors and what breaks
    ties, ranked here (:mod:`memory_adapters.exact_vectors`: numpy when importable), then one
    ``_id`` lookup of the winners' values. Linear in the scope's embedded facts (in ``keys``
    when given); other scopes cost nothing."""
    dims = len(query)
    if limit <= 0 or dims == 0 or (keys is not None and not keys):
        return []
    where: dict[str, Any] = {
        "scope": scope,
        "namespace": namespace,
        "expires_at": _live(time.time()),
        "embed_model": model,
        "dims": dims,
        **where_query(filtered),
    }
    if keys is not None:
        where["key"] = {"$in": list(dict.fromkeys(keys))}
    projection = {"_id": 1, "key": 1, "importance": 1, "updated_at": 1, "vector": 1, "vectors": 1}
    docs = yield Op(FACTS, "find", (where,), {"projection": projection})
    rows = [(i, blob) for i, d in enumerate(docs) for blob in _blobs(d, dims)]
    kept = screen(query, rows, limit)
    picked = list(kept)
    candidates = [
        Candidate(
            float(docs[i]["importance"]), float(docs[i]["updated_at"]), docs[i]["key"], kept[i]
        )
        for i in picked
    ]
    best = [(picked[j], score) for j, score in order(query, candidates, limit)]
    if not best:
        return []
    ids = [docs[i]["_id"] for i, _ in best]
    again = {"_id": {"$in": ids}, "expires_at": _live(time.time())}
    full = yield Op(FACTS, "find", (again,), {"projection": {**_FIELDS, "_id": 1}})
    by_id = {d["_id"]: d for d in full}
    return [_fact(by_id[docs[i]["_id"]], s) for i, s in best if docs[i]["_id"] in by_id]


def atlas_pipeline(
    namespace: str,
    scope: str,
    query: Sequence[float],
    model: str,
    limit: int,
    *,
    index: str,
    num_candidates: int | None,
    now: float,
) -> list[dict[str, Any]]:
    """The aggregation a search sends with ``vector_search="atlas"``: a ``$vectorSearch``
    stage on index ``index`` (path ``vector``, pre-filtered on the scope, namespace, model
    and dimensions), expired facts dropped, the value fields and the score projected."""
    candidates = num_candidates if num_candidates is not None else min(10000, max(100, 20 * limit))
    return [
        {
            "$vectorSearch": {
                "index": index,
                "path": "vector",
                "queryVector": [float(x) for x in query],
                "numCandidates": max(candidates, limit),
                "limit": limit,
                "filter": {
                    "scope": {"$eq": scope},
                    "namespace": {"$eq": namespace},
                    "embed_model": {"$eq": model},
                    "dims": {"$eq": len(query)},
                },
            }
        },
        {"$match": {"expires_at": _live(now)}},
        {"$project": {**_FIELDS, "score": {"$meta": "vectorSearchScore"}}},
    ]


def atlas_search(
    namespace: str,
    scope: str,
    query: Sequence[float],
    model: str,
    limit: int,
    *,
    index: str,
    num_candidates: int | None,
) -> Plan[list[Fact]]:
    """Vector search through Atlas Vector Search (:func:`atlas_pipeline`). The index's
    ``dotProduct`` score, ``(1 + cosine) / 2``, is turned back into the cosine; ties are
    ordered as the exact path orders them."""
    if limit <= 0 or not query:
        return []
    pipeline = atlas_pipeline(
        namespace,
        scope,
        query,
        model,
        limit,
        index=index,
        num_candidates=num_candidates,
        now=time.time(),
    )
    docs = yield Op(FACTS, "aggregate", (pipeline,))
    scored = [
        (
            -(2.0 * float(d["score"]) - 1.0),
            -float(d["importance"]),
            -float(d["updated_at"]),
            d["key"],
            d,
        )
        for d in docs
    ]
    scored.sort(key=lambda s: s[:4])
    return [_fact(d, -neg) for neg, _, _, _, d in scored[:limit]]


def to_embed(namespace: str, scope: str, model: str, limit: int) -> Plan[list[Fact]]:
    """Unexpired facts of a scope not embedded by ``model``, by key, at most ``limit``."""
    where = {
        "scope": scope,
        "namespace": namespace,
        "expires_at": _live(time.time()),
        "embed_model": {"$ne": model},  # also matches facts with no embed_model
    }
    docs = yield Op(
        FACTS, "find", (where,), {"projection": _FIELDS, "sort": [("key", 1)], "limit": limit}
    )
    return [_fact(d) for d in docs]


def refresh(namespace: str, scope: str, key: str, version: int, ttl: float) -> Plan[bool]:
    """Move a live fact's expiry if it is still at ``version``: version + 1, a new ``rev``
    and ``updated_at`` now, as a write; its value, terms, metadata and vectors stay."""
    now = time.time()
    expires_at = now + ttl
    where = {**_where(namespace, scope, key), "version": version, "expires_at": _live(now)}
    update = {
        "$set": {
            "expires_at": expires_at,
            "expires": _expires(expires_at),
            "updated_at": now,
            "rev": secrets.token_hex(8),
        },
        "$inc": {"version": 1},
    }
    result = yield Op(FACTS, "update_one", (where, update))
    return bool(result.matched_count == 1)


def set_embedding(
    namespace: str, scope: str, key: str, version: int, embedding: Embedding
) -> Plan[bool]:
    """Replace a fact's embedding if it is live and still at ``version``; its version, times
    and ``rev`` stay as they are (a concurrent write replaces the embedding anyway)."""
    where = {**_where(namespace, scope, key), "version": version, "expires_at": _live(time.time())}
    embedded = embedding_fields(embedding)
    update: dict[str, Any] = {"$set": embedded}
    unset = {f: "" for f in _EMBEDDING if f not in embedded}
    if unset:
        update["$unset"] = unset
    result = yield Op(FACTS, "update_one", (where, update))
    return bool(result.matched_count == 1)


def scopes(namespace: str, prefix: str, limit: int | None) -> Plan[list[str]]:
    """The distinct scopes of ``namespace`` holding unexpired facts, starting with
    ``prefix``, sorted, at most ``limit``.

    The prefix is an anchored regular expression of the escaped prefix (every character
    literal), which MongoDB turns into a range on the index ``(scope, namespace, key)``; one
    aggregation groups the matching facts by scope, sorts (binary order: code point order)
    and limits on the server.
    """
    where: dict[str, Any] = {"namespace": namespace, "expires_at": _live(time.time())}
    if prefix:
        where = {"scope": {"$regex": "^" + re.escape(prefix)}, **where}
    pipeline: list[dict[str, Any]] = [
        {"$match": where},
        {"$group": {"_id": "$scope"}},
        {"$sort": {"_id": 1}},
    ]
    if limit is not None:
        pipeline.append({"$limit": limit})
    docs = yield Op(FACTS, "aggregate", (pipeline,))
    return [d["_id"] for d in docs]


def prune() -> Plan[int]:
    """Delete every expired fact now (the TTL index would, a minute or two later)."""
    now = time.time()
    where = {
        "expires": {"$lte": datetime.fromtimestamp(now, tz=UTC)},
        "expires_at": {"$lte": now},
    }
    result = yield Op(FACTS, "delete_many", (where,))
    return int(result.deleted_count)


# -- history -----------------------------------------------------------------------------------

_HISTORY_ORDER = [("at", -1), ("_id", -1)]


def record(
    namespace: str,
    scope: str,
    change: tuple[str, int, str, str | None, float, str],
    limit: int,
) -> Plan[None]:
    """Add ``change`` (key, version, op, data, at, writer JSON) to the fact's history, then
    drop the versions beyond the newest ``limit``.

    Without transactions this follows the fact's own write (one insert; a read of what is
    beyond the limit, and a delete only when there is some): a process that dies in between
    leaves the fact written and its history without that version.
    """
    key, version, op, data, at, writer = change
    where = _where(namespace, scope, key)
    doc = {**where, "version": version, "op": op, "data": data, "at": at, "writer": writer}
    yield Op(HISTORY, "insert_one", (doc,))
    beyond = yield Op(
        HISTORY,
        "find",
        (where,),
        {"projection": {"_id": 1}, "sort": _HISTORY_ORDER, "skip": limit, "limit": 1000},
    )
    if beyond:
        yield Op(HISTORY, "delete_many", ({"_id": {"$in": [d["_id"] for d in beyond]}},))


def history(namespace: str, scope: str, key: str, limit: int | None) -> Plan[list[FactChange]]:
    """The fact's history, newest first."""
    options: dict[str, Any] = {"projection": {"_id": 0}, "sort": _HISTORY_ORDER}
    if limit is not None:
        options["limit"] = limit
    docs = yield Op(HISTORY, "find", (_where(namespace, scope, key),), options)
    return [
        FactChange.from_row(d["key"], d["version"], d["op"], d["data"], d["at"], d["writer"])
        for d in docs
    ]


def restore(
    namespace: str,
    scope: str,
    fact: Fact,
    data: str,
    text: str,
    history: Sequence[FactChange],
    embedding: Embedding | None,
    max_bytes: int,
    metadata: str | None = None,
) -> Plan[bool]:
    """Write ``fact`` exactly as given (its terms from ``text``, its metadata as JSON text)
    unless the store holds it, live, at a version at least as new; then replace its history
    with ``history`` (given newest first)."""
    indexed = postings(text)
    fields: dict[str, Any] = {
        "data": data,
        "importance": fact.importance,
        "expires_at": fact.expires_at,
        **indexed,
        **metadata_fields(metadata),
        "version": fact.version,
        "created_at": fact.created_at,
        "updated_at": fact.updated_at,
    }
    embedded = embedding_fields(embedding)
    fields.update(embedded)
    if fact.expires_at is not None:
        fields["expires"] = _expires(fact.expires_at)
    estimate = 512 + text_bound(namespace, scope, fact.key, data) + 3 * text_bound(metadata)
    estimate += sum(32 + 2 * text_bound(t) for t in indexed["terms"])
    if embedding is not None:
        estimate += 64 + sum(32 + 4 * len(v) for v in embedding.vectors.values())
    check_size(
        estimate, lambda: {**_where(namespace, scope, fact.key), **fields}, max_bytes, "the fact"
    )
    where = _where(namespace, scope, fact.key)
    deadline = time.monotonic() + CAS_DEADLINE_SECONDS
    while True:
        doc = yield Op(FACTS, "find_one", (where,), {"projection": _STATE})
        if _is_live(doc, time.time()) and int(doc["version"]) >= fact.version:
            return False
        state = {**fields, "rev": secrets.token_hex(8)}
        try:
            if doc is None:
                yield Op(FACTS, "insert_one", ({**where, **state},))
                written = True
            else:
                update: dict[str, Any] = {"$set": state}
                unset = {f: "" for f in _EMBEDDING if f not in embedded}
                unset.update({f: "" for f in _LEGACY + _METADATA if f not in fields})
                if fact.expires_at is None:
                    unset["expires"] = ""
                if unset:
                    update["$unset"] = unset
                result = yield Op(
                    FACTS, "update_one", ({"_id": doc["_id"], "rev": doc["rev"]}, update)
                )
                written = result.matched_count == 1
        except DuplicateKey:
            written = False
        if written:
            break
        yield from _backoff(deadline, fact.key)
    yield Op(HISTORY, "delete_many", (where,))
    if history:
        docs = [
            {
                **where,
                "version": c.version,
                "op": c.op,
                "data": c.data(),
                "at": c.at,
                "writer": c.writer.to_json(),
            }
            for c in reversed(history)
        ]
        yield Op(HISTORY, "insert_many", (docs,))
    return True
