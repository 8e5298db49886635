"""The offline default embedder: WordLlama (``pip install "memory-adapters[embeddings]"``).

`WordLlama <https://github.com/dleemiller/WordLlama>`_ is a small word-embedding model
(256 dimensions, about 16 MB) whose weights and tokenizer ship inside its wheel: it runs on
the CPU with no server, no key and no download, in about a millisecond for a sentence. With
the extra installed, ``Memory(url)`` uses it for semantic recall unless given another
embedder (``Memory(url, embed=...)``) or ``embed=False``; ``Memory(url, embed="wordllama")``
asks for it by name.

Its loader would still ask a model hub for the tokenizer: this plugin loads the tokenizer
from the wheel instead (copied once into a cache directory, ``MEMORY_ADAPTERS_CACHE`` or
``~/.cache/memory-adapters``), and never downloads anything.
"""

from __future__ import annotations

import importlib.util

from memory_adapters import MissingExtra, hookimpl
from memory_adapters.embedders import Embedder

from .embedder import NAME, WordLlamaEmbedder

__all__ = ["NAME", "WordLlamaEmbedder"]


@hookimpl(trylast=True)
def make_embedder(spec: object) -> Embedder | None:
    """WordLlama for ``"wordllama"``, and as the default (``spec is None``) when installed."""
    if spec is None:
        return WordLlamaEmbedder() if importlib.util.find_spec("wordllama") else None
    if spec in ("wordllama", NAME):
        if importlib.util.find_spec("wordllama") is None:
            raise MissingExtra("embeddings", "wordllama")
        return WordLlamaEmbedder()
    return None
