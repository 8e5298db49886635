"""What the full test suite needs from the machine, said where a new user looks: the README,
and the skip message of every test that did not run for want of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEEDS = "apt-get install postgresql pgbouncer"

PROBE = """
def test_through_pgbouncer(pgbouncer_url):
    pass
"""

UNAVAILABLE = """
from memory_adapters.testing import postgres_server


def _not_installed(self):
    raise postgres_server.PostgresUnavailable("not installed (this test pretends)")


postgres_server.TemporaryPostgres.start = _not_installed
postgres_server.TemporaryPgBouncer.start = _not_installed
"""


PLUGINS = ["-p", "no:cacheprovider", "-p", "unavailable_servers", "-p", "conftest"]
"""The servers made unavailable first, then the suite's conftest (on ``PYTHONPATH``)."""


def test_the_readme_says_what_the_full_suite_needs() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert NEEDS in readme
    assert readme.index(NEEDS) < readme.index("## ")  # by the test command, at the top


@pytest.mark.parametrize(
    ("postgres", "missing"),
    [(None, "PostgreSQL server"), ("postgresql://postgres@127.0.0.1:9/x", "PgBouncer")],
    ids=["no-postgresql", "no-pgbouncer"],
)
def test_a_skip_for_want_of_a_server_says_what_to_install(
    postgres: str | None, missing: str, tmp_path: Path
) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "unavailable_servers.py").write_text(UNAVAILABLE)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MEMORY_ADAPTERS_") and k != "PYTEST_ADDOPTS"
    }
    if postgres:
        env["MEMORY_ADAPTERS_POSTGRES_URL"] = postgres
    path = [str(tmp_path), str(ROOT / "tests"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    env["COLUMNS"] = "1000"  # the skip line whole
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_probe.py",
            "-rs",
            *PLUGINS,
            "--rootdir",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "1 skipped" in done.stdout, done.stdout + done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert f"no {missing} could be started" in line, line
    assert NEEDS in line, line
