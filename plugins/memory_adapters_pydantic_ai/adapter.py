"""The framework adapter ``memory.wrap(agent)`` finds for pydantic-ai agents.

Importing this module never imports pydantic-ai: ``handles`` looks at ``sys.modules`` first,
so an object can only be a pydantic-ai agent once its program has imported pydantic-ai.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from memory_adapters import InvalidInput, Memory, MissingExtra


class PydanticAIAdapter:
    """Wraps a pydantic-ai ``Agent`` (or any ``AbstractAgent``) in a ``MemoryAgent``."""

    name = "pydantic-ai"

    def handles(self, obj: object) -> bool:
        """Whether ``obj`` is a pydantic-ai agent."""
        if sys.modules.get("pydantic_ai") is None:
            return False
        try:
            from pydantic_ai.agent import AbstractAgent
        except ImportError:
            return False
        return isinstance(obj, AbstractAgent)

    def wrap(self, obj: Any, memory: Memory, **options: Any) -> Any:
        """A ``MemoryAgent`` around ``obj``; ``options`` are ``MemoryCapability``'s."""
        try:
            from .agent import MemoryAgent
            from .capability import MemoryCapability
        except ImportError as exc:  # pragma: no cover - handles() saw pydantic_ai imported
            raise MissingExtra("pydantic-ai", "pydantic-ai-slim") from exc
        accepted = set(inspect.signature(MemoryCapability.__init__).parameters) - {
            "self",
            "memory",
        }
        unknown = sorted(set(options) - accepted)
        if unknown:
            raise InvalidInput(
                f"wrap() got unknown option(s) {', '.join(unknown)} for a pydantic-ai agent; "
                f"accepted: {', '.join(sorted(accepted))}"
            )
        if isinstance(obj, MemoryAgent):  # re-wrapping replaces the memory, never stacks it
            obj = obj.wrapped
        return MemoryAgent(obj, MemoryCapability(memory, **options))
