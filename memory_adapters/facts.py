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

from .errors import InvalidInput
from .steps import Plan, StoreCall, drive_async, drive_sync
from .validation import (
    MAX_VALUE_BYTES,
    check_expires_at,
    check_id,
    check_importance,
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
    """The lower-case words of a search query (punctuation and operators dropped)."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        seen.setdefault(word, None)
    return list(seen)[:MAX_QUERY_TERMS]


def search_text(key: str, value: Any) -> str:
    """What keyword search indexes for a fact: its key and every string in its value."""
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
    return "\n".join(parts).replace("\x00", " ")


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
        expires = now + ttl if ttl is not None else check_expires_at(expires_at, now)
        if expected_version is not None:
            check_positive_int(expected_version, "expected_version", allow_zero=True)
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
        if limit is not None:
            check_positive_int(limit, "limit")
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
        if expected_version is not None:
            check_positive_int(expected_version, "expected_version", allow_zero=True)
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
        if absent); a mismatch raises :class:`~memory_adapters.errors.VersionConflict`."""
        return self._run(self._put(key, value, importance, ttl, expires_at, expected_version))

    def get(self, key: str) -> Fact | None:
        """The fact stored under ``key``, or ``None``."""
        return self._run(self._get(key))

    def all(self, limit: int | None = None) -> list[Fact]:
        """Every unexpired fact of the scope, by key."""
        return self._run(self._list(limit))

    def search(self, query: str, limit: int = 5) -> list[Fact]:
        """Facts matching the words of ``query``, most relevant first."""
        return self._run(self._search(query, limit))

    def forget(self, key: str, *, expected_version: int | None = None) -> bool:
        """Delete a fact; ``False`` if there was none."""
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
