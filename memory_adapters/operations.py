"""What operators need from a store: list conversations, erase a user, apply retention, and
each fact's history with who wrote it.

The store contract (:class:`~memory_adapters.store.Store`) has a method for each
(``list_conversations``, ``erase``, ``delete_idle_conversations``, ``fact_history``,
``restore_fact``); this module holds the values they take and return, and the key layout
every store erases by (:func:`user_keys`), so that "everything of one user" means the
same on every store. The facade is :meth:`Memory.conversations`, :meth:`Memory.erase`,
:meth:`Memory.retain` and :meth:`Facts.history`.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal
from urllib.parse import quote, unquote

from .errors import InvalidInput, Unsupported
from .steps import Plan, StoreCall
from .validation import check_id, check_positive_int, dumps

DEFAULT_HISTORY_LIMIT = 50
"""How many versions of each fact a store keeps by default (``Memory(history_limit=...)``)."""

WriterKind = Literal["application", "model", "mcp", "extractor"]
WRITER_KINDS: tuple[WriterKind, ...] = ("application", "model", "mcp", "extractor")
"""Every kind of :class:`Writer`, as stores keep and imports accept them."""
ChangeOp = Literal["put", "forget"]


def _part(value: str) -> str:
    return quote(value, safe="")


@dataclass(frozen=True, slots=True)
class Writer:
    """Who made a change to a fact: the application (``kind="application"``), a model
    through a memory tool during a run (``kind="model"``, with that run's ``run_id``,
    ``framework``, ``agent`` and ``model``), an MCP client through the memory tools of
    ``memory-adapters mcp`` (``kind="mcp"``, ``framework="mcp"``, ``agent`` the name the
    client gave itself, such as ``"claude-code"``), or an extractor reading a conversation in
    the background (``kind="extractor"``, with its ``model`` and the ``conversation`` range
    ``start_seq``..``end_seq`` it read: :mod:`memory_adapters.extraction`).

    The core decides it, never a tool's arguments: a memory tool executed while a run of the
    same ``Memory`` is active writes as ``model``; one the host calls with a writer of its own
    (the MCP server) writes as that; the extractor's operations as ``extractor``; every other
    write is ``application``.
    """

    kind: WriterKind = "application"
    run_id: str | None = None
    framework: str | None = None
    agent: str | None = None
    model: str | None = None
    call_id: str | None = None
    """The tool call that made the change, when it may be replayed (inside a durable run:
    :mod:`.durable`): a replayed call finds its change and does not make it again."""
    conversation: str | None = None
    """The conversation an extractor read (its store key)."""
    start_seq: int | None = None
    """The first message an extractor read (its seq)."""
    end_seq: int | None = None
    """The last message an extractor read (its seq)."""

    def to_json(self) -> str:
        """This writer as compact JSON text (how stores keep it)."""
        return json.dumps(
            {k: v for k, v in asdict(self).items() if v is not None}, separators=(",", ":")
        )

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> Writer:
        """A writer read back from :meth:`to_json` text (or the dict it holds)."""
        d = json.loads(text) if isinstance(text, str) else text
        return cls(
            d.get("kind", "application"),
            d.get("run_id"),
            d.get("framework"),
            d.get("agent"),
            d.get("model"),
            d.get("call_id"),
            d.get("conversation"),
            d.get("start_seq"),
            d.get("end_seq"),
        )


APPLICATION = Writer()
"""The writer of every change the application made itself."""


@dataclass(frozen=True, slots=True)
class FactChange:
    """One version in a fact's history: a ``"put"`` of ``value`` at ``version``, or a
    ``"forget"`` (``value`` is ``None``; ``version`` is the version that was deleted), made at
    ``at`` (epoch seconds) by ``writer``."""

    key: str
    version: int
    value: Any
    op: ChangeOp
    at: float
    writer: Writer = APPLICATION

    @classmethod
    def from_row(
        cls,
        key: str,
        version: int,
        op: str,
        data: str | None,
        at: float,
        writer: str | dict[str, Any],
    ) -> FactChange:
        """Build a change from a store row (``data``: the value as JSON text, or ``None``)."""
        return cls(
            key,
            int(version),
            None if data is None else json.loads(data),
            "forget" if op == "forget" else "put",
            float(at),
            Writer.from_json(writer),
        )

    def data(self) -> str | None:
        """The value as the JSON text stores keep (``None`` for a forget)."""
        return None if self.op == "forget" else dumps(self.value)


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """One conversation as :meth:`Store.list_conversations` lists it.

    ``key`` is the store key (``"<ns>:<user>:<conv>"``, percent-encoded parts);
    ``namespace``, ``user_id`` (``None`` for a conversation without a user) and
    ``conversation_id`` are decoded from it. ``messages`` is the count (the last seq),
    ``tokens`` their total, ``last_activity`` the time of the last append and ``created_at``
    of the first (epoch seconds).
    """

    key: str
    namespace: str
    user_id: str | None
    conversation_id: str
    messages: int
    tokens: int
    last_activity: float
    created_at: float

    @classmethod
    def of(
        cls, key: str, messages: int, tokens: int, last_activity: float, created_at: float
    ) -> ConversationInfo:
        """Build the info of the conversation stored under ``key``, decoding its parts."""
        parts = key.split(":")
        if len(parts) == 3:
            ns, user, conv = (unquote(p) for p in parts)
        else:  # a key written by hand, not by Scope.conversation_key
            ns, user, conv = "", "", key
        return cls(
            key,
            ns,
            user or None,
            conv,
            int(messages),
            int(tokens),
            float(last_activity),
            float(created_at),
        )

    @property
    def cursor(self) -> tuple[float, str]:
        """What to pass as ``before=`` for the page after the one ending with this item."""
        return (self.last_activity, self.key)


def before_ok(before: tuple[float, str] | None, last_activity: float, key: str) -> bool:
    """Whether a conversation comes after the cursor ``before`` in the listing order (newest
    activity first, then key descending)."""
    if before is None:
        return True
    return (last_activity, key) < (before[0], before[1])


@dataclass(frozen=True, slots=True)
class EraseReport:
    """What :meth:`Store.erase` deleted: conversations (head rows), their messages and
    summaries, facts (long-term, live or expired), working-memory notes, fact vectors and
    fact history rows."""

    conversations: int = 0
    messages: int = 0
    summaries: int = 0
    facts: int = 0
    working: int = 0
    vectors: int = 0
    history: int = 0


@dataclass(frozen=True, slots=True)
class RetentionReport:
    """What :meth:`Memory.retain` deleted: idle conversations, and expired facts pruned."""

    conversations: int = 0
    facts: int = 0


@dataclass(frozen=True, slots=True)
class UserKeys:
    """Where one user's memory in one namespace lives, on every store.

    * conversations: keys starting with ``conversation_prefix`` (``"<ns>:<user>:"``);
    * facts, in namespace ``namespace``: the scope ``user_scope`` (``"user:<user>"``) and the
      scopes starting with ``beneath_prefix`` (``"user:<user>/"``: the user's scopes with an
      agent, ``"user:<user>/agent:<agent>"``, and any other scope an adapter keeps beneath
      the user, such as the LangGraph store's ``"user:<user>/lg:<labels>/"``) or
      ``conversation_scope_prefix`` (``"conversation:<ns>:<user>:"``);
    * working memory, in namespace ``working_namespace`` (``"<ns>#working"``): the scopes
      starting with ``conversation_prefix`` (every conversation's notes and forks).

    The parts are percent-encoded and ``:`` ends each, so ``"ann"`` never matches ``"anna"``.
    """

    namespace: str
    conversation_prefix: str
    user_scope: str
    beneath_prefix: str
    conversation_scope_prefix: str
    working_namespace: str

    def owns_fact_scope(self, scope: str) -> bool:
        """Whether ``scope`` (in :attr:`namespace`) holds this user's facts."""
        return (
            scope == self.user_scope
            or scope.startswith(self.beneath_prefix)
            or scope.startswith(self.conversation_scope_prefix)
        )

    def owns_conversation(self, key: str) -> bool:
        """Whether the conversation (or working-memory scope) ``key`` is this user's."""
        return key.startswith(self.conversation_prefix)


def user_keys(namespace: str, user_id: str) -> UserKeys:
    """The :class:`UserKeys` of ``user_id`` in ``namespace``."""
    if not isinstance(namespace, str) or not isinstance(user_id, str) or not user_id:
        raise InvalidInput("erase needs a namespace and a non-empty user_id (str)")
    prefix = f"{_part(namespace)}:{_part(user_id)}:"
    user_scope = "user:" + _part(user_id)
    return UserKeys(
        namespace,
        prefix,
        user_scope,
        user_scope + "/",
        "conversation:" + prefix,
        namespace + "#working",
    )


def working_namespace_of(conversation: str) -> str:
    """The working-memory namespace of the conversation stored under ``conversation``."""
    return unquote(conversation.split(":", 1)[0]) + "#working"


def namespace_prefix(namespace: str) -> str:
    """The conversation-key prefix of every conversation of ``namespace``."""
    return _part(namespace) + ":"


def in_working_tree(conversation: str, scope: str) -> bool:
    """Whether the working-memory scope ``scope`` belongs to ``conversation`` (its root or
    a fork below it)."""
    return scope == conversation or scope.startswith(conversation + "/")


# -- plans of the Memory facade ----------------------------------------------------------------


def _finite(value: object) -> float | None:
    """``value`` as a finite float, if it is a number (not a bool) that is one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond a float
        return None
    return number if math.isfinite(number) else None


def conversations_plan(
    namespace: str,
    user_id: str | None,
    limit: int,
    before: tuple[float, str] | None,
) -> Plan[list[ConversationInfo]]:
    """List the conversations of ``namespace`` (of one user with ``user_id``)."""
    check_id(namespace, "namespace")
    prefix = namespace_prefix(namespace)
    if user_id is not None:
        prefix += _part(check_id(user_id, "user_id")) + ":"
    check_positive_int(limit, "limit")
    if before is not None:
        at = _finite(before[0]) if isinstance(before, tuple) and len(before) == 2 else None
        if at is None or not isinstance(before[1], str):
            raise InvalidInput(
                "before must be the (last_activity, key) cursor of a listed conversation"
            )
        before = (at, before[1])
    found: list[ConversationInfo] = yield StoreCall(
        "list_conversations", (prefix,), {"limit": limit, "before": before}
    )
    return found


def erase_plan(namespace: str, user_id: str) -> Plan[EraseReport]:
    """Erase everything of ``user_id`` in ``namespace``."""
    check_id(namespace, "namespace")
    check_id(user_id, "user_id")
    report: EraseReport = yield StoreCall("erase", (namespace, user_id))
    # the conversation index (:mod:`.conversation_search`): documents and watermarks
    from .conversation_search import index_namespace

    yield StoreCall("erase", (index_namespace(namespace), user_id))
    return report


def _unindex_idle(namespace: str, idle_before: float) -> Plan[None]:
    """Remove from the conversation index the conversations of ``namespace`` idle since
    before ``idle_before`` (those retention is about to delete). One that becomes active
    meanwhile is kept, and indexed again by its next search."""
    from .conversation_search import LIST_PAGE, delete_plan

    before: tuple[float, str] | None = (idle_before, "")
    while before is not None:
        try:
            page: list[ConversationInfo] = yield StoreCall(
                "list_conversations",
                (namespace_prefix(namespace),),
                {"limit": LIST_PAGE, "before": before},
            )
        except Unsupported:  # a store that cannot list cannot retire conversations either
            return
        for info in page:
            yield from delete_plan(namespace, info.key, info.messages)
        before = page[-1].cursor if len(page) == LIST_PAGE else None


def retain_plan(
    namespace: str, idle_days: float | None, idle_seconds: float | None
) -> Plan[RetentionReport]:
    """Delete the conversations of ``namespace`` idle for longer than the given age, and
    every expired fact."""
    check_id(namespace, "namespace")
    if (idle_days is None) == (idle_seconds is None):
        raise InvalidInput("give idle_days or idle_seconds (one of them)")
    age = _finite(idle_seconds if idle_days is None else idle_days)
    if age is None or age < 0:
        raise InvalidInput("the idle age must be a finite number of days or seconds, >= 0")
    seconds = age * (86400.0 if idle_days is not None else 1.0)
    idle_before = time.time() - seconds
    yield from _unindex_idle(namespace, idle_before)
    deleted: int = yield StoreCall(
        "delete_idle_conversations", (namespace_prefix(namespace), idle_before)
    )
    pruned: int = yield StoreCall("prune")
    return RetentionReport(deleted, pruned)
