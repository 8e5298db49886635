"""Listing conversations, erasing a user and retention, as plans (see :mod:`.ops`).

Conversations are listed from their heads (``ma_conversations``): a key prefix is an anchored
regular expression of the escaped prefix, which MongoDB runs as a range of the ``_id`` index,
sorted by last activity on the server. The message count is the head's ``last_seq``, the hint
an append writes right after its batch (:mod:`.log`): a process that dies between the two
leaves the count one batch behind until the conversation's next append.

Heads written before the store recorded activity (``created_at``, ``last_activity``) get the
times of their first and newest batch when listed or checked for retention (a read each), and
are listed after the others until their conversation's next append records them.

Without transactions, an erase or a retention pass is a series of deletes, each atomic on its
own. Run against a user who is still writing, a batch appended meanwhile may survive; run it
again.
"""

from __future__ import annotations

import re
from typing import Any

from memory_adapters.operations import (
    ConversationInfo,
    EraseReport,
    UserKeys,
    user_keys,
    working_namespace_of,
)

from .ops import BATCHES, FACTS, HEADS, HISTORY, SUMMARIES, Op, Plan


def _prefix(prefix: str) -> dict[str, Any]:
    """Matches strings starting with ``prefix`` (every character literal)."""
    return {"$regex": "^" + re.escape(prefix)}


def list_conversations(
    prefix: str, limit: int, before: tuple[float, str] | None
) -> Plan[list[ConversationInfo]]:
    """The conversations under ``prefix``, newest activity first."""
    where: dict[str, Any] = {"last_seq": {"$gt": 0}}
    if prefix:
        where["_id"] = _prefix(prefix)
    if before is not None:
        cursor = yield Op(
            HEADS, "find_one", ({"_id": before[1]},), {"projection": {"_id": 1, "last_activity": 1}}
        )
        if cursor is not None and "last_activity" not in cursor:  # paging among legacy heads
            where["last_activity"] = {"$exists": False}
            where["_id"] = {**where.get("_id", {}), "$lt": before[1]}
        else:
            where["$or"] = [
                {"last_activity": {"$lt": before[0]}},
                {"last_activity": before[0], "_id": {"$lt": before[1]}},
                {"last_activity": {"$exists": False}},  # legacy heads, listed last
            ]
    docs = yield Op(
        HEADS,
        "find",
        (where,),
        {"sort": [("last_activity", -1), ("_id", -1)], "limit": limit},
    )
    out = []
    for d in docs:
        if "last_activity" in d:
            times = (float(d["last_activity"]), float(d.get("created_at", d["last_activity"])))
        else:
            times = yield from _legacy_times(d["_id"])
        out.append(ConversationInfo.of(d["_id"], d["last_seq"], d["total_tokens"], *times))
    return out


def _legacy_times(conversation: str) -> Plan[tuple[float, float]]:
    """(last activity, creation) of a conversation whose head predates them: the times of its
    newest and first batch."""
    found: list[float] = []
    for order in (-1, 1):
        doc = yield Op(
            BATCHES,
            "find_one",
            ({"conversation": conversation},),
            {"sort": [("first_seq", order)], "projection": {"_id": 0, "created_at": 1}},
        )
        found.append(0.0 if doc is None else float(doc["created_at"]))
    return found[0], found[1]


def _delete_log(where_key: dict[str, Any]) -> Plan[tuple[int, int]]:
    """Delete the batches and summaries of the conversations whose key matches
    ``where_key``: (messages, summaries)."""
    counted = yield Op(
        BATCHES,
        "aggregate",
        (
            [
                {"$match": {"conversation": where_key}},
                {"$group": {"_id": None, "n": {"$sum": {"$size": "$messages"}}}},
            ],
        ),
    )
    yield Op(BATCHES, "delete_many", ({"conversation": where_key},))
    summaries = yield Op(SUMMARIES, "delete_many", ({"conversation": where_key},))
    return (int(counted[0]["n"]) if counted else 0), int(summaries.deleted_count)


def _delete_facts(where: dict[str, Any]) -> Plan[tuple[int, int, int]]:
    """Delete the facts matching ``where`` and their history: (facts, vectors, history)."""
    docs = yield Op(FACTS, "find", (where,), {"projection": {"_id": 0, "vector": 1, "vectors": 1}})
    vectors = sum(("vector" in d) + len(d.get("vectors") or ()) for d in docs)
    facts = yield Op(FACTS, "delete_many", (where,))
    history = yield Op(HISTORY, "delete_many", (where,))
    return int(facts.deleted_count), vectors, int(history.deleted_count)


def _user_facts(keys: UserKeys) -> dict[str, Any]:
    return {
        "namespace": keys.namespace,
        "$or": [
            {"scope": keys.user_scope},
            {"scope": _prefix(keys.beneath_prefix)},
            {"scope": _prefix(keys.conversation_scope_prefix)},
        ],
    }


def erase(namespace: str, user_id: str) -> Plan[EraseReport]:
    """Delete everything of one user in one namespace (see :func:`user_keys`)."""
    keys = user_keys(namespace, user_id)
    conversation = _prefix(keys.conversation_prefix)
    heads = yield Op(HEADS, "find", ({"_id": conversation},), {"projection": {"last_seq": 1}})
    messages, summaries = yield from _delete_log(conversation)
    yield Op(HEADS, "delete_many", ({"_id": conversation},))
    facts, vectors, history = yield from _delete_facts(_user_facts(keys))
    working, wvectors, whistory = yield from _delete_facts(
        {"namespace": keys.working_namespace, "scope": conversation}
    )
    return EraseReport(
        sum(1 for h in heads if int(h.get("last_seq", 0)) > 0),
        messages,
        summaries,
        facts,
        working,
        vectors + wvectors,
        history + whistory,
    )


def delete_idle(namespace_prefix: str, idle_before: float) -> Plan[int]:
    """Delete the conversations under ``namespace_prefix`` idle since before
    ``idle_before``, with their working memory; how many went."""
    legacy = {"last_activity": {"$exists": False}, "last_seq": {"$gt": 0}}
    where: dict[str, Any] = {"$or": [{"last_activity": {"$lt": idle_before}}, legacy]}
    if namespace_prefix:
        where["_id"] = _prefix(namespace_prefix)
    idle = yield Op(HEADS, "find", (where,), {"projection": {"_id": 1, "last_activity": 1}})
    deleted = 0
    for head in idle:
        key = head["_id"]
        still: dict[str, Any] = {"last_activity": {"$lt": idle_before}}
        if "last_activity" not in head:
            last, _ = yield from _legacy_times(key)
            if last >= idle_before:
                continue
            still = {"last_activity": {"$exists": False}}
        gone = yield Op(HEADS, "delete_one", ({"_id": key, **still},))
        if gone.deleted_count != 1:  # appended to since it was read: no longer idle
            continue
        deleted += 1
        yield from _delete_log(key)
        yield from _delete_facts(
            {
                "namespace": working_namespace_of(key),
                "$or": [{"scope": key}, {"scope": _prefix(key + "/")}],
            }
        )
    return deleted
