"""The errors only the LangChain adapter raises (importing this module never imports
LangChain)."""

from __future__ import annotations

from memory_adapters import MemoryAdaptersError


class ModelCannotCallTools(MemoryAdaptersError, NotImplementedError):
    """The agent's chat model does not implement ``bind_tools``, and ``MemoryMiddleware`` gives
    it the memory tools. A ``NotImplementedError``, which LangChain raises for such a model
    itself, so existing ``except`` clauses keep working."""

    def __init__(self, model: str) -> None:
        super().__init__(
            f"the chat model {model} cannot call tools (it does not implement bind_tools), and "
            "MemoryMiddleware gives the model the memory tools: use a chat model that supports "
            "tool calling, or leave the memory tools out with "
            "MemoryMiddleware(memory, tools=False)"
        )
        self.model = model
