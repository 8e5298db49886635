"""Keyword candidates and statistics, metadata filters, and the terms of facts written before
the store kept them, as plans (see :mod:`.ops`).

Layout. A fact document (:mod:`.facts`) holds the terms keyword search finds it by, as the
core analyzed them (:func:`memory_adapters.facts.index_text`)::

    {..., terms: [distinct terms, sorted], tf: {term: count, ...}, length,
     metadata?: "<JSON object text>", meta?: {key: code, ...}}

``terms`` is what the multikey index ``(scope, namespace, terms)`` holds: one posting per
(scope, term, fact), so finding a scope's facts holding a term costs what that scope's
postings cost, never another scope's. ``tf`` counts each term under :func:`tf_name` (the
term itself: the core's terms are runs of letters and digits, plain field names), and
``length`` is the number of terms. A search projects only the counts of the terms it asks
for.

``metadata`` is the fact's metadata as the core gave it (JSON text, returned as is, never
searched). ``meta`` holds what filters compare: for each top-level key a filter can name
(:data:`memory_adapters.validation.FILTER_KEY`) whose value is a JSON scalar, a string
code of the value (:func:`scalar_code`), such that two codes are equal exactly when
:func:`memory_adapters.facts.json_equal` says the values are. A filter is then plain string
equality, which MongoDB and mongomock answer alike: ``true`` never equals ``1``, ``1``
equals ``1.0``, a ``null`` is neither a missing key nor ``false``, and a list holding ``5``
is not ``5`` (lists and objects have no code, so no filter matches them).

Facts written before the store kept terms (they have a ``text`` field and a ``words`` list
instead) get theirs when a store opens (:func:`backfill`).
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from memory_adapters.errors import InvalidInput
from memory_adapters.facts import FactFilter, index_text
from memory_adapters.ranking import TermHit, TermMatches
from memory_adapters.validation import FILTER_KEY, MAX_INT

from .ops import FACTS, Op, Plan

log = logging.getLogger("memory_adapters.mongo")

TERM = re.compile(r"[^\W_]+")
"""What the core's terms look like (:func:`memory_adapters.ranking.index_terms`): letters
and digits, a plain field name."""

LEGACY = {"text": {"$exists": True}}
"""Matches the facts written before the store kept terms (the partial index
``ma_facts_legacy`` holds exactly these)."""

BACKFILL_BATCH = 256
"""How many facts the backfill reads at a time."""


def live(now: float) -> dict[str, Any]:
    """Matches facts not expired at ``now`` (``$not`` also matches a null ``expires_at``)."""
    return {"$not": {"$lte": now}}


def tf_name(term: str) -> str:
    """The field of ``tf`` counting ``term``: the term itself when it is letters and digits
    (always, from the core's analyzer), else ``_`` and the hex of its UTF-8 (no term of
    letters and digits has a ``_``, and no ``.``, ``$`` or NUL gets into a field name)."""
    if TERM.fullmatch(term):
        return term
    return "_" + term.encode("utf-8", "surrogatepass").hex()


def postings(text: str) -> dict[str, Any]:
    """The fields that hold the terms of ``text`` (terms separated by spaces, repeats
    kept): ``terms``, ``tf`` and ``length``."""
    words = text.split()
    counts = Counter(words)
    return {
        "terms": sorted(counts),
        "tf": {tf_name(t): n for t, n in counts.items()},
        "length": len(words),
    }


def scalar_code(value: Any) -> str | None:
    """A string equal to another's exactly when the values are :func:`json_equal`
    (``None`` for a value no filter can match: a list, an object)."""
    if value is None:
        return "z"
    if isinstance(value, bool):
        return "b:1" if value else "b:0"
    if isinstance(value, int):
        return f"n:{value}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return f"n:{int(value)}" if value.is_integer() else f"n:{value!r}"
    if isinstance(value, str):
        return "s:" + value
    return None


def metadata_fields(metadata: str | None) -> dict[str, Any]:
    """The fields that hold a fact's metadata (JSON object text, or ``None``: none)."""
    if metadata is None:
        return {}
    try:
        parsed = json.loads(metadata)
    except ValueError:
        raise InvalidInput("metadata must be the JSON text of an object") from None
    if not isinstance(parsed, dict):
        raise InvalidInput("metadata must be the JSON text of an object")
    return {"metadata": metadata, "meta": meta_codes(parsed)}


def meta_codes(metadata: dict[str, Any]) -> dict[str, str]:
    """The codes filters compare, for the keys a filter can name."""
    out = {}
    for key, value in metadata.items():
        code = scalar_code(value)
        if code is not None and isinstance(key, str) and FILTER_KEY.fullmatch(key):
            out[key] = code
    return out


def check_where(where: object) -> FactFilter | None:
    """``where`` checked to be a :class:`FactFilter` of plain values (or ``None``)."""
    if where is None:
        return None
    if not isinstance(where, FactFilter):
        raise InvalidInput(f"where must be a FactFilter, not {type(where).__name__}")
    pairs = []
    for pair in where.metadata:
        key, value = pair
        if type(key) is not str or not FILTER_KEY.fullmatch(key):
            raise InvalidInput(f"filter key {key!r} is not a name")
        ok = value is None or type(value) in (bool, str, float) or type(value) is int
        if not ok or (type(value) is float and not math.isfinite(value)):
            raise InvalidInput(f"filter value of {key!r} must be a JSON scalar")
        if type(value) is int and abs(value) > MAX_INT:
            raise InvalidInput(f"filter value of {key!r} is out of range")
        pairs.append((key, value))
    bounds = []
    for what, bound in (("since", where.since), ("until", where.until)):
        if bound is not None and type(bound) not in (int, float):
            raise InvalidInput(f"{what} must be a number, not {type(bound).__name__}")
        bounds.append(None if bound is None else float(bound))
    return FactFilter(tuple(pairs), bounds[0], bounds[1])


def where_query(where: FactFilter | None) -> dict[str, Any]:
    """The query conditions of ``where`` (checked by :func:`check_where`): exactly
    :meth:`FactFilter.passes`."""
    if where is None:
        return {}
    out: dict[str, Any] = {}
    for key, value in where.metadata:
        code = scalar_code(value)
        if f"meta.{key}" in out and out[f"meta.{key}"] != code:
            out.setdefault("$and", []).append({f"meta.{key}": code})
        else:
            out[f"meta.{key}"] = code
    updated: dict[str, float] = {}
    if where.since is not None:
        updated["$gte"] = where.since
    if where.until is not None:
        updated["$lt"] = where.until
    if updated:
        out["updated_at"] = updated
    return out


def match(
    namespace: str, scope: str, terms: Sequence[str], where: FactFilter | None
) -> Plan[TermMatches]:
    """What keyword search needs of a scope (:meth:`Store.match_terms`): one query on the
    index ``(scope, namespace, terms)`` for the unexpired facts holding any of ``terms`` and
    passing ``where`` (projecting only those terms' counts), and one aggregation counting the
    scope's unexpired facts and their terms on the index ``ma_facts_stats``."""
    now = time.time()
    scoped: dict[str, Any] = {"scope": scope, "namespace": namespace, "expires_at": live(now)}
    stats = yield Op(
        FACTS,
        "aggregate",
        (
            [
                {"$match": scoped},
                {"$group": {"_id": None, "n": {"$sum": 1}, "total": {"$sum": "$length"}}},
            ],
        ),
    )
    documents = int(stats[0]["n"]) if stats else 0
    total = int(stats[0]["total"]) if stats else 0
    wanted = list(dict.fromkeys(terms))
    if not wanted or not documents:
        return TermMatches(documents, total, [])
    query = {**scoped, "terms": {"$in": wanted}, **where_query(where)}
    projection = {"_id": 0, "key": 1, "length": 1, "importance": 1, "updated_at": 1}
    projection.update({f"tf.{tf_name(t)}": 1 for t in wanted})
    docs = yield Op(FACTS, "find", (query,), {"projection": projection})
    hits = []
    for d in docs:
        tf = d.get("tf") or {}
        hits.append(
            TermHit(
                d["key"],
                int(d["length"]),
                tuple(int(tf.get(tf_name(t), 0)) for t in terms),
                float(d["importance"]),
                float(d["updated_at"]),
            )
        )
    return TermMatches(documents, total, hits)


# -- facts written before the store kept terms -----------------------------------------------


def legacy_terms(key: str, data: Any) -> dict[str, Any]:
    """The term fields of a fact written before the store kept them, from its key and value
    as the core indexes them now."""
    try:
        value = json.loads(data) if isinstance(data, str) else None
    except ValueError:
        value = None
    return postings(index_text(key, value))


def backfill(batch: int = BACKFILL_BATCH) -> Plan[int]:
    """Give their terms to the facts that have none (written before the store kept them),
    ``batch`` at a time, each on the partial index ``ma_facts_legacy``; return how many.

    Idempotent and safe with other processes doing it at once, or writing: a fact is updated
    only if it still is the version read (its ``rev``) and still has no terms; a write by the
    current code replaces the old fields anyway. Ends when none is left, or when a few
    batches in a row could update nothing (another process is on them: it finishes)."""
    done = 0
    idle = 0
    while idle < 3:
        docs = yield Op(
            FACTS,
            "find",
            ({**LEGACY, "updated_at": {"$exists": True}},),
            {"projection": {"_id": 1, "key": 1, "data": 1, "rev": 1}, "limit": batch},
        )
        if not docs:
            break
        updated = 0
        for d in docs:
            fields = legacy_terms(str(d.get("key", "")), d.get("data"))
            result = yield Op(
                FACTS,
                "update_one",
                (
                    {"_id": d["_id"], "rev": d.get("rev"), **LEGACY},
                    {"$set": fields, "$unset": {"text": "", "words": ""}},
                ),
            )
            updated += int(result.modified_count)
        done += updated
        idle = 0 if updated else idle + 1
    if done:
        log.info("MongoDB store: indexed the terms of %d facts written before terms", done)
    return done
