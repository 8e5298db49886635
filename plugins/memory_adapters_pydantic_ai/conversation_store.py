"""``MemoryConversationStore``: pydantic-ai's ``ConversationStore`` over any memory-adapters store.

Users of ``agent.run(..., conversation=...)`` keep their code and persist to SQLite,
PostgreSQL, MongoDB or memory://::

    store = MemoryConversationStore(Memory("postgresql://app@db/app"))
    conversation = await store.load(cid) or Conversation(conversation_id=cid)
    result = await agent.run(prompt, conversation=conversation)
    await store.save(result)

pydantic-ai keeps a conversation as a chain of entries (each one message, pointing at the entry
before it) and a record (head entry, usage, scope, branches, revision). They map onto the
store's two structures:

**Entries** go in append-only *segments*: conversation logs of the store, in the namespace
``<namespace>#pydantic-ai``. A segment is a chain: every entry in it follows the one before it,
so the history up to any entry is a seq range of its segment, one index range read. A save
that continues the segment's last entry appends to it (a conditional append, so two writers
continuing the same entry can never interleave); a save that branches off an earlier entry,
or loses that race, starts a new segment whose first entry points at its parent in another
segment. ``read_history`` therefore costs **one store query** for a conversation that never
branched, and one more per branch point it crosses. Each entry is stored in the neutral form
(:mod:`.mapping`) with pydantic-ai's own JSON in ``raw``, so it reads back exactly, and the
``before_save`` / ``after_save`` hooks (redaction, audit) see it like any other turn.

**Records** are kept in the fact table (namespace ``<namespace>#pydantic-ai-conversations``,
one fact per conversation id), with the locations of the head and branch entries. The record's
``revision`` is checked and the fact written with the fact's own version compare-and-swap, so
two writers saving from the same revision cannot both win: the loser gets
``ConversationConflict``, as the contract asks.

Deleting a conversation deletes its record; its entries are kept (a fork may still point into
them). An entry appended by a save that then lost the revision race stays in its segment,
unreachable and harmless; a retried ``write_record`` of the same record stores its entries once
(the revision is the append's idempotency key).
"""

from __future__ import annotations

import contextvars
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
)

from memory_adapters import AppendConflict, InvalidInput, Memory, Record, Scope
from memory_adapters.conversation import Conversation
from memory_adapters.errors import VersionConflict
from memory_adapters.facts import Fact
from memory_adapters.validation import MAX_VALUE_BYTES, check_id, dumps

from .mapping import META_KEY, from_messages, to_messages, validated

_RECORDS = TypeAdapter(ConversationRecord)
RECORD_OWNER = "records"
PARTS_PER_ENTRY = 3
"""At most this many neutral messages hold one entry (system, tool, user of one request)."""

CACHE_SIZE = 100_000
"""How many entry locations a store object remembers."""

_SCANNING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "memory_adapters_pydantic_ai.scanning", default=False
)


@dataclass(frozen=True, slots=True)
class Location:
    """Where an entry is: its segment, the seq of its first message, how many messages."""

    segment: str
    seq: int
    size: int

    @property
    def end(self) -> int:
        """The seq of the entry's last message."""
        return self.seq + self.size - 1

    def to_json(self) -> list[Any]:
        return [self.segment, self.seq, self.size]

    @classmethod
    def from_json(cls, value: Any) -> Location | None:
        if isinstance(value, list) and len(value) == 3:
            return cls(str(value[0]), int(value[1]), int(value[2]))
        return None


class MemoryConversationStore(ConversationStore):
    """A pydantic-ai ``ConversationStore`` over ``memory``'s store (see the module docstring).

    ``namespace`` (default: the ``Memory``'s) separates applications sharing a store.
    """

    def __init__(self, memory: Memory, *, namespace: str | None = None) -> None:
        self.memory = memory
        base = namespace or memory.scope.namespace
        check_id(base, "namespace")
        self.namespace = base
        self.records_namespace = base + "#pydantic-ai-conversations"
        self.segments_namespace = base + "#pydantic-ai"
        self._locations: OrderedDict[str, Location] = OrderedDict()

    # -- locations ------------------------------------------------------------------------------

    def _remember(self, entry_id: str, location: Location) -> None:
        self._locations[entry_id] = location
        self._locations.move_to_end(entry_id)
        if len(self._locations) > CACHE_SIZE:
            self._locations.popitem(last=False)

    def _segment(self, segment: str) -> Conversation:
        return Conversation(
            self.memory, Scope(namespace=self.segments_namespace, conversation_id=segment)
        )

    async def _locate(self, entry_id: str) -> Location:
        found = self._locations.get(entry_id)
        if found is not None:
            return found
        if _SCANNING.get():
            raise LookupError(f"no stored conversation entry {entry_id!r}")
        # Not seen by this store object (an id from elsewhere): look through the histories of
        # the stored conversations, which locate every entry they reach. Slow, and rare: the
        # ids a ConversationStore passes back come from reads this object made.
        token = _SCANNING.set(True)
        try:
            for record in await self.read_records():
                for tip in (record.head_id, *record.branches):
                    if tip is None:
                        continue
                    try:
                        await self.read_history(tip)
                    except LookupError:
                        continue
                    if entry_id in self._locations:
                        return self._locations[entry_id]
        finally:
            _SCANNING.reset(token)
        raise LookupError(f"no stored conversation entry {entry_id!r}")

    # -- records -------------------------------------------------------------------------------

    def _parse(self, fact: Fact) -> ConversationRecord:
        value: dict[str, Any] = fact.value
        for entry_id, location in (value.get("locations") or {}).items():
            loc = Location.from_json(location)
            if loc is not None and entry_id not in self._locations:
                self._remember(entry_id, loc)
        return _RECORDS.validate_python(value["record"])

    async def _fact(self, conversation_id: str) -> Fact | None:
        check_id(conversation_id, "conversation_id")
        return await self.memory.store.aget_fact(
            self.records_namespace, RECORD_OWNER, conversation_id
        )

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The record of ``conversation_id``, or ``None``: one fact read."""
        fact = await self._fact(conversation_id)
        return None if fact is None else self._parse(fact)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        """The records, newest first, optionally only those saved with ``scope`` (one read of
        every record: listing costs what the number of conversations costs)."""
        facts = await self.memory.store.alist_facts(self.records_namespace, RECORD_OWNER)
        records = [self._parse(f) for f in facts]
        if scope is not None:
            records = [r for r in records if r.scope == scope]
        records.sort(key=lambda r: r.updated_at, reverse=True)
        return records if limit is None else records[:limit]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Append ``new_entries`` and replace the record, if it is still at
        ``expected_revision`` (compare-and-swap on the record's fact version)."""
        current = await self._fact(record.conversation_id)
        stored = None if current is None else self._parse(current)
        if (stored.revision if stored is not None else None) != expected_revision:
            raise ConversationConflict(record.conversation_id)
        if new_entries:
            await self._append(record, list(new_entries))
        locations: dict[str, Any] = {}
        for entry_id in (record.head_id, record.forked_at, *record.branches):
            if entry_id is None:
                continue
            try:
                locations[entry_id] = (await self._locate(entry_id)).to_json()
            except LookupError:
                raise ConversationConflict(record.conversation_id) from None
        value = {"record": _RECORDS.dump_python(record, mode="json"), "locations": locations}
        data = dumps(value, "conversation record", MAX_VALUE_BYTES)
        try:
            await self.memory.store.aput_fact(
                self.records_namespace,
                RECORD_OWNER,
                record.conversation_id,
                data,
                text=" ".join(x for x in (record.conversation_id, record.scope) if x),
                expected_version=current.version if current is not None else 0,
            )
        except VersionConflict:
            raise ConversationConflict(record.conversation_id) from None

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Delete the record if it is at ``expected_revision``; the entries are kept."""
        current = await self._fact(conversation_id)
        if current is None or self._parse(current).revision != expected_revision:
            raise ConversationConflict(conversation_id)
        try:
            deleted = await self.memory.store.adelete_fact(
                self.records_namespace,
                RECORD_OWNER,
                conversation_id,
                expected_version=current.version,
            )
        except VersionConflict:
            raise ConversationConflict(conversation_id) from None
        if not deleted:
            raise ConversationConflict(conversation_id)

    # -- entries -------------------------------------------------------------------------------

    async def _append(self, record: ConversationRecord, entries: list[ConversationEntry]) -> None:
        messages = to_messages([e.message for e in entries])
        heads = [i for i, m in enumerate(messages) if m.meta[META_KEY]["part"] == 0]
        for i, entry in zip(heads, entries, strict=True):
            messages[i].meta["entry"] = entry.id
            messages[i].meta["parent"] = entry.parent_id
        parent = entries[0].parent_id
        segment: str | None = None
        first_seq = 0
        if parent is not None:
            try:
                at = await self._locate(parent)
            except LookupError:
                raise ConversationConflict(record.conversation_id) from None
            # where the parent is, so that a reader crossing into it needs no lookup
            messages[0].meta["parent_at"] = at.to_json()
            try:  # continue the parent's segment if the parent is still its last entry
                result = await self._segment(at.segment).aappend(
                    messages,
                    expected_last_seq=at.end,
                    idempotency_key=record.revision,
                    coerce=True,  # what a model made is stored, whatever it holds
                )
                segment, first_seq = at.segment, result.first_seq
            except AppendConflict:
                pass
        if segment is None:
            for candidate in (record.conversation_id, uuid.uuid4().hex):
                try:
                    result = await self._segment(candidate).aappend(
                        messages,
                        expected_last_seq=0,
                        idempotency_key=record.revision,
                        coerce=True,
                    )
                except (AppendConflict, InvalidInput):
                    continue
                segment, first_seq = candidate, result.first_seq
                break
        assert segment is not None
        bounds = [*heads, len(messages)]
        for k, entry in enumerate(entries):
            self._remember(
                entry.id, Location(segment, first_seq + bounds[k], bounds[k + 1] - bounds[k])
            )

    def _entries(self, segment: str, records: list[Record]) -> list[ConversationEntry]:
        """The entries in ``records`` (a seq range of one segment), skipping a cut first one."""
        groups: list[list[Record]] = []
        for r in records:
            info = r.message.meta.get(META_KEY) or {}
            if info.get("part") == 0 and "entry" in r.message.meta:
                groups.append([r])
            elif groups:
                groups[-1].append(r)
        # each entry from its raw in one validation; one whose raw is not pydantic-ai's (a
        # hook rewrote it) from its neutral form
        restored = validated([g[0].message.raw for g in groups])
        messages = [
            exact if exact is not None else _one(from_messages([r.message for r in g]))
            for g, exact in zip(groups, restored, strict=True)
        ]
        out: list[ConversationEntry] = []
        for group, message in zip(groups, messages, strict=True):
            head = group[0]
            entry_id = str(head.message.meta["entry"])
            parent = head.message.meta.get("parent")
            self._remember(entry_id, Location(segment, head.seq, len(group)))
            parent_at = Location.from_json(head.message.meta.get("parent_at"))
            if parent is not None and parent_at is not None:
                self._remember(str(parent), parent_at)
            out.append(
                ConversationEntry(
                    id=entry_id, parent_id=None if parent is None else str(parent), message=message
                )
            )
        return out

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The entries up to ``head_id``, oldest first (the last ``limit``): one seq-range read
        per segment the history crosses."""
        history: list[ConversationEntry] = []
        entry_id = head_id
        while entry_id is not None and (limit is None or len(history) < limit):
            at = await self._locate(entry_id)
            want = None if limit is None else limit - len(history)
            start = 1 if want is None else max(1, at.end - PARTS_PER_ENTRY * want - 1)
            records = await self._segment(at.segment).aread(start_seq=start, end_seq=at.end)
            chunk = self._entries(at.segment, records)
            if not chunk or chunk[-1].id != entry_id:
                raise LookupError(f"conversation entry {entry_id!r} is missing from its segment")
            if want is not None:
                chunk = chunk[-want:]
            history[:0] = chunk
            entry_id = chunk[0].parent_id
            if entry_id is not None and want is not None and len(chunk) == want:
                break  # the limit is reached
        return history

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """The entry ``entry_id`` (one read of its messages)."""
        at = await self._locate(entry_id)
        records = await self._segment(at.segment).aread(start_seq=at.seq, end_seq=at.end)
        entries = self._entries(at.segment, records)
        if not entries or entries[0].id != entry_id:
            raise LookupError(f"conversation entry {entry_id!r} is missing from its segment")
        return entries[0]


def _one(messages: list[ModelMessage]) -> ModelMessage:
    """One message from an entry rebuilt from its neutral form (a hook removed its ``raw``):
    the parts of a request split into several messages are put back together."""
    if len(messages) == 1:
        return messages[0]
    parts: list[ModelRequestPart] = []
    for m in messages:
        if isinstance(m, ModelRequest):
            parts.extend(m.parts)
    return ModelRequest(parts=parts)
