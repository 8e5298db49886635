"""docs/troubleshooting.md stays true: every message on it is the one the mistake really gives.

The page is a list of entries, one per ``## `` section. Each entry holds one or more cases: a
```` ```python ```` block that makes the mistake, followed by a ```` ```text ```` block quoting
the last line of the traceback it gives (``module.Class: message``). Each case runs here and
must raise exactly that, spaces and line breaks aside (so long messages may be wrapped).
Adding an entry is adding a section of that shape; an entry without a case fails.

* ``<!-- troubleshooting: without PKG ... -->`` right before a python block runs it in a fresh
  interpreter in which those packages cannot be imported (as if not installed): the cases of a
  missing extra. Other cases run in this process, in an empty working directory, with no
  ``MEMORY_ADAPTERS_URL``, ``PGPASSWORD`` or ``~/.pgpass``.
* The PostgreSQL cases name three addresses, which the test points at servers of its own
  before running a case, and turns back in the message: ``localhost:5432`` is a server that
  trusts local connections (as a fresh Homebrew or Docker one does; the session's server,
  superuser ``postgres``); ``db.internal:5432`` a server that asks for passwords
  (``postgres_password_server``), holding the database ``app``, the role ``app`` (password
  ``secret``, no privileges) and the schema ``shared``, migrated by its owner, which ``app``
  may not use; ``localhost:5433`` has no server.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memory_adapters.testing.postgres_server import TemporaryPostgres

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "troubleshooting.md"

WITHOUT = re.compile(r"<!--\s*troubleshooting:\s*without\s+(?P<packages>[^>]*?)\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```\s*$", re.S | re.M)


@dataclass
class Case:
    """One mistake: the code that makes it and the message it must give."""

    entry: str
    line: int
    code: str
    expected: str
    without: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"troubleshooting.md:{self.line}"


@dataclass
class Entry:
    """One ``## `` section of the page."""

    title: str
    line: int
    cases: list[Case] = field(default_factory=list)


def parse(text: str) -> list[Entry]:
    """The page's entries and their cases; a python block not followed by a text block (or
    a text block with no python block before it) is an error in the page."""
    entries: list[Entry] = []
    starts = [m for m in re.finditer(r"^## (.+)$", text, re.M)]
    for i, heading in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        section = text[heading.end() : end]
        offset = heading.end()
        entry = Entry(heading.group(1).strip(), text[: heading.start()].count("\n") + 1)
        pending: tuple[str, int, list[str]] | None = None
        for block in FENCE.finditer(section):
            line = text[: offset + block.start()].count("\n") + 1
            lang, body = block.group("lang"), block.group("body")
            if lang == "python":
                if pending is not None:
                    raise AssertionError(f"line {pending[1]}: a python block with no text block")
                before = section[: block.start()].rstrip("\n").rsplit("\n", 1)[-1]
                directive = WITHOUT.search(before)
                without = directive.group("packages").split() if directive else []
                pending = (body, line + 1, without)
            elif lang == "text":
                if pending is None:
                    raise AssertionError(f"line {line}: a text block with no python block before")
                code, at, without = pending
                entry.cases.append(Case(entry.title, at, code, body.strip(), without))
                pending = None
        if pending is not None:
            raise AssertionError(f"line {pending[1]}: a python block with no text block")
        entries.append(entry)
    return entries


ENTRIES = parse(PAGE.read_text(encoding="utf-8"))
CASES = [case for entry in ENTRIES for case in entry.cases]


def normal(text: str) -> str:
    """``text`` with every run of spaces and line breaks made one space."""
    return " ".join(text.split())


def last_line(exc: BaseException) -> str:
    """What the last line of a traceback says of ``exc``."""
    cls = type(exc)
    name = (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
    return f"{name}: {exc}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _host_port(url: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(url)
    return f"{info['host']}:{info['port']}"


@pytest.fixture(scope="module")
def addresses(
    postgres_url: str, postgres_password_server: TemporaryPostgres
) -> Iterator[list[tuple[str, str]]]:
    """The page's addresses and the test's servers at them; the password server set up as
    the module docstring says."""
    import psycopg
    from memory_adapters_postgres import PostgresStore

    owner = postgres_password_server.url
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS memory_adapters CASCADE")
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'app'").fetchone():
            conn.execute("CREATE ROLE app LOGIN PASSWORD 'secret'")
    PostgresStore(owner, schema="shared").close()
    try:
        yield [
            ("localhost:5432", _host_port(postgres_url)),
            ("db.internal:5432", f"127.0.0.1:{postgres_password_server.port}"),
            ("localhost:5433", f"127.0.0.1:{_free_port()}"),
        ]
    finally:
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS shared CASCADE")
            conn.execute("DROP SCHEMA IF EXISTS memory_adapters CASCADE")
            conn.execute("DROP OWNED BY app")
            conn.execute("DROP ROLE app")


def _run_without(code: str, packages: list[str], cwd: Path) -> str:
    runner = textwrap.dedent(
        """
        import sys
        for name in sys.argv[1:]:
            sys.modules[name] = None  # as if not installed
        code = sys.stdin.read()
        try:
            exec(compile(code, "<troubleshooting>", "exec"), {"__name__": "__main__"})
        except BaseException as exc:
            cls = type(exc)
            name = cls.__qualname__ if cls.__module__ == "builtins" else (
                f"{cls.__module__}.{cls.__qualname__}"
            )
            print(f"{name}: {exc}")
        else:
            print("(nothing raised)")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_ADAPTERS_URL"}
    result = subprocess.run(
        [sys.executable, "-c", runner, *packages],
        input=code,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_every_entry_is_checked() -> None:
    assert len(ENTRIES) >= 15
    for entry in ENTRIES:
        assert entry.cases, f"troubleshooting.md:{entry.line} ({entry.title}) has no case"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_page_quotes_the_real_message(
    case: Case, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = case.code
    pairs: list[tuple[str, str]] = []
    if any(page in code for page in ("localhost:5432", "db.internal:5432", "localhost:5433")):
        pairs = request.getfixturevalue("addresses")
        for page, real in pairs:
            code = code.replace(page, real)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMORY_ADAPTERS_URL", raising=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    if case.without:
        said = _run_without(code, case.without, tmp_path)
    else:
        namespace: dict[str, Any] = {"__name__": "__troubleshooting__"}
        try:
            exec(compile(code, case.id, "exec"), namespace)
        except BaseException as exc:
            said = last_line(exc)
        else:
            said = "(nothing raised)"
    for page, real in pairs:
        said = said.replace(real, page)
    assert normal(said) == normal(case.expected), f"{case.id} ({case.entry}) says:\n{said}"
