"""Developer sessions: ``nox -s tests lint typecheck docs bench``."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]

# Each extra is tested in an environment holding only that extra, so that a plugin which
# needs more than its extra, or a core that needs any extra, fails here.
SUITES: dict[str, tuple[list[str], list[str]]] = {
    "core": (
        ["offline"],
        [
            "tests/test_memory.py",
            "tests/test_cli.py",
            "tests/test_imports.py",
            "tests/test_hooks.py",
            "tests/test_plugins.py",
            "tests/test_tokens.py",
            "tests/test_validation.py",
            "tests/test_windows.py",
            "tests/test_store_inmemory.py",
            "tests/test_store_sqlite.py",
        ],
    ),
    "postgres": (
        ["offline", "postgres"],
        ["tests/test_store_postgres.py", "tests/test_postgres_errors.py"],
    ),
    "mongo": (["offline", "mongo"], ["tests/test_store_mongo.py"]),
    # the adapters run on every store, so their suites also need the stores' extras
    "pydantic-ai": (
        ["offline", "pydantic-ai", "postgres", "mongo"],
        [
            "tests/test_pydantic_ai.py",
            "tests/test_pydantic_ai_faults.py",
            "tests/test_pydantic_ai_outputs.py",
            "tests/test_pydantic_ai_store.py",
        ],
    ),
    "langchain": (
        ["offline", "langchain", "postgres", "mongo"],
        [
            "tests/test_langchain.py",
            "tests/test_langchain_compose.py",
            "tests/test_langchain_faults.py",
            "tests/test_langchain_history.py",
            "tests/test_langchain_matrix.py",
            "tests/test_langgraph_store.py",
        ],
    ),
    # one conversation, both frameworks
    "adapters": (
        ["offline", "pydantic-ai", "langchain", "postgres", "mongo"],
        ["tests/test_cross_framework.py", "tests/test_framework_ids.py"],
    ),
    # the MCP server, driven by MCP clients, beside agents of both adapters
    "mcp": (
        ["offline", "mcp", "pydantic-ai", "langchain", "postgres", "mongo", "otel"],
        ["tests/test_mcp.py"],
    ),
}


@nox.session
@nox.parametrize("extra", list(SUITES))
def tests(session: nox.Session, extra: str) -> None:
    """The tests of one extra, with only that extra installed."""
    extras, paths = SUITES[extra]
    session.install("-e", f".[{','.join(extras)}]", "pytest", "hypothesis", "setuptools>=70.1")
    if "mongo" in extras:
        session.install("mongomock", "mongomock-motor")
    if "langchain" in extras:
        session.install("langgraph-checkpoint-sqlite")  # a checkpointer several processes share
    if "mcp" in extras:  # pydantic-ai's MCP client; spans captured in memory
        session.install("pydantic-ai-slim[mcp]", "opentelemetry-sdk")
    session.run("python", "-m", "pytest", *(session.posargs or paths))


@nox.session(name="all")
def all_tests(session: nox.Session) -> None:
    """Everything, as CI runs it."""
    session.install("-e", ".[dev,bench]")
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
    """Regenerate docs/hooks.md from the hook spec, then build the site into site/ as CI does
    (``mkdocs build --strict``; the API reference is generated during the build). ``nox -s docs
    -- serve`` serves it on localhost instead."""
    session.install("-e", ".[docs]")
    session.run("python", "-m", "memory_adapters.docgen")
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The per-turn cost benchmark (pass --quick for a smoke run)."""
    session.install("-e", ".[all]")
    session.run("python", "benchmarks/turn_cost.py", *session.posargs)
