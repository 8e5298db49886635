"""Token counting: tiktoken as tiktoken picks it, offline fallbacks, a warned approximation."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from memory_adapters import Memory, Message, TokenCountWarning, tokens


def test_encoding_is_chosen_from_the_model_name() -> None:
    assert tokens.encoding_name("gpt-4o") == "o200k_base"
    assert tokens.encoding_name("openai:gpt-4o-mini") == "o200k_base"
    assert tokens.encoding_name("gpt-4") == "cl100k_base"
    assert tokens.encoding_name("claude-sonnet-4") == tokens.DEFAULT_ENCODING
    assert tokens.encoding_name(None) == tokens.DEFAULT_ENCODING


def test_counts_are_real_tokens() -> None:
    # 'hello world' is two tokens in both cl100k_base and o200k_base
    assert tokens.count(["hello world", ""], "gpt-4") == [2, 0]
    assert tokens.count(["<|endoftext|> is plain text here"])[0] > 1


def test_counts_are_computed_once_and_stored(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = tokens.count

    def counting(texts: list[str], model: str | None = None) -> list[int]:
        calls.append(len(texts))
        return real(texts, model)

    monkeypatch.setattr(tokens, "count", counting)
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("hello world"), Message.assistant("hi")])
        for _ in range(3):
            memory.conversation.window()
        stored = memory.conversation.read()
    assert calls == [2]
    assert [r.tokens for r in stored] == [2 + tokens.MESSAGE_OVERHEAD, 1 + tokens.MESSAGE_OVERHEAD]


def test_no_encoding_gives_one_warning_and_an_approximation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tiktoken

    def unavailable(name: str) -> Any:
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken, "get_encoding", unavailable)
    monkeypatch.setattr(tokens, "_by_name", {})
    monkeypatch.setattr(tokens, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = tokens.count(["x" * 40], "gpt-4o")
        second = tokens.count(["y" * 8], "gpt-4")
    assert first == [10] and second == [2]
    assert [w.category for w in caught] == [TokenCountWarning]
    assert "offline" in str(caught[0].message)
    memory = Memory("memory://")
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("still works")])
        assert memory.conversation.messages()[0].text == "still works"
