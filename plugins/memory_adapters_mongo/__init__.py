"""The MongoDB store (``mongodb://`` and ``mongodb+srv://``), from the ``mongo`` extra.

``Memory("mongodb://host:27017/dbname")`` opens the store on database ``dbname``
(``memory_adapters`` when the URL names none). Options go in ``store_options``: ``timeout``
(seconds to reach the server, 5 by default), ``vector_search``, ``client_options``, or
``client`` to use an application's own ``MongoClient``, ``AsyncMongoClient`` or Motor client
(the URL then only names the database). Or build it yourself:
``Memory(store=MongoStore(client=my_client, database="app"))``. See ``docs/mongodb.md``.

pymongo is imported only when a store is built, so this plugin loads without the extra.
"""

from __future__ import annotations

from typing import Any

from memory_adapters import hookimpl

from .store import MongoStore

__all__ = ["MongoStore", "open_store"]


def open_store(url: str, **options: Any) -> MongoStore:
    """Build the store for a ``mongodb://`` or ``mongodb+srv://`` URL."""
    return MongoStore(url, **options)


@hookimpl(trylast=True)
def register_stores(register: Any) -> None:
    """Serve ``mongodb://`` and ``mongodb+srv://``."""
    register("mongodb", open_store)
    register("mongodb+srv", open_store)
