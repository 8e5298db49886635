"""Working memory: a scratchpad of notes for the task at hand, with forks for sub-agents.

Notes are keyed by a scope path: the conversation's path, and below it one level per fork.
A fork reads through to its parent and writes only to itself (a delete in a fork leaves a
tombstone); :meth:`WorkingMemory.merge` brings a fork's writes back into its parent and
reports the keys that both sides changed, resolved by a policy:

``"child"`` (default)
    the fork's writes win; conflicts are reported.
``"parent"``
    conflicting keys keep the parent's value; the rest is merged.
``"raise"``
    any conflict raises :class:`~memory_adapters.errors.MergeConflict` and nothing merges.

Notes are kept as facts in the namespace ``<namespace>#working``, so every store gets
working memory from the fact contract it already implements.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .errors import InvalidInput, MergeConflict
from .facts import Fact
from .steps import Plan, StoreCall, drive_async, drive_sync, gather, one_call
from .validation import (
    MAX_VALUE_BYTES,
    check_id,
    check_importance,
    check_optional_int,
    check_ttl,
    describe,
    dumps,
)

T = TypeVar("T")

if TYPE_CHECKING:
    from .memory import Memory
    from .scope import Scope

MergePolicy = Literal["child", "parent", "raise"]
POLICIES: tuple[str, ...] = ("child", "parent", "raise")


@dataclass(slots=True)
class Note:
    """A working-memory entry as seen from one fork (``path`` is where it is stored)."""

    key: str
    value: Any
    importance: float
    version: int
    updated_at: float
    expires_at: float | None
    path: str


@dataclass(slots=True)
class Conflict:
    """A key changed both in the fork and, since the fork read it, in the parent."""

    key: str
    parent: Any
    child: Any
    child_deleted: bool = False


@dataclass(slots=True)
class MergeReport:
    """What a merge did."""

    child: str
    parent: str
    policy: str
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)


def _envelope(fact: Fact) -> dict[str, Any]:
    env: dict[str, Any] = fact.value
    return env


class WorkingMemory:
    """The working memory of one scope path (the conversation, or a fork below it)."""

    __slots__ = ("_memory", "forks", "namespace", "scope")

    def __init__(self, memory: Memory, scope: Scope, forks: tuple[str, ...] | None = None) -> None:
        self._memory = memory
        self.scope = scope
        self.namespace = scope.namespace + "#working"
        self.forks = scope.fork if forks is None else forks
        for name in self.forks:
            check_id(name, "fork name")

    @property
    def path(self) -> str:
        """This working memory's path."""
        return "/".join((self.scope.working_root, *self.forks))

    @property
    def parent(self) -> WorkingMemory | None:
        """The working memory this one was forked from (``None`` at the root)."""
        if not self.forks:
            return None
        return WorkingMemory(self._memory, self.scope, self.forks[:-1])

    def _lineage(self) -> list[str]:
        """Paths from this one up to the root."""
        root = self.scope.working_root
        return ["/".join((root, *self.forks[:i])) for i in range(len(self.forks), -1, -1)]

    def _child(self, name: str) -> WorkingMemory:
        check_id(name, "fork name")
        if "/" in name:
            raise InvalidInput("a fork name must not contain '/'")
        return WorkingMemory(self._memory, self.scope, (*self.forks, name))

    def fork(self, name: str) -> WorkingMemory:
        """A child that reads through to this working memory and writes only to itself."""
        child = self._child(name)
        self._memory.hooks.notify(self._memory.hooks.working_forked(self.path, child.path))
        return child

    async def afork(self, name: str) -> WorkingMemory:
        """Async :meth:`fork` (an async ``working_forked`` hook runs on the caller's loop)."""
        child = self._child(name)
        await self._memory.hooks.anotify(self._memory.hooks.working_forked(self.path, child.path))
        return child

    # -- plans -------------------------------------------------------------------------------------

    def _lookup(self, key: str, paths: list[str]) -> Plan[tuple[str, Fact] | None]:
        for path in paths:
            fact: Fact | None = yield StoreCall("get_fact", (self.namespace, path, key))
            if fact is not None:
                return path, fact
        return None

    def _get(self, key: str) -> Plan[Note | None]:
        check_id(key, "key")
        found = yield from self._lookup(key, self._lineage())
        if found is None or _envelope(found[1]).get("del"):
            return None
        return _note(found[0], found[1])

    def _items(self) -> Plan[dict[str, Note]]:
        merged: dict[str, Note | None] = {}
        paths = list(reversed(self._lineage()))
        # every level of the lineage at once: one round trip however deep the fork
        found: list[list[Fact]] = yield from gather(
            *(one_call(StoreCall("list_facts", (self.namespace, path))) for path in paths)
        )
        for path, facts in zip(paths, found, strict=True):
            for f in facts:
                merged[f.key] = None if _envelope(f).get("del") else _note(path, f)
        return {k: v for k, v in merged.items() if v is not None}

    def _base(self, key: str) -> Plan[list[Any] | None]:
        """Where and at which version the parent chain holds ``key`` now."""
        found = yield from self._lookup(key, self._lineage()[1:])
        return None if found is None else [found[0], found[1].version]

    def _write(
        self,
        key: str,
        value: Any,
        importance: float,
        expires_at: float | None,
        deleted: bool,
        base: list[Any] | Literal[False] | None = False,
    ) -> Plan[None]:
        if not self.forks:
            if deleted:
                yield StoreCall("delete_fact", (self.namespace, self.path, key))
            else:
                data = dumps({"v": value}, "value", MAX_VALUE_BYTES + 64)
                yield StoreCall(
                    "put_fact",
                    (self.namespace, self.path, key, data),
                    {"text": key, "importance": importance, "expires_at": expires_at},
                )
        else:
            if base is False:
                own: Fact | None = yield StoreCall("get_fact", (self.namespace, self.path, key))
                if own is not None:
                    base = _envelope(own).get("base")
                else:
                    base = yield from self._base(key)
            env: dict[str, Any] = {"del": True} if deleted else {"v": value}
            env["base"] = base
            data = dumps(env, "value", MAX_VALUE_BYTES + 256)
            yield StoreCall(
                "put_fact",
                (self.namespace, self.path, key, data),
                {"text": key, "importance": importance, "expires_at": expires_at},
            )
        self._memory.working_version += 1  # after the write: runs read their notes again
        step = self._memory.hooks.working_written(
            self.path, key, None if deleted else value, deleted
        )
        if step is not None:
            yield step

    def _set(self, key: str, value: Any, importance: float, ttl: float | None) -> Plan[None]:
        check_id(key, "key")
        dumps(value, "value", MAX_VALUE_BYTES)
        importance = check_importance(importance)
        ttl = check_ttl(ttl)
        expires = time.time() + ttl if ttl is not None else None
        yield from self._write(key, value, importance, expires, deleted=False)

    def _delete(self, key: str) -> Plan[bool]:
        existing = yield from self._get(key)
        if existing is None:
            return False
        yield from self._write(key, None, 0.0, None, deleted=True)
        return True

    def _merge(self, policy: str) -> Plan[MergeReport]:
        if type(policy) is not str or policy not in POLICIES:
            raise InvalidInput(f"merge policy must be one of {POLICIES}, not {describe(policy)}")
        parent = self.parent
        if parent is None:
            raise InvalidInput("the root working memory has no parent to merge into")
        report = MergeReport(self.path, parent.path, policy)
        own: list[Fact] = yield StoreCall("list_facts", (self.namespace, self.path))
        plan: list[tuple[Fact, bool]] = []
        for f in own:
            env = _envelope(f)
            now = yield from parent._base_here(f.key)
            if now != env.get("base"):
                current = yield from parent._get(f.key)
                report.conflicts.append(
                    Conflict(
                        f.key,
                        None if current is None else current.value,
                        env.get("v"),
                        bool(env.get("del")),
                    )
                )
                plan.append((f, True))
            else:
                plan.append((f, False))
        if report.conflicts and policy == "raise":
            raise MergeConflict(report)
        for f, conflicting in plan:
            if conflicting and policy == "parent":
                continue
            env = _envelope(f)
            if env.get("del"):
                existed = yield from parent._get(f.key)
                if existed is not None:
                    yield from parent._write(f.key, None, 0.0, None, deleted=True)
                report.deleted.append(f.key)
            else:
                yield from parent._write(
                    f.key, env.get("v"), f.importance, f.expires_at, deleted=False
                )
                report.applied.append(f.key)
        for f in own:
            yield StoreCall("delete_fact", (self.namespace, self.path, f.key))
        self._memory.working_version += 1
        step = self._memory.hooks.working_merged(self.path, parent.path, report)
        if step is not None:
            yield step
        return report

    def _base_here(self, key: str) -> Plan[list[Any] | None]:
        """Where and at which version this memory (reading through) holds ``key`` now."""
        found = yield from self._lookup(key, self._lineage())
        return None if found is None else [found[0], found[1].version]

    # -- sync --------------------------------------------------------------------------------------

    def set(
        self, key: str, value: Any, *, importance: float = 0.0, ttl: float | None = None
    ) -> None:
        """Write a note (JSON value, at most ``MAX_VALUE_BYTES``). Higher ``importance`` (a
        finite number) renders first; ``ttl`` in seconds, ``0 < ttl <= MAX_TTL``."""
        self._run(self._set(key, value, importance, ttl))

    def get(self, key: str, default: Any = None) -> Any:
        """A note's value, read through to the parents, or ``default``."""
        note = self._run(self._get(key))
        return default if note is None else note.value

    def note(self, key: str) -> Note | None:
        """A note with its metadata, or ``None``."""
        result: Note | None = self._run(self._get(key))
        return result

    def delete(self, key: str) -> bool:
        """Delete a note (in a fork: hide it from the fork until merged)."""
        result: bool = self._run(self._delete(key))
        return result

    def items(self) -> dict[str, Note]:
        """Every visible note, parents' included, by key."""
        result: dict[str, Note] = self._run(self._items())
        return result

    def merge(self, policy: MergePolicy = "child") -> MergeReport:
        """Merge this fork's writes into its parent (see the module docstring)."""
        report: MergeReport = self._run(self._merge(policy))
        return report

    def render(self, max_tokens: int | None = None) -> str:
        """The notes as prompt text, most important first, within ``max_tokens`` (default:
        the ``Memory``'s ``working_tokens``): an int from 0 to ``MAX_INT``."""
        check_optional_int(max_tokens, "max_tokens")
        return self._render(self.items(), max_tokens)

    # -- async -------------------------------------------------------------------------------------

    async def aset(
        self, key: str, value: Any, *, importance: float = 0.0, ttl: float | None = None
    ) -> None:
        """Async :meth:`set`."""
        await self._arun(self._set(key, value, importance, ttl))

    async def aget(self, key: str, default: Any = None) -> Any:
        """Async :meth:`get`."""
        note = await self._arun(self._get(key))
        return default if note is None else note.value

    async def anote(self, key: str) -> Note | None:
        """Async :meth:`note`."""
        return await self._arun(self._get(key))

    async def adelete(self, key: str) -> bool:
        """Async :meth:`delete`."""
        result: bool = await self._arun(self._delete(key))
        return result

    async def aitems(self) -> dict[str, Note]:
        """Async :meth:`items`."""
        result: dict[str, Note] = await self._arun(self._items())
        return result

    async def amerge(self, policy: MergePolicy = "child") -> MergeReport:
        """Async :meth:`merge`."""
        report: MergeReport = await self._arun(self._merge(policy))
        return report

    async def arender(self, max_tokens: int | None = None) -> str:
        """Async :meth:`render`."""
        check_optional_int(max_tokens, "max_tokens")
        return self._render(await self.aitems(), max_tokens)

    # -- helpers -----------------------------------------------------------------------------------

    def _render(self, notes: dict[str, Note], max_tokens: int | None) -> str:
        if max_tokens is None:
            max_tokens = self._memory.working_tokens
        if not notes:
            return ""
        ordered = sorted(notes.values(), key=lambda n: (-n.importance, -n.updated_at, n.key))
        lines = [f"- {n.key}: {_text(n.value)}" for n in ordered]
        counts = self._memory.hooks.count_tokens_sync(lines, self._memory.model)
        out: list[str] = []
        used = 0
        for line, n in zip(lines, counts, strict=True):
            if used + n > max_tokens:
                break
            out.append(line)
            used += n
        return "\n".join(out)

    def _run(self, plan: Plan[T]) -> T:
        return drive_sync(plan, self._memory.store, self._memory.hooks)

    async def _arun(self, plan: Plan[T]) -> T:
        return await drive_async(plan, self._memory.store, self._memory.hooks)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _note(path: str, fact: Fact) -> Note:
    return Note(
        fact.key,
        _envelope(fact).get("v"),
        fact.importance,
        fact.version,
        fact.updated_at,
        fact.expires_at,
        path,
    )
