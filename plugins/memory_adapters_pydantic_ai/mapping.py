"""pydantic-ai messages to and from the neutral :class:`~memory_adapters.Message` form.

pydantic-ai has two message kinds; the neutral form has four roles:

* a ``ModelResponse`` is one ``assistant`` message: its text parts joined as pydantic-ai joins
  them (``ModelResponse.text``), and each ``ToolCallPart`` as a ``ToolCall`` (id, name, args as
  a dict). Thinking, files and provider-executed (native) tool calls are kept in ``raw`` only.
* a ``ModelRequest`` is one to three messages, in this order: ``tool`` (each
  ``ToolReturnPart`` as a ``ToolResult`` with the call's id, the tool's name, the content as
  JSON and ``is_error`` for any outcome but success: first, so that results directly follow
  the response whose calls they answer), ``system`` (its system prompts) and ``user`` (its
  user prompts' text, and pydantic-ai's retry feedback). A request holding only pydantic-ai's
  bookkeeping parts (instruction or tool-availability deltas) becomes an empty ``system``
  message, so that nothing is lost.

Every message carries ``framework="pydantic-ai"``. The first message of each pydantic-ai
message carries ``raw``, pydantic-ai's own JSON form of the whole message
(``ModelMessagesTypeAdapter``), and ``meta["pydantic_ai"] = {"part": 0, "of": n}``; the others
of the same message carry ``{"part": i, "of": n}`` and no ``raw``; when ``n > 1`` all of them
also carry the same random ``"group"`` id, so that parts of two messages are never taken for
one. Reading back
(:func:`from_messages`), a pydantic-ai message whose parts are all present and untrimmed is
rebuilt from ``raw``, exactly; anything else (a message written by another framework, a
summary, a message the window trimmed, a group the window cut) is rebuilt from the neutral
form. So a window never hands the model a tool call or result that the window dropped, and a
hook's edit of the neutral form (``meta["edited"]``) is what the model gets.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Collection, Iterable, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from pydantic import TypeAdapter
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryFeedbackPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from memory_adapters import Message, RawJSON, ToolCall, ToolResult
from memory_adapters.messages import TextCache

FRAMEWORK = "pydantic-ai"
"""The ``framework`` name of messages this adapter writes."""

META_KEY = "pydantic_ai"
"""The ``meta`` key saying which part of a pydantic-ai message a neutral message is."""

EDITED = "edited"
"""A ``meta`` flag: the neutral form was changed after ``raw`` was made, so ``raw`` is stale.
(The core's window sets ``"trimmed"`` for the same reason.)"""


def _user_text(part: UserPromptPart) -> str:
    content = part.content
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for item in content:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, TextContent):
            texts.append(item.content)
    return "\n".join(texts)


FINAL_RESULT = "Final result processed."
"""What pydantic-ai answers the output tool call that gave a run its final result."""

OUTPUT = "output"
"""A ``meta`` flag on the empty system message that stands in for a request which holds only
the return of a final output call: it carries the request's ``raw`` for pydantic-ai, and is
nothing to another framework."""


def final_output_calls(messages: Sequence[ModelMessage], output_tools: Collection[str]) -> set[str]:
    """The ids of the calls of an output tool (``output_tools``: their names) that gave a run
    its final result (pydantic-ai answered them :data:`FINAL_RESULT`)."""
    return {
        p.tool_call_id
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
        and p.tool_name in output_tools
        and p.content == FINAL_RESULT
    }


def _request_messages(
    message: ModelRequest, raw: dict[str, Any], final: Collection[str]
) -> list[Message]:
    system: list[str] = []
    user: list[str] = []
    results: list[ToolResult] = []
    raw_parts: list[dict[str, Any]] = raw.get("parts", [])  # only read for tool returns
    bookkeeping = False
    for i, part in enumerate(message.parts):
        raw_part = raw_parts[i] if i < len(raw_parts) else {}
        if isinstance(part, ToolReturnPart) and part.tool_call_id in final:
            bookkeeping = True  # the final output is the response's answer, not a tool's
        elif isinstance(part, SystemPromptPart):
            system.append(part.content)
        elif isinstance(part, UserPromptPart):
            user.append(_user_text(part))
        elif isinstance(part, ToolReturnPart):
            results.append(
                ToolResult(
                    part.tool_call_id,
                    raw_part.get("content"),
                    part.tool_name,
                    part.outcome != "success",
                )
            )
        elif isinstance(part, RetryFeedbackPart):
            user.append(part.model_response())
    out: list[Message] = []
    if results:  # first: results directly follow the response whose calls they answer
        out.append(Message("tool", tool_results=results))
    if system:
        out.append(Message("system", "\n\n".join(system)))
    if user:
        out.append(Message("user", "\n\n".join(user)))
    if not out:
        out.append(Message("system", "", meta={OUTPUT: True} if bookkeeping else {}))
    return out


def _response_message(message: ModelResponse, final: Collection[str]) -> Message:
    calls: list[ToolCall] = []
    texts = [message.text] if message.text else []
    for p in message.parts:
        if not isinstance(p, ToolCallPart):
            continue
        if p.tool_call_id in final:  # a structured output: the answer itself
            texts.append(json.dumps(p.args_as_dict(), ensure_ascii=False))
        else:
            calls.append(ToolCall(p.tool_call_id, p.tool_name, p.args_as_dict()))
    return Message("assistant", "\n".join(texts), tool_calls=calls)


def to_messages(
    messages: Sequence[ModelMessage], output_tools: Collection[str] = ()
) -> list[Message]:
    """The neutral form of pydantic-ai ``messages``, each with its ``raw`` JSON text (see the
    module docstring). ``output_tools`` names the run's output tools: the call that gave the
    run's final result is then shown as the response's text (the output's JSON), and its
    bookkeeping return is left out of the neutral form."""
    final = final_output_calls(messages, output_tools) if output_tools else set()
    out: list[Message] = []
    for message in messages:
        raw = RawJSON(_MESSAGE.dump_json(message).decode())
        group = (
            _request_messages(message, json.loads(raw) if _returns(message) else {}, final)
            if isinstance(message, ModelRequest)
            else [_response_message(message, final)]
        )
        n = len(group)
        info: dict[str, Any] = {"of": n}
        if n > 1:  # ties the parts together, so that parts of two messages are never mixed
            info["group"] = uuid.uuid4().hex[:12]
        for i, m in enumerate(group):
            m.framework = FRAMEWORK
            m.meta = {**m.meta, META_KEY: {"part": i, **info}}
        group[0].raw = raw
        out.extend(group)
    return out


def _position(message: Message) -> tuple[int, int, Any] | None:
    """(part, of, group) of a neutral message made by :func:`to_messages`."""
    if message.framework != FRAMEWORK:
        return None
    info = message.meta.get(META_KEY)
    if not isinstance(info, dict):
        return None
    part, of = info.get("part"), info.get("of")
    if isinstance(part, int) and isinstance(of, int) and 0 <= part < of:
        return part, of, info.get("group")
    return None


def _stale(message: Message) -> bool:
    return bool(message.meta.get("trimmed") or message.meta.get(EDITED))


def _whole(messages: Sequence[Message], i: int) -> int:
    """How many messages from ``i`` on form one pydantic-ai message that can be rebuilt from
    ``raw`` (0 if the message at ``i`` must be rebuilt from its neutral form)."""
    head = messages[i]
    pos = _position(head)
    if pos is None or pos[0] != 0 or not isinstance(head.raw, RawJSON | dict) or _stale(head):
        return 0
    of, group = pos[1], pos[2]
    if i + of > len(messages):
        return 0
    for k in range(1, of):
        m = messages[i + k]
        if _position(m) != (k, of, group) or _stale(m):
            return 0
    return of


def _from_neutral(message: Message) -> ModelMessage | None:
    if message.role == "assistant":
        parts: list[ModelResponsePart] = []
        if message.text:
            parts.append(TextPart(message.text))
        parts.extend(ToolCallPart(c.name, dict(c.args), c.id) for c in message.tool_calls)
        return ModelResponse(parts=parts) if parts else None
    request: list[ModelRequestPart]
    if message.role == "system":
        if not message.text:
            return None
        request = [SystemPromptPart(message.text)]
    elif message.role == "tool":
        request = [
            ToolReturnPart(
                r.name or "",
                r.content,
                r.id,
                outcome="failed" if r.is_error else "success",
            )
            for r in message.tool_results
        ]
    else:
        request = [UserPromptPart(message.text)]
    return ModelRequest(parts=request)


_MESSAGE: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)


def _returns(message: ModelMessage) -> bool:
    return any(isinstance(p, ToolReturnPart) for p in message.parts)


def validate_raws(raws: Sequence[Any]) -> list[ModelMessage]:
    """pydantic-ai messages from stored ``raw`` values: JSON text (:class:`RawJSON`) validated
    in one ``validate_json`` call, from the text, as a hand-written layer would; JSON values
    (rows written before raw was kept as text) with ``validate_python``. Raises pydantic's
    ``ValidationError`` when one is not a pydantic-ai message (see :func:`validated`)."""
    if all(isinstance(r, RawJSON) for r in raws):
        return ModelMessagesTypeAdapter.validate_json("[" + ",".join(raws) + "]") if raws else []
    return [
        _MESSAGE.validate_json(r) if isinstance(r, RawJSON) else _MESSAGE.validate_python(r)
        for r in raws
    ]


def _validated(raws: Sequence[Any]) -> list[ModelMessage | None]:
    """:func:`validate_raws`, with ``None`` for each raw that is not a pydantic-ai message."""
    try:
        return list(validate_raws(raws))
    except ValueError:  # pydantic's ValidationError, or JSON that does not parse
        out: list[ModelMessage | None] = []
        for raw in raws:
            try:
                out.append(validate_raws([raw])[0])
            except ValueError:
                out.append(None)
        return out


_restored: TextCache[ModelMessage] = TextCache()
"""The pydantic-ai messages validated from ``raw`` texts, by the text: a window read again on
the next turn is mostly the same messages, each validated once per process. Never handed out:
:func:`validated` gives copies (:func:`_clone`)."""


class _Unknown(Exception):
    """A value :func:`_clone` cannot tell is a copy of its own."""


_IMMUTABLE: frozenset[type] = frozenset(
    (str, int, float, bool, type(None), bytes, datetime, date, time, timedelta, Decimal, UUID)
)
_ATOM, _LIST, _DICT, _TUPLE, _DATACLASS = range(5)
_kinds: dict[type, int] = {
    **dict.fromkeys(_IMMUTABLE, _ATOM),
    list: _LIST,
    dict: _DICT,
    tuple: _TUPLE,
}


def _kind(cls: type) -> int:
    kind = _kinds.get(cls)
    if kind is None:
        if isinstance(cls, type) and issubclass(cls, Enum):
            kind = _ATOM
        elif dataclasses.is_dataclass(cls) and _in_dict(cls):
            kind = _DATACLASS
        else:
            raise _Unknown(cls)
        _kinds[cls] = kind
    return kind


def _in_dict(cls: type) -> bool:
    """Whether the instances of ``cls`` keep all their attributes in their ``__dict__`` (no
    class of its MRO has slots but for ``__dict__`` and ``__weakref__``, as ``Generic``'s empty
    ones, and one has none)."""
    slots: list[str] = []
    has_dict = False
    for c in cls.__mro__[:-1]:
        declared = vars(c).get("__slots__")
        if declared is None:
            has_dict = True
        else:
            slots.extend((declared,) if isinstance(declared, str) else declared)
    return (has_dict or "__dict__" in slots) and all(
        name in ("__dict__", "__weakref__") for name in slots
    )


def _clone(value: Any) -> Any:
    """A copy of ``value`` (a validated pydantic-ai message, or a value in one) sharing nothing
    that can change with it: dataclasses, lists, dicts and tuples copied all the way down,
    immutable values shared. Raises :class:`_Unknown` at a value of any other type (such a
    message is not kept). As ``copy.deepcopy``, without its generality: a few times faster
    than validating the message's JSON again."""
    kind = _kind(type(value))
    if kind == _ATOM:
        return value
    if kind == _LIST:
        return [_clone(v) for v in value]
    if kind == _TUPLE:
        return tuple(_clone(v) for v in value)
    fields = value.copy() if kind == _DICT else value.__dict__.copy()
    for name, v in fields.items():
        if _kinds.get(type(v)) != _ATOM:
            fields[name] = _clone(v)
    if kind == _DICT:
        return fields
    out = object.__new__(type(value))
    object.__setattr__(out, "__dict__", fields)  # a frozen dataclass's too
    return out


def validated(raws: Sequence[Any]) -> list[ModelMessage | None]:
    """pydantic-ai messages from stored ``raw`` values (see :func:`validate_raws`), with
    ``None`` for each raw that is not a pydantic-ai message (a hook rewrote it, say): that
    message is rebuilt from its neutral form instead, and the run goes on. Each call returns
    messages of its own: one whose JSON text was validated before in this process is a copy
    of the one validated then (:data:`_restored`); the others are validated in one call."""
    texts = [r if isinstance(r, RawJSON) else None for r in raws]
    out: list[ModelMessage | None] = [None] * len(raws)
    missing: list[int] = []
    for i, kept in enumerate(_restored.get_many(texts)):
        if kept is not None:
            out[i] = _clone(kept)
        else:
            missing.append(i)
    if not missing:
        return out
    for i, got in zip(missing, _validated([raws[i] for i in missing]), strict=True):
        out[i] = got
        text = texts[i]
        if got is not None and text is not None and _restored.fits(text):
            try:
                copy = _clone(got)
            except _Unknown:  # shown as validated, never kept
                continue
            _restored.keep(text, got)
            out[i] = copy
    return out


def from_messages(messages: Iterable[Message]) -> list[ModelMessage]:
    """pydantic-ai messages for neutral ``messages`` (a window): exact from ``raw`` where a
    whole, untrimmed pydantic-ai message is present, else rebuilt from the neutral form."""
    seq = list(messages)
    # The whole pydantic-ai messages, their raw validated in one call (one pass of pydantic's
    # validator); a raw that is not pydantic-ai's (a hook rewrote it) is rebuilt as the rest.
    whole: dict[int, int] = {}
    i = 0
    while i < len(seq):
        n = _whole(seq, i)
        if n:
            whole[i] = n
        i += n or 1
    restored = dict(zip(whole, validated([seq[i].raw for i in whole]), strict=True))
    out: list[ModelMessage] = []
    exact_before = False
    i = 0
    while i < len(seq):
        n = whole.get(i, 0)
        if n and seq[i].meta.get(OUTPUT) and not exact_before:
            i += n  # the return of an output call whose response was not rebuilt exactly
            continue
        exact = restored.get(i)
        if exact is not None:
            out.append(exact)
        else:
            for m in seq[i : i + (n or 1)]:
                rebuilt = _from_neutral(m)
                if rebuilt is not None:
                    out.append(rebuilt)
        exact_before = exact is not None
        i += n or 1
    return out


def text_of(prompt: object) -> str | None:
    """The text of a pydantic-ai user prompt (a ``str`` or a sequence of user content)."""
    if prompt is None:
        return None
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        texts = [
            p if isinstance(p, str) else p.content
            for p in prompt
            if isinstance(p, str | TextContent)
        ]
        return "\n".join(texts) or None
    return None
