"""MongoDB rows of the turn-cost benchmark (``turn_cost.py`` imports :func:`subjects`).

``mongo-fake``
    memory-adapters' MongoDB store over **mongomock, an in-process fake, not a server**:
    ``Memory("mongodb://mongomock/bench", store_options={"client": mongomock.MongoClient()})``.
    It runs anywhere (it is in the CI smoke run) and checks the store end to end through its
    URL and entry point, but its timings say nothing about MongoDB: mongomock has no real
    indexes and scans every document of a collection on every query, so its cost grows with
    the conversation and its ``ratio`` is expected to be well above 1.
``mongo``
    the same store on a real server, ``MEMORY_ADAPTERS_MONGODB_URL``, in a database of its
    own that is dropped afterwards. This row's ratio is the one that must stay near 1.
``mongo-floor``
    the floor, on the same server: the raw pymongo round trips the same work needs and
    nothing else. One ``find`` of the window by an index range on
    ``(conversation, end_tokens, first_seq)`` (the client keeps the running token total, so
    it needs no lookup) and one ``insert_one`` of the turn as one document, with the messages
    serialized and counted outside the timing.

Run against a server::

    MEMORY_ADAPTERS_MONGODB_URL=mongodb://localhost:27017/ma_bench \\
        python benchmarks/turn_cost.py --stores mongo,mongo-floor
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

from memory_adapters import Message
from memory_adapters import tokens as ma_tokens

ENV_URL = "MEMORY_ADAPTERS_MONGODB_URL"


def _database(url: str) -> str:
    """A fresh database name, based on the one the URL names."""
    from memory_adapters_mongo.clients import DEFAULT_DATABASE, database_from_url

    base = database_from_url(url) or DEFAULT_DATABASE
    return f"{base}_bench_{uuid.uuid4().hex[:8]}"


def mongo_fake_store(ctx: Any, conversation: str) -> Any:
    """memory-adapters' MongoDB store over mongomock (an in-process fake, not a server)."""
    import mongomock
    from turn_cost import MemorySubject

    return MemorySubject(
        "mongodb://mongomock/bench",
        ctx,
        conversation,
        label="mongomock (in-process fake, not a server)",
        store_options={"client": mongomock.MongoClient()},
    )


def mongo_store(ctx: Any, conversation: str) -> Any:
    """memory-adapters' MongoDB store on the server at ``MEMORY_ADAPTERS_MONGODB_URL``."""
    from turn_cost import MemorySubject

    url = os.environ[ENV_URL]
    database = _database(url)

    class ServerSubject(MemorySubject):
        def close(self) -> None:
            super().close()
            import pymongo

            admin: pymongo.MongoClient[dict[str, Any]]
            with pymongo.MongoClient(url, serverSelectionTimeoutMS=5000) as admin:
                admin.drop_database(database)

    return ServerSubject(
        url, ctx, conversation, label="mongodb", store_options={"database": database}
    )


class FloorSubject:
    """The floor: two raw pymongo round trips per turn, no counting, no parsing, no checks."""

    label = "raw pymongo"
    kind = "floor"

    def __init__(self, ctx: Any, conversation: str) -> None:
        import pymongo

        url = os.environ[ENV_URL]
        self.window_tokens: int = ctx.window_tokens
        self.client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000)
        self.database = _database(url)
        self.batches: Any = self.client[self.database]["floor"]
        self.batches.create_index([("conversation", 1), ("end_tokens", 1), ("first_seq", 1)])
        self.conversation = conversation
        self.seq = 0
        self.total = 0

    def preload(self, batches: Iterator[list[Message]]) -> None:
        for batch in batches:
            self.append(self.prepare(batch))

    def count(self) -> int:
        return self.seq

    def prepare(self, messages: list[Message]) -> object:
        counts = ma_tokens.count([m.token_text() for m in messages])
        return [
            {
                "role": m.role,
                "tokens": n + ma_tokens.MESSAGE_OVERHEAD,
                "data": json.dumps(m.to_dict()),
            }
            for m, n in zip(messages, counts, strict=True)
        ]

    def load_window(self) -> object:
        return list(
            self.batches.find(
                {
                    "conversation": self.conversation,
                    "end_tokens": {"$gte": self.total - self.window_tokens},
                },
                sort=[("end_tokens", -1), ("first_seq", -1)],
            )
        )

    def append(self, prepared: object) -> None:
        messages = cast(list[dict[str, Any]], prepared)
        first = self.seq + 1
        start = self.total
        self.seq += len(messages)
        self.total += sum(m["tokens"] for m in messages)
        self.batches.insert_one(
            {
                "_id": {"conversation": self.conversation, "first_seq": first},
                "conversation": self.conversation,
                "first_seq": first,
                "last_seq": self.seq,
                "start_tokens": start,
                "end_tokens": self.total,
                "messages": messages,
            }
        )

    def window_shape(self, window: object) -> tuple[int, int]:
        docs = cast(list[dict[str, Any]], window)
        messages = [m for d in docs for m in d["messages"]]
        return len(messages), sum(m["tokens"] for m in messages)

    def close(self) -> None:
        self.client.drop_database(self.database)
        self.client.close()


def subjects() -> dict[str, Callable[[Any, str], Any]]:
    """The MongoDB rows: ``mongo-fake`` where mongomock is installed, ``mongo`` and
    ``mongo-floor`` when ``MEMORY_ADAPTERS_MONGODB_URL`` names a server."""
    out: dict[str, Callable[[Any, str], Any]] = {}
    try:
        import pymongo  # noqa: F401
    except ImportError:
        return out
    try:
        import mongomock  # noqa: F401
    except ImportError:
        pass
    else:
        out["mongo-fake"] = mongo_fake_store
    if os.environ.get(ENV_URL):
        out["mongo"] = mongo_store
        out["mongo-floor"] = FloorSubject
    return out
