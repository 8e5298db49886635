"""Checks applied to every identifier and value before a store sees it.

Stores can then rely on: identifiers are non-empty strings of bounded length without control
characters; values are plain JSON (dict with str keys, list, str, int, finite float, bool,
None) that encode to UTF-8; sizes are within limits. Anything else raises a typed error from
:mod:`memory_adapters.errors` and nothing is written.
"""

from __future__ import annotations

import json
import math
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
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidValue(
            f"{what} holds text that is not valid Unicode (lone surrogate)"
        ) from None
    if size > limit:
        raise ValueTooLarge(f"{what} is {size} bytes as JSON; the limit is {limit}")
    return text


def loads(text: str) -> Any:
    """Inverse of :func:`dumps`."""
    return json.loads(text)


def check_ttl(ttl: float | None) -> float | None:
    """Validate a time-to-live in seconds: ``None`` (no expiry) or a positive number."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidTTL(f"ttl must be a number of seconds, not {type(ttl).__name__}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise InvalidTTL(f"ttl must be a positive number of seconds, not {ttl!r}")
    return float(ttl)


def check_expires_at(expires_at: float | None, now: float) -> float | None:
    """Validate an absolute expiry (seconds since the epoch): ``None`` or in the future."""
    if expires_at is None:
        return None
    if isinstance(expires_at, bool) or not isinstance(expires_at, int | float):
        raise InvalidTTL(f"expires_at must be seconds since the epoch, not {expires_at!r}")
    if not math.isfinite(expires_at) or expires_at <= now:
        raise InvalidTTL("expires_at is not in the future: the fact would never be visible")
    return float(expires_at)


def check_importance(importance: object) -> float:
    """Validate an importance: a finite number (0.0 by default; higher ranks first)."""
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise InvalidValue(f"importance must be a number, not {type(importance).__name__}")
    if not math.isfinite(importance):
        raise InvalidValue(f"importance must be finite, not {importance!r}")
    return float(importance)


def check_positive_int(value: object, what: str, *, allow_zero: bool = False) -> int:
    """Validate a count or a limit."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an int, not {type(value).__name__}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidInput(f"{what} must be {'>= 0' if allow_zero else '> 0'}, not {value}")
    return value
