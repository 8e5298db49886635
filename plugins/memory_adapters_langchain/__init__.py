"""The LangChain adapter: ``create_agent`` middleware, ``memory.wrap(agent)`` for built agents,
memory tools, a LangGraph ``BaseStore`` and a ``BaseChatMessageHistory``, over any
memory-adapters store.

``pip install "memory-adapters[langchain]"``. This plugin registers, through the
``register_adapters`` hook, the adapter ``memory.wrap()`` uses for LangChain/LangGraph agents.
Loading it never imports LangChain; the names below import it when first used:

``MemoryMiddleware``
    memory as an ``AgentMiddleware`` for ``create_agent(..., middleware=[...])``
    (:mod:`.middleware`);
``MemoryGraph``
    what ``memory.wrap(agent)`` returns for an agent already built (:mod:`.graph`);
``memory_tools``
    the long-term memory tools as structured tools with async implementations (:mod:`.tools`);
``MemoryStore``
    a LangGraph ``BaseStore`` over the ``Memory``'s facts (:mod:`.store`);
``MemoryChatMessageHistory``
    a ``BaseChatMessageHistory`` for ``RunnableWithMessageHistory`` (:mod:`.history`);
``to_messages`` / ``from_messages``
    the mapping between LangChain messages and the neutral form (:mod:`.mapping`);
``ModelCannotCallTools``
    raised when the agent's chat model cannot call tools and the middleware gives it the memory
    tools (:mod:`.errors`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from memory_adapters import MissingExtra, hookimpl

from .adapter import LangChainAdapter
from .errors import ModelCannotCallTools

if TYPE_CHECKING:
    from .graph import MemoryGraph
    from .history import MemoryChatMessageHistory
    from .mapping import from_messages, to_messages
    from .middleware import MemoryMiddleware
    from .pending import aawaiting, awaiting
    from .store import MemoryStore
    from .tools import memory_tools

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

_LAZY = {
    "aawaiting": "pending",
    "awaiting": "pending",
    "MemoryChatMessageHistory": "history",
    "MemoryGraph": "graph",
    "MemoryMiddleware": "middleware",
    "MemoryStore": "store",
    "from_messages": "mapping",
    "memory_tools": "tools",
    "to_messages": "mapping",
}

_EXTRA_ROOTS = {"langchain", "langchain_core", "langgraph"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        loaded = importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] in _EXTRA_ROOTS:
            raise MissingExtra("langchain", exc.name.split(".")[0]) from exc
        raise
    return getattr(loaded, name)


def _missing(module: str) -> bool:
    """Whether ``module`` cannot be imported here."""
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # ValueError: blocked with sys.modules[module] = None
        return True


@hookimpl(trylast=True)
def register_adapters(register: Any) -> None:
    """Register the LangChain adapter where LangChain and LangGraph are installed (the
    ``langchain`` extra), so that ``memory.adapters`` and ``NoAdapter`` name only adapters that
    can wrap something (``trylast``: a plugin may replace it)."""
    if not (_missing("langchain_core") or _missing("langgraph")):
        register(LangChainAdapter())


@hookimpl
def make_embedder(spec: object) -> Any:
    """A LangChain ``Embeddings`` for ``Memory(embed=...)``; ``None`` for anything else."""
    module = sys.modules.get("langchain_core.embeddings")
    if module is None or not isinstance(spec, module.Embeddings):
        return None
    from .embedder import LangChainEmbedder

    return LangChainEmbedder(spec)


@hookimpl
def make_extractor(spec: object) -> Any:
    """A LangChain chat model for ``Memory(extractor=...)``; ``None`` for anything else."""
    module = sys.modules.get("langchain_core.language_models.chat_models")
    if module is None or not isinstance(spec, module.BaseChatModel):
        return None
    from .extractor import LangChainExtractor

    return LangChainExtractor(spec)


@hookimpl
def make_summarizer(spec: object) -> Any:
    """A LangChain chat model for ``Memory(summarizer=...)``; ``None`` for anything else."""
    module = sys.modules.get("langchain_core.language_models.chat_models")
    if module is None or not isinstance(spec, module.BaseChatModel):
        return None
    from .summarizer import LangChainSummarizer

    return LangChainSummarizer(spec)
