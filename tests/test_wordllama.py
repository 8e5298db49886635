"""The ``embeddings`` extra (WordLlama) leaves the application's logging as it set it.

WordLlama's ``__init__`` calls ``logging.basicConfig(level=INFO)``; imported as it is, the first
embedding gave the root logger a stderr handler at INFO, and every library's INFO lines were
printed from then on. Each case runs in a fresh process: WordLlama is imported once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json, logging, sys
root = logging.getLogger()
{setup}
def state():
    return {{"level": root.level, "handlers": [repr(h) for h in root.handlers]}}
before = state()
from memory_adapters import Memory
memory = Memory("memory://", embed="wordllama")
assert memory.embedder is not None and memory.embedder.name.startswith("wordllama:")
with memory.session(user_id="u"):
    memory.facts.put("favourite_tea", "oolong")  # the first embedding: WordLlama is imported
    found = memory.facts.search("Which drink do I prefer?", limit=1)
assert [f.key for f in found] == ["favourite_tea"], found
logging.getLogger("memory_adapters.tokens").info("an INFO line nobody asked for")
print(json.dumps({{"before": before, "after": state(), "wordllama": "wordllama" in sys.modules}}))
"""


@pytest.mark.parametrize(
    "setup",
    [
        "",  # an application that configured nothing: no handler, WARNING
        "logging.basicConfig(level=logging.ERROR, format='app: %(message)s')",
        "root.setLevel(logging.DEBUG); root.addHandler(logging.NullHandler())",
    ],
    ids=["unconfigured", "basicConfig-error", "debug-null-handler"],
)
def test_the_first_embedding_leaves_the_root_logger_as_it_was(setup: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(setup=setup)],
        capture_output=True,
        text=True,
        env={**os.environ, "MEMORY_ADAPTERS_CACHE": str(tmp_path / "cache")},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["wordllama"], "the test did not import WordLlama"
    assert result["after"] == result["before"]
    assert "INFO" not in done.stderr and "nobody asked for" not in done.stderr, done.stderr
