"""Windows, by example: the hard budget and what it leaves out first, greetings and openings,
tool calls paired within their turn. (The property-based suite in the conformance kit checks
the same rules on random conversations, on every store.)"""

from __future__ import annotations

import math
from typing import Any

import pytest

from memory_adapters import InvalidValue, Memory, Message, ToolCall, ToolResult, hookimpl
from memory_adapters.validation import json_safe
from memory_adapters.window import SUMMARY_PREFIX


class Words:
    """One token per word (and the 4 a message costs), so that sizes are exact."""

    @hookimpl
    def count_tokens(self, texts: list[str], model: str | None) -> list[int]:
        return [len(t.split()) for t in texts]


class Summarizer:
    def __init__(self, words: int) -> None:
        self.words = words

    @hookimpl
    def summarize(self, messages: list[Message], previous: str | None, max_tokens: int) -> str:
        return " ".join(["gist"] * self.words)


def words(n: int) -> str:
    return " ".join(["w"] * n)


@pytest.fixture
def memory() -> Memory:
    return Memory("memory://", plugins=[Words()], load_entrypoints=False)


def test_a_pinned_system_message_larger_than_the_budget_is_left_out(memory: Memory) -> None:
    with memory.session(conversation_id="c"):
        conv = memory.conversation
        conv.append([Message.system(words(96))])  # 100 tokens
        conv.append([Message.user("q"), Message.assistant("a")])
        window = conv.window(max_tokens=50)
        assert window.pinned == [] and window.tokens == 10 <= 50
        assert [(x.reason, x.seqs, x.tokens) for x in window.left_out] == [("pinned", (1,), 100)]
        assert [m.text for m in window.messages()] == ["q", "a"]
        assert conv.window(max_tokens=110).pinned[0].seq == 1  # it fits: pinned again


def test_a_pinned_first_turn_larger_than_the_budget_is_left_out(memory: Memory) -> None:
    with memory.session(conversation_id="c"):
        conv = memory.conversation
        conv.append([Message.system("be brief"), Message.user(words(60)), Message.assistant("a")])
        for i in range(3):
            conv.append([Message.user(f"q{i}"), Message.assistant(f"a{i}")])
        window = conv.window(max_tokens=40, pin_first_turn=True)
        assert [r.seq for r in window.pinned] == [1]  # the system message still fits
        assert [x.reason for x in window.left_out] == ["pinned"]
        assert window.left_out[0].seqs == (2, 3)
        assert window.tokens <= 40 and window.records[-1].message.text == "a2"


def test_a_summary_that_does_not_fit_is_left_out(memory: Memory) -> None:
    memory.register(Summarizer(words=3))
    with memory.session(conversation_id="c"):
        conv = memory.conversation
        for i in range(10):
            conv.append([Message.user(f"q{i} " + words(10)), Message.assistant(f"a{i}")])
        made = conv.window(max_tokens=60, summary_tokens=20)
        assert made.summary is not None and made.tokens <= 60
        assert made.messages()[0].text == SUMMARY_PREFIX + "gist gist gist"
        # a smaller budget than the summary: the window goes without it, and says so
        assert made.summary.tokens == 12  # 5 words of prefix, 3 of gist, 4 for the message
        small = conv.window(max_tokens=10, summary_tokens=20)
        assert small.summary is None and small.tokens <= 10
        assert [x.reason for x in small.left_out] == ["summary"]


def test_a_summary_longer_than_its_budget_is_cut_to_it(memory: Memory) -> None:
    memory.register(Summarizer(words=500))
    with memory.session(conversation_id="c"):
        for i in range(10):
            memory.conversation.append([Message.user(f"q{i} " + words(10)), Message.assistant("a")])
        window = memory.conversation.window(max_tokens=80, summary_tokens=30)
        assert window.summary is not None and window.summary.tokens <= 30
        assert window.tokens <= 80


def test_a_message_larger_than_the_budget_leaves_the_tail_empty(memory: Memory) -> None:
    with memory.session(conversation_id="c"):
        memory.conversation.append([Message.user("q"), Message.assistant("a")])
        memory.conversation.append([Message.user(words(200)), Message.assistant("long")])
        window = memory.conversation.window(max_tokens=100)
        assert window.records == [] and window.tokens == 0


def test_a_conversation_that_opens_with_the_assistant_keeps_its_greeting(memory: Memory) -> None:
    with memory.session(conversation_id="c"):
        conv = memory.conversation
        conv.append([Message.assistant("Hello! How can I help?")])
        conv.append([Message.user("tea?"), Message.assistant("oolong")])
        assert [m.text for m in conv.messages()] == ["Hello! How can I help?", "tea?", "oolong"]
        # once the start no longer fits, the window starts at a user message again
        assert [m.text for m in conv.messages(max_messages=2)] == ["tea?", "oolong"]
    with memory.session(conversation_id="peer"):  # what chat-history peers store
        conv = memory.conversation
        conv.append([Message.system("sys"), Message.assistant("hi!"), Message.user("hello")])
        assert [m.role for m in conv.messages()] == ["system", "assistant", "user"]
        assert [m.role for m in conv.messages(pin_system=False)] == ["system", "assistant", "user"]


def test_a_call_is_answered_only_by_the_results_right_after_it(memory: Memory) -> None:
    with memory.session(conversation_id="c"):
        conv = memory.conversation
        # a run that failed: its call_0 was never answered
        conv.append([Message.user("one"), Message.assistant("", [ToolCall("call_0", "f")])])
        # the next run reuses call_0, as providers that number their calls do
        conv.append(
            [
                Message.user("two"),
                Message.assistant("", [ToolCall("call_0", "f")]),
                Message.tool(ToolResult("call_0", "r")),
                Message.assistant("done"),
            ]
        )
        window = conv.window()
        shown = window.messages()
        assert [(m.role, [c.id for c in m.tool_calls]) for m in shown] == [
            ("user", []),
            ("user", []),
            ("assistant", ["call_0"]),
            ("tool", []),
            ("assistant", []),
        ]
        assert [(x.reason, x.seqs, x.call_ids) for x in window.left_out] == [
            ("unanswered_call", (2,), ("call_0",))
        ]


def test_a_window_is_within_max_messages_pins_and_summary_included(memory: Memory) -> None:
    memory.register(Summarizer(words=2))
    with memory.session(conversation_id="c"):
        conv = memory.conversation
        conv.append([Message.system("sys")])
        for i in range(10):
            conv.append([Message.user(f"q{i}"), Message.assistant(f"a{i}")])
        for n in range(8):
            assert len(conv.messages(max_messages=n, max_tokens=None)) <= n
            window = conv.window(max_messages=n, max_tokens=30, summary_tokens=10)
            assert len(window.messages()) <= n and window.tokens <= 30


# -- values a model made ----------------------------------------------------------------------


def test_json_safe_encodes_what_json_cannot_hold() -> None:
    deep: Any = "bottom"
    for _ in range(150):
        deep = [deep]
    got = json_safe(
        {
            "nan": math.nan,
            "inf": [math.inf, -math.inf],
            "text": "broken \ud83d emoji",
            "tuple": (1, 2),
            1: "int key",
            "deep": deep,
            "ok": {"a": [1, 2.5, None, True, "x"]},
        }
    )
    assert got["nan"] == "NaN" and got["inf"] == ["Infinity", "-Infinity"]
    assert got["text"] == "broken \ufffd emoji"
    assert got["tuple"] == [1, 2] and got["1"] == "int key"
    assert got["ok"] == {"a": [1, 2.5, None, True, "x"]}  # plain JSON comes back unchanged
    assert isinstance(got["deep"], list)


def test_append_refuses_values_json_cannot_hold_unless_asked_to_coerce(memory: Memory) -> None:
    made = [
        Message.user("go"),
        Message.assistant("", [ToolCall("c1", "measure", {"x": math.nan, "t": "a\udfffb"})]),
        Message.tool(ToolResult("c1", {"y": math.inf})),
    ]
    with memory.session(conversation_id="c"):
        with pytest.raises(InvalidValue):
            memory.conversation.append(made)
        assert memory.conversation.last_seq() == 0
        memory.conversation.append(made, coerce=True)
        back = [r.message for r in memory.conversation.read()]
    assert back[1].tool_calls[0].args == {"x": "NaN", "t": "a\ufffdb"}
    assert back[2].tool_results[0].content == {"y": "Infinity"}
    assert math.isnan(made[1].tool_calls[0].args["x"])  # the caller's messages are untouched
