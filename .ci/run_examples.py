"""CI: run every example in the minimal environment its ``Needs:`` line names.

Each ``examples/*.py`` says in its docstring, in one line, what it needs installed from a
checkout: ``Needs: pip install ".[langchain,offline]"`` (``"."`` for the core alone). For each
distinct line this creates one virtual environment, runs exactly that ``pip install`` in it
from the checkout, checks that no other framework, driver or test tool came with it (and that
the runtime helpers of ``memory_adapters.testing`` import there), then runs each example
that needs it twice, as ``tests/test_docs.py`` does: in an empty directory, with
``MEMORY_ADAPTERS_URL`` pointing at a temporary SQLite file, the second run seeing the first
one's memory. The environment for the README's first command is made by running that command
itself, word for word, in the checkout, as a new user would.

    python .ci/run_examples.py --work DIR [--reuse TARGET=VENV ...]
    python .ci/run_examples.py --plan        # the environments and their examples, as JSON

``--reuse ".=/path/venv"`` uses an environment already made with exactly that install (CI's
core one). Only the standard library is used, so any Python 3.11+ can run this.

``--wheel dist/memory_adapters-X-py3-none-any.whl`` installs the built wheel instead of the
checkout: ``"<wheel>[extras]"`` for ``".[extras]"`` (the README's first command is still run
word for word in the checkout), after checking the wheel holds the core, every built-in
plugin, their ``py.typed`` and entry points. Then the environments are the release's install
jobs: two more, ``SMOKE_TARGETS``, hold the extras no example uses and runs
``.ci/smoke_extras.py`` there, and every extra of ``pyproject.toml`` (but the tool ones,
``TOOL_EXTRAS``) must be installed from the wheel in some environment that uses it.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NEEDS = re.compile(r'^Needs: pip install "(?P<target>\.(?:\[[a-z0-9,-]+\])?)"$')

EXTRA_MODULES = {
    "pydantic-ai": ["pydantic_ai"],
    "langchain": ["langchain", "langchain_core", "langgraph"],
    "postgres": ["psycopg", "psycopg_pool"],
    "mongo": ["pymongo"],
    "motor": ["motor"],
}
"""What each extra brings that the core must run without."""

IMPLIED = {"dbos": {"pydantic-ai", "postgres"}}
"""Extras an extra brings with it (pydantic-ai's DBOS integration, whose engine uses psycopg)."""

NEVER = ["pytest", "hypothesis"]
"""Test tools: no example, and no runtime helper, may need them."""

SMOKE_TARGETS = (
    ".[embeddings,minilm,wordllama,mongo,motor,offline,otel,postgres]",
    ".[dbos,offline]",
)
"""The extras no example installs from the wheel, used by ``.ci/smoke_extras.py`` (``dbos``
apart: it brings pydantic-ai, which the others' environment must not have)."""

TOOL_EXTRAS = {"all", "bench", "dev", "docs"}
"""Extras for developers (installed from the checkout in CI's dev environment) or unions."""

RUNTIME_HELPERS = [
    "memory_adapters.testing",
    "memory_adapters.testing.postgres_server",
    "memory_adapters.testing.hostile",
]
LANGCHAIN_HELPERS = ["memory_adapters.testing.langchain"]


def needs(path: Path) -> str:
    """The install target an example's docstring names (``"."``, ``".[extra,...]"``)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    found = [m.group("target") for line in doc.splitlines() if (m := NEEDS.match(line.strip()))]
    if len(found) != 1:
        raise SystemExit(
            f'{path.name}: its docstring must have one line `Needs: pip install "..."`, '
            f"not {len(found)}"
        )
    return found[0]


def plan() -> dict[str, list[str]]:
    """The install targets, each with the examples that need it, in a stable order."""
    groups: dict[str, list[str]] = {}
    for path in sorted((ROOT / "examples").glob("*.py")):
        groups.setdefault(needs(path), []).append(path.name)
    return dict(sorted(groups.items(), key=lambda kv: (len(kv[0]), kv[0])))


def extras(target: str) -> set[str]:
    """The extras of an install target: ``".[a,b]"`` -> ``{"a", "b"}``."""
    inside = target[2:-1] if target.startswith(".[") else ""
    return {e for e in inside.split(",") if e}


def readme_first_command() -> str:
    """The README's first command (the demo), without its trailing comment."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    if block is None:
        raise SystemExit("README.md must start with a bash block of commands")
    return block.group(1).splitlines()[0].split("#", 1)[0].strip()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    for name in ("MEMORY_ADAPTERS_URL", "OPENAI_API_KEY", "MEMORY_ADAPTERS_DEMO_MODEL"):
        env.pop(name, None)  # offline, and the store each run is given
    env.pop("PYTHONPATH", None)
    return env


def _run(
    args: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``args``; on failure show what it printed and stop."""
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=cwd, env=env)
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-8000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"failed ({result.returncode}): {' '.join(args)}")
    return result


def check_wheel(wheel: Path) -> None:
    """The wheel holds the core, every built-in plugin package with its ``py.typed``, and the
    entry points of the plugins and the command."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(
            archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")
        )
    packages = {"memory_adapters": ROOT}  # each package, and the folder it is found in
    packages.update(
        (p.parent.name, ROOT / "plugins") for p in (ROOT / "plugins").glob("*/__init__.py")
    )
    for package, root in sorted(packages.items()):
        sources = {p.relative_to(root).as_posix() for p in (root / package).rglob("*.py")}
        if missing := sorted((sources | {f"{package}/py.typed"}) - names):
            raise SystemExit(f"{wheel.name} lacks {missing}")
        if package != "memory_adapters" and f"= {package}\n" not in entry_points + "\n":
            raise SystemExit(f"{wheel.name} has no entry point for {package}")
    if "memory-adapters = memory_adapters.cli:main" not in entry_points:
        raise SystemExit(f"{wheel.name} has no memory-adapters command")
    print(f"   {wheel.name}: {len(packages)} packages, py.typed and entry points")


def pip_target(target: str, wheel: Path | None) -> str:
    """What ``pip install`` is given for ``target``: the checkout's, or the wheel's."""
    return target if wheel is None else f"{wheel}{target[1:]}"


def make_env(target: str, venv: Path, first_command: str, wheel: Path | None = None) -> None:
    """A fresh environment holding ``pip install target`` from the checkout (from ``wheel``
    when given); for the README's target, made by running the README's first command itself,
    in the checkout."""
    _run([sys.executable, "-m", "venv", str(venv)])
    env = {**_env(), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["VIRTUAL_ENV"] = str(venv)
    if first_command.startswith(f'pip install "{target}" && '):
        before = {p.name for p in ROOT.iterdir()}
        print(f"   $ {first_command}   (the README's first command, in the checkout)")
        _run(["bash", "-c", f"set -e; {first_command}"], cwd=ROOT, env=env)
        for made in (p for p in ROOT.iterdir() if p.name not in before):
            if made.name.startswith("memory_adapters_demo.db"):  # the demo's default store
                made.unlink()
        return
    print(f'   $ pip install "{pip_target(target, wheel)}"')
    cwd = ROOT if wheel is None else Path(tempfile.gettempdir())  # the wheel, not the checkout
    _run(
        [str(venv / "bin" / "pip"), "install", "--quiet", pip_target(target, wheel)],
        cwd=cwd,
        env=env,
    )


def check_env(target: str, python: Path) -> None:
    """Nothing beyond the target came with it; the runtime helpers import without test tools."""
    wanted = extras(target)
    for extra in list(wanted):
        wanted |= IMPLIED.get(extra, set())
    absent = list(NEVER)
    for extra, modules in EXTRA_MODULES.items():
        if extra not in wanted and not (extra == "mongo" and "motor" in wanted):
            absent += modules
    helpers = RUNTIME_HELPERS + (LANGCHAIN_HELPERS if "langchain" in wanted else [])
    code = (
        "import importlib, importlib.util, sys\n"
        f"present = [m for m in {absent!r} if importlib.util.find_spec(m) is not None]\n"
        "assert not present, f'installed but not asked for: {present}'\n"
        f"for m in {helpers!r}:\n"
        "    importlib.import_module(m)\n"
        "leaked = [m for m in ('pytest', 'hypothesis') if m in sys.modules]\n"
        "assert not leaked, f'imported test tools: {leaked}'\n"
    )
    _run([str(python), "-c", code], cwd=tempfile.gettempdir(), env=_env())


def run_example(name: str, python: Path) -> float:
    """Run one example twice on one temporary SQLite file; the seconds it took."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="memory-adapters-example-") as tmp:
        env = {**_env(), "MEMORY_ADAPTERS_URL": f"sqlite:///{Path(tmp) / 'example.db'}"}
        for attempt in (1, 2):
            result = _run([str(python), str(ROOT / "examples" / name)], cwd=tmp, env=env)
            if attempt == 2 and not result.stdout.strip():
                raise SystemExit(f"{name} printed nothing")
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--plan", action="store_true", help="print the plan as JSON and stop")
    parser.add_argument("--work", type=Path, help="where to make the environments")
    parser.add_argument(
        "--reuse", action="append", default=[], metavar="TARGET=VENV", help="a ready environment"
    )
    parser.add_argument("--wheel", type=Path, help="install this built wheel, not the checkout")
    args = parser.parse_args(argv)
    groups = plan()
    if args.plan:
        print(json.dumps(groups, indent=2))
        return 0
    if args.work is None:
        parser.error("--work DIR is needed to make environments")
    reuse = dict(item.split("=", 1) for item in args.reuse)
    first = readme_first_command()
    if not any(first.startswith(f'pip install "{t}" && ') for t in groups):
        raise SystemExit(f"the README's first command installs no example's target: {first}")
    wheel = args.wheel.resolve() if args.wheel else None
    if wheel is not None:
        check_wheel(wheel)
        for smoke_target in SMOKE_TARGETS:
            groups.setdefault(smoke_target, [])
        declared = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
        wanted = set(declared["optional-dependencies"]) - TOOL_EXTRAS
        # the README's environment is made in the checkout: it does not count
        used = {
            e
            for target, names in groups.items()
            if (names or target in SMOKE_TARGETS)
            and not first.startswith(f'pip install "{target}" && ')
            for e in extras(target)
        }
        if missing := sorted(wanted - used):
            raise SystemExit(f"extras no wheel-installed environment uses: {missing}")
    ran = 0
    for i, (target, examples) in enumerate(groups.items()):
        print(f'-- pip install "{target}": {", ".join(examples)}')
        started = time.monotonic()
        venv = Path(reuse[target]) if target in reuse else args.work / f"examples-{i}"
        if target in reuse:
            print(f"   (reusing {venv})")
        else:
            if venv.exists():
                shutil.rmtree(venv)
            make_env(target, venv, first, wheel)
        python = venv / "bin" / "python"
        check_env(target, python)
        print(f"   environment ready in {time.monotonic() - started:.0f} s")
        if target in SMOKE_TARGETS and wheel is not None:
            smoke = [
                str(python),
                str(ROOT / ".ci" / "smoke_extras.py"),
                *sorted(extras(target) - {"offline"}),
            ]
            print(_run(smoke, cwd=tempfile.gettempdir(), env=_env()).stdout.rstrip())
        for name in examples:
            print(f"   {name}: ran twice in {run_example(name, python):.1f} s")
            ran += 1
    print(f"all {ran} examples ran, each in the environment it names ({len(groups)} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
