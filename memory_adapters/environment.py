"""Configuration by environment: what an operator sets per deployment.

``Memory()`` reads these variables for the options its caller did not give (an explicit
argument always wins). An empty variable counts as unset. A value that does not parse raises
:class:`~memory_adapters.errors.InvalidInput` naming the variable, when the ``Memory`` is
created. :data:`VARIABLES` is the table docs/operations.md documents (a test keeps them in
step).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import InvalidInput
from .validation import MAX_INT

URL = "MEMORY_ADAPTERS_URL"
NAMESPACE = "MEMORY_ADAPTERS_NAMESPACE"
HISTORY_TOKENS = "MEMORY_ADAPTERS_HISTORY_TOKENS"
MODEL = "MEMORY_ADAPTERS_MODEL"
EMBED = "MEMORY_ADAPTERS_EMBED"
OTEL_CONTENT = "MEMORY_ADAPTERS_OTEL_CONTENT"

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class Variable:
    """One environment variable: its name, the ``Memory`` option it sets, and its values."""

    name: str
    option: str
    values: str


VARIABLES: tuple[Variable, ...] = (
    Variable(URL, "url", "a store URL (default `sqlite:///memory_adapters.db`)"),
    Variable(NAMESPACE, "namespace", "an identifier (default `default`)"),
    Variable(
        HISTORY_TOKENS,
        "history_tokens",
        "an integer >= 1, or `none` for no token budget (default 8000)",
    ),
    Variable(MODEL, "model", "a model name for token counting, e.g. `gpt-4o` (default cl100k)"),
    Variable(
        EMBED,
        "embed",
        "an embedder name (`minilm`, `wordllama`, `openai:text-embedding-3-small`), or `false` "
        "for none (default: the installed default)",
    ),
    Variable(
        OTEL_CONTENT,
        "telemetry_content",
        "`1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (default off)",
    ),
)
"""Every variable ``Memory()`` reads."""


def get(name: str) -> str | None:
    """The variable's value with surrounding blanks removed, or ``None`` when unset or empty."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def flag(name: str) -> bool | None:
    """A boolean variable (``None`` when unset)."""
    value = get(name)
    if value is None:
        return None
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise InvalidInput(f"{name} must be one of {', '.join(TRUE + FALSE)}, not {value!r}")


def budget(name: str) -> int | bool | None:
    """A token budget variable: an int >= 1, ``None`` for ``none``, or ``False`` when unset."""
    value = get(name)
    if value is None:
        return False
    if value.lower() == "none":
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_INT:
        raise InvalidInput(
            f"{name} must be an integer from 1 to {MAX_INT}, or 'none', not {value!r}"
        )
    return number


def embed_spec(name: str) -> object:
    """An embedder variable: the name given, ``False`` for ``false``/``0``/``no``/``off``/
    ``none``, or ``None`` when unset."""
    value = get(name)
    if value is None:
        return None
    if value.lower() in (*FALSE, "none"):
        return False
    return value
