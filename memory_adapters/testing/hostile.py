"""The hostile-argument table of the conformance kit.

Every public method of ``Conversation``, ``Facts``, ``WorkingMemory`` and ``MemoryTools`` is
called with arguments that are too large (``2**63``, ``2**64``, ``10**400``), negative, zero
where zero is not allowed, of the wrong type (``str``, ``float``, ``bool``, ``None``,
``list``, ``bytes``, ``dict``), not finite (``nan``, ``inf``, ``-inf``) or otherwise out of
range, and each :class:`Case` names the exact error class every store must raise. The core
checks every argument before a store sees it, so the answer never depends on the store.

:func:`boundary_cases` holds the other side: arguments at the edge of what is allowed
(``MAX_INT``, a ttl of ``MAX_TTL``, a key of ``MAX_ID_LENGTH`` characters, a value of
``MAX_VALUE_BYTES``, hostile search strings) that every store must accept, with the same
answer.

``StoreConformance`` runs both tables, sync and async, against the store under test.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memory_adapters.errors import (
    AppendConflict,
    InvalidId,
    InvalidInput,
    InvalidTTL,
    InvalidValue,
    ToolArgumentError,
    ValueTooLarge,
    VersionConflict,
)
from memory_adapters.facts import MAX_QUERY_TERMS, MAX_SEARCH_TEXT_BYTES, MAX_TERM_LENGTH
from memory_adapters.messages import Message, ToolCall, ToolResult
from memory_adapters.validation import (
    MAX_ID_LENGTH,
    MAX_INT,
    MAX_TTL,
    MAX_TURN_BYTES,
    MAX_VALUE_BYTES,
    describe,
)

NAN = float("nan")
INF = float("inf")

HUGE_INTS: tuple[int, ...] = (2**63, 2**64, 10**400)
"""Ints beyond ``MAX_INT``: one past it, one past the unsigned 64-bit range, one past a float."""

NEGATIVE_INTS: tuple[int, ...] = (-1, -(2**63), -(10**400))

NON_FINITE: tuple[float, ...] = (NAN, INF, -INF)

WRONG_TYPES: tuple[Any, ...] = ("5", 5.0, True, False, [5], b"5", {"n": 5})
"""Values of the wrong type for an int argument (``None`` is added where it is not allowed)."""

BAD_FLAGS: tuple[Any, ...] = ("yes", 1, 0, 1.0, NAN, [True], b"", {})
"""What a ``True``/``False`` option must refuse."""

BAD_IDS: tuple[Any, ...] = (
    "",
    "k" * (MAX_ID_LENGTH + 1),
    "k" * (1 << 20),
    "nul\x00key",
    "new\nline",
    "tab\tkey",
    "del\x7f",
    "lone \ud800 surrogate",
    42,
    4.2,
    True,
    NAN,
    b"key",
    ["key"],
    {"key": 1},
)
"""Identifiers no store may see: empty, too long, with control characters or lone surrogates,
or not a ``str``."""


def _deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


BAD_VALUES: tuple[Any, ...] = (
    {1, 2},
    b"bytes",
    object(),
    NAN,
    INF,
    -INF,
    {"n": NAN},
    {1: "int key"},
    (1, 2),
    complex(1, 2),
    "lone \ud800 surrogate",
    {"k": "\udfff"},
    10**5000,
    _deep(150),
    Message.user("a message is not JSON"),
)
"""Values that are not plain JSON (:class:`InvalidValue`)."""

TOO_LARGE_VALUES: tuple[Any, ...] = (
    "x" * (MAX_VALUE_BYTES + 1),
    ["x" * (MAX_VALUE_BYTES // 2)] * 2,
    "é" * (MAX_VALUE_BYTES // 2),
)
"""Plain JSON values over ``MAX_VALUE_BYTES`` (:class:`ValueTooLarge`)."""

BAD_IMPORTANCE: tuple[Any, ...] = (
    "high",
    None,
    [1],
    b"1",
    True,
    {"v": 1},
    *NON_FINITE,
    10**400,
    -(10**400),
)

BAD_TTLS: tuple[Any, ...] = (
    0,
    0.0,
    -1,
    -0.5,
    -(10**400),
    *NON_FINITE,
    *HUGE_INTS,
    1e12,
    MAX_TTL + 1,
    MAX_TTL + 0.5,
    "10",
    True,
    False,
    [1],
    b"1",
    {"s": 1},
)


def bad_ints(minimum: int, *, none_ok: bool) -> list[Any]:
    """What an int argument accepted from ``minimum`` to ``MAX_INT`` must refuse: huge and
    negative ints, ``minimum - 1``, wrong types, non-finite floats, and ``None`` unless it
    means "no limit" (or "the default") there."""
    below = [minimum - 1, *(n for n in NEGATIVE_INTS if n < minimum - 1)]
    bad: list[Any] = [*HUGE_INTS, *below, *WRONG_TYPES, *NON_FINITE]
    if not none_ok:
        bad.append(None)
    return bad


def _ints(
    target: str,
    method: str,
    param: str,
    *,
    minimum: int,
    none_ok: bool,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    error: type[BaseException] = InvalidInput,
) -> list[Case]:
    """Cases for an int argument accepted from ``minimum`` to ``MAX_INT``."""
    return [
        Case(target, method, args, {**(kwargs or {}), param: value}, error)
        for value in bad_ints(minimum, none_ok=none_ok)
    ]


def _each(
    target: str,
    method: str,
    values: tuple[Any, ...] | list[Any],
    error: type[BaseException],
    *,
    before: tuple[Any, ...] = (),
    after: tuple[Any, ...] = (),
    param: str | None = None,
) -> list[Case]:
    """One case per value: the value is the keyword argument ``param``, or else the
    positional argument between ``before`` and ``after``."""
    if param is not None:
        return [Case(target, method, (*before, *after), {param: v}, error) for v in values]
    return [Case(target, method, (*before, v, *after), {}, error) for v in values]


@dataclass(frozen=True, slots=True)
class Case:
    """One call of a public method, and what every store must answer.

    ``target`` is ``"conversation"``, ``"facts"``, ``"working"``, ``"fork"`` (the fork ``"f"``
    of the working memory) or ``"tools"``; ``method`` is the sync method, whose async twin is
    ``"a" + method``. ``error`` is the exact class of the error the call must raise, or
    ``None`` when it must succeed, in which case ``check``, if given, must hold for its result.
    """

    target: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    error: type[BaseException] | None = None
    check: Callable[[Any], bool] | None = None

    @property
    def name(self) -> str:
        """The call, printable (long arguments shortened)."""
        parts = [describe(a) for a in self.args]
        parts += [f"{k}={describe(v)}" for k, v in self.kwargs.items()]
        return f"{self.target}.{self.method}({', '.join(parts)})"


def _turn() -> list[Message]:
    call = ToolCall("call-h", "lookup", {"q": "h"})
    return [
        Message.user("hostile?"),
        Message.assistant("", [call]),
        Message.tool(ToolResult(call.id, "ok", name="lookup")),
        Message.assistant("done"),
    ]


def hostile_cases(now: float) -> list[Case]:
    """Every refused call. ``now`` is the current time, for expiries in the past and too far
    in the future."""
    cases: list[Case] = []
    turn = _turn()

    # -- Conversation ------------------------------------------------------------------------
    for method in ("window", "messages"):
        cases += _ints("conversation", method, "max_tokens", minimum=0, none_ok=True)
        cases += _ints("conversation", method, "max_messages", minimum=0, none_ok=True)
        cases += _ints("conversation", method, "summary_tokens", minimum=0, none_ok=True)
        for flag in ("pin_system", "pin_first_turn"):
            cases += _each("conversation", method, BAD_FLAGS, InvalidInput, param=flag)
        # no budget at all
        cases.append(Case("conversation", method, (), {"max_tokens": None}, InvalidInput))
        cases.append(Case("conversation", method, (), {"no_such_option": 1}, TypeError))
    cases += _ints("conversation", "read", "start_seq", minimum=1, none_ok=False)
    cases += _ints("conversation", "read", "end_seq", minimum=0, none_ok=True)
    cases += _ints("conversation", "read", "limit", minimum=1, none_ok=True)
    cases += _ints(
        "conversation", "append", "expected_last_seq", minimum=0, none_ok=True, args=(turn,)
    )
    # conversation search: the query, the limit, the mode, the flag, the times
    cases += _ints("conversation", "search", "limit", minimum=1, none_ok=False, args=("tea",))
    cases += _each(
        "conversation",
        "search",
        (None, 5, 5.0, NAN, True, b"tea", ["tea"], {"q": "tea"}),
        InvalidInput,
    )
    cases += _each(
        "conversation",
        "search",
        ("fuzzy", "KEYWORD", "", 5, b"keyword"),
        InvalidInput,
        before=("tea",),
        param="mode",
    )
    cases += _each(
        "conversation",
        "search",
        BAD_FLAGS,
        InvalidInput,
        before=("tea",),
        param="all_conversations",
    )
    bad_times: tuple[Any, ...] = (
        "yesterday",
        NAN,
        INF,
        -INF,
        10**400,
        True,
        [now],
        b"1",
        datetime.datetime(2024, 1, 1),  # naive: no instant
    )
    for param in ("since", "until"):
        cases += _each(
            "conversation", "search", bad_times, InvalidInput, before=("tea",), param=param
        )
    cases.append(Case("conversation", "search", ("tea",), {"no_such_option": 1}, TypeError))
    not_messages: tuple[Any, ...] = (
        Message.user("one message, not a list"),
        [],
        (),
        "text",
        b"bytes",
        None,
        5,
        5.0,
        NAN,
        {"role": "user"},
        [None],
        [{"role": "user", "text": "x"}],
        [Message.user("x"), "x"],
        [turn],
    )
    cases += _each("conversation", "append", not_messages, InvalidInput)
    bad_messages: tuple[Any, ...] = (
        Message("boss", "x"),  # type: ignore[arg-type]
        Message(["user"], "x"),  # type: ignore[arg-type]
        Message(10**5000, "x"),  # type: ignore[arg-type]
        Message("user", 5),  # type: ignore[arg-type]
        Message("user", None),  # type: ignore[arg-type]
        Message("user", "x", tool_calls=None),  # type: ignore[arg-type]
        Message("user", "x", meta="not a dict"),  # type: ignore[arg-type]
        Message("user", "x", framework=5),  # type: ignore[arg-type]
        Message("user", "lone \udfff surrogate"),
        Message("user", "x", raw={1, 2}),
        Message("user", "x", raw=10**5000),
        Message("user", "x", meta={"n": NAN}),
        Message.assistant("", [ToolCall("i", "n", {"x": INF})]),
        Message.assistant("", [ToolCall("i", "n", "args")]),  # type: ignore[arg-type]
        Message.assistant("", [ToolCall("i", 5, {})]),  # type: ignore[arg-type]
        Message("user", "x", tool_results=[ToolResult("r", 1)]),
        Message.tool(ToolResult("r", {1, 2})),
    )
    cases += _each("conversation", "append", [[m] for m in bad_messages], InvalidValue)
    cases.append(
        Case(
            "conversation",
            "append",
            ([Message.user("y" * (MAX_TURN_BYTES + 1))],),
            {},
            ValueTooLarge,
        )
    )
    for param in ("run_id", "idempotency_key"):
        cases += _each("conversation", "append", BAD_IDS, InvalidId, before=(turn,), param=param)
    cases += _each(
        "conversation",
        "append",
        (5, 5.0, True, NAN, b"gpt-4o", ["gpt-4o"], {"model": "gpt-4o"}),
        InvalidInput,
        before=(turn,),
        param="model",
    )
    cases.append(Case("conversation", "last_seq", (5,), {}, TypeError))

    # -- Facts -------------------------------------------------------------------------------
    for method in ("put", "get", "forget", "history"):
        extra: tuple[Any, ...] = (1,) if method == "put" else ()
        cases += _each("facts", method, (*BAD_IDS, None), InvalidId, after=extra)
    cases += _each("facts", "put", BAD_VALUES, InvalidValue, before=("k",))
    cases += _each("facts", "put", TOO_LARGE_VALUES, ValueTooLarge, before=("k",))
    cases += _each(
        "facts", "put", BAD_IMPORTANCE, InvalidValue, before=("k", 1), param="importance"
    )
    cases += _each("facts", "put", BAD_TTLS, InvalidTTL, before=("k", 1), param="ttl")
    bad_expiries: tuple[Any, ...] = (
        now - 1,
        0,
        -1,
        *NON_FINITE,
        10**400,
        -(10**400),
        1e12,
        now + MAX_TTL + 3600,
        "tomorrow",
        True,
        [now + 60],
        b"1",
    )
    cases += _each("facts", "put", bad_expiries, InvalidTTL, before=("k", 1), param="expires_at")
    cases.append(Case("facts", "put", ("k", 1), {"ttl": 60, "expires_at": now + 60}, InvalidTTL))
    cases += _ints("facts", "put", "expected_version", minimum=0, none_ok=True, args=("k", 1))
    cases += _ints("facts", "forget", "expected_version", minimum=0, none_ok=True, args=("k",))
    cases += _ints("facts", "all", "limit", minimum=1, none_ok=True)
    cases += _ints("facts", "history", "limit", minimum=1, none_ok=True, args=("tea",))
    cases += _ints("facts", "search", "limit", minimum=1, none_ok=False, args=("tea",))
    cases += _each(
        "facts",
        "search",
        (None, 5, 5.0, NAN, True, b"tea", ["tea"], {"q": "tea"}),
        InvalidInput,
    )

    # -- WorkingMemory -----------------------------------------------------------------------
    for target in ("working", "fork"):
        for method in ("set", "get", "note", "delete"):
            extra = (1,) if method == "set" else ()
            cases += _each(target, method, (*BAD_IDS, None), InvalidId, after=extra)
        cases += _each(target, "set", BAD_VALUES, InvalidValue, before=("k",))
        cases += _each(target, "set", TOO_LARGE_VALUES, ValueTooLarge, before=("k",))
        cases += _each(
            target, "set", BAD_IMPORTANCE, InvalidValue, before=("k", 1), param="importance"
        )
        cases += _each(target, "set", BAD_TTLS, InvalidTTL, before=("k", 1), param="ttl")
        cases += _ints(target, "render", "max_tokens", minimum=0, none_ok=True)
        cases += _each(target, "fork", (*BAD_IDS, None), InvalidId)
        cases += _each(target, "fork", ("a/b", "/", "a/"), InvalidInput)
        cases.append(Case(target, "items", (5,), {}, TypeError))
    cases += _each(
        "fork",
        "merge",
        ("whatever", "CHILD", "", None, 5, NAN, b"child", ["child"], {"policy": "child"}),
        InvalidInput,
    )
    cases.append(Case("working", "merge", ("child",), {}, InvalidInput))  # the root has no parent

    # -- MemoryTools -------------------------------------------------------------------------
    def tool(name: Any, args: Any, **kwargs: Any) -> Case:
        return Case("tools", "call", (name, args), kwargs, ToolArgumentError)

    for name in ("nope", "", "SAVE_MEMORY", None, 5, NAN, b"save_memory", ["save_memory"]):
        cases.append(tool(name, {"key": "k", "value": "v"}))
    for name in ("save_memory", "recall_memory", "search_memory", "list_memories"):
        for args in (None, [], "key=k", 5, [("key", "k")], b"{}"):
            cases.append(tool(name, args))
    bad_tool_keys: tuple[Any, ...] = (
        "",
        "k" * (MAX_ID_LENGTH + 1),
        "nul\x00key",
        "new\nline",
        "lone \ud800",
        5,
        None,
        NAN,
        True,
        ["k"],
        b"k",
    )
    for name in ("save_memory", "recall_memory", "forget_memory"):
        for key in bad_tool_keys:
            cases.append(
                tool(name, {"key": key, "value": "v"} if name == "save_memory" else {"key": key})
            )
    cases += [
        tool("save_memory", {"value": "v"}),
        tool("save_memory", {"key": "k"}),
        tool("save_memory", {"key": "k", "value": "v", "user_id": "bob"}),
        tool("save_memory", {"key": "k", "value": "v", "scope": "user:bob"}),
        tool("save_memory", {1: "x", "key": "k", "value": "v"}),
        tool("recall_memory", {}),
        tool("search_memory", {}),
        tool("forget_memory", {"key": "k", "namespace": "other"}),
        tool("list_memories", {"user_id": "bob"}),
    ]
    for value in (5, None, ["v"], {"v": 1}, True, b"v", NAN, "x" * (MAX_VALUE_BYTES + 1)):
        cases.append(tool("save_memory", {"key": "k", "value": value}))
    cases.append(tool("save_memory", {"key": "k", "value": "lone \ud800"}))
    for importance in ("high", None, *NON_FINITE, -0.1, 1.1, *HUGE_INTS, -(10**400), True, [0.5]):
        cases.append(tool("save_memory", {"key": "k", "value": "v", "importance": importance}))
    for query in (5, None, NAN, b"tea", ["tea"], {"q": "tea"}):
        cases.append(tool("search_memory", {"query": query}))
    for limit in (0, -1, 21, *HUGE_INTS, -(10**400), 1.0, 5.5, "5", True, None, *NON_FINITE):
        cases.append(tool("search_memory", {"query": "tea", "limit": limit}))
    for limit in (0, -1, 101, *HUGE_INTS, 2.0, "5", True, None, NAN):
        cases.append(tool("list_memories", {"limit": limit}))
    for scope in ("user:bob", 5, {"user_id": "bob"}):
        cases.append(Case("tools", "call", ("list_memories", {}), {"scope": scope}, InvalidInput))
    return cases


def _random_words(seed: int, size: int) -> str:
    """Distinct-looking random lower-case words, ``size`` characters in all."""
    rnd = random.Random(seed)
    words = ("".join(rnd.choices(string.ascii_lowercase, k=8)) for _ in itertools.count())
    text = " ".join(itertools.islice(words, size // 9 + 1))
    return text[:size].rstrip()


def _hyphenated(size: int) -> str:
    """Distinct hyphenated words (``aaaa-aaab ...``), ``size`` characters in all: each is
    indexed by PostgreSQL as the compound and its parts, the costliest text for a
    ``tsvector``."""
    parts = ("".join(p) for p in itertools.product(string.ascii_lowercase, repeat=4))
    pairs = (f"{a}-{b}" for a, b in zip(parts, parts, strict=False))
    text = " ".join(itertools.islice(pairs, size // 10 + 1))
    return text[:size].rstrip()


@functools.cache
def big_random() -> str:
    """A value of about 1 MiB of random words, within ``MAX_VALUE_BYTES`` as JSON."""
    return _random_words(7, MAX_VALUE_BYTES - 2)


@functools.cache
def big_hyphenated() -> str:
    """A value of about 1 MiB of distinct hyphenated words, within ``MAX_VALUE_BYTES``."""
    return _hyphenated(MAX_VALUE_BYTES - 2)


def _late_word(text: str) -> str:
    """A word of ``text`` that first occurs beyond what keyword search indexes."""
    words = text.split()
    for word in reversed(words[:-1]):
        if len(text[: text.index(word)].encode()) > MAX_SEARCH_TEXT_BYTES + 100:
            return word
    raise AssertionError("no word beyond the indexed text")  # pragma: no cover


def _keys(facts: Any) -> list[str]:
    return [f.key for f in facts]


BOUNDARY_CONVERSATION: list[Message] = [
    Message.system("you are a boundary test"),
    *_turn(),
    Message.user("second"),
    Message.assistant("second answer"),
]
"""What the boundary scope's conversation holds (seqs 1 to 7) before the cases run."""

BOUNDARY_FACTS: dict[str, Any] = {
    "tea": "oolong tea every morning",
    "long_word": "w" * MAX_TERM_LENGTH,
    "too_long_word": "z" * (MAX_TERM_LENGTH + 1),
}

BOUNDARY_NOTES: dict[str, Any] = {"plan": "drink the tea"}


def boundary_cases(now: float) -> list[Case]:
    """Calls at the edge of what is allowed, which every store must accept alike (or answer
    with the same conflict). They run in a scope seeded with :data:`BOUNDARY_CONVERSATION`,
    :data:`BOUNDARY_FACTS` and :data:`BOUNDARY_NOTES`."""
    n = len(BOUNDARY_CONVERSATION)
    tail = n - 1  # the window starts at the first user message; the system one is pinned
    ok = None
    big = big_random()
    late_random = _late_word(big)
    first_random = big.split()[1]
    many = " ".join(f"zz{i}" for i in range(10_000))  # far more than MAX_QUERY_TERMS words
    assert MAX_QUERY_TERMS < 10_000
    c: list[Case] = [
        # conversation: limits up to MAX_INT, read ranges
        Case(
            "conversation",
            "window",
            (),
            {"max_tokens": MAX_INT},
            ok,
            lambda w: len(w.pinned) == 1 and len(w.records) == tail,
        ),
        Case(
            "conversation",
            "window",
            (),
            {"max_messages": MAX_INT},
            ok,
            lambda w: len(w.records) == tail,
        ),
        Case(
            "conversation",
            "window",
            (),
            {"max_tokens": None, "max_messages": MAX_INT, "pin_system": False},
            ok,
            # unpinned, and everything fits: the window opens with the system message
            lambda w: not w.pinned and len(w.records) == n,
        ),
        Case(
            "conversation",
            "window",
            (),
            {
                "max_tokens": MAX_INT,
                "max_messages": MAX_INT,
                "pin_first_turn": True,
                "summary_tokens": MAX_INT,
            },
            ok,
            lambda w: len(w.pinned) == 5 and len(w.records) == 2,
        ),
        Case("conversation", "window", (), {"max_tokens": 0}, ok, lambda w: w.records == []),
        Case("conversation", "window", (), {"max_messages": 0}, ok, lambda w: w.records == []),
        Case(
            "conversation",
            "messages",
            (),
            {"max_tokens": MAX_INT},
            ok,
            lambda ms: [m.to_dict() for m in ms] == [m.to_dict() for m in BOUNDARY_CONVERSATION],
        ),
        Case("conversation", "read", (), {"limit": MAX_INT}, ok, lambda rs: len(rs) == n),
        Case("conversation", "read", (), {"end_seq": MAX_INT}, ok, lambda rs: len(rs) == n),
        Case(
            "conversation",
            "read",
            (),
            {"start_seq": 2, "limit": MAX_INT},
            ok,
            lambda rs: [r.seq for r in rs] == list(range(2, n + 1)),
        ),
        Case(
            "conversation",
            "read",
            (),
            {"start_seq": 3, "end_seq": 4, "limit": MAX_INT},
            ok,
            lambda rs: [r.seq for r in rs] == [3, 4],
        ),
        Case("conversation", "read", (), {"start_seq": MAX_INT}, ok, lambda rs: rs == []),
        Case(
            "conversation",
            "read",
            (),
            {"start_seq": MAX_INT, "end_seq": MAX_INT, "limit": MAX_INT},
            ok,
            lambda rs: rs == [],
        ),
        Case("conversation", "read", (), {"start_seq": 5, "end_seq": 0}, ok, lambda rs: rs == []),
        Case("conversation", "read", (), {"end_seq": 0}, ok, lambda rs: rs == []),
        Case("conversation", "read", (), {"limit": 1}, ok, lambda rs: [r.seq for r in rs] == [1]),
        Case("conversation", "last_seq", (), {}, ok, lambda s: s == n),
        Case("conversation", "append", (_turn(),), {"expected_last_seq": MAX_INT}, AppendConflict),
        # facts: limits, versions, expiries at the edge
        Case(
            "facts",
            "all",
            (),
            {"limit": MAX_INT},
            ok,
            lambda fs: set(BOUNDARY_FACTS) <= set(_keys(fs)),
        ),
        Case("facts", "search", ("tea",), {"limit": MAX_INT}, ok, lambda fs: _keys(fs) == ["tea"]),
        Case(
            "conversation",
            "search",
            ("second",),
            {"limit": MAX_INT, "all_conversations": True},
            ok,
            lambda hits: sorted(h.seq for h in hits) == [6, 7],  # "second answer" follows "second"
        ),
        Case(
            "conversation",
            "search",
            ("second",),
            {"since": -1e300, "until": 1e300},
            ok,
            lambda hits: sorted(h.seq for h in hits) == [6, 7],
        ),
        Case("facts", "put", ("tea", "x"), {"expected_version": MAX_INT}, VersionConflict),
        Case("facts", "put", ("absent", "x"), {"expected_version": MAX_INT}, VersionConflict),
        Case("facts", "forget", ("tea",), {"expected_version": MAX_INT}, VersionConflict),
        Case(
            "facts",
            "put",
            ("ttl_max", 1),
            {"ttl": MAX_TTL},
            ok,
            lambda f: f.expires_at is not None and abs(f.expires_at - f.updated_at - MAX_TTL) < 60,
        ),
        Case("facts", "put", ("ttl_max_float", 1), {"ttl": float(MAX_TTL) - 0.5}, ok),
        Case("facts", "get", ("ttl_max",), {}, ok, lambda f: f is not None and f.value == 1),
        Case(
            "facts",
            "put",
            ("expires_far", 1),
            {"expires_at": now + MAX_TTL - 3600},
            ok,
            lambda f: f.expires_at == now + MAX_TTL - 3600,
        ),
        Case("facts", "get", ("expires_far",), {}, ok, lambda f: f is not None),
        Case(
            "facts",
            "put",
            ("important", 1),
            {"importance": 1e308},
            ok,
            lambda f: f.importance == 1e308,
        ),
        Case(
            "facts",
            "put",
            ("unimportant", 1),
            {"importance": -(10**300)},
            ok,
            lambda f: f.importance == -1e300,
        ),
        Case(
            "facts",
            "put",
            ("k" * MAX_ID_LENGTH, "longest key"),
            {},
            ok,
            lambda f: f.key == "k" * MAX_ID_LENGTH,
        ),
        Case(
            "facts",
            "get",
            ("k" * MAX_ID_LENGTH,),
            {},
            ok,
            lambda f: f is not None and f.value == "longest key",
        ),
        Case("facts", "put", ("huge_int", 10**400), {}, ok),
        Case("facts", "get", ("huge_int",), {}, ok, lambda f: f is not None and f.value == 10**400),
        Case("facts", "put", ("int64_edges", [MAX_INT, -MAX_INT - 1, 2**64]), {}, ok),
        Case(
            "facts",
            "get",
            ("int64_edges",),
            {},
            ok,
            lambda f: f is not None and f.value == [MAX_INT, -MAX_INT - 1, 2**64],
        ),
        Case("facts", "put", ("largest", "x" * (MAX_VALUE_BYTES - 2)), {}, ok),
        # hostile search strings: the same answer on every store
        Case("facts", "search", ("t" * (1 << 20),), {}, ok, lambda fs: fs == []),
        Case("conversation", "search", ("t" * (1 << 20),), {}, ok, lambda hits: hits == []),
        Case(
            "conversation",
            "search",
            ('" OR x=y -- owner : * $where %_ \x00second',),
            {},
            ok,
            lambda hits: sorted(h.seq for h in hits) == [6, 7],
        ),
        Case("facts", "search", ("\x00tea\x00",), {}, ok, lambda fs: _keys(fs) == ["tea"]),
        Case(
            "facts",
            "search",
            ("!?.,;:'\"()[]{}<>$%^&*-+=/\\|~`@# \x00 \u2028",),
            {},
            ok,
            lambda fs: fs == [],
        ),
        Case("facts", "search", ('" OR x=y -- owner : * $where',), {}, ok, lambda fs: fs == []),
        Case("facts", "search", ("tea " + many,), {}, ok, lambda fs: _keys(fs) == ["tea"]),
        Case("facts", "search", (many + " tea",), {}, ok, lambda fs: fs == []),
        Case(
            "facts",
            "search",
            ("x" * (MAX_TERM_LENGTH + 1) + " tea",),
            {},
            ok,
            lambda fs: _keys(fs) == ["tea"],
        ),
        Case(
            "facts",
            "search",
            ("W" * MAX_TERM_LENGTH,),
            {},
            ok,
            lambda fs: _keys(fs) == ["long_word"],
        ),
        Case("facts", "search", ("z" * (MAX_TERM_LENGTH + 1),), {}, ok, lambda fs: fs == []),
        Case("facts", "put", ("big_random", big), {}, ok),
        Case("facts", "get", ("big_random",), {}, ok, lambda f: f is not None and f.value == big),
        Case("facts", "search", (first_random,), {}, ok, lambda fs: _keys(fs) == ["big_random"]),
        Case("facts", "search", (late_random,), {}, ok, lambda fs: fs == []),
        Case("facts", "put", ("big_hyphenated", big_hyphenated()), {}, ok),
        Case("facts", "search", ("aaab",), {}, ok, lambda fs: _keys(fs) == ["big_hyphenated"]),
        # working memory
        Case(
            "working",
            "render",
            (),
            {"max_tokens": MAX_INT},
            ok,
            lambda text: "- plan: drink the tea" in text,
        ),
        Case("working", "render", (), {"max_tokens": 0}, ok, lambda text: text == ""),
        Case("working", "set", ("ttl_max", 1), {"ttl": MAX_TTL}, ok),
        Case(
            "working",
            "note",
            ("ttl_max",),
            {},
            ok,
            lambda note: note is not None and note.expires_at is not None,
        ),
        Case("working", "set", ("k" * MAX_ID_LENGTH, "x" * (MAX_VALUE_BYTES - 2)), {}, ok),
        Case(
            "working",
            "get",
            ("k" * MAX_ID_LENGTH,),
            {},
            ok,
            lambda v: v == "x" * (MAX_VALUE_BYTES - 2),
        ),
        Case("working", "fork", ("f" * MAX_ID_LENGTH,), {}, ok),
        Case(
            "fork",
            "render",
            (),
            {"max_tokens": MAX_INT},
            ok,
            lambda text: "- plan: drink the tea" in text,
        ),
        Case("working", "items", (), {}, ok, lambda items: "plan" in items),
        # tools at the edges of their schemas
        Case(
            "tools", "call", ("list_memories", {"limit": 100}), {}, ok, lambda text: '"tea"' in text
        ),
        Case(
            "tools",
            "call",
            ("search_memory", {"query": "tea", "limit": 20}),
            {},
            ok,
            lambda text: '"tea"' in text,
        ),
        Case(
            "tools",
            "call",
            ("save_memory", {"key": "k" * MAX_ID_LENGTH, "value": "v", "importance": 0}),
            {},
            ok,
        ),
        Case(
            "tools",
            "call",
            ("save_memory", {"key": "tool_fact", "value": "v", "importance": 1.0}),
            {},
            ok,
        ),
        Case(
            "tools",
            "call",
            ("recall_memory", {"key": "tool_fact"}),
            {},
            ok,
            lambda text: '"importance": 1.0' in text,
        ),
    ]
    return c
