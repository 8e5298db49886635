"""Search what was said: every stored message of a user's conversations, found again by its
words and by its meaning, ranked as facts are (:mod:`memory_adapters.ranking`).

The index
    Each message a user or the assistant wrote (tool calls and tool results too with
    ``Memory(index_tool_messages=True)``; never system prompts or summaries) becomes one
    document of the conversation index: a fact in the namespace ``<namespace>#messages``
    (:func:`index_namespace`), in the scope of the conversation's user (``user:<user>``; a
    conversation without a user is a scope of its own), keyed by its seq and conversation
    (:func:`doc_key`), with the conversation id, seq and role as metadata, and its text
    followed by a little of the message before it (:data:`CONTEXT_CHARS`): a short answer ("yes,
    the blue one") is found by what it answers. The document's time is the message's. So every
    store searches messages with the indexes, statistics and ranking it has for facts, with no
    method of its own: one user's messages never move another's results.

Off the hot path
    A turn never waits for the index: after a turn is stored, the ``Memory``'s worker
    (:mod:`.worker`) indexes the conversation's new messages and embeds them (one embedder
    call per :data:`INDEX_PAGE` messages). How far a conversation is indexed is kept beside
    the documents (a *watermark*, in the scope ``<user scope>/index``), written with
    compare-and-swap together with a lease: of several processes one indexes a range, and
    each message is embedded once in its life. A search first indexes what is not yet
    indexed (a process that died between a turn and its indexing loses nothing) and embeds
    the documents a semantic search needs that have no vectors (an embedder that failed).

Deleting
    ``Conversation.clear()``, retention and ``erase`` remove the documents and watermarks with
    the messages. The index is derived data: it is not exported; after an import, the next
    search (or ``memory-adapters reindex``) rebuilds it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from .embedders import WHOLE, Embedding
from .errors import (
    EmbedderFailed,
    EmbeddingWarning,
    InvalidInput,
    StoreClosed,
    VersionConflict,
)
from .facts import (
    SEARCH_MODES,
    Fact,
    FactFilter,
    Facts,
    bound_search_text,
    embed_plan,
    supports_vectors,
)
from .messages import Message, Record
from .operations import ConversationInfo
from .steps import Plan, StoreBatch, StoreCall, drive_async, drive_sync
from .validation import check_bool, check_positive_int, check_time, dumps

if TYPE_CHECKING:
    from .memory import Memory
    from .scope import Scope
    from .store import Store

log = logging.getLogger("memory_adapters")

INDEX_SUFFIX = "#messages"
"""The conversation index of namespace ``ns`` is kept as facts in ``ns + INDEX_SUFFIX``."""

STATE_SUFFIX = "/index"
"""The watermarks of a scope's conversations are kept in the scope ``<scope> + STATE_SUFFIX``."""

INDEX_PAGE = 128
"""Messages read, embedded and indexed at a time."""

CONTEXT_CHARS = 300
"""How much of the message before it (its last characters) a message is indexed with."""

MAX_DOC_CHARS = 32_000
"""How much of a message's own text is indexed (characters); the rest is stored, not found."""

LEASE_SECONDS = 120.0
"""How long a process indexing a conversation keeps others from indexing it (a process that
dies mid-way holds it back this long, at most; searches meanwhile find what was indexed)."""

LIST_PAGE = 100
"""Conversations listed at a time when a search of all of a user's conversations checks what
is not yet indexed."""


def index_namespace(namespace: str) -> str:
    """The namespace holding the conversation index of ``namespace``."""
    return namespace + INDEX_SUFFIX


def parts(conversation: str) -> tuple[str, str | None, str]:
    """The namespace, user (``None`` for none) and conversation id of a conversation key."""
    pieces = conversation.split(":")
    if len(pieces) != 3:
        return "", None, conversation
    ns, user, conv = (unquote(p) for p in pieces)
    return ns, user or None, conv


def index_scope(conversation: str) -> str:
    """The scope of the index a conversation's messages are found in: its user's
    (``user:<user>``), or, without a user, the conversation's own."""
    _, user, _ = parts(conversation)
    return "user:" + quote(user, safe="") if user else "conversation:" + conversation


def state_scope(scope: str) -> str:
    """Where the watermarks of the conversations indexed in ``scope`` are kept."""
    return scope + STATE_SUFFIX


def doc_key(conversation_id: str, seq: int) -> str:
    """The key of a message's document: its seq, ``@``, its conversation id (never a word:
    keys with digits add nothing to what the document is found by)."""
    return f"{seq}@{conversation_id}"


def indexed_text(message: Message, tools: bool) -> str:
    """What of ``message`` is indexed: a user's or the assistant's text, and with ``tools``
    the tool calls (name and arguments) and results; nothing of a system message."""
    if message.role == "system":
        return ""
    out = [message.text] if message.text and message.role in ("user", "assistant") else []
    if tools:
        for call in message.tool_calls:
            out.append(f"{call.name} {dumps(call.args)}" if call.args else call.name)
        for result in message.tool_results:
            content = result.content
            out.append(content if isinstance(content, str) else dumps(content))
    return "\n".join(out)[:MAX_DOC_CHARS]


def doc_text(text: str, before: str) -> str:
    """A document's text: the message's, then the end of the message before it."""
    if not before or CONTEXT_CHARS <= 0:
        return bound_search_text(text)
    context = before[-CONTEXT_CHARS:]
    cut = context.find(" ") if len(before) > CONTEXT_CHARS else -1
    return bound_search_text(f"{text}\n{context[cut + 1 :]}")


def index_docs(
    conversation_id: str, records: Sequence[Record], through: int, tools: bool
) -> list[Fact]:
    """The documents of the messages of ``records`` (consecutive records of conversation
    ``conversation_id``) after seq ``through``: each message's :func:`indexed_text`, with the
    text of the message before it in ``records`` as its context (:func:`doc_text`); a message
    with nothing to index has no document."""
    before = ""
    docs: list[Fact] = []
    for record in records:
        text = indexed_text(record.message, tools)
        if record.seq > through and text:
            docs.append(
                Fact(
                    doc_key(conversation_id, record.seq),
                    doc_text(text, before),
                    1,
                    0.0,
                    record.created_at,
                    record.created_at,
                    None,
                    None,
                    {
                        "conversation": conversation_id,
                        "seq": record.seq,
                        "role": record.message.role,
                    },
                )
            )
        if text:
            before = text
    return docs


@dataclass(frozen=True, slots=True)
class MessageHit:
    """One message found by :meth:`Conversation.search
    <memory_adapters.conversation.Conversation.search>`."""

    conversation_id: str
    """The conversation it was said in."""
    seq: int
    """Its seq in that conversation."""
    message: Message
    """The message, as stored."""
    created_at: float
    """When it was stored (epoch seconds)."""
    score: float
    """How relevant it is, on the search mode's scale (as :attr:`Fact.score
    <memory_adapters.facts.Fact.score>`)."""
    run_id: str | None
    """The run that stored it, if any."""
    context: tuple[Record, ...]
    """Its neighbours: the stored messages just before and after it in its conversation, and
    itself, in seq order (:data:`CONTEXT_NEIGHBOURS` each side)."""

    @property
    def text(self) -> str:
        """The message's text."""
        return self.message.text


CONTEXT_NEIGHBOURS = 1
"""How many messages each side of a hit its :attr:`MessageHit.context` holds."""


@dataclass(frozen=True, slots=True)
class IndexDue:
    """A conversation whose new messages the worker indexes (a job's tag)."""

    conversation: str


def _through(state: Fact | None) -> int:
    value = state.value if state is not None else None
    got = value.get("through") if isinstance(value, dict) else None
    return got if isinstance(got, int) and not isinstance(got, bool) else 0


def _holder(state: Fact | None, now: float) -> str | None:
    """The owner of an unexpired lease on ``state``, if any."""
    value = state.value if state is not None else None
    if not isinstance(value, dict):
        return None
    owner, until = value.get("owner"), value.get("until")
    if isinstance(owner, str) and isinstance(until, int | float) and until > now:
        return owner
    return None


class ConversationIndex:
    """The conversation index of a ``Memory`` (``memory.conversation_index``): indexes new
    messages on the worker, and counts what it did (:attr:`indexed`, :attr:`embedded`)."""

    def __init__(self, memory: Memory, *, background: bool, tools: bool) -> None:
        self.memory = memory
        self.background = check_bool(background, "index_conversations")
        """Whether stored turns are indexed on the worker right away (else, by the next
        search)."""
        self.tools = check_bool(tools, "index_tool_messages")
        """Whether tool calls and tool results are indexed."""
        self.owner = uuid.uuid4().hex
        """Who this ``Memory`` holds index leases as."""
        self.indexed = 0
        """Messages this ``Memory`` put in the index."""
        self.embedded = 0
        """Messages this ``Memory`` embedded for the index."""
        self.failures = 0
        """Index jobs of the worker that failed (logged and warned; the next search redoes
        them)."""
        self._busy: set[str] = set()  # conversations a thread of this Memory is indexing
        self._busy_lock = threading.Lock()

    def claim(self, conversation: str) -> bool:
        """Whether this thread may index ``conversation`` now: no other thread (or task) of
        this ``Memory`` is at it. The lease keeps other processes out; it is the ``Memory``'s
        (:attr:`owner`), so without this two searches (or a search and the worker) of one
        ``Memory`` would index, and embed, the same messages."""
        with self._busy_lock:
            if conversation in self._busy:
                return False
            self._busy.add(conversation)
            return True

    def release(self, conversation: str) -> None:
        """End a :meth:`claim`."""
        with self._busy_lock:
            self._busy.discard(conversation)

    def submit(self, conversation: str) -> None:
        """Index ``conversation``'s new messages on the worker (a turn was just stored)."""
        if not self.background:
            return
        self.memory.worker.submit(
            ("index", conversation),
            lambda: self._run(conversation),
            tag=IndexDue(conversation),
            while_running=True,
        )

    def _run(self, conversation: str) -> int:
        memory = self.memory
        try:
            return drive_sync(index_plan(memory, conversation), memory.store, memory.hooks)
        except StoreClosed:  # closed under it (not through Memory.close, which waits)
            log.debug("indexing %s stopped: the store was closed", conversation)
            return 0
        except Exception as exc:  # the next search indexes what this left out
            self.failures += 1
            log.warning("indexing %s failed", conversation, exc_info=exc)
            warnings.warn(
                f"indexing the messages of {conversation} failed: {type(exc).__name__}: {exc}; "
                "the next search indexes them",
                EmbeddingWarning,
                stacklevel=1,
            )
            return 0

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the indexing under way (at most ``timeout`` seconds); whether it ended."""
        return self.memory.worker.wait(timeout, tags=IndexDue)

    def __repr__(self) -> str:
        return f"<ConversationIndex indexed={self.indexed} embedded={self.embedded}>"


def index_plan(memory: Memory, conversation: str, *, embed: bool = True) -> Plan[int]:
    """Index the messages of ``conversation`` stored since its watermark (with ``embed``, with
    their vectors); return how many were indexed. Does nothing while another process holds
    the conversation's lease, or another thread of this ``Memory`` is indexing it."""
    index = memory.conversation_index
    if not index.claim(conversation):
        return 0
    try:
        return (yield from _index_plan(memory, conversation, embed))
    finally:
        index.release(conversation)


def _index_plan(memory: Memory, conversation: str, embed: bool) -> Plan[int]:
    index = memory.conversation_index
    namespace = index_namespace(parts(conversation)[0])
    scope = index_scope(conversation)
    states = state_scope(scope)
    state: Fact | None
    state, last = yield StoreBatch(
        [
            StoreCall("get_fact", (namespace, states, conversation)),
            StoreCall("last_seq", (conversation,)),
        ]
    )
    through = _through(state)
    if last <= through:
        return 0
    worker = memory.worker
    if not worker.on_thread() and worker.busy(("index", conversation)):
        return 0  # this process's worker is at it (a search waits for it; a tool does not)
    now = time.time()
    if _holder(state, now) not in (None, index.owner):
        return 0  # another process is at it
    state = yield from _mark(memory, namespace, states, conversation, state, through, now)
    if state is None:
        return 0
    embedder = memory.embedder if embed and supports_vectors(memory.store) else None
    conversation_id = parts(conversation)[2]
    count = 0
    while through < last:
        records: list[Record] = yield StoreCall(
            "read",
            (conversation,),
            {"start_seq": max(1, through), "end_seq": min(last, through + INDEX_PAGE)},
        )
        if not records or records[-1].seq <= through:
            break  # the conversation went meanwhile
        docs = index_docs(conversation_id, records, through, index.tools)
        vectors: list[list[float]] | None = None
        if embedder is not None and docs:
            got = yield from embed_plan(memory, [d.value for d in docs], "document")
            if isinstance(got, EmbedderFailed):
                warnings.warn(
                    f"{got}; messages of {conversation} are indexed by their words, and "
                    "embedded when a search needs them",
                    EmbeddingWarning,
                    stacklevel=2,
                )
                embedder = None
            else:
                vectors = got
                index.embedded += len(docs)
        if docs:
            calls = []
            for i, doc in enumerate(docs):
                options: dict[str, Any] = {}
                if vectors is not None and embedder is not None:
                    options["embedding"] = Embedding(
                        embedder.name, len(vectors[i]), {WHOLE: vectors[i]}
                    )
                calls.append(StoreCall("restore_fact", (namespace, scope, doc), options))
            yield StoreBatch(calls)
            index.indexed += len(docs)
            count += len(docs)
        through = records[-1].seq
        state = yield from _mark(
            memory,
            namespace,
            states,
            conversation,
            state,
            through,
            time.time(),
            hold=through < last,
        )
        # a conversation erased or cleared while this page was read and written: what was
        # written after its deletion goes too (nothing of an erased user stays searchable)
        still: int = yield StoreCall("last_seq", (conversation,))
        if still < through:
            yield StoreBatch(
                [StoreCall("delete_fact", (namespace, scope, d.key)) for d in docs]
                + [StoreCall("delete_fact", (namespace, states, conversation))]
            )
            index.indexed -= len(docs)
            return count - len(docs)
        if state is None:
            break
    return count


def _mark(
    memory: Memory,
    namespace: str,
    states: str,
    conversation: str,
    state: Fact | None,
    through: int,
    now: float,
    hold: bool = True,
) -> Plan[Fact | None]:
    """Write the watermark ``through`` (with ``hold``, and this ``Memory``'s lease) if
    ``state`` is still the stored one; ``None`` when another writer came first."""
    value: dict[str, Any] = {"through": through}
    if hold:
        value.update(owner=memory.conversation_index.owner, until=now + LEASE_SECONDS)
    try:
        fact: Fact = yield StoreCall(
            "put_fact",
            (namespace, states, conversation, dumps(value)),
            {"text": "", "expected_version": state.version if state is not None else 0},
        )
    except VersionConflict:
        return None
    return fact


def catch_up_plan(memory: Memory, scope: Scope, all_conversations: bool) -> Plan[int]:
    """Index what is not yet indexed of the conversations a search looks in: the scope's
    conversation, or every conversation of its user."""
    conversation = scope.conversation_key
    _, user, _ = parts(conversation)
    if not all_conversations or user is None:
        return (yield from index_plan(memory, conversation))
    namespace = index_namespace(scope.namespace)
    iscope = index_scope(conversation)
    prefix = conversation[: conversation.rindex(":") + 1]
    states: list[Fact] = yield StoreCall("list_facts", (namespace, state_scope(iscope)))
    indexed = {f.key: _through(f) for f in states}
    count = 0
    before: tuple[float, str] | None = None
    while True:
        page: list[ConversationInfo] = yield StoreCall(
            "list_conversations", (prefix,), {"limit": LIST_PAGE, "before": before}
        )
        for info in page:
            if info.messages > indexed.get(info.key, 0):
                count += yield from index_plan(memory, info.key)
        if len(page) < LIST_PAGE:
            return count
        before = page[-1].cursor


def search_plan(
    memory: Memory,
    scope: Scope,
    query: str,
    limit: int,
    mode: str | None,
    all_conversations: bool,
    since: float | None,
    until: float | None,
) -> Plan[list[MessageHit]]:
    """The messages best for ``query`` in the scope's conversation (or all of its user's)."""
    if not isinstance(query, str):
        raise InvalidInput(f"query must be a str, not {type(query).__name__}")
    check_positive_int(limit, "limit")
    check_bool(all_conversations, "all_conversations")
    if mode is not None and mode not in SEARCH_MODES:  # before anything is indexed
        raise InvalidInput(f"mode must be one of {SEARCH_MODES}, not {mode!r}")
    if all_conversations and scope.conversation_id is None and scope.user_id is not None:
        # every conversation of a session's user that names none: only their prefix is used
        scope = replace(scope, conversation_id="-")
    conversation = scope.conversation_key
    yield from catch_up_plan(memory, scope, all_conversations)
    _, user, conversation_id = parts(conversation)
    pairs: tuple[tuple[str, Any], ...] = ()
    if not all_conversations or user is None:
        pairs = (("conversation", conversation_id),)
    where = (
        FactFilter(pairs, since, until) if pairs or since is not None or until is not None else None
    )
    index = Facts(
        memory, scope, namespace=index_namespace(scope.namespace), owner=index_scope(conversation)
    )
    docs = yield from index._rank(query, limit, mode, None, where)
    return (yield from hits_plan(conversation, docs))


def hits_plan(conversation: str, docs: Sequence[Fact]) -> Plan[list[MessageHit]]:
    """The hits of the documents ``docs``, with their messages and neighbours read from the
    log (one round trip); a document whose message is gone is left out."""
    prefix = conversation[: conversation.rindex(":") + 1] if conversation.count(":") == 2 else ""
    found: list[tuple[Fact, str, int]] = []
    for doc in docs:
        meta = doc.metadata or {}
        conversation_id, seq = meta.get("conversation"), meta.get("seq")
        if not isinstance(conversation_id, str) or not isinstance(seq, int):
            continue
        key = prefix + quote(conversation_id, safe="") if prefix else conversation
        found.append((doc, key, seq))
    if not found:
        return []
    reads: list[list[Record]] = yield StoreBatch(
        [
            StoreCall(
                "read",
                (key,),
                {
                    "start_seq": max(1, seq - CONTEXT_NEIGHBOURS),
                    "end_seq": seq + CONTEXT_NEIGHBOURS,
                },
            )
            for _, key, seq in found
        ]
    )
    hits: list[MessageHit] = []
    for (doc, _, seq), records in zip(found, reads, strict=True):
        own = next((r for r in records if r.seq == seq), None)
        if own is None:
            continue
        meta = doc.metadata or {}
        hits.append(
            MessageHit(
                str(meta["conversation"]),
                seq,
                own.message,
                own.created_at,
                doc.score or 0.0,
                own.run_id,
                tuple(records),
            )
        )
    return hits


def delete_plan(namespace: str, conversation: str, last: int) -> Plan[int]:
    """Remove the documents of ``conversation``'s first ``last`` messages and its watermark
    from the index (what clearing or retiring a conversation does)."""
    ns = index_namespace(namespace)
    scope = index_scope(conversation)
    conversation_id = parts(conversation)[2]
    deleted = 0
    for start in range(1, last + 1, INDEX_PAGE * 4):
        calls = [
            StoreCall("delete_fact", (ns, scope, doc_key(conversation_id, seq)))
            for seq in range(start, min(last, start + INDEX_PAGE * 4 - 1) + 1)
        ]
        done: list[bool] = yield StoreBatch(calls)
        deleted += sum(1 for d in done if d)
    yield StoreCall("delete_fact", (ns, state_scope(scope), conversation))
    return deleted


def count_indexed(store: Store, namespace: str) -> int:
    """How many messages of ``namespace`` the conversation index holds (for ``stats``)."""
    ns = index_namespace(namespace)
    return sum(
        len(store.list_facts(ns, scope))
        for scope in store.list_fact_scopes(ns, "")
        if not scope.endswith(STATE_SUFFIX)
    )


def check_since_until(since: object, until: object) -> tuple[float | None, float | None]:
    """A search's ``since`` and ``until``, validated (epoch seconds or aware datetimes)."""
    return check_time(since, "since"), check_time(until, "until")


def search(
    memory: Memory,
    scope: Scope,
    query: str,
    limit: int,
    mode: str | None,
    all_conversations: bool,
    since: object,
    until: object,
) -> list[MessageHit]:
    """Run :func:`search_plan` (after the worker's indexing under way: a search sees every
    message stored before it)."""
    start, end = check_since_until(since, until)
    memory.conversation_index.wait()
    return drive_sync(
        search_plan(memory, scope, query, limit, mode, all_conversations, start, end),
        memory.store,
        memory.hooks,
    )


async def asearch(
    memory: Memory,
    scope: Scope,
    query: str,
    limit: int,
    mode: str | None,
    all_conversations: bool,
    since: object,
    until: object,
) -> list[MessageHit]:
    """Async :func:`search`."""
    start, end = check_since_until(since, until)
    if memory.worker.busy_with(IndexDue):
        await asyncio.to_thread(memory.conversation_index.wait)
    return await drive_async(
        search_plan(memory, scope, query, limit, mode, all_conversations, start, end),
        memory.store,
        memory.hooks,
    )
