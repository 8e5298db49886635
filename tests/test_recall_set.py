"""The labelled set of benchmarks/recall.py keeps its promises (no timing here)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import recall_set


def test_paraphrases_share_no_word_and_shared_questions_do() -> None:
    recall_set.check()


def test_filler_is_deterministic_and_grows_by_prefix() -> None:
    assert list(recall_set.filler(50)) == list(recall_set.filler(200))[:50]
    keys = [k for k, _ in recall_set.filler(5000)]
    assert len(set(keys)) == len(keys)
    assert not set(keys) & {f.key for f in recall_set.LABELLED}
