"""The in-memory store (``memory://``): fast, process-local, gone when the process ends.

``memory://`` gives a fresh store; ``memory://name`` gives the data of that name, shared by
every ``Memory`` in the process that opens the same name (each closes only its own store).
Use it for tests and demos; use ``sqlite://`` for anything that should survive a restart.

It is also the smallest complete store: copy it to start a new one.
"""

from __future__ import annotations

from typing import Any

from memory_adapters import hookimpl

from .store import InMemoryStore

__all__ = ["InMemoryStore"]

_named: dict[str, InMemoryStore] = {}


def open_store(url: str, **options: Any) -> InMemoryStore:
    """Build the store for a ``memory://`` URL: for a named URL, a store over the data of that
    name (kept for the life of the process), closed independently of the others."""
    name = url.split("://", 1)[1].strip("/")
    if not name:
        return InMemoryStore(**options)
    if name not in _named:
        _named[name] = InMemoryStore(**options)
    return _named[name].share()


@hookimpl(trylast=True)
def register_stores(register: Any) -> None:
    """Serve ``memory://``."""
    register("memory", open_store)
