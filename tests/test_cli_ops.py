"""The operators' commands on every store: doctor, stats, conversations, show, export and
import (between stores, twice), prune, erase; ``--json`` output, exit codes, progress bars.

The commands run through Click's ``CliRunner`` against a ``Memory`` the test opened (a
``Runtime`` with a ``memory_factory``: the in-memory and mongomock stores have no URL another
process could open); one test names the store by ``$MEMORY_ADAPTERS_URL`` instead.
"""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from stores import STORES, open_memory

from memory_adapters import Fact, InvalidInput, Memory, Message, ToolCall, ToolResult, transfer
from memory_adapters.cli import Runtime, app
from memory_adapters.messages import Entry
from memory_adapters.store import Store


class KeptOpen(Memory):
    """A ``Memory`` over the test's store that the command's ``with`` does not close."""

    def close(self, timeout: float | None = None) -> None:
        pass

    async def aclose(self, timeout: float | None = None) -> None:
        pass


def runtime(memory: Memory, console: Console | None = None) -> Runtime:
    """What the commands run against: ``memory``'s store."""
    return Runtime(memory_factory=lambda **kw: KeptOpen(store=memory.store, **kw), stderr=console)


def cli(memory: Memory, *args: str, input: str | None = None, **kw: Any) -> Result:
    return CliRunner().invoke(app, list(args), obj=runtime(memory, **kw), input=input)


def turn(i: int) -> list[Message]:
    """One turn: a question, a tool call, its result, an answer."""
    return [
        Message.user(f"question {i}"),
        Message.assistant(tool_calls=[ToolCall(f"call-{i}", "lookup", {"q": i, "w": "[b]x"})]),
        Message.tool(ToolResult(f"call-{i}", {"answer": i * 2}, name="lookup")),
        Message.assistant(f"the answer is {i * 2}"),
    ]


def seed(memory: Memory, user: str, *, conversations: int = 2, turns: int = 3) -> None:
    """Conversations with tool calls, working memory, facts with history (a put, an update,
    a forgotten fact, one with an expiry) for ``user``."""
    for c in range(conversations):
        with memory.session(user_id=user, conversation_id=f"c{c}"):
            for t in range(turns):
                memory.conversation.append(turn(t), run_id=f"run-{user}-{c}-{t}")
            memory.working.set("plan", f"step {c}")
            memory.working.fork("sub").set("draft", {"n": c})
    with memory.session(user_id=user):
        memory.facts.put("tea", "oolong", importance=0.5)
        memory.facts.put("tea", "green")
        memory.facts.put("city", "Paris", ttl=3600)
        memory.facts.put("gone", 1)
        memory.facts.forget("gone")
    with memory.session(user_id=user, agent_id="helper"):
        memory.facts.put("style", "terse")


def namespaces_of(store: Store) -> set[str]:
    names = {"default"}
    names |= {i.namespace for i in store.list_conversations("", limit=10_000)}
    return names | {n + "#working" for n in names}


def snapshot(memory: Memory) -> dict[str, Any]:
    """Everything export carries, read back: every conversation's records (seq, batch, run
    id, tokens, message) and every fact (value, version, times, history)."""
    store = memory.store
    convs = {}
    for info in store.list_conversations("", limit=10_000):
        records = store.read(info.key)
        convs[info.key] = {
            "messages": info.messages,
            "tokens": info.tokens,
            "records": [(r.seq, r.batch, r.run_id, r.tokens, r.message.to_dict()) for r in records],
        }
    facts = {}
    for ns in sorted(namespaces_of(store)):
        for scope in store.list_fact_scopes(ns, ""):
            for f in store.list_facts(ns, scope):
                history = [asdict(c) for c in store.fact_history(ns, scope, f.key)]
                facts[(ns, scope, f.key)] = (
                    f.value, f.version, f.importance, f.created_at, f.updated_at, f.expires_at,
                    history,
                )  # fmt: skip
    return {"conversations": convs, "facts": facts}


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


# -- every command on every store --------------------------------------------------------------


def test_conversations_stats_and_show(memory: Memory) -> None:
    seed(memory, "ann")
    seed(memory, "bob", conversations=1, turns=1)

    listed = cli(memory, "conversations", "--json")
    assert listed.exit_code == 0, listed.output
    page = json.loads(listed.stdout)
    assert [(c["user_id"], c["messages"]) for c in page["conversations"]] == [
        ("bob", 4), ("ann", 12), ("ann", 12),
    ]  # fmt: skip
    assert page["next_before"] is None
    first = cli(memory, "conversations", "--user", "ann", "--limit", "1", "--json")
    cursor = json.loads(first.stdout)["next_before"]
    second = cli(memory, "conversations", "--user", "ann", "--before", cursor, "--json")
    keys = [c["key"] for p in (first, second) for c in json.loads(p.stdout)["conversations"]]
    assert keys == ["default:ann:c1", "default:ann:c0"]
    table = cli(memory, "conversations", "--user", "ann")
    assert table.exit_code == 0 and "default:ann:c1" in table.stdout

    stats = cli(memory, "stats", "--json")
    assert stats.exit_code == 0, stats.output
    counts = json.loads(stats.stdout)["namespaces"]["default"]
    assert counts["conversations"] == 3 and counts["messages"] == 28
    assert counts["tokens"] == sum(c["tokens"] for c in page["conversations"])
    # ann: tea, city, style; bob: the same three; gone was forgotten
    assert counts["facts"] == 6
    assert counts["working"] == 6  # plan + a fork's draft per conversation
    assert "conversations" in cli(memory, "stats").stdout

    shown = cli(memory, "show", "default:ann:c0")
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "#1 user" in out and "question 0" in out
    assert '→ call lookup({"q": 0, "w": "[b]x"})' in out  # args verbatim, not rich markup
    assert '← result lookup {"answer": 4}' in out
    assert "run run-ann-0-2" in out and "tokens" in out

    last = cli(memory, "show", "--user", "ann", "--conversation", "c0", "--last", "2", "--json")
    assert last.exit_code == 0, last.output
    items = json.loads(last.stdout)
    assert [i["seq"] for i in items] == [11, 12]
    assert items[0]["batch"] == 9 and items[0]["run_id"] == "run-ann-0-2"
    assert items[1]["message"] == {"role": "assistant", "text": "the answer is 4"}


def test_doctor(memory: Memory) -> None:
    result = cli(memory, "doctor", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True
    names = [c["name"] for c in report["checks"]]
    assert names == [
        "store", "schema version", "keyword search", "vector search", "tokenizer", "embedder",
    ]  # fmt: skip
    text = cli(memory, "doctor").stdout
    assert len(text.splitlines()) == len(names) and "store:" in text


def test_doctor_without_a_tokenizer_still_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tiktoken encoding loads (no network, no offline extra): counts are approximate, which
    doctor says, but memory works, so the exit code stays 0."""
    from memory_adapters import tokens

    monkeypatch.setattr(tokens, "encoding", lambda model: None)
    result = cli(Memory("memory://", embed=False), "doctor", "--json")
    assert result.exit_code == 0, result.output
    [check] = [c for c in json.loads(result.stdout)["checks"] if c["name"] == "tokenizer"]
    assert check["ok"] is False and check["required"] is False
    assert "memory-adapters[offline]" in check["detail"]


def test_doctor_says_plainly_whether_the_sqlite_schema_is_ok(tmp_path: Path) -> None:
    from memory_adapters_sqlite.schema import SCHEMA_VERSION

    path = tmp_path / "m.db"
    url = f"sqlite:///{path}"
    ok = CliRunner().invoke(app, ["--url", url, "doctor"])
    assert ok.exit_code == 0, ok.output
    [line] = [line for line in ok.stdout.splitlines() if "schema version" in line]
    assert line == f"ok schema version: {SCHEMA_VERSION}, the one this version uses: OK", line
    with sqlite3.connect(path) as db:  # a database a newer memory-adapters wrote
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    newer = CliRunner().invoke(app, ["--url", url, "doctor", "--json"])
    assert newer.exit_code == 1, newer.output
    [check] = [c for c in json.loads(newer.stdout)["checks"] if c["name"] == "schema version"]
    assert check["ok"] is False
    assert check["detail"] == (
        f"{SCHEMA_VERSION + 1}, newer than the {SCHEMA_VERSION} this version uses: "
        "upgrade memory-adapters to use this database"
    )


def test_show_hides_the_adapters_bookkeeping() -> None:
    memory = Memory("memory://", embed=False)
    part = {"pydantic_ai": {"part": 0, "of": 1}}
    with memory.session(user_id="ann", conversation_id="c"):
        memory.conversation.append(
            [
                Message(role="user", text="hi", framework="pydantic-ai", meta=part),
                Message(
                    role="assistant",
                    text="hello",
                    framework="pydantic-ai",
                    meta={**part, "entry": "e-1", "parent": None, "failed": True},
                ),
                Message(role="assistant", text="mine", meta={"note": "the application's own"}),
            ]
        )
    shown = cli(memory, "show", "default:ann:c")
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "part" not in out and "pydantic_ai" not in out and "e-1" not in out, out
    assert '{"failed": true}' in out  # what the run did is not bookkeeping
    assert '{"note": "the application\'s own"}' in out
    as_json = json.loads(cli(memory, "show", "default:ann:c", "--json").stdout)
    assert as_json[1]["message"]["meta"]["pydantic_ai"] == {"part": 0, "of": 1}  # all of it


def test_a_repeated_import_says_it_skipped_everything(tmp_path: Path) -> None:
    src, dst = Memory("memory://", embed=False), Memory("memory://", embed=False)
    seed(src, "ann", conversations=1, turns=2)
    path = tmp_path / "export.jsonl"
    assert cli(src, "export", "-o", str(path)).exit_code == 0
    first = cli(dst, "import", str(path))
    assert first.exit_code == 0, first.output
    said = " ".join(first.stderr.split())
    assert "imported: 1 conversations, 2 batches, 8 messages, 5 facts" in said, said
    assert "already" not in said
    again = cli(dst, "import", str(path))
    assert again.exit_code == 0, again.output
    said = " ".join(again.stderr.split())
    assert "imported: 1" not in said, said
    assert said.endswith(
        "nothing imported: the store held all of it already (1 conversations: 2 batches, 5 facts)"
    ), said


def test_doctor_fails_on_a_store_it_cannot_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'no-such-dir' / 'm.db'}"
    result = CliRunner().invoke(app, ["--url", url, "doctor", "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    [check] = report["checks"]
    assert check["name"] == "store" and "StoreUnavailable" in check["detail"]
    text = CliRunner().invoke(app, ["--url", url, "doctor"])
    assert text.exit_code == 1 and text.stdout.startswith("FAIL store: cannot open the store")


def test_prune_and_retention(memory: Memory) -> None:
    seed(memory, "ann", conversations=1, turns=1)
    past = time.time() - 60
    expired = Fact("old", "news", 1, created_at=past - 60, updated_at=past, expires_at=past)
    assert memory.store.restore_fact("default", "user:ann", expired)
    result = cli(memory, "prune", "--json")
    assert result.exit_code == 0, result.output
    # MongoDB's TTL index (emulated by mongomock) may have removed it before prune did
    pruned = 0 if memory.store.scheme == "mongodb" else 1
    assert json.loads(result.stdout) in ({"conversations": 0, "facts": pruned},
                                         {"conversations": 0, "facts": 1})  # fmt: skip
    assert cli(memory, "prune").stdout == "pruned: 0 conversations, 0 facts\n"

    idle = cli(memory, "prune", "--idle-days", "1", "--json")
    assert idle.exit_code == 0, idle.output
    assert json.loads(idle.stdout)["conversations"] == 0  # active a moment ago
    assert memory.store.last_seq("default:ann:c0") == 4
    # a millionth of a day (86 ms) ago is before the last append, at the next command
    time.sleep(0.1)
    gone = cli(memory, "prune", "--idle-days", "0.000001", "--json")
    assert json.loads(gone.stdout)["conversations"] == 1
    assert memory.store.last_seq("default:ann:c0") == 0
    assert cli(memory, "prune", "--idle-days", "0").exit_code == 2  # must be > 0


def test_erase_asks_first(memory: Memory) -> None:
    seed(memory, "ann", conversations=1, turns=1)
    seed(memory, "anna", conversations=1, turns=1)
    before = snapshot(memory)

    declined = cli(memory, "erase", "--user", "ann", input="n\n")
    assert declined.exit_code == 1
    assert "Erase everything of user 'ann'" in declined.stderr
    assert "nothing erased" in declined.stderr
    assert snapshot(memory) == before

    confirmed = cli(memory, "erase", "--user", "ann", "--json", input="y\n")
    assert confirmed.exit_code == 0, confirmed.output
    report = json.loads(confirmed.stdout)
    assert report["conversations"] == 1 and report["messages"] == 4
    assert report["facts"] == 3 and report["working"] == 2
    after = snapshot(memory)
    assert list(after["conversations"]) == ["default:anna:c0"]
    assert all("ann:" not in scope and scope != "user:ann" for _, scope, _ in after["facts"])
    anna = {k: v for k, v in before["facts"].items() if "anna" in k[1]}
    assert anna and {k: after["facts"][k] for k in anna} == anna

    silent = cli(memory, "erase", "--user", "anna", "--yes")
    assert silent.exit_code == 0 and silent.stdout.startswith("erased: 1 conversations")
    assert snapshot(memory) == {"conversations": {}, "facts": {}}


# -- export and import -----------------------------------------------------------------------

PAIRS = [("sqlite", "postgres"), ("memory", "sqlite"), ("postgres", "mongo"), ("mongo", "memory")]


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{a}-to-{b}" for a, b in PAIRS])
def test_export_then_import_into_another_store(
    source: str, target: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    src_gen = open_memory(source, request, tmp_path / "a")
    dst_gen = open_memory(target, request, tmp_path / "b")
    src, dst = next(src_gen), next(dst_gen)
    try:
        seed(src, "ann")
        seed(src, "bob", conversations=1, turns=2)
        with src.session(namespace="other", user_id="cy", conversation_id="x"):
            src.conversation.append(turn(7), run_id="r-other")
            src.facts.put("k", [1, 2])
        path = tmp_path / "export.jsonl"
        exported = cli(src, "export", "--namespace", "default", "--namespace", "other",
                       "-o", str(path), "--json")  # fmt: skip
        assert exported.exit_code == 0, exported.output
        counts = json.loads(exported.stderr.strip().splitlines()[-1])
        assert counts["conversations"] == 4 and counts["messages"] == 36
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert lines[0]["format"] == "memory-adapters-export" and lines[0]["version"] == 1
        assert {line["type"] for line in lines[1:]} == {"conversation", "batch", "fact"}

        imported = cli(dst, "import", str(path), "--json")
        assert imported.exit_code == 0, imported.output
        first = json.loads(imported.stderr.strip().splitlines()[-1])
        assert first["batches"] == counts["batches"] and first["messages"] == 36
        assert first["facts"] == counts["facts"] and first["skipped_batches"] == 0
        assert snapshot(dst) == snapshot(src)

        again = cli(dst, "import", str(path), "--json")
        assert again.exit_code == 0, again.output
        second = json.loads(again.stderr.strip().splitlines()[-1])
        assert second["batches"] == second["facts"] == second["messages"] == 0
        assert second["skipped_batches"] == counts["batches"]
        assert second["skipped_facts"] == counts["facts"]
        assert snapshot(dst) == snapshot(src)
    finally:
        for gen in (src_gen, dst_gen):
            for _ in gen:
                pass


def test_export_of_one_user_through_stdout(tmp_path: Path) -> None:
    src, dst = Memory("memory://", embed=False), Memory("memory://", embed=False)
    seed(src, "ann", conversations=1, turns=1)
    seed(src, "anna", conversations=1, turns=1)
    out = cli(src, "export", "--user", "ann", "-o", "-")
    assert out.exit_code == 0, out.output
    assert cli(dst, "import", "-", input=out.stdout).exit_code == 0
    assert [i.user_id for i in dst.store.list_conversations("")] == ["ann"]
    assert all("anna" not in scope for _, scope, _ in snapshot(dst)["facts"])
    ann = {k: v for k, v in snapshot(src)["facts"].items() if "anna" not in k[1]}
    assert snapshot(dst)["facts"] == ann


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=12),
    page=st.integers(min_value=1, max_value=10),
)
def test_batches_survive_any_paging(
    batches: list[int], page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the page size of the reads, a batch that spans pages comes out whole, at its
    seqs, with its run id and token counts."""
    monkeypatch.setattr(transfer, "PAGE", page)
    src, dst = Memory("memory://", embed=False), Memory("memory://", embed=False)
    for i, size in enumerate(batches):
        entries = [Entry("user", json.dumps({"role": "user", "text": f"{i}.{j}"}), 3 + j)
                   for j in range(size)]  # fmt: skip
        src.store.append("default:u:c", entries, run_id=f"r{i}")
    out = io.StringIO()
    counts = transfer.export_jsonl(src, out)
    assert counts.batches == len(batches) and counts.messages == sum(batches)
    transfer.import_jsonl(dst, io.StringIO(out.getvalue()))
    assert snapshot(dst) == snapshot(src)


def test_progress_bar_of_a_100k_message_export(tmp_path: Path) -> None:
    memory = Memory("memory://", embed=False)
    entries = [Entry("user", '{"role":"user","text":"hello there"}', 7)] * 10
    for c in range(10):
        for _ in range(1000):
            memory.store.append(f"default:u:c{c}", entries)
    console = Console(record=True, file=io.StringIO(), width=120, force_terminal=False)
    result = cli(memory, "export", "-o", str(tmp_path / "big.jsonl"), console=console)
    assert result.exit_code == 0, result.output
    recorded = console.export_text()
    assert "messages" in recorded and "100000/100000" in recorded and "100%" in recorded
    assert "exported: 10 conversations, 10,000 batches, 100,000 messages" in recorded


# -- errors and exit codes ---------------------------------------------------------------------


def test_exit_codes(tmp_path: Path) -> None:
    memory = Memory("memory://", embed=False)
    seed(memory, "ann", conversations=1, turns=1)
    runner = CliRunner()
    no_url = runner.invoke(app, ["stats"], env={"MEMORY_ADAPTERS_URL": None})
    assert no_url.exit_code == 2 and "no store URL" in no_url.stderr
    assert cli(memory, "conversations", "--before", "yesterday").exit_code == 2
    assert cli(memory, "show").exit_code == 2
    assert cli(memory, "erase").exit_code == 2  # --user is required

    missing = cli(memory, "show", "default:ann:nope")
    assert missing.exit_code == 1 and missing.stderr.startswith("error: ")

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "something-else"}\n')
    result = cli(memory, "import", str(bad))
    assert result.exit_code == 1
    assert result.stderr.startswith("error: InvalidInput: line 1 of the export: not a ")
    assert "Traceback" not in result.output

    export = io.StringIO()
    transfer.export_jsonl(memory, export)
    other = Memory("memory://", embed=False)
    with other.session(user_id="ann", conversation_id="c0"):
        other.conversation.append(turn(99))
    clash = cli(other, "import", "-", input=export.getvalue())
    assert clash.exit_code == 1
    *bars, error = clash.stderr.splitlines()
    assert error.startswith("error: ConflictError: line 3 of the export: conversation")
    assert all("error" not in line for line in bars)  # progress bars, then one line


HEADER = '{"format": "memory-adapters-export", "version": 1, "type": "header"}'
BATCH = {"type": "batch", "conversation": "default:u:c", "first_seq": 1, "run_id": "r",
         "messages": [{"message": {"role": "user", "text": "hi"}, "tokens": 3}]}  # fmt: skip
CHANGE: dict[str, Any] = {"key": "k", "version": 2, "value": 1, "op": "put", "at": 2.0,
                          "writer": {"kind": "model", "run_id": "r", "model": "m"}}  # fmt: skip
FACT = {"type": "fact", "namespace": "default", "scope": "user:u", "key": "k", "value": 1,
        "version": 2, "importance": 0, "created_at": 1.0, "updated_at": 2.0, "expires_at": None,
        "history": [CHANGE]}  # fmt: skip
BAD_LINES = {
    "not an object": "[1, 2]",
    "unknown type": '{"type": "summary"}',
    "tokens not an int": {**BATCH, "messages": [{"message": {"role": "user"}, "tokens": "3"}]},
    "a role no store keeps": {**BATCH, "messages": [{"message": {"role": "robot"}, "tokens": 3}]},
    "seq 0": {**BATCH, "first_seq": 0},
    "no messages": {**BATCH, "messages": []},
    "a run id with a newline": {**BATCH, "run_id": "a\nb"},
    "version 0": {**FACT, "version": 0},
    "a key with a newline": {**FACT, "key": "a\nb"},
    "infinite importance": {**FACT, "importance": 1e999},
    "no updated_at": {k: v for k, v in FACT.items() if k != "updated_at"},
    "a forged writer kind": {**FACT, "history": [{**CHANGE, "writer": {"kind": "root"}}]},
    "history of another key": {**FACT, "history": [{**CHANGE, "key": "other"}]},
}


@pytest.mark.parametrize("why", list(BAD_LINES))
def test_a_malformed_line_is_refused_with_its_number(why: str) -> None:
    """Each line is validated as the core validates an application's writes, before the store
    sees it: the error names the line, and the lines before it stand."""
    line = BAD_LINES[why]
    text = line if isinstance(line, str) else json.dumps(line)
    memory = Memory("memory://", embed=False)
    good = json.dumps({**BATCH, "conversation": "default:u:ok"})
    with pytest.raises(InvalidInput, match=r"^line 3 of the export: "):
        transfer.import_jsonl(memory, [HEADER + "\n", good + "\n", text + "\n"])
    assert [i.key for i in memory.store.list_conversations("")] == ["default:u:ok"]
    assert memory.store.list_fact_scopes("default", "") == []


def test_a_well_formed_fact_line_is_restored_as_written() -> None:
    memory = Memory("memory://", embed=False)
    counts = transfer.import_jsonl(memory, [HEADER, json.dumps(FACT)])
    assert (counts.facts, counts.history) == (1, 1)
    fact = memory.store.get_fact("default", "user:u", "k")
    assert fact is not None and (fact.version, fact.created_at, fact.updated_at) == (2, 1.0, 2.0)
    [change] = memory.store.fact_history("default", "user:u", "k")
    assert change.writer.kind == "model" and change.writer.model == "m"


def test_the_url_comes_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    with Memory(url, embed=False) as memory:
        seed(memory, "ann", conversations=1, turns=1)
    result = CliRunner().invoke(app, ["conversations", "--json"], env={"MEMORY_ADAPTERS_URL": url})
    assert result.exit_code == 0, result.output
    assert [c["key"] for c in json.loads(result.stdout)["conversations"]] == ["default:ann:c0"]
    flag = CliRunner().invoke(app, ["--url", url, "-o", "timeout=5", "stats", "--json"])
    assert json.loads(flag.stdout)["namespaces"]["default"]["messages"] == 4


def test_a_pipe_from_one_store_to_another(tmp_path: Path) -> None:
    """``memory-adapters --url A export -o - | memory-adapters --url B import -``, as commands:
    the export's stdout is only the data (progress bars and the report go to stderr)."""
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    with Memory(a, embed=False) as source:
        seed(source, "ann", conversations=1, turns=2)
        expected = snapshot(source)
    command = [sys.executable, "-m", "memory_adapters"]
    exporter = subprocess.Popen(
        [*command, "--url", a, "export", "-o", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    importer = subprocess.run(
        [*command, "--url", b, "import", "-"],
        stdin=exporter.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exporter.stdout is not None
    exporter.stdout.close()
    assert exporter.wait(timeout=120) == 0
    assert importer.returncode == 0, importer.stderr
    assert "imported: 1 conversations, 2 batches, 8 messages" in importer.stderr
    with Memory(b, embed=False) as target:
        assert snapshot(target) == expected


def test_reindex_makes_stored_messages_searchable_once_and_stats_counts_them() -> None:
    """Messages stored without the worker indexing them (an upgrade, an import, or
    ``index_conversations=False``) become searchable by ``reindex``, which is resumable: a
    second run indexes nothing; ``stats`` counts the index, and erase empties it."""
    memory = Memory("memory://", embed=False, index_conversations=False)
    for user in ("alice", "bob"):
        with memory.session(user_id=user, conversation_id="c"):
            for i in range(5):
                memory.conversation.append(turn(i))
    first = cli(memory, "reindex", "--json", "--no-embed")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout) == {"conversations": 2, "indexed": 20, "embedder": None}
    again = cli(memory, "reindex", "--json", "--no-embed", "--user", "alice")
    assert json.loads(again.stdout)["indexed"] == 0
    stats = json.loads(cli(memory, "stats", "--json").stdout)["namespaces"]["default"]
    assert stats["indexed"] == 20  # user and assistant text: 2 of each turn's 4 messages
    memory.erase(user_id="alice")
    stats = json.loads(cli(memory, "stats", "--json").stdout)["namespaces"]["default"]
    assert stats["indexed"] == 10
    with memory.session(user_id="bob", conversation_id="c"):
        assert memory.conversation.search("answer 8", mode="keyword")
