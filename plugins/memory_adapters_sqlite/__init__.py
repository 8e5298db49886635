"""The SQLite store (``sqlite:///path``): the embedded default, no server needed.

``sqlite:///memory.db`` is a path relative to the working directory,
``sqlite:////var/lib/app/memory.db`` an absolute one, ``sqlite://`` or
``sqlite:///:memory:`` a private in-memory database. Uses the standard library's ``sqlite3``
in WAL mode with FTS5 for fact search; several threads and several processes may share one
file.
"""

from __future__ import annotations

from typing import Any

from memory_adapters import hookimpl

from .store import SQLiteStore

__all__ = ["SQLiteStore"]


def open_store(url: str, **options: Any) -> SQLiteStore:
    """Build the store for a ``sqlite://`` URL."""
    rest = url.split("://", 1)[1]
    path = rest[1:] if rest.startswith("/") else rest
    return SQLiteStore(path or ":memory:", **options)


@hookimpl(trylast=True)
def register_stores(register: Any) -> None:
    """Serve ``sqlite://``."""
    register("sqlite", open_store)
