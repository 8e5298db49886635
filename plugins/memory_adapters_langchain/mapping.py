"""LangChain messages to and from the neutral :class:`~memory_adapters.Message` form.

One LangChain message is one neutral message:

* ``HumanMessage`` → ``user``, its text (``message.text``: the text blocks of a list content);
* ``AIMessage`` → ``assistant``, its text and each of its ``tool_calls`` as a ``ToolCall``
  (id, name, args);
* ``ToolMessage`` → ``tool``, one ``ToolResult`` with the call's id, the tool's name, the
  content (a string, or the list of content blocks, as JSON) and ``is_error`` when its status
  is ``"error"``;
* ``SystemMessage`` → ``system``; a ``ChatMessage`` by its role (``"ai"``/``"assistant"``,
  ``"system"``, ``"tool"``; anything else is a ``user`` message); a ``RemoveMessage`` is an
  instruction to LangGraph's state, not a message, and is left out.

Every message carries ``framework="langchain"`` and ``raw``, LangChain's own JSON form
(``messages_to_dict``) as text (:class:`~memory_adapters.RawJSON`), so that reading back
(:func:`from_messages`) gives LangChain exactly the message it wrote, with its id, metadata and
content blocks (a row written when ``raw`` was kept as a parsed dict is read too). Python
values that JSON stands for (tuples, ``str`` and ``int`` subclasses such as enums) are stored
as that plain JSON, in ``raw``, tool-call args and tool results alike. A message whose ``raw``
cannot be JSON (an ``artifact`` or ``additional_kwargs`` holding objects) is kept in the
neutral form only, marked ``meta["lossy"] = True``. A message written by another framework
(pydantic-ai), a summary, or one the window trimmed or a hook edited is rebuilt from the
neutral form.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)

from memory_adapters import Message, RawJSON, ToolCall, ToolResult
from memory_adapters.messages import Role, TextCache, copied, loads_many

FRAMEWORK = "langchain"
"""The ``framework`` name of messages this adapter writes."""

EDITED = "edited"
"""A ``meta`` flag: the neutral form was changed after ``raw`` was made, so ``raw`` is stale.
(The core's window sets ``"trimmed"`` for the same reason.)"""

_CHAT_ROLES: dict[str, Role] = {
    "ai": "assistant",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
}


def _plain(value: Any) -> Any:
    """``value`` as the plain JSON a store keeps (and reading back gives): tuples become lists,
    ``str`` and ``int`` subclasses (enums, LangChain's ``TextAccessor``) plain ``str`` and
    ``int``, and a value JSON cannot hold its ``str``."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _raw(message: BaseMessage) -> RawJSON | None:
    """LangChain's JSON of ``message`` as text (tuples as lists, ``str`` and ``int`` subclasses
    as plain strings and numbers, ASCII only), or ``None`` when a value in it is no JSON."""
    try:
        return RawJSON(json.dumps(messages_to_dict([message])[0], allow_nan=False))
    except (TypeError, ValueError):
        return None


def _neutral(message: BaseMessage) -> Message | None:
    if isinstance(message, RemoveMessage):
        return None
    text = str(message.text)  # langchain-core 1.x: a TextAccessor (a str subclass), not JSON
    if isinstance(message, AIMessage):
        calls = [
            ToolCall(c.get("id") or "", c["name"], _plain(dict(c["args"])))
            for c in message.tool_calls
        ]
        return Message("assistant", text, tool_calls=calls)
    if isinstance(message, ToolMessage):
        content: Any = message.content
        if type(content) is not str:
            content = _plain(content)
        return Message(
            "tool",
            tool_results=[
                ToolResult(message.tool_call_id, content, message.name, message.status == "error")
            ],
        )
    if isinstance(message, SystemMessage):
        return Message("system", text)
    if isinstance(message, ChatMessage):
        role = _CHAT_ROLES.get(message.role.lower(), "user")
        if role == "tool":  # a ChatMessage cannot name the call it answers: keep it as text
            role = "user"
        return Message(role, text)
    return Message("user", text)


SOURCE = "lc_source"
"""The ``additional_kwargs`` key LangChain marks the messages its own machinery makes with
(``SummarizationMiddleware``'s summary: ``{"lc_source": "summarization"}``)."""


def synthesized(message: BaseMessage) -> bool:
    """Whether ``message`` is a user or system message that middleware made rather than a person
    or a model said: LangChain marks one with ``additional_kwargs["lc_source"]`` (the summary
    ``SummarizationMiddleware`` puts in the state is one). Memory never stores one as a turn of
    the conversation. A model's message and a tool's result are always the conversation's,
    whatever made them: a tool call and its result stay paired."""
    return isinstance(message, HumanMessage | SystemMessage | ChatMessage) and bool(
        message.additional_kwargs.get(SOURCE)
    )


def to_messages(messages: Sequence[BaseMessage]) -> list[Message]:
    """The neutral form of LangChain ``messages``, each with its ``raw`` JSON (see the module
    docstring). ``RemoveMessage`` entries are left out."""
    out: list[Message] = []
    for message in messages:
        neutral = _neutral(message)
        if neutral is None:
            continue
        neutral.framework = FRAMEWORK
        neutral.raw = _raw(message)
        if neutral.raw is None:
            neutral.meta["lossy"] = True
        out.append(neutral)
    return out


def _exact(message: Message) -> bool:
    return (
        message.framework == FRAMEWORK
        and isinstance(message.raw, RawJSON | dict)
        and not message.meta.get("trimmed")
        and not message.meta.get(EDITED)
    )


def _content(value: Any, framework: str | None) -> str | list[str | dict[str, Any]]:
    """A ``ToolMessage``'s content for a tool result's JSON ``value``: a string as it is, a list
    of content blocks when LangChain wrote it, anything else (another framework's JSON: a dict,
    a list, a number) as its JSON text."""
    if isinstance(value, str):
        return value
    if (
        framework == FRAMEWORK
        and isinstance(value, list)
        and all(isinstance(v, str | dict) for v in value)
    ):
        return value
    return json.dumps(value, ensure_ascii=False)


def _from_neutral(message: Message) -> list[BaseMessage]:
    if message.role == "assistant":
        calls = [{"name": c.name, "args": dict(c.args), "id": c.id} for c in message.tool_calls]
        if not message.text and not calls:
            return []
        return [AIMessage(content=message.text, tool_calls=calls)]
    if message.role == "tool":
        return [
            ToolMessage(
                content=_content(r.content, message.framework),
                tool_call_id=r.id,
                name=r.name,
                status="error" if r.is_error else "success",
            )
            for r in message.tool_results
        ]
    if message.role == "system":
        return [SystemMessage(content=message.text)] if message.text else []
    return [HumanMessage(content=message.text)]


_restored: TextCache[BaseMessage] = TextCache()
"""The LangChain messages rebuilt from ``raw`` texts, by the text: a window read again on the
next turn is mostly the same messages, each validated once per process. Never handed out:
:func:`from_messages` gives copies (:func:`_copy`)."""


def _copy(message: BaseMessage) -> BaseMessage:
    """A copy of ``message`` sharing nothing that can change with it: what pydantic's
    ``model_copy()`` does, with its fields' lists and dicts (content blocks, tool calls and their
    args, metadata) new too."""
    private = getattr(message, "__pydantic_private__", None)
    if private is not None:  # none of LangChain's messages has any: the general way
        out = message.model_copy()
        for name, value in out.__dict__.items():
            out.__dict__[name] = copied(value)
        return out
    cls = type(message)
    out = cls.__new__(cls)
    fields = message.__dict__.copy()
    for name, value in fields.items():  # most are empty: made new without a call
        kind = type(value)
        if kind is dict:
            fields[name] = copied(value) if value else {}
        elif kind is list:
            fields[name] = copied(value) if value else []
    extra = message.__pydantic_extra__
    put = object.__setattr__
    put(out, "__dict__", fields)
    put(out, "__pydantic_extra__", None if extra is None else copied(extra) if extra else {})
    put(out, "__pydantic_fields_set__", message.__pydantic_fields_set__.copy())
    put(out, "__pydantic_private__", None)
    return out


def _load(raws: list[Any]) -> list[BaseMessage]:
    """LangChain's messages of ``raws`` (JSON text or dicts) in one pass of its loader."""
    parsed = iter(loads_many([r for r in raws if isinstance(r, RawJSON)]))
    return messages_from_dict([next(parsed) if isinstance(r, RawJSON) else r for r in raws])


def _loaded(messages: list[Message]) -> list[list[BaseMessage]]:
    """For each of ``messages`` (exact, see :func:`_exact`), LangChain's message rebuilt from
    ``raw`` (kept by its text: the caller gets a copy), or, when ``raw`` is not one of
    LangChain's (a hook rewrote it), the messages rebuilt from the neutral form: the run goes
    on."""
    if not messages:
        return []
    raws = [m.raw for m in messages]
    try:
        loaded: list[BaseMessage | None] = list(_load(raws))
    except (ValueError, TypeError, KeyError):  # not LangChain's: one at a time
        loaded = []
        for raw in raws:
            try:
                loaded.append(_load([raw])[0])
            except (ValueError, TypeError, KeyError):
                loaded.append(None)
    out: list[list[BaseMessage]] = []
    for message, raw, got in zip(messages, raws, loaded, strict=True):
        if got is None:
            out.append(_from_neutral(message))
        elif isinstance(raw, RawJSON) and _restored.keep(raw, got):
            out.append([_copy(got)])
        else:
            out.append([got])
    return out


def from_messages(messages: Iterable[Message]) -> list[BaseMessage]:
    """LangChain messages for neutral ``messages`` (a window): exact from ``raw`` where this
    adapter wrote the message and nothing changed it since, else rebuilt from the neutral form
    (a ``tool`` message of several results becomes one ``ToolMessage`` per result, whose
    content is the result's string, or its JSON text unless LangChain wrote it). An empty
    system message is left out: it says nothing, and a model API refuses one between a tool
    call and its result. Every call returns messages of its own: an exact one read before in
    this process is a copy of the one rebuilt then (:data:`_restored`)."""
    # the exact ones not read before are rebuilt in one call (one pass of LangChain's loader)
    slots: list[int | BaseMessage | list[BaseMessage]] = []
    pending: list[Message] = []  # exact, not read before: raw is JSON text, or a dict (rows
    # of older versions)
    chosen = [m for m in messages if m.role != "system" or m.text]  # see above
    exact = [_exact(m) for m in chosen]
    texts = [m.raw if isinstance(m.raw, RawJSON) else None for m in chosen]
    kept = _restored.get_many([t if ok else None for t, ok in zip(texts, exact, strict=True)])
    for message, ok, found in zip(chosen, exact, kept, strict=True):
        if found is not None:
            slots.append(_copy(found))
        elif ok:
            slots.append(len(pending))
            pending.append(message)
        else:
            slots.append(_from_neutral(message))
    restored = _loaded(pending)
    out: list[BaseMessage] = []
    for slot in slots:
        if isinstance(slot, int):
            out.extend(restored[slot])
        elif isinstance(slot, BaseMessage):
            out.append(slot)
        else:
            out.extend(slot)
    return out
