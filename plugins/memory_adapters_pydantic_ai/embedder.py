"""pydantic-ai's embedders (``pydantic_ai.embeddings``) as memory-adapters embedders.

``Memory(url, embed="openai:text-embedding-3-small")`` (any pydantic-ai embedding model name,
``provider:model``), ``Memory(url, embed=pydantic_ai.embeddings.Embedder(...))`` or an
``EmbeddingModel`` instance: documents go through ``embed_documents``, queries through
``embed_query``, async where the caller is.
"""

from __future__ import annotations

from typing import Any

from memory_adapters.embedders import Embedder, InputType


def model_name(model: Any) -> str:
    """``provider:model`` of a pydantic-ai embedding model (or the name it was given)."""
    if isinstance(model, str):
        return model
    system = getattr(model, "system", None) or type(model).__name__
    return f"{system}:{getattr(model, 'model_name', '?')}"


class PydanticAIEmbedder(Embedder):
    """A pydantic-ai ``Embedder``; its name is the model's ``provider:model``."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self.name = model_name(embedder.model)

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        if not texts:
            return []
        if input_type == "query":
            result = self.embedder.embed_query_sync(texts)
        else:
            result = self.embedder.embed_documents_sync(texts)
        return [list(v) for v in result.embeddings]

    async def aembed(
        self, texts: list[str], input_type: InputType = "document"
    ) -> list[list[float]]:
        if not texts:
            return []
        if input_type == "query":
            result = await self.embedder.embed_query(texts)
        else:
            result = await self.embedder.embed_documents(texts)
        return [list(v) for v in result.embeddings]


def make(spec: object) -> Embedder | None:
    """A :class:`PydanticAIEmbedder` for a pydantic-ai ``Embedder``, ``EmbeddingModel`` or
    ``provider:model`` name; ``None`` for anything else."""
    from pydantic_ai.embeddings import Embedder as PAIEmbedder
    from pydantic_ai.embeddings import EmbeddingModel

    if isinstance(spec, PAIEmbedder):
        return PydanticAIEmbedder(spec)
    if isinstance(spec, EmbeddingModel):
        return PydanticAIEmbedder(PAIEmbedder(spec))
    if isinstance(spec, str) and ":" in spec:
        return PydanticAIEmbedder(PAIEmbedder(spec))
    return None
