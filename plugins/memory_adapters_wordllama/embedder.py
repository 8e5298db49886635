"""``WordLlamaEmbedder``: the bundled WordLlama model, loaded once per process, offline."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from memory_adapters.embedders import Embedder, InputType

NAME = "wordllama:l2_supercat_256"
"""The name stored with WordLlama's vectors: the model and its dimensions."""

TOKENIZER = "l2_supercat_tokenizer_config.json"

_lock = threading.Lock()
_model: Any = None


def cache_dir() -> Path:
    """Where the tokenizer is copied for WordLlama's loader: ``$MEMORY_ADAPTERS_CACHE/wordllama``,
    else ``~/.cache/memory-adapters/wordllama``, else a temporary directory when the home
    directory cannot be written."""
    root = os.environ.get("MEMORY_ADAPTERS_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "memory-adapters"
    )
    return Path(root) / "wordllama"


def _import_wordllama() -> Any:
    """``wordllama``, imported with the root logger left as the application set it: WordLlama's
    ``__init__`` (and its ``inference`` module) call ``logging.basicConfig(level=INFO)``, which,
    on an application that configured no logging, adds a stderr handler at INFO to the root
    logger and so prints every library's INFO lines from then on."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        import wordllama
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    return wordllama


def _prepare(directory: Path) -> Path:
    wordllama = _import_wordllama()
    bundled = Path(wordllama.__file__).parent / "tokenizers" / TOKENIZER
    target = directory / "tokenizers" / TOKENIZER
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.part")
        shutil.copyfile(bundled, partial)
        os.replace(partial, target)  # atomic: several processes may race here
    return directory


def load() -> Any:
    """The WordLlama model, loaded on first use and shared by the whole process."""
    global _model
    with _lock:
        if _model is None:
            WordLlama = _import_wordllama().WordLlama

            try:
                directory = _prepare(cache_dir())
            except OSError:
                directory = _prepare(Path(tempfile.mkdtemp(prefix="memory-adapters-wordllama-")))
            _model = WordLlama.load(
                config="l2_supercat", cache_dir=directory, disable_download=True
            )
        return _model


class WordLlamaEmbedder(Embedder):
    """WordLlama's 256-dimension ``l2_supercat`` model: small, CPU-only and offline. It embeds
    documents and queries alike. Loading it takes about a tenth of a second, once per process,
    on the first text embedded."""

    name = NAME
    min_similarity = 0.25
    """Calibrated on ``benchmarks/recall.py``'s conversations: the tools' floor drawn from it
    keeps recall@5 of questions about saved facts (0.80) and answers 62% of questions
    about anything else (general knowledge) with no facts; paraphrases such as "Which drink
    do I prefer?" for "favourite tea: oolong" (0.28) stay above it."""

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        if not texts:
            return []
        vectors: list[list[float]] = load().embed(texts, norm=True).tolist()
        return vectors
