"""Long-term memory: facts that outlive a conversation.

A fact is (namespace, scope, key) → a JSON value, with a version (compare-and-swap),
importance, optional expiry, and created/updated times. :class:`Facts` is the handle bound
to one scope; the application decides the scope, the model never does.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import InvalidInput, InvalidTTL
from .steps import Plan, StoreCall, drive_async, drive_sync
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
    from .memory import Memory
    from .scope import Scope

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


@dataclass(slots=True)
class Fact:
    """A stored fact. ``score`` is set by searches (higher is more relevant)."""

    key: str
    value: Any
    version: int
    importance: float = 0.0
    created_at: float = 0.0
    updated_at: float = 0.0
    expires_at: float | None = None
    score: float | None = None

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
    ) -> Fact:
        """Build a fact from a store row holding the value as JSON text."""
        return cls(
            key,
            json.loads(data),
            int(version),
            float(importance),
            float(created_at),
            float(updated_at),
            None if expires_at is None else float(expires_at),
            score,
        )


def search_terms(query: str) -> list[str]:
    """The lower-case words of a search query (punctuation and operators dropped), at most
    :data:`MAX_QUERY_TERMS` of them, each at most :data:`MAX_TERM_LENGTH` characters long
    (longer ones are dropped)."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(query.lower()):
        word = match.group()
        if len(word) <= MAX_TERM_LENGTH:
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
        fact: Fact = yield StoreCall(
            "put_fact",
            (self.namespace, self._owner, key, data),
            {
                "text": search_text(key, value),
                "importance": importance,
                "expires_at": expires,
                "expected_version": expected_version,
            },
        )
        step = self._memory.hooks.fact_stored(self.scope, fact)
        if step is not None:
            yield step
        return fact

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

    def _search(self, query: str, limit: int) -> Plan[list[Fact]]:
        if not isinstance(query, str):
            raise InvalidInput(f"query must be a str, not {type(query).__name__}")
        check_positive_int(limit, "limit")
        terms = search_terms(query)
        results: list[Fact] = []
        if terms:
            results = yield StoreCall(
                "search_facts", (self.namespace, self._owner, terms), {"limit": limit}
            )
        step = self._memory.hooks.facts_searched(self.scope, query, results)
        if step is not None:
            yield step
        return results

    def _forget(self, key: str, expected_version: int | None) -> Plan[bool]:
        check_id(key, "key")
        check_optional_int(expected_version, "expected_version")
        deleted: bool = yield StoreCall(
            "delete_fact",
            (self.namespace, self._owner, key),
            {"expected_version": expected_version},
        )
        step = self._memory.hooks.fact_forgotten(self.scope, key, deleted)
        if step is not None:
            yield step
        return deleted

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

    def search(self, query: str, limit: int = 5) -> list[Fact]:
        """Facts matching the words of ``query``, most relevant first; at most ``limit`` (an
        int from 1 to ``MAX_INT``).

        The query is split into lower-case words; its first ``MAX_QUERY_TERMS`` distinct
        words of at most ``MAX_TERM_LENGTH`` characters are looked for (a query with none,
        such as only punctuation, finds nothing).
        """
        return self._run(self._search(query, limit))

    def forget(self, key: str, *, expected_version: int | None = None) -> bool:
        """Delete a fact; ``False`` if there was none. ``expected_version`` (an int from 0 to
        ``MAX_INT``) makes it conditional, like :meth:`put`."""
        return self._run(self._forget(key, expected_version))

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

    async def asearch(self, query: str, limit: int = 5) -> list[Fact]:
        """Async :meth:`search`."""
        return await self._arun(self._search(query, limit))

    async def aforget(self, key: str, *, expected_version: int | None = None) -> bool:
        """Async :meth:`forget`."""
        return await self._arun(self._forget(key, expected_version))

    def _run(self, plan: Plan[T]) -> T:
        return drive_sync(plan, self._memory.store, self._memory.hooks)

    async def _arun(self, plan: Plan[T]) -> T:
        return await drive_async(plan, self._memory.store, self._memory.hooks)
