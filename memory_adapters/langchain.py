"""LangChain and LangGraph: memory as ``create_agent`` middleware, and the rest of the adapter.

``pip install "memory-adapters[langchain]"``, then::

    from memory_adapters.langchain import MemoryMiddleware

The names are those of the built-in plugin ``memory_adapters_langchain``, loaded on first use
(importing this module imports no framework); without the ``langchain`` extra, using one
raises :class:`~memory_adapters.errors.MissingExtra` naming the ``pip install`` that fixes it.

``MemoryMiddleware``
    memory as an ``AgentMiddleware`` for ``create_agent(..., middleware=[...])``;
``MemoryGraph``
    what ``memory.wrap(agent)`` returns for an agent already built;
``memory_tools``
    the long-term memory tools as LangChain structured tools;
``MemoryStore``
    a LangGraph ``BaseStore`` over a ``Memory``'s facts;
``MemoryChatMessageHistory``
    a ``BaseChatMessageHistory`` for ``RunnableWithMessageHistory``;
``to_messages`` / ``from_messages``
    the mapping between LangChain messages and the neutral form;
``awaiting`` / ``aawaiting``
    the run a thread waits on, interrupted for an approval, with the calls it waits on;
``ModelCannotCallTools``
    raised when the middleware gives its tools to a chat model without ``bind_tools``;
``LangChainAdapter``
    the adapter ``memory.wrap()`` uses (registered by the plugin; rarely needed directly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._extras import LazyExports

if TYPE_CHECKING:
    from memory_adapters_langchain import (
        LangChainAdapter,
        MemoryChatMessageHistory,
        MemoryGraph,
        MemoryMiddleware,
        MemoryStore,
        ModelCannotCallTools,
        aawaiting,
        awaiting,
        from_messages,
        memory_tools,
        to_messages,
    )

__all__ = [
    "LangChainAdapter",
    "MemoryChatMessageHistory",
    "MemoryGraph",
    "MemoryMiddleware",
    "MemoryStore",
    "ModelCannotCallTools",
    "aawaiting",
    "awaiting",
    "from_messages",
    "memory_tools",
    "to_messages",
]

_EXPORTS = LazyExports(
    module=__name__,
    plugin="memory_adapters_langchain",
    names=__all__,
    extra="langchain",
    packages=("langchain", "langchain_core", "langgraph"),
    described="langchain, langchain-core and langgraph",
)


if not TYPE_CHECKING:  # type checkers see the imports above, and flag any other name

    def __getattr__(name: str) -> Any:
        return _EXPORTS.get(name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
