"""A LangChain agent with memory, killed mid-run and resumed from a PostgreSQL checkpointer
(``langgraph-checkpoint-postgres``, on the tests' own server) in a new process.

Each thread holds an earlier turn. The model saves a fact (``save_memory``), calls a tool, then
answers. A process runs the turn and dies (``os._exit``): inside the second tool, while
another writer then appends to the conversation before the resume; or once memory has stored
the turn. One more process resumes every thread (``tests/durable_langgraph_child.py``).
Under durability ``"sync"`` and ``"async"`` the graph resumes from its last checkpoint: the
turn is stored once, the fact has one version, and the model is shown exactly the history it
was first shown, continued, never the other writer's messages (under ``"async"`` a step whose
checkpoint the crash lost runs again: its model call is made again, its ``save_memory`` call
finds its write and does not write again). Under ``"exit"`` nothing is
checkpointed before the run ends: the crash loses the run, which stored nothing, and running
the turn again stores it once.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from memory_adapters import Memory, Message

CHILD = Path(__file__).with_name("durable_langgraph_child.py")
PROMPT = "My favourite tea is oolong"
EARLIER = [Message.user("I live in Lisbon"), Message.assistant("Noted: Lisbon.")]
ELSEWHERE = [Message.user("(from another device) I moved to Porto"), Message.assistant("Porto!")]
TURN = 6  # the prompt, save_memory's call and result, checkpoint's call and result, the answer
CASES = [("sync", "tool"), ("sync", "saved"), ("async", "tool"), ("async", "saved")]


def child(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def checkpoints(postgres_url: str) -> Iterator[str]:
    """A database of its own for the checkpointer, on the tests' PostgreSQL server."""
    import psycopg

    name = "lg_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(postgres_url)
    try:
        yield urlunsplit(parts._replace(path="/" + name))
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def resumed(
    checkpoints: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Memory, Path]]:
    """Every case's turn started and killed, then all resumed together (per durability)."""
    root = tmp_path_factory.mktemp("langgraph")
    url = f"sqlite:///{root / 'memory.db'}"
    log = root / "model.jsonl"
    env = {**os.environ, "PG": checkpoints, "URL": url, "LOG": str(log)}
    memory = Memory(url)
    threads = {case: "-".join(case) for case in [*CASES, ("exit", "tool")]}
    for thread in threads.values():
        with memory.session(conversation_id=thread, user_id=f"user-{thread}"):
            memory.conversation.append(EARLIER)
    for (durability, crash), thread in threads.items():
        done = child({**env, "CRASH": crash}, "start", durability, thread)
        assert done.returncode == 3, done.stderr[-3000:]
        if crash == "tool":  # another writer, while the run is down
            with memory.session(conversation_id=thread, user_id=f"user-{thread}"):
                memory.conversation.append(ELSEWHERE, run_id="elsewhere")
    for durability in ("sync", "async", "exit"):
        mine = [t for (d, _), t in threads.items() if d == durability]
        done = child(env, "resume", durability, *mine)
        assert done.returncode == 0, done.stderr[-3000:]
    try:
        yield memory, log
    finally:
        memory.close()


def stored(memory: Memory, thread: str) -> tuple[list[Message], Any, int]:
    with memory.session(conversation_id=thread, user_id=f"user-{thread}"):
        fact = memory.facts.get("tea")
        return memory.conversation.messages(), fact, len(memory.facts.history("tea"))


def calls(log: Path, thread: str) -> list[list[Any]]:
    return [
        e["messages"]
        for e in map(json.loads, log.read_text().splitlines())
        if e["thread"] == thread
    ]


@pytest.mark.processes
@pytest.mark.parametrize(("durability", "crash"), CASES)
def test_a_resumed_graph_stores_its_turn_once_and_shows_the_same_window(
    resumed: tuple[Memory, Path], durability: str, crash: str
) -> None:
    memory, log = resumed
    thread = f"{durability}-{crash}"
    messages, fact, versions = stored(memory, thread)
    before = [*EARLIER, *(ELSEWHERE if crash == "tool" else [])]
    assert [m.text for m in messages[: len(before)]] == [m.text for m in before]
    assert len(messages) == len(before) + TURN
    assert [m.text for m in messages].count(PROMPT) == 1
    assert messages[-1].text == "Noted: oolong."
    assert fact is not None and fact.version == 1 and versions == 1
    shown = calls(log, thread)
    if durability == "sync":  # each model call made once: the resume made only the last
        assert len(shown) == 3
    else:  # "async" may lose the checkpoints written while the process died: their model
        # calls are made again, shown the same history
        assert len(shown) >= 3
    for earlier, later in itertools.pairwise(shown):
        assert later[: len(earlier)] == earlier
    assert [m[1] for m in shown[0]] == [EARLIER[0].text, EARLIER[1].text, PROMPT]
    assert "Porto" not in json.dumps(shown)


@pytest.mark.processes
def test_under_durability_exit_a_crash_loses_the_run_and_its_rerun_is_stored_once(
    resumed: tuple[Memory, Path],
) -> None:
    memory, log = resumed
    messages, fact, versions = stored(memory, "exit-tool")
    before = [*EARLIER, *ELSEWHERE]
    assert [m.text for m in messages[: len(before)]] == [m.text for m in before]
    assert len(messages) == len(before) + TURN
    assert [m.text for m in messages].count(PROMPT) == 1
    # nothing recorded the crashed run's tool calls: the rerun saved the fact again, and was
    # shown the conversation as it is now (a new run, whose model calls are all new)
    assert fact is not None and versions == 2
    shown = calls(log, "exit-tool")
    assert len(shown) == 2 + 3
    assert "Porto" in json.dumps(shown[2])
