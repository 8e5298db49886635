"""``MemoryStore``: a LangGraph ``BaseStore`` over a ``Memory``'s long-term facts.

Give a graph this store (``graph.compile(store=MemoryStore(memory))``, or
``create_agent(..., store=...)``) and what its nodes and tools keep with ``store.put`` /
``store.search`` lives in the same facts as this library's own memory tools
(``save_memory``, ``recall_memory`` ...) and ``memory.facts``, in whichever store the
``Memory`` uses (``memory://``, SQLite, PostgreSQL, MongoDB).

**Namespaces.** Every item is a fact in the ``Memory``'s fact namespace (its base namespace,
or ``namespace=``); the LangGraph namespace tuple picks the fact *scope*:

* ``(*user_namespace, user_id)`` — ``("memories", "alice")`` by default — **is** the user's
  long-term memory: the scope ``Scope(namespace=..., user_id="alice").fact_scope``
  (``"user:alice"``) that ``memory.session(user_id="alice")`` gives the memory tools and
  ``memory.facts``. So langmem-style tools configured with the namespace
  ``("memories", "{langgraph_user_id}")`` share facts with this library's tools;
* ``(*user_namespace, user_id, "agents", agent_id)`` is the scope of that user with that
  agent (``memory.session(user_id=..., agent_id=...)``);
* any other tuple is a scope of its own, ``"lg:"`` followed by each label percent-encoded
  (:func:`urllib.parse.quote`, nothing safe) and ended with ``/``: ``("docs", "v1")`` is
  ``"lg:docs/v1/"``. A tuple prefix is then a string prefix: ``("a",)`` covers
  ``("a", "b")`` but never ``("ab",)``.

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
matching scope is read: all its facts without ``query``, or the store's keyword search
(PostgreSQL ``tsvector``, SQLite FTS5, MongoDB ``$text``) with ``query``, which sets
``score``. ``filter`` is applied as LangGraph's ``InMemoryStore`` applies it (exact matches,
nested dicts, lists, ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``; a comparison with
a missing or non-numeric field is false instead of an error). Without ``query`` the order is
``InMemoryStore``'s insertion order, as far as it can be told from stored facts: namespaces by
their oldest item, items by creation (an overwrite keeps its place; a delete and a new put
go last). With ``query``: best score first. Then ``offset`` and ``limit``.

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
(a compare-and-swap of the same value: it bumps the fact's version and ``updated_at`` and
fires ``fact_stored``; it gives way to a concurrent writer). The TTL is recovered to the
millisecond: exact when the store takes less than half a millisecond between the plan and
its write, otherwise a refresh may shorten it by that latency.

**Not supported.** Semantic search: ``index=`` raises ``Unsupported``, a ``put``'s own
``index`` argument is ignored (as in every LangGraph store built without an index), and
``query`` is keyword search. Embeddings through the library's ``embed`` hook are future work.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from langgraph.store.base import (
    BaseStore,
    GetOp,
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
)

from memory_adapters.errors import (
    InvalidId,
    InvalidInput,
    InvalidTTL,
    InvalidValue,
    Unsupported,
    VersionConflict,
)
from memory_adapters.facts import Fact, Facts
from memory_adapters.memory import Memory
from memory_adapters.scope import Scope
from memory_adapters.steps import Plan, StoreCall, drive_async, drive_sync
from memory_adapters.validation import (
    MAX_VALUE_BYTES,
    check_id,
    check_positive_int,
    check_ttl,
    dumps,
)

__all__ = ["FILTERED_MATCHES", "MAX_SCOPE_CHARS", "InvalidNamespace", "MemoryStore"]

LG_PREFIX = "lg:"
"""The start of every scope of a namespace that is not a user's."""

AGENTS = "agents"
"""The label between a user id and an agent id: ``(*user_namespace, user, "agents", agent)``."""

MAX_SCOPE_CHARS = 1024
"""The longest fact scope a namespace may map to (labels are percent-encoded, so a
non-ASCII label takes up to 12 characters per character)."""

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

    ``user_namespace``: the namespace labels under which ``(*user_namespace, user_id)`` is
    the user's own long-term memory (``("memories",)`` by default). ``namespace``: the
    ``Memory``'s fact namespace to use (its base namespace by default). ``ttl``: LangGraph's
    ``TTLConfig`` (``default_ttl`` in minutes, ``refresh_on_read``). ``index``: not supported
    (raises :class:`~memory_adapters.errors.Unsupported`). See the module docstring for the
    mapping, costs and limits.
    """

    supports_ttl = True

    def __init__(
        self,
        memory: Memory,
        *,
        user_namespace: tuple[str, ...] = ("memories",),
        namespace: str | None = None,
        index: Any = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        if index is not None:
            raise Unsupported(
                "MemoryStore does not do semantic search: build it without index=. Its "
                "search(query=...) is the store's keyword search; embeddings through the "
                "memory-adapters embed hook are future work"
            )
        if not isinstance(memory, Memory):
            raise InvalidInput(f"memory must be a memory_adapters.Memory, not {type(memory)}")
        self.memory = memory
        # the base namespace: what memory.facts uses outside any session that changes it
        self.namespace = memory.namespace if namespace is None else check_id(namespace, "namespace")
        if not isinstance(user_namespace, tuple) or not user_namespace:
            raise InvalidNamespace("user_namespace must be a non-empty tuple of labels")
        self.user_namespace = self._labels(user_namespace)
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

    def __repr__(self) -> str:
        return (
            f"<MemoryStore memory={self.memory!r} namespace={self.namespace!r} "
            f"user_namespace={self.user_namespace!r}>"
        )

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

    def _user_scope(self, labels: tuple[str, ...]) -> Scope | None:
        """The user (and agent) Scope a namespace is, or ``None``."""
        n = len(self.user_namespace)
        if labels[:n] != self.user_namespace:
            return None
        rest = labels[n:]
        if len(rest) == 1:
            return Scope(namespace=self.namespace, user_id=rest[0])
        if len(rest) == 3 and rest[1] == AGENTS:
            return Scope(namespace=self.namespace, user_id=rest[0], agent_id=rest[2])
        return None

    @staticmethod
    def _encode(labels: tuple[str, ...]) -> str:
        return LG_PREFIX + "".join(quote(label, safe="") + "/" for label in labels)

    def _where(self, namespace: tuple[str, ...]) -> _Where:
        """Where the items of ``namespace`` live (raises :class:`InvalidNamespace`)."""
        labels = self._labels(namespace)
        if not labels:
            raise InvalidNamespace("an item's namespace cannot be empty")
        user = self._user_scope(labels)
        if user is not None:
            scope, hook_scope = user.fact_scope, user
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
                user, sep, agent = scope[len("user:") :].partition("/agent:")
                labels = (*self.user_namespace, unquote(user, errors="strict"))
                if sep:
                    labels += (AGENTS, unquote(agent, errors="strict"))
            else:
                return None
            # only the canonical spelling of a valid namespace is one
            return labels if self._where(labels).scope == scope else None
        except (UnicodeDecodeError, InvalidId, InvalidNamespaceError):
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
            where = self._where(op.namespace)
            if where.namespace[0] == "langgraph":
                raise InvalidNamespace(
                    f'the root label of a namespace cannot be "langgraph": {op.namespace!r}'
                )
            if not isinstance(op.value, Mapping):
                raise InvalidValue(f"an item's value is a dict, not a {type(op.value).__name__}")
            value = dict(op.value)
            dumps(value, "value", MAX_VALUE_BYTES)  # refused here, before any write
            ttl = None if op.ttl is None else check_ttl(_minutes(op.ttl))
            return _Put(where, key, value, ttl)
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
            conditions = tuple(op.match_conditions or ())
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
        for i, p in enumerate(prepared):
            if isinstance(p, _Get):
                results[i] = yield from self._get(p, refreshes)
            elif isinstance(p, _Search):
                results[i] = yield from self._search(p, refreshes)
            elif isinstance(p, _List):
                results[i] = yield from self._list_namespaces(p)
            elif p.where is not None:
                writes[(p.where.scope, p.key)] = p
        for w in writes.values():
            assert w.where is not None
            facts = self._facts(w.where)
            if w.value is None:
                yield from facts._forget(w.key, None)
            else:
                yield from facts._put(w.key, w.value, 0.0, w.ttl, None, None)
        return results

    # -- the ops, as plans -------------------------------------------------------------------

    def _refresh(self, where: _Where, fact: Fact) -> Plan[None]:
        """Extend a fact's expiry by its own TTL: the same value, compare-and-swapped."""
        if fact.expires_at is None:
            return
        ttl = round(fact.expires_at - fact.updated_at, 3)
        if ttl > 0:
            yield from self._facts(where)._put(
                fact.key, fact.value, fact.importance, ttl, None, fact.version
            )

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
        starts = [self._encode(prefix)]
        n = len(prefix)
        if self.user_namespace[:n] == prefix:  # the prefix covers every user
            starts.append("user:")
        elif len(prefix) > len(self.user_namespace):
            user = self._user_scope(prefix[: len(self.user_namespace) + 1])
            if user is not None:  # one user: its own scope and its agents'
                starts.append(user.fact_scope)
        found: list[_Where] = []
        for start in starts:
            scopes: list[str] = yield StoreCall(
                "list_fact_scopes", (self.namespace, start), {"limit": None}
            )
            for scope in scopes:
                labels = self.namespace_of(scope)
                if labels is not None and labels[:n] == prefix:
                    user = self._user_scope(labels)
                    hook_scope = user if user is not None else Scope(namespace=self.namespace)
                    found.append(_Where(labels, scope, hook_scope))
        return found

    def _search(self, op: _Search, refreshes: list[Plan[None]]) -> Plan[list[SearchItem]]:
        if op.limit == 0:
            return []
        wheres = yield from self._scopes(op.prefix)
        found: list[_Found] = []
        first_created: dict[tuple[str, ...], float] = {}
        for where in wheres:
            facts = self._facts(where)
            if op.query is not None:
                wanted = FILTERED_MATCHES if op.flt else op.offset + op.limit
                listed = yield from facts._search(op.query, wanted)
            else:
                listed = yield from facts._list(None)
                if listed:
                    first_created[where.namespace] = min(f.created_at for f in listed)
            found.extend(
                _Found(where, f)
                for f in listed
                if not op.flt or all(_matches(_value(f).get(k), v) for k, v in op.flt.items())
            )
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
                score=x.fact.score if op.query is not None else None,
            )
            for x in page
        ]

    def _list_namespaces(self, op: _List) -> Plan[list[tuple[str, ...]]]:
        wheres = yield from self._scopes(op.literal)
        namespaces = {
            w.namespace for w in wheres if all(_does_match(c, w.namespace) for c in op.conditions)
        }
        if op.max_depth is not None:
            namespaces = {ns[: op.max_depth] for ns in namespaces}
        return sorted(namespaces)[op.offset : op.offset + op.limit]


def _minutes(ttl: object) -> float:
    """A LangGraph TTL (minutes) in seconds; refused with ``InvalidTTL`` if not a number."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidTTL(f"ttl must be a number of minutes, not {type(ttl).__name__}")
    return float(ttl) * 60.0
