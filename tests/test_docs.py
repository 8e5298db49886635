"""The docs and examples stay true: the hook reference matches the spec, examples run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memory_adapters import docgen, hookspecs

ROOT = Path(__file__).resolve().parent.parent


def test_hook_reference_is_generated_from_the_spec() -> None:
    assert (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8") == docgen.render(), (
        "docs/hooks.md is stale: run python -m memory_adapters.docgen"
    )


def test_every_hook_has_a_contract() -> None:
    names = docgen.hook_names()
    assert len(names) >= 20
    for name in names:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert len(doc.strip()) > 40, f"hook {name} needs a docstring that states its contract"


def test_readme_starts_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    head = readme[:1500]
    commands = re.search(r"```bash\n(.*?)```", head, re.S)
    assert commands is not None, "the README must start with its commands"
    demo, tests = commands.group(1).splitlines()[:2]
    assert demo.startswith(
        'pip install ".[pydantic-ai,offline]" && python examples/pydantic_ai_demo.py'
    )
    assert "pytest" in tests
    assert "python examples/quickstart.py" in head  # the framework-free tour, still there


EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs(example: str, tmp_path: Path) -> None:
    env = {**os.environ, "MEMORY_ADAPTERS_URL": f"sqlite:///{tmp_path / 'example.db'}"}
    for _ in range(2):  # twice: the second run must see the first one's memory
        result = subprocess.run(
            [sys.executable, str(ROOT / "examples" / example)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def _doc_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        if path.name == "hooks.md":  # generated signatures, not snippets
            continue
        if path.name == "troubleshooting.md":  # raise on purpose: test_troubleshooting.py
            continue
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"```python\n(.*?)```", text, re.S):
            code = match.group(1)
            if code.startswith(("# file:", "# needs:")):  # a package's file; a server
                continue
            line = text[: match.start()].count("\n") + 2
            blocks.append((f"{path.name}:{line}", code))
    return blocks


@pytest.mark.parametrize(("where", "code"), _doc_blocks(), ids=[w for w, _ in _doc_blocks()])
def test_doc_snippet_runs(
    where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMORY_ADAPTERS_URL", raising=False)
    exec(compile(code, where, "exec"), {"__name__": "__doc_snippet__"})
