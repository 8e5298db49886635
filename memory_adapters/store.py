"""The store contract: what every backend implements, sync and async.

A store keeps three things, all keyed by strings the core has already validated
(:mod:`memory_adapters.validation`):

* **the conversation log** — per conversation key, records with a gapless ``seq`` from 1,
  appended in batches (one batch is one turn, contiguous, never interleaved with another
  writer's), each with its token count and the running total before it, so that the tail
  within a token budget is one index range read;
* **summaries** of evicted ranges, each stored with the seq range it covers;
* **facts** — (namespace, scope, key) → JSON text with a version, importance, optional
  expiry, metadata (kept, never searched, used by filters), and the terms keyword search finds
  it by. The store finds candidates and counts statistics (:meth:`Store.match_terms`);
  :mod:`memory_adapters.ranking` scores them, so every store ranks alike. Working memory
  is kept as facts too (:mod:`.working`).
  Optionally (:meth:`Store.list_fact_scopes`), the scopes that hold facts, by prefix.
* **fact history** (optional, :meth:`Store.fact_history`) — each put and forget of a fact,
  with its writer, written with the change itself.
* **operations** (optional): list conversations by key prefix, erase one user, delete idle
  conversations, restore a fact as exported (:mod:`memory_adapters.operations`).
* **fact embeddings** for semantic recall — each fact's vectors (:class:`~.embedders.Embedding`:
  a model name, dimensions and one unit vector per indexed field), written with the fact,
  searched by cosine similarity within one scope (:meth:`Store.search_fact_vectors`).

Subclass :class:`Store` and implement the sync methods; the async twins (``a`` + name)
default to running the sync method in a worker thread. A store with a native async driver
overrides them. ``memory_adapters.testing.StoreConformance`` is the test suite every store
must pass.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .embedders import Embedding
from .errors import StoreClosed, Unsupported
from .facts import Fact, FactFilter
from .messages import AppendResult, Entry, Record, Summary
from .operations import DEFAULT_HISTORY_LIMIT, ConversationInfo, EraseReport, FactChange, Writer
from .ranking import TermMatches

if TYPE_CHECKING:
    from .steps import StoreCall

T = TypeVar("T")

_MAX_CODE_POINT = 0x10FFFF


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with ``prefix``, in code
    point order (which is also UTF-8 byte order), or ``None`` when there is none (an empty
    prefix, or one made only of U+10FFFF).

    With it a store turns a prefix match into an index range,
    ``prefix <= scope < prefix_upper_bound(prefix)``: exact, with no pattern syntax (no
    ``LIKE`` wildcards) anywhere, so a ``%``, ``_`` or ``\\`` in the prefix is literal.
    """
    head = prefix.rstrip(chr(_MAX_CODE_POINT))
    if not head:
        return None
    nxt = ord(head[-1]) + 1
    if 0xD800 <= nxt <= 0xDFFF:  # surrogates are not characters: skip over them
        nxt = 0xE000
    return head[:-1] + chr(nxt)


@dataclass(frozen=True, slots=True)
class RunSteps:
    """A run's steps as :meth:`Store.batch` may receive them: keyed, unconditional appends of
    one run to one conversation, with distinct keys (``batches[k]`` keyed ``keys[k]``). A store
    that can append them in one statement or transaction does (:func:`run_steps`)."""

    conversation: str
    batches: list[list[Entry]]
    keys: list[str]
    run_id: str | None


_APPEND_OPTIONS = frozenset(("run_id", "expected_last_seq", "idempotency_key"))


def run_steps(calls: Sequence[StoreCall]) -> RunSteps | None:
    """``calls`` as :class:`RunSteps` when they are two or more such appends, else ``None``:
    appended together, they must answer and store what they would one after the other (the
    conformance suite checks it)."""
    if len(calls) < 2:
        return None
    first = calls[0]
    if len(first.args) != 2 or not isinstance(first.args[0], str):
        return None
    conversation: str = first.args[0]
    run_id = first.kwargs.get("run_id")
    keys: list[str] = []
    for c in calls:
        kw = c.kwargs
        key = kw.get("idempotency_key")
        if (
            c.method != "append"
            or len(c.args) != 2
            or c.args[0] != conversation
            or not c.args[1]
            or not _APPEND_OPTIONS.issuperset(kw)
            or kw.get("expected_last_seq") is not None
            or kw.get("run_id") != run_id
            or not isinstance(key, str)
        ):
            return None
        keys.append(key)
    if len(set(keys)) != len(keys):
        return None
    return RunSteps(conversation, [list(c.args[1]) for c in calls], keys, run_id)


def store_closed(name: str) -> StoreClosed:
    """The error every store raises when it is used after :meth:`Store.close` (``name``: the
    store's class name)."""
    return StoreClosed(
        f"this {name} is closed (Memory.close(), or the end of a `with Memory(...)` block, "
        "closes its store): open a new Memory to go on"
    )


_renewed: weakref.WeakSet[Store] = weakref.WeakSet()


def renew_after_fork(store: Store) -> None:
    """Have :meth:`Store.after_fork` called on ``store`` in every child process forked from
    this one from now on, while ``store`` lives: what a store holding connections calls when
    it opens (a child must not use its parent's connections)."""
    _renewed.add(store)


def _after_fork() -> None:
    for store in list(_renewed):
        store.after_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_after_fork)


class Store(ABC):
    """Base class of every store. Methods are thread-safe; arguments are pre-validated."""

    scheme: str = ""
    """The URL scheme this store serves (informational)."""

    blocking: bool = True
    """Whether the sync methods block on I/O. The default async twins run blocking methods in
    a worker thread, and call non-blocking ones (an in-memory store) directly."""

    async def _offload(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        if self.blocking:
            return await asyncio.to_thread(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    # -- conversation log ----------------------------------------------------------------------

    @abstractmethod
    def append(
        self,
        conversation: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Append ``entries`` as one contiguous batch, atomically.

        Seqs continue the conversation without gaps; the batch never interleaves with
        another writer's. With ``expected_last_seq``, raise
        :class:`~memory_adapters.errors.AppendConflict` (writing nothing) unless the
        conversation ends at that seq (0 = empty). With ``idempotency_key``, a key already used
        in this conversation writes nothing and returns the original batch's seqs with
        ``duplicate=True``. Raise :class:`~memory_adapters.errors.StoreUnavailable` when the
        backend cannot be reached.
        """

    @abstractmethod
    def tail(
        self, conversation: str, *, max_tokens: int | None = None, max_messages: int | None = None
    ) -> list[Record]:
        """The newest records, in seq order, whose tokens add up to at most ``max_tokens``
        and that number at most ``max_messages`` (either limit may be ``None``, not both).

        Must cost what the result costs, not what the conversation costs: an index range
        read using the stored running token totals.
        """

    def head_and_tail(
        self,
        conversation: str,
        *,
        head: int,
        max_tokens: int | None = None,
        max_messages: int | None = None,
    ) -> tuple[list[Record], list[Record]]:
        """The first ``head`` records and :meth:`tail`, for a window with pinned messages.

        The default makes two calls; a store with round trips to save answers in one.
        """
        return (
            self.read(conversation, limit=head),
            self.tail(conversation, max_tokens=max_tokens, max_messages=max_messages),
        )

    @abstractmethod
    def read(
        self,
        conversation: str,
        *,
        start_seq: int = 1,
        end_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Records with ``start_seq <= seq <= end_seq``, in seq order, at most ``limit``."""

    @abstractmethod
    def last_seq(self, conversation: str) -> int:
        """The seq of the newest record, 0 for an empty or unknown conversation."""

    @abstractmethod
    def delete_conversation(self, conversation: str) -> int:
        """Delete a conversation's records and summaries; return how many records went."""

    @abstractmethod
    def put_summary(self, conversation: str, summary: Summary) -> None:
        """Store a summary of the range ``summary.start_seq``..``summary.end_seq``."""

    @abstractmethod
    def latest_summary(self, conversation: str) -> Summary | None:
        """The stored summary with the highest ``end_seq``, if any."""

    def claim_summary(
        self, conversation: str, end_seq: int, owner: str, *, lease_seconds: float
    ) -> bool:
        """Claim the summary of ``conversation`` up to ``end_seq`` for ``owner`` (a process's
        id), for ``lease_seconds``: ``True`` when the caller should compute it. ``False``
        when a stored summary reaches ``end_seq`` already, or another owner holds an unexpired
        claim on the conversation (one summary is under way per conversation, across
        processes). The same owner claiming again renews its claim. A claim ends when its
        lease does, or when :meth:`put_summary` stores a summary reaching its ``end_seq``; it
        is never returned by :meth:`latest_summary`, and goes with the conversation. Atomic:
        of owners claiming at once, one gets ``True``. Optional: the default raises
        :class:`~memory_adapters.errors.Unsupported` (a background summarizer then
        summarizes without claiming: fine for one process)."""
        raise Unsupported(f"{type(self).__name__} cannot claim summaries")

    # -- facts -----------------------------------------------------------------------------

    @abstractmethod
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
        """Create or replace a fact; ``data`` is its value as JSON text; ``text`` the terms
        keyword search finds it by (:func:`memory_adapters.ranking.index_terms`, separated by
        single spaces, in order, repeats kept: :meth:`match_terms` counts them);
        ``embedding`` its vectors (``None``: none; any vectors the fact had before are dropped
        with the text they were made from); ``metadata`` a JSON object as text, stored and
        returned with the fact (:attr:`Fact.metadata`), never searched, used by ``where``
        filters (``None``: none; the core passes it only when there is some).

        The version starts at 1 and grows by one per write. With ``expected_version``, write
        only if the current version is that number (0 = the fact must not exist), else raise
        :class:`~memory_adapters.errors.VersionConflict`. An expired fact counts as absent.

        With ``writer`` (a store that keeps history, :meth:`fact_history`), also record the
        change as a version of the fact's history, in the same transaction (statement, on
        PostgreSQL), and keep only the newest ``history_limit`` versions of the fact. The core
        passes ``writer`` and ``history_limit`` only to stores that implement
        :meth:`fact_history`, and only when history is on.
        """

    @abstractmethod
    def get_fact(self, namespace: str, scope: str, key: str) -> Fact | None:
        """The fact, or ``None`` if absent or expired."""

    @abstractmethod
    def list_facts(self, namespace: str, scope: str, *, limit: int | None = None) -> list[Fact]:
        """Unexpired facts of a scope, ordered by key, at most ``limit``."""

    @abstractmethod
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
        """Delete a fact; ``False`` if there was none. With ``expected_version``, raise
        :class:`~memory_adapters.errors.VersionConflict` unless it matches. With ``writer``,
        record the forget in the fact's history as :meth:`put_fact` does (only when a live
        fact was deleted)."""

    @abstractmethod
    def match_terms(
        self,
        namespace: str,
        scope: str,
        terms: Sequence[str],
        *,
        where: FactFilter | None = None,
    ) -> TermMatches:
        """What keyword search needs to score a scope's facts (:mod:`memory_adapters.ranking`
        scores them; a store never ranks):

        * ``documents`` and ``total_length``: how many unexpired facts the scope holds and the
          sum of their lengths (a fact's length is the number of terms of the ``text`` it was
          put with), whatever ``where`` says;
        * ``hits``: every unexpired fact of the scope that holds at least one of ``terms``
          (distinct terms in :mod:`~memory_adapters.ranking` form) and passes ``where``, with
          its key, length, the count of each of ``terms`` in its text (in the order of
          ``terms``), importance and ``updated_at``; in any order.

        Find the hits through an index (never by reading every fact of the scope), and count
        only the scope's own facts: nothing of another namespace or scope may change the
        answer.
        """

    def get_facts(self, namespace: str, scope: str, keys: Sequence[str]) -> list[Fact]:
        """The unexpired facts of a scope stored under ``keys``, in the order of ``keys``,
        leaving out those absent. The default calls :meth:`get_fact` for each; a store with
        round trips to save reads them at once."""
        found = (self.get_fact(namespace, scope, k) for k in keys)
        return [f for f in found if f is not None]

    def list_fact_scopes(
        self, namespace: str, prefix: str, *, limit: int | None = None
    ) -> list[str]:
        """The distinct scopes of ``namespace`` that hold at least one unexpired fact and
        whose scope string starts with ``prefix`` (``""``: all of them), sorted in code point
        order, at most ``limit``.

        The match is an exact string prefix: no character of ``prefix`` is a pattern (``%``,
        ``_``, ``\\``, ``*``, ``.``, ``^`` ... are themselves). Optional: the default raises
        :class:`~memory_adapters.errors.Unsupported`; the built-in stores implement it with an
        index range (see :func:`prefix_upper_bound`). Adapters that map a framework's
        hierarchical namespaces onto scopes (the LangGraph ``BaseStore``) need it.
        """
        raise Unsupported(
            f"{type(self).__name__} cannot list fact scopes (it does not implement "
            "Store.list_fact_scopes)"
        )

    # -- fact embeddings (semantic recall) ---------------------------------------------------

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
        """Unexpired facts of a scope embedded by ``model`` with vectors of ``len(vector)``
        dimensions, by cosine similarity to ``vector`` (a unit vector), best first, at most
        ``limit``; ``Fact.score`` is the similarity of the fact's best-matching vector (a fact
        with several fields scores its best one). Ties: higher importance, then newer, then
        key order. Facts without vectors of ``model`` are not candidates; with ``keys``, only
        the facts stored under those keys are; with ``where``, only those that pass it
        (filtered before the ``limit`` best are chosen, never after).

        Optional: the default raises :class:`~memory_adapters.errors.Unsupported` (searches
        then fall back to keywords, with a warning). The built-in stores compare against
        every vector of the scope (exact, linear in the scope's facts), except PostgreSQL with
        pgvector, which uses its index.
        """
        raise Unsupported(f"{type(self).__name__} cannot search by meaning")

    def facts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> list[Fact]:
        """Unexpired facts of a scope that have no embedding by ``model`` (none at all, or
        one by another model), ordered by key, at most ``limit``: what a semantic search must
        embed before it can compare. A fact put with an embedding of ``model`` that has no
        vectors (deliberately unindexed) is not returned. Optional, like
        :meth:`search_fact_vectors`."""
        raise Unsupported(f"{type(self).__name__} cannot search by meaning")

    def set_fact_embedding(
        self, namespace: str, scope: str, key: str, version: int, embedding: Embedding
    ) -> bool:
        """Replace the embedding of a fact if it still has ``version`` (neither its version
        nor its times change); ``False``, writing nothing, when it is gone, expired or was
        written since. Optional, like :meth:`search_fact_vectors`."""
        raise Unsupported(f"{type(self).__name__} cannot search by meaning")

    def refresh_fact(self, namespace: str, scope: str, key: str, version: int, ttl: float) -> bool:
        """Extend a fact that is live and still at ``version`` by ``ttl`` seconds, as a write
        of the same value: ``updated_at`` becomes now and ``expires_at`` now + ``ttl`` (the
        same now: ``expires_at - updated_at`` is ``ttl``); its version grows by one; its
        value, importance, metadata, ``created_at``, terms, embedding and vectors stay as they
        are, and no history is recorded (the value did not change). ``False``, writing
        nothing, when it is gone, expired or was written since. What a TTL refresh on read
        needs (the LangGraph ``BaseStore``): a ``put_fact`` of the same value would drop the
        vectors. Optional: the default raises :class:`~memory_adapters.errors.Unsupported`
        (the caller then writes the fact again, without vectors)."""
        raise Unsupported(f"{type(self).__name__} cannot refresh a fact's expiry")

    @abstractmethod
    def prune(self) -> int:
        """Delete expired facts now, with their vectors; return how many. Reads filter them
        out regardless. Their history stays (it is removed by :meth:`erase`)."""

    # -- operations (optional: the defaults raise Unsupported) --------------------------------

    def list_conversations(
        self, prefix: str, *, limit: int = 100, before: tuple[float, str] | None = None
    ) -> list[ConversationInfo]:
        """The conversations whose key starts with ``prefix`` (an exact string prefix:
        ``"<ns>:"`` for a namespace, ``"<ns>:<user>:"`` for a user, ``""`` for all), newest
        activity first (then key, descending), at most ``limit``; with ``before`` (the
        :attr:`~memory_adapters.operations.ConversationInfo.cursor` of the previous page's
        last item), only those after it in that order. Conversations with no messages are not
        listed. Optional: the default raises :class:`~memory_adapters.errors.Unsupported`."""
        raise Unsupported(f"{type(self).__name__} cannot list conversations")

    def erase(self, namespace: str, user_id: str) -> EraseReport:
        """Delete everything of one user in one namespace (see
        :func:`~memory_adapters.operations.user_keys` for where that is): their
        conversations with messages, idempotency batches and summaries; their facts, the
        facts' vectors and history; the working memory of their conversations, forks
        included. Nothing of another user goes, even one whose id starts with this one's.
        Optional: the default raises :class:`~memory_adapters.errors.Unsupported`."""
        raise Unsupported(f"{type(self).__name__} cannot erase a user")

    def delete_idle_conversations(self, namespace_prefix: str, idle_before: float) -> int:
        """Delete the conversations whose key starts with ``namespace_prefix`` and whose last
        append was before ``idle_before`` (epoch seconds), with their messages, batches,
        summaries and working memory (forks included); return how many conversations went.
        Optional: the default raises :class:`~memory_adapters.errors.Unsupported`."""
        raise Unsupported(f"{type(self).__name__} cannot apply retention to conversations")

    def fact_history(
        self, namespace: str, scope: str, key: str, *, limit: int | None = None
    ) -> list[FactChange]:
        """The recorded changes of a fact, newest first, at most ``limit`` (kept even after
        the fact is forgotten or expires). Optional: the default raises
        :class:`~memory_adapters.errors.Unsupported` (and the core then records no history
        on this store)."""
        raise Unsupported(f"{type(self).__name__} keeps no fact history")

    def restore_fact(
        self,
        namespace: str,
        scope: str,
        fact: Fact,
        *,
        history: Sequence[FactChange] = (),
        embedding: Embedding | None = None,
    ) -> bool:
        """Write ``fact`` exactly as given (key, value, version, importance, created_at,
        updated_at, expires_at), with its ``embedding`` and, on a store that keeps history,
        ``history`` as the fact's history (replacing what the store had for it): what an
        import does. Idempotent: if the store holds the key, unexpired, at a version ``>=``
        ``fact.version``, nothing changes and the answer is ``False``. Optional: the default
        raises :class:`~memory_adapters.errors.Unsupported`."""
        raise Unsupported(f"{type(self).__name__} cannot restore facts")

    def batch(self, calls: Sequence[StoreCall]) -> list[Any]:
        """Make ``calls`` (store methods by name, with their arguments; none depends on another's
        result) and return their results in order. The core batches the reads a run starts
        with (its window and its working memory). The default makes them one after the other;
        a store with round trips to save sends them at once (PostgreSQL: one pipeline)."""
        return [getattr(self, c.method)(*c.args, **c.kwargs) for c in calls]

    def close(self) -> None:  # noqa: B027 - optional, most stores have something to release
        """Release connections. Afterwards every method raises
        :class:`~memory_adapters.errors.StoreUnavailable` (:func:`store_closed`); closing
        again does nothing."""

    def after_fork(self) -> None:  # noqa: B027 - optional, for stores holding connections
        """In a child process just forked from the one that opened the store (a store that
        called :func:`renew_after_fork`): set aside the connections and locks inherited from
        the parent, which the child must not use, so that the child's calls open their own.
        Closing one must not touch what the parent still does with it. Does nothing by
        default."""

    # -- async twins -----------------------------------------------------------------------

    async def abatch(self, calls: Sequence[StoreCall]) -> list[Any]:
        """Async :meth:`batch`: the async twins one after the other, by default."""
        return [await getattr(self, "a" + c.method)(*c.args, **c.kwargs) for c in calls]

    async def aappend(
        self,
        conversation: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Async :meth:`append`."""
        return await self._offload(
            self.append,
            conversation,
            entries,
            run_id=run_id,
            expected_last_seq=expected_last_seq,
            idempotency_key=idempotency_key,
        )

    async def atail(
        self, conversation: str, *, max_tokens: int | None = None, max_messages: int | None = None
    ) -> list[Record]:
        """Async :meth:`tail`."""
        return await self._offload(
            self.tail, conversation, max_tokens=max_tokens, max_messages=max_messages
        )

    async def ahead_and_tail(
        self,
        conversation: str,
        *,
        head: int,
        max_tokens: int | None = None,
        max_messages: int | None = None,
    ) -> tuple[list[Record], list[Record]]:
        """Async :meth:`head_and_tail`."""
        return await self._offload(
            self.head_and_tail,
            conversation,
            head=head,
            max_tokens=max_tokens,
            max_messages=max_messages,
        )

    async def aread(
        self,
        conversation: str,
        *,
        start_seq: int = 1,
        end_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Async :meth:`read`."""
        return await self._offload(
            self.read, conversation, start_seq=start_seq, end_seq=end_seq, limit=limit
        )

    async def alast_seq(self, conversation: str) -> int:
        """Async :meth:`last_seq`."""
        return await self._offload(self.last_seq, conversation)

    async def adelete_conversation(self, conversation: str) -> int:
        """Async :meth:`delete_conversation`."""
        return await self._offload(self.delete_conversation, conversation)

    async def aput_summary(self, conversation: str, summary: Summary) -> None:
        """Async :meth:`put_summary`."""
        await self._offload(self.put_summary, conversation, summary)

    async def alatest_summary(self, conversation: str) -> Summary | None:
        """Async :meth:`latest_summary`."""
        return await self._offload(self.latest_summary, conversation)

    async def aclaim_summary(
        self, conversation: str, end_seq: int, owner: str, *, lease_seconds: float
    ) -> bool:
        """Async :meth:`claim_summary`."""
        return await self._offload(
            self.claim_summary, conversation, end_seq, owner, lease_seconds=lease_seconds
        )

    async def aput_fact(
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
        """Async :meth:`put_fact`."""
        extra: dict[str, Any] = {} if embedding is None else {"embedding": embedding}
        if writer is not None:  # stores without history never see these arguments
            extra.update(writer=writer, history_limit=history_limit)
        if metadata is not None:
            extra["metadata"] = metadata
        return await self._offload(
            self.put_fact,
            namespace,
            scope,
            key,
            data,
            text=text,
            importance=importance,
            expires_at=expires_at,
            expected_version=expected_version,
            **extra,
        )

    async def aget_fact(self, namespace: str, scope: str, key: str) -> Fact | None:
        """Async :meth:`get_fact`."""
        return await self._offload(self.get_fact, namespace, scope, key)

    async def alist_facts(
        self, namespace: str, scope: str, *, limit: int | None = None
    ) -> list[Fact]:
        """Async :meth:`list_facts`."""
        return await self._offload(self.list_facts, namespace, scope, limit=limit)

    async def adelete_fact(
        self,
        namespace: str,
        scope: str,
        key: str,
        *,
        expected_version: int | None = None,
        writer: Writer | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
    ) -> bool:
        """Async :meth:`delete_fact`."""
        extra: dict[str, Any] = {}
        if writer is not None:
            extra.update(writer=writer, history_limit=history_limit)
        return await self._offload(
            self.delete_fact, namespace, scope, key, expected_version=expected_version, **extra
        )

    async def amatch_terms(
        self,
        namespace: str,
        scope: str,
        terms: Sequence[str],
        *,
        where: FactFilter | None = None,
    ) -> TermMatches:
        """Async :meth:`match_terms`."""
        return await self._offload(self.match_terms, namespace, scope, terms, where=where)

    async def aget_facts(self, namespace: str, scope: str, keys: Sequence[str]) -> list[Fact]:
        """Async :meth:`get_facts`."""
        return await self._offload(self.get_facts, namespace, scope, keys)

    async def alist_fact_scopes(
        self, namespace: str, prefix: str, *, limit: int | None = None
    ) -> list[str]:
        """Async :meth:`list_fact_scopes`."""
        return await self._offload(self.list_fact_scopes, namespace, prefix, limit=limit)

    async def asearch_fact_vectors(
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
        """Async :meth:`search_fact_vectors`."""
        extra: dict[str, Any] = {}
        if keys is not None:  # stores written before these arguments never see them unused
            extra["keys"] = keys
        if where is not None:
            extra["where"] = where
        return await self._offload(
            self.search_fact_vectors, namespace, scope, vector, model=model, limit=limit, **extra
        )

    async def afacts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> list[Fact]:
        """Async :meth:`facts_to_embed`."""
        return await self._offload(self.facts_to_embed, namespace, scope, model, limit=limit)

    async def aset_fact_embedding(
        self, namespace: str, scope: str, key: str, version: int, embedding: Embedding
    ) -> bool:
        """Async :meth:`set_fact_embedding`."""
        return await self._offload(
            self.set_fact_embedding, namespace, scope, key, version, embedding
        )

    async def arefresh_fact(
        self, namespace: str, scope: str, key: str, version: int, ttl: float
    ) -> bool:
        """Async :meth:`refresh_fact`."""
        return await self._offload(self.refresh_fact, namespace, scope, key, version, ttl)

    async def aprune(self) -> int:
        """Async :meth:`prune`."""
        return await self._offload(self.prune)

    async def alist_conversations(
        self, prefix: str, *, limit: int = 100, before: tuple[float, str] | None = None
    ) -> list[ConversationInfo]:
        """Async :meth:`list_conversations`."""
        return await self._offload(self.list_conversations, prefix, limit=limit, before=before)

    async def aerase(self, namespace: str, user_id: str) -> EraseReport:
        """Async :meth:`erase`."""
        return await self._offload(self.erase, namespace, user_id)

    async def adelete_idle_conversations(self, namespace_prefix: str, idle_before: float) -> int:
        """Async :meth:`delete_idle_conversations`."""
        return await self._offload(self.delete_idle_conversations, namespace_prefix, idle_before)

    async def afact_history(
        self, namespace: str, scope: str, key: str, *, limit: int | None = None
    ) -> list[FactChange]:
        """Async :meth:`fact_history`."""
        return await self._offload(self.fact_history, namespace, scope, key, limit=limit)

    async def arestore_fact(
        self,
        namespace: str,
        scope: str,
        fact: Fact,
        *,
        history: Sequence[FactChange] = (),
        embedding: Embedding | None = None,
    ) -> bool:
        """Async :meth:`restore_fact`."""
        return await self._offload(
            self.restore_fact, namespace, scope, fact, history=history, embedding=embedding
        )

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        await self._offload(self.close)
