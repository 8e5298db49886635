"""The framework adapter ``memory.wrap(agent)`` finds for LangChain / LangGraph agents.

Importing this module never imports LangChain: ``handles`` looks at ``sys.modules`` first, so
an object can only be a LangGraph graph once its program has imported LangGraph.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from memory_adapters import InvalidInput, Memory, MissingExtra


class LangChainAdapter:
    """Wraps a compiled LangGraph graph with a ``messages`` state (what ``create_agent``
    builds) in a ``MemoryGraph``."""

    name = "langchain"

    def handles(self, obj: object) -> bool:
        """Whether ``obj`` is a compiled LangGraph graph whose state has ``messages``."""
        if sys.modules.get("langgraph") is None:
            return False
        try:
            from langgraph.pregel import Pregel
        except ImportError:
            return False
        if isinstance(obj, Pregel):
            return "messages" in obj.channels
        graph = sys.modules.get(f"{__package__}.graph")  # a MemoryGraph to wrap again
        return graph is not None and isinstance(obj, graph.MemoryGraph)

    def wrap(self, obj: Any, memory: Memory, **options: Any) -> Any:
        """A ``MemoryGraph`` around ``obj``; ``options`` are ``MemoryGraph``'s."""
        try:
            from .graph import MemoryGraph
        except ImportError as exc:  # pragma: no cover - handles() saw langgraph imported
            raise MissingExtra("langchain", "langchain and langgraph") from exc
        accepted = set(inspect.signature(MemoryGraph.__init__).parameters) - {
            "self",
            "graph",
            "memory",
        }
        unknown = sorted(set(options) - accepted)
        if unknown:
            raise InvalidInput(
                f"wrap() got unknown option(s) {', '.join(unknown)} for a LangChain agent; "
                f"accepted: {', '.join(sorted(accepted))}"
            )
        if isinstance(obj, MemoryGraph):  # re-wrapping replaces the memory, never stacks it
            obj = obj.graph
        return MemoryGraph(obj, memory, **options)
