"""Embedders: what turns a fact's text, or a search query, into a vector for semantic recall.

``Memory(url, embed=...)`` chooses one. What it accepts is decided by the ``make_embedder``
hook, so that a plugin can add kinds of embedders:

* nothing (``embed=None``): the default embedder of an installed plugin, if any — the
  ``embeddings`` extra installs a real local model that works offline (WordLlama);
  ``embed=False`` turns semantic recall off;
* a name: ``"wordllama"``, or a pydantic-ai embedding model name such as
  ``"openai:text-embedding-3-small"`` (the ``pydantic-ai`` extra);
* an object: an :class:`Embedder`, a pydantic-ai ``Embedder``, a LangChain ``Embeddings``,
  or a plain callable ``fn(texts) -> list[list[float]]``, sync or async.

A fact is embedded once, when it is written (like its tokens are counted); the vector is
stored with the fact under the embedder's :attr:`Embedder.name`. A fact whose vector was made
by another model (or none: written before an embedder was configured) is embedded again the
first time a semantic search of its scope needs it, in batches.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .errors import InvalidInput
from .hookspecs import hookimpl

InputType = Literal["document", "query"]
"""What is embedded: a stored fact's text, or a search query (some models embed them
differently)."""

MAX_DIMS = 16384
"""Longest vector accepted, in dimensions (pgvector's limit for a stored ``vector``)."""

EMBED_BATCH = 256
"""At most this many texts are sent to an embedder in one call."""


@dataclass(frozen=True, slots=True)
class Embedding:
    """The vectors stored with one fact: the embedder's ``model`` name, the vectors'
    dimensions, and one unit-length vector per indexed field.

    The core indexes one field, :data:`WHOLE` (the fact's search text); the LangGraph store
    indexes one per field path it was told to (``{"fields": [...]}``). An embedding with no
    vectors records that the fact was deliberately left unindexed by ``model``.
    """

    model: str
    dims: int
    vectors: Mapping[str, Sequence[float]]


WHOLE = "$"
"""The field name of a fact's whole search text."""


def normalized(vector: Sequence[float], dims: int | None = None) -> list[float]:
    """``vector`` as a list of floats of length 1 (cosine similarity is then a dot product).

    Raises :class:`~memory_adapters.errors.InvalidInput` for a vector that is empty, longer
    than :data:`MAX_DIMS`, of the wrong length, not made of finite numbers, or all zeros.
    """
    try:
        values = [float(x) for x in vector]
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"an embedding must be a sequence of numbers: {exc}") from None
    if not values or len(values) > MAX_DIMS:
        raise InvalidInput(f"an embedding has 1 to {MAX_DIMS} dimensions, not {len(values)}")
    if dims is not None and len(values) != dims:
        raise InvalidInput(f"an embedding of {len(values)} dimensions where {dims} were expected")
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not math.isfinite(norm):
        raise InvalidInput("an embedding must be made of finite numbers")
    if norm == 0.0:
        raise InvalidInput("an embedding of all zeros has no direction")
    return [x / norm for x in values]


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The dot product of two vectors of the same length (their cosine when both are unit
    vectors)."""
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


class Embedder:
    """Base class of embedders. Subclass it and implement :meth:`embed` (and :meth:`aembed`
    when the model has an async client); or give ``Memory(embed=...)`` a plain callable.

    ``name`` identifies the model: it is stored with every vector, and a fact whose vector has
    another name is embedded again. Change it whenever the vectors would change.
    """

    name: str = "embedder"
    """The model's name, stored with each vector."""

    min_similarity: float | None = None
    """The cosine similarity below which a text and a query are unrelated, for this model
    (calibrated per model: each has its own scale), or ``None`` when unknown. The memory
    tools' relevance floor is drawn from it (:attr:`MemoryTools.min_score
    <memory_adapters.tools.MemoryTools.min_score>`)."""

    duplicate_similarity: float | None = None
    """The cosine similarity at or above which two facts mean the same, for this model, or
    ``None`` for :data:`~memory_adapters.consolidation.DUPLICATE_SIMILARITY`: a fact a model
    proposes that close to a stored one updates it instead of adding a second
    (:mod:`memory_adapters.consolidation`)."""

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        """One vector per text, in order."""
        raise NotImplementedError

    async def aembed(
        self, texts: list[str], input_type: InputType = "document"
    ) -> list[list[float]]:
        """Async :meth:`embed`; the default runs :meth:`embed` in a worker thread."""
        return await asyncio.to_thread(self.embed, texts, input_type)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class CallableEmbedder(Embedder):
    """An embedder from a plain callable ``fn(texts: list[str]) -> list[list[float]]``, sync
    or async (an ``async def``, or one returning an awaitable). A callable accepting an
    ``input_type`` keyword is told whether it embeds documents or a query."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or _callable_name(fn)
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
            params = {}  # type: ignore[assignment]
        self._typed = "input_type" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        )

    def _call(self, texts: list[str], input_type: InputType) -> Any:
        if self._typed:
            return self.fn(texts, input_type=input_type)
        return self.fn(texts)

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        result = self._call(texts, input_type)
        if inspect.isawaitable(result):
            from .asyncs import resolve_sync

            result = resolve_sync(result)
        return _as_lists(result)

    async def aembed(
        self, texts: list[str], input_type: InputType = "document"
    ) -> list[list[float]]:
        if inspect.iscoroutinefunction(self.fn):
            return _as_lists(await self._call(texts, input_type))
        result = await asyncio.to_thread(self._call, texts, input_type)
        if inspect.isawaitable(result):
            result = await result
        return _as_lists(result)


def _callable_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or ""
    return f"{module}.{name}" if module else str(name)


def _as_lists(result: Any) -> list[list[float]]:
    """An embedder's answer as a list of lists (numpy arrays and tuples accepted)."""
    if hasattr(result, "tolist"):
        result = result.tolist()
    return [list(v.tolist() if hasattr(v, "tolist") else v) for v in result]


def check_vectors(vectors: Any, count: int, name: str) -> list[list[float]]:
    """Normalize what embedder ``name`` returned for ``count`` texts: one vector each, all of
    the same dimensions; :class:`~memory_adapters.errors.InvalidInput` otherwise."""
    try:
        rows = _as_lists(vectors)
    except TypeError:
        raise InvalidInput(
            f"embedder {name!r} returned {type(vectors).__name__}, not a list of vectors"
        ) from None
    if len(rows) != count:
        raise InvalidInput(f"embedder {name!r} returned {len(rows)} vectors for {count} texts")
    if not rows:
        return []
    dims = len(rows[0])
    return [normalized(v, dims) for v in rows]


@hookimpl(trylast=True)
def make_embedder(spec: object) -> Embedder | None:
    """The built-in fallback: an :class:`Embedder` as it is, a plain callable wrapped in a
    :class:`CallableEmbedder`."""
    if isinstance(spec, Embedder):
        return spec
    if callable(spec) and not isinstance(spec, type):
        return CallableEmbedder(spec)
    return None
