"""The conversation log and its summaries, as plans (see :mod:`.ops`).

Layout. Each appended batch (one turn) is one document of ``ma_batches``::

    {_id: {conversation, first_seq}, conversation, first_seq, last_seq,
     start_tokens, end_tokens, messages: [{role, tokens, data}], run_id,
     idempotency_key?, created_at}

``data`` is the message's JSON text as the core serialized it, a string: its content is
never a BSON subdocument, so nothing in it can be read as an operator or a field path.
``start_tokens`` is the running token total before the batch, ``end_tokens`` after it.

Appends without transactions. A batch is written by one ``insert_one``: a reader sees all of
it or none of it. Its ``_id`` is ``{conversation, first_seq}``, so the unique ``_id`` index
lets exactly one writer create the batch that starts at a given seq. A writer inserts at
``last + 1``, where ``last`` is where a batch it has seen ends; if the insert is refused,
somebody else appended first: it rereads the newest batch and tries again. Batches are never
removed one by one (only a whole conversation is deleted), so every batch starts right after
an existing one, and the log stays gapless and in order. ``ma_conversations`` keeps, per
conversation, a *hint* of where the log ends (written after each insert, only ever moved
forward), so that an append usually costs one small read and one insert; it also records when
the conversation was created and last appended to (``created_at``, ``last_activity``), which
listing and retention read.

A conditional append inserts only at ``expected_last_seq + 1``, so winning the insert proves
the conversation ended there; otherwise it raises :class:`AppendConflict` having written
nothing. An idempotency key is looked up after the end of the log was read and before the
insert: if the insert then succeeds, no batch was appended in between, so no other batch
holds the key.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Sequence
from typing import Any

from memory_adapters.errors import AppendConflict, StoreUnavailable
from memory_adapters.messages import AppendResult, Entry, Record, Summary, decode_messages
from memory_adapters.validation import MAX_INT

from .ops import BATCHES, HEADS, SUMMARIES, DuplicateKey, Op, Plan, Sleep
from .schema import check_size, text_bound

APPEND_DEADLINE_SECONDS = 30.0
"""How long an append keeps retrying against other writers before it gives up."""

_TOP = {"_id": 0, "first_seq": 1, "last_seq": 1, "end_tokens": 1}


def _top(conversation: str) -> Op:
    """The newest batch of ``conversation`` (its bounds only)."""
    return Op(
        BATCHES,
        "find_one",
        ({"conversation": conversation},),
        {"sort": [("first_seq", -1)], "projection": _TOP},
    )


def _batch(
    conversation: str,
    first: int,
    start_tokens: int,
    entries: Sequence[Entry],
    run_id: str | None,
    idempotency_key: str | None,
    now: float,
) -> dict[str, Any]:
    total = start_tokens
    messages = []
    for e in entries:
        messages.append({"role": e.role, "tokens": e.tokens, "data": e.data})
        total += e.tokens
    doc: dict[str, Any] = {
        "_id": {"conversation": conversation, "first_seq": first},
        "conversation": conversation,
        "first_seq": first,
        "last_seq": first + len(entries) - 1,
        "start_tokens": start_tokens,
        "end_tokens": total,
        "messages": messages,
        "run_id": run_id,
        "created_at": now,
    }
    if idempotency_key is not None:
        doc["idempotency_key"] = idempotency_key
    return doc


def _records(docs: Sequence[dict[str, Any]]) -> list[tuple[int, Record]]:
    """The records of batch documents, each with the running token total before it; their
    messages decoded together (:func:`~memory_adapters.messages.decode_messages`)."""
    messages = iter(decode_messages([m["data"] for doc in docs for m in doc["messages"]]))
    out = []
    for doc in docs:
        first = int(doc["first_seq"])
        start = int(doc["start_tokens"])
        run_id = doc.get("run_id")
        created_at = float(doc["created_at"])
        for i, m in enumerate(doc["messages"]):
            tokens = int(m["tokens"])
            out.append(
                (start, Record(first + i, next(messages), tokens, first, run_id, created_at))
            )
            start += tokens
    return out


def append(
    conversation: str,
    entries: Sequence[Entry],
    *,
    run_id: str | None,
    expected_last_seq: int | None,
    idempotency_key: str | None,
    max_bytes: int,
) -> Plan[AppendResult]:
    """Append ``entries`` as one batch (see the module docstring)."""
    now = time.time()
    estimate = 512 + text_bound(conversation, conversation, run_id, idempotency_key)
    estimate += sum(64 + text_bound(e.role, e.data) for e in entries)
    check_size(
        estimate,
        lambda: _batch(conversation, 1, 0, entries, run_id, idempotency_key, now),
        max_bytes,
        "the turn",
    )
    deadline = time.monotonic() + APPEND_DEADLINE_SECONDS
    exact = False  # False: start from the head hint; True: from the newest batch itself
    epoch = 0
    head_seen = False
    failures = 0
    while True:
        if exact:
            top = yield _top(conversation)
            last, total = (int(top["last_seq"]), int(top["end_tokens"])) if top else (0, 0)
        else:
            head = yield Op(HEADS, "find_one", ({"_id": conversation},))
            head_seen = head is not None
            if head is None:
                last, total = 0, 0
            else:
                last, total = int(head["last_seq"]), int(head["total_tokens"])
                epoch = int(head.get("epoch", 0))
        if idempotency_key is not None:
            done = yield Op(
                BATCHES,
                "find_one",
                ({"conversation": conversation, "idempotency_key": idempotency_key},),
                {"projection": {"_id": 0, "first_seq": 1, "last_seq": 1}},
            )
            if done is not None:
                return AppendResult(int(done["first_seq"]), int(done["last_seq"]), True)
        if expected_last_seq is not None and expected_last_seq != last:
            if not exact:  # the hint may lag behind the log: ask the log itself
                exact = True
                continue
            raise AppendConflict(conversation, expected_last_seq, last)
        doc = _batch(conversation, last + 1, total, entries, run_id, idempotency_key, now)
        try:
            yield Op(BATCHES, "insert_one", (doc,))
        except DuplicateKey:
            # somebody appended first (or the hint lagged): reread the log's end, retry
            exact = True
            failures += 1
            if time.monotonic() > deadline:
                raise StoreUnavailable(
                    f"could not append to conversation {conversation!r}: {failures} attempts "
                    f"lost to other writers in {APPEND_DEADLINE_SECONDS:.0f} s"
                ) from None
            if failures > 2:
                yield Sleep(random.uniform(0, min(0.05, 0.001 * 2**failures)))
            continue
        yield from _advance_head(conversation, epoch, head_seen, doc)
        return AppendResult(doc["first_seq"], doc["last_seq"])


def _advance_head(
    conversation: str, epoch: int, head_seen: bool, doc: dict[str, Any]
) -> Plan[None]:
    """Move the head hint forward to the end of ``doc``, never backward, and never across a
    deletion of the conversation (which bumps the head's ``epoch``)."""
    last, total = doc["last_seq"], doc["end_tokens"]
    at = doc.get("created_at", time.time())  # when the batch was appended
    update = {
        "$set": {
            "epoch": epoch,
            "last_seq": last,
            "total_tokens": total,
            "last_activity": at,
        },
        "$min": {"created_at": at},
    }
    where = {"_id": conversation, "epoch": epoch, "last_seq": {"$lt": last}}
    # A duplicate key: the head exists and is already past this batch, or of a later epoch.
    with contextlib.suppress(DuplicateKey):
        yield Op(HEADS, "update_one", (where, update), {"upsert": not head_seen})


def tail(conversation: str, max_tokens: int | None, max_messages: int | None) -> Plan[list[Record]]:
    """The newest records within the limits: the newest batch, then one index range."""
    if max_messages == 0:
        return []
    top = yield _top(conversation)
    if top is None:
        return []
    # Bound by the newest batch seen, so a batch appended meanwhile does not shift the window.
    where: dict[str, Any] = {"conversation": conversation, "first_seq": {"$lte": top["first_seq"]}}
    options: dict[str, Any] = {}
    threshold = None
    if max_tokens is not None:
        # A batch can hold a message starting at or after the threshold only if it ends there
        # or later: one range on (conversation, end_tokens), filtered per message below.
        threshold = int(top["end_tokens"]) - max_tokens
        where["end_tokens"] = {"$gte": threshold}
        options["sort"] = [("end_tokens", -1), ("first_seq", -1)]
    else:
        options["sort"] = [("first_seq", -1)]
    if max_messages is not None:
        options["limit"] = max_messages  # every batch holds at least one message
    docs = yield Op(BATCHES, "find", (where,), options)
    rows = _records(list(reversed(docs)))
    if threshold is not None:
        rows = [row for row in rows if row[0] >= threshold]
    if max_messages is not None:
        rows = rows[-max_messages:]
    return [record for _, record in rows]


def read(
    conversation: str, start_seq: int, end_seq: int | None, limit: int | None
) -> Plan[list[Record]]:
    """Records ``start_seq..end_seq``: find the batch holding ``start_seq``, then one range."""
    lo = max(start_seq, 1)
    hi = end_seq
    if limit is not None:
        if limit <= 0:
            return []
        # a limit up to MAX_INT: keep the bound an int64, which is all BSON holds
        last = min(lo + limit - 1, MAX_INT)
        hi = last if hi is None else min(hi, last)
    if hi is not None and hi < lo:
        return []
    first = 1
    if lo > 1:
        holder = yield Op(
            BATCHES,
            "find_one",
            ({"conversation": conversation, "first_seq": {"$lte": lo}},),
            {"sort": [("first_seq", -1)], "projection": {"_id": 0, "first_seq": 1}},
        )
        if holder is None:
            return []
        first = int(holder["first_seq"])
    seqs: dict[str, int] = {"$gte": first}
    if hi is not None:
        seqs["$lte"] = hi
    docs = yield Op(
        BATCHES,
        "find",
        ({"conversation": conversation, "first_seq": seqs},),
        {"sort": [("first_seq", 1)]},
    )
    out = [
        record
        for _, record in _records(docs)
        if record.seq >= lo and (hi is None or record.seq <= hi)
    ]
    return out


def last_seq(conversation: str) -> Plan[int]:
    """The newest seq, from the newest batch (not the hint)."""
    top = yield _top(conversation)
    return 0 if top is None else int(top["last_seq"])


def delete_conversation(conversation: str) -> Plan[int]:
    """Delete the batches and summaries; reset the head under a new epoch, so that an append
    that raced with the deletion cannot move the hint of the emptied log forward."""
    top = yield _top(conversation)
    yield Op(
        HEADS,
        "update_one",
        (
            {"_id": conversation},
            {
                "$inc": {"epoch": 1},
                "$set": {"last_seq": 0, "total_tokens": 0},
                "$unset": {"created_at": "", "last_activity": ""},
            },
        ),
        {"upsert": True},
    )
    yield Op(BATCHES, "delete_many", ({"conversation": conversation},))
    yield Op(SUMMARIES, "delete_many", ({"conversation": conversation},))
    return 0 if top is None else int(top["last_seq"])


def put_summary(conversation: str, summary: Summary, max_bytes: int) -> Plan[None]:
    """Store (or replace) the summary of ``summary.start_seq..summary.end_seq``."""
    doc = {
        "conversation": conversation,
        "end_seq": summary.end_seq,
        "start_seq": summary.start_seq,
        "text": summary.text,
        "tokens": summary.tokens,
        "created_at": summary.created_at or time.time(),
    }
    if summary.model is not None:
        doc["model"] = summary.model
    bound = 256 + text_bound(conversation, summary.text) + 4 * len(summary.model or "")
    check_size(bound, lambda: doc, max_bytes, "the summary")
    where = {"conversation": conversation, "end_seq": summary.end_seq}
    for attempt in range(3):
        try:
            yield Op(SUMMARIES, "replace_one", (where, doc), {"upsert": True})
            break
        except DuplicateKey as dup:
            # two upserts of one range raced to insert it: the retry replaces instead
            if attempt == 2:
                raise dup.driver_error() from None
    # the claim this summary answers ends
    claim = {"conversation": conversation, "end_seq": CLAIM, "start_seq": {"$lte": summary.end_seq}}
    yield Op(SUMMARIES, "delete_one", (claim,))


CLAIM = -1
"""The ``end_seq`` of a conversation's summary claim document (see :func:`claim_summary`)."""


def claim_summary(conversation: str, end_seq: int, owner: str, lease_seconds: float) -> Plan[bool]:
    """Claim the conversation's next summary (``Store.claim_summary``): a document of
    ``ma_summaries`` at ``end_seq`` -1, with the claimed end seq in ``start_seq``, the owner in
    ``text`` and the lease's end in ``created_at``; the unique index on ``(conversation,
    end_seq)`` lets one of owners claiming at once insert it."""
    covered = yield Op(
        SUMMARIES,
        "find_one",
        ({"conversation": conversation, "end_seq": {"$gte": end_seq}},),
        {"projection": {"_id": 1}},
    )
    if covered is not None:
        return False
    now = time.time()
    where = {
        "conversation": conversation,
        "end_seq": CLAIM,
        "$or": [{"created_at": {"$lte": now}}, {"text": owner}],
    }
    update = {
        "$set": {
            "start_seq": end_seq,
            "text": owner,
            "tokens": -1,
            "created_at": now + lease_seconds,
        }
    }
    try:
        yield Op(SUMMARIES, "update_one", (where, update), {"upsert": True})
    except DuplicateKey:
        return False  # another owner's claim is live
    return True


def latest_summary(conversation: str) -> Plan[Summary | None]:
    """The summary with the highest ``end_seq``."""
    doc = yield Op(
        SUMMARIES,
        "find_one",
        ({"conversation": conversation, "end_seq": {"$gte": 0}},),
        {"sort": [("end_seq", -1)], "projection": {"_id": 0}},
    )
    if doc is None:
        return None
    return Summary(
        int(doc["start_seq"]),
        int(doc["end_seq"]),
        doc["text"],
        int(doc["tokens"]),
        float(doc["created_at"]),
        doc.get("model"),
    )
