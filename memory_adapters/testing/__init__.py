"""The conformance kit: the one test suite every store must pass, built-in and third-party.

Subclass :class:`StoreConformance` in a test module and give it a ``store`` fixture that
yields a fresh, empty store; pytest then runs the whole suite against it::

    import pytest
    from memory_adapters.testing import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            s = MyStore(tmp_path / "db")
            yield s
            s.close()

A store that several processes can share also subclasses
:class:`MultiProcessConformance` and gives a ``store_factory`` fixture: a picklable
zero-argument callable that opens the *same* store from another process (for example
``functools.partial(SQLiteStore, path)``).

:mod:`memory_adapters.testing.pydantic_ai` holds the suite for pydantic-ai
``ConversationStore`` backends (``ConversationStoreConformance``); it imports pydantic-ai only
when its tests run.

:mod:`memory_adapters.testing.langgraph` holds the parity kit for LangGraph ``BaseStore``
backends (``BaseStoreParity``): one script of operations run against LangGraph's own
``InMemoryStore`` and the store under test, every answer compared; it imports LangGraph only
when its tests run.

:class:`StoreConformance` includes the property-based window suite
(:mod:`memory_adapters.testing.windows`): random tool-heavy conversations drawn by hypothesis,
each read under many budgets, every window checked to be within budget, maximal and valid for
every model API (and, where pydantic-ai or LangChain is installed, exactly what that framework
gives its model).

:class:`StoreConformance` checks that a closed store raises
:class:`~memory_adapters.errors.StoreUnavailable` from every method, sync and async.

:class:`StoreConformance` also checks the optional ``Store.list_fact_scopes`` (exact
prefixes, expiry, namespaces, limits); a store without it skips those tests, and cannot
serve the LangGraph store's searches and namespace listings.

:class:`StoreConformance` also runs the operators' suite
(:mod:`memory_adapters.testing.operations`): listing conversations, erasing a user (nothing
of another user goes, "ann" against "anna"), retention, fact history with its writers, and
``restore_fact``. Give the test class a ``store_dump`` fixture, a callable returning every row
of every table of the store, and the erase test also reads the store's own tables; a store
without the optional operations skips those tests.

:class:`StoreConformance` also runs the conversation-search suite
(:mod:`memory_adapters.testing.conversation_search`): hits and their context, scope isolation
(another user's or namespace's messages are never hits; an agent of the same user finds the
user's), ``since``/``until``, prefix stability, a property checking that every store ranks as
the in-memory reference whatever other scopes hold, ``clear()``, ``erase`` and retention
leaving nothing searchable (read in the store's tables with ``store_dump``), and the embedder
counted: never called by a turn, once per message over turns, searches and restarts.
:class:`MultiProcessConformance` adds processes appending to one conversation while another
searches, and a process killed between a turn and its embedding.

:mod:`memory_adapters.testing.hostile` holds the hostile-argument table the suite runs,
sync and async, on every store: each public method of ``Conversation``, ``Facts``,
``WorkingMemory`` and ``MemoryTools`` with huge, negative, zero, wrong-typed, non-finite and
out-of-range arguments and the exact error class each must raise (nothing stored may
change), and the boundary calls every store must accept alike.

The suites need pytest and hypothesis (``pip install "memory-adapters[dev]"``); this package
imports them only when a suite is first used (``from memory_adapters.testing import
StoreConformance``). The runtime helpers meant for users' own examples and tests import
without them: :mod:`memory_adapters.testing.langchain` (``ScriptedChatModel``, needs only the
``langchain`` extra), :mod:`memory_adapters.testing.postgres_server` (``TemporaryPostgres``) and
:mod:`memory_adapters.testing.hostile` (the hostile-argument table as data).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memory_adapters.errors import MissingExtra

if TYPE_CHECKING:
    from .conformance import MultiProcessConformance, StoreConformance

__all__ = ["MultiProcessConformance", "StoreConformance"]

_LAZY = {"MultiProcessConformance": "conformance", "StoreConformance": "conformance"}

_TEST_TOOLS = {"pytest", "_pytest", "hypothesis"}


def _load(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        loaded = importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] in _TEST_TOOLS:
            raise MissingExtra("dev", "pytest and hypothesis") from exc
        raise
    return getattr(loaded, name)


if not TYPE_CHECKING:  # type checkers see the imports above, and flag any other name
    __getattr__ = _load


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
