"""The benchmarks keep running: ``agent_overhead.py``'s quick path on the in-memory store, and
the wire counter its PostgreSQL round trips rely on; ``recall.py``'s and
``conversation_recall.py``'s quick runs (no timings are asserted)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import struct
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "agent_overhead.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_overhead_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_agent_overhead_quick_run_on_the_memory_store(tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    pytest.importorskip("langchain")
    out = tmp_path / "overhead.json"
    args = ["--quick", "--stores", "memory", "--sizes", "10,1000", "--turns", "1"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text(encoding="utf-8"))
    rows = result["rows"]
    assert [(r["adapter"], r["store"], r["size"]) for r in rows] == [
        ("pydantic-ai", "memory", 10),
        ("pydantic-ai", "memory", 1000),
        ("langchain", "memory", 10),
        ("langchain", "memory", 1000),
    ]
    for r in rows:
        # the window, the same one shown by ours and by the floor
        assert r["window_messages"] == 112
        assert r["mismatch"] == ""
        m = r["median"]
        assert set(m) == {
            "bare",
            "bare+window",
            "bare+tools",
            "bare+hooks",
            "floor",
            "ours",
            "ours-h",
            "ours-cold",
        }
        assert all(v > 0 for v in m.values())
        floor_own = m["floor"] - m["bare+window"]
        assert r["floor_own"] == pytest.approx(floor_own)
        assert r["own"] == pytest.approx(m["ours"] - m["bare+tools"])
        assert r["own_net"] == pytest.approx(m["ours"] - m["bare+hooks"])
        assert r["own_history"] == pytest.approx(m["ours-h"] - m["bare+window"])
        assert r["tool_charge"] == pytest.approx(m["bare+tools"] - m["bare+window"])
        assert r["hook_charge"] == pytest.approx(m["bare+hooks"] - m["bare+tools"])
        if floor_own > 0:  # 1 turn: noise may leave the floor's own cost at or below 0
            assert r["ratio"] == pytest.approx(r["own"] / floor_own)
            assert r["ratio_net"] == pytest.approx(r["own_net"] / floor_own)
            assert r["ratio_history"] == pytest.approx(r["own_history"] / floor_own)
        else:
            assert r["ratio"] == r["ratio_net"] == r["ratio_history"] == float("inf")
        # bare+hooks' no-op extension ran its hooks in the agent's turn
        assert sum(r["hook_calls"].values()) > 0
        assert r["round_trips"] == {}  # counted on PostgreSQL only
        assert {v: len(t) for v, t in r["samples"].items()} == dict.fromkeys(m, 1)
        assert r["intervals"] == {}  # one round: no interval
    verdicts = [v["text"] for v in result["verdicts"]]
    assert len(verdicts) == 2 and all("memory" in v for v in verdicts)
    assert all("ours/floor" in v and "net/floor" in v and "h/floor" in v for v in verdicts)
    assert "adapter" in done.stdout and "ours/floor" in done.stdout
    assert "net/floor" in done.stdout and "bare+hooks" in done.stdout


def test_the_no_op_extensions_override_exactly_the_hooks_ours_does() -> None:
    """``bare+hooks`` charges the framework for the extension points ``MemoryMiddleware`` and
    ``MemoryCapability`` use: its no-ops override the same hooks, and no other, and do
    nothing (a wrapper calls its handler; the capability's methods do what the base's do)."""
    pytest.importorskip("pydantic_ai")
    pytest.importorskip("langchain")
    from langchain.agents.middleware import AgentMiddleware
    from pydantic_ai.capabilities import AbstractCapability

    from memory_adapters.langchain import MemoryMiddleware
    from memory_adapters.pydantic_ai import MemoryCapability

    ao = _module()
    middleware = ao.noop_middleware()
    for name in ao.LANGCHAIN_HOOKS:
        ours = getattr(MemoryMiddleware, name) is not getattr(AgentMiddleware, name)
        noop = getattr(type(middleware), name) is not getattr(AgentMiddleware, name)
        assert noop == ours, name
    assert type(middleware).state_schema is MemoryMiddleware.state_schema
    assert not getattr(middleware, "tools", None)  # bare+tools gives the tools
    assert middleware.wrap_model_call("request", lambda r: ("handled", r)) == ("handled", "request")
    assert middleware.before_agent({}, None) is None

    capability = ao.noop_capability()
    overridden = {n for n in vars(type(capability)) if n in capability.calls}
    expected = {
        n
        for n, v in vars(MemoryCapability).items()
        if not n.startswith("__")
        and hasattr(AbstractCapability, n)
        and (callable(v) or isinstance(v, classmethod))
    }
    assert overridden == expected and "wrap_run" in expected
    for name in expected:
        assert getattr(type(capability), name) is not getattr(AbstractCapability, name), name
    assert capability.get_toolset() is None and capability.get_instructions() is None
    assert capability.get_default_conversation_id("run") is None
    assert capability.for_agent(object()) is capability

    async def result() -> str:
        return "result"

    async def run() -> None:
        assert await capability.for_run(None) is capability
        assert await capability.wrap_run(None, handler=result) == "result"

    asyncio.run(run())
    assert capability.calls["wrap_run"] == 1


def _samples(noise: list[float]) -> dict[str, list[float]]:
    """Turns of every variant: floor own 1,000 us, ours 1,500 us over bare+tools, net 1,200 us
    over bare+hooks, history 1,300 us over bare+window; ``noise`` added to all of a round."""
    base = {
        "bare": 5_000.0,
        "bare+window": 10_000.0,
        "bare+tools": 10_500.0,
        "bare+hooks": 10_800.0,
        "floor": 11_000.0,
        "ours": 12_000.0,
        "ours-h": 11_300.0,
        "ours-cold": 13_000.0,
    }
    return {v: [t + n for n in noise] for v, t in base.items()}


def test_ratio_intervals_hold_the_ratio_and_widen_with_noise() -> None:
    """The interval beside each ratio: a point when every round says the same, around the
    ratio when rounds differ, and wider the noisier the turns of a variant are."""
    ao = _module()
    still = ao.ratio_intervals(_samples([0.0] * 20))
    assert still == {
        "ours/floor": (pytest.approx(1.5), pytest.approx(1.5)),
        "net/floor": (pytest.approx(1.2), pytest.approx(1.2)),
        "h/floor": (pytest.approx(1.3), pytest.approx(1.3)),
    }
    # a slow stretch of the machine, the same in all the variants of its rounds: still a point
    drift = ao.ratio_intervals(_samples([i * 300.0 for i in range(20)]))
    assert drift["ours/floor"] == (pytest.approx(1.5), pytest.approx(1.5))

    import random

    rng = random.Random(1)
    calm, loud = _samples([0.0] * 40), _samples([0.0] * 40)
    for samples, spread in ((calm, 50.0), (loud, 400.0)):
        for turns in samples.values():
            turns[:] = [t + rng.uniform(0, spread) for t in turns]
    narrow, wide = ao.ratio_intervals(calm), ao.ratio_intervals(loud)
    for name, (variant, base) in ao.RATIOS.items():
        median = {v: sorted(t)[20] for v, t in calm.items()}
        point = (median[variant] - median[base]) / (median["floor"] - median["bare+window"])
        assert narrow[name][0] <= point <= narrow[name][1], name
        assert wide[name][1] - wide[name][0] > narrow[name][1] - narrow[name][0], name
    assert ao.ratio_intervals(_samples([0.0])) == {}  # one round: nothing to resample


def _message(kind: bytes, *fields: bytes, tail: bytes = b"") -> bytes:
    body = b"".join(f + b"\0" for f in fields) + tail
    return kind + struct.pack("!i", len(body) + 4) + body


def test_the_wire_parser_names_every_statement_however_the_bytes_are_split() -> None:
    ao = _module()
    startup = struct.pack("!ii", 8, 80877103)  # SSLRequest
    params = b"user\0bench\0\0"
    startup += struct.pack("!ii", 8 + len(params), 196608) + params
    stream = (
        startup
        + _message(b"Q", b"BEGIN")
        + _message(b"P", b"s1", b"SELECT * FROM t WHERE c = $1", tail=b"\0\0")
        + _message(b"B", b"", b"s1", tail=b"\0\0\0\0\0\0")
        + _message(b"E", b"", tail=b"\0\0\0\0")
        + _message(b"S")
        + _message(b"B", b"", b"s1", tail=b"\0\0\0\0\0\0")  # the prepared statement, again
        + _message(b"E", b"", tail=b"\0\0\0\0")
    )
    expected = ["BEGIN", "SELECT * FROM t WHERE c = $1", "SELECT * FROM t WHERE c = $1"]
    for step in (1, 3, 7, len(stream)):
        conn = ao._Connection(socket.socket(), socket.socket())
        found: list[str] = []
        for i in range(0, len(stream), step):
            got = conn.parse(stream[i : i + step])
            assert got is not None
            found += got
        conn.client.close()
        conn.server.close()
        assert found == expected, step
        assert conn.waits == 2, step  # the simple Query and the Sync: the client waited twice


def test_the_wire_counter_counts_bursts_on_any_stream() -> None:
    ao = _module()
    server = socket.create_server(("127.0.0.1", 0))

    def answer_each_line() -> None:
        conn, _ = server.accept()
        with conn:
            pending = b""
            while chunk := conn.recv(1024):
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    conn.sendall(b"ok:" + line + b"\n")

    thread = threading.Thread(target=answer_each_line, daemon=True)
    thread.start()
    counter = ao.WireCounter("127.0.0.1", server.getsockname()[1])
    try:
        with socket.create_connection(("127.0.0.1", counter.port)) as client:
            reader = client.makefile("rb")
            for word in (b"a", b"b", b"c"):  # three request-answer pairs
                client.sendall(word + b"\n")
                assert reader.readline() == b"ok:" + word + b"\n"
            client.sendall(b"d")  # one burst in two sends, answered once
            client.sendall(b"e\n")
            assert reader.readline() == b"ok:de\n"
            reader.close()
        trips, statements, bursts = counter.counts()
        assert bursts == 4
        assert trips is None and statements is None  # not PostgreSQL's protocol
    finally:
        counter.close()
        server.close()
        thread.join(timeout=5)


def test_proxied_urls_keep_the_user_and_the_database() -> None:
    ao = _module()
    assert (
        ao.proxied("postgresql://bench:pw@db.example:5432/app?sslmode=disable", 6000)
        == "postgresql://bench:pw@127.0.0.1:6000/app?sslmode=disable"
    )
    assert ao.proxied("postgresql://db:5432/app", 6001) == "postgresql://127.0.0.1:6001/app"


def test_a_pipeline_of_reads_is_one_round_trip_on_the_wire(postgres_url: str) -> None:
    """Round trips are the Syncs and simple Queries the client sends: the PostgreSQL store's
    pipeline of two reads (one Sync) counts 1, as a single read does, whether or not the server
    answered the first statement while the client was still sending the second."""
    from memory_adapters import Memory
    from memory_adapters.steps import StoreCall

    ao = _module()
    parts = urlsplit(postgres_url)
    assert parts.hostname is not None and parts.port is not None
    counter = ao.WireCounter(parts.hostname, parts.port)
    schema = "wire_" + uuid.uuid4().hex[:10]
    memory = Memory(ao.proxied(postgres_url, counter.port), store_options={"schema": schema})
    pipeline = [
        StoreCall("head_and_tail", ("wire",), {"head": 2, "max_tokens": 1000}),
        StoreCall("list_facts", ("ns", "x")),
    ]
    try:
        for calls in (pipeline, pipeline[:1]):
            memory.store.batch(calls)  # the connection opened, the statements prepared
            counter.reset()
            memory.store.batch(calls)
            trips, statements, bursts = counter.counts()
            assert (trips, statements) == (1, len(calls)), calls
            assert bursts >= 1
    finally:
        memory.close()
        counter.close()
        import psycopg

        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


RECALL = ROOT / "benchmarks" / "recall.py"


def _quick_run(script: Path, tmp_path: Path) -> tuple[str, Any]:
    """Run ``script --quick --json <file>``; its output and the JSON it wrote."""
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(out.read_text(encoding="utf-8"))


def test_recall_quick_run_measures_quality_and_latency(tmp_path: Path) -> None:
    """``recall.py --quick``: recall@5/10/25 of every mode and of both plain baselines on the
    turns and the facts of one labelled conversation, every store ranking as the first, the
    per-kind table and the verdicts, and latency rows at 1,000 facts."""
    pytest.importorskip("onnxruntime")  # the embeddings extra (the default embedder)
    pytest.importorskip("numpy")
    stdout, result = _quick_run(RECALL, tmp_path)
    assert "verdict, turns:" in stdout and "verdict, facts:" in stdout
    env = result["environment"]
    assert env["quick"] is True and env["sizes"] == [1000] and env["embedder"]
    assert env["stores"] == ["memory", "sqlite"]
    assert len(result["conversations"]) == 1
    modes = {"keyword", "semantic", "hybrid", "plain-bm25", "plain-cosine"}
    measured = result["quality"]
    assert "memory" in measured  # sqlite too, once its store runs on the core's ranking
    for table in measured.values():
        assert set(table) == {"turns", "facts"}
        for unit in table.values():
            assert set(unit) == modes
            for r in unit.values():
                assert 0.0 <= r["5"] <= r["10"] <= r["25"] <= 1.0
    for same in result["identical"].values():
        assert same["searches"] > 0 and same["differ"] == 0
    counts = result["kind_counts"]
    assert set(counts["turns"]) == {"single-hop", "multi-hop", "temporal", "open-domain"}
    assert set(result["by_kind"]) == set(counts["turns"])
    assert [v["unit"] for v in result["verdicts"]] == ["turns", "facts"]
    rows = [r for r in result["latency"] if r["store"] == "memory"]
    assert [(r["size"], r["mode"]) for r in rows] == [
        (1000, "keyword"),
        (1000, "semantic"),
        (1000, "hybrid"),
    ]
    for r in rows:
        assert r["searches"] == r["asked"] > 0
        assert 0 < r["median_ms"] <= r["p90_ms"]
        assert r["embed_ms"] > 0 and 0.0 <= r["recall10"] <= 1.0
    for r in result["latency"]:
        assert r["store"] in ("memory", "sqlite")
        assert r["median_ms"] is not None or r["note"]


CONVERSATION_RECALL = ROOT / "benchmarks" / "conversation_recall.py"


def test_conversation_recall_quick_run_measures_quality_latency_and_turns(tmp_path: Path) -> None:
    """``conversation_recall.py --quick``: recall@5/10/25 of every mode and of the four plain
    baselines on conversations stored as messages (every index document the baselines' text
    with context, every store ranking as the first), the per-kind table and the verdict;
    latency rows per store and mode; and the turn-cost rows with the index off and on."""
    pytest.importorskip("onnxruntime")  # the embeddings extra (the default embedder)
    pytest.importorskip("numpy")
    pytest.importorskip("pydantic_ai")
    stdout, result = _quick_run(CONVERSATION_RECALL, tmp_path)
    assert "verdict: hybrid recall@5" in stdout
    env = result["environment"]
    assert env["quick"] is True and env["stores"] == ["memory", "sqlite"] and env["embedder"]
    searches = {
        "keyword",
        "semantic",
        "hybrid",
        "plain-bm25",
        "plain-cosine",
        "plain-bm25+ctx",
        "plain-cosine+ctx",
    }
    assert set(result["quality"]) == {"memory", "sqlite"}
    for table in result["quality"].values():
        assert set(table) == searches
        for r in table.values():
            assert 0.0 <= r["5"] <= r["10"] <= r["25"] <= 1.0
    for info in result["indexing"].values():
        assert info["mismatches"] == 0 and info["docs_checked"] > 0
        assert info["indexed"] == info["embedded"] == info["docs_checked"]
    for same in result["identical"].values():
        assert same["searches"] > 0 and same["differ"] == 0
    # semantic search ranks the index's documents as plain cosine does (the same texts, the
    # same embedder; vectors from other batches may differ in their last bits: near ties)
    memory = result["quality"]["memory"]
    for k in ("5", "10", "25"):
        assert abs(memory["semantic"][k] - memory["plain-cosine+ctx"][k]) <= 0.02
    assert set(result["by_kind"]) == {"single-hop", "multi-hop", "temporal", "open-domain"}
    assert "holds_modes" in result["verdict"]
    rows = result["latency"]
    assert [(r["store"], r["mode"]) for r in rows] == [
        (store, mode)
        for store in ("memory", "sqlite")
        for mode in ("keyword", "semantic", "hybrid")
    ]
    for r in rows:
        assert r["size"] == 500 and r["searches"] == r["asked"] > 0
        assert 0 < r["median_ms"] <= r["p95_ms"]
    [turn] = result["turns"]
    assert (turn["adapter"], turn["store"]) == ("pydantic-ai", "memory")
    assert len(turn["off_ms"]) == len(turn["on_ms"]) == len(turn["background_ms"]) > 0
    assert turn["indexed"] > 0 and turn["embedded"] > 0 and len(turn["submit_us"]) > 0
