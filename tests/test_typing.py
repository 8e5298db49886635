"""``memory.wrap`` keeps the types of what it wraps: a user's script is checked with
``mypy --strict``, and a mistake in using an agent's output is an error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "typing" / "user_script.py"


def mypy(path: Path, cache: Path) -> tuple[str, int]:
    """mypy --strict on ``path`` as a user's project would run it, with none of this
    project's settings."""
    out, err, status = api.run(
        [
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            str(cache),
            "--config-file",
            "",
            str(path),
        ]
    )
    return out + err, status


def test_wrap_keeps_the_agents_types(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the packages found on the path: an editable install's import hooks are invisible to mypy
    monkeypatch.setenv("MYPYPATH", f"{ROOT}{os.pathsep}{ROOT / 'plugins'}")
    good, status = mypy(SCRIPT, tmp_path / "cache")
    assert status == 0, good
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        SCRIPT.read_text(encoding="utf-8").replace(
            "print(city.name.upper())", "print(result.output.no_such_attribute)"
        ),
        encoding="utf-8",
    )
    report, status = mypy(wrong, tmp_path / "cache")
    assert status == 1
    assert '"City" has no attribute "no_such_attribute"' in report, report
