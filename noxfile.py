"""Developer sessions: ``nox -s tests lint typecheck docs bench``."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck", "docs"]

# Each extra is tested in its own environment, so a plugin that imports its extra eagerly fails.
EXTRAS = ["dev"]


@nox.session
@nox.parametrize("extra", EXTRAS)
def tests(session: nox.Session, extra: str) -> None:
    """The test suite, with one extra installed."""
    session.install("-e", f".[{extra}]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package, the plugins, tests, benchmarks and examples."""
    session.install("-e", ".[dev]")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Regenerate docs/hooks.md from the hook spec."""
    session.install("-e", ".")
    session.run("python", "-m", "memory_adapters.docgen")


@nox.session
def bench(session: nox.Session) -> None:
    """The per-turn cost benchmark (pass --quick for a smoke run)."""
    session.install("-e", ".[all]")
    session.run("python", "benchmarks/turn_cost.py", *session.posargs)
