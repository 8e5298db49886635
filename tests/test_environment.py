"""Configuration by environment: ``Memory()`` reads what an operator sets per deployment, an
explicit argument wins, a bad value is an ``InvalidInput`` naming the variable, and
docs/operations.md documents every variable in one table."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_adapters import InvalidInput, Memory, Message
from memory_adapters import environment as env

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in env.VARIABLES:
        monkeypatch.delenv(variable.name, raising=False)


def test_defaults_without_variables() -> None:
    with Memory("memory://", embed=False) as memory:
        assert memory.namespace == "default"
        assert memory.history_tokens == 8000
        assert memory.model is None
        assert memory.telemetry_content is False


def test_variables_set_what_the_caller_left_unset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(env.URL, f"sqlite:///{tmp_path / 'env.db'}")
    monkeypatch.setenv(env.NAMESPACE, "tenant-7")
    monkeypatch.setenv(env.HISTORY_TOKENS, " 1234 ")
    monkeypatch.setenv(env.MODEL, "gpt-4o")
    monkeypatch.setenv(env.EMBED, "false")
    monkeypatch.setenv(env.OTEL_CONTENT, "yes")
    with Memory() as memory:
        assert memory.store.scheme == "sqlite"
        assert memory.namespace == "tenant-7"
        assert memory.history_tokens == 1234
        assert memory.model == "gpt-4o"
        assert memory.embedder is None
        assert memory.telemetry_content is True
        with memory.session(user_id="u", conversation_id="c"):
            memory.conversation.append([Message.user("hi")])
            assert memory.scope.conversation_key.startswith("tenant-7:")
    assert (tmp_path / "env.db").exists()


def test_explicit_arguments_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.URL, "not a url at all")
    monkeypatch.setenv(env.NAMESPACE, "from-env")
    monkeypatch.setenv(env.HISTORY_TOKENS, "1234")
    monkeypatch.setenv(env.MODEL, "gpt-4o")
    monkeypatch.setenv(env.EMBED, "no-such-embedder")
    monkeypatch.setenv(env.OTEL_CONTENT, "1")
    with Memory(
        "memory://",
        namespace="explicit",
        history_tokens=None,
        model="gpt-4",
        embed=False,
        telemetry_content=False,
    ) as memory:
        assert memory.namespace == "explicit"
        assert memory.history_tokens is None
        assert memory.model == "gpt-4"
        assert memory.embedder is None
        assert memory.telemetry_content is False


def test_history_tokens_none_means_no_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.HISTORY_TOKENS, "None")
    with Memory("memory://", embed=False) as memory:
        assert memory.history_tokens is None


def test_empty_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in env.VARIABLES:
        if variable.name != env.URL:
            monkeypatch.setenv(variable.name, "  ")
    with Memory("memory://", embed=False) as memory:
        assert memory.namespace == "default"
        assert memory.history_tokens == 8000


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (env.NAMESPACE, "n" * 1000),
        (env.HISTORY_TOKENS, "lots"),
        (env.HISTORY_TOKENS, "0"),
        (env.HISTORY_TOKENS, "-5"),
        (env.HISTORY_TOKENS, "1.5"),
        (env.HISTORY_TOKENS, str(2**70)),
        (env.OTEL_CONTENT, "maybe"),
        (env.EMBED, "no-such-embedder"),
    ],
)
def test_a_bad_value_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidInput) as caught:
        Memory("memory://")
    if name != env.EMBED:  # the embedder's error names what it could not make
        assert name in str(caught.value)
    else:
        assert "no-such-embedder" in str(caught.value)


def test_the_operations_page_documents_every_variable() -> None:
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| `MEMORY_ADAPTERS_")]
    documented = {row.split("`")[1] for row in rows}
    assert documented >= {v.name for v in env.VARIABLES}
    for variable in env.VARIABLES:
        row = next(r for r in rows if r.startswith(f"| `{variable.name}`"))
        assert f"`{variable.option}`" in row
