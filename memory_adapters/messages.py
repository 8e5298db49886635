"""The neutral message form every store keeps and every adapter maps to and from.

A :class:`Message` holds what any chat framework can express: a role, text, tool calls
(id, name, JSON args) and tool results (the call's id, JSON content). Alongside it, each
message may carry ``raw``, the framework's own serialized message, and ``framework``, its
name, so that a message written by pydantic-ai is read back by pydantic-ai losslessly while
LangChain reads the neutral form. ``raw`` is a JSON value, or :class:`RawJSON`: the framework's
JSON *text*, stored and read back as text, never parsed by the core, so that the framework
validates a whole window from text in one call.

A :class:`Record` is a stored message: its gapless ``seq`` within the conversation, the
token count computed once when it was written, the batch (turn) it was appended in, the run
id and the time.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, cast

from .errors import InvalidValue, ValueTooLarge
from .validation import check_json, describe, dumps, json_safe

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(("system", "user", "assistant", "tool"))


RAW_SEPARATOR = "\x1e"
"""Ends the neutral JSON of a stored message whose raw JSON text follows it. JSON text never
holds this character (control characters are escaped in strings, and not whitespace)."""


class RawJSON(str):
    """A framework's own message as JSON text (``Message.raw``): stored as it is (``"raw_json"``
    in :meth:`Message.to_dict`), read back as text, and parsed only by the framework that made
    it. The adapter that makes one guarantees it is valid JSON."""

    __slots__ = ()


@dataclass(slots=True)
class ToolCall:
    """A model's request to call a tool."""

    id: str
    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ToolResult:
    """The answer to the tool call whose id is ``id``."""

    id: str
    content: Any = None
    name: str | None = None
    is_error: bool = False


@dataclass(slots=True)
class Message:
    """One message in the neutral form.

    ``role`` is ``"system"``, ``"user"``, ``"assistant"`` (which may hold ``tool_calls``) or
    ``"tool"`` (which holds ``tool_results``). ``meta`` is free-form JSON: adapters mark, for
    example, messages of a failed run with ``{"failed": true}``.
    """

    role: Role
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    framework: str | None = None
    raw: Any = None
    meta: dict[str, Any] = field(default_factory=dict)

    # --- constructors ------------------------------------------------------------------

    @classmethod
    def system(cls, text: str) -> Message:
        """A system prompt."""
        return cls("system", text)

    @classmethod
    def user(cls, text: str) -> Message:
        """A user turn's prompt."""
        return cls("user", text)

    @classmethod
    def assistant(cls, text: str = "", tool_calls: list[ToolCall] | None = None) -> Message:
        """A model response, optionally calling tools."""
        return cls("assistant", text, tool_calls=list(tool_calls or []))

    @classmethod
    def tool(cls, *results: ToolResult) -> Message:
        """Results of earlier tool calls."""
        return cls("tool", tool_results=list(results))

    # --- serialization -----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; keys with default values are left out."""
        d: dict[str, Any] = {"role": self.role}
        if self.text:
            d["text"] = self.text
        if self.tool_calls:
            d["tool_calls"] = [
                {"id": c.id, "name": c.name, "args": c.args} for c in self.tool_calls
            ]
        if self.tool_results:
            d["tool_results"] = [
                {"id": r.id, "content": r.content, "name": r.name, "is_error": r.is_error}
                for r in self.tool_results
            ]
        if self.framework is not None:
            d["framework"] = self.framework
        if isinstance(self.raw, RawJSON):
            d["raw_json"] = str(self.raw)
        elif self.raw is not None:
            d["raw"] = self.raw
        if self.meta:
            d["meta"] = self.meta
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        """Inverse of :meth:`to_dict`."""
        return cls(
            role=d["role"],
            text=d.get("text", ""),
            tool_calls=[
                ToolCall(c["id"], c["name"], c.get("args") or {}) for c in d.get("tool_calls", ())
            ],
            tool_results=[
                ToolResult(r["id"], r.get("content"), r.get("name"), bool(r.get("is_error")))
                for r in d.get("tool_results", ())
            ],
            framework=d.get("framework"),
            raw=RawJSON(d["raw_json"]) if "raw_json" in d else d.get("raw"),
            meta=d.get("meta") or {},
        )

    def validate(self) -> Message:
        """Raise :class:`InvalidValue` unless this message can be stored exactly."""
        self.check_fields()
        check_json(self.to_dict(), "message")
        return self

    def serialize(self, limit: int) -> str:
        """Validate this message and return the text a store keeps (at most ``limit`` UTF-8
        bytes): its JSON, and when ``raw`` is :class:`RawJSON`, the JSON of the rest followed
        by :data:`RAW_SEPARATOR` and the raw text as it is (no escaping, and no parsing of it
        when read back: :meth:`Record.from_row`)."""
        self.check_fields()
        raw = self.raw
        if not isinstance(raw, RawJSON) or RAW_SEPARATOR in raw:
            return dumps(self.to_dict(), "message", limit)
        d = self.to_dict()
        del d["raw_json"]
        head = dumps(d, "message", limit)
        try:
            size = len(head.encode("utf-8")) + 1 + len(raw.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidValue("message raw JSON is not valid Unicode (lone surrogate)") from None
        if size > limit:
            raise ValueTooLarge(f"message is {size} bytes as JSON; the limit is {limit}")
        return f"{head}{RAW_SEPARATOR}{raw}"

    def check_fields(self) -> None:
        """The checks of :meth:`validate` short of walking the JSON content."""
        if type(self.role) is not str or self.role not in ROLES:
            raise InvalidValue(f"role must be one of {sorted(ROLES)}, not {describe(self.role)}")
        if not isinstance(self.text, str):
            raise InvalidValue(f"message text must be a str, not {type(self.text).__name__}")
        if not isinstance(self.tool_calls, list | tuple) or not isinstance(
            self.tool_results, list | tuple
        ):
            raise InvalidValue("tool_calls and tool_results must be lists")
        if self.framework is not None and not isinstance(self.framework, str):
            raise InvalidValue(f"framework must be a str, not {type(self.framework).__name__}")
        if not isinstance(self.meta, dict):
            raise InvalidValue(f"meta must be a dict, not {type(self.meta).__name__}")
        for c in self.tool_calls:
            if (
                not isinstance(c, ToolCall)
                or not isinstance(c.id, str)
                or not isinstance(c.name, str)
            ):
                raise InvalidValue("tool_calls must be ToolCall(id: str, name: str, args: dict)")
            if not isinstance(c.args, dict):
                raise InvalidValue(f"tool call {c.name!r} args must be a dict")
        for r in self.tool_results:
            if not isinstance(r, ToolResult) or not isinstance(r.id, str):
                raise InvalidValue("tool_results must be ToolResult(id: str, content)")
        if self.tool_results and self.role != "tool":
            raise InvalidValue("only a 'tool' message carries tool_results")
        if self.tool_calls and self.role != "assistant":
            raise InvalidValue("only an 'assistant' message carries tool_calls")

    def coerced(self) -> Message:
        """A copy holding only plain JSON: what :func:`~memory_adapters.validation.json_safe`
        makes of each value. For a message a framework accepted from a model, which must be
        stored whatever the model put in it."""
        return Message(
            self.role,
            json_safe(self.text) if isinstance(self.text, str) else str(self.text),
            tool_calls=[
                ToolCall(
                    json_safe(c.id),
                    json_safe(c.name),
                    args if isinstance(args := json_safe(c.args), dict) else {"args": args},
                )
                for c in self.tool_calls
            ],
            tool_results=[
                ToolResult(
                    json_safe(r.id),
                    json_safe(r.content),
                    None if r.name is None else json_safe(r.name),
                    bool(r.is_error),
                )
                for r in self.tool_results
            ],
            framework=self.framework,
            raw=json_safe_raw(self.raw),
            meta=json_safe(self.meta),
        )

    def token_text(self) -> str:
        """The text a token counter sees for this message."""
        parts = [self.text] if self.text else []
        for c in self.tool_calls:
            parts.append(c.name)
            parts.append(json.dumps(c.args, ensure_ascii=False, separators=(",", ":")))
        for r in self.tool_results:
            content = r.content
            parts.append(
                content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            )
        return "\n".join(parts)


def json_safe_raw(raw: Any) -> Any:
    """What :meth:`Message.coerced` keeps of ``raw``: JSON text as it is (when it is text
    JSON can hold), else :func:`~memory_adapters.validation.json_safe` of the value."""
    if isinstance(raw, RawJSON):
        safe = json_safe(str(raw))
        return raw if safe == raw else None  # text a framework cannot have made: rebuild
    return json_safe(raw)


@dataclass(slots=True)
class Entry:
    """A message prepared for a store: validated, serialized once, counted once."""

    role: str
    data: str
    tokens: int

    @classmethod
    def of(cls, message: Message, tokens: int, limit: int) -> Entry:
        """Validate and serialize ``message``."""
        return cls(message.role, message.serialize(limit), tokens)


@dataclass(slots=True)
class Record:
    """A stored message."""

    seq: int
    message: Message
    tokens: int
    batch: int
    """The seq of the first message of the batch (turn) this one was appended in."""
    run_id: str | None = None
    created_at: float = 0.0

    @classmethod
    def from_row(
        cls,
        seq: int,
        data: str | dict[str, Any],
        tokens: int,
        batch: int,
        run_id: str | None,
        created_at: float,
    ) -> Record:
        """Build a record from a store row whose message is the text
        :meth:`Message.serialize` made, or an already parsed dict."""
        return cls(
            int(seq), decode_messages([data])[0], int(tokens), int(batch), run_id, float(created_at)
        )

    @classmethod
    def from_rows(
        cls, rows: Iterable[tuple[int, str | dict[str, Any], int, int, str | None, float]]
    ) -> list[Record]:
        """:meth:`from_row` for many rows (a window): their messages decoded together
        (:func:`decode_messages`)."""
        rows = list(rows)
        messages = decode_messages([row[1] for row in rows])
        return [
            cls(int(row[0]), message, int(row[2]), int(row[3]), row[4], float(row[5]))
            for row, message in zip(rows, messages, strict=True)
        ]


DECODED_CACHE_CHARS = 8_000_000
"""How many characters of stored message text each decoded-message cache keys (least recently
read first out; 0 turns the caches off, lookups included): :func:`decode_messages`' neutral
messages, and an adapter's own message objects (LangChain's; see :class:`TextCache`). Full,
the neutral cache holds about 27 MB (messages of a few hundred characters). A window read
again on the next turn of its conversation is mostly the same rows: each is parsed once per
process, not once per turn."""

_CACHED_TEXT_MAX = 65_536
"""A stored message longer than this is decoded every time it is read, never kept."""

V = TypeVar("V")


class TextCache(Generic[V]):
    """Values decoded from stored JSON texts, by the text, least recently read first out, within
    :data:`DECODED_CACHE_CHARS` characters of text (read at each call, so that setting it to 0
    turns every cache off). It holds values nobody else does: whoever reads one hands out a
    copy of it. Thread-safe; one per kind of value, per process (the content is the key, so
    every ``Memory`` shares it). A child process forked while another thread held the lock
    gets a new one (:func:`os.register_at_fork`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[str, V] = {}
        self.chars = 0
        _caches.add(self)

    def get_many(self, texts: Sequence[str | None]) -> list[V | None]:
        """The value kept for each of ``texts`` (each found now the most recently read), or
        ``None`` (for a ``None`` text too)."""
        if DECODED_CACHE_CHARS <= 0:
            return [None] * len(texts)
        out: list[V | None] = []
        with self.lock:
            entries = self.entries
            for text in texts:
                value = entries.pop(text, None) if text is not None else None
                if value is not None:
                    entries[text] = value  # type: ignore[index]
                out.append(value)
        return out

    def fits(self, text: str) -> bool:
        """Whether :meth:`keep` would keep a value for ``text`` (the caches are on and ``text``
        is not too long): to make the value only when it will be kept."""
        return DECODED_CACHE_CHARS > 0 and len(text) <= _CACHED_TEXT_MAX

    def keep(self, text: str, value: V) -> bool:
        """Keep ``value`` as the decoded ``text``, the least recently read values out until the
        cache fits; ``False`` (nothing kept) when the caches are off or ``text`` is too long."""
        limit = DECODED_CACHE_CHARS
        if limit <= 0 or len(text) > _CACHED_TEXT_MAX:
            return False
        with self.lock:
            entries = self.entries
            if text not in entries:
                self.chars += len(text)
            entries[text] = value
            while self.chars > limit and entries:
                oldest = next(iter(entries))
                del entries[oldest]
                self.chars -= len(oldest)
        return True

    def clear(self) -> None:
        """Forget every value."""
        with self.lock:
            self.entries.clear()
            self.chars = 0


_caches: weakref.WeakSet[TextCache[Any]] = weakref.WeakSet()


def _unlock_after_fork() -> None:
    """In a forked child, a lock another thread of the parent held stays held forever: every
    cache gets a new one (its entries are whole: only a finished change is ever visible)."""
    for cache in list(_caches):
        cache.lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_unlock_after_fork)

_decoded: TextCache[Message] = TextCache()


def decode_messages(datas: Sequence[str | dict[str, Any]]) -> list[Message]:
    """The messages stored as ``datas``: each the text :meth:`Message.serialize` made (or an
    already parsed dict). Texts read before in this process are not parsed again: their decoded
    form is kept (:data:`DECODED_CACHE_CHARS`), and each call gets new ``Message`` objects,
    whose lists and dicts are its own to change. The others are parsed in one call
    (:func:`loads_many`)."""
    out: list[Message | None] = [None] * len(datas)
    raws: list[str | None] = [None] * len(datas)
    texts: list[str | None] = [None] * len(datas)
    for i, data in enumerate(datas):
        if isinstance(data, str):
            head, sep, raw = data.partition(RAW_SEPARATOR)
            texts[i] = head
            if sep:
                raws[i] = raw
        else:
            out[i] = Message.from_dict(data)
    heads: list[str] = []
    missing: list[int] = []
    for i, (text, cached) in enumerate(zip(texts, _decoded.get_many(texts), strict=True)):
        if cached is not None:
            out[i] = _fresh(cached, raws[i])
        elif text is not None:
            heads.append(text)
            missing.append(i)
    if missing:
        parsed = loads_many(heads)
        for i, head, d in zip(missing, heads, parsed, strict=True):
            message = Message.from_dict(d)
            if _decoded.keep(head, message):
                out[i] = _fresh(message, raws[i])
            else:  # kept by nobody else: handed out as it is
                if raws[i] is not None:
                    message.raw = RawJSON(cast(str, raws[i]))
                out[i] = message
    return cast(list[Message], out)


def _fresh(message: Message, raw: str | None) -> Message:
    """A copy of the cached ``message`` sharing nothing mutable with it, with ``raw`` (the text
    stored after :data:`RAW_SEPARATOR`) as its raw JSON when given."""
    return Message(
        message.role,
        message.text,
        [ToolCall(c.id, c.name, copied(c.args)) for c in message.tool_calls]
        if message.tool_calls
        else [],
        [ToolResult(r.id, copied(r.content), r.name, r.is_error) for r in message.tool_results]
        if message.tool_results
        else [],
        message.framework,
        RawJSON(raw) if raw is not None else copied(message.raw),
        copied(message.meta) if message.meta else {},
    )


def copied(value: Any) -> Any:
    """A copy of the JSON value ``value``: its dicts and lists new (str, numbers, ``None`` and
    :class:`RawJSON` cannot change, and are the same). What a cache of decoded values (see
    :class:`TextCache`) hands out of a value it keeps."""
    kind = type(value)
    if kind is dict:
        out = value.copy()
        for k, v in out.items():
            if type(v) in _CONTAINERS:
                out[k] = copied(v)
        return out
    if kind is list:
        return [copied(v) if type(v) in _CONTAINERS else v for v in value]
    return value


_CONTAINERS = frozenset((dict, list))


def loads_many(texts: list[str]) -> list[Any]:
    """``json.loads`` of each of ``texts`` (``None`` for ""), as one parse: one call costs less
    than many (and pydantic-core's parser, there whenever a framework is, less than the
    standard library's). Falls back to one ``json.loads`` each, so results never differ."""
    present = [t for t in texts if t]
    if not present:
        return [None] * len(texts)
    joined = "[" + ",".join(present) + "]"
    try:
        values = _fast_loads(joined) if _fast_loads is not None else json.loads(joined)
        if len(values) != len(present):
            raise ValueError("not one value per text")
    except ValueError:
        values = [json.loads(t) for t in present]
    it = iter(values)
    return [next(it) if t else None for t in texts]


def _fast_json() -> Callable[[str], Any] | None:
    try:
        from pydantic_core import from_json
    except ImportError:
        return None
    return from_json


_fast_loads = _fast_json()


@dataclass(slots=True, frozen=True)
class AppendResult:
    """Where an appended batch landed. ``duplicate`` is true when the idempotency key had been
    used already: nothing was written, and the seqs are the original batch's."""

    first_seq: int
    last_seq: int
    duplicate: bool = False


@dataclass(slots=True, frozen=True)
class Summary:
    """A summary of the messages ``start_seq``..``end_seq`` (inclusive) of a conversation:
    its ``text``, the ``tokens`` of the system message it is shown as, when it was made
    (``created_at``, seconds since the epoch) and by what (``model``: the summarizer's name,
    ``None`` when a ``summarize`` hook made it)."""

    start_seq: int
    end_seq: int
    text: str
    tokens: int
    created_at: float = 0.0
    model: str | None = None
