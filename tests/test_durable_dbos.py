"""Memory inside DBOS workflows, killed mid-run and recovered by DBOS in a new process.

Each workflow runs one turn of a pydantic-ai agent with memory (through ``DBOSDurability`` in
a ``@DBOS.workflow``, and through the deprecated ``DBOSAgent``) over a conversation that holds
an earlier turn. The model saves a fact (``save_memory``), calls a tool, then answers. A
process starts each workflow and dies (``os._exit``): after a tool step (inside the second
tool), after memory saved the turn (in ``run_finished``), or after a tool step while another
writer appends to the conversation before the recovery. One more process recovers them all
(``tests/durable_dbos_child.py``). What users rely on: the turn is stored once, the fact saved
before the crash has one version, and the model, called again after the recovery, is shown
exactly the history it was first shown, continued: never the other writer's messages.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_adapters import Memory, Message

CHILD = Path(__file__).with_name("durable_dbos_child.py")
SURFACES = ("durability", "dbos_agent")
CRASHES = ("tool", "saved", "writer")
PROMPT = "My favourite tea is oolong"
EARLIER = [Message.user("I live in Lisbon"), Message.assistant("Noted: Lisbon.")]
ELSEWHERE = [Message.user("(from another device) I moved to Porto"), Message.assistant("Porto!")]
TURN = 6  # the prompt, save_memory's call and return, checkpoint's call and return, the answer


def child(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def recovered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Memory, Path]]:
    """Every scenario's workflow started and killed, then all recovered together."""
    root = tmp_path_factory.mktemp("dbos")
    url = f"sqlite:///{root / 'memory.db'}"
    env = {**os.environ, "DIR": str(root), "URL": url, "PYTHONWARNINGS": "ignore"}
    memory = Memory(url)
    ids = [f"{surface}-{crash}" for surface in SURFACES for crash in CRASHES]
    for wid in ids:
        with memory.session(conversation_id=wid, user_id=f"user-{wid}"):
            memory.conversation.append(EARLIER)
    for wid in ids:
        surface, crash = wid.split("-")
        dies = "saved" if crash == "saved" else "tool"
        done = child({**env, "CRASH": dies}, "start", surface, wid)
        assert done.returncode == 3, done.stderr[-3000:]
        if crash == "writer":  # while the workflow is down
            with memory.session(conversation_id=wid, user_id=f"user-{wid}"):
                memory.conversation.append(ELSEWHERE, run_id="elsewhere")
    done = child(env, "recover", *ids)
    assert done.returncode == 0, done.stderr[-3000:]
    try:
        yield memory, root
    finally:
        memory.close()


def calls(root: Path, wid: str) -> list[list[Any]]:
    """What the model was shown at each of its calls in the workflow ``wid``, in order."""
    lines = (root / "model.jsonl").read_text().splitlines()
    return [e["messages"] for e in map(json.loads, lines) if e["wf"] == wid]


@pytest.mark.processes
@pytest.mark.parametrize("crash", CRASHES)
@pytest.mark.parametrize("surface", SURFACES)
def test_a_recovered_workflow_stores_its_turn_once_and_shows_the_same_history(
    recovered: tuple[Memory, Path], surface: str, crash: str
) -> None:
    memory, root = recovered
    wid = f"{surface}-{crash}"
    with memory.session(conversation_id=wid, user_id=f"user-{wid}"):
        stored = memory.conversation.messages()
        fact = memory.facts.get("tea")
        history = memory.facts.history("tea")
    # the turn is stored exactly once, after what the conversation held before it
    before = [*EARLIER, *(ELSEWHERE if crash == "writer" else [])]
    assert [m.text for m in stored[: len(before)]] == [m.text for m in before]
    assert len(stored) == len(before) + TURN
    assert [m.text for m in stored].count(PROMPT) == 1
    assert stored[-1].text == "Noted: oolong."
    # the fact saved before the crash has one version
    assert fact is not None and fact.value == "oolong" and fact.version == 1
    assert len(history) == 1
    # the model was called once per step, each call continuing exactly what the previous one
    # was shown (the recorded calls are replayed, not made again), and never shown the other
    # writer's messages
    shown = calls(root, wid)
    assert len(shown) == 3
    for earlier, later in itertools.pairwise(shown):
        assert later[: len(earlier)] == earlier
    first = shown[0]
    assert [[p[1] for p in m[1]] for m in first] == [
        [EARLIER[0].text],
        [EARLIER[1].text],
        [PROMPT],
    ]
    assert "Porto" not in json.dumps(shown)
