"""Deterministic embedders for tests: meaning without a model.

:class:`ConceptEmbedder` maps words to a handful of concepts (drinks, places, animals,
work...) so that "Which beverage do I like?" is near "favourite_tea: oolong" while sharing no
word with it, and counts every text it embeds, split into documents and queries, so a test
can check that each fact is embedded once. It needs nothing beyond the standard library.
"""

from __future__ import annotations

import re
import threading
import zlib

from memory_adapters.embedders import Embedder, InputType

CONCEPTS: dict[str, tuple[str, ...]] = {
    "drink": ("tea", "oolong", "coffee", "espresso", "drink", "drinks", "beverage", "sip"),
    "place": ("city", "lisbon", "porto", "live", "lives", "home", "town", "hometown", "reside"),
    "animal": ("dog", "pet", "parrot", "kiwi", "animal", "rex", "cat", "companion"),
    "work": ("job", "engineer", "work", "bank", "career", "employer", "occupation", "profession"),
    "food": ("allergy", "peanuts", "food", "eat", "meal", "dish", "cuisine", "allergic"),
    "music": ("music", "jazz", "song", "band", "listen", "melody", "tune", "genre"),
}
_AXIS = {word: axis for axis, words in enumerate(CONCEPTS.values()) for word in words}
NOISE_DIMS = 4
_WORD = re.compile(r"\w+")


class ConceptEmbedder(Embedder):
    """Vectors of ``len(CONCEPTS) + NOISE_DIMS`` dimensions: one per concept a word belongs
    to, plus a small hashed component for other words (so that no text is all zeros).

    ``documents`` and ``queries`` list every text embedded, in order; ``calls`` counts
    calls. ``name`` may be changed to pose as another model."""

    def __init__(self, name: str = "concepts-v1") -> None:
        self.name = name
        self.documents: list[str] = []
        self.queries: list[str] = []
        self.calls = 0
        self._lock = threading.Lock()

    def vector(self, text: str) -> list[float]:
        """The vector of one text."""
        v = [0.0] * (len(CONCEPTS) + NOISE_DIMS)
        for word in _WORD.findall(text.lower()):
            axis = _AXIS.get(word)
            if axis is not None:
                v[axis] += 1.0
            else:
                v[len(CONCEPTS) + zlib.crc32(word.encode()) % NOISE_DIMS] += 0.05
        if not any(v):
            v[-1] = 1.0
        return v

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        with self._lock:
            self.calls += 1
            (self.queries if input_type == "query" else self.documents).extend(texts)
        return [self.vector(t) for t in texts]


class FailingEmbedder(Embedder):
    """An embedder that raises, as a remote one does when its service is down."""

    name = "failing"

    def embed(self, texts: list[str], input_type: InputType = "document") -> list[list[float]]:
        raise ConnectionError("embedding service unavailable")
