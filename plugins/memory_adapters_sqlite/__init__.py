"""The SQLite store (``sqlite:///path``): the embedded default, no server needed.

``sqlite:///memory.db`` is a path relative to the working directory,
``sqlite:////var/lib/app/memory.db`` an absolute one, ``sqlite://`` or
``sqlite:///:memory:`` a private in-memory database. ``sqlite://memory.db`` (two slashes: a
host, which SQLite has not) is refused with :class:`~memory_adapters.errors.InvalidURL`
rather than read as a relative path. Uses the standard library's ``sqlite3``
in WAL mode; several threads and several processes may share one file.
"""

from __future__ import annotations

from typing import Any

from memory_adapters import InvalidURL, hookimpl

from .store import SQLiteStore

__all__ = ["SQLiteStore"]


def open_store(url: str, **options: Any) -> SQLiteStore:
    """Build the store for a ``sqlite://`` URL."""
    return SQLiteStore(url_path(url), **options)


def url_path(url: str) -> str:
    """The database path of a ``sqlite://`` URL (``:memory:`` for none); ``InvalidURL`` for a
    URL with something between ``sqlite://`` and the path's slash."""
    rest = url.split("://", 1)[1]
    if rest == ":memory:":
        raise InvalidURL(
            f"{url} has two slashes: write sqlite:///:memory: (or sqlite://) for a private "
            "in-memory database"
        )
    if rest and not rest.startswith("/"):
        name = rest.rstrip("/").rsplit("/", 1)[-1] or "memory.db"
        raise InvalidURL(
            f"{url} has two slashes, and SQLite URLs have no host: write sqlite:///{rest} for "
            f"a file relative to the current directory, or sqlite:////absolute/path/{name} "
            "for an absolute path"
        )
    return rest[1:] or ":memory:"


@hookimpl(trylast=True)
def register_stores(register: Any) -> None:
    """Serve ``sqlite://``."""
    register("sqlite", open_store)
