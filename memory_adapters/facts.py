"""Long-term memory: facts that outlive a conversation.

A fact is (namespace, scope, key) → a JSON value, with a version (compare-and-swap),
importance, optional expiry, and created/updated times. :class:`Facts` is the handle bound
to one scope; the application decides the scope, the model never does.

Facts are found three ways (:meth:`Facts.search`): by their words (``"keyword"``: the
store's full-text engine, English stop words dropped from the query), by meaning
(``"semantic"``: cosine similarity of embeddings, :mod:`.embedders`), or both
(``"hybrid"``, the default where an embedder is configured: reciprocal rank fusion of the
two rankings).
"""

from __future__ import annotations

import json
import math
import re
import time
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .embedders import EMBED_BATCH, WHOLE, Embedding, check_vectors
from .errors import (
    EmbedderFailed,
    EmbeddingWarning,
    InvalidInput,
    InvalidTTL,
    NoEmbedder,
    Unsupported,
)
from .operations import APPLICATION, FactChange, Writer
from .ranking import MAX_QUERY_TERMS as MAX_QUERY_TERMS  # re-exported: the search limits
from .ranking import MAX_TERM_LENGTH as MAX_TERM_LENGTH
from .ranking import (
    SEMANTIC_DEPTH,
    TermMatches,
    band_floor,
    bm25,
    fuse,
    fused,
    index_terms,
    order_key,
    query_terms,
)
from .ranking import STOP_WORDS as STOP_WORDS
from .steps import EmbedCall, Plan, StoreCall, drive_async, drive_sync
from .tracing import traced
from .validation import FILTER_KEY as FILTER_KEY  # re-exported: what a filter key looks like
from .validation import (
    MAX_VALUE_BYTES,
    check_expires_at,
    check_filter,
    check_id,
    check_importance,
    check_metadata,
    check_number,
    check_optional_int,
    check_positive_int,
    check_time,
    check_ttl,
    dumps,
)

T = TypeVar("T")

if TYPE_CHECKING:
    from .embedders import Embedder
    from .memory import Memory
    from .scope import Scope
    from .store import Store

MAX_SEARCH_TEXT_BYTES = 128 << 10
"""How much of a fact's text (its key and the strings of its value) keyword search indexes,
in UTF-8 bytes (128 KiB); text beyond it is stored but not searchable, on every store alike.
It keeps the index entry of any value within ``MAX_VALUE_BYTES`` inside every backend's
limits: PostgreSQL's ``tsvector`` holds at most 1 MiB, and can take up to five times the
bytes of the text it indexes."""


SearchMode = Literal["keyword", "semantic", "hybrid"]
SEARCH_MODES: tuple[str, ...] = ("keyword", "semantic", "hybrid")


@dataclass(slots=True)
class Fact:
    """A stored fact. ``score`` is set by searches (higher is more relevant); ``metadata`` is
    what the application stored with it (never searched; see :class:`FactFilter`)."""

    key: str
    value: Any
    version: int
    importance: float = 0.0
    created_at: float = 0.0
    updated_at: float = 0.0
    expires_at: float | None = None
    score: float | None = None
    metadata: dict[str, Any] | None = None

    @classmethod
    def from_row(
        cls,
        key: str,
        data: str,
        version: int,
        importance: float,
        created_at: float,
        updated_at: float,
        expires_at: float | None,
        score: float | None = None,
        metadata: str | None = None,
    ) -> Fact:
        """Build a fact from a store row holding the value (and metadata) as JSON text."""
        return cls(
            key,
            json.loads(data),
            int(version),
            float(importance),
            float(created_at),
            float(updated_at),
            None if expires_at is None else float(expires_at),
            score,
            None if metadata is None else json.loads(metadata),
        )


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON scalars as every store compares them: ``true`` equals only
    ``true`` (never ``1``), numbers compare by value (``1`` equals ``1.0``), strings
    exactly, ``null`` only ``null``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if a is None or b is None:
        return a is None and b is None
    return type(a) is type(b) and isinstance(a, str) and a == b


@dataclass(frozen=True, slots=True)
class FactFilter:
    """Which facts a search may return (:meth:`Facts.search`'s ``filter``, ``since`` and
    ``until``), applied by the store before the best are chosen.

    ``metadata``: each key must be in the fact's metadata with an equal value
    (:func:`json_equal`; values are JSON scalars); ``since`` / ``until``: the fact was last
    updated at or after ``since`` and before ``until`` (epoch seconds)."""

    metadata: tuple[tuple[str, Any], ...] = ()
    since: float | None = None
    until: float | None = None

    def passes(self, metadata: dict[str, Any] | None, updated_at: float) -> bool:
        """Whether a fact with this ``metadata`` and ``updated_at`` passes (what every store
        must answer)."""
        if self.since is not None and updated_at < self.since:
            return False
        if self.until is not None and updated_at >= self.until:
            return False
        for key, value in self.metadata:
            if metadata is None or key not in metadata or not json_equal(metadata[key], value):
                return False
        return True


def search_terms(query: str) -> list[str]:
    """The terms a search looks for (:func:`memory_adapters.ranking.query_terms`): the
    query's distinct words that are not :data:`STOP_WORDS`, stemmed, at most
    :data:`MAX_QUERY_TERMS` of at most :data:`MAX_TERM_LENGTH` characters each."""
    return query_terms(query)


def bound_search_text(text: str, limit: int = MAX_SEARCH_TEXT_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, at the last whitespace before the cut
    when there is one (so that no word is indexed cut in half)."""
    if len(text) * 4 <= limit:  # a character is at most 4 bytes: surely within the limit
        return text
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    cut = raw[:limit].decode("utf-8", "ignore")
    space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
    return cut[:space] if space > 0 else cut


def search_text(key: str, value: Any) -> str:
    """What keyword search indexes for a fact: its key and every string in its value, the
    first :data:`MAX_SEARCH_TEXT_BYTES` of them."""
    parts = [key.replace("_", " ").replace("-", " ")]

    def walk(v: Any) -> None:
        if isinstance(v, str):
            parts.append(v)
        elif isinstance(v, dict):
            for k, item in v.items():
                parts.append(k)
                walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)
        elif v is not None:
            parts.append(str(v))

    walk(value)
    return bound_search_text("\n".join(parts).replace("\x00", " "))


_WORDY_KEY = re.compile(r"[^\W\d_]+(?:[ _.:/-]+[^\W\d_]+)*")  # letters of any script


def key_words(key: str) -> str:
    """What a fact's key adds to the text it is found by: the key, when it is made of words
    ("favourite_tea", "home city"); nothing when it holds digits or codes ("D1:3",
    "a8f3e2-..."), which say nothing about what the fact means and only add noise."""
    return key.replace("_", " ").replace("-", " ") if _WORDY_KEY.fullmatch(key) else ""


def embed_text(key: str, value: Any) -> str:
    """What is embedded for a fact: its :func:`key_words` and the strings of its value."""
    words = key_words(key)
    text = search_text("", value).lstrip("\n")
    return f"{words}: {text}" if words else text


def index_text(key: str, value: Any) -> str:
    """The terms a fact is found by in keyword search, as stores keep them
    (:meth:`Store.put_fact <memory_adapters.store.Store.put_fact>`'s ``text``): the
    :func:`~memory_adapters.ranking.index_terms` of its :func:`search_text`, space-separated."""
    return " ".join(index_terms(search_text(key_words(key), value)))


def supports_vectors(store: Store) -> bool:
    """Whether ``store`` implements the optional vector methods of the store contract."""
    from .store import Store

    return type(store).search_fact_vectors is not Store.search_fact_vectors


def supports_refresh(store: Store) -> bool:
    """Whether ``store`` implements :meth:`Store.refresh_fact <.store.Store.refresh_fact>`
    (moving a fact's expiry, its vectors kept)."""
    from .store import Store

    return type(store).refresh_fact is not Store.refresh_fact


def supports_history(store: Store) -> bool:
    """Whether ``store`` keeps fact history (implements :meth:`Store.fact_history`)."""
    from .store import Store

    return type(store).fact_history is not Store.fact_history


def history_options(memory: Memory, writer: Writer | None) -> dict[str, Any]:
    """The keyword arguments that make a fact write record its history: none when history
    is off (``history_limit=0``), the store keeps none, or there is no ``writer``."""
    if writer is None or memory.history_limit == 0 or not supports_history(memory.store):
        return {}
    return {"writer": writer, "history_limit": memory.history_limit}


def embed_plan(
    memory: Memory, texts: list[str], input_type: str
) -> Plan[list[list[float]] | EmbedderFailed]:
    """Vectors for ``texts`` from ``memory.embedder`` (an ``embed`` hook may answer instead),
    in batches of :data:`~.embedders.EMBED_BATCH`: unit vectors, one per text, all of the same
    dimensions; or the :class:`~.errors.EmbedderFailed` saying why not (returned, not raised:
    the caller decides whether a failure is fatal)."""
    embedder: Embedder | None = memory.embedder
    if embedder is None:  # pragma: no cover - callers check first
        return EmbedderFailed("no embedder is configured")
    out: list[list[float]] = []
    for start in range(0, len(texts), EMBED_BATCH):
        batch = texts[start : start + EMBED_BATCH]
        result: Any = None
        step = memory.hooks.embed(batch, embedder.name, input_type)
        if step is not None:
            result = yield step
        if result is None:
            result = yield EmbedCall(embedder, batch, input_type)
        if isinstance(result, Exception):
            failed = EmbedderFailed(
                f"embedder {embedder.name!r} raised {type(result).__name__}: {result}"
            )
            failed.__cause__ = result
            return failed
        try:
            vectors = check_vectors(result, len(batch), embedder.name)
        except InvalidInput as exc:
            return EmbedderFailed(str(exc))
        if out and vectors and len(vectors[0]) != len(out[0]):
            return EmbedderFailed(
                f"embedder {embedder.name!r} returned vectors of {len(vectors[0])} and "
                f"{len(out[0])} dimensions"
            )
        out.extend(vectors)
    return out


def write_fact(
    memory: Memory,
    hook_scope: Scope,
    where: tuple[str, str, str, str],
    *,
    text: str,
    importance: float,
    expires_at: float | None,
    expected_version: int | None,
    embedding: Embedding | None,
    writer: Writer | None = APPLICATION,
    metadata: str | None = None,
) -> Plan[Fact]:
    """Write a validated fact — ``where`` is (namespace, scope, key, value as JSON text) —
    with its embedding, recording the change in its history as made by ``writer``, and tell
    the ``fact_stored`` hook (with ``hook_scope``). Every writer of facts goes through here:
    :class:`Facts` and the LangGraph store."""
    options: dict[str, Any] = {
        "text": text,
        "importance": importance,
        "expires_at": expires_at,
        "expected_version": expected_version,
    }
    if embedding is not None:  # a store without vectors never sees the argument
        options["embedding"] = embedding
    if metadata is not None:  # a store written before metadata never sees it unused
        options["metadata"] = metadata
    options.update(history_options(memory, writer))  # nor one without history these
    fact: Fact = yield StoreCall("put_fact", where, options)
    step = memory.hooks.fact_stored(hook_scope, fact)
    if step is not None:
        yield step
    return fact


def _warn(message: str) -> None:
    warnings.warn(message, EmbeddingWarning, stacklevel=6)


def _at(as_of: object) -> float | None:
    """A ``get``'s ``as_of``, validated."""
    return check_time(as_of, "as_of")


def _where(
    metadata: object, since: object, until: object, min_score: object
) -> tuple[FactFilter | None, float | None]:
    """A search's filter (``None`` when it has none) and relevance floor, validated."""
    pairs = check_filter(metadata)
    start = check_time(since, "since")
    end = check_time(until, "until")
    floor = None if min_score is None else check_number(min_score, "min_score")
    if not pairs and start is None and end is None:
        return None, floor
    return FactFilter(pairs, start, end), floor


class Facts:
    """The long-term facts of one scope (by default, the user in the current session)."""

    __slots__ = ("_memory", "_owner", "namespace", "scope")

    def __init__(
        self, memory: Memory, scope: Scope, namespace: str | None = None, owner: str | None = None
    ) -> None:
        self._memory = memory
        self.scope = scope
        self.namespace = namespace or scope.namespace
        self._owner = owner if owner is not None else scope.fact_scope

    # -- plans ----------------------------------------------------------------------------------

    def _put(
        self,
        key: str,
        value: Any,
        importance: float,
        ttl: float | None,
        expires_at: float | None,
        expected_version: int | None,
        writer: Writer = APPLICATION,
        metadata: Any = None,
        *,
        vector: list[float] | None = None,
    ) -> Plan[Fact]:
        check_id(key, "key")
        data = dumps(value, "value", MAX_VALUE_BYTES)
        meta = check_metadata(metadata)
        importance = check_importance(importance)
        now = time.time()
        ttl = check_ttl(ttl)
        if ttl is not None and expires_at is not None:
            raise InvalidTTL("give ttl or expires_at, not both")
        expires = now + ttl if ttl is not None else check_expires_at(expires_at, now)
        check_optional_int(expected_version, "expected_version")
        embedding = None
        embedder = self._memory.embedder
        if embedder is not None and supports_vectors(self._memory.store):
            vectors = (
                [vector]
                if vector is not None  # made already (by the duplicate rule, .consolidation)
                else (yield from embed_plan(self._memory, [embed_text(key, value)], "document"))
            )
            if isinstance(vectors, EmbedderFailed):
                _warn(f"{vectors}; fact {key!r} is stored and will be embedded when searched")
            else:
                embedding = Embedding(embedder.name, len(vectors[0]), {WHOLE: vectors[0]})
        return (
            yield from write_fact(
                self._memory,
                self.scope,
                (self.namespace, self._owner, key, data),
                text=index_text(key, value),
                importance=importance,
                expires_at=expires,
                expected_version=expected_version,
                embedding=embedding,
                writer=writer,
                metadata=meta,
            )
        )

    def _get(self, key: str, as_of: float | None = None) -> Plan[Fact | None]:
        check_id(key, "key")
        fact: Fact | None = yield StoreCall("get_fact", (self.namespace, self._owner, key))
        if as_of is not None:
            fact = yield from self._as_of(key, as_of, fact)
        step = self._memory.hooks.fact_recalled(self.scope, key, fact)
        if step is not None:
            yield step
        return fact

    def _as_of(self, key: str, at: float, current: Fact | None) -> Plan[Fact | None]:
        """The fact ``key`` as it was at ``at``, from its history: the value of the newest
        change made at or before ``at`` (``None`` when that change was a forget, or when no
        recorded change is that old). The current fact when that change made its version."""
        changes = yield from self._history(key, None)
        for change in changes:  # newest first
            if change.at > at:
                continue
            if change.op == "forget":
                return None
            if current is not None and current.version == change.version:
                return current
            return Fact(key, change.value, change.version, updated_at=change.at)
        return None

    def _list(self, limit: int | None) -> Plan[list[Fact]]:
        check_optional_int(limit, "limit", minimum=1)
        facts: list[Fact] = yield StoreCall(
            "list_facts", (self.namespace, self._owner), {"limit": limit}
        )
        return facts

    def _search(
        self,
        query: str,
        limit: int,
        mode: str | None = None,
        where: FactFilter | None = None,
        min_score: float | None = None,
    ) -> Plan[list[Fact]]:
        """The search plan, observed as a ``"search"`` operation when a plugin asks
        (:mod:`.tracing`)."""
        memory = self._memory
        if not memory.hooks.observes_operations:
            return self._search_plan(query, limit, mode, None, where, min_score)
        seen: dict[str, Any] = {"limit": limit}
        plan = self._search_plan(query, limit, mode, seen, where, min_score)
        return traced(memory, "search", self.scope, plan, attributes=seen, content={"query": query})

    def _search_plan(
        self,
        query: str,
        limit: int,
        mode: str | None,
        seen: dict[str, Any] | None,
        where: FactFilter | None = None,
        min_score: float | None = None,
    ) -> Plan[list[Fact]]:
        results = yield from self._rank(query, limit, mode, seen, where, min_score)
        step = self._memory.hooks.facts_searched(self.scope, query, results)
        if step is not None:
            yield step
        return results

    def _rank(
        self,
        query: str,
        limit: int,
        mode: str | None,
        seen: dict[str, Any] | None,
        where: FactFilter | None = None,
        min_score: float | None = None,
    ) -> Plan[list[Fact]]:
        """The ``limit`` facts of the scope best for ``query`` (:meth:`search`), ranked by
        :mod:`memory_adapters.ranking`: what fact search and conversation search
        (:mod:`memory_adapters.conversation_search`, over its index of messages) share."""
        if not isinstance(query, str):
            raise InvalidInput(f"query must be a str, not {type(query).__name__}")
        check_positive_int(limit, "limit")
        memory = self._memory
        if mode is None:
            mode = "hybrid" if memory.embedder is not None else "keyword"
        elif mode not in SEARCH_MODES:
            raise InvalidInput(f"mode must be one of {SEARCH_MODES}, not {mode!r}")
        if mode != "keyword":
            if memory.embedder is None:
                raise NoEmbedder(
                    f"a {mode} search needs an embedder: give Memory(url, embed=...), or "
                    'pip install "memory-adapters[embeddings]" for the offline default'
                )
            if not supports_vectors(memory.store):
                if mode == "semantic":
                    raise Unsupported(f"{type(memory.store).__name__} cannot search by meaning")
                _warn(f"{type(memory.store).__name__} cannot search by meaning: keywords only")
                mode = "keyword"
        filtered: dict[str, Any] = {} if where is None else {"where": where}
        terms = search_terms(query)
        keyword: dict[str, float] = {}
        ties: dict[str, tuple[float, float]] = {}
        if mode != "semantic" and terms:
            matches: TermMatches = yield StoreCall(
                "match_terms", (self.namespace, self._owner, terms), filtered
            )
            keyword = bm25(matches, terms)
            ties = {h.key: (h.importance, h.updated_at) for h in matches.hits}
        vector: list[float] | None = None
        if mode != "keyword" and query.strip():
            vector = yield from self._query_vector(query, strict=mode == "semantic")
        if vector is None and mode == "hybrid" and seen is not None:
            seen["mode"] = "keyword"  # the embedder failed
        if seen is not None:
            seen.setdefault("mode", mode)
        results: list[Fact] = []
        if mode == "semantic":
            if vector is not None:
                results = yield from self._nearest(vector, limit, filtered)
        elif mode == "hybrid" and vector is not None:
            results = yield from self._hybrid(vector, keyword, ties, limit, filtered)
        else:  # keyword, or a hybrid search whose embedder failed
            best = sorted(keyword, key=lambda k: order_key(keyword[k], *ties[k], k))
            results = yield from self._facts_of(best[:limit], keyword)
        if min_score is not None:
            results = [f for f in results if f.score is not None and f.score >= min_score]
        return results

    def _facts_of(self, keys: list[str], scores: dict[str, float]) -> Plan[list[Fact]]:
        """The facts stored under ``keys`` (in that order, those still there), with their
        ``scores``."""
        if not keys:
            return []
        found: list[Fact] = yield StoreCall("get_facts", (self.namespace, self._owner, keys))
        for fact in found:
            fact.score = scores[fact.key]
        return found

    def _nearest(
        self,
        vector: list[float],
        limit: int,
        filtered: dict[str, Any],
        keys: list[str] | None = None,
    ) -> Plan[list[Fact]]:
        """The ``limit`` facts of the scope nearest ``vector`` (among ``keys`` when given)."""
        embedder = self._memory.embedder
        assert embedder is not None
        options: dict[str, Any] = {"model": embedder.name, "limit": limit, **filtered}
        if keys is not None:
            options["keys"] = keys
        found: list[Fact] = yield StoreCall(
            "search_fact_vectors", (self.namespace, self._owner, vector), options
        )
        return found

    def _hybrid(
        self,
        vector: list[float],
        keyword: dict[str, float],
        ties: dict[str, tuple[float, float]],
        limit: int,
        filtered: dict[str, Any],
    ) -> Plan[list[Fact]]:
        """The ``limit`` best facts by :func:`~memory_adapters.ranking.fused` score, exactly:
        the :data:`~memory_adapters.ranking.SEMANTIC_DEPTH` (or ``limit``) nearest facts, every
        keyword hit, and the similarity of each keyword hit outside the nearest that could
        still be among the best (a fact outside both is below every one of the nearest)."""
        depth = max(SEMANTIC_DEPTH, limit)
        while True:
            nearest = yield from self._nearest(vector, depth, filtered)
            found = {f.key: f for f in nearest}
            similarity: dict[str, float | None] = {f.key: f.score for f in nearest}
            scores = fuse(keyword, similarity)
            ranked = sorted(scores.values(), reverse=True)
            # results are ordered by band (ranking.order_key): whatever may fall in the band of
            # the limit-th best score may be among the results
            threshold = band_floor(ranked[limit - 1]) if len(ranked) >= limit else -math.inf
            # every fact outside the nearest is at most as similar as the last of them
            bound = nearest[-1].score if len(nearest) == depth else None
            if bound is None or fused(0.0, 1.0, bound) < threshold:
                break
            depth *= 4  # a fact near none of the words may still be in that band: read more
        best = max(keyword.values(), default=0.0)
        maybe = [
            k for k in keyword if k not in found and fused(keyword[k], best, bound) >= threshold
        ]
        if bound is not None and maybe:
            for fact in (yield from self._nearest(vector, len(maybe), filtered, keys=maybe)):
                found[fact.key] = fact
                similarity[fact.key] = fact.score
        for key in maybe:
            scores[key] = fused(keyword[key], best, similarity.get(key))

        def order(key: str) -> tuple[Any, ...]:
            fact = found.get(key)
            importance, updated = (
                (fact.importance, fact.updated_at) if fact is not None else ties[key]
            )
            return order_key(scores[key], importance, updated, key)

        chosen = sorted(scores, key=order)[:limit]
        missing = [k for k in chosen if k not in found]
        if missing:
            for fact in (yield from self._facts_of(missing, scores)):
                found[fact.key] = fact
        out = []
        for key in chosen:
            got = found.get(key)
            if got is not None:
                got.score = scores[key]
                out.append(got)
        return out

    def _query_vector(self, query: str, strict: bool) -> Plan[list[float] | None]:
        """The query's vector, after embedding the scope's facts that have no vectors of the
        current embedder; ``None`` (with a warning) when the embedder failed and ``strict`` is
        false."""
        embedder = self._memory.embedder
        assert embedder is not None
        failed = yield from self._embed_missing(embedder.name)
        if failed is None:
            vectors = yield from embed_plan(self._memory, [query], "query")
            if not isinstance(vectors, EmbedderFailed):
                return vectors[0]
            failed = vectors
        if strict:
            raise failed
        _warn(f"{failed}; the search used keywords only")
        return None

    def _embed_missing(self, model: str) -> Plan[EmbedderFailed | None]:
        """Embed the scope's facts that have no vectors of ``model`` (written before it was
        configured, or by another model), a batch at a time, each once."""
        while True:
            stale: list[Fact] = yield StoreCall(
                "facts_to_embed", (self.namespace, self._owner, model), {"limit": EMBED_BATCH}
            )
            if not stale:
                return None
            texts = [embed_text(f.key, f.value) for f in stale]
            vectors = yield from embed_plan(self._memory, texts, "document")
            if isinstance(vectors, EmbedderFailed):
                return vectors
            dims = len(vectors[0])
            for fact, vector in zip(stale, vectors, strict=True):
                # False when the fact was written since: its writer embedded it
                yield StoreCall(
                    "set_fact_embedding",
                    (
                        self.namespace,
                        self._owner,
                        fact.key,
                        fact.version,
                        Embedding(model, dims, {WHOLE: vector}),
                    ),
                )
            if len(stale) < EMBED_BATCH:
                return None

    def _forget(
        self, key: str, expected_version: int | None, writer: Writer = APPLICATION
    ) -> Plan[bool]:
        check_id(key, "key")
        check_optional_int(expected_version, "expected_version")
        deleted: bool = yield StoreCall(
            "delete_fact",
            (self.namespace, self._owner, key),
            {"expected_version": expected_version, **history_options(self._memory, writer)},
        )
        step = self._memory.hooks.fact_forgotten(self.scope, key, deleted)
        if step is not None:
            yield step
        return deleted

    def _history(self, key: str, limit: int | None) -> Plan[list[FactChange]]:
        check_id(key, "key")
        check_optional_int(limit, "limit", minimum=1)
        keep = self._memory.history_limit
        if keep == 0:
            return []
        if not supports_history(self._memory.store):
            raise Unsupported(f"{type(self._memory.store).__name__} keeps no fact history")
        changes: list[FactChange] = yield StoreCall(
            "fact_history",
            (self.namespace, self._owner, key),
            {"limit": keep if limit is None else min(limit, keep)},
        )
        return changes

    # -- sync -------------------------------------------------------------------------------------

    def put(
        self,
        key: str,
        value: Any,
        *,
        importance: float = 0.0,
        ttl: float | None = None,
        expires_at: float | None = None,
        expected_version: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Fact:
        """Create or update a fact. ``expected_version`` makes it a compare-and-swap (0: only
        if absent); a mismatch raises :class:`~memory_adapters.errors.VersionConflict`.

        ``key``: an identifier (``InvalidId``); ``value``: plain JSON of at most
        ``MAX_VALUE_BYTES`` (``InvalidValue``, ``ValueTooLarge``); ``importance``: a finite
        number (``InvalidValue``); ``ttl`` (seconds, ``0 < ttl <= MAX_TTL``) or ``expires_at``
        (epoch seconds, in the future and at most ``MAX_TTL`` away), not both
        (``InvalidTTL``); ``expected_version``: an int from 0 to ``MAX_INT`` (``InvalidInput``);
        ``metadata``: a JSON object of at most ``MAX_METADATA_BYTES``, without NUL characters
        (``InvalidValue``), stored and returned with the fact, never searched, and what a
        search's ``filter`` matches. A put replaces the whole fact, metadata included.
        """
        return self._run(
            self._put(key, value, importance, ttl, expires_at, expected_version, metadata=metadata)
        )

    def get(self, key: str, *, as_of: float | datetime | None = None) -> Fact | None:
        """The fact stored under ``key``, or ``None``.

        ``as_of`` (epoch seconds, or an aware datetime) answers what was current then, from
        the fact's history (:meth:`history`): the value and version of the newest change made
        at or before it, ``None`` if that change forgot the fact or no recorded change is
        that old (history keeps the ``Memory``'s ``history_limit`` newest versions). A past
        version comes back with its value, version and ``updated_at`` (the time of the
        change); history keeps no importance, expiry or metadata. Needs a store that keeps
        history (:class:`~memory_adapters.errors.Unsupported` otherwise)."""
        return self._run(self._get(key, _at(as_of)))

    def all(self, limit: int | None = None) -> list[Fact]:
        """Every unexpired fact of the scope, by key; at most ``limit`` (``None``, or an int
        from 1 to ``MAX_INT``)."""
        return self._run(self._list(limit))

    def search(
        self,
        query: str,
        limit: int = 5,
        *,
        mode: SearchMode | None = None,
        filter: dict[str, Any] | None = None,
        since: float | datetime | None = None,
        until: float | datetime | None = None,
        min_score: float | None = None,
    ) -> list[Fact]:
        """The facts most relevant to ``query``, best first; at most ``limit`` (an int from 1
        to ``MAX_INT``), each with its ``score``. The first ``k`` results are the same at any
        ``limit >= k``, on every store.

        ``mode``: ``"keyword"`` finds facts sharing words with the query (its terms:
        :func:`search_terms`; a query with none finds nothing), ``score``: BM25 over the
        scope's facts (:mod:`memory_adapters.ranking`); ``"semantic"`` ranks the scope's facts
        by the cosine similarity of their embedding to the query's (``score``: the
        similarity; needs an embedder, else :class:`~memory_adapters.errors.NoEmbedder`);
        ``"hybrid"`` scores each fact by both (:func:`memory_adapters.ranking.fused`, 0 to 1).
        The default is ``"hybrid"`` when the ``Memory`` has an embedder, else ``"keyword"``;
        if the embedder fails, a hybrid search uses keywords (with an
        :class:`~memory_adapters.errors.EmbeddingWarning`) and a semantic one raises
        :class:`~memory_adapters.errors.EmbedderFailed`. Ties go to the more important, then
        the more recently updated fact.

        ``filter``: only facts whose metadata holds each key with an equal value (a dict of
        names to JSON scalars); ``since`` / ``until``: only facts last updated at or after
        ``since`` and before ``until`` (epoch seconds, or aware datetimes); ``min_score``:
        only facts scoring at least that much (a relevance floor, on the mode's scale).
        """
        return self._run(self._search(query, limit, mode, *_where(filter, since, until, min_score)))

    def forget(self, key: str, *, expected_version: int | None = None) -> bool:
        """Delete a fact; ``False`` if there was none. ``expected_version`` (an int from 0 to
        ``MAX_INT``) makes it conditional, like :meth:`put`."""
        return self._run(self._forget(key, expected_version))

    def history(self, key: str, limit: int | None = None) -> list[FactChange]:
        """The recorded versions of the fact ``key``, newest first: each put and forget with
        its time and writer (:class:`~memory_adapters.operations.Writer`: the application,
        or the run, framework, agent and model when a model wrote through a memory tool).
        At most ``limit`` (``None``, or an int from 1 to ``MAX_INT``) and at most the
        ``Memory``'s ``history_limit``; kept after the fact is forgotten, removed by
        :meth:`Memory.erase <memory_adapters.Memory.erase>`. ``[]`` when history is off
        (``history_limit=0``)."""
        return self._run(self._history(key, limit))

    # -- async -------------------------------------------------------------------------------------

    async def aput(
        self,
        key: str,
        value: Any,
        *,
        importance: float = 0.0,
        ttl: float | None = None,
        expires_at: float | None = None,
        expected_version: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Fact:
        """Async :meth:`put`."""
        return await self._arun(
            self._put(key, value, importance, ttl, expires_at, expected_version, metadata=metadata)
        )

    async def aget(self, key: str, *, as_of: float | datetime | None = None) -> Fact | None:
        """Async :meth:`get`."""
        return await self._arun(self._get(key, _at(as_of)))

    async def aall(self, limit: int | None = None) -> list[Fact]:
        """Async :meth:`all`."""
        return await self._arun(self._list(limit))

    async def asearch(
        self,
        query: str,
        limit: int = 5,
        *,
        mode: SearchMode | None = None,
        filter: dict[str, Any] | None = None,
        since: float | datetime | None = None,
        until: float | datetime | None = None,
        min_score: float | None = None,
    ) -> list[Fact]:
        """Async :meth:`search`."""
        return await self._arun(
            self._search(query, limit, mode, *_where(filter, since, until, min_score))
        )

    async def aforget(self, key: str, *, expected_version: int | None = None) -> bool:
        """Async :meth:`forget`."""
        return await self._arun(self._forget(key, expected_version))

    async def ahistory(self, key: str, limit: int | None = None) -> list[FactChange]:
        """Async :meth:`history`."""
        return await self._arun(self._history(key, limit))

    def _run(self, plan: Plan[T]) -> T:
        return drive_sync(plan, self._memory.store, self._memory.hooks)

    async def _arun(self, plan: Plan[T]) -> T:
        return await drive_async(plan, self._memory.store, self._memory.hooks)
