"""The duplicate rule: a fact proposed by a model is merged into one that means the same.

Models save the same thing twice under two keys ("favourite_tea", "likes_oolong"), and an
extractor reading turn after turn proposes what is remembered already. Every write a model
proposes — the ``save_memory`` tool's, and the extractor's ``add`` and ``update``
(:mod:`.extraction`) — goes through :func:`consolidated_put`:

* a fact under the proposed key is updated in place (its old value stays in the fact's
  history);
* else, a fact of the same scope that **means the same** is updated instead of adding a
  second: with an embedder, the nearest fact whose vector is at least
  :func:`duplicate_similarity` similar (cosine) to the proposal's; without one, a fact with
  the same :func:`comparable` text (its value's words, when the value is a statement of
  :data:`STATEMENT_WORDS` words or more; else its key's words and its value's: ``has_dog:
  yes`` is not ``likes_tea: yes``);
* a proposal whose value is the same normalized text as the fact it would update writes
  nothing (no new version, no history entry); but the ``save_memory`` tool, saving under a key
  that exists, replaces that fact as it always did (a new version).

Writes the application makes itself (``memory.facts.put``) are not merged: the application
names its keys, and a put under a key is a put under that key.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from .errors import EmbedderFailed
from .operations import Writer
from .ranking import bm25, order_key, query_terms
from .steps import Plan, StoreCall
from .validation import MAX_VALUE_BYTES, check_id, check_importance, dumps

if TYPE_CHECKING:
    from .embedders import Embedder
    from .facts import Fact, Facts

DUPLICATE_SIMILARITY = 0.9
"""The cosine similarity at or above which a proposed fact means the same as a stored one, for
an embedder that does not say (:attr:`Embedder.duplicate_similarity
<memory_adapters.embedders.Embedder.duplicate_similarity>`). Each model has its own scale:
all-MiniLM-L6-v2, the ``embeddings`` extra's default, uses 0.8 (paraphrases such as "I like
oolong tea" / "Oolong is my favourite tea" score 0.96, "has a dog named Rex" / "owns a dog
called Rex" 0.82, while "likes oolong tea" / "likes green tea" score 0.69 and "lives in Paris" /
"lives in Berlin" 0.58)."""

DUPLICATE_CANDIDATES = 20
"""Without an embedder, how many of the facts sharing the most words with a proposal are
compared with it."""

STATEMENT_WORDS = 3
"""Without an embedder, a value of at least this many words is compared by itself; a shorter
one ("yes", "oolong") says little without its key, and is compared with it."""

DEFAULT_IMPORTANCE = 0.5
"""The importance of a fact a model adds without saying."""

_WORDS = re.compile(r"\w+")


def normalized(value: Any) -> str:
    """The text a value is compared by without an embedder: the strings of the value (and
    the keys of its objects), lower-cased (case-folded), punctuation and spacing dropped."""
    from .facts import search_text

    return " ".join(_WORDS.findall(search_text("", value).casefold()))


def comparable(key: str, value: Any) -> str:
    """The text two facts are compared by without an embedder: the :func:`normalized` value
    when it has :data:`STATEMENT_WORDS` words or more, else the key's words and the value's."""
    text = normalized(value)
    if len(text.split()) >= STATEMENT_WORDS:
        return text
    return " ".join(_WORDS.findall(key.replace("_", " ").casefold())) + " : " + text


def duplicate_similarity(embedder: Embedder) -> float:
    """The duplicate threshold of ``embedder``: its own, else :data:`DUPLICATE_SIMILARITY`."""
    own = getattr(embedder, "duplicate_similarity", None)
    return float(own) if isinstance(own, int | float) else DUPLICATE_SIMILARITY


def find_duplicate(facts: Facts, key: str, value: Any) -> Plan[tuple[Fact | None, Any]]:
    """The fact of ``facts``' scope that means the same as ``value`` proposed under ``key``
    (see the module docstring), or ``None``; and the proposal's vector when one was made
    (``None`` otherwise), for the write to reuse."""
    from .facts import embed_plan, embed_text, search_text, supports_vectors

    memory = facts._memory
    embedder = memory.embedder
    if embedder is not None and supports_vectors(memory.store):
        vectors = yield from embed_plan(memory, [embed_text(key, value)], "document")
        if not isinstance(vectors, EmbedderFailed):
            failed = yield from facts._embed_missing(embedder.name)
            if failed is None:
                nearest = yield from facts._nearest(vectors[0], 1, {})
                threshold = duplicate_similarity(embedder)
                if nearest and nearest[0].score is not None and nearest[0].score >= threshold:
                    return nearest[0], vectors[0]
                return None, vectors[0]
        # the embedder failed: compare texts, as without one
    text = comparable(key, value)
    terms = query_terms(search_text("", value))
    if not normalized(value) or not terms:
        return None, None
    matches = yield StoreCall("match_terms", (facts.namespace, facts._owner, terms), {})
    scores = bm25(matches, terms)
    ties = {h.key: (h.importance, h.updated_at) for h in matches.hits}
    best = sorted(scores, key=lambda k: order_key(scores[k], *ties[k], k))
    found = yield from facts._facts_of(best[:DUPLICATE_CANDIDATES], scores)
    for fact in found:
        if comparable(fact.key, fact.value) == text:
            return fact, None
    return None, None


def consolidated_put(
    facts: Facts,
    key: str,
    value: Any,
    importance: float | None,
    writer: Writer,
    *,
    rewrite: bool = False,
) -> Plan[Fact]:
    """Write a fact a model proposed, under the duplicate rule (see the module docstring):
    the fact written, or the fact that already said the same (unchanged). ``importance``
    ``None`` keeps the importance of the fact updated (a new one gets
    :data:`DEFAULT_IMPORTANCE`). The metadata and expiry of an updated fact are kept. With
    ``rewrite``, a proposal under a key that exists is written even when it says what the
    fact says (a new version): what the ``save_memory`` tool has always done."""
    check_id(key, "key")
    dumps(value, "value", MAX_VALUE_BYTES)
    if importance is not None:
        importance = check_importance(importance)
    target: Fact | None = yield StoreCall("get_fact", (facts.namespace, facts._owner, key))
    vector = None
    same_key = target is not None
    if target is None:
        target, vector = yield from find_duplicate(facts, key, value)
    if (
        target is not None
        and not (rewrite and same_key)
        and normalized(target.value) == normalized(value)
        and (importance is None or importance <= target.importance)
    ):
        return target  # nothing new
    if target is not None:
        key, vector = target.key, (vector if target.key == key else None)
    if importance is None:
        importance = target.importance if target is not None else DEFAULT_IMPORTANCE
    expires = None if target is None else target.expires_at
    if expires is not None and expires < time.time() + 1:
        expires = None  # about to expire: what the model said now is current again
    fact: Fact = yield from facts._put(
        key,
        value,
        importance,
        None,
        expires,
        None,
        writer,
        None if target is None else target.metadata,
        vector=vector,
    )
    return fact
