"""Export and import: memory as JSON Lines, streamed, between any two stores.

:func:`export_jsonl` writes a header line, then per conversation a ``conversation`` line and
one ``batch`` line per stored batch (turn), then the facts of each namespace as ``fact`` lines
with their history (working memory is facts in ``<namespace>#working``, so it travels as
facts). :func:`import_jsonl` reads such a file into any store: each batch is appended at the
seq it had (``expected_last_seq=first_seq - 1``) under an idempotency key derived from the
batch, and each fact is restored with its version, times and history
(:meth:`~memory_adapters.store.Store.restore_fact`), so seqs, batch boundaries, run ids, token
counts and fact versions come out identical, and importing the same file twice changes
nothing. The format is described in ``docs/cli.md``.

Nothing is held whole: messages are read ``PAGE`` at a time (one batch at most is kept while
it is written), conversations are listed a page at a time, facts a scope at a time, and import
handles one line at a time. Summaries are caches recomputed on demand and are not exported;
nor are fact vectors, which the next semantic search recomputes (``facts_to_embed``).

Both are written once as plans of store calls (:mod:`.steps`) and driven sync
(:func:`export_jsonl`, :func:`import_jsonl`) or async (:func:`aexport_jsonl`,
:func:`aimport_jsonl`).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import IO, TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from .errors import AppendConflict, ConflictError, InvalidInput, InvalidValue, ValueTooLarge
from .facts import Fact
from .messages import Entry, Message, Record
from .operations import WRITER_KINDS, FactChange, Writer
from .steps import Plan, StoreCall, drive_async, drive_sync
from .store import Store
from .validation import check_id, check_importance, check_int, describe, dumps

if TYPE_CHECKING:
    from .memory import Memory

FORMAT = "memory-adapters-export"
"""The ``format`` of an export's header line."""

VERSION = 1
"""The version of the export format this module writes and reads."""

PAGE = 1000
"""Messages read per store call, and conversations listed per call."""

WORKING_SUFFIX = "#working"


class Progress(Protocol):
    """Where export and import report progress (the CLI draws rich bars from it)."""

    def begin(self, what: str, total: int | None) -> None:
        """Work on ``what`` (``"messages"``, ``"facts"``) starts; ``total`` if known."""

    def advance(self, what: str, amount: int = 1) -> None:
        """``amount`` more of ``what`` done."""


@dataclass(slots=True)
class TransferCounts:
    """What an export wrote or an import read. For an import, ``batches`` and ``facts`` count
    what was written; ``skipped_batches`` and ``skipped_facts`` what the store held already
    (all of it, when the same file is imported again)."""

    conversations: int = 0
    batches: int = 0
    messages: int = 0
    facts: int = 0
    history: int = 0
    skipped_batches: int = 0
    skipped_facts: int = 0


def _namespace_prefix(namespace: str) -> str:
    return quote(namespace, safe="") + ":"


def _user_prefix(namespace: str, user_id: str) -> str:
    """The prefix of a user's conversation keys (``Scope.conversation_key``)."""
    return _namespace_prefix(namespace) + quote(user_id, safe="") + ":"


def _line(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields}, ensure_ascii=False, separators=(",", ":")) + "\n"


# -- listing --------------------------------------------------------------------------------


def _fact_scopes(namespace: str, user_id: str | None) -> Plan[list[str]]:
    """The fact scopes of a namespace to export: all of them, or a user's (``user:<u>``,
    ``user:<u>/agent:*`` and ``conversation:<key>`` of the user's conversations)."""
    if user_id is None:
        every: list[str] = yield StoreCall("list_fact_scopes", (namespace, ""))
        return every
    owner = "user:" + quote(user_id, safe="")
    owned: list[str] = yield StoreCall("list_fact_scopes", (namespace, owner))
    scopes = [s for s in owned if s == owner or s.startswith(owner + "/")]
    convs: list[str] = yield StoreCall(
        "list_fact_scopes", (namespace, "conversation:" + _user_prefix(namespace, user_id))
    )
    return scopes + convs


def _working_scopes(namespace: str, user_id: str | None) -> Plan[list[str]]:
    prefix = "" if user_id is None else _user_prefix(namespace, user_id)
    scopes: list[str] = yield StoreCall("list_fact_scopes", (namespace + WORKING_SUFFIX, prefix))
    return scopes


def count_facts(store: Any, namespace: str) -> int:
    """How many unexpired facts ``namespace`` holds (a scope at a time), for ``stats``."""
    total = 0
    for scope in store.list_fact_scopes(namespace, ""):
        total += len(store.list_facts(namespace, scope))
    return total


# -- export ---------------------------------------------------------------------------------


def _change_json(change: Any) -> dict[str, Any]:
    return asdict(change)


def _export_plan(
    out: IO[str],
    namespaces: Sequence[str] | None,
    default_namespace: str,
    user_id: str | None,
    progress: Progress | None,
    with_history: bool,
) -> Plan[TransferCounts]:
    counts = TransferCounts()
    # First pass: how many messages (for the progress bar), and which namespaces hold
    # conversations; a page of conversations at a time.
    if namespaces is None:
        prefixes = [""] if user_id is None else [_user_prefix(default_namespace, user_id)]
    else:
        prefixes = [
            _namespace_prefix(ns) if user_id is None else _user_prefix(ns, user_id)
            for ns in namespaces
        ]
    found: set[str] = set()
    total_conversations = total_messages = 0
    for prefix in prefixes:
        before: tuple[float, str] | None = None
        while True:
            page: list[Any] = yield StoreCall(
                "list_conversations", (prefix,), {"limit": PAGE, "before": before}
            )
            for info in page:
                found.add(info.namespace)
                total_conversations += 1
                total_messages += info.messages
            if len(page) < PAGE:
                break
            before = (page[-1].last_activity, page[-1].key)
    if namespaces is None:
        chosen = sorted(found | {default_namespace}) if user_id is None else [default_namespace]
    else:
        chosen = list(dict.fromkeys(namespaces))
    out.write(
        json.dumps(
            {
                "format": FORMAT,
                "version": VERSION,
                "type": "header",
                "exported_at": time.time(),
                "namespaces": chosen,
                "user_id": user_id,
                "conversations": total_conversations,
                "messages": total_messages,
            },
            ensure_ascii=False,
        )
        + "\n"
    )
    if progress is not None:
        progress.begin("messages", total_messages)
        progress.begin("facts", None)
    for ns in chosen:
        prefix = _namespace_prefix(ns) if user_id is None else _user_prefix(ns, user_id)
        before = None
        while True:
            page = yield StoreCall(
                "list_conversations", (prefix,), {"limit": PAGE, "before": before}
            )
            for info in page:
                yield from _export_conversation(out, info, counts, progress)
            if len(page) < PAGE:
                break
            before = (page[-1].last_activity, page[-1].key)
        fact_scopes: list[str] = yield from _fact_scopes(ns, user_id)
        for scope in fact_scopes:
            yield from _export_facts(out, ns, scope, counts, progress, with_history)
        working: list[str] = yield from _working_scopes(ns, user_id)
        for scope in working:
            yield from _export_facts(
                out, ns + WORKING_SUFFIX, scope, counts, progress, with_history
            )
    return counts


def _export_conversation(
    out: IO[str], info: Any, counts: TransferCounts, progress: Progress | None
) -> Plan[None]:
    """A ``conversation`` line and its ``batch`` lines, up to the seq the listing saw (a batch
    is written whole or not at all, so that seq ends one)."""
    counts.conversations += 1
    out.write(
        _line(
            "conversation",
            key=info.key,
            namespace=info.namespace,
            user_id=info.user_id,
            conversation_id=info.conversation_id,
            messages=info.messages,
            tokens=info.tokens,
            created_at=info.created_at,
            last_activity=info.last_activity,
        )
    )
    batch: list[Record] = []
    seq = 1
    while seq <= info.messages:
        page: list[Record] = yield StoreCall(
            "read", (info.key,), {"start_seq": seq, "end_seq": info.messages, "limit": PAGE}
        )
        if not page:
            break
        for record in page:
            if batch and record.batch != batch[0].batch:
                _write_batch(out, info.key, batch, counts, progress)
                batch = []
            batch.append(record)
        seq = page[-1].seq + 1
    if batch:
        _write_batch(out, info.key, batch, counts, progress)


def _write_batch(
    out: IO[str], key: str, batch: list[Record], counts: TransferCounts, progress: Progress | None
) -> None:
    first = batch[0]
    out.write(
        _line(
            "batch",
            conversation=key,
            first_seq=first.seq,
            run_id=first.run_id,
            created_at=first.created_at,
            messages=[
                {"message": r.message.to_dict(), "tokens": r.tokens, "created_at": r.created_at}
                for r in batch
            ],
        )
    )
    counts.batches += 1
    counts.messages += len(batch)
    if progress is not None:
        progress.advance("messages", len(batch))


def _export_facts(
    out: IO[str],
    namespace: str,
    scope: str,
    counts: TransferCounts,
    progress: Progress | None,
    with_history: bool,
) -> Plan[None]:
    facts: list[Fact] = yield StoreCall("list_facts", (namespace, scope))
    for fact in facts:
        history: list[Any] = []
        if with_history:
            history = yield StoreCall("fact_history", (namespace, scope, fact.key))
        out.write(
            _line(
                "fact",
                namespace=namespace,
                scope=scope,
                key=fact.key,
                value=fact.value,
                version=fact.version,
                importance=fact.importance,
                created_at=fact.created_at,
                updated_at=fact.updated_at,
                expires_at=fact.expires_at,
                history=[_change_json(c) for c in history],
            )
        )
        counts.facts += 1
        counts.history += len(history)
        if progress is not None:
            progress.advance("facts")


def export_jsonl(
    memory: Memory,
    out: IO[str],
    *,
    namespace: str | Sequence[str] | None = None,
    user_id: str | None = None,
    progress: Progress | None = None,
) -> TransferCounts:
    """Write the memory of ``namespace`` (a name or several; ``None``: the Memory's namespace
    and every namespace holding a conversation) — of one user with ``user_id`` — to ``out`` as
    JSON Lines, streamed; return what was written."""
    return drive_sync(
        _export(memory, out, namespace, user_id, progress), memory.store, memory.hooks
    )


async def aexport_jsonl(
    memory: Memory,
    out: IO[str],
    *,
    namespace: str | Sequence[str] | None = None,
    user_id: str | None = None,
    progress: Progress | None = None,
) -> TransferCounts:
    """Async :func:`export_jsonl` (``out`` is written synchronously)."""
    plan = _export(memory, out, namespace, user_id, progress)
    return await drive_async(plan, memory.store, memory.hooks)


def _export(
    memory: Memory,
    out: IO[str],
    namespace: str | Sequence[str] | None,
    user_id: str | None,
    progress: Progress | None,
) -> Plan[TransferCounts]:
    from .scope import Scope

    names = [namespace] if isinstance(namespace, str) else namespace
    for ns in names or ():
        Scope(namespace=ns, user_id=user_id)  # validates both: the same errors as a session
    if user_id is not None:
        Scope(user_id=user_id)
    # A store without history (the contract's default method) exports facts without it.
    with_history = type(memory.store).fact_history is not Store.fact_history
    return _export_plan(out, names, memory.namespace, user_id, progress, with_history)


# -- import ---------------------------------------------------------------------------------


def batch_idempotency_key(conversation: str, first_seq: int, entries: Iterable[Entry]) -> str:
    """The idempotency key an imported batch is appended under: from its conversation, first
    seq and messages, so that importing it again (from this file or from an export of the
    store it went into) is recognized and writes nothing."""
    digest = hashlib.sha256(f"{conversation}\0{first_seq}".encode())
    for entry in entries:
        digest.update(b"\0" + entry.data.encode("utf-8") + b"\0" + str(entry.tokens).encode())
    return f"memory-adapters-import:{first_seq}:{digest.hexdigest()[:32]}"


def _bad(lineno: int, why: str) -> InvalidInput:
    return InvalidInput(f"line {lineno} of the export: {why}")


def _import_plan(
    lines: Iterable[str], max_bytes: int, progress: Progress | None, at: list[int]
) -> Plan[TransferCounts]:
    """The import; ``at[0]`` follows the number of the line being imported (a store's error
    leaves the plan from the driver, and is then told with the line's number)."""
    counts = TransferCounts()
    header_seen = False
    for lineno, line in enumerate(lines, start=1):
        at[0] = lineno
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise _bad(lineno, f"not JSON ({exc})") from None
        if not isinstance(item, dict):
            raise _bad(lineno, "not a JSON object")
        if not header_seen:
            if item.get("format") != FORMAT:
                raise _bad(lineno, f"not a {FORMAT} file (its first line has no format {FORMAT!r})")
            if item.get("version") != VERSION:
                raise _bad(
                    lineno,
                    f"export format version {item.get('version')!r}; this version of "
                    f"memory-adapters reads version {VERSION}",
                )
            header_seen = True
            if progress is not None:
                total = item.get("messages")
                progress.begin("messages", total if isinstance(total, int) else None)
                progress.begin("facts", None)
            continue
        kind = item.get("type")
        try:
            if kind == "conversation":
                counts.conversations += 1
            elif kind == "batch":
                yield from _import_batch(item, max_bytes, counts)
                if progress is not None:
                    progress.advance("messages", len(item["messages"]))
            elif kind == "fact":
                namespace, scope, fact, history = _fact_of(item)
                written: bool = yield StoreCall(
                    "restore_fact", (namespace, scope, fact), {"history": history}
                )
                if written:
                    counts.facts += 1
                    counts.history += len(history)
                else:
                    counts.skipped_facts += 1
                if progress is not None:
                    progress.advance("facts")
            else:
                raise _bad(lineno, f"unknown line type {kind!r}")
        except (KeyError, TypeError, AttributeError) as exc:
            raise _bad(lineno, f"a {kind} line without a valid {exc}") from None
        except InvalidInput as exc:
            raise _bad(lineno, str(exc)) from None
    if not header_seen:
        raise InvalidInput(f"an empty file is not a {FORMAT} file")
    return counts


# The store contract takes arguments the core validated: an import validates each line as the
# core validates what an application writes (the same typed errors), before the store sees it.


def _text(value: object, what: str) -> str:
    """A store key or scope: a non-empty ``str`` without control characters (no length limit:
    a key is built of several identifiers)."""
    if not isinstance(value, str) or not value:
        raise InvalidValue(f"{what} must be a non-empty str, not {describe(value)}")
    if any(c < " " or c == "\x7f" for c in value):
        raise InvalidValue(f"{what} must not contain control characters")
    return value


def _time(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidValue(f"{what} must be a finite number (epoch seconds), not {describe(value)}")
    return float(value)


def _optional_id(value: object, what: str) -> str | None:
    return None if value is None else check_id(value, what)


def _optional_seq(value: object, what: str) -> int | None:
    return None if value is None else check_int(value, what, minimum=1)


def _change_of(c: object, key: str) -> FactChange:
    if not isinstance(c, dict):
        raise InvalidValue(f"a history entry must be an object, not {describe(c)}")
    op = c["op"]
    if op not in ("put", "forget"):
        raise InvalidValue(f"a history entry's op is 'put' or 'forget', not {describe(op)}")
    if c["key"] != key:
        raise InvalidValue(f"a history entry of fact {key!r} names another key")
    value = c.get("value")
    if op == "put":
        dumps(value, "a history entry's value")
    w = c["writer"]
    if not isinstance(w, dict) or w.get("kind") not in WRITER_KINDS:
        raise InvalidValue(
            "a history entry's writer must have kind " + " or ".join(map(repr, WRITER_KINDS))
        )
    writer = Writer(
        w["kind"],
        _optional_id(w.get("run_id"), "writer run_id"),
        _optional_id(w.get("framework"), "writer framework"),
        _optional_id(w.get("agent"), "writer agent"),
        _optional_id(w.get("model"), "writer model"),
        conversation=_optional_id(w.get("conversation"), "writer conversation"),
        start_seq=_optional_seq(w.get("start_seq"), "writer start_seq"),
        end_seq=_optional_seq(w.get("end_seq"), "writer end_seq"),
    )
    version = check_int(c["version"], "a history entry's version", minimum=1)
    return FactChange(key, version, None if op == "forget" else value, op, _time(c["at"], "at"),
                      writer)  # fmt: skip


def _fact_of(item: dict[str, Any]) -> tuple[str, str, Fact, list[FactChange]]:
    """A ``fact`` line, validated: namespace, scope, the fact, its history."""
    key = check_id(item["key"], "fact key")
    value = item["value"]
    dumps(value, "fact value")
    expires_at = item.get("expires_at")
    fact = Fact(
        key=key,
        value=value,
        version=check_int(item["version"], "version", minimum=1),
        importance=check_importance(item.get("importance", 0.0)),
        created_at=_time(item["created_at"], "created_at"),
        updated_at=_time(item["updated_at"], "updated_at"),
        expires_at=None if expires_at is None else _time(expires_at, "expires_at"),
    )
    history = item.get("history") or []
    if not isinstance(history, list):
        raise InvalidValue(f"history must be a list, not {describe(history)}")
    changes = [_change_of(c, key) for c in history]
    return _text(item["namespace"], "namespace"), _text(item["scope"], "scope"), fact, changes


def _import_batch(item: dict[str, Any], max_bytes: int, counts: TransferCounts) -> Plan[None]:
    key = _text(item["conversation"], "conversation")
    first_seq = check_int(item["first_seq"], "first_seq", minimum=1)
    run_id = _optional_id(item.get("run_id"), "run_id")
    messages = item["messages"]
    if not isinstance(messages, list) or not messages:
        raise InvalidValue("a batch's messages must be a non-empty list")
    entries = [
        Entry.of(Message.from_dict(m["message"]), check_int(m["tokens"], "tokens"), max_bytes)
        for m in messages
    ]
    size = sum(len(e.data) for e in entries)
    if size > max_bytes:
        raise ValueTooLarge(f"the batch is about {size} bytes; the limit is {max_bytes}")
    result: Any = yield StoreCall(
        "append",
        (key, entries),
        {
            "run_id": run_id,
            "expected_last_seq": first_seq - 1,
            "idempotency_key": batch_idempotency_key(key, first_seq, entries),
        },
    )
    if result.first_seq != first_seq:
        raise AppendConflict(key, first_seq - 1, result.first_seq - 1)
    if result.duplicate:
        counts.skipped_batches += 1
    else:
        counts.batches += 1
        counts.messages += len(entries)


def import_jsonl(
    memory: Memory, inp: Iterable[str], progress: Progress | None = None
) -> TransferCounts:
    """Read an export (:func:`export_jsonl`) from ``inp`` (a text file, or any iterable of its
    lines) into the memory's store, a line at a time; return what was written and what the
    store held already. Raises :class:`~memory_adapters.errors.InvalidInput` naming the line
    of a malformed file, :class:`~memory_adapters.errors.AppendConflict` when the store holds
    other messages in a conversation of the file."""
    at = [0]
    plan = _import_plan(inp, memory.max_turn_bytes, progress, at)
    try:
        return drive_sync(plan, memory.store, memory.hooks)
    except AppendConflict as exc:
        raise _conflict(at[0], exc) from None


async def aimport_jsonl(
    memory: Memory, inp: Iterable[str], progress: Progress | None = None
) -> TransferCounts:
    """Async :func:`import_jsonl` (``inp`` is read synchronously)."""
    at = [0]
    plan = _import_plan(inp, memory.max_turn_bytes, progress, at)
    try:
        return await drive_async(plan, memory.store, memory.hooks)
    except AppendConflict as exc:
        raise _conflict(at[0], exc) from None


def _conflict(lineno: int, exc: AppendConflict) -> ConflictError:
    return ConflictError(
        f"line {lineno} of the export: conversation {exc.conversation!r} ends at seq "
        f"{exc.actual} in the store, not at {exc.expected} as in the export: the store holds "
        "other messages there (import into a store without that conversation, or erase it "
        "there first); nothing of this batch was written"
    )
