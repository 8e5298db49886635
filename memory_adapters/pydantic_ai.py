"""pydantic-ai: memory as a capability, ``ConversationStore`` backends, and the rest of the
adapter.

``pip install "memory-adapters[pydantic-ai]"``, then::

    from memory_adapters.pydantic_ai import MemoryCapability

The names are those of the built-in plugin ``memory_adapters_pydantic_ai``, loaded on first
use (importing this module imports no framework); without the ``pydantic-ai`` extra, using one
raises :class:`~memory_adapters.errors.MissingExtra` naming the ``pip install`` that fixes it.

``MemoryCapability``
    memory as a capability, for ``Agent(capabilities=[...])`` or one run;
``MemoryAgent``
    what ``memory.wrap(agent)`` returns;
``MemoryConversationStore``
    pydantic-ai's ``ConversationStore`` over a ``Memory``'s store;
``memory_toolset``
    the memory tools as a toolset bound to one scope;
``to_messages`` / ``from_messages``
    the mapping between pydantic-ai messages and the neutral form;
``PydanticAIAdapter``
    the adapter ``memory.wrap()`` uses (registered by the plugin; rarely needed directly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._extras import LazyExports

if TYPE_CHECKING:
    from memory_adapters_pydantic_ai import (
        MemoryAgent,
        MemoryCapability,
        MemoryConversationStore,
        PydanticAIAdapter,
        from_messages,
        memory_toolset,
        to_messages,
    )

__all__ = [
    "MemoryAgent",
    "MemoryCapability",
    "MemoryConversationStore",
    "PydanticAIAdapter",
    "from_messages",
    "memory_toolset",
    "to_messages",
]

_EXPORTS = LazyExports(
    module=__name__,
    plugin="memory_adapters_pydantic_ai",
    names=__all__,
    extra="pydantic-ai",
    packages=("pydantic_ai",),
    described="pydantic-ai-slim",
)


if not TYPE_CHECKING:  # type checkers see the imports above, and flag any other name

    def __getattr__(name: str) -> Any:
        return _EXPORTS.get(name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
