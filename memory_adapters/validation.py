"""Checks applied to every argument before a store sees it.

Every public method of the core (``Conversation``, ``Facts``, ``WorkingMemory``,
``MemoryTools``, ``Memory``) checks its arguments here, once, before anything reaches a store;
so every store gives the same typed error for the same bad argument, and nothing is written.

Stores can then rely on: identifiers are non-empty strings of bounded length without control
characters; values are plain JSON (dict with str keys, list, str, int, finite float, bool,
None) that encode to UTF-8; sizes are within limits; counts, limits, budgets, seqs and
versions are ``int`` (never ``bool`` or ``float``) from 0 (or 1) to :data:`MAX_INT`, which
every backend holds as a 64-bit signed integer; times to live are at most :data:`MAX_TTL`.
Anything else raises a typed error from :mod:`memory_adapters.errors` and nothing is written.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from typing import Any

from .errors import InvalidId, InvalidInput, InvalidTTL, InvalidValue, ValueTooLarge

MAX_ID_LENGTH = 256
"""Longest user, conversation, namespace, scope or fact-key identifier, in characters."""

MAX_VALUE_BYTES = 1 << 20
"""Largest fact or working-memory value, as UTF-8 JSON (1 MiB)."""

MAX_TURN_BYTES = 15 << 20
"""Largest batch of messages appended at once, as UTF-8 JSON (15 MiB: under MongoDB's
16 MB document limit, with room for the envelope)."""

MAX_DEPTH = 100
"""Deepest nesting accepted in a JSON value."""

MAX_INT = 2**63 - 1
"""Largest count, limit, token budget, seq or version accepted (9223372036854775807): the
largest 64-bit signed integer, which SQLite, PostgreSQL (``bigint``) and MongoDB (``int64``)
all hold. ``sys.maxsize`` as "no limit" is accepted on every store; anything larger raises
:class:`~memory_adapters.errors.InvalidInput`."""

MAX_TTL = 31_557_600_000
"""Longest time to live accepted, in seconds: 1000 Julian years (1000 x 365.25 days). A
larger ``ttl``, or an ``expires_at`` further than this from now, raises
:class:`~memory_adapters.errors.InvalidTTL` (an expiry that far out can be written as no
expiry; it also keeps expiry dates within what every backend can represent, such as
MongoDB's dates)."""

_CONTROL = {chr(c) for c in range(32)} | {"\x7f"}


def check_id(value: object, what: str = "id") -> str:
    """Return ``value`` if it is an acceptable identifier, else raise :class:`InvalidId`."""
    if not isinstance(value, str):
        raise InvalidId(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidId(f"{what} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidId(f"{what} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}")
    if not _CONTROL.isdisjoint(value):
        raise InvalidId(f"{what} must not contain control characters (NUL, newline, ...)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidId(f"{what} is not valid Unicode (lone surrogate)") from None
    return value


def check_json(value: Any, what: str = "value") -> Any:
    """Raise :class:`InvalidValue` unless ``value`` is plain JSON that round-trips exactly."""
    _walk(value, what, 0)
    return value


def _walk(value: Any, what: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise InvalidValue(f"{what} is nested deeper than {MAX_DEPTH} levels")
    t = type(value)
    if value is None or t is bool or t is int:
        return
    if t is str:
        return
    if t is float:
        if not math.isfinite(value):
            raise InvalidValue(f"{what} holds {value!r}, which JSON cannot represent")
        return
    if t is list:
        for item in value:
            _walk(item, what, depth + 1)
        return
    if t is dict:
        for k, item in value.items():
            if type(k) is not str:
                raise InvalidValue(
                    f"{what} has a {type(k).__name__} key {k!r}; JSON object keys are str"
                )
            _walk(item, what, depth + 1)
        return
    raise InvalidValue(
        f"{what} holds a {t.__name__}, which is not JSON "
        "(use dict, list, str, int, float, bool or None)"
    )


def dumps(value: Any, what: str = "value", limit: int = MAX_VALUE_BYTES) -> str:
    """Validate ``value`` and return its compact JSON text, within ``limit`` UTF-8 bytes.

    Non-ASCII text is kept as is (not ``\\u`` escaped) except NUL, which JSON always escapes;
    so the JSON text itself never holds a NUL byte, whatever the value holds.
    """
    check_json(value, what)
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # an int of more digits than Python writes (sys.get_int_max_str_digits)
        raise InvalidValue(f"{what} holds an int too long to write as JSON") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidValue(
            f"{what} holds text that is not valid Unicode (lone surrogate)"
        ) from None
    if size > limit:
        raise ValueTooLarge(f"{what} is {size} bytes as JSON; the limit is {limit}")
    return text


NON_FINITE: dict[str, str] = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
"""How :func:`json_safe` writes the floats JSON cannot hold (as pydantic's
``ser_json_inf_nan="strings"`` does)."""


def json_safe(value: Any) -> Any:
    """``value`` made into plain JSON that any store keeps, for values a framework accepted
    from a model (tool-call arguments with ``NaN``, text with a lone surrogate ...), which
    must be stored rather than refused. Values JSON holds come back unchanged; for the rest:

    * ``NaN``, ``Infinity`` and ``-Infinity`` become the strings ``"NaN"``, ``"Infinity"`` and
      ``"-Infinity"``;
    * a lone surrogate in a string (or a key) becomes U+FFFD, the replacement character;
    * tuples become lists; ``str``, ``int`` and ``float`` subclasses their plain value; a key
      that is not a string its ``str``; any other object its ``str``;
    * a value nested deeper than :data:`MAX_DEPTH` becomes its JSON text, and an int of more
      digits than Python writes its ``str`` cut short.

    A value too large for a store still raises :class:`ValueTooLarge` where it is written.
    """
    return _safe(value, 0)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _safe_text(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def _safe(value: Any, depth: int) -> Any:
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        return _safe_text(str(value))
    if isinstance(value, int):
        plain = int(value)
        try:
            json.dumps(plain)
        except ValueError:  # more digits than Python writes
            return describe(plain)
        return plain
    if isinstance(value, float):
        plain_float = float(value)
        if math.isfinite(plain_float):
            return plain_float
        return NON_FINITE["nan" if plain_float != plain_float else str(plain_float)]
    if depth >= MAX_DEPTH:
        try:
            return _safe_text(json.dumps(value, default=str, ensure_ascii=False))
        except (ValueError, RecursionError):
            return "..."
    if isinstance(value, dict):
        return {
            _safe_text(k if isinstance(k, str) else str(k)): _safe(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_safe(v, depth + 1) for v in value]
    try:
        return _safe_text(str(value))
    except Exception:
        return f"<{type(value).__name__}>"


def loads(text: str) -> Any:
    """Inverse of :func:`dumps`."""
    return json.loads(text)


def describe(value: object) -> str:
    """A short, safe rendering of ``value`` for an error message: an int too long to print
    (``str`` refuses ints of more than 4300 digits) is shown by its size."""
    if type(value) is int and value.bit_length() > 128:
        return f"{'a negative' if value < 0 else 'an'} int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__, or an int subclass too long to print
        return f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


def check_ttl(ttl: object) -> float | None:
    """Validate a time-to-live in seconds: ``None`` (no expiry) or a number with
    ``0 < ttl <= MAX_TTL``; else raise :class:`InvalidTTL`.

    The bound is checked before the number is converted to ``float``, so an int too large
    for a float (``10**400``) is refused like any other too-long ttl.
    """
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidTTL(f"ttl must be a number of seconds, not {type(ttl).__name__}")
    if isinstance(ttl, float) and math.isnan(ttl):
        raise InvalidTTL("ttl must be a positive number of seconds, not nan")
    if ttl <= 0:
        raise InvalidTTL(f"ttl must be a positive number of seconds, not {describe(ttl)}")
    if ttl > MAX_TTL:
        raise InvalidTTL(
            f"ttl must be at most {MAX_TTL} seconds (1000 years), not {describe(ttl)}: "
            "leave ttl out for a fact that never expires"
        )
    return float(ttl)


def check_expires_at(expires_at: object, now: float) -> float | None:
    """Validate an absolute expiry (seconds since the epoch): ``None``, or a number with
    ``now < expires_at <= now + MAX_TTL``; else raise :class:`InvalidTTL`."""
    if expires_at is None:
        return None
    if isinstance(expires_at, bool) or not isinstance(expires_at, int | float):
        raise InvalidTTL(
            f"expires_at must be seconds since the epoch, not {type(expires_at).__name__}"
        )
    if isinstance(expires_at, float) and math.isnan(expires_at):
        raise InvalidTTL("expires_at must be seconds since the epoch, not nan")
    if expires_at <= now:
        raise InvalidTTL("expires_at is not in the future: the fact would never be visible")
    if expires_at > now + MAX_TTL:
        raise InvalidTTL(
            f"expires_at is {describe(expires_at)}, more than {MAX_TTL} seconds (1000 years) "
            "from now: leave it out for a fact that never expires"
        )
    return float(expires_at)


def check_importance(importance: object) -> float:
    """Validate an importance: a finite number (0.0 by default; higher ranks first)."""
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise InvalidValue(f"importance must be a number, not {type(importance).__name__}")
    try:
        value = float(importance)
    except OverflowError:  # an int beyond the range of a float
        raise InvalidValue(f"importance must be finite, not {describe(importance)}") from None
    if not math.isfinite(value):
        raise InvalidValue(f"importance must be finite, not {importance!r}")
    return value


def check_int(value: object, what: str, *, minimum: int = 0, maximum: int = MAX_INT) -> int:
    """Validate a count, limit, budget, seq or version: an ``int`` (``bool`` and ``float``
    are refused) with ``minimum <= value <= maximum``; else raise :class:`InvalidInput`.
    ``maximum`` is :data:`MAX_INT` unless a caller has a smaller one."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise InvalidInput(f"{what} must be >= {minimum}, not {describe(value)}")
    if value > maximum:
        raise InvalidInput(
            f"{what} is {describe(value)}; the largest accepted is {maximum}"
            + (" (2**63 - 1)" if maximum == MAX_INT else "")
        )
    return value


def check_positive_int(value: object, what: str, *, allow_zero: bool = False) -> int:
    """Validate a count or a limit: an ``int`` from 1 (or 0 with ``allow_zero``) to
    :data:`MAX_INT`."""
    return check_int(value, what, minimum=0 if allow_zero else 1)


def check_optional_int(value: object, what: str, *, minimum: int = 0) -> int | None:
    """:func:`check_int`, with ``None`` (no limit) allowed."""
    return None if value is None else check_int(value, what, minimum=minimum)


def check_bool(value: object, what: str) -> bool:
    """Validate a flag: ``True`` or ``False`` only (not a truthy string or number)."""
    if not isinstance(value, bool):
        raise InvalidInput(f"{what} must be True or False, not {type(value).__name__}")
    return value


def check_model(model: object) -> str | None:
    """Validate a model name (it picks the tokenizer): ``None`` or a ``str``."""
    if model is not None and not isinstance(model, str):
        raise InvalidInput(f"model must be a str or None, not {type(model).__name__}")
    return model


def check_read_range(
    start_seq: object, end_seq: object, limit: object
) -> tuple[int, int | None, int | None]:
    """Validate the arguments of ``Conversation.read``: ``start_seq`` an int >= 1,
    ``end_seq`` ``None`` or an int >= 0 (below ``start_seq``: nothing is read), ``limit``
    ``None`` or an int >= 1; all at most :data:`MAX_INT`."""
    return (
        check_int(start_seq, "start_seq", minimum=1),
        check_optional_int(end_seq, "end_seq", minimum=0),
        check_optional_int(limit, "limit", minimum=1),
    )


def check_number(value: object, what: str) -> float:
    """Validate a finite number (``bool`` refused); else raise :class:`InvalidInput`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number, not {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise InvalidInput(f"{what} must be finite, not {describe(value)}") from None
    if not math.isfinite(number):
        raise InvalidInput(f"{what} must be finite, not {value!r}")
    return number


def check_time(value: object, what: str) -> float | None:
    """Validate a point in time: ``None``, epoch seconds, or an aware ``datetime`` (a naive
    one is refused: it names no instant); the epoch seconds."""
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidInput(f"{what} must be an aware datetime (with a tzinfo), not a naive one")
        return value.timestamp()
    return check_number(value, what)


MAX_METADATA_BYTES = 16 << 10
"""Largest metadata of a fact, as JSON text (16 KiB)."""


def check_metadata(metadata: object) -> str | None:
    """Validate a fact's metadata: ``None`` or a JSON object (``dict`` with ``str`` keys) of
    at most :data:`MAX_METADATA_BYTES` and no NUL character; its JSON text."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise InvalidValue(f"metadata must be a dict, not {type(metadata).__name__}")
    text = dumps(metadata, "metadata", MAX_METADATA_BYTES)
    if "\\u0000" in text and _holds_nul(metadata):  # JSON escapes NUL: check the strings
        raise InvalidValue("metadata must not hold a NUL character")
    return text


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


FILTER_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,127}")
"""What a key of a metadata filter looks like (safe in every store's JSON paths)."""


def check_filter(where: object) -> tuple[tuple[str, Any], ...]:
    """Validate a metadata filter: ``None`` or a ``dict`` from keys (a letter or ``_``, then
    letters, digits, ``_`` and ``-``; at most 128 characters) to JSON scalars (``str``,
    finite ``int`` / ``float``, ``bool``, ``None``); its (key, value) pairs, by key."""
    if where is None:
        return ()
    if not isinstance(where, dict):
        raise InvalidInput(f"filter must be a dict, not {type(where).__name__}")
    pairs = []
    for key, value in where.items():
        if not isinstance(key, str) or not FILTER_KEY.fullmatch(key):
            raise InvalidInput(
                f"filter key {describe(key)} is not a name (a letter or _, then letters, "
                "digits, _ and -; at most 128 characters)"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidInput(f"filter value of {key!r} must be finite, not {value!r}")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise InvalidInput(f"filter value of {key!r} is out of range: {describe(value)}")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InvalidInput(
                f"filter value of {key!r} must be a str, number, bool or None, not "
                f"{type(value).__name__}"
            )
        if isinstance(value, str) and "\x00" in value:
            raise InvalidInput(f"filter value of {key!r} must not hold a NUL character")
        pairs.append((key, value))
    return tuple(sorted(pairs))
