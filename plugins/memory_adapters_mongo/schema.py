"""The collections' indexes, created idempotently when the store first connects, and the
checks every written document passes before it is sent.

Indexes (all prefixed ``ma_``):

* ``ma_batches``: the ``_id`` ``{conversation, first_seq}`` is the unique arbiter of appends;
  ``ma_batches_seq (conversation, first_seq)`` serves seq ranges and the newest batch;
  ``ma_batches_tokens (conversation, end_tokens, first_seq)`` serves token-budget windows;
  ``ma_batches_idempotency (conversation, idempotency_key)``, partial, finds a retried batch.
* ``ma_summaries``: unique ``(conversation, end_seq)``.
* ``ma_facts``: unique ``(scope, namespace, key)``; a TTL index on ``expires``; the
  multikey ``ma_facts_terms (scope, namespace, terms)``, the postings keyword search reads
  (:mod:`.terms`); ``ma_facts_stats (scope, namespace, expires_at, length)``, on which a
  search counts the scope's facts and terms (it holds every field that count reads); and
  ``ma_facts_legacy``, partial, holding only the facts written before the store kept terms
  (empty once they have theirs).
* ``ma_fact_history``: ``(scope, namespace, key, at)``, a fact's versions newest first.
* ``ma_conversations``: only its ``_id`` (the conversation key): listing and retention read a
  key range of it (an anchored prefix) and sort that, so an append's update of the head does
  not maintain another index.

Shard keys, on a sharded cluster: ``{conversation: 1}`` for ``ma_batches``,
``ma_conversations`` (its ``_id``) and ``ma_summaries``; ``{scope: 1}`` for ``ma_facts`` and
``ma_fact_history``.
Every unique index above starts with that key, as MongoDB requires.

Earlier versions searched with a text index (``ma_facts_text``) or a word list
(``ma_facts_words``): :func:`ensure` drops both, then gives the facts written then their
terms (:func:`.terms.backfill`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memory_adapters.errors import ValueTooLarge

from .ops import BATCHES, FACTS, HISTORY, SUMMARIES, Op, Plan
from .terms import LEGACY, backfill

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""MongoDB's largest document (``maxBsonObjectSize``), in bytes."""

TTL_GRACE_SECONDS = 60
"""The server's TTL monitor removes an expired fact this long after it expired. Reads hide
it from the moment it expires; ``prune()`` removes it at once."""

_SLACK = 4096
"""How close to the limit a cheap size estimate may come before the exact BSON size is
computed."""


@dataclass(frozen=True, slots=True)
class Index:
    """One index: its collection, keys and options."""

    collection: str
    keys: list[tuple[str, Any]]
    options: Mapping[str, Any] = field(default_factory=dict)

    def op(self) -> Op:
        return Op(self.collection, "create_index", (self.keys,), self.options)


INDEXES = (
    Index(BATCHES, [("conversation", 1), ("first_seq", 1)], {"name": "ma_batches_seq"}),
    Index(
        BATCHES,
        [("conversation", 1), ("end_tokens", 1), ("first_seq", 1)],
        {"name": "ma_batches_tokens"},
    ),
    Index(
        BATCHES,
        [("conversation", 1), ("idempotency_key", 1)],
        {
            "name": "ma_batches_idempotency",
            "partialFilterExpression": {"idempotency_key": {"$exists": True}},
        },
    ),
    Index(
        SUMMARIES,
        [("conversation", 1), ("end_seq", 1)],
        {"name": "ma_summaries_range", "unique": True},
    ),
    Index(
        FACTS,
        [("scope", 1), ("namespace", 1), ("key", 1)],
        {"name": "ma_facts_key", "unique": True},
    ),
    Index(
        FACTS, [("expires", 1)], {"name": "ma_facts_ttl", "expireAfterSeconds": TTL_GRACE_SECONDS}
    ),
    Index(FACTS, [("scope", 1), ("namespace", 1), ("terms", 1)], {"name": "ma_facts_terms"}),
    Index(
        FACTS,
        [("scope", 1), ("namespace", 1), ("expires_at", 1), ("length", 1)],
        {"name": "ma_facts_stats"},
    ),
    Index(
        FACTS,
        [("updated_at", 1)],
        {"name": "ma_facts_legacy", "partialFilterExpression": LEGACY},
    ),
    Index(
        HISTORY,
        [("scope", 1), ("namespace", 1), ("key", 1), ("at", -1)],
        {"name": "ma_fact_history_key"},
    ),
)

OBSOLETE_INDEXES = (FACTS, ("ma_facts_text", "ma_facts_words"))
"""The indexes of earlier versions' keyword search, dropped when a store opens."""

TEXT_SEARCH_MODES = ("auto", "text", "words")
"""The values ``MongoStore(text_search=...)`` accepts, and ignores (see its docstring)."""

VECTOR_SEARCH_MODES = ("exact", "atlas")
"""``exact``: cosine computed by the store over one scope's vectors (any server);
``atlas``: a ``$vectorSearch`` stage on an Atlas Vector Search index (see docs/mongodb.md)."""


def ensure() -> Plan[None]:
    """Ping the server, create the indexes, drop the obsolete ones, and give their terms to
    the facts written before the store kept them (:func:`.terms.backfill`). Idempotent, and
    safe when several processes open at once."""
    yield Op("", "command", ("ping",))
    for index in INDEXES:
        yield index.op()
    collection, names = OBSOLETE_INDEXES
    present = yield Op(collection, "index_information")
    for name in names:
        if name in present:
            try:
                yield Op(collection, "drop_index", (name,))
            except Exception as exc:  # dropped meanwhile by another process: fine
                if getattr(exc, "code", None) != 27:  # IndexNotFound
                    raise
    yield from backfill()


def check_size(estimate: int, build: Callable[[], dict[str, Any]], limit: int, what: str) -> None:
    """Raise :class:`ValueTooLarge` if the document ``build()`` is over ``limit`` bytes.

    ``estimate`` is an upper bound of its size; the exact BSON size is computed only when
    that bound comes near the limit, so ordinary writes pay nothing for the check.
    """
    if estimate <= limit - _SLACK:
        return
    import bson

    size = len(bson.encode(build()))
    if size > limit:
        raise ValueTooLarge(
            f"{what} would be a {size}-byte document; MongoDB's limit is {limit} bytes"
        )


def text_bound(*texts: str | None) -> int:
    """An upper bound of the UTF-8 size of ``texts``, cheap to compute."""
    return sum(4 * len(t) + 8 for t in texts if t is not None)
