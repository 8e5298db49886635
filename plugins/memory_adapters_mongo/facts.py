"""Facts (long-term memory and working memory), as plans (see :mod:`.ops`).

Layout. One document of ``ma_facts`` per (namespace, scope, key)::

    {scope, namespace, key, data, version, rev, importance, created_at, updated_at,
     expires_at, expires?, text, words: [...]}

``data`` is the value's JSON text as the core serialized it, a string, never a BSON
subdocument. ``expires_at`` is the expiry in seconds since the epoch (``null``: never) and is
what every read filters on; ``expires`` is the same instant as a BSON date, present only on
facts that expire, for the TTL index. ``text`` is what keyword search indexes; ``words`` its
distinct lower-case words, for the fallback search where ``$text`` is unavailable.

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
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from memory_adapters.errors import InvalidTTL, StoreUnavailable, VersionConflict
from memory_adapters.facts import Fact

from .ops import FACTS, DuplicateKey, Op, Plan, Sleep
from .schema import check_size, text_bound

_WORD = re.compile(r"\w+", re.UNICODE)

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
}
_STATE = {"_id": 1, "version": 1, "rev": 1, "created_at": 1, "expires_at": 1}


def words(text: str) -> list[str]:
    """The distinct lower-case words of ``text``, as the fallback search indexes them."""
    return sorted(set(_WORD.findall(text.lower())))


def _live(now: float) -> dict[str, Any]:
    """Matches facts not expired at ``now`` (``$not`` also matches a null ``expires_at``)."""
    return {"$not": {"$lte": now}}


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
) -> Plan[Fact]:
    """Create or replace a fact, with an optional compare-and-swap on its version."""
    indexed = words(text)
    estimate = 512 + text_bound(namespace, scope, key, data, text)
    estimate += sum(16 + text_bound(w) for w in indexed)
    fields: dict[str, Any] = {
        "data": data,
        "importance": importance,
        "expires_at": expires_at,
        "text": text,
        "words": indexed,
    }
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
                if expires_at is None:
                    update["$unset"] = {"expires": ""}
                result = yield Op(
                    FACTS, "update_one", ({"_id": doc["_id"], "rev": doc["rev"]}, update)
                )
                written = result.matched_count == 1
        except DuplicateKey:
            written = False  # created meanwhile by somebody else
        if written:
            return Fact.from_row(key, data, current + 1, importance, created, now, expires_at)
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


def delete(namespace: str, scope: str, key: str, expected_version: int | None) -> Plan[bool]:
    """Delete a fact, with an optional compare-and-swap on its version."""
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
            return live
        yield from _backoff(deadline, key)


def search(
    namespace: str, scope: str, terms: Sequence[str], limit: int, use_text: bool
) -> Plan[list[Fact]]:
    """Unexpired facts of a scope matching any of ``terms``, best first.

    With ``use_text``: one ``$text`` query on the text index, ranked by the server's text
    score. Otherwise the fallback: the facts whose word list holds any of the terms (an
    index lookup on ``(scope, namespace, words)``), ranked here by how often the terms occur.
    Ties go to higher importance, then the most recently updated.
    """
    if not terms:
        return []
    now = time.time()
    where: dict[str, Any] = {"scope": scope, "namespace": namespace, "expires_at": _live(now)}
    if use_text:
        where["$text"] = {"$search": " ".join(terms)}
        score = {"$meta": "textScore"}
        docs = yield Op(
            FACTS,
            "find",
            (where,),
            {
                "projection": {**_FIELDS, "score": score},
                "sort": [("score", score), ("importance", -1), ("updated_at", -1)],
                "limit": limit,
            },
        )
        return [_fact(d, float(d["score"])) for d in docs]
    where["words"] = {"$in": list(terms)}
    docs = yield Op(FACTS, "find", (where,), {"projection": {**_FIELDS, "text": 1}})
    scored = []
    for d in docs:
        counts = Counter(_WORD.findall(d["text"].lower()))
        hits = sum(counts[t] for t in terms)
        scored.append((-hits, -float(d["importance"]), -float(d["updated_at"]), d["key"], d))
    scored.sort(key=lambda s: s[:4])
    return [_fact(d, float(-hits)) for hits, _, _, _, d in scored[:limit]]


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
