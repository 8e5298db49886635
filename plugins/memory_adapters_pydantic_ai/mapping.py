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

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

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

from memory_adapters import Message, ToolCall, ToolResult

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


def _request_messages(message: ModelRequest, raw: dict[str, Any]) -> list[Message]:
    system: list[str] = []
    user: list[str] = []
    results: list[ToolResult] = []
    raw_parts: list[dict[str, Any]] = raw.get("parts", [])
    for part, raw_part in zip(message.parts, raw_parts, strict=False):
        if isinstance(part, SystemPromptPart):
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
    return out or [Message("system", "")]


def _response_message(message: ModelResponse) -> Message:
    calls = [
        ToolCall(p.tool_call_id, p.tool_name, p.args_as_dict())
        for p in message.parts
        if isinstance(p, ToolCallPart)
    ]
    return Message("assistant", message.text or "", tool_calls=calls)


def to_messages(messages: Sequence[ModelMessage]) -> list[Message]:
    """The neutral form of pydantic-ai ``messages``, each with its ``raw`` JSON (see the module
    docstring)."""
    raws: list[dict[str, Any]] = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    out: list[Message] = []
    for message, raw in zip(messages, raws, strict=True):
        group = (
            _request_messages(message, raw)
            if isinstance(message, ModelRequest)
            else [_response_message(message)]
        )
        n = len(group)
        info: dict[str, Any] = {"of": n}
        if n > 1:  # ties the parts together, so that parts of two messages are never mixed
            info["group"] = uuid.uuid4().hex[:12]
        for i, m in enumerate(group):
            m.framework = FRAMEWORK
            m.meta = {META_KEY: {"part": i, **info}}
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
    if pos is None or pos[0] != 0 or head.raw is None or _stale(head):
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


def from_messages(messages: Iterable[Message]) -> list[ModelMessage]:
    """pydantic-ai messages for neutral ``messages`` (a window): exact from ``raw`` where a
    whole, untrimmed pydantic-ai message is present, else rebuilt from the neutral form."""
    seq = list(messages)
    # Collect raw dicts to validate in one call (one pass of pydantic's validator).
    slots: list[ModelMessage | int | None] = []
    raws: list[dict[str, Any]] = []
    i = 0
    while i < len(seq):
        n = _whole(seq, i)
        if n:
            slots.append(len(raws))
            raws.append(seq[i].raw)
            i += n
        else:
            slots.append(_from_neutral(seq[i]))
            i += 1
    restored = ModelMessagesTypeAdapter.validate_python(raws) if raws else []
    out: list[ModelMessage] = []
    for slot in slots:
        if isinstance(slot, int):
            out.append(restored[slot])
        elif slot is not None:
            out.append(slot)
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
