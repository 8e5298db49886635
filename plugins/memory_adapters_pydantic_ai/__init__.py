"""The pydantic-ai adapter: ``memory.wrap(agent)``, a native capability, memory tools, forked
sub-agents and ``ConversationStore`` backends, over any memory-adapters store.

``pip install "memory-adapters[pydantic-ai]"``. This plugin registers, through the
``register_adapters`` hook, the adapter ``memory.wrap()`` uses for pydantic-ai agents. Loading it
never imports pydantic-ai; the names below import it when first used:

``MemoryAgent``
    what ``memory.wrap(agent)`` returns (:mod:`.agent`);
``MemoryCapability``
    the same memory as a capability, for ``Agent(capabilities=[...])`` or one run
    (:mod:`.capability`);
``MemoryConversationStore``
    pydantic-ai's ``ConversationStore`` over a ``Memory``'s store (:mod:`.conversation_store`);
``to_messages`` / ``from_messages``
    the mapping between pydantic-ai messages and the neutral form (:mod:`.mapping`);
``memory_toolset``
    the memory tools as a toolset bound to one scope (:mod:`.toolset`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from memory_adapters import MissingExtra, hookimpl

from .adapter import PydanticAIAdapter

if TYPE_CHECKING:
    from .agent import MemoryAgent
    from .capability import MemoryCapability
    from .conversation_store import MemoryConversationStore
    from .mapping import from_messages, to_messages
    from .toolset import memory_toolset

__all__ = [
    "MemoryAgent",
    "MemoryCapability",
    "MemoryConversationStore",
    "PydanticAIAdapter",
    "from_messages",
    "memory_toolset",
    "to_messages",
]

_LAZY = {
    "MemoryAgent": "agent",
    "MemoryCapability": "capability",
    "MemoryConversationStore": "conversation_store",
    "from_messages": "mapping",
    "to_messages": "mapping",
    "memory_toolset": "toolset",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        loaded = importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:
        # pydantic-ai or one of its own dependencies (anyio ...) is missing: the extra is
        if _missing("pydantic_ai") or (
            exc.name is not None and exc.name.split(".")[0] in ("pydantic_ai", "anyio")
        ):
            raise MissingExtra("pydantic-ai", "pydantic-ai-slim") from exc
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
    """Register the pydantic-ai adapter where pydantic-ai is installed (the ``pydantic-ai``
    extra), so that ``memory.adapters`` and ``NoAdapter`` name only adapters that can wrap
    something (``trylast``: a plugin may replace it)."""
    if not _missing("pydantic_ai"):
        register(PydanticAIAdapter())


@hookimpl
def make_embedder(spec: object) -> Any:
    """pydantic-ai embedders and embedding model names (``provider:model``) for
    ``Memory(embed=...)``; ``None`` for anything else, or where pydantic-ai is not installed."""
    if isinstance(spec, str):
        if ":" not in spec or spec.startswith("wordllama") or _missing("pydantic_ai"):
            return None
    elif "pydantic_ai.embeddings" not in sys.modules:  # an object of pydantic-ai's is loaded
        return None
    from .embedder import make

    return make(spec)


@hookimpl
def make_extractor(spec: object) -> Any:
    """pydantic-ai agents, models and model names (``provider:model``) for
    ``Memory(extractor=...)``; ``None`` for anything else, or where pydantic-ai is not
    installed."""
    if isinstance(spec, str):
        if ":" not in spec or _missing("pydantic_ai"):
            return None
    elif "pydantic_ai" not in sys.modules:  # an object of pydantic-ai's is loaded
        return None
    from .extractor import make

    return make(spec)


@hookimpl
def make_summarizer(spec: object) -> Any:
    """pydantic-ai agents, models and model names (``provider:model``) for
    ``Memory(summarizer=...)``; ``None`` for anything else, or where pydantic-ai is not
    installed."""
    if isinstance(spec, str):
        if ":" not in spec or _missing("pydantic_ai"):
            return None
    elif "pydantic_ai" not in sys.modules:  # an object of pydantic-ai's is loaded
        return None
    from .summarizer import make

    return make(spec)
