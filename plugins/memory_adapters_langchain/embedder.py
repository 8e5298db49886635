"""LangChain ``Embeddings`` as a memory-adapters embedder:
``Memory(url, embed=OpenAIEmbeddings(...))``, or any other ``Embeddings``. Documents go through
``embed_documents`` / ``aembed_documents``, queries through ``embed_query`` /
``aembed_query``."""

from __future__ import annotations

from typing import Any

from memory_adapters.embedders import Embedder, InputType


def embeddings_name(embeddings: Any) -> str:
    """A name for a LangChain ``Embeddings``: its class and, where it has one, its model."""
    model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
    base = f"langchain:{type(embeddings).__name__}"
    return f"{base}:{model}" if isinstance(model, str) and model else base


class LangChainEmbedder(Embedder):
    """A LangChain ``Embeddings``."""

    def __init__(self, embeddings: Any) -> None:
        self.embeddings = embeddings
        self.name = embeddings_name(embeddings)

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        if input_type == "query":
            return [list(self.embeddings.embed_query(t)) for t in texts]
        return [list(v) for v in self.embeddings.embed_documents(texts)]

    async def aembed(
        self, texts: list[str], input_type: InputType = "document"
    ) -> list[list[float]]:
        if input_type == "query":
            return [list(await self.embeddings.aembed_query(t)) for t in texts]
        return [list(v) for v in await self.embeddings.aembed_documents(texts)]
