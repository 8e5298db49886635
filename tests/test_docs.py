"""The docs and examples stay true: the hook reference matches the spec, examples run."""

from __future__ import annotations

import ast
import json
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
        'pip install ".[pydantic-ai,offline,embeddings]" && python examples/pydantic_ai_demo.py'
    )
    assert "pytest" in tests
    assert "python examples/quickstart.py" in head  # the framework-free tour, still there


EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))

NEEDS = re.compile(r'^Needs: pip install "(?P<target>\.(?:\[[a-z0-9,-]+\])?)"$')
"""The line of an example's docstring that says what it needs installed, from a checkout."""

PIP_AND_RUN = re.compile(
    r'pip install "?(?P<target>\.(?:\[[a-z0-9,-]+\])?)"? && python examples/(?P<example>\w+\.py)'
)
"""A command that installs and runs an example, wherever the docs give one."""


def _docstring(example: str) -> str:
    source = (ROOT / "examples" / example).read_text(encoding="utf-8")
    return ast.get_docstring(ast.parse(source)) or ""


def _needs(example: str) -> str:
    found = [
        m.group("target")
        for line in _docstring(example).splitlines()
        if (m := NEEDS.match(line.strip()))
    ]
    assert len(found) == 1, f'{example}: one docstring line `Needs: pip install "..."`, not {found}'
    return found[0]


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_names_what_it_needs(example: str) -> None:
    target = _needs(example)
    text = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    commands = [
        m.group("target") for m in PIP_AND_RUN.finditer(text) if m.group("example") == example
    ]
    assert commands == [target], (
        f"examples/README.md must give `pip install ... && python examples/{example}`"
    )


def test_every_install_command_in_the_docs_matches_the_examples_needs() -> None:
    texts = {
        "README.md": (ROOT / "README.md").read_text(encoding="utf-8"),
        "examples/README.md": (ROOT / "examples" / "README.md").read_text(encoding="utf-8"),
    }
    texts.update({f"examples/{e}": _docstring(e) for e in EXAMPLES})
    checked = 0
    for where, text in texts.items():
        for m in PIP_AND_RUN.finditer(text):
            assert m.group("example") in EXAMPLES, f"{where}: no examples/{m.group('example')}"
            assert m.group("target") == _needs(m.group("example")), f"{where}: {m.group(0)}"
            checked += 1
    assert checked >= 2 * len(EXAMPLES)
    readme = texts["README.md"]
    demo = 'pip install ".[pydantic-ai,offline,embeddings]" && python examples/pydantic_ai_demo.py'
    assert demo in readme
    assert "pip install . && python examples/quickstart.py" in readme
    assert 'pip install ".[langchain,offline]" && python examples/langchain_quickstart.py' in readme


def test_ci_runs_each_example_where_its_needs_line_says() -> None:
    """``.ci/run_examples.py`` (run by ``.ci/run``) groups the examples by their ``Needs:`` lines:
    one environment per distinct install, each example in the one it names."""
    result = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "run_examples.py"), "--plan"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    planned: dict[str, list[str]] = json.loads(result.stdout)
    assert sorted(e for group in planned.values() for e in group) == EXAMPLES
    for target, examples in planned.items():
        assert all(_needs(e) == target for e in examples)


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
    if example == "pydantic_ai_demo.py":  # asked in other words, found by meaning
        asked = result.stdout.split("Which drink do I prefer?", 1)[1]
        assert "oolong" in asked.split("\n", 2)[1], result.stdout


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


_VOLATILE = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?Z"), "<time>"),
    (re.compile(r"process \d+"), "process <pid>"),
    (re.compile(r"(?<![0-9a-z])[0-9a-f]{6,}(?![0-9a-z])"), "<id>"),
]
"""What differs between any two runs of an example: run and span ids, times, process ids."""


def _run_example(example: str, cwd: Path) -> str:
    env = {
        k: v for k, v in os.environ.items() if k not in ("MEMORY_ADAPTERS_URL", "OPENAI_API_KEY")
    }
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / example)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for pattern, replacement in _VOLATILE:
        out = pattern.sub(replacement, out)
    return out


@pytest.mark.parametrize(
    ("first", "second"),
    [("pydantic_ai_demo.py", "langchain_quickstart.py"), ("quickstart.py", "cross_framework.py")],
)
def test_an_example_prints_the_same_after_another(first: str, second: str, tmp_path: Path) -> None:
    """Examples run one after another in one directory, on its default store, do not see each
    other's memory: the second prints what it prints alone (issue 27, item 11)."""
    (tmp_path / "alone").mkdir()
    (tmp_path / "after").mkdir()
    alone = _run_example(second, tmp_path / "alone")
    _run_example(first, tmp_path / "after")
    assert _run_example(second, tmp_path / "after") == alone
