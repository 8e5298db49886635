"""The ``memory-adapters`` command: ``--version``, output into a closed pipe, ``migrate``."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from memory_adapters import cli

COMMAND = [sys.executable, "-m", "memory_adapters"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"memory-adapters {metadata.version('memory-adapters')}\n"


def test_version_as_a_command() -> None:
    out = subprocess.run(
        [*COMMAND, "--version"], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.startswith("memory-adapters ") and out.stdout.split()[1][0].isdigit()


@pytest.mark.parametrize("args", [["plugins"], ["plugins", "--stores"]])
def test_a_reader_that_went_away_is_no_traceback(args: list[str]) -> None:
    """``memory-adapters plugins | head``: the pipe's reader closes it before the command
    writes (here: before it even starts), and the command stops quietly."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run(
            [*COMMAND, *args], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write)
    assert result.stderr == ""
    assert result.returncode == 128 + signal.SIGPIPE


def test_migrate_creates_the_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.db"
    assert cli.main(["migrate", f"sqlite:///{path}", "-o", "timeout=5"]) == 0
    assert capsys.readouterr().out == "SQLiteStore: the tables are ready\n"
    with sqlite3.connect(path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"ma_messages", "ma_facts", "ma_conversations"} <= tables


def test_migrate_reports_errors_without_a_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [*COMMAND, "migrate", "sqlite://m.db"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: InvalidURL: sqlite://m.db has two slashes")
    assert result.stderr.count("\n") == 1  # one line
    assert "Traceback" not in result.stderr


def test_options_must_be_key_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["migrate", "memory://", "-o", "novalue"])
    assert done.value.code == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
