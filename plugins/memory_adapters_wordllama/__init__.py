"""A light offline embedder: WordLlama (``pip install "memory-adapters[wordllama]"``).

`WordLlama <https://github.com/dleemiller/WordLlama>`_ is a small word-embedding model
(256 dimensions, about 16 MB) whose weights and tokenizer ship inside its wheel: it runs on
the CPU with no server, no key and no download, in a fraction of a millisecond for a
sentence, but finds less by meaning than all-MiniLM-L6-v2 (the ``embeddings`` extra's).
``Memory(url, embed="wordllama")`` asks for it by name; ``Memory(url)`` uses it when it is
the only offline model installed.

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
    """WordLlama for ``"wordllama"``, and as the default (``spec is None``) when installed and
    no other plugin answered (the ``embeddings`` extra's all-MiniLM-L6-v2 answers first)."""
    if spec is None:
        return WordLlamaEmbedder() if importlib.util.find_spec("wordllama") else None
    if spec in ("wordllama", NAME):
        if importlib.util.find_spec("wordllama") is None:
            raise MissingExtra("wordllama", "wordllama")
        return WordLlamaEmbedder()
    return None
