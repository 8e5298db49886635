"""What imports what: runtime helpers never need test tools, and the adapters' import paths
under ``memory_adapters.`` load their plugin only when used, behind its extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import memory_adapters_langchain
import memory_adapters_pydantic_ai
import pytest

import memory_adapters.langchain
import memory_adapters.pydantic_ai

RUNTIME_HELPERS = [
    "memory_adapters.testing",
    "memory_adapters.testing.langchain",
    "memory_adapters.testing.postgres_server",
    "memory_adapters.testing.hostile",
]
"""The modules of ``memory_adapters.testing`` meant for users' own examples and tests, which
must import where pytest and hypothesis are not installed."""


def run_without(blocked: list[str], code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in which the packages ``blocked`` cannot be imported
    (as if not installed)."""
    prelude = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("module", RUNTIME_HELPERS)
def test_runtime_helpers_import_without_pytest_or_hypothesis(module: str) -> None:
    if module.endswith(".langchain"):
        pytest.importorskip("langchain_core")  # its own extra (nox runs extras apart)
    result = run_without(
        ["pytest", "_pytest", "hypothesis"],
        f"""
        import importlib
        importlib.import_module({module!r})
        assert "pytest" not in sys.modules or sys.modules["pytest"] is None
        print("ok")
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_conformance_kit_without_pytest_names_the_extra() -> None:
    result = run_without(
        ["pytest", "_pytest", "hypothesis"],
        """
        from memory_adapters import MissingExtra
        try:
            from memory_adapters.testing import StoreConformance
        except MissingExtra as exc:
            print(exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        'this needs pytest and hypothesis: pip install "memory-adapters[dev]"'
    )


def test_the_conformance_kit_loads_on_first_use() -> None:
    from memory_adapters import testing
    from memory_adapters.testing.conformance import MultiProcessConformance, StoreConformance

    assert testing.StoreConformance is StoreConformance
    assert testing.MultiProcessConformance is MultiProcessConformance
    assert "StoreConformance" in dir(testing)
    with pytest.raises(AttributeError):
        getattr(testing, "NoSuchThing")  # noqa: B009


@pytest.mark.parametrize(
    ("module", "plugin"),
    [
        (memory_adapters.langchain, memory_adapters_langchain),
        (memory_adapters.pydantic_ai, memory_adapters_pydantic_ai),
    ],
)
def test_adapter_modules_re_export_the_plugins_public_names(module: object, plugin: object) -> None:
    pytest.importorskip("langchain" if module is memory_adapters.langchain else "pydantic_ai")
    names = getattr(module, "__all__")  # noqa: B009
    assert sorted(names) == sorted(getattr(plugin, "__all__"))  # noqa: B009
    for name in names:
        assert getattr(module, name) is getattr(plugin, name), name
    assert set(names) <= set(dir(module))
    with pytest.raises(AttributeError):
        getattr(module, "NoSuchThing")  # noqa: B009


def test_adapter_import_paths() -> None:
    pytest.importorskip("langchain")
    pytest.importorskip("pydantic_ai")
    from memory_adapters_langchain.middleware import MemoryMiddleware as Middleware
    from memory_adapters_pydantic_ai.capability import MemoryCapability as Capability

    from memory_adapters.langchain import MemoryMiddleware, MemoryStore
    from memory_adapters.pydantic_ai import MemoryCapability, MemoryConversationStore

    assert MemoryMiddleware is Middleware and MemoryCapability is Capability
    assert MemoryStore.__name__ == "MemoryStore"
    assert MemoryConversationStore.__name__ == "MemoryConversationStore"


FRAMEWORKS = ["langchain", "langchain_core", "langgraph", "pydantic_ai"]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        (
            "from memory_adapters.langchain import MemoryMiddleware",
            'this needs langchain, langchain-core and langgraph: pip install "memory-adapters'
            '[langchain]"',
        ),
        (
            "from memory_adapters.pydantic_ai import MemoryCapability",
            'this needs pydantic-ai-slim: pip install "memory-adapters[pydantic-ai]"',
        ),
    ],
)
def test_adapter_import_paths_without_the_extra_name_the_pip_command(
    statement: str, message: str
) -> None:
    result = run_without(
        FRAMEWORKS,
        f"""
        import memory_adapters, memory_adapters.langchain, memory_adapters.pydantic_ai
        from memory_adapters import MissingExtra
        try:
            {statement}
        except MissingExtra as exc:
            print(exc)
        else:
            print("imported")
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == message


def test_importing_the_core_or_the_adapter_modules_imports_no_framework() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, memory_adapters, memory_adapters.langchain, memory_adapters.pydantic_ai\n"
            "from memory_adapters import Memory\n"
            "Memory('memory://')\n"
            f"print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("blocked", "installed"),
    [
        (["langchain", "langchain_core", "langgraph"], "pydantic-ai"),
        (["pydantic_ai"], "langchain"),
        (["pydantic_ai", "langchain", "langchain_core", "langgraph"], "none"),
    ],
    ids=["no-langchain", "no-pydantic-ai", "neither"],
)
def test_no_adapter_names_only_the_adapters_installed(blocked: list[str], installed: str) -> None:
    result = run_without(
        blocked,
        """
        from memory_adapters import Memory, NoAdapter
        memory = Memory("memory://", embed=False)
        print(",".join(memory.adapters) or "none")
        try:
            memory.wrap(object())
        except NoAdapter as exc:
            print(exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    adapters, message = result.stdout.strip().splitlines()
    assert adapters == installed
    assert f"installed adapters: {installed}. Install one with" in message, message
