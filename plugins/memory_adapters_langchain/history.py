"""``MemoryChatMessageHistory``: a LangChain ``BaseChatMessageHistory`` over any memory-adapters
store, for applications built on ``RunnableWithMessageHistory``::

    chain_with_history = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: MemoryChatMessageHistory(memory, conversation_id=session_id),
        input_messages_key="question",
        history_messages_key="history",
    )

What a read returns
    Not the whole conversation: the *window* the ``Memory`` gives every adapter — the newest
    messages within a token budget (``max_tokens``, by default the ``Memory``'s
    ``history_tokens``) and optionally a count (``max_messages``), starting at a user turn,
    never splitting a tool call from its result, with the pinned system message and a summary
    of evicted turns where the ``Memory`` is configured for them. It is read by an index range,
    so a read costs what the window costs, not what the conversation costs.

What a write does
    ``add_messages`` appends its messages as one batch (one turn), through the ``Memory``'s
    ``before_save`` / ``after_save`` hooks, each message with LangChain's own JSON so that it
    reads back exactly (:mod:`.mapping`). ``clear`` deletes the conversation.

One read per turn
    ``RunnableWithMessageHistory`` reads ``messages`` when a turn starts (to give the chain its
    history) and, when no ``history_messages_key`` is set, reads it again when the turn ends,
    to know how many of the input's messages were history it prepended, and store only the
    rest. This class answers that second read from a cache of the first, so a turn costs one
    store read and one append. Precisely:

    * every read that goes to the store keeps what it returned;
    * the next read of the same object (``messages`` or ``aget_messages``) returns that kept
      window instead of reading the store, and drops it: the read after that goes to the store
      again — a cached window is never returned twice;
    * ``add_messages`` / ``aadd_messages`` / ``clear`` / ``aclear`` on this object drop it, and
      so does :meth:`invalidate`; a read that was under way while one of them ran does not keep
      its window.

    The read served from the cache is exactly the window that was prepended to the turn's input,
    even when another writer (another process, another history object) appended to the
    conversation in between. That is what the second read needs: a fresh read would then
    return a different window, of a different length, and ``RunnableWithMessageHistory`` would
    store a wrong slice of the input (losing the new user message or storing history twice).
    Messages appended by others are seen by the next turn's first read. A ``history_messages_key``
    chain reads once per turn; its window is dropped by the turn's ``add_messages``. A turn that
    fails before it saves leaves its window kept: an object reused for the next turn (a factory
    that keeps one per session) starts that turn with it once. A factory that builds an object
    per call, the usual one, never reuses a window; :meth:`invalidate` drops one by hand.

Scope
    The scope is fixed when the object is built: the ``Memory``'s current session
    (``memory.session(...)``) with the values given here on top. A history object without a
    conversation id raises :class:`~memory_adapters.NoScope`; it never falls back to a shared
    conversation.

Sync and async
    ``messages`` / ``add_messages`` / ``clear`` use the store's blocking calls;
    ``aget_messages`` / ``aadd_messages`` / ``aclear`` use its async calls (native where the
    store has an async driver, else a worker thread), so they never block the event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from memory_adapters import InvalidInput, Memory, Message, Scope
from memory_adapters.conversation import UNSET, Conversation, Unset
from memory_adapters.validation import check_positive_int

from .mapping import from_messages, to_messages

if TYPE_CHECKING:
    from memory_adapters.window import Window


class MemoryChatMessageHistory(BaseChatMessageHistory):
    """The conversation ``conversation_id`` of ``memory``, as a LangChain chat message history.

    Reads give the ``Memory``'s budgeted window of the conversation, writes append one turn
    per call (see the module docstring for the one-read-per-turn cache). ``user_id``,
    ``agent_id`` and ``namespace`` are merged over the ``Memory``'s current session;
    ``max_tokens`` (default: the ``Memory``'s ``history_tokens``; ``None`` for no token budget)
    and ``max_messages`` bound the window.
    """

    def __init__(
        self,
        memory: Memory,
        *,
        conversation_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        namespace: str | None = None,
        max_tokens: int | Unset | None = UNSET,
        max_messages: int | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(memory, Memory):
            raise InvalidInput(
                f"MemoryChatMessageHistory needs a memory_adapters.Memory, not "
                f"{type(memory).__name__}"
            )
        self.memory = memory
        self.scope: Scope = memory.scope.merged(
            conversation_id=conversation_id,
            user_id=user_id,
            agent_id=agent_id,
            namespace=namespace,
        )
        self.scope.conversation_key  # noqa: B018 - raises NoScope without a conversation id
        if isinstance(max_tokens, int):
            check_positive_int(max_tokens, "max_tokens", allow_zero=True)
        elif max_tokens is not UNSET and max_tokens is not None:
            raise InvalidInput(
                f"max_tokens must be an int or None, not {type(max_tokens).__name__}"
            )
        if max_messages is not None:
            check_positive_int(max_messages, "max_messages", allow_zero=True)
        budget = memory.history_tokens if max_tokens is UNSET else max_tokens
        if budget is None and max_messages is None:
            raise InvalidInput("a chat message history needs max_tokens or max_messages")
        self.max_tokens: int | None = budget
        self.max_messages = max_messages
        self.conversation = Conversation(memory, self.scope)
        self._lock = threading.Lock()
        self._cached: list[BaseMessage] | None = None
        self._generation = 0
        """Bumped by every write and clear: a read keeps its window only if no write or clear
        ran while it was reading."""

    # -- the one-read-per-turn cache ------------------------------------------------------------

    def invalidate(self) -> None:
        """Drop the kept window: the next read goes to the store (for example after a failed
        turn, before reusing this object for another)."""
        with self._lock:
            self._cached = None
            self._generation += 1

    def _take_cached(self) -> tuple[list[BaseMessage] | None, int]:
        """The kept window (dropped as it is taken), and the generation a new read starts at."""
        with self._lock:
            cached, self._cached = self._cached, None
            return cached, self._generation

    def _keep(self, window: Window, generation: int) -> list[BaseMessage]:
        messages = from_messages(window.messages())
        with self._lock:
            if generation == self._generation:
                self._cached = messages
        return list(messages)

    # -- reads ---------------------------------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The window of the conversation as LangChain messages (one store read, or the kept
        window of the read before; see the module docstring)."""
        cached, generation = self._take_cached()
        if cached is not None:
            return list(cached)
        window = self.conversation.window(
            max_tokens=self.max_tokens, max_messages=self.max_messages
        )
        return self._keep(window, generation)

    async def aget_messages(self) -> list[BaseMessage]:
        """Async :attr:`messages`, on the store's async path."""
        cached, generation = self._take_cached()
        if cached is not None:
            return list(cached)
        window = await self.conversation.awindow(
            max_tokens=self.max_tokens, max_messages=self.max_messages
        )
        return self._keep(window, generation)

    # -- writes --------------------------------------------------------------------------------

    @staticmethod
    def _neutral(messages: Iterable[BaseMessage]) -> list[Message]:
        """The neutral form of a batch, after checking it holds only LangChain messages."""
        if isinstance(messages, str | bytes | dict | BaseMessage) or not isinstance(
            messages, Iterable
        ):
            raise InvalidInput(
                f"add_messages takes a sequence of LangChain messages, not "
                f"{type(messages).__name__}"
            )
        batch = list(messages)
        for m in batch:
            if not isinstance(m, BaseMessage):
                raise InvalidInput(
                    f"add_messages takes LangChain BaseMessage objects, not {type(m).__name__}"
                )
        return to_messages(batch)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` as one batch (nothing for an empty one); drops the kept window.

        Raises :class:`~memory_adapters.InvalidInput` (a ``ValueError``) for anything but
        LangChain messages; then nothing of the batch is stored. Values JSON cannot hold that a
        model put in a message (``NaN`` in tool-call arguments) are stored in the encoding of
        :func:`~memory_adapters.validation.json_safe`, never refused.
        """
        batch = self._neutral(messages)
        self.invalidate()
        if not batch:
            return
        try:
            self.conversation.append(batch, coerce=True)
        finally:
            self.invalidate()

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async :meth:`add_messages`, on the store's async path."""
        batch = self._neutral(messages)
        self.invalidate()
        if not batch:
            return
        try:
            await self.conversation.aappend(batch, coerce=True)
        finally:
            self.invalidate()

    def clear(self) -> None:
        """Delete the whole conversation (every message, and its summaries)."""
        self.invalidate()
        try:
            self.conversation.clear()
        finally:
            self.invalidate()

    async def aclear(self) -> None:
        """Async :meth:`clear`, on the store's async path."""
        self.invalidate()
        try:
            await self.conversation.aclear()
        finally:
            self.invalidate()

    def __repr__(self) -> str:
        return (
            f"<MemoryChatMessageHistory conversation={self.scope.conversation_id!r} "
            f"user={self.scope.user_id!r} namespace={self.scope.namespace!r}>"
        )
