"""LangGraph's ``index={"embed": ...}`` as a memory-adapters :class:`Embedder`.

LangGraph stores accept, as ``embed``, a LangChain ``Embeddings``, a plain function
``fn(texts) -> list[list[float]]`` (sync or async) or a ``"provider:model"`` string given to
``langchain.embeddings.init_embeddings``; :func:`langgraph.store.base.ensure_embeddings` turns
each into an ``Embeddings``. :func:`index_embedder` does the same and wraps the result in a
:class:`LangChainEmbedder`, whose :attr:`~memory_adapters.embedders.Embedder.name` — the model
name stored with every vector — is derived from what was given (:func:`model_name`). A
memory-adapters :class:`~memory_adapters.embedders.Embedder` (``memory.embedder``, say) is used
as it is, under its own name, so that the LangGraph store and ``memory.facts`` share vectors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.embeddings import Embeddings
from langgraph.store.base import ensure_embeddings

from memory_adapters.embedders import Embedder, InputType

__all__ = ["LangChainEmbedder", "index_embedder", "model_name"]


def _callable_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a function, as the core names a callable embedder."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or ""
    return f"{module}.{name}" if module else str(name)


def model_name(embed: object, embeddings: Embeddings) -> str:
    """The model name stored with vectors made by ``embed``.

    * a ``"provider:model"`` string: the string;
    * a function: ``module.qualname`` (what ``Memory(embed=fn)`` names it too);
    * an ``Embeddings``: ``module.ClassName``, then ``:`` and its ``model`` / ``model_name``
      attribute when it has one (``OpenAIEmbeddings(model="text-embedding-3-small")`` gives
      ``langchain_openai.embeddings.base.OpenAIEmbeddings:text-embedding-3-small``).
    """
    if isinstance(embed, str):
        return embed
    if not isinstance(embed, Embeddings) and callable(embed):
        return _callable_name(embed)
    cls = type(embeddings)
    name = f"{cls.__module__}.{cls.__qualname__}"
    for attr in ("model", "model_name"):
        model = getattr(embeddings, attr, None)
        if isinstance(model, str) and model:
            return f"{name}:{model}"
    return name


class LangChainEmbedder(Embedder):
    """A LangChain ``Embeddings`` as an :class:`Embedder`: documents through
    ``embed_documents`` / ``aembed_documents``, queries through ``embed_query`` /
    ``aembed_query`` (one call per query text)."""

    def __init__(self, embeddings: Embeddings, name: str) -> None:
        self.embeddings = embeddings
        self.name = name

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        if input_type == "query":
            return [self.embeddings.embed_query(text) for text in texts]
        return self.embeddings.embed_documents(texts)

    async def aembed(
        self, texts: list[str], input_type: InputType = "document"
    ) -> list[list[float]]:
        if input_type == "query":
            return [await self.embeddings.aembed_query(text) for text in texts]
        return await self.embeddings.aembed_documents(texts)


def index_embedder(embed: object) -> tuple[Embedder, Embeddings | None]:
    """The :class:`Embedder` for LangGraph's ``index["embed"]``, and the ``Embeddings`` it wraps
    (``None`` for a memory-adapters :class:`Embedder`, used as it is)."""
    if isinstance(embed, Embedder):
        return embed, None
    embeddings = ensure_embeddings(embed)  # type: ignore[arg-type]
    return LangChainEmbedder(embeddings, model_name(embed, embeddings)), embeddings
