"""``MongoStore``: the store contract over MongoDB, sync and natively async.

Every operation is a plan (:mod:`.log`, :mod:`.facts`) run by the sync driver on a
``MongoClient`` or awaited by the async driver on an ``AsyncMongoClient`` or a Motor client
(:mod:`.ops`, :mod:`.clients`). Every argument that goes into a query is checked here to be
a plain ``str``, ``int`` (within BSON's 64 bits) or ``float``, so no caller-supplied value
can become an operator.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from memory_adapters.embedders import Embedding
from memory_adapters.errors import InvalidId, InvalidInput
from memory_adapters.facts import Fact, FactFilter, index_text
from memory_adapters.messages import AppendResult, Entry, Record, Summary
from memory_adapters.operations import (
    DEFAULT_HISTORY_LIMIT,
    WRITER_KINDS,
    ConversationInfo,
    EraseReport,
    FactChange,
    Writer,
)
from memory_adapters.ranking import TermMatches
from memory_adapters.store import Store
from memory_adapters.validation import MAX_INT, describe, dumps

from . import facts, log, operations
from . import terms as term_plans
from .clients import Clients
from .ops import Handles, Plan, run_async, run_sync
from .schema import MAX_DOCUMENT_BYTES, TEXT_SEARCH_MODES, VECTOR_SEARCH_MODES, ensure

T = TypeVar("T")


def _text(value: object, what: str) -> str:
    if type(value) is not str:
        raise InvalidId(f"{what} must be a str, not {type(value).__name__}")
    return value


def _texts(values: object, what: str) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidInput(f"{what}s must be a sequence of str, not {type(values).__name__}")
    return [_text(v, what) for v in values]


def _opt_text(value: object, what: str) -> str | None:
    return None if value is None else _text(value, what)


def _int(value: object, what: str) -> int:
    if type(value) is not int:
        raise InvalidInput(f"{what} must be an int, not {type(value).__name__}")
    if not -MAX_INT - 1 <= value <= MAX_INT:  # BSON holds 64-bit ints at most
        raise InvalidInput(f"{what} is out of the 64-bit range: {describe(value)}")
    return value


def _opt_int(value: object, what: str) -> int | None:
    return None if value is None else _int(value, what)


def _number(value: object, what: str) -> float:
    if type(value) not in (int, float):
        raise InvalidInput(f"{what} must be a number, not {type(value).__name__}")
    return float(value)  # type: ignore[arg-type]


def _floats(value: object, what: str) -> list[float]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidInput(f"{what} must be a sequence of numbers, not {type(value).__name__}")
    return [_number(x, what) for x in value]


def _embedding(value: object) -> Embedding | None:
    """``value`` checked to be an :class:`Embedding` of plain values (or ``None``): a str
    model, int dimensions and str field names, each with a vector of that many numbers."""
    if value is None:
        return None
    if not isinstance(value, Embedding):
        raise InvalidInput(f"embedding must be an Embedding, not {type(value).__name__}")
    model = _text(value.model, "embedding model")
    dims = _int(value.dims, "embedding dims")
    if not isinstance(value.vectors, Mapping):
        raise InvalidInput("embedding vectors must be a mapping of field names to vectors")
    vectors: dict[str, list[float]] = {}
    for field, vector in value.vectors.items():
        checked = _floats(vector, "an embedding vector")
        if len(checked) != dims:
            raise InvalidInput(f"an embedding vector of {len(checked)} dimensions, not {dims}")
        vectors[_text(field, "embedding field")] = checked
    return Embedding(model, dims, vectors)


def _writer(value: object) -> Writer | None:
    """``value`` checked to be a :class:`Writer` of plain strings (or ``None``)."""
    if value is None:
        return None
    if not isinstance(value, Writer):
        raise InvalidInput(f"writer must be a Writer, not {type(value).__name__}")
    if value.kind not in WRITER_KINDS:
        kinds = " or ".join(map(repr, WRITER_KINDS))
        raise InvalidInput(f"writer kind must be {kinds}, not {value.kind!r}")
    for what in ("run_id", "framework", "agent", "model", "conversation"):
        _opt_text(getattr(value, what), f"writer {what}")
    for what in ("start_seq", "end_seq"):
        seq = getattr(value, what)
        if seq is not None and (type(seq) is not int or seq < 1):
            raise InvalidInput(f"writer {what} must be a seq (an int from 1), not {seq!r}")
    return value


def _entries(entries: Sequence[Entry]) -> list[Entry]:
    out = list(entries)
    if not out:
        raise InvalidInput("append needs at least one entry")
    for e in out:
        if not isinstance(e, Entry):
            raise InvalidInput(f"append takes Entry objects, not {type(e).__name__}")
        _text(e.role, "entry role")
        _text(e.data, "entry data")
        _int(e.tokens, "entry tokens")
    return out


class MongoStore(Store):
    """A store in a MongoDB database: a standalone server, a replica set or a sharded
    cluster; no transactions needed.

    ``MongoStore("mongodb://host/dbname")`` opens its own clients (sync, and async per event
    loop) and pings the server, so an unreachable server fails here, within ``timeout``
    seconds (5 by default). ``MongoStore(client=..., database="dbname")`` uses an
    application's ``MongoClient``, ``AsyncMongoClient`` or Motor client instead, and never
    closes it; ``async_client=`` pairs an async client with a sync ``client``. See
    :mod:`memory_adapters_mongo.clients` for which client serves which call.

    Keyword search reads each scope's postings on the multikey index ``(scope, namespace,
    terms)`` (:mod:`memory_adapters_mongo.terms`); the core ranks what it finds.
    ``text_search`` (``"auto"``, ``"text"`` or ``"words"``) is accepted and ignored: it
    chose between ``$text`` and a word list, which earlier versions searched with.
    ``vector_search``: ``"exact"`` (cosine computed
    here over the scope's vectors; any server) or ``"atlas"`` (a ``$vectorSearch`` stage on
    the Atlas Vector Search index named ``atlas_index``, considering ``atlas_num_candidates``
    candidates, 20 per result by default; see docs/mongodb.md). ``client_options``: more
    keyword arguments for the clients the store opens. ``max_document_bytes``: writes over
    it are refused with ``ValueTooLarge`` before they are sent (MongoDB's own limit, 16 MiB,
    by default).
    """

    scheme = "mongodb"
    blocking = True

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Any = None,
        async_client: Any = None,
        database: str | None = None,
        timeout: float | None = None,
        text_search: str = "auto",
        vector_search: str = "exact",
        atlas_index: str = "ma_facts_vectors",
        atlas_num_candidates: int | None = None,
        client_options: Mapping[str, Any] | None = None,
        max_document_bytes: int = MAX_DOCUMENT_BYTES,
    ) -> None:
        if text_search not in TEXT_SEARCH_MODES:
            raise InvalidInput(
                f"text_search must be one of {TEXT_SEARCH_MODES}, not {text_search!r}"
            )
        if vector_search not in VECTOR_SEARCH_MODES:
            raise InvalidInput(
                f"vector_search must be one of {VECTOR_SEARCH_MODES}, not {vector_search!r}"
            )
        self.vector_search = vector_search
        self.atlas_index = _text(atlas_index, "atlas_index")
        self.atlas_num_candidates = _opt_int(atlas_num_candidates, "atlas_num_candidates")
        if self.atlas_num_candidates is not None and not (1 <= self.atlas_num_candidates <= 10000):
            raise InvalidInput(
                f"atlas_num_candidates must be 1 to 10000, not {atlas_num_candidates!r}"
            )
        if timeout is not None and (_number(timeout, "timeout") <= 0):
            raise InvalidInput(f"timeout must be a positive number of seconds, not {timeout!r}")
        self.max_document_bytes = _int(max_document_bytes, "max_document_bytes")
        if self.max_document_bytes < 1024:
            raise InvalidInput(f"max_document_bytes is too small: {max_document_bytes}")
        self.text_search = text_search  # obsolete: accepted, ignored
        self._clients = Clients(
            url,
            client=client,
            async_client=async_client,
            database=database,
            timeout=timeout,
            client_options=client_options,
        )
        self.database = self._clients.database
        self._ready_lock = threading.Lock()
        self._ensured = False
        if self._clients.has_sync:
            try:
                self._ready(self._clients.sync())
            except BaseException:
                self._clients.close()
                raise

    @property
    def uses_text_index(self) -> bool:
        """Always ``False``: fact search no longer runs ``$text`` queries (kept for callers
        of earlier versions)."""
        return False

    # -- running plans -------------------------------------------------------------------

    def _ready(self, handles: Handles) -> None:
        if not self._ensured:
            with self._ready_lock:
                if not self._ensured:
                    run_sync(ensure(), handles)
                    self._ensured = True

    def _run(self, make: Callable[[], Plan[T]]) -> T:
        handles = self._clients.sync()
        self._ready(handles)
        return run_sync(make(), handles)

    async def _arun(self, make: Callable[[], Plan[T]]) -> T:
        handles = await self._clients.async_handles()
        if handles is None:
            return await asyncio.to_thread(self._run, make)
        if not self._ensured:
            await run_async(ensure(), handles)
            self._ensured = True
        return await run_async(make(), handles)

    def close(self) -> None:
        self._clients.close()

    async def aclose(self) -> None:
        await self._clients.aclose()

    # -- plans, with typed arguments ----------------------------------------------------------

    def _append(
        self,
        conversation: str,
        entries: Sequence[Entry],
        run_id: str | None,
        expected_last_seq: int | None,
        idempotency_key: str | None,
    ) -> Callable[[], Plan[AppendResult]]:
        conversation = _text(conversation, "conversation")
        checked = _entries(entries)
        run_id = _opt_text(run_id, "run_id")
        expected_last_seq = _opt_int(expected_last_seq, "expected_last_seq")
        idempotency_key = _opt_text(idempotency_key, "idempotency_key")
        return lambda: log.append(
            conversation,
            checked,
            run_id=run_id,
            expected_last_seq=expected_last_seq,
            idempotency_key=idempotency_key,
            max_bytes=self.max_document_bytes,
        )

    def _tail(
        self, conversation: str, max_tokens: int | None, max_messages: int | None
    ) -> Callable[[], Plan[list[Record]]]:
        conversation = _text(conversation, "conversation")
        max_tokens = _opt_int(max_tokens, "max_tokens")
        max_messages = _opt_int(max_messages, "max_messages")
        return lambda: log.tail(conversation, max_tokens, max_messages)

    def _read(
        self, conversation: str, start_seq: int, end_seq: int | None, limit: int | None
    ) -> Callable[[], Plan[list[Record]]]:
        conversation = _text(conversation, "conversation")
        start_seq = _int(start_seq, "start_seq")
        end_seq = _opt_int(end_seq, "end_seq")
        limit = _opt_int(limit, "limit")
        return lambda: log.read(conversation, start_seq, end_seq, limit)

    def _put_summary(self, conversation: str, summary: Summary) -> Callable[[], Plan[None]]:
        conversation = _text(conversation, "conversation")
        checked = Summary(
            _int(summary.start_seq, "summary start_seq"),
            _int(summary.end_seq, "summary end_seq"),
            _text(summary.text, "summary text"),
            _int(summary.tokens, "summary tokens"),
            _number(summary.created_at, "summary created_at"),
            None if summary.model is None else _text(summary.model, "summary model"),
        )
        return lambda: log.put_summary(conversation, checked, self.max_document_bytes)

    def _put_fact(
        self,
        namespace: str,
        scope: str,
        key: str,
        data: str,
        text: str,
        importance: float,
        expires_at: float | None,
        expected_version: int | None,
        embedding: Embedding | None,
        writer: Writer | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        metadata: str | None = None,
    ) -> Callable[[], Plan[Fact]]:
        namespace, scope, key = self._fact_key(namespace, scope, key)
        metadata = _opt_text(metadata, "metadata")
        writer = _writer(writer)
        history_limit = _int(history_limit, "history_limit")
        checked = _embedding(embedding)
        data = _text(data, "data")
        text = _text(text, "text")
        importance = _number(importance, "importance")
        expires_at = None if expires_at is None else _number(expires_at, "expires_at")
        expected_version = _opt_int(expected_version, "expected_version")
        return lambda: facts.put(
            namespace,
            scope,
            key,
            data,
            text=text,
            importance=importance,
            expires_at=expires_at,
            expected_version=expected_version,
            max_bytes=self.max_document_bytes,
            embedding=checked,
            writer=writer,
            history_limit=history_limit,
            metadata=metadata,
        )

    def _delete(
        self,
        namespace: str,
        scope: str,
        key: str,
        expected_version: int | None,
        writer: Writer | None,
        history_limit: int,
    ) -> Callable[[], Plan[bool]]:
        namespace, scope, key = self._fact_key(namespace, scope, key)
        expected_version = _opt_int(expected_version, "expected_version")
        writer = _writer(writer)
        history_limit = _int(history_limit, "history_limit")
        return lambda: facts.delete(namespace, scope, key, expected_version, writer, history_limit)

    def _list_conversations(
        self, prefix: str, limit: int, before: tuple[float, str] | None
    ) -> Callable[[], Plan[list[ConversationInfo]]]:
        prefix = _text(prefix, "prefix")
        limit = _int(limit, "limit")
        if before is not None:
            before = (_number(before[0], "before"), _text(before[1], "before"))
        return lambda: operations.list_conversations(prefix, limit, before)

    def _erase(self, namespace: str, user_id: str) -> Callable[[], Plan[EraseReport]]:
        namespace = _text(namespace, "namespace")
        user_id = _text(user_id, "user_id")
        return lambda: operations.erase(namespace, user_id)

    def _idle(self, namespace_prefix: str, idle_before: float) -> Callable[[], Plan[int]]:
        namespace_prefix = _text(namespace_prefix, "namespace_prefix")
        idle_before = _number(idle_before, "idle_before")
        return lambda: operations.delete_idle(namespace_prefix, idle_before)

    def _history(
        self, namespace: str, scope: str, key: str, limit: int | None
    ) -> Callable[[], Plan[list[FactChange]]]:
        namespace, scope, key = self._fact_key(namespace, scope, key)
        limit = _opt_int(limit, "limit")
        return lambda: facts.history(namespace, scope, key, limit)

    def _restore(
        self,
        namespace: str,
        scope: str,
        fact: Fact,
        history: Sequence[FactChange],
        embedding: Embedding | None,
    ) -> Callable[[], Plan[bool]]:
        if not isinstance(fact, Fact):
            raise InvalidInput(f"restore_fact takes a Fact, not {type(fact).__name__}")
        namespace, scope, key = self._fact_key(namespace, scope, fact.key)
        checked = Fact(
            key,
            fact.value,
            _int(fact.version, "version"),
            _number(fact.importance, "importance"),
            _number(fact.created_at, "created_at"),
            _number(fact.updated_at, "updated_at"),
            None if fact.expires_at is None else _number(fact.expires_at, "expires_at"),
        )
        changes = list(history)
        for c in changes:
            if not isinstance(c, FactChange):
                raise InvalidInput(f"history holds FactChange objects, not {type(c).__name__}")
            _text(c.key, "history key")
            _int(c.version, "history version")
            _number(c.at, "history at")
            _writer(c.writer)
        emb = _embedding(embedding)
        data = dumps(fact.value)
        if fact.metadata is not None and not isinstance(fact.metadata, dict):
            raise InvalidInput(f"fact metadata must be a dict, not {type(fact.metadata).__name__}")
        metadata = None if fact.metadata is None else dumps(fact.metadata, "metadata")
        text = index_text(key, fact.value)
        return lambda: facts.restore(
            namespace,
            scope,
            checked,
            data,
            text,
            changes,
            emb,
            self.max_document_bytes,
            metadata,
        )

    @staticmethod
    def _fact_key(namespace: str, scope: str, key: str) -> tuple[str, str, str]:
        return _text(namespace, "namespace"), _text(scope, "scope"), _text(key, "key")

    def _match(
        self, namespace: str, scope: str, terms: Sequence[str], where: FactFilter | None
    ) -> Callable[[], Plan[TermMatches]]:
        namespace, scope, _ = self._fact_key(namespace, scope, "-")
        checked = _texts(terms, "search term")
        filtered = term_plans.check_where(where)
        return lambda: term_plans.match(namespace, scope, checked, filtered)

    def _get_many(
        self, namespace: str, scope: str, keys: Sequence[str]
    ) -> Callable[[], Plan[list[Fact]]]:
        namespace, scope, _ = self._fact_key(namespace, scope, "-")
        checked = _texts(keys, "key")
        return lambda: facts.get_many(namespace, scope, checked)

    def _search_vectors(
        self,
        namespace: str,
        scope: str,
        vector: Sequence[float],
        model: str,
        limit: int,
        keys: Sequence[str] | None = None,
        where: FactFilter | None = None,
    ) -> Callable[[], Plan[list[Fact]]]:
        namespace, scope, _ = self._fact_key(namespace, scope, "-")
        query = _floats(vector, "vector")
        model = _text(model, "model")
        limit = _int(limit, "limit")
        chosen = None if keys is None else _texts(keys, "key")
        filtered = term_plans.check_where(where)
        if self.vector_search == "atlas" and chosen is None and filtered is None:
            # Atlas pre-filters only on the fields its index declares: within keys or a
            # filter, the exact path ranks the (few, or filtered) candidates itself
            return lambda: facts.atlas_search(
                namespace,
                scope,
                query,
                model,
                limit,
                index=self.atlas_index,
                num_candidates=self.atlas_num_candidates,
            )
        return lambda: facts.search_vectors(namespace, scope, query, model, limit, chosen, filtered)

    def _to_embed(
        self, namespace: str, scope: str, model: str, limit: int
    ) -> Callable[[], Plan[list[Fact]]]:
        namespace, scope, _ = self._fact_key(namespace, scope, "-")
        model = _text(model, "model")
        limit = _int(limit, "limit")
        return lambda: facts.to_embed(namespace, scope, model, limit)

    def _refresh(
        self, namespace: str, scope: str, key: str, version: int, ttl: float
    ) -> Callable[[], Plan[bool]]:
        namespace, scope, key = self._fact_key(namespace, scope, key)
        version = _int(version, "version")
        return lambda: facts.refresh(namespace, scope, key, version, ttl)

    def _set_embedding(
        self, namespace: str, scope: str, key: str, version: int, embedding: Embedding
    ) -> Callable[[], Plan[bool]]:
        namespace, scope, key = self._fact_key(namespace, scope, key)
        version = _int(version, "version")
        checked = _embedding(embedding)
        if checked is None:
            raise InvalidInput("set_fact_embedding needs an Embedding, not None")
        return lambda: facts.set_embedding(namespace, scope, key, version, checked)

    # -- conversation log ----------------------------------------------------------------

    def append(
        self,
        conversation: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        return self._run(
            self._append(conversation, entries, run_id, expected_last_seq, idempotency_key)
        )

    def tail(
        self, conversation: str, *, max_tokens: int | None = None, max_messages: int | None = None
    ) -> list[Record]:
        return self._run(self._tail(conversation, max_tokens, max_messages))

    def read(
        self,
        conversation: str,
        *,
        start_seq: int = 1,
        end_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        return self._run(self._read(conversation, start_seq, end_seq, limit))

    def last_seq(self, conversation: str) -> int:
        conversation = _text(conversation, "conversation")
        return self._run(lambda: log.last_seq(conversation))

    def delete_conversation(self, conversation: str) -> int:
        conversation = _text(conversation, "conversation")
        return self._run(lambda: log.delete_conversation(conversation))

    def put_summary(self, conversation: str, summary: Summary) -> None:
        self._run(self._put_summary(conversation, summary))

    def claim_summary(
        self, conversation: str, end_seq: int, owner: str, *, lease_seconds: float
    ) -> bool:
        return self._run(lambda: log.claim_summary(conversation, end_seq, owner, lease_seconds))

    async def aclaim_summary(
        self, conversation: str, end_seq: int, owner: str, *, lease_seconds: float
    ) -> bool:
        return await self._arun(
            lambda: log.claim_summary(conversation, end_seq, owner, lease_seconds)
        )

    def latest_summary(self, conversation: str) -> Summary | None:
        conversation = _text(conversation, "conversation")
        return self._run(lambda: log.latest_summary(conversation))

    # -- facts ---------------------------------------------------------------------------

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
        return self._run(
            self._put_fact(
                namespace,
                scope,
                key,
                data,
                text,
                importance,
                expires_at,
                expected_version,
                embedding,
                writer,
                history_limit,
                metadata,
            )
        )

    def get_fact(self, namespace: str, scope: str, key: str) -> Fact | None:
        namespace, scope, key = self._fact_key(namespace, scope, key)
        return self._run(lambda: facts.get(namespace, scope, key))

    def list_facts(self, namespace: str, scope: str, *, limit: int | None = None) -> list[Fact]:
        namespace, scope, _ = self._fact_key(namespace, scope, "-")
        limit = _opt_int(limit, "limit")
        return self._run(lambda: facts.list_(namespace, scope, limit))

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
        return self._run(
            self._delete(namespace, scope, key, expected_version, writer, history_limit)
        )

    def match_terms(
        self,
        namespace: str,
        scope: str,
        terms: Sequence[str],
        *,
        where: FactFilter | None = None,
    ) -> TermMatches:
        """One aggregation counting the scope, and one query of its postings on the multikey
        index ``(scope, namespace, terms)`` (:func:`.terms.match`)."""
        return self._run(self._match(namespace, scope, terms, where))

    def get_facts(self, namespace: str, scope: str, keys: Sequence[str]) -> list[Fact]:
        return self._run(self._get_many(namespace, scope, keys))

    def _scopes(
        self, namespace: str, prefix: str, limit: int | None
    ) -> Callable[[], Plan[list[str]]]:
        namespace = _text(namespace, "namespace")
        prefix = _text(prefix, "prefix")
        limit = _opt_int(limit, "limit")
        return lambda: facts.scopes(namespace, prefix, limit)

    def list_fact_scopes(
        self, namespace: str, prefix: str, *, limit: int | None = None
    ) -> list[str]:
        return self._run(self._scopes(namespace, prefix, limit))

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
        """Exact cosine over the scope's vectors (:func:`.facts.search_vectors`), or Atlas
        Vector Search with ``vector_search="atlas"`` (:func:`.facts.atlas_search`) when
        neither ``keys`` nor ``where`` restricts the candidates."""
        return self._run(self._search_vectors(namespace, scope, vector, model, limit, keys, where))

    def facts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> list[Fact]:
        return self._run(self._to_embed(namespace, scope, model, limit))

    def refresh_fact(self, namespace: str, scope: str, key: str, version: int, ttl: float) -> bool:
        return self._run(self._refresh(namespace, scope, key, version, ttl))

    def set_fact_embedding(
        self, namespace: str, scope: str, key: str, version: int, embedding: Embedding
    ) -> bool:
        return self._run(self._set_embedding(namespace, scope, key, version, embedding))

    def prune(self) -> int:
        return self._run(facts.prune)

    # -- operations ------------------------------------------------------------------------

    def list_conversations(
        self, prefix: str, *, limit: int = 100, before: tuple[float, str] | None = None
    ) -> list[ConversationInfo]:
        return self._run(self._list_conversations(prefix, limit, before))

    def erase(self, namespace: str, user_id: str) -> EraseReport:
        return self._run(self._erase(namespace, user_id))

    def delete_idle_conversations(self, namespace_prefix: str, idle_before: float) -> int:
        return self._run(self._idle(namespace_prefix, idle_before))

    def fact_history(
        self, namespace: str, scope: str, key: str, *, limit: int | None = None
    ) -> list[FactChange]:
        return self._run(self._history(namespace, scope, key, limit))

    def restore_fact(
        self,
        namespace: str,
        scope: str,
        fact: Fact,
        *,
        history: Sequence[FactChange] = (),
        embedding: Embedding | None = None,
    ) -> bool:
        return self._run(self._restore(namespace, scope, fact, history, embedding))

    # -- async twins: the same plans, awaited on an async client ---------------------------

    async def aappend(
        self,
        conversation: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        return await self._arun(
            self._append(conversation, entries, run_id, expected_last_seq, idempotency_key)
        )

    async def atail(
        self, conversation: str, *, max_tokens: int | None = None, max_messages: int | None = None
    ) -> list[Record]:
        return await self._arun(self._tail(conversation, max_tokens, max_messages))

    async def aread(
        self,
        conversation: str,
        *,
        start_seq: int = 1,
        end_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        return await self._arun(self._read(conversation, start_seq, end_seq, limit))

    async def alast_seq(self, conversation: str) -> int:
        conversation = _text(conversation, "conversation")
        return await self._arun(lambda: log.last_seq(conversation))

    async def adelete_conversation(self, conversation: str) -> int:
        conversation = _text(conversation, "conversation")
        return await self._arun(lambda: log.delete_conversation(conversation))

    async def aput_summary(self, conversation: str, summary: Summary) -> None:
        await self._arun(self._put_summary(conversation, summary))

    async def alatest_summary(self, conversation: str) -> Summary | None:
        conversation = _text(conversation, "conversation")
        return await self._arun(lambda: log.latest_summary(conversation))

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
        return await self._arun(
            self._put_fact(
                namespace,
                scope,
                key,
                data,
                text,
                importance,
                expires_at,
                expected_version,
                embedding,
                writer,
                history_limit,
                metadata,
            )
        )

    async def aget_fact(self, namespace: str, scope: str, key: str) -> Fact | None:
        namespace, scope, key = self._fact_key(namespace, scope, key)
        return await self._arun(lambda: facts.get(namespace, scope, key))

    async def alist_facts(
        self, namespace: str, scope: str, *, limit: int | None = None
    ) -> list[Fact]:
        namespace, scope, _ = self._fact_key(namespace, scope, "-")
        limit = _opt_int(limit, "limit")
        return await self._arun(lambda: facts.list_(namespace, scope, limit))

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
        return await self._arun(
            self._delete(namespace, scope, key, expected_version, writer, history_limit)
        )

    async def amatch_terms(
        self,
        namespace: str,
        scope: str,
        terms: Sequence[str],
        *,
        where: FactFilter | None = None,
    ) -> TermMatches:
        return await self._arun(self._match(namespace, scope, terms, where))

    async def aget_facts(self, namespace: str, scope: str, keys: Sequence[str]) -> list[Fact]:
        return await self._arun(self._get_many(namespace, scope, keys))

    async def alist_fact_scopes(
        self, namespace: str, prefix: str, *, limit: int | None = None
    ) -> list[str]:
        return await self._arun(self._scopes(namespace, prefix, limit))

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
        return await self._arun(
            self._search_vectors(namespace, scope, vector, model, limit, keys, where)
        )

    async def afacts_to_embed(
        self, namespace: str, scope: str, model: str, *, limit: int = 256
    ) -> list[Fact]:
        return await self._arun(self._to_embed(namespace, scope, model, limit))

    async def arefresh_fact(
        self, namespace: str, scope: str, key: str, version: int, ttl: float
    ) -> bool:
        return await self._arun(self._refresh(namespace, scope, key, version, ttl))

    async def aset_fact_embedding(
        self, namespace: str, scope: str, key: str, version: int, embedding: Embedding
    ) -> bool:
        return await self._arun(self._set_embedding(namespace, scope, key, version, embedding))

    async def aprune(self) -> int:
        return await self._arun(facts.prune)

    async def alist_conversations(
        self, prefix: str, *, limit: int = 100, before: tuple[float, str] | None = None
    ) -> list[ConversationInfo]:
        return await self._arun(self._list_conversations(prefix, limit, before))

    async def aerase(self, namespace: str, user_id: str) -> EraseReport:
        return await self._arun(self._erase(namespace, user_id))

    async def adelete_idle_conversations(self, namespace_prefix: str, idle_before: float) -> int:
        return await self._arun(self._idle(namespace_prefix, idle_before))

    async def afact_history(
        self, namespace: str, scope: str, key: str, *, limit: int | None = None
    ) -> list[FactChange]:
        return await self._arun(self._history(namespace, scope, key, limit))

    async def arestore_fact(
        self,
        namespace: str,
        scope: str,
        fact: Fact,
        *,
        history: Sequence[FactChange] = (),
        embedding: Embedding | None = None,
    ) -> bool:
        return await self._arun(self._restore(namespace, scope, fact, history, embedding))

    def __repr__(self) -> str:
        return f"<MongoStore database={self.database!r}>"
