"""The MongoDB clients behind one store: sync, and async per event loop.

Built from a URL, a store owns its clients: one ``pymongo.MongoClient`` for sync calls, and
one ``pymongo.AsyncMongoClient`` *per event loop* for async calls, because an async client is
bound to the loop it first ran on. A loop's client is closed when the loop shuts down its
async generators (``asyncio.run`` does), or by :meth:`Clients.aclose`.

Built from an application's client, a store uses it and never closes it:

* a sync client (``pymongo.MongoClient``, or one shaped like it, such as mongomock's): sync
  calls use it; async calls run them in a worker thread, unless an async client is given too;
* a ``pymongo.AsyncMongoClient``: async calls use it, on the loop it is bound to; sync calls
  (and async calls from another loop) use a ``MongoClient`` with the same settings, opened on
  first need and owned by the store;
* a Motor ``AsyncIOMotorClient`` (or mongomock-motor's): async calls use it on the first loop
  they run on; sync calls use the pymongo client it wraps (its database's ``delegate``).

Async calls from a loop other than the async client's run the sync path in a worker thread.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from memory_adapters.errors import InvalidInput, MissingExtra, StoreUnavailable
from memory_adapters.store import store_closed

from .ops import Handles

DEFAULT_DATABASE = "memory_adapters"
DEFAULT_TIMEOUT = 5.0
"""Seconds to find a server (``serverSelectionTimeoutMS``) and to connect to it
(``connectTimeoutMS``) before an operation fails with ``StoreUnavailable``."""

Kind = Literal["sync", "async", "motor"]


def require_pymongo() -> None:
    """Raise :class:`MissingExtra` unless pymongo is installed."""
    try:
        import pymongo  # noqa: F401
    except ImportError:
        raise MissingExtra("mongo", "pymongo") from None


def database_from_url(url: str) -> str | None:
    """The database named in a ``mongodb://host/dbname`` URL, if any."""
    path = urlsplit(url).path.lstrip("/")
    return unquote(path) or None


def redact(url: str) -> str:
    """``url`` without its credentials, for error messages."""
    scheme, sep, rest = url.partition("://")
    hosts, at, tail = rest.rpartition("@")
    return f"{scheme}{sep}***@{tail}" if at and "/" not in hosts else url


def client_kind(client: object) -> Kind:
    """Whether ``client`` is a sync client, a pymongo async client, or a Motor client.

    Duck-typed on the client's class, never on the instance: pymongo's and Motor's
    clients answer any unknown attribute with a database of that name.
    """
    import pymongo

    if isinstance(client, pymongo.AsyncMongoClient):
        return "async"
    if isinstance(client, pymongo.MongoClient):
        return "sync"
    cls = type(client)
    if callable(getattr(cls, "get_io_loop", None)):
        return "motor"
    if inspect.iscoroutinefunction(getattr(cls, "close", None)):
        return "async"
    if callable(getattr(cls, "get_database", None)):
        return "sync"
    raise InvalidInput(
        "client must be a pymongo MongoClient or AsyncMongoClient, or a Motor client, "
        f"not {cls.__module__}.{cls.__qualname__}"
    )


def _database(client: Any, name: str) -> Any:
    """``client``'s database ``name``, reading from the primary, with acknowledged writes
    (an unacknowledged write concern would hide write errors)."""
    from pymongo import ReadPreference, WriteConcern
    from pymongo.errors import InvalidName

    try:
        db = client.get_database(name, read_preference=ReadPreference.PRIMARY)
        concern = getattr(db, "write_concern", None)
        if isinstance(concern, WriteConcern) and not concern.acknowledged:
            db = client.get_database(
                name, read_preference=ReadPreference.PRIMARY, write_concern=WriteConcern(w=1)
            )
    except InvalidName as exc:
        raise InvalidInput(f"not a MongoDB database name: {name!r} ({exc})") from None
    return db


def _sync_delegate(async_db: Any) -> Any:
    """The sync database a Motor database wraps."""
    delegate = getattr(async_db, "delegate", None)
    cls = type(delegate)
    if not callable(getattr(cls, "get_collection", None)) or callable(
        getattr(cls, "get_io_loop", None)
    ):
        raise InvalidInput(
            "this Motor-style client has no sync delegate; pass a sync client as well: "
            "MongoStore(client=MongoClient(...), async_client=...)"
        )
    return delegate


async def _close(client: Any) -> None:
    result = client.close()
    if inspect.isawaitable(result):
        await result


async def _closed_with_loop(client: Any) -> AsyncGenerator[None, None]:
    """Suspended until its loop shuts down its async generators, then closes ``client``."""
    try:
        yield
    finally:
        await _close(client)


@dataclass(slots=True)
class _LoopClient:
    loop: asyncio.AbstractEventLoop
    client: Any
    handles: Handles
    keeper: AsyncGenerator[None, None]


class Clients:
    """The clients of one store (see the module docstring)."""

    def __init__(
        self,
        url: str | None,
        *,
        client: Any = None,
        async_client: Any = None,
        database: str | None = None,
        timeout: float | None = None,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        require_pymongo()
        if url is None and client is None and async_client is None:
            raise InvalidInput("MongoStore needs a mongodb:// URL or a client")
        if client is None and async_client is not None:
            client, async_client = async_client, None
        if client is not None and (timeout is not None or client_options):
            raise InvalidInput(
                "timeout and client_options configure clients the store opens itself; "
                "configure your own client instead"
            )
        name = database or (database_from_url(url) if url else None) or DEFAULT_DATABASE
        self.database = name
        self._lock = threading.Lock()
        self._closed = False
        self._sync: Handles | None = None
        self._sync_owner: Any = None  # a sync client this store opened and must close
        self._derive: Any = None  # settings to open a sync client from, on first need
        self._loops: dict[asyncio.AbstractEventLoop, _LoopClient] = {}
        self._new_async: Any = None  # opens an async client per loop (owned)
        self._given_async: Any = None  # the application's async client
        self._given_loop: asyncio.AbstractEventLoop | None = None
        self._given_handles: Handles | None = None
        if client is None:
            assert url is not None
            self._open_owned(url, timeout, dict(client_options or {}))
            return
        kind = client_kind(client)
        if async_client is not None:
            if kind != "sync":
                raise InvalidInput("with async_client=..., client must be a sync client")
            if client_kind(async_client) == "sync":
                raise InvalidInput("async_client must be an AsyncMongoClient or a Motor client")
            self._sync = Handles.of(_database(client, name))
            self._use_async(async_client)
        elif kind == "sync":
            self._sync = Handles.of(_database(client, name))
        elif kind == "motor":
            self._use_async(client)
            assert self._given_handles is not None
            self._sync = Handles.of(_sync_delegate(self._given_handles.db))
        else:
            self._use_async(client)
            self._derive = getattr(client, "_init_kwargs", None)

    # -- construction --------------------------------------------------------------------

    def _open_owned(self, url: str, timeout: float | None, options: dict[str, Any]) -> None:
        import pymongo
        from pymongo.errors import ConfigurationError

        query = urlsplit(url).query.lower()
        seconds = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        if timeout is not None or "serverselectiontimeoutms" not in query:
            options.setdefault("serverSelectionTimeoutMS", int(seconds * 1000))
        if timeout is not None or "connecttimeoutms" not in query:
            options.setdefault("connectTimeoutMS", int(seconds * 1000))
        try:
            sync = pymongo.MongoClient(url, **options)
        except (ConfigurationError, ValueError) as exc:
            where = redact(url)
            if "DNS" in str(exc) or "resolution" in str(exc).lower():
                raise StoreUnavailable(f"cannot resolve MongoDB URL {where}: {exc}") from exc
            raise InvalidInput(f"bad MongoDB URL {where} or options: {exc}") from exc
        self._sync_owner = sync
        self._sync = Handles.of(_database(sync, self.database))

        def open_async() -> Any:
            return pymongo.AsyncMongoClient(url, **options)

        self._new_async = open_async

    def _use_async(self, client: Any) -> None:
        self._given_async = client
        loop = getattr(client, "_loop", None)  # a pymongo AsyncMongoClient already used
        if isinstance(loop, asyncio.AbstractEventLoop):
            self._given_loop = loop
        self._given_handles = Handles.of(_database(client, self.database))

    # -- access --------------------------------------------------------------------------

    @property
    def has_sync(self) -> bool:
        """Whether sync calls can run without opening another client."""
        return self._sync is not None

    def sync(self) -> Handles:
        """The sync handles, opening a sync client first if the store only had an async one."""
        if self._closed:
            raise store_closed("MongoStore")
        if self._sync is not None:
            return self._sync
        with self._lock:
            if self._sync is None:
                import pymongo

                if not isinstance(self._derive, dict):
                    raise InvalidInput(
                        "sync calls need a sync client: "
                        "MongoStore(client=MongoClient(...), async_client=...)"
                    )
                self._sync_owner = pymongo.MongoClient(**self._derive)
                self._sync = Handles.of(_database(self._sync_owner, self.database))
            return self._sync

    async def async_handles(self) -> Handles | None:
        """The async handles for the running loop, or ``None``: run the sync path in a thread."""
        if self._closed:
            raise store_closed("MongoStore")
        loop = asyncio.get_running_loop()
        if self._new_async is not None:
            entry = self._loops.get(loop)
            if entry is None:
                entry = await self._open_for(loop)
            return entry.handles
        if self._given_async is None:
            return None
        with self._lock:
            if self._given_loop is None:
                self._given_loop = loop  # bound from now on to the first loop it runs on
        return self._given_handles if self._given_loop is loop else None

    async def _open_for(self, loop: asyncio.AbstractEventLoop) -> _LoopClient:
        with self._lock:
            for old in [lp for lp in self._loops if lp.is_closed()]:
                del self._loops[old]  # closed with its loop, when it shut down
            entry = self._loops.get(loop)
            if entry is None:
                client = self._new_async()
                keeper = _closed_with_loop(client)
                entry = _LoopClient(
                    loop, client, Handles.of(_database(client, self.database)), keeper
                )
                self._loops[loop] = entry
            else:
                keeper = None
        if keeper is not None:
            await keeper.__anext__()  # registers it with this loop's shutdown_asyncgens
        return entry

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Close what the store opened (never the application's clients)."""
        self._closed = True
        with self._lock:
            entries = list(self._loops.values())
            self._loops.clear()
            owner, self._sync_owner = self._sync_owner, None
        for entry in entries:
            _schedule_close(entry)
        if owner is not None:
            owner.close()

    async def aclose(self) -> None:
        """:meth:`close`, closing the running loop's client before returning."""
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = self._loops.pop(loop, None)
        if mine is not None:
            await mine.keeper.aclose()
        self.close()


def _schedule_close(entry: _LoopClient) -> None:
    """Close a loop's client on its own loop, without waiting for it."""
    loop = entry.loop
    if loop.is_closed():
        return  # it was closed when the loop shut down
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        loop.create_task(entry.keeper.aclose())
    elif loop.is_running():
        asyncio.run_coroutine_threadsafe(entry.keeper.aclose(), loop)
