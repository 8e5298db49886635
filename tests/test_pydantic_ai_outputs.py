"""What real pydantic-ai agents produce, stored whole on every store: every entry point with
every output kind persists its turn once and the next run (once in another process) is shown
it; approvals and deferred tools resumed from memory alone, in a new process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from memory_adapters_pydantic_ai import to_messages
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    NativeOutput,
    PromptedOutput,
    TextOutput,
    ToolOutput,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.profiles import ModelProfile
from test_pydantic_ai_faults import valid_for_models
from test_pydantic_ai_store import STORES, on_sync_loop, open_memory

from memory_adapters import Memory, Message

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=STORES)
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    yield from open_memory(request.param, request, tmp_path)


class City(BaseModel):
    name: str


class Country(BaseModel):
    code: str


def shout(text: str) -> str:
    return text.upper()


OUTPUTS: dict[str, Any] = {
    "str": str,
    "model": City,
    "union": [City, Country],
    "tool": ToolOutput(City, name="city"),
    "native": NativeOutput(City),
    "prompted": PromptedOutput(City),
    "text": TextOutput(shout),
}
"""Every kind of output_type a pydantic-ai agent takes."""

EXPECTED: dict[str, Any] = {
    "str": "Lisbon",
    "model": City(name="Lisbon"),
    "union": City(name="Lisbon"),
    "tool": City(name="Lisbon"),
    "native": City(name="Lisbon"),
    "prompted": City(name="Lisbon"),
    "text": "LISBON",
}


def _answer(info: AgentInfo) -> tuple[str | None, tuple[str, str] | None]:
    """What a model asked for this output answers: text, or (output tool, JSON args)."""
    mode = info.model_request_parameters.output_mode
    if mode in ("native", "prompted"):
        return json.dumps({"name": "Lisbon"}), None
    if info.output_tools and not info.allow_text_output:
        tool = info.output_tools[0]
        args = {"name": "Lisbon"} if "name" in str(tool.parameters_json_schema) else {"code": "PT"}
        return None, (tool.name, json.dumps(args))
    return "Lisbon", None


def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    text, call = _answer(info)
    if call is not None:
        return ModelResponse(parts=[ToolCallPart(call[0], call[1], "out-1")])
    return ModelResponse(parts=[TextPart(text or "")])


async def stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    text, call = _answer(info)
    if call is not None:
        yield {0: DeltaToolCall(call[0], call[1], tool_call_id="out-1")}
        return
    for i in range(0, len(text or ""), 3):
        yield (text or "")[i : i + 3]


def model() -> FunctionModel:
    """A scripted model that can answer every output kind, streamed or not."""
    profile = ModelProfile(supports_json_schema_output=True, supports_json_object_output=True)
    return FunctionModel(reply, stream_function=stream, profile=profile)


async def _run(agent: Any, prompt: str) -> Any:
    return (await agent.run(prompt)).output


async def _iter(agent: Any, prompt: str) -> Any:
    async with agent.iter(prompt) as run:
        async for _ in run:
            pass
    assert run.result is not None
    return run.result.output


async def _stream(agent: Any, prompt: str) -> Any:
    async with agent.run_stream(prompt) as result:
        return await result.get_output()


async def _events(agent: Any, prompt: str) -> Any:
    output = None
    async with agent.run_stream_events(prompt) as events:
        async for event in events:
            if type(event).__name__ == "AgentRunResultEvent":
                output = event.result.output
    return output


def _stream_sync(agent: Any, prompt: str) -> Any:
    with agent.run_stream_sync(prompt) as result:
        return result.get_output()


ENTRY_POINTS: dict[str, Callable[[Any, str], Any]] = {
    "run": lambda agent, prompt: on_sync_loop(_run(agent, prompt)),
    "run_sync": lambda agent, prompt: agent.run_sync(prompt).output,
    "run_stream": lambda agent, prompt: on_sync_loop(_stream(agent, prompt)),
    "run_stream_sync": _stream_sync,
    "run_stream_events": lambda agent, prompt: on_sync_loop(_events(agent, prompt)),
    "iter": lambda agent, prompt: on_sync_loop(_iter(agent, prompt)),
}


def stored(memory: Memory, conversation_id: str) -> list[Message]:
    with memory.session(conversation_id=conversation_id):
        return [r.message for r in memory.conversation.read()]


def shown(messages: list[ModelMessage]) -> str:
    """Everything a model was shown, as text."""
    return json.dumps(
        [
            [getattr(p, "content", None) or getattr(p, "args", None) for p in m.parts]
            for m in messages
        ],
        default=str,
    )


class Recorder:
    """The next run: a plain agent whose model records what it is shown."""

    def __init__(self) -> None:
        self.seen: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        return ModelResponse(parts=[TextPart("noted")])


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("kind", sorted(OUTPUTS))
def test_every_entry_point_and_output_kind_stores_the_turn_once(
    memory: Memory, entry: str, kind: str
) -> None:
    agent = memory.wrap(Agent(model(), output_type=OUTPUTS[kind]), tools=False)
    conversation = f"{entry}-{kind}"
    with memory.session(conversation_id=conversation):
        assert ENTRY_POINTS[entry](agent, "where is it?") == EXPECTED[kind]
        turn = stored(memory, conversation)
        recorder = Recorder()
        memory.wrap(Agent(FunctionModel(recorder)), tools=False).run_sync("and then?")
    assert [m.text for m in turn if m.role == "user"] == ["where is it?"]  # stored once
    answers = [m.text for m in turn if m.role == "assistant"]
    assert len(answers) == 1 and "Lisbon" in answers[0]  # the answer, for every framework
    assert not any(m.tool_calls for m in turn)  # a structured output is the answer itself
    # the next run was shown the whole turn, valid for the model's API
    seen = recorder.seen[0]
    valid_for_models(seen)
    assert "where is it?" in shown(seen) and "Lisbon" in shown(seen)
    assert len(stored(memory, conversation)) == len(turn) + 2


def test_the_next_run_in_another_process_sees_a_streamed_structured_output(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    memory = Memory(f"sqlite:///{path}")
    agent = memory.wrap(Agent(model(), output_type=City), tools=False)
    with memory.session(conversation_id="trip"):
        assert on_sync_loop(_stream(agent, "where is it?")) == City(name="Lisbon")
    memory.close()
    code = textwrap.dedent(
        f"""
        import json
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart
        from pydantic_ai.models.function import FunctionModel
        from memory_adapters import Memory

        seen = []

        def record(messages, info):
            seen.append(messages)
            return ModelResponse(parts=[TextPart("noted")])

        memory = Memory("sqlite:///{path}")
        agent = memory.wrap(Agent(FunctionModel(record)), tools=False)
        with memory.session(conversation_id="trip"):
            agent.run_sync("and then?")
        kinds = [[p.part_kind for p in m.parts] for m in seen[0]]
        print(json.dumps(kinds))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    kinds = json.loads(out.stdout.strip().splitlines()[-1])
    # the streamed run's output call, its return (what run_stream added), then the new prompt
    # (pydantic-ai sends the return and the prompt as one request)
    assert kinds == [["user-prompt"], ["tool-call"], ["tool-return", "user-prompt"]]


# -- approvals and deferred tools ----------------------------------------------------------------


APPROVAL_AGENT = """
import sys
from pydantic_ai import Agent, CallDeferred, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from memory_adapters import Memory

seen = []


def reply(messages, info):
    seen.append(messages)
    last = messages[-1].parts
    if any(isinstance(p, ToolReturnPart) and p.tool_name == "delete_file" for p in last):
        return ModelResponse(parts=[TextPart("deleted, and the disk is " + DISK)])
    return ModelResponse(
        parts=[
            ToolCallPart("delete_file", {"path": "notes.txt"}, "del-1"),
            ToolCallPart("disk_usage", {}, "du-1"),
            ToolCallPart("long_job", {}, "job-1"),
        ]
    )


DISK = "40% full"
agent = Agent(FunctionModel(reply), output_type=[str, DeferredToolRequests])


@agent.tool_plain(requires_approval=True)
def delete_file(path: str) -> str:
    return "deleted " + path


@agent.tool_plain
def disk_usage() -> str:
    return DISK


@agent.tool_plain
def long_job() -> str:
    raise CallDeferred()


memory = Memory(sys.argv[1])
wrapped = memory.wrap(agent, tools=False)
"""


def test_an_approval_is_resumed_in_a_new_process_with_only_the_decision(tmp_path: Path) -> None:
    """Process 1 asks; the run ends waiting for an approval and a deferred job. Process 2 has
    nothing but the decision and the job's result: no message_history, no state of its own."""
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    request = APPROVAL_AGENT + textwrap.dedent(
        """
        with memory.session(conversation_id="ops"):
            result = wrapped.run_sync("free some space")
        assert isinstance(result.output, DeferredToolRequests), result.output
        approvals = [c.tool_call_id for c in result.output.approvals]
        print(approvals, [c.tool_call_id for c in result.output.calls])
        """
    )
    decide = APPROVAL_AGENT + textwrap.dedent(
        """
        results = DeferredToolResults(approvals={"del-1": True}, calls={"job-1": "job done"})
        with memory.session(conversation_id="ops"):
            result = wrapped.run_sync(deferred_tool_results=results)
        print(result.output)
        print(len(seen[0]))
        """
    )
    for code, expected in ((request, "['del-1'] ['job-1']"), (decide, "deleted, and the disk is")):
        out = subprocess.run(
            [sys.executable, "-c", code, url], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert expected in out.stdout
    memory = Memory(url)
    log = stored(memory, "ops")
    assert [m.role for m in log] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c.id for c in log[1].tool_calls] == ["del-1", "du-1", "job-1"]
    assert sorted(log[1].meta["awaiting"]) == ["del-1", "job-1"]
    results = {t.id: t.content for m in log[2:4] for t in m.tool_results}
    assert results == {"du-1": "40% full", "del-1": "deleted notes.txt", "job-1": "job done"}
    # stored once, and every later window is valid (the approved calls are answered now)
    with memory.session(conversation_id="ops"):
        shown_next = memory.conversation.messages()
        memory.conversation.append([Message.user("thanks")])
        assert memory.conversation.messages()[-1].text == "thanks"
    assert len(shown_next) == 5


def test_a_new_prompt_while_an_approval_waits_leaves_the_waiting_call_out(memory: Memory) -> None:
    """A user who moves on instead of deciding: the waiting call is left out of the window
    (pydantic-ai refuses a new prompt over unprocessed calls), and the run succeeds."""

    def ask(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if isinstance(messages[-1], ModelRequest) and any(
            isinstance(p, ToolReturnPart) for p in messages[-1].parts
        ):
            return ModelResponse(parts=[TextPart("done")])
        if "never mind" in json.dumps([str(p) for p in messages[-1].parts]):
            return ModelResponse(parts=[TextPart("something else, then")])
        return ModelResponse(parts=[ToolCallPart("delete_file", {"path": "x"}, "del-1")])

    agent = Agent(FunctionModel(ask), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return "deleted"

    wrapped = memory.wrap(agent, tools=False)
    with memory.session(conversation_id="moved-on"):
        assert isinstance(wrapped.run_sync("delete x").output, DeferredToolRequests)
        result = wrapped.run_sync("never mind, what's the time?")
        assert result.output == "something else, then"
        valid_for_models(result.all_messages())
        # and a later decision on the abandoned call has nothing to resume
        with pytest.raises(Exception, match=r"tool calls|ModelResponse"):
            wrapped.run_sync(deferred_tool_results=DeferredToolResults(approvals={"del-1": True}))


def test_structured_output_reads_as_the_answer_in_the_neutral_form(memory: Memory) -> None:
    agent = memory.wrap(Agent(model(), output_type=City), tools=False)
    with memory.session(conversation_id="neutral"):
        agent.run_sync("where is it?")
        result = agent.run_sync("and again?")
    log = to_messages(result.all_messages(), {"final_result"})
    assert [(m.role, m.text) for m in log if m.text or m.role == "user"] == [
        ("user", "where is it?"),
        ("assistant", '{"name": "Lisbon"}'),
        ("user", "and again?"),
        ("assistant", '{"name": "Lisbon"}'),
    ]
