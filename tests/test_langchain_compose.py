"""Memory beside LangChain's own middleware, with real ``create_agent`` agents on every store:
``SummarizationMiddleware`` in either order (its summary is never stored as a user turn, and
the model is shown every message once: raw, or through the summary that stands for it);
``HumanInTheLoopMiddleware`` approvals given in another process with only the decision (the run
completes, every message stored once); a chat model that cannot call tools (a typed error that
says what to do)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents.middleware import HumanInTheLoopMiddleware, SummarizationMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from memory_adapters_langchain import MemoryMiddleware, ModelCannotCallTools
from memory_adapters_langchain.mapping import synthesized
from stores import STORES, open_memory
from test_langchain import check_pairs, make_agent, stored, texts, weather

from memory_adapters import Memory
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


# -- SummarizationMiddleware -----------------------------------------------------------------------


class Summarizer:
    """Writes a summary naming what it covers, so a test can tell which messages a summary the
    model is shown stands for (a summary of a summary covers what the first one covered)."""

    def __init__(self) -> None:
        self.covers: dict[str, set[str]] = {}

    def covered(self, message: BaseMessage) -> set[str] | None:
        """The ids a summary message stands for (``None``: not a summary)."""
        if not synthesized(message):
            return None
        return self.covers[message.text.rsplit("\n", 1)[-1]]

    def __call__(self, messages: Sequence[BaseMessage]) -> str:
        covered: set[str] = set()
        for m in messages:
            inner = self.covered(m)
            covered |= inner if inner is not None else {m.id or ""}
        key = f"summary-{len(self.covers) + 1}"
        self.covers[key] = covered
        return key


def script(questions: Sequence[str]) -> list[Any]:
    """Two tool calls per question, then an answer: runs long enough to be summarized."""
    steps: list[Any] = []
    for q in questions:
        steps += [call_tool("weather", city=f"{q} a"), call_tool("weather", city=f"{q} b")]
        steps.append(f"answer to {q}")
    return steps


QUESTIONS = ["q1", "q2", "q3"]


ORDERS = ["memory-first", "summarization-first", "wrap"]


def summarized_agent(memory: Memory, order: str, checkpointer: bool) -> tuple[Any, Any, Summarizer]:
    model = ScriptedChatModel(script(QUESTIONS))
    summarizer = Summarizer()
    summarization = SummarizationMiddleware(
        model, trigger=("messages", 4), keep=("messages", 2), summarizer=summarizer
    )
    options: dict[str, Any] = {"tools": [weather]}
    if checkpointer:
        options["checkpointer"] = InMemorySaver()
    if order == "wrap":
        return (
            memory.wrap(make_agent(model, middleware=[summarization], **options)),
            model,
            summarizer,
        )
    mine = MemoryMiddleware(memory, tools=False)
    middleware = [mine, summarization] if order == "memory-first" else [summarization, mine]
    return make_agent(model, middleware=middleware, **options), model, summarizer


def raw_id(message: Any) -> str:
    return str(json.loads(message.raw)["data"]["id"])


@pytest.mark.parametrize("checkpointer", [False, True], ids=["no-checkpointer", "checkpointer"])
@pytest.mark.parametrize("order", ORDERS)
def test_summarization_beside_memory_stores_no_summary_and_shows_everything_once(
    memory: Memory, order: str, checkpointer: bool
) -> None:
    agent, model, summarizer = summarized_agent(memory, order, checkpointer)
    config = {"configurable": {"thread_id": "long"}}
    questions = QUESTIONS
    agent.invoke({"messages": [("user", questions[0])]}, config)
    for _ in agent.stream({"messages": [("user", questions[1])]}, config, stream_mode="updates"):
        pass
    asyncio.run(agent.ainvoke({"messages": [("user", questions[2])]}, config))

    # the log holds every turn once, as if nothing had been summarized, and no summary
    log = stored(memory, "long")
    expected: list[tuple[str, str]] = []
    for q in questions:
        expected += [("user", q), ("assistant", ""), ("tool", ""), ("assistant", ""), ("tool", "")]
        expected.append(("assistant", f"answer to {q}"))
    assert texts(log) == expected
    ids = [raw_id(m) for m in log]
    assert len(set(ids)) == len(ids)
    assert summarizer.covers, "the summarization never ran"

    # every model call is shown each message of the conversation so far exactly once: raw,
    # or through a summary that stands for it
    summaries = 0
    for shown in model.calls:
        messages = [m for m in shown if not isinstance(m, SystemMessage)]
        check_pairs(messages)
        raw: list[str] = []
        covered: set[str] = set()
        for m in messages:
            inner = summarizer.covered(m)
            if inner is None:
                raw.append(m.id or "")
            else:
                summaries += 1
                assert not covered & inner, "two summaries of the same messages"
                covered |= inner
        assert len(set(raw)) == len(raw), "a message shown twice"
        assert not covered & set(raw), "a message shown raw and through a summary"
        so_far = set(ids[: ids.index(raw[-1]) + 1])
        assert set(raw) | covered == so_far, "a message the model was never shown"
    assert summaries, "the model was never shown a summary"


# -- a model that cannot call tools ----------------------------------------------------------------


def test_a_model_that_cannot_call_tools_is_a_clear_error(memory: Memory) -> None:
    def model() -> GenericFakeChatModel:
        return GenericFakeChatModel(messages=iter([AIMessage("hello")]))

    agent = make_agent(model(), middleware=[MemoryMiddleware(memory)])
    config = {"configurable": {"thread_id": "no-tools"}}
    with pytest.raises(ModelCannotCallTools) as info:
        agent.invoke({"messages": [("user", "hi")]}, config)
    assert isinstance(info.value, NotImplementedError)  # what LangChain raises for it
    assert "GenericFakeChatModel cannot call tools" in str(info.value)
    assert "MemoryMiddleware(memory, tools=False)" in str(info.value)
    with pytest.raises(ModelCannotCallTools):
        asyncio.run(agent.ainvoke({"messages": [("user", "hi")]}, config))
    # as the error says: without the memory tools the same model works, with its memory
    agent = make_agent(model(), middleware=[MemoryMiddleware(memory, tools=False)])
    assert agent.invoke({"messages": [("user", "hi")]}, config)["messages"][-1].text == "hello"
    assert texts(stored(memory, "no-tools"))[-2:] == [("user", "hi"), ("assistant", "hello")]


# -- approvals: HumanInTheLoopMiddleware, resumed in another process -------------------------------


@tool
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


APPROVAL_SURFACES = ["memory-first", "approval-first", "wrap"]


def approval_agent(
    memory: Memory, surface: str, checkpoints: str | InMemorySaver, script: list[Any]
) -> Any:
    """An agent whose ``send_email`` calls wait for a person's approval, over a checkpointer:
    on the SQLite file ``checkpoints``, which several processes share, or the one given."""
    saver: Any = checkpoints
    if isinstance(checkpoints, str):
        saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    approval = HumanInTheLoopMiddleware(interrupt_on={"send_email": True})
    model = ScriptedChatModel(script)
    options: dict[str, Any] = {"tools": [send_email], "checkpointer": saver}
    if surface == "wrap":
        return memory.wrap(make_agent(model, middleware=[approval], **options)), model
    mine = MemoryMiddleware(memory, tools=False)
    middleware = [mine, approval] if surface == "memory-first" else [approval, mine]
    return make_agent(model, middleware=middleware, **options), model


RESUME = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, os.environ["TESTS"])
    from langgraph.types import Command
    from memory_adapters import Memory
    from test_langchain_compose import approval_agent

    memory = Memory(os.environ["URL"], store_options=json.loads(os.environ["OPTIONS"]))
    agent, _ = approval_agent(memory, os.environ["SURFACE"], os.environ["CHECKPOINTS"], ["Sent."])
    decision = Command(resume={"decisions": [{"type": "approve"}]})  # only the decision
    out = agent.invoke(decision, {"configurable": {"thread_id": "approval"}})
    print(json.dumps([m.text for m in out["messages"]]))
    memory.close()
    """
)


@pytest.mark.processes
@pytest.mark.parametrize("surface", APPROVAL_SURFACES)
def test_an_approval_given_in_another_process_completes_the_run_stored_once(
    shared_store: tuple[str, dict[str, Any]], surface: str, tmp_path: Path
) -> None:
    url, options = shared_store
    checkpoints = str(tmp_path / "checkpoints.db")
    config = {"configurable": {"thread_id": "approval"}}
    memory = Memory(url, store_options=options)
    try:
        # process 1 sends the request: the run ends interrupted, waiting for approval
        agent, _ = approval_agent(memory, surface, checkpoints, [call_tool("send_email", to="bob")])
        out = agent.invoke({"messages": [("user", "Email bob")]}, config)
        assert "__interrupt__" in out
        assert [m.type for m in out["messages"]] == ["human", "ai"]
        # process 2 resumes with only the decision
        env = {
            **os.environ,
            "TESTS": str(Path(__file__).parent),
            "URL": url,
            "OPTIONS": json.dumps(options),
            "SURFACE": surface,
            "CHECKPOINTS": checkpoints,
        }
        done = subprocess.run(
            [sys.executable, "-c", RESUME],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == ["Email bob", "", "sent to bob", "Sent."]
        # every message is stored once: the request, the call, its result, the answer
        log = stored(memory, "approval")
        assert texts(log) == [
            ("user", "Email bob"),
            ("assistant", ""),
            ("tool", ""),
            ("assistant", "Sent."),
        ]
        assert log[1].tool_calls[0].name == "send_email"
        assert log[2].tool_results[0].content == "sent to bob"
        # and the next run is shown them once, every call with its result
        agent, model = approval_agent(memory, surface, checkpoints, ["You asked me to email bob."])
        agent.invoke({"messages": [("user", "What did I ask?")]}, config)
        seen = [m for m in model.calls[-1] if not isinstance(m, SystemMessage)]
        check_pairs(seen)
        assert [m.text for m in seen] == [
            "Email bob",
            "",
            "sent to bob",
            "Sent.",
            "What did I ask?",
        ]
        assert len(stored(memory, "approval")) == 6
    finally:
        memory.close()


@pytest.mark.parametrize("surface", APPROVAL_SURFACES)
def test_a_rejected_call_is_stored_once_with_the_reviewers_answer(
    memory: Memory, surface: str
) -> None:
    config = {"configurable": {"thread_id": "reject"}}
    script = [call_tool("send_email", to="eve"), "Not sent."]
    agent, _ = approval_agent(memory, surface, InMemorySaver(), script)
    agent.invoke({"messages": [("user", "Email eve")]}, config)
    no: Command[Any] = Command(resume={"decisions": [{"type": "reject", "message": "not eve"}]})
    asyncio.run(agent.ainvoke(no, config))
    log = stored(memory, "reject")
    assert [m.role for m in log] == ["user", "assistant", "tool", "assistant"]
    result = log[2].tool_results[0]
    assert result.is_error and "not eve" in str(result.content)
    assert log[3].text == "Not sent."


def test_a_wrapped_agent_in_a_session_resumes_the_sessions_thread(memory: Memory) -> None:
    """No thread_id anywhere: memory.wrap runs (and resumes) the session conversation's
    thread."""
    script = [call_tool("send_email", to="bob"), "Sent."]
    agent, _ = approval_agent(memory, "wrap", InMemorySaver(), script)
    with memory.session(user_id="alice", conversation_id="mail"):
        out = agent.invoke({"messages": [("user", "Email bob")]})
        assert "__interrupt__" in out
        yes: Command[Any] = Command(resume={"decisions": [{"type": "approve"}]})
        out = agent.invoke(yes)
        assert [m.text for m in out["messages"]] == ["Email bob", "", "sent to bob", "Sent."]
    assert [m.role for m in stored(memory, "mail", "alice")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
