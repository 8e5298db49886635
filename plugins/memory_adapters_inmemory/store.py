"""``InMemoryStore``: the store contract over Python dicts and lists, behind one lock.

Messages are kept as the same JSON text the other stores keep, so what is read back is a
fresh copy, exactly what was written. The tail within a token budget is a binary search on
the running token totals.

Keyword search finds a scope's facts holding a term through an inverted index per scope
(term -> keys) and counts the scope's statistics; the core scores them
(:mod:`memory_adapters.ranking`). Semantic search compares the query with every vector of
the scope (exact, linear in the scope's facts; numpy when installed).
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

from memory_adapters.embedders import Embedding
from memory_adapters.errors import AppendConflict, VersionConflict
from memory_adapters.exact_vectors import Candidate, order, pack, screen
from memory_adapters.facts import Fact, FactFilter, index_text
from memory_adapters.messages import AppendResult, Entry, Record, Summary
from memory_adapters.operations import (
    DEFAULT_HISTORY_LIMIT,
    ConversationInfo,
    EraseReport,
    FactChange,
    Writer,
    before_ok,
    in_working_tree,
    user_keys,
    working_namespace_of,
)
from memory_adapters.ranking import TermHit, TermMatches
from memory_adapters.store import Store, store_closed
from memory_adapters.validation import dumps


@dataclass(slots=True)
class _Row:
    seq: int
    batch: int
    start_tokens: int
    tokens: int
    data: str
    run_id: str | None
    created_at: float

    def row(self) -> tuple[int, str, int, int, str | None, float]:
        return (self.seq, self.data, self.tokens, self.batch, self.run_id, self.created_at)


@dataclass(slots=True)
class _Conversation:
    rows: list[_Row] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    total_tokens: int = 0
    batches: dict[str, tuple[int, int]] = field(default_factory=dict)
    summaries: list[Summary] = field(default_factory=list)
    claim: tuple[str, int, float] | None = None
    """The summary claim: owner, end seq, lease end (see ``Store.claim_summary``)."""
    created_at: float = 0.0
    last_activity: float = 0.0


@dataclass(slots=True)
class _FactRow:
    data: str
    words: dict[str, int]
    version: int
    importance: float
    created_at: float
    updated_at: float
    expires_at: float | None
    metadata: str | None = None
    length: int = 0
    embed_model: str | None = None
    dims: int = 0
    vectors: list[bytes] = field(default_factory=list)

    def embed(self, embedding: Embedding | None) -> None:
        self.embed_model = None if embedding is None else embedding.model
        self.dims = 0 if embedding is None else embedding.dims
        self.vectors = [] if embedding is None else [pack(v) for v in embedding.vectors.values()]

    def live(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now

    def fact(self, key: str, score: float | None = None) -> Fact:
        return Fact.from_row(
            key,
            self.data,
            self.version,
            self.importance,
            self.created_at,
            self.updated_at,
            self.expires_at,
            score,
            self.metadata,
        )

    def passes(self, where: FactFilter | None) -> bool:
        if where is None:
            return True
        meta = None if self.metadata is None else json.loads(self.metadata)
        return where.passes(meta, self.updated_at)


@dataclass(frozen=True, slots=True)
class _Change:
    """A history row: the value as JSON text, so each read gets a fresh copy."""

    key: str
    version: int
    op: str
    data: str | None
    at: float
    writer: Writer

    @classmethod
    def of(cls, change: FactChange) -> _Change:
        return cls(change.key, change.version, change.op, change.data(), change.at, change.writer)

    def change(self) -> FactChange:
        value = None if self.data is None else json.loads(self.data)
        return FactChange(
            self.key,
            self.version,
            value,
            "forget" if self.op == "forget" else "put",
            self.at,
            self.writer,
        )


def _words(text: str) -> dict[str, int]:
    """A fact's terms (``text`` as the core gives it: space-separated) with their counts."""
    counts: dict[str, int] = {}
    for w in text.split():
        counts[w] = counts.get(w, 0) + 1
    return counts


class _ScopeFacts(dict[str, _FactRow]):
    """One scope's facts by key, with its inverted index (``postings``: term -> the keys of
    the facts holding it), kept as facts are set and deleted."""

    def __init__(self) -> None:
        super().__init__()
        self.postings: dict[str, set[str]] = {}

    def __setitem__(self, key: str, row: _FactRow) -> None:
        old = self.get(key)
        if old is not None:
            self._unindex(key, old)
        super().__setitem__(key, row)
        for term in row.words:
            self.postings.setdefault(term, set()).add(key)

    def __delitem__(self, key: str) -> None:
        self._unindex(key, self[key])
        super().__delitem__(key)

    def _unindex(self, key: str, row: _FactRow) -> None:
        for term in row.words:
            holders = self.postings.get(term)
            if holders is not None:
                holders.discard(key)
                if not holders:
                    del self.postings[term]


_NO_FACTS = _ScopeFacts()
"""What a read of a scope holding no facts sees (never written to)."""

_stores: weakref.WeakSet[InMemoryStore] = weakref.WeakSet()
"""Every store of the process, for :func:`_after_fork`."""


def _after_fork() -> None:
    """A child forked while another thread held a store's lock would wait for it forever:
    each lock is replaced by a new one (stores sharing one share the new one). The child's data
    is its own copy of the parent's."""
    new: dict[int, threading.RLock] = {}
    for store in list(_stores):
        store._lock = new.setdefault(id(store._lock), threading.RLock())


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_after_fork)


class InMemoryStore(Store):
    """A process-local store. Thread-safe; not shared between processes (a forked child has
    its own copy of the data).

    :meth:`share` gives another store over the same data, closed on its own (what each
    ``Memory`` opening one ``memory://name`` gets). A closed store raises
    :class:`~memory_adapters.errors.StoreUnavailable`, like every store.
    """

    scheme = "memory"
    blocking = False

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._conversations: dict[str, _Conversation] = {}
        self._facts: dict[tuple[str, str], _ScopeFacts] = {}
        self._history: dict[tuple[str, str, str], list[_Change]] = {}
        self._closed = False
        _stores.add(self)

    def share(self) -> InMemoryStore:
        """Another store over this one's data, closed independently of it."""
        other = InMemoryStore()
        other._lock, other._conversations, other._facts, other._history = (
            self._lock,
            self._conversations,
            self._facts,
            self._history,
        )
        return other

    def _scope(self, namespace: str, scope: str) -> _ScopeFacts:
        facts = self._facts.get((namespace, scope))
        if facts is None:
            facts = self._facts[(namespace, scope)] = _ScopeFacts()
        return facts

    def _check_open(self) -> None:
        if self._closed:
            raise store_closed(type(self).__name__)

    def close(self) -> None:
        self._closed = True

    # -- conversation log ----------------------------------------------------------------------

    def append(
        self,
        conversation: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        self._check_open()
        with self._lock:
            conv = self._conversations.setdefault(conversation, _Conversation())
            if idempotency_key is not None and idempotency_key in conv.batches:
                first, last = conv.batches[idempotency_key]
                return AppendResult(first, last, duplicate=True)
            last_seq = len(conv.rows)
            if expected_last_seq is not None and expected_last_seq != last_seq:
                raise AppendConflict(conversation, expected_last_seq, last_seq)
            now = time.time()
            first = last_seq + 1
            for i, e in enumerate(entries):
                conv.rows.append(
                    _Row(first + i, first, conv.total_tokens, e.tokens, e.data, run_id, now)
                )
                conv.starts.append(conv.total_tokens)
                conv.total_tokens += e.tokens
            result = AppendResult(first, first + len(entries) - 1)
            conv.created_at = conv.created_at or now
            conv.last_activity = now
            if idempotency_key is not None:
                conv.batches[idempotency_key] = (result.first_seq, result.last_seq)
            return result

    def tail(
        self, conversation: str, *, max_tokens: int | None = None, max_messages: int | None = None
    ) -> list[Record]:
        self._check_open()
        with self._lock:
            conv = self._conversations.get(conversation)
            if conv is None:
                return []
            start = 0
            if max_tokens is not None:
                start = bisect.bisect_left(conv.starts, conv.total_tokens - max_tokens)
            if max_messages is not None:
                start = max(start, len(conv.rows) - max_messages)
            rows = conv.rows[start:]
        return Record.from_rows(r.row() for r in rows)

    def read(
        self,
        conversation: str,
        *,
        start_seq: int = 1,
        end_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        self._check_open()
        with self._lock:
            conv = self._conversations.get(conversation)
            if conv is None:
                return []
            lo = max(start_seq, 1) - 1
            hi = len(conv.rows) if end_seq is None else min(end_seq, len(conv.rows))
            if limit is not None:
                hi = min(hi, lo + limit)
            rows = conv.rows[lo:hi]
        return Record.from_rows(r.row() for r in rows)

    def last_seq(self, conversation: str) -> int:
        self._check_open()
        with self._lock:
            conv = self._conversations.get(conversation)
            return 0 if conv is None else len(conv.rows)

    def delete_conversation(self, conversation: str) -> int:
        self._check_open()
        with self._lock:
            conv = self._conversations.pop(conversation, None)
            return 0 if conv is None else len(conv.rows)

    def put_summary(self, conversation: str, summary: Summary) -> None:
        self._check_open()
        with self._lock:
            conv = self._conversations.setdefault(conversation, _Conversation())
            conv.summaries.append(summary)
            if conv.claim is not None and conv.claim[1] <= summary.end_seq:
                conv.claim = None

    def claim_summary(
        self, conversation: str, end_seq: int, owner: str, *, lease_seconds: float
    ) -> bool:
        self._check_open()
        now = time.time()
        with self._lock:
            conv = self._conversations.setdefault(conversation, _Conversation())
            if any(s.end_seq >= end_seq for s in conv.summaries):
                return False
            if conv.claim is not None and conv.claim[0] != owner and conv.claim[2] > now:
                return False
            conv.claim = (owner, end_seq, now + lease_seconds)
            return True

    def latest_summary(self, conversation: str) -> Summary | None:
        self._check_open()
        with self._lock:
            conv = self._conversations.get(conversation)
            if conv is None or not conv.summaries:
                return None
            return max(conv.summaries, key=lambda s: s.end_seq)

    # -- facts -------------------------------------------------------------------------------------

    def put_fact(
        self,
        namespace: str,
        scope: str,
        key: str,
        data: str,
        *,
        text: str,
        importance: float = 0.0,
        expires_at: float | None = None,
        expected_version: int | None = None,
        embedding: Embedding | None = None,
        writer: Writer | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        metadata: str | None = None,
    ) -> Fact:
        self._check_open()
        now = time.time()
        with self._lock:
            facts = self._scope(namespace, scope)
            row = facts.get(key)
            if row is not None and not row.live(now):
                row = None
            current = 0 if row is None else row.version
            if expected_version is not None and expected_version != current:
                raise VersionConflict(key, expected_version, current)
            words = _words(text)
            new = _FactRow(
                data,
                words,
                current + 1,
                importance,
                now if row is None else row.created_at,
                now,
                expires_at,
                metadata,
                sum(words.values()),
            )
            new.embed(embedding)
            facts[key] = new
            if writer is not None:
                change = _Change(key, new.version, "put", data, now, writer)
                self._record(namespace, scope, key, change, history_limit)
            return new.fact(key)

    def _record(self, namespace: str, scope: str, key: str, change: _Change, limit: int) -> None:
        changes = self._history.setdefault((namespace, scope, key), [])
        changes.append(change)
        del changes[: max(0, len(changes) - limit)]
        if not changes:
            del self._history[(namespace, scope, key)]

    def get_fact(self, namespace: str, scope: str, key: str) -> Fact | None:
        self._check_open()
        now = time.time()
        with self._lock:
            row = self._facts.get((namespace, scope), _NO_FACTS).get(key)
            return row.fact(key) if row is not None and row.live(now) else None

    def list_facts(self, namespace: str, scope: str, *, limit: int | None = None) -> list[Fact]:
        self._check_open()
        now = time.time()
        with self._lock:
            rows = sorted(self._facts.get((namespace, scope), _NO_FACTS).items())
            out = [row.fact(key) for key, row in rows if row.live(now)]
        return out if limit is None else out[:limit]

    def delete_fact(
        self,
        namespace: str,
        scope: str,
        key: str,
        *,
        expected_version: int | None = None,
        writer: Writer | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
    ) -> bool:
        self._check_open()
        now = time.time()
        with self._lock:
            facts = self._facts.get((namespace, scope), _NO_FACTS)
            row = facts.get(key)
            live = row is not None and row.live(now)
            if expected_version is not None:
                current = row.version if row is not None and live else 0
                if current != expected_version:
                    raise VersionConflict(key, expected_version, current)
            if row is None:
                return False
            del facts[key]
            if live and writer is not None:
                change = _Change(key, row.version, "forget", None, now, writer)
                self._record(namespace, scope, key, change, history_limit)
            return live

    def match_terms(
        self,
        namespace: str,
        scope: str,
        terms: Sequence[str],
        *,
        where: FactFilter | None = None,
    ) -> TermMatches:
        self._check_open()
        now = time.time()
        with self._lock:
            facts = self._facts.get((namespace, scope))
            if facts is None:
                return TermMatches(0, 0, [])
            documents = total = 0
            for row in facts.values():
                if row.live(now):
                    documents += 1
                    total += row.length
            keys: set[str] = set()
            for term in terms:
                keys |= facts.postings.get(term, set())
            hits = []
            for key in sorted(keys):
                row = facts[key]
                if row.live(now) and row.passes(where):
                    counts = tuple(row.words.get(t, 0) for t in terms)
                    hits.append(TermHit(key, row.length, counts, row.importance, row.updated_at))
        return TermMatches(documents, total, hits)

    def get_facts(self, namespace: str, scope: str, keys: Sequence[str]) -> list[Fact]:
        self._check_open()
        now = time.time()
        with self._lock:
            facts = self._facts.get((namespace, scope), _NO_FACTS)
            rows = ((k, facts.get(k)) for k in keys)
            return [row.fact(k) for k, row in rows if row is not None and row.live(now)]

    def search_fact_vectors(
        self,
        namespace: str,
        scope: str,
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
        keys: Sequence[str] | None = None,
        where: FactFilter | None = None,
    ) -> list[Fact]:
        self._check_open()
        now = time.time()
        query = [float(x) for x in vector]
        with self._lock:
            facts = self._facts.get((namespace, scope), _NO_FACTS)
            if keys is None:
                chosen: Iterable[tuple[str, _FactRow]] = facts.items()
            else:
                chosen = ((k, facts[k]) for k in dict.fromkeys(keys) if k in facts)
            live = [
                (key, row)
                for key, row in chosen
                if row.embed_model == model
                and row.dims == len(query)
                and row.live(now)
                and row.passes(where)
            ]
        rows = [(i, blob) for i, (_, row) in enumerate(live) for blob in row.vectors]
        kept = screen(query, rows, limit)
        ids = list(kept)
        candidates = [
            Candidate(live[i][1].importance, live[i][1].updated_at, live[i][0], kept[i])
            for i in ids
        ]
        return [
            live[ids[at]][1].fact(live[ids[at]][0], score)
            for at, score in order(query, candidates, limit)
        ]

    def facts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> list[Fact]:
        self._check_open()
        now = time.time()
        with self._lock:
            facts = self._facts.get((namespace, scope), _NO_FACTS)
            stale = sorted(
                key
                for key, row in facts.items()
                if row.embed_model != model and row.live(now)  # filtered, then sorted
            )[:limit]
            return [facts[key].fact(key) for key in stale]

    def set_fact_embedding(
        self, namespace: str, scope: str, key: str, version: int, embedding: Embedding
    ) -> bool:
        self._check_open()
        now = time.time()
        with self._lock:
            row = self._facts.get((namespace, scope), _NO_FACTS).get(key)
            if row is None or not row.live(now) or row.version != version:
                return False
            row.embed(embedding)
            return True

    def refresh_fact(self, namespace: str, scope: str, key: str, version: int, ttl: float) -> bool:
        self._check_open()
        now = time.time()
        with self._lock:
            row = self._facts.get((namespace, scope), _NO_FACTS).get(key)
            if row is None or not row.live(now) or row.version != version:
                return False
            row.version += 1
            row.updated_at = now
            row.expires_at = now + ttl
            return True

    def list_fact_scopes(
        self, namespace: str, prefix: str, *, limit: int | None = None
    ) -> list[str]:
        self._check_open()
        now = time.time()
        with self._lock:
            found = sorted(
                scope
                for (ns, scope), facts in self._facts.items()
                if ns == namespace
                and scope.startswith(prefix)
                and any(row.live(now) for row in facts.values())
            )
        return found if limit is None else found[:limit]

    def prune(self) -> int:
        self._check_open()
        now = time.time()
        removed = 0
        with self._lock:
            for facts in self._facts.values():
                dead = [k for k, row in facts.items() if not row.live(now)]
                for k in dead:
                    del facts[k]
                removed += len(dead)
        return removed

    # -- operations --------------------------------------------------------------------------

    def list_conversations(
        self, prefix: str, *, limit: int = 100, before: tuple[float, str] | None = None
    ) -> list[ConversationInfo]:
        self._check_open()
        with self._lock:
            found = [
                (conv.last_activity, key, conv)
                for key, conv in self._conversations.items()
                if key.startswith(prefix)
                and conv.rows
                and before_ok(before, conv.last_activity, key)
            ]
            found.sort(key=lambda t: (t[0], t[1]), reverse=True)
            return [
                ConversationInfo.of(
                    key, len(conv.rows), conv.total_tokens, conv.last_activity, conv.created_at
                )
                for _, key, conv in found[:limit]
            ]

    def _drop_conversation(self, key: str, counts: dict[str, int]) -> None:
        conv = self._conversations.pop(key)
        counts["conversations"] += 1
        counts["messages"] += len(conv.rows)
        counts["summaries"] += len(conv.summaries)

    def _drop_facts(
        self, namespace: str, owns: Callable[[str], bool], counts: dict[str, int]
    ) -> None:
        """Delete the facts (and their vectors and history) of every scope of ``namespace``
        that ``owns``."""
        working = namespace.endswith("#working")
        for ns, scope in [k for k in self._facts if k[0] == namespace and owns(k[1])]:
            facts = self._facts.pop((ns, scope))
            counts["working" if working else "facts"] += len(facts)
            counts["vectors"] += sum(len(row.vectors) for row in facts.values())
        for hkey in [k for k in self._history if k[0] == namespace and owns(k[1])]:
            counts["history"] += len(self._history.pop(hkey))

    def erase(self, namespace: str, user_id: str) -> EraseReport:
        self._check_open()
        keys = user_keys(namespace, user_id)
        counts = dict.fromkeys(EraseReport.__slots__, 0)
        with self._lock:
            for key in [k for k in self._conversations if keys.owns_conversation(k)]:
                self._drop_conversation(key, counts)
            self._drop_facts(namespace, keys.owns_fact_scope, counts)
            self._drop_facts(keys.working_namespace, keys.owns_conversation, counts)
        return EraseReport(**counts)

    def delete_idle_conversations(self, namespace_prefix: str, idle_before: float) -> int:
        self._check_open()
        counts = dict.fromkeys(EraseReport.__slots__, 0)
        with self._lock:
            idle = [
                key
                for key, conv in self._conversations.items()
                if key.startswith(namespace_prefix) and conv.last_activity < idle_before
            ]
            for key in idle:
                self._drop_conversation(key, counts)
                self._drop_facts(working_namespace_of(key), partial(in_working_tree, key), counts)
        return len(idle)

    def fact_history(
        self, namespace: str, scope: str, key: str, *, limit: int | None = None
    ) -> list[FactChange]:
        self._check_open()
        with self._lock:
            changes = list(reversed(self._history.get((namespace, scope, key), [])))
        return [c.change() for c in (changes if limit is None else changes[:limit])]

    def restore_fact(
        self,
        namespace: str,
        scope: str,
        fact: Fact,
        *,
        history: Sequence[FactChange] = (),
        embedding: Embedding | None = None,
    ) -> bool:
        self._check_open()
        data = dumps(fact.value)
        now = time.time()
        with self._lock:
            facts = self._scope(namespace, scope)
            row = facts.get(fact.key)
            if row is not None and row.live(now) and row.version >= fact.version:
                return False
            words = _words(index_text(fact.key, fact.value))
            new = _FactRow(
                data,
                words,
                fact.version,
                fact.importance,
                fact.created_at,
                fact.updated_at,
                fact.expires_at,
                None if fact.metadata is None else dumps(fact.metadata),
                sum(words.values()),
            )
            new.embed(embedding)
            facts[fact.key] = new
            hkey = (namespace, scope, fact.key)
            self._history.pop(hkey, None)
            if history:
                self._history[hkey] = [_Change.of(c) for c in reversed(history)]  # newest first
            return True
