"""LangChain agents' whole turns, with memory-adapters and with langchain-postgres.

What is measured
    One *turn* is one whole call of a LangChain ``create_agent`` agent whose model is a
    ``ScriptedChatModel`` answering text at once (so what is timed is LangChain and the memory,
    never a provider): load the history, call the model, persist the turn (the question and the
    answer). Three rows, each with its own conversation pre-filled with 10 and 10,000 messages
    (turns of a question, a tool call, its result and an answer), all on the same PostgreSQL
    server, in the same run:

    ``agent-mw``
        the agent with ``MemoryMiddleware(memory)`` over memory-adapters' PostgreSQL store,
        called as ``agent.invoke({"messages": [...]}, {"configurable": {"thread_id": ...}})``:
        the middleware loads the budgeted window and persists the turn;
    ``agent-rwmh-lcpg``
        the agent without middleware, wrapped in ``RunnableWithMessageHistory`` with
        ``langchain-postgres``' ``PostgresChatMessageHistory`` (a sync psycopg connection, its
        own table): the way LangChain users add history to a chain. It reads the whole session
        twice per turn: when the turn starts, and when it ends, to strip the history it
        prepended to the input before saving;
    ``agent-rwmh-ma``
        the same ``RunnableWithMessageHistory``, with ``MemoryChatMessageHistory`` over
        memory-adapters' PostgreSQL store: one read of the budgeted window per turn (the second
        read is served from the first), one append.

    The memory-adapters rows use the benchmark's window budget (``--window-tokens``) as their
    ``history_tokens``; the langchain-postgres row loads, and its model is shown, everything.

These are rows of ``turn_cost.py`` (``subjects()``; ``kind = "run"``: the whole turn is timed as
one, so the window and append columns are empty), compared there side by side. By default they
run at 10 and 10,000 stored messages and at most :data:`TURNS` timed turns (a turn of the
langchain-postgres row at 10,000 messages takes about half a second); ``--quick`` runs them at
10 and 1,000 messages, :data:`QUICK_TURNS` turns, to stay a few seconds. ``--sizes`` and
``--turns``, when given, apply to them as to every row.

``python benchmarks/langchain_runs.py [--quick] [turn_cost.py options]`` runs just these rows.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from memory_adapters import Memory, Message, Scope
from memory_adapters.conversation import Conversation

ANSWER = (
    "Only the final rename needs a maintenance window; the backfill, the dual writes and the "
    "checks can all run with live traffic."
)
"""What the scripted model answers, every turn."""

SIZES = (10, 10000)
QUICK_SIZES = (10, 1000)
TURNS = 40
QUICK_TURNS = 5
QUICK_WARMUP = 1

PRELOAD_CHUNK = 256
"""Preloading appends this many messages (whole turns) at once: the window read does not
depend on how the past was batched, and 10,000 messages load in a fraction of a second."""


def _chunks(batches: Iterator[list[Message]]) -> Iterator[list[Message]]:
    chunk: list[Message] = []
    for batch in batches:
        chunk.extend(batch)
        if len(chunk) >= PRELOAD_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _schema() -> str:
    return "bench_" + uuid.uuid4().hex[:10]


class _AgentTurns:
    """What the three rows share: the scripted model, the turn's question, the window shape
    (the number of messages the model was shown in the last turn), the plan of sizes and turns
    ``turn_cost.py`` reads from the factory."""

    kind = "run"
    sizes = SIZES
    quick_sizes = QUICK_SIZES
    turns = TURNS
    quick_turns = QUICK_TURNS
    quick_warmup = QUICK_WARMUP
    label = ""

    def __init__(self) -> None:
        from memory_adapters.testing.langchain import ScriptedChatModel

        self.model = ScriptedChatModel([ANSWER])
        self._shown = 0

    def prepare(self, messages: list[Message]) -> object:
        return messages[0].text  # the turn's question

    def load_window(self) -> object:
        return None  # the whole turn is timed in append()

    def window_shape(self, window: object) -> tuple[int, int]:
        # messages the model was shown in the last turn; the record is dropped (not timed), so
        # that the scripted model does not keep every history it was shown
        if self.model.calls:
            self._shown = len(self.model.calls[-1])
            self.model.calls.clear()
            self.model.tools.clear()
        return self._shown, -1


class MiddlewareSubject(_AgentTurns):
    """``agent-mw``: ``create_agent(model, tools=[], middleware=[MemoryMiddleware(memory)])``."""

    label = "create_agent + MemoryMiddleware"

    def __init__(self, ctx: Any, conversation: str) -> None:
        from langchain.agents import create_agent
        from memory_adapters_langchain import MemoryMiddleware
        from postgres import server_url

        super().__init__()
        self.schema = _schema()
        self.memory = Memory(
            server_url(),
            history_tokens=ctx.window_tokens,
            store_options={"schema": self.schema},
        )
        self.config: Any = {"configurable": {"thread_id": conversation}}
        self.log = Conversation(self.memory, Scope(conversation_id=conversation))
        self.agent = create_agent(self.model, tools=[], middleware=[MemoryMiddleware(self.memory)])

    def preload(self, batches: Iterator[list[Message]]) -> None:
        from memory_adapters_langchain import from_messages, to_messages

        for chunk in _chunks(batches):
            self.log.append(to_messages(from_messages(chunk)))

    def count(self) -> int:
        return self.log.last_seq()

    def append(self, prepared: object) -> None:
        self.agent.invoke({"messages": [{"role": "user", "content": prepared}]}, self.config)

    def close(self) -> None:
        self.memory.close()
        _drop_schema(self.schema)


def _answer_only(agent: Any) -> Any:
    """The agent, answering with its last message (its output state holds the whole input too,
    which RunnableWithMessageHistory would store again)."""
    from langchain_core.runnables import RunnableLambda

    return agent | RunnableLambda(lambda state: state["messages"][-1])


class RunnableHistorySubject(_AgentTurns):
    """``agent-rwmh-*``: ``RunnableWithMessageHistory(create_agent(model, tools=[]) | last
    message, get_session_history, input_messages_key="messages")``, history prepended to the
    input (no ``history_messages_key``), with the history of :meth:`history`."""

    def __init__(self, ctx: Any, conversation: str) -> None:
        import warnings

        from langchain.agents import create_agent
        from langchain_core.runnables.history import RunnableWithMessageHistory

        super().__init__()
        self.window_tokens: int = ctx.window_tokens
        self.session = str(uuid.uuid4())
        with warnings.catch_warnings():  # deprecated in LangChain; still what users run
            warnings.simplefilter("ignore")
            self.runnable = RunnableWithMessageHistory(
                _answer_only(create_agent(self.model, tools=[])),
                self.history,
                input_messages_key="messages",
            )
        self.config: Any = {"configurable": {"session_id": self.session}}

    def history(self, session_id: str) -> Any:
        """The history object for one turn (RunnableWithMessageHistory asks for one per call)."""
        raise NotImplementedError

    def preload(self, batches: Iterator[list[Message]]) -> None:
        from memory_adapters_langchain import from_messages

        history = self.history(self.session)
        for chunk in _chunks(batches):
            history.add_messages(from_messages(chunk))

    def append(self, prepared: object) -> None:
        from langchain_core.messages import HumanMessage

        self.runnable.invoke({"messages": [HumanMessage(str(prepared))]}, self.config)


class LangchainPostgresRunSubject(RunnableHistorySubject):
    """``agent-rwmh-lcpg``: with langchain-postgres' ``PostgresChatMessageHistory``."""

    label = "RunnableWithMessageHistory + PostgresChatMessageHistory"

    def __init__(self, ctx: Any, conversation: str) -> None:
        import psycopg
        from langchain_postgres import PostgresChatMessageHistory
        from postgres import server_url

        self.conn = psycopg.connect(server_url(), autocommit=True)
        self.table = "lc_" + uuid.uuid4().hex[:10]
        PostgresChatMessageHistory.create_tables(self.conn, self.table)
        self._history_class = PostgresChatMessageHistory
        super().__init__(ctx, conversation)

    def history(self, session_id: str) -> Any:
        return self._history_class(self.table, session_id, sync_connection=self.conn)

    def count(self) -> int:
        row = self.conn.execute(
            f"SELECT count(*) FROM {self.table} WHERE session_id = %s", (self.session,)
        ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {self.table}")
        self.conn.close()


class MemoryHistoryRunSubject(RunnableHistorySubject):
    """``agent-rwmh-ma``: with ``MemoryChatMessageHistory`` over memory-adapters' PostgreSQL
    store."""

    label = "RunnableWithMessageHistory + MemoryChatMessageHistory"

    def __init__(self, ctx: Any, conversation: str) -> None:
        from postgres import server_url

        self.schema = _schema()
        self.memory = Memory(
            server_url(),
            history_tokens=ctx.window_tokens,
            store_options={"schema": self.schema},
        )
        super().__init__(ctx, conversation)

    def history(self, session_id: str) -> Any:
        from memory_adapters_langchain import MemoryChatMessageHistory

        return MemoryChatMessageHistory(self.memory, conversation_id=session_id)

    def count(self) -> int:
        return Conversation(self.memory, Scope(conversation_id=self.session)).last_seq()

    def close(self) -> None:
        self.memory.close()
        _drop_schema(self.schema)


def _drop_schema(schema: str) -> None:
    import psycopg
    from postgres import server_url

    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


ROWS = ("agent-mw", "agent-rwmh-lcpg", "agent-rwmh-ma")


def _installed(*names: str) -> bool:
    """Whether every package is installed, without importing it (LangChain takes a second to
    import: turn_cost.py should not pay that unless these rows run)."""
    return all(importlib.util.find_spec(name) is not None for name in names)


def subjects() -> dict[str, Callable[[Any, str], Any]]:
    """turn_cost.py rows this module adds: where LangChain, LangGraph and psycopg are installed
    (and langchain-postgres, for its row)."""
    if not _installed("langchain", "langgraph", "psycopg"):
        return {}
    out: dict[str, Callable[[Any, str], Any]] = {"agent-mw": MiddlewareSubject}
    if _installed("langchain_postgres"):
        out["agent-rwmh-lcpg"] = LangchainPostgresRunSubject
    out["agent-rwmh-ma"] = MemoryHistoryRunSubject
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``turn_cost.py`` with only these rows (other options pass through)."""
    import turn_cost

    args = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--stores" or a.startswith("--stores=") for a in args):
        args += ["--stores", ",".join(r for r in ROWS if r in turn_cost.SUBJECTS)]
    return turn_cost.main(args)


if __name__ == "__main__":
    sys.exit(main())
