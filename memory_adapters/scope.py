"""Whose memory: the scope a piece of memory belongs to, and the session that sets it.

The application decides the scope — through ``memory.session(...)``, the framework's own
identifiers, or resolvers given to ``wrap`` — and the model never can. A session is a
context variable, so it follows async tasks and threads started with ``contextvars``.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, replace
from types import TracebackType
from urllib.parse import quote
from uuid import UUID

from .errors import InvalidId, InvalidInput, NoScope
from .validation import check_id


def framework_id(value: object, what: str, source: str = "") -> str | None:
    """An identifier a framework hands over (a LangGraph ``thread_id`` or ``user_id``, what a
    resolver returned), as memory keeps it: ``None`` and ``""`` are no value; a ``str`` is
    itself; an ``int`` (not a ``bool``) or a ``UUID`` is its ``str`` (``5`` → ``"5"``), as
    frameworks accept them. Anything else raises :class:`~memory_adapters.errors.InvalidId`
    naming ``what`` and ``source``, never silently dropped. The core API (``memory.session``,
    ``Scope``) itself takes ``str`` only."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = str(value)
    elif (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, UUID):
        text = str(int(value)) if isinstance(value, int) else str(value)
    else:
        where = f" from {source}" if source else ""
        raise InvalidId(
            f"{what}{where} must be a str, an int or a UUID, not {type(value).__name__}"
        )
    return check_id(text, what)


def _part(value: str) -> str:
    return quote(value, safe="")


@dataclass(frozen=True, slots=True)
class Scope:
    """Who and what a memory operation is for.

    ``namespace`` separates applications or tenants sharing one store; ``user_id`` owns
    long-term facts; ``conversation_id`` names the conversation log; ``agent_id`` optionally
    separates agents' facts; ``fork`` is the working-memory fork path of a sub-agent.
    """

    namespace: str = "default"
    user_id: str | None = None
    conversation_id: str | None = None
    agent_id: str | None = None
    fork: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_id(self.namespace, "namespace")
        if self.user_id is not None:
            check_id(self.user_id, "user_id")
        if self.conversation_id is not None:
            check_id(self.conversation_id, "conversation_id")
        if self.agent_id is not None:
            check_id(self.agent_id, "agent_id")
        for name in self.fork:
            check_id(name, "fork name")
            if "/" in name:
                raise InvalidInput("a fork name must not contain '/'")

    def merged(self, **changes: object) -> Scope:
        """A copy with the non-``None`` ``changes`` applied."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[arg-type]

    @property
    def conversation_key(self) -> str:
        """The store key of this scope's conversation log. Raises :class:`NoScope` without
        a conversation id."""
        if self.conversation_id is None:
            raise NoScope(
                "no conversation in scope: use memory.session(conversation_id=...), the "
                "framework's conversation/thread id, or a resolver given to memory.wrap()"
            )
        return ":".join(
            (_part(self.namespace), _part(self.user_id or ""), _part(self.conversation_id))
        )

    @property
    def fact_scope(self) -> str:
        """The scope string long-term facts are kept under: the user (and agent, if set);
        without a user, the conversation."""
        if self.user_id is not None:
            base = "user:" + _part(self.user_id)
        elif self.conversation_id is not None:
            base = "conversation:" + self.conversation_key
        else:
            raise NoScope(
                "no user or conversation in scope for long-term memory: use "
                "memory.session(user_id=...)"
            )
        if self.agent_id is not None:
            base += "/agent:" + _part(self.agent_id)
        return base

    @property
    def working_root(self) -> str:
        """The working-memory path of the conversation (before any fork)."""
        return self.conversation_key


_ENTERED: contextvars.ContextVar[dict[Session, tuple[contextvars.Token[Scope | None], ...]]] = (
    contextvars.ContextVar("memory_adapters.entered_sessions")
)
"""Per context, the tokens of the sessions entered and not yet exited there, innermost last."""


class Session:
    """Sets the scope for the code inside it; a sync and an async context manager.

    Nested sessions inherit what they do not set. Exiting restores the scope in force before
    the matching entry. One session object may be entered again while it is in force (``with
    s: with s:``), and in several threads or tasks at once: each exit undoes its own entry in
    its own context. Exiting a session in a context where it was not entered raises
    :class:`~memory_adapters.errors.InvalidInput`.
    """

    __slots__ = ("_scope", "_var")

    def __init__(self, var: contextvars.ContextVar[Scope | None], scope: Scope) -> None:
        self._var = var
        self._scope = scope

    @property
    def scope(self) -> Scope:
        """The scope this session sets."""
        return self._scope

    def __enter__(self) -> Scope:
        token = self._var.set(self._scope)
        entered = _ENTERED.get({})
        _ENTERED.set({**entered, self: (*entered.get(self, ()), token)})
        return self._scope

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        entered = _ENTERED.get({})
        tokens = entered.get(self)
        if not tokens:
            raise InvalidInput("this session was not entered here: exit it where it was entered")
        rest = {k: v for k, v in entered.items() if k is not self}
        if len(tokens) > 1:
            rest[self] = tokens[:-1]
        _ENTERED.set(rest)
        self._var.reset(tokens[-1])

    async def __aenter__(self) -> Scope:
        return self.__enter__()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(et, e, tb)
