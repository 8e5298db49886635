"""The PostgreSQL store (``postgresql://`` and ``postgres://``), for the ``postgres`` extra.

``Memory("postgresql://user:password@host:5432/db")`` opens a pool; store options go
through ``Memory(url, store_options={"schema": "memory", "max_size": 20})``. To share an
application's pool: ``Memory(store=PostgresStore.from_pool(pool))``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memory_adapters import MissingExtra, hookimpl

if TYPE_CHECKING:
    from .store import PostgresStore

__all__ = ["PostgresStore"]


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        return _store_class()
    raise AttributeError(name)


def _store_class() -> type[PostgresStore]:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise MissingExtra("postgres", "psycopg and psycopg-pool") from None
    from .store import PostgresStore

    return PostgresStore


def open_store(url: str, **options: Any) -> PostgresStore:
    """Build the store for a ``postgresql://`` or ``postgres://`` URL."""
    return _store_class()(url, **options)


@hookimpl(trylast=True)
def register_stores(register: Any) -> None:
    """Serve ``postgresql://`` and ``postgres://``."""
    register("postgresql", open_store)
    register("postgres", open_store)
