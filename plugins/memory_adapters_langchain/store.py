"""``MemoryStore``: a LangGraph ``BaseStore`` over a ``Memory``'s long-term facts.

Give a graph this store (``graph.compile(store=MemoryStore(memory))``, or
``create_agent(..., store=...)``) and what its nodes and tools keep with ``store.put`` /
``store.search`` lives in the same facts as this library's own memory tools
(``save_memory``, ``recall_memory`` ...) and ``memory.facts``, in whichever store the
``Memory`` uses (``memory://``, SQLite, PostgreSQL, MongoDB).

**Namespaces.** Every item is a fact in the ``Memory``'s fact namespace (its base namespace,
or ``namespace=``); the LangGraph namespace tuple picks the fact *scope*. ``user_namespace``
says which namespaces are a user's: a template whose last label is ``"{user_id}"``
(LangMem's ``("memories", "{user_id}")`` by default), or a function of the tuple returning
the user id (``None``: nobody's). With a template:

* ``(*prefix, user_id)`` — ``("memories", "alice")`` by default — **is** the user's
  long-term memory: the scope ``Scope(namespace=..., user_id="alice").fact_scope``
  (``"user:alice"``) that ``memory.session(user_id="alice")`` gives the memory tools and
  ``memory.facts``. So langmem-style tools configured with the namespace
  ``("memories", "{langgraph_user_id}")`` share facts with this library's tools;
* ``(*prefix, user_id, "agents", agent_id)`` is the scope of that user with that
  agent (``memory.session(user_id=..., agent_id=...)``);
* any other namespace of the user (``("memories", "alice", "prefs")``; with a function,
  every namespace it gives a user) is a scope beneath the user's: the user's scope, ``/``,
  then the namespace's ``"lg:"`` form below — ``"user:alice/lg:memories/alice/prefs/"``;
* any other tuple is a scope of its own, ``"lg:"`` followed by each label percent-encoded
  (:func:`urllib.parse.quote`, nothing safe) and ended with ``/``: ``("docs", "v1")`` is
  ``"lg:docs/v1/"``. A tuple prefix is then a string prefix: ``("a",)`` covers
  ``("a", "b")`` but never ``("ab",)``.

So everything of a user's namespaces is in the user's scopes, which ``memory.erase``,
``export_jsonl(..., user_id=...)`` and retention reach. A function must give a namespace
beneath a user's to the same user (a search under a user's prefix reads that user's scopes).

Results map scopes back to tuples. Scopes that are neither (facts kept per conversation,
``"conversation:..."``) and scopes whose labels LangGraph would refuse (a user id holding a
period, say) never appear in searches or namespace listings.

**Values.** An item's value is a dict and is stored as the fact's value, as it is. A fact
whose value is not a dict — the plain strings ``save_memory`` stores — reads as
``{"content": value}``. Values must be plain JSON (``dict``, ``list``, ``str``, ``int``,
finite ``float``, ``bool``, ``None``) of at most 1 MiB; anything else is refused with the
library's typed errors (``InvalidValue``, ``ValueTooLarge``) before anything is written. Keys
are checked as fact keys (``InvalidId``: empty, longer than 256 characters, control
characters); namespace labels as LangGraph does (no ``"."``, no NUL, not empty) and as
identifiers (``InvalidNamespace``, both an ``InvalidId`` and LangGraph's
``InvalidNamespaceError``). ``created_at`` / ``updated_at`` are the fact's times, in UTC.

**Batches.** A batch behaves like LangGraph's own stores: every read (get, search, list)
sees the state before the batch's writes; the writes then run in order, one per
(namespace, key), the last one winning. Every op is written once as a plan of store calls
(:mod:`memory_adapters.steps`) and driven by ``batch`` (blocking calls) or ``abatch`` (the
store's async methods, never blocking the event loop); the library's hooks
(``fact_stored``, ``fact_recalled``, ``facts_searched``, ``fact_forgotten``) fire as for
``memory.facts``.

**Search.** ``namespace_prefix`` is turned into one or two scope prefixes (two when it
covers both user scopes and ``"lg:"`` scopes: a prefix of ``user_namespace``), listed with
:meth:`Store.list_fact_scopes <memory_adapters.store.Store.list_fact_scopes>`; then each
matching scope is read: all its facts without ``query``, the core's keyword search (BM25
over the scope, alike on every store) with ``query`` and no index, or
its vectors with an index; either sets ``score``. ``filter`` is applied as LangGraph's
``InMemoryStore`` applies it (exact matches, nested dicts, lists, ``$eq``, ``$ne``, ``$gt``,
``$gte``, ``$lt``, ``$lte``; a comparison with a missing or non-numeric field is false
instead of an error). Without ``query`` the order is
``InMemoryStore``'s insertion order, as far as it can be told from stored facts: namespaces by
their oldest item, items by creation (an overwrite keeps its place; a delete and a new put
go last). With ``query``: best score first (with an index, the items without vectors after
the others, unscored). Then ``offset`` and ``limit``.

**Costs.** ``get``: one read. ``put`` / ``delete``: one write. ``list_namespaces``: one or two
scope listings (an index range each; the namespaces are then matched, truncated and paged
here). ``search``: one or two scope listings, plus **one query per matching scope** — a
prefix such as ``("memories",)`` touches every user — plus one write per returned item whose
TTL is refreshed. A filtered keyword search considers at most :data:`FILTERED_MATCHES` best
matches per scope.

**TTL** (``supports_ttl = True``). ``put(..., ttl=minutes)`` gives the fact an expiry;
expired items are never returned, listed or searched (``memory.store.prune()`` deletes them;
``sweep_interval_minutes`` is not supported). ``MemoryStore(memory, ttl={"default_ttl": ...,
"refresh_on_read": ...})`` works as in LangGraph's stores. A refresh on ``get`` / ``search``
extends the expiry by the item's original TTL, which is not stored anywhere else: it is
``expires_at - updated_at`` of the fact, as every write sets both. So a refresh is a write
(:meth:`Store.refresh_fact <memory_adapters.store.Store.refresh_fact>`, a compare-and-swap on
the version read: it moves the expiry, bumps the fact's version and ``updated_at``, keeps the
value and the vectors, records no history, fires no hook; it gives way to a concurrent
writer; a store without ``refresh_fact`` writes the value again, without its vectors). The
TTL is recovered to the millisecond, and a refresh keeps it (``refresh_fact`` is given the
TTL and sets ``updated_at`` and ``expires_at`` from one clock reading).

**Semantic search.** ``MemoryStore(memory, index={"dims": ..., "embed": ..., "fields":
[...]})`` searches by meaning as LangGraph's stores do. ``embed``: what LangGraph's
``ensure_embeddings`` accepts (a LangChain ``Embeddings``, a function sync or async, a
``"provider:model"`` string) or a memory-adapters ``Embedder`` (``memory.embedder``). Each
field path (LangGraph's ``get_text_at_path``: ``"$"``, ``"a.b"``, ``"*"``, ``"[*]"`` ...)
gets its own vector; all of a fact's vectors are an :class:`~memory_adapters.embedders.Embedding`
written with it in the same ``put_fact`` call, after one embed call for the whole batch
(each distinct text once). ``put(..., index=[...])`` embeds other fields, ``index=False``
none (an embedding without vectors: "deliberately unindexed"). A search with ``query``
embeds facts of the namespace that have no vectors of the index's model (written by the
library's tools, by another model, or before the index), once, then asks
:meth:`Store.search_fact_vectors <memory_adapters.store.Store.search_fact_vectors>`, which
scores a fact by its best vector (cosine similarity); items without vectors follow,
unscored. A store without vector search refuses an index (``Unsupported``).

Without ``index``, ``query`` is keyword search (``mode="keyword"``) even when the ``Memory``
has an embedder; the puts are still embedded by it (a batch's in one call), as
``memory.facts.put`` embeds, so the library's semantic search finds them. The vectors of a
fact are by one model: the ``index`` embedder's name (the name ``Memory(embed=...)`` gives the
same thing) or the core's; whichever searches a scope embeds again what the other wrote.
Give both the same embedder.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote, unquote

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from memory_adapters.embedders import (
    EMBED_BATCH,
    MAX_DIMS,
    WHOLE,
    CallableEmbedder,
    Embedder,
    Embedding,
)
from memory_adapters.errors import (
    EmbedderFailed,
    EmbeddingWarning,
    InvalidId,
    InvalidInput,
    InvalidTTL,
    InvalidValue,
    Unsupported,
    VersionConflict,
)
from memory_adapters.facts import (
    Fact,
    Facts,
    embed_plan,
    embed_text,
    index_text,
    supports_refresh,
    supports_vectors,
    write_fact,
)
from memory_adapters.memory import Memory
from memory_adapters.scope import Scope
from memory_adapters.steps import EmbedCall, Plan, StoreCall, drive_async, drive_sync
from memory_adapters.validation import (
    MAX_VALUE_BYTES,
    check_id,
    check_positive_int,
    check_ttl,
    dumps,
)

from .embedder import LangChainEmbedder

__all__ = ["FILTERED_MATCHES", "MAX_SCOPE_CHARS", "InvalidNamespace", "MemoryStore"]

LG_PREFIX = "lg:"
"""The start of every scope of a namespace that is not a user's."""

USER_ID = "{user_id}"
"""The placeholder of the user id in a ``user_namespace`` template (its last label);
LangMem's ``"{langgraph_user_id}"`` is read the same way."""

_PLACEHOLDERS = (USER_ID, "{langgraph_user_id}")

UserOf = Callable[[tuple[str, ...]], str | None]
"""A function naming the user a namespace belongs to (``None``: nobody's)."""

AGENTS = "agents"
"""The label between a user id and an agent id: ``(*user_namespace, user, "agents", agent)``."""

MAX_SCOPE_CHARS = 1024
"""The longest fact scope a namespace may map to (labels are percent-encoded, so a
non-ASCII label takes up to 12 characters per character)."""

DISTANCE_TYPES = ("cosine", "inner_product", "l2")
"""The ``index["distance_type"]`` values, scored as LangGraph's ``PostgresStore`` scores them
for unit vectors: ``cosine`` the cosine similarity; ``inner_product`` the dot product (equal to
it); ``l2`` minus the Euclidean distance, ``-sqrt(2 - 2 * cosine)``. Vectors are stored unit
length, so every one ranks by cosine; for an embedder whose vectors are not unit length the
``inner_product`` and ``l2`` scores are those of the vectors' directions."""

FILTERED_MATCHES = 1000
"""How many best keyword matches per scope a search with both ``query`` and ``filter``
considers before filtering."""

_OPERATORS = frozenset(("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"))


class InvalidNamespace(InvalidId, InvalidNamespaceError):
    """A LangGraph namespace that cannot be a fact scope: empty where an item needs one, a
    label that is not a non-empty string, holds a period, a NUL or another control
    character, or is too long. Both the library's :class:`InvalidId` and LangGraph's
    ``InvalidNamespaceError``."""


# -- values, times, filters -------------------------------------------------------------------


def _value(fact: Fact) -> dict[str, Any]:
    """An item's value: the fact's dict, or any other JSON value as ``{"content": value}``."""
    if isinstance(fact.value, dict):
        return fact.value
    return {"content": fact.value}


def _time(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _check_filter(flt: object, where: str = "filter") -> None:
    """Refuse a filter ``InMemoryStore`` could not apply, before anything is read."""
    if isinstance(flt, Mapping):
        for k, v in flt.items():
            if not isinstance(k, str):
                raise InvalidInput(f"{where} keys must be str, not {type(k).__name__}")
            if k.startswith("$") and k not in _OPERATORS:
                raise InvalidInput(
                    f"unsupported filter operator {k!r} in {where}; "
                    f"use one of {', '.join(sorted(_OPERATORS))}"
                )
            _check_filter(v, f"{where}[{k!r}]")
    elif isinstance(flt, list | tuple):
        for i, v in enumerate(flt):
            _check_filter(v, f"{where}[{i}]")


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if math.isnan(number) else number


def _operator(value: Any, operator: str, operand: Any) -> bool:
    """``InMemoryStore``'s operators; an ordering with a missing or non-numeric side is
    false (as in PostgreSQL's JSONB), where ``InMemoryStore`` raises ``TypeError``."""
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    left, right = _number(value), _number(operand)
    if left is None or right is None:
        return False
    if operator == "$gt":
        return left > right
    if operator == "$gte":
        return left >= right
    if operator == "$lt":
        return left < right
    return left <= right  # $lte; others were refused by _check_filter


def _matches(value: Any, flt: Any) -> bool:
    """Whether ``value`` matches ``flt``, the way ``InMemoryStore`` compares values."""
    if isinstance(flt, Mapping):
        if any(k.startswith("$") for k in flt):
            return all(_operator(value, k, v) for k, v in flt.items())
        if not isinstance(value, dict):
            return False
        return all(_matches(value.get(k), v) for k, v in flt.items())
    if isinstance(flt, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(flt)
            and all(_matches(v, f) for v, f in zip(value, flt, strict=True))
        )
    return bool(value == flt)


def _matches_filter(fact: Fact, flt: Mapping[str, Any] | None) -> bool:
    """Whether an item's value matches a search's ``filter``."""
    if not flt:
        return True
    value = _value(fact)
    return all(_matches(value.get(k), v) for k, v in flt.items())


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """``InMemoryStore``'s prefix / suffix match, ``"*"`` matching any one label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    else:
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    return all(p == "*" or k == p for k, p in pairs)


def _count(value: object, what: str) -> int:
    return check_positive_int(value, what, allow_zero=True)


# -- prepared ops ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Where:
    """Where a namespace's items live: the fact scope, and the Scope its hooks are given."""

    namespace: tuple[str, ...]
    scope: str
    hook_scope: Scope


@dataclass(frozen=True, slots=True)
class _Get:
    where: _Where | None
    """``None`` for the empty namespace, which holds nothing."""
    key: str
    refresh: bool


@dataclass(frozen=True, slots=True)
class _Put:
    where: _Where | None
    """``None`` for deleting from the empty namespace, which holds nothing."""
    key: str
    value: dict[str, Any] | None
    ttl: float | None
    """Seconds."""
    index: Literal[False] | tuple[str, ...] | None = None
    """The put's own ``index``: ``None`` the store's fields, ``False`` none, else these."""


@dataclass(frozen=True, slots=True)
class _Search:
    prefix: tuple[str, ...]
    flt: Mapping[str, Any] | None
    query: str | None
    limit: int
    offset: int
    refresh: bool


@dataclass(frozen=True, slots=True)
class _List:
    conditions: tuple[MatchCondition, ...]
    literal: tuple[str, ...]
    max_depth: int | None
    limit: int
    offset: int


_Prepared = _Get | _Put | _Search | _List


@dataclass(slots=True)
class _Found:
    """A fact found for a search, with where it lives."""

    where: _Where
    fact: Fact


class MemoryStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are a ``Memory``'s long-term facts.

    ``user_namespace``: which namespaces are a user's — a template ending in
    ``"{user_id}"`` (``("memories", "{user_id}")`` by default; ``(*prefix, user_id)`` is the
    user's own long-term memory, shared with the library's tools; the placeholder may be left
    out), or a function of the namespace tuple returning the user id or ``None``. A user's
    namespaces are erased, exported and pruned with the user's memory. ``namespace``: the
    ``Memory``'s fact namespace to use (its base namespace by default). ``ttl``: LangGraph's
    ``TTLConfig`` (``default_ttl`` in minutes, ``refresh_on_read``). ``index``: LangGraph's
    ``IndexConfig`` (``dims``, ``embed``, ``fields``) for semantic search; refused with
    :class:`~memory_adapters.errors.Unsupported` on a store without vector search. See the
    module docstring for the mapping, costs and limits.
    """

    supports_ttl = True

    distance_type: str = "cosine"
    """``index["distance_type"]``: how ``score`` is computed (see :data:`DISTANCE_TYPES`)."""

    def __init__(
        self,
        memory: Memory,
        *,
        user_namespace: tuple[str, ...] | UserOf = ("memories", USER_ID),
        namespace: str | None = None,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        if not isinstance(memory, Memory):
            raise InvalidInput(f"memory must be a memory_adapters.Memory, not {type(memory)}")
        self.memory = memory
        # the base namespace: what memory.facts uses outside any session that changes it
        self.namespace = memory.namespace if namespace is None else check_id(namespace, "namespace")
        self.user_of: UserOf | None = None
        """The function naming the user of a namespace, when ``user_namespace`` is one."""
        self.user_namespace: tuple[str, ...] | None = None
        """The labels before the user id of ``user_namespace``'s template (``("memories",)``
        by default); ``None`` when ``user_namespace`` is a function."""
        if callable(user_namespace) and not isinstance(user_namespace, tuple):
            self.user_of = user_namespace
        else:
            if not isinstance(user_namespace, tuple) or not user_namespace:
                raise InvalidNamespace(
                    "user_namespace must be a non-empty tuple of labels (a template ending "
                    f"in {USER_ID!r}) or a function of a namespace"
                )
            last = user_namespace[-1]
            labels = user_namespace[:-1] if last in _PLACEHOLDERS else user_namespace
            if any(p in labels for p in _PLACEHOLDERS):
                raise InvalidNamespace(f"{USER_ID!r} can only be the last label of user_namespace")
            self.user_namespace = self._labels(labels)
        if ttl is not None:
            if not isinstance(ttl, Mapping):
                raise InvalidInput("ttl must be a TTLConfig dict")
            if ttl.get("sweep_interval_minutes") is not None:
                raise Unsupported(
                    "MemoryStore does not sweep: expired items are never returned, and "
                    "memory.store.prune() deletes them"
                )
            default = ttl.get("default_ttl")
            if default is not None:
                check_ttl(_minutes(default))
        self.ttl_config = ttl.copy() if ttl is not None else None
        self.index_config: dict[str, Any] | None = None
        """LangGraph's ``IndexConfig`` as given (``dims``, ``embed``, ``fields``), or ``None``."""
        self.embeddings: Embeddings | None = None
        """The LangChain ``Embeddings`` ``index["embed"]`` became (``None`` without an index,
        or when ``embed`` is a memory-adapters ``Embedder``)."""
        self.index_embedder: Embedder | None = None
        """What embeds items and queries for ``index``; its ``name`` is the model name stored
        with the vectors."""
        self._fields: list[tuple[str, str | list[str]]] = []
        if index is not None:
            self._configure_index(index)

    def __repr__(self) -> str:
        return (
            f"<MemoryStore memory={self.memory!r} namespace={self.namespace!r} "
            f"user_namespace={self.user_of or self.user_namespace!r}>"
        )

    def _configure_index(self, index: object) -> None:
        if not isinstance(index, Mapping):
            raise InvalidInput(f"index must be an IndexConfig dict, not {type(index).__name__}")
        if index.get("embed") is None:
            raise InvalidInput('index needs "embed": an Embeddings, a function or a name')
        dims = index.get("dims")
        if dims is not None:
            check_positive_int(dims, 'index["dims"]')
            if dims > MAX_DIMS:
                raise InvalidInput(f'index["dims"] is at most {MAX_DIMS}, not {dims}')
        # "text_fields": LangGraph SqliteStore's spelling of "fields" (a str is one field)
        fields = index.get("fields") or index.get("text_fields") or [WHOLE]
        if isinstance(fields, str) and "fields" not in index:
            fields = [fields]
        if isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields):
            raise InvalidInput('index["fields"] must be a list of field paths (str)')
        distance = index.get("distance_type", "cosine")
        if distance not in DISTANCE_TYPES:
            raise Unsupported(
                f'index["distance_type"] is one of {", ".join(DISTANCE_TYPES)}, not {distance!r}'
                + (" (bit vectors are not supported)" if distance == "hamming" else "")
            )
        ann = index.get("ann_index_config") or {}
        if not isinstance(ann, Mapping):
            raise InvalidInput('index["ann_index_config"] must be a dict')
        if ann.get("vector_type", "vector") not in ("vector", "halfvec"):
            raise Unsupported(
                'index["ann_index_config"]["vector_type"] is "vector" or "halfvec" (both are '
                f"stored as float32 here), not {ann.get('vector_type')!r}"
            )
        self.distance_type = distance
        store = self.memory.store
        if not supports_vectors(store):
            raise Unsupported(
                f"{type(store).__name__} cannot search by meaning (it does not implement "
                "Store.search_fact_vectors), so MemoryStore cannot have an index there; build "
                "it without index= for keyword search"
            )
        self.index_embedder, self.embeddings = index_embedder(index["embed"])
        self._fields = [(f, f if f == WHOLE else tokenize_path(f)) for f in fields]
        config = dict(index)
        config["__tokenized_fields"] = list(self._fields)
        self.index_config = config

    @property
    def _dims(self) -> int | None:
        dims = None if self.index_config is None else self.index_config.get("dims")
        return dims if isinstance(dims, int) else None

    # -- the namespace mapping ---------------------------------------------------------------

    @staticmethod
    def _labels(namespace: object, *, wildcards: bool = False) -> tuple[str, ...]:
        """``namespace`` if every label is one LangGraph and a fact scope both accept."""
        if not isinstance(namespace, tuple | list):
            raise InvalidNamespace(
                f"a namespace is a tuple of str labels, not {type(namespace).__name__}"
            )
        for label in namespace:
            if not isinstance(label, str):
                raise InvalidNamespace(
                    f"namespace label {label!r} in {namespace!r} is a "
                    f"{type(label).__name__}, not a str"
                )
            if wildcards and label == "*":
                continue
            if "." in label:
                raise InvalidNamespace(
                    f"namespace label {label!r} in {namespace!r} contains a period"
                )
            try:
                check_id(label, "namespace label")
            except InvalidId as exc:
                raise InvalidNamespace(f"{exc} (in {namespace!r})") from None
        return tuple(namespace)

    def _owner(self, labels: tuple[str, ...]) -> tuple[str | None, Scope | None]:
        """The user a namespace belongs to (``None``: nobody), and the user (and agent)
        Scope it *is* — the user's own memory, shared with the library's tools — or
        ``None`` for another namespace of that user (or of nobody)."""
        if self.user_of is not None:
            user = self.user_of(labels)
            if user is None:
                return None, None
            if not isinstance(user, str):
                raise InvalidInput(
                    f"user_namespace returned {type(user).__name__} for {labels!r}, not a str "
                    "user id or None"
                )
            return check_id(user, "user_id"), None
        assert self.user_namespace is not None
        n = len(self.user_namespace)
        if labels[:n] != self.user_namespace or len(labels) == n:
            return None, None
        user, rest = labels[n], labels[n + 1 :]
        if not rest:
            return user, Scope(namespace=self.namespace, user_id=user)
        if len(rest) == 2 and rest[0] == AGENTS:
            return user, Scope(namespace=self.namespace, user_id=user, agent_id=rest[1])
        return user, None

    @staticmethod
    def _encode(labels: tuple[str, ...]) -> str:
        return LG_PREFIX + "".join(quote(label, safe="") + "/" for label in labels)

    def _where(self, namespace: tuple[str, ...]) -> _Where:
        """Where the items of ``namespace`` live (raises :class:`InvalidNamespace`)."""
        labels = self._labels(namespace)
        if not labels:
            raise InvalidNamespace("an item's namespace cannot be empty")
        user, home = self._owner(labels)
        if home is not None:  # the user's (or user and agent's) own memory
            scope, hook_scope = home.fact_scope, home
        elif user is not None:  # another namespace of the user: beneath the user's scope
            hook_scope = Scope(namespace=self.namespace, user_id=user)
            scope = hook_scope.fact_scope + "/" + self._encode(labels)
        else:
            scope, hook_scope = self._encode(labels), Scope(namespace=self.namespace)
        if len(scope) > MAX_SCOPE_CHARS:
            raise InvalidNamespace(
                f"namespace {namespace!r} is {len(scope)} characters long as a fact scope; "
                f"the limit is {MAX_SCOPE_CHARS}"
            )
        return _Where(labels, scope, hook_scope)

    def fact_scope(self, namespace: tuple[str, ...]) -> str:
        """The fact scope holding the items of ``namespace``."""
        return self._where(namespace).scope

    def namespace_of(self, scope: str) -> tuple[str, ...] | None:
        """The namespace whose items a fact scope holds, or ``None`` for a scope that is not
        one (a conversation's facts, or labels LangGraph would refuse)."""
        try:
            if scope.startswith(LG_PREFIX):
                body = scope[len(LG_PREFIX) :]
                if not body.endswith("/"):
                    return None
                labels = tuple(unquote(part, errors="strict") for part in body[:-1].split("/"))
            elif scope.startswith("user:"):
                user, sep, rest = scope[len("user:") :].partition("/")
                if sep and rest.startswith(LG_PREFIX):  # ("user:<u>/lg:<labels>/")
                    body = rest[len(LG_PREFIX) :]
                    if not body.endswith("/"):
                        return None
                    labels = tuple(unquote(p, errors="strict") for p in body[:-1].split("/"))
                elif self.user_namespace is None:  # a function names no namespace of these
                    return None
                else:
                    labels = (*self.user_namespace, unquote(user, errors="strict"))
                    if sep:
                        if not rest.startswith("agent:"):
                            return None
                        labels += (AGENTS, unquote(rest[len("agent:") :], errors="strict"))
            else:
                return None
            # only the canonical spelling of a valid namespace is one
            return labels if self._where(labels).scope == scope else None
        except (UnicodeDecodeError, InvalidId, InvalidNamespaceError, InvalidInput):
            return None

    # -- running ops -------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` with blocking store calls (see the module docstring)."""
        store, hooks = self.memory.store, self.memory.hooks
        refreshes: list[Plan[None]] = []
        results = drive_sync(self._plan(list(ops), refreshes), store, hooks)
        for refresh in refreshes:
            with suppress(VersionConflict):  # written meanwhile, with its own expiry
                drive_sync(refresh, store, hooks)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` with the store's async methods (see the module docstring)."""
        store, hooks = self.memory.store, self.memory.hooks
        refreshes: list[Plan[None]] = []
        results = await drive_async(self._plan(list(ops), refreshes), store, hooks)
        for refresh in refreshes:
            with suppress(VersionConflict):  # written meanwhile, with its own expiry
                await drive_async(refresh, store, hooks)
        return results

    def _facts(self, where: _Where) -> Facts:
        return Facts(self.memory, where.hook_scope, namespace=self.namespace, owner=where.scope)

    def _prepare(self, op: object) -> _Prepared:
        """Check one op completely, so that a bad op in a batch writes nothing."""
        if isinstance(op, GetOp):
            key = check_id(op.key, "key")
            where = self._where(op.namespace) if self._labels(op.namespace) else None
            return _Get(where, key, bool(op.refresh_ttl))
        if isinstance(op, PutOp):
            key = check_id(op.key, "key")
            if op.value is None:
                where = self._where(op.namespace) if self._labels(op.namespace) else None
                return _Put(where, key, None, None)
            # ``put`` refuses a "langgraph" root label (BaseStore checks it); a PutOp given to
            # batch may have one, as in LangGraph's own stores
            where = self._where(op.namespace)
            if not isinstance(op.value, Mapping):
                raise InvalidValue(f"an item's value is a dict, not a {type(op.value).__name__}")
            value = dict(op.value)
            dumps(value, "value", MAX_VALUE_BYTES)  # refused here, before any write
            ttl = None if op.ttl is None else check_ttl(_minutes(op.ttl))
            return _Put(where, key, value, ttl, _check_index(op.index))
        if isinstance(op, SearchOp):
            prefix = self._labels(op.namespace_prefix)
            if op.filter is not None and not isinstance(op.filter, Mapping):
                raise InvalidInput(f"filter must be a dict, not {type(op.filter).__name__}")
            _check_filter(op.filter)
            if op.query is not None and not isinstance(op.query, str):
                raise InvalidInput(f"query must be a str, not {type(op.query).__name__}")
            return _Search(
                prefix,
                op.filter,
                op.query or None,
                _count(op.limit, "limit"),
                _count(op.offset, "offset"),
                bool(op.refresh_ttl),
            )
        if isinstance(op, ListNamespacesOp):
            conditions = tuple(
                # a path given as one str (LangGraph's PostgreSQL tests do) is one label
                MatchCondition(c.match_type, (c.path,))
                if isinstance(c, MatchCondition) and isinstance(c.path, str)
                else c
                for c in op.match_conditions or ()
            )
            literal: tuple[str, ...] = ()
            for condition in conditions:
                if not isinstance(condition, MatchCondition) or condition.match_type not in (
                    "prefix",
                    "suffix",
                ):
                    raise InvalidInput(f"not a prefix or suffix MatchCondition: {condition!r}")
                path = self._labels(condition.path, wildcards=True)
                if condition.match_type == "prefix":
                    fixed = path[: path.index("*")] if "*" in path else path
                    literal = max(literal, fixed, key=len)
            if op.max_depth is not None:
                check_positive_int(op.max_depth, "max_depth")
            return _List(
                conditions,
                literal,
                op.max_depth,
                _count(op.limit, "limit"),
                _count(op.offset, "offset"),
            )
        raise InvalidInput(f"unknown LangGraph store operation {type(op).__name__}")

    def _plan(self, ops: list[Op], refreshes: list[Plan[None]]) -> Plan[list[Result]]:
        """The whole batch: reads in order against the state before it, then the writes
        (one per namespace and key, the last winning). TTL refreshes are appended to
        ``refreshes`` for the caller to run after, each on its own."""
        prepared = [self._prepare(op) for op in ops]
        results: list[Result] = [None] * len(prepared)
        writes: dict[tuple[str, str], _Put] = {}
        queries: dict[str, list[float] | None] = {}
        for i, p in enumerate(prepared):
            if isinstance(p, _Get):
                results[i] = yield from self._get(p, refreshes)
            elif isinstance(p, _Search):
                results[i] = yield from self._search(p, refreshes, queries)
            elif isinstance(p, _List):
                results[i] = yield from self._list_namespaces(p)
            elif p.where is not None:
                writes[(p.where.scope, p.key)] = p
        puts = [w for w in writes.values() if w.value is not None]
        embeddings = yield from self._embed_puts(puts)  # every embed call before any write
        for w in writes.values():
            assert w.where is not None
            if w.value is None:
                yield from self._facts(w.where)._forget(w.key, None)
            else:
                yield from self._write(w.where, w.key, w.value, w.ttl, None, embeddings.get(id(w)))
        return results

    # -- embeddings --------------------------------------------------------------------------

    def _field_texts(
        self, value: dict[str, Any], index: Literal[False] | tuple[str, ...] | None
    ) -> list[tuple[str, str]]:
        """``(field, text)`` pairs an item is embedded by, as LangGraph's stores extract them:
        the store's fields (``index=None``) or the put's own, each path giving its text (a
        path giving several, through ``*`` or ``[*]``, names them ``path.0``, ``path.1`` ...);
        none for ``index=False``."""
        if index is False:
            return []
        paths = self._fields if index is None else [(f, tokenize_path(f)) for f in index]
        out: list[tuple[str, str]] = []
        for path, tokens in paths:
            texts = get_text_at_path(value, tokens)
            if len(texts) > 1:
                out.extend((f"{path}.{i}", text) for i, text in enumerate(texts))
            elif texts:
                out.append((path, texts[0]))
        return out

    def _embed_texts(self, texts: list[str]) -> Plan[list[list[float] | None]]:
        """The index embedder's vectors for ``texts`` (documents), made unit length, in calls
        of at most :data:`~memory_adapters.embedders.EMBED_BATCH` texts; ``None`` for an
        all-zero vector, which has no direction (LangGraph scores it 0). Raises
        :class:`~memory_adapters.errors.EmbedderFailed` when the embedder fails: the item is
        then not written, as in LangGraph's stores."""
        embedder = self.index_embedder
        assert embedder is not None
        out: list[list[float] | None] = []
        for start in range(0, len(texts), EMBED_BATCH):
            chunk = texts[start : start + EMBED_BATCH]
            result = yield EmbedCall(embedder, chunk, "document")
            out.extend(self._vectors(result, len(chunk)))
        return out

    def _vectors(self, result: Any, count: int) -> list[list[float] | None]:
        embedder = self.index_embedder
        assert embedder is not None
        if isinstance(result, Exception):
            failed = EmbedderFailed(
                f"embedder {embedder.name!r} raised {type(result).__name__}: {result}"
            )
            raise failed from result
        if hasattr(result, "tolist"):
            result = result.tolist()
        if not isinstance(result, Sequence) or len(result) != count:
            raise EmbedderFailed(f"embedder {embedder.name!r} did not return {count} vectors")
        return [_unit(v, self._dims, embedder.name) for v in result]

    def _index_embedding(self, fields: list[tuple[str, list[float] | None]]) -> Embedding:
        assert self.index_embedder is not None
        vectors = {field: v for field, v in fields if v is not None}
        dims = next((len(v) for v in vectors.values()), self._dims or 1)
        return Embedding(self.index_embedder.name, dims, vectors)

    def _embed_puts(self, puts: list[_Put]) -> Plan[dict[int, Embedding | None]]:
        """The embedding each put writes with its fact (by ``id`` of the put).

        With an index: the item's field texts by the index embedder, each distinct text
        embedded once, all in one call (or a few); an item with no text to embed gets an
        embedding without vectors (deliberately unindexed). Without an index, when the
        ``Memory`` has an embedder: the fact's search text under the core's own field, as
        ``memory.facts.put`` embeds it (a failure warns and writes without; the core embeds
        it when it searches)."""
        if not puts:
            return {}
        if self.index_embedder is not None:
            per_put = [(p, self._field_texts(p.value or {}, p.index)) for p in puts]
            distinct = list(dict.fromkeys(text for _, fields in per_put for _, text in fields))
            vectors = yield from self._embed_texts(distinct) if distinct else _nothing()
            by_text = dict(zip(distinct, vectors, strict=True))
            return {
                id(p): self._index_embedding([(f, by_text[t]) for f, t in fields])
                for p, fields in per_put
            }
        embedder = self.memory.embedder
        if embedder is None or not supports_vectors(self.memory.store):
            return {}
        texts = [embed_text(p.key, p.value) for p in puts]
        found = yield from embed_plan(self.memory, texts, "document")
        if isinstance(found, EmbedderFailed):
            warnings.warn(
                f"{found}; the items are stored and will be embedded when searched",
                EmbeddingWarning,
                stacklevel=4,
            )
            return {}
        return {
            id(p): Embedding(embedder.name, len(v), {WHOLE: v})
            for p, v in zip(puts, found, strict=True)
        }

    def _write(
        self,
        where: _Where,
        key: str,
        value: Any,
        ttl: float | None,
        expected_version: int | None,
        embedding: Embedding | None,
        importance: float = 0.0,
    ) -> Plan[Fact]:
        """``Facts._put`` with the embedding made here (the store's fields, batched)."""
        return (
            yield from write_fact(
                self.memory,
                where.hook_scope,
                (self.namespace, where.scope, key, dumps(value, "value", MAX_VALUE_BYTES)),
                text=index_text(key, value),
                importance=importance,
                expires_at=None if ttl is None else time.time() + ttl,
                expected_version=expected_version,
                embedding=embedding,
            )
        )

    def _embed_missing(self, where: _Where) -> Plan[None]:
        """Embed, by the index's fields, the facts of a scope that have no vectors of the
        index embedder: written by the library's tools or ``memory.facts`` (another model, or
        none), or written before the index was configured. Each is embedded once: the
        vectors are stored with it (unless it was written meanwhile, by a writer that
        embedded it)."""
        assert self.index_embedder is not None
        model = self.index_embedder.name
        while True:
            stale: list[Fact] = yield StoreCall(
                "facts_to_embed", (self.namespace, where.scope, model), {"limit": EMBED_BATCH}
            )
            if not stale:
                return
            per_fact = [(f, self._field_texts(_value(f), None)) for f in stale]
            distinct = list(dict.fromkeys(text for _, fields in per_fact for _, text in fields))
            vectors = yield from self._embed_texts(distinct) if distinct else _nothing()
            by_text = dict(zip(distinct, vectors, strict=True))
            for fact, fields in per_fact:
                embedding = self._index_embedding([(f, by_text[t]) for f, t in fields])
                yield StoreCall(
                    "set_fact_embedding",
                    (self.namespace, where.scope, fact.key, fact.version, embedding),
                )
            if len(stale) < EMBED_BATCH:
                return

    def _query_vector(
        self, query: str, cache: dict[str, list[float] | None]
    ) -> Plan[list[float] | None]:
        """The unit vector of a search query (each distinct query of a batch embedded once);
        ``None`` when it is all zeros."""
        if query not in cache:
            assert self.index_embedder is not None
            result = yield EmbedCall(self.index_embedder, [query], "query")
            cache[query] = self._vectors(result, 1)[0]
        return cache[query]

    # -- the ops, as plans -------------------------------------------------------------------

    def _refresh(self, where: _Where, fact: Fact) -> Plan[None]:
        """Extend a fact's expiry by its own TTL: the same value, compare-and-swapped."""
        if fact.expires_at is None:
            return
        ttl = round(fact.expires_at - fact.updated_at, 3)
        if ttl <= 0:
            return
        if supports_refresh(self.memory.store):  # the same fact, vectors kept, a new expiry
            yield StoreCall(
                "refresh_fact",
                (self.namespace, where.scope, fact.key, fact.version, ttl),
            )
        else:  # a store without Store.refresh_fact: written again, without its vectors
            yield from self._write(
                where, fact.key, fact.value, ttl, fact.version, None, fact.importance
            )

    def _score(self, cosine: float | None) -> float | None:
        """A hit's ``score`` by :attr:`distance_type`, from its cosine similarity (both
        vectors unit length)."""
        if cosine is None or self.distance_type != "l2":
            return cosine
        return -math.sqrt(max(0.0, 2.0 - 2.0 * cosine))

    def _item(self, where: _Where, fact: Fact) -> Item:
        return Item(
            value=_value(fact),
            key=fact.key,
            namespace=where.namespace,
            created_at=_time(fact.created_at),
            updated_at=_time(fact.updated_at),
        )

    def _get(self, op: _Get, refreshes: list[Plan[None]]) -> Plan[Item | None]:
        if op.where is None:
            return None
        fact = yield from self._facts(op.where)._get(op.key)
        if fact is None:
            return None
        if op.refresh and fact.expires_at is not None:
            refreshes.append(self._refresh(op.where, fact))
        return self._item(op.where, fact)

    def _scopes(self, prefix: tuple[str, ...]) -> Plan[list[_Where]]:
        """Where the items of every namespace starting with ``prefix`` live, from one or two
        scope listings."""
        n = len(prefix)
        user: str | None = None
        if self.user_namespace is None:  # a function: beneath a user's namespace, that user
            user = self._owner(prefix)[0] if prefix else None
        elif n > len(self.user_namespace):
            user = self._owner(prefix[: len(self.user_namespace) + 1])[0]
        if user is not None:  # one user's namespaces: its own scope and those beneath it
            starts = [Scope(user_id=user).fact_scope]
        elif self.user_namespace is None or self.user_namespace[:n] == prefix:
            starts = [self._encode(prefix), "user:"]  # may cover any user
        else:
            starts = [self._encode(prefix)]
        found: list[_Where] = []
        for start in starts:
            scopes: list[str] = yield StoreCall(
                "list_fact_scopes", (self.namespace, start), {"limit": None}
            )
            for scope in scopes:
                labels = self.namespace_of(scope)
                if labels is not None and labels[:n] == prefix:
                    found.append(self._where(labels))
        return found

    def _search(
        self, op: _Search, refreshes: list[Plan[None]], queries: dict[str, list[float] | None]
    ) -> Plan[list[SearchItem]]:
        if op.limit == 0:
            return []
        if op.query is not None and self.index_embedder is not None:
            return (yield from self._semantic_search(op, refreshes, queries))
        wheres = yield from self._scopes(op.prefix)
        found: list[_Found] = []
        first_created: dict[tuple[str, ...], float] = {}
        for where in wheres:
            facts = self._facts(where)
            if op.query is not None:
                wanted = FILTERED_MATCHES if op.flt else op.offset + op.limit
                listed = yield from facts._search(op.query, wanted, "keyword")
            else:
                listed = yield from facts._list(None)
                if listed:
                    first_created[where.namespace] = min(f.created_at for f in listed)
            found.extend(_Found(where, f) for f in listed if _matches_filter(f, op.flt))
        if op.query is not None:
            found.sort(
                key=lambda x: (
                    -(x.fact.score or 0.0),
                    x.fact.created_at,
                    x.where.namespace,
                    x.fact.key,
                )
            )
        else:
            found.sort(
                key=lambda x: (
                    first_created[x.where.namespace],
                    x.where.namespace,
                    x.fact.created_at,
                    x.fact.key,
                )
            )
        page = found[op.offset : op.offset + op.limit]
        return self._page(op, page, refreshes, scored=op.query is not None)

    def _page(
        self, op: _Search, page: list[_Found], refreshes: list[Plan[None]], scored: bool
    ) -> list[SearchItem]:
        if op.refresh:
            refreshes.extend(
                self._refresh(x.where, x.fact) for x in page if x.fact.expires_at is not None
            )
        return [
            SearchItem(
                namespace=x.where.namespace,
                key=x.fact.key,
                value=_value(x.fact),
                created_at=_time(x.fact.created_at),
                updated_at=_time(x.fact.updated_at),
                score=x.fact.score if scored else None,
            )
            for x in page
        ]

    def _semantic_search(
        self, op: _Search, refreshes: list[Plan[None]], queries: dict[str, list[float] | None]
    ) -> Plan[list[SearchItem]]:
        """A search by meaning, as LangGraph's stores search with an index: the items with
        vectors by cosine similarity of their best field to the query (``score``), best first;
        then the matching items without vectors (``score=None``), in insertion order."""
        assert op.query is not None and self.index_embedder is not None
        model = self.index_embedder.name
        wheres = yield from self._scopes(op.prefix)
        if not wheres:
            return []
        vector = yield from self._query_vector(op.query, queries)
        wanted = op.offset + op.limit
        scored: list[_Found] = []
        unscored: list[_Found] = []
        first_created: dict[tuple[str, ...], float] = {}
        for where in wheres:
            yield from self._embed_missing(where)
            listed: list[Fact] | None = None
            if op.flt:  # every item of the scope is read, to filter
                listed = yield from self._facts(where)._list(None)
                listed = [f for f in listed if _matches_filter(f, op.flt)]
                if not listed:
                    continue
            hits: list[Fact] = []
            if vector is not None:
                hits = yield StoreCall(
                    "search_fact_vectors",
                    (self.namespace, where.scope, vector),
                    # with a filter, the scope's every vector: the best ones may not match it
                    {"model": model, "limit": wanted if listed is None else len(listed) + wanted},
                )
            if listed is not None:
                keep = {f.key for f in listed}
                hits = [f for f in hits if f.key in keep]
            elif len(hits) < wanted:  # the page may reach the items without vectors
                listed = yield from self._facts(where)._list(None)
            for f in hits:
                f.score = self._score(f.score)
            scored.extend(_Found(where, f) for f in hits)
            if listed:
                first_created[where.namespace] = min(f.created_at for f in listed)
                have = {f.key for f in hits}
                unscored.extend(_Found(where, f) for f in listed if f.key not in have)
        scored.sort(
            key=lambda x: (-(x.fact.score or 0.0), x.fact.created_at, x.where.namespace, x.fact.key)
        )
        unscored.sort(
            key=lambda x: (
                first_created[x.where.namespace],
                x.where.namespace,
                x.fact.created_at,
                x.fact.key,
            )
        )
        for x in unscored:
            x.fact.score = None
        page = (scored + unscored)[op.offset : op.offset + op.limit]
        return self._page(op, page, refreshes, scored=True)

    def _list_namespaces(self, op: _List) -> Plan[list[tuple[str, ...]]]:
        wheres = yield from self._scopes(op.literal)
        namespaces = {
            w.namespace for w in wheres if all(_does_match(c, w.namespace) for c in op.conditions)
        }
        if op.max_depth is not None:
            namespaces = {ns[: op.max_depth] for ns in namespaces}
        return sorted(namespaces)[op.offset : op.offset + op.limit]


def index_embedder(embed: object) -> tuple[Embedder, Embeddings | None]:
    """The :class:`Embedder` for LangGraph's ``index["embed"]``, and the LangChain
    ``Embeddings`` it wraps (``None`` for a memory-adapters :class:`Embedder` such as
    ``memory.embedder``, used as it is).

    What LangGraph accepts is turned into an ``Embeddings`` by LangGraph's own
    ``ensure_embeddings``. The model name stored with the vectors is the one
    ``Memory(embed=...)`` gives the same thing, so that both share them: a
    ``"provider:model"`` string as it is; a function ``module.qualname``; an ``Embeddings``
    ``langchain:ClassName`` and ``:model`` when it has a ``model`` or ``model_name``."""
    if isinstance(embed, Embedder):
        return embed, None
    embeddings = ensure_embeddings(embed)  # type: ignore[arg-type,unused-ignore]
    embedder = LangChainEmbedder(embeddings)
    if isinstance(embed, str):
        embedder.name = embed
    elif not isinstance(embed, Embeddings) and callable(embed):
        embedder.name = CallableEmbedder(embed).name
    return embedder, embeddings


def _nothing() -> Plan[list[list[float] | None]]:
    """A plan of no steps returning no vectors."""
    return []
    yield  # pragma: no cover - makes this a generator


def _unit(vector: Any, dims: int | None, name: str) -> list[float] | None:
    """``vector`` made unit length; ``None`` for all zeros. Raises
    :class:`~memory_adapters.errors.EmbedderFailed` for a vector that is not numbers, of other
    dimensions than ``index["dims"]``, or longer than :data:`MAX_DIMS`."""
    try:
        values = [float(x) for x in (vector.tolist() if hasattr(vector, "tolist") else vector)]
    except (TypeError, ValueError):
        raise EmbedderFailed(f"embedder {name!r} returned something that is not a vector") from None
    if not values or len(values) > MAX_DIMS or (dims is not None and len(values) != dims):
        want = dims if dims is not None else f"1 to {MAX_DIMS}"
        raise EmbedderFailed(
            f"embedder {name!r} returned a vector of {len(values)} dimensions, not {want}"
        )
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not math.isfinite(norm):
        raise EmbedderFailed(f"embedder {name!r} returned a vector that is not finite")
    if norm == 0.0:
        return None
    return [x / norm for x in values]


def _check_index(index: object) -> Literal[False] | tuple[str, ...] | None:
    """A put's own ``index``: ``None``, ``False`` or a list of field paths."""
    if index is None or index is False:
        return index
    if isinstance(index, list | tuple) and all(isinstance(f, str) and f for f in index):
        return tuple(index)
    raise InvalidInput(f"a put's index is None, False or a list of field paths, not {index!r}")


def _minutes(ttl: object) -> float:
    """A LangGraph TTL (minutes) in seconds; refused with ``InvalidTTL`` if not a number."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidTTL(f"ttl must be a number of minutes, not {type(ttl).__name__}")
    return float(ttl) * 60.0
