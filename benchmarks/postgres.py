"""PostgreSQL rows of the turn-cost benchmark: this store, its peer and the floor.

All three run on the same server, with the same messages, in the same run:

``postgres``
    memory-adapters' PostgreSQL store (``Memory("postgresql://...")``).
``lc-postgres``
    the peer: ``langchain-postgres``' ``PostgresChatMessageHistory``, which reads the whole
    history every turn (``history.messages``) and then adds the turn.
``pg-floor``
    the floor: the raw psycopg round trips the same work needs and nothing else. One
    ``SELECT`` of the window (the head, where a system prompt would be pinned, and the tail by
    an index range; the client keeps the running token total, so it needs no lookup) and one
    multi-row ``INSERT`` of the turn, in autocommit, with the messages already serialized and
    counted outside the timing.

The server is ``MEMORY_ADAPTERS_POSTGRES_URL`` if set, else a private one started with initdb
+ pg_ctl (:class:`memory_adapters.testing.postgres_server.TemporaryPostgres`, the server's
default settings, durable commits included) and stopped at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

from memory_adapters import Message
from memory_adapters import tokens as ma_tokens
from memory_adapters.testing.postgres_server import TemporaryPostgres

_server: TemporaryPostgres | None = None
_url: str | None = None


def server_url() -> str:
    """The benchmark's PostgreSQL server, started on first use."""
    global _server, _url
    if _url is None:
        given = os.environ.get("MEMORY_ADAPTERS_POSTGRES_URL")
        if given:
            _url = given
        else:
            _server = TemporaryPostgres().start()
            atexit.register(_server.cleanup)
            _url = _server.url
    return _url


def _schema() -> str:
    return "bench_" + uuid.uuid4().hex[:10]


def postgres_store(ctx: Any, conversation: str) -> Any:
    """memory-adapters over PostgreSQL, in a schema of its own."""
    from turn_cost import MemorySubject

    return MemorySubject(
        server_url(), ctx, conversation, label="postgresql", store_options={"schema": _schema()}
    )


def _to_langchain(messages: list[Message]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for m in messages:
        if m.role == "user":
            out.append(HumanMessage(m.text))
        elif m.role == "system":
            out.append(SystemMessage(m.text))
        elif m.role == "assistant":
            calls = [{"id": c.id, "name": c.name, "args": c.args} for c in m.tool_calls]
            out.append(AIMessage(m.text, tool_calls=calls))
        else:
            for r in m.tool_results:
                content = r.content if isinstance(r.content, str) else json.dumps(r.content)
                out.append(ToolMessage(content, tool_call_id=r.id))
    return out


class LangchainPostgresSubject:
    """The peer: ``PostgresChatMessageHistory`` reads the whole history, then adds the turn."""

    label = "langchain-postgres"
    kind = "peer"

    def __init__(self, ctx: Any, conversation: str) -> None:
        import psycopg
        from langchain_postgres import PostgresChatMessageHistory

        self.conn = psycopg.connect(server_url(), autocommit=True)
        table = "lc_" + uuid.uuid4().hex[:10]
        PostgresChatMessageHistory.create_tables(self.conn, table)
        self.history = PostgresChatMessageHistory(
            table, str(uuid.uuid4()), sync_connection=self.conn
        )

    def preload(self, batches: Iterator[list[Message]]) -> None:
        pending: list[Any] = []
        for batch in batches:
            pending.extend(_to_langchain(batch))
            if len(pending) >= 1000:
                self.history.add_messages(pending)
                pending = []
        if pending:
            self.history.add_messages(pending)

    def count(self) -> int:
        return len(self.history.messages)

    def prepare(self, messages: list[Message]) -> object:
        return _to_langchain(messages)

    def load_window(self) -> object:
        return self.history.messages

    def append(self, prepared: object) -> None:
        self.history.add_messages(prepared)  # type: ignore[arg-type]

    def window_shape(self, window: object) -> tuple[int, int]:
        assert isinstance(window, list)
        return len(window), -1

    def close(self) -> None:
        self.conn.close()


class FloorSubject:
    """The floor: two raw round trips per turn, no counting, no parsing, no checks.

    The window query reads what the store's does (the first messages, where a system prompt
    would be pinned, and the tail within the budget); the append inserts the turn's rows.

    Messages are serialized and counted in :meth:`prepare`, outside the timing; the client
    keeps the running token total itself, so the window is one ``SELECT``.
    """

    label = "raw psycopg"
    kind = "floor"

    def __init__(self, ctx: Any, conversation: str) -> None:
        import psycopg

        self.window_tokens = ctx.window_tokens
        self.conn = psycopg.connect(server_url(), autocommit=True)
        self.table = "floor_" + uuid.uuid4().hex[:10]
        self.conn.execute(
            f"CREATE TABLE {self.table} (conversation text, seq bigint, start_tokens bigint, "
            "tokens integer, data text, PRIMARY KEY (conversation, seq))"
        )
        self.conn.execute(f"CREATE INDEX ON {self.table} (conversation, start_tokens, seq)")
        self.conversation = conversation
        self.seq = 0
        self.total = 0
        # the pinned head (a system prompt) and the tail within the budget, as the store reads
        self.select = (
            f"(SELECT seq, data, tokens FROM {self.table} WHERE conversation = %(c)s "
            "ORDER BY seq LIMIT 2) UNION ALL "
            f"(SELECT seq, data, tokens FROM {self.table} WHERE conversation = %(c)s "
            "AND start_tokens >= %(t)s ORDER BY start_tokens DESC, seq DESC)"
        )

    def preload(self, batches: Iterator[list[Message]]) -> None:
        for batch in batches:
            self.append(self.prepare(batch))
        self.conn.execute(f"ANALYZE {self.table}")

    def count(self) -> int:
        return self.seq

    def prepare(self, messages: list[Message]) -> object:
        counts = ma_tokens.count([m.token_text() for m in messages])
        items = [(n + 4, json.dumps(m.to_dict())) for m, n in zip(messages, counts, strict=True)]
        values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(items))
        return f"INSERT INTO {self.table} VALUES {values}", items

    def load_window(self) -> object:
        return self.conn.execute(
            self.select, {"c": self.conversation, "t": self.total - self.window_tokens}
        ).fetchall()[2:]

    def append(self, prepared: object) -> None:
        sql, items = cast(tuple[str, list[tuple[int, str]]], prepared)
        params: list[Any] = []
        for tokens, data in items:
            self.seq += 1
            params += [self.conversation, self.seq, self.total, tokens, data]
            self.total += tokens
        self.conn.execute(sql, params)

    def window_shape(self, window: object) -> tuple[int, int]:
        assert isinstance(window, list)
        return len(window), sum(r[2] for r in window)

    def close(self) -> None:
        self.conn.close()


def subjects() -> dict[str, Callable[[Any, str], Any]]:
    """The PostgreSQL rows, where psycopg (and, for the peer, langchain-postgres) is installed."""
    out: dict[str, Callable[[Any, str], Any]] = {}
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return out
    out["postgres"] = postgres_store
    out["pg-floor"] = FloorSubject
    try:
        import langchain_postgres  # noqa: F401
    except ImportError:
        return out
    out["lc-postgres"] = LangchainPostgresSubject
    return out
