"""One conversation, continued in turn by a pydantic-ai agent and a LangChain agent.

    pip install ".[pydantic-ai,langchain,offline]" && python examples/cross_framework.py

Needs: pip install ".[pydantic-ai,langchain,offline]"

Both agents have memory over the same store and run in the same ``memory.session(...)``, so
they share one conversation and one user's long-term facts. Each turn prints what its model
was shown: the other framework's turns arrive in the model's own message types (pydantic-ai
``ModelRequest`` / ``ModelResponse`` parts, LangChain ``HumanMessage`` / ``AIMessage`` /
``ToolMessage``), tool calls and their results included; its own turns come back exactly as
it wrote them.

Runs offline: the models are a pydantic-ai ``FunctionModel`` and a LangChain
``ScriptedChatModel`` that play tool-calling models. Store: argv[1] (a URL or a file path),
``$MEMORY_ADAPTERS_URL`` or ``sqlite:///memory_adapters_demo.db``. Each run starts a new
conversation; the user's facts stay from run to run (a second run shows the fact's version
grown). Its memory is in its own namespace: other examples on the same store do not touch it.
"""

from __future__ import annotations

import json
import os
import sys
import uuid

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import Memory
from memory_adapters.langchain import MemoryMiddleware
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool

DEFAULT_URL = "sqlite:///memory_adapters_demo.db"


def store_url(argv: list[str]) -> str:
    """The store URL from argv[1] (a URL or a file path), $MEMORY_ADAPTERS_URL, or the default."""
    if len(argv) > 1:
        arg = argv[1]
        return arg if "://" in arg else "sqlite:///" + arg
    return os.environ.get("MEMORY_ADAPTERS_URL") or DEFAULT_URL


# -- the two offline models -----------------------------------------------------------------------

shown_to_pydantic_ai: list[list[ModelMessage]] = []


def pydantic_ai_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Saves a preference it is told about; otherwise sums up the user's turns it was shown."""
    shown_to_pydantic_ai.append(list(messages))
    last = messages[-1]
    if any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart("Noted: oolong.")])
    said = [
        str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]
    if "oolong" in said[-1]:
        args = {"key": "favourite_tea", "value": "the user's favourite tea is oolong"}
        return ModelResponse(parts=[ToolCallPart("save_memory", args, "pai-save-1")])
    return ModelResponse(parts=[TextPart(f"So far you said: {' / '.join(said[:-1])}")])


def langchain_model(messages: list[BaseMessage]) -> AIMessage | str:
    """Searches memory, then asks for the weather, then answers from both results."""
    results = [m for m in messages if isinstance(m, ToolMessage)]
    if not isinstance(messages[-1], ToolMessage):
        return call_tool("search_memory", query="tea")
    if messages[-1].name == "search_memory":
        return call_tool("weather", city="Lisbon")
    found = json.loads(results[-2].text)
    tea = found[0]["value"] if found else "unknown"
    return f"From memory: {tea}. And it is {results[-1].text}."


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


# -- printing what a model was shown ---------------------------------------------------------------


def describe_pydantic_ai(messages: list[ModelMessage]) -> list[str]:
    lines = []
    for m in messages:
        kind = type(m).__name__
        for p in m.parts:
            if isinstance(p, UserPromptPart):
                lines.append(f"{kind} UserPromptPart: {p.content!r}")
            elif isinstance(p, TextPart):
                lines.append(f"{kind} TextPart: {p.content!r}")
            elif isinstance(p, ToolCallPart):
                lines.append(f"{kind} ToolCallPart {p.tool_call_id}: {p.tool_name}({p.args})")
            elif isinstance(p, ToolReturnPart):
                lines.append(f"{kind} ToolReturnPart {p.tool_call_id}: {p.content!r}")
    return lines


def describe_langchain(messages: list[BaseMessage]) -> list[str]:
    lines = []
    for m in messages:
        kind = type(m).__name__
        if isinstance(m, SystemMessage):
            lines.append(f"{kind}: {m.text[:40]!r}...")
        elif isinstance(m, AIMessage) and m.tool_calls:
            calls = ", ".join(f"{c['id']}: {c['name']}({c['args']})" for c in m.tool_calls)
            lines.append(f"{kind} tool_calls=[{calls}]")
        elif isinstance(m, ToolMessage):
            lines.append(f"{kind} {m.tool_call_id}: {m.text!r}")
        else:
            lines.append(f"{kind}: {m.text!r}")
    return lines


def show(who: str, lines: list[str]) -> None:
    print(f"  the {who} model was shown:")
    for line in lines:
        print(f"    {line}")


def main(argv: list[str]) -> int:
    url = store_url(argv)
    conversation = f"tea-{uuid.uuid4().hex[:6]}"
    print(f"store: {url}, conversation: {conversation}\n")
    with Memory(url, namespace="cross_framework") as memory:
        pydantic_ai_agent = memory.wrap(Agent(FunctionModel(pydantic_ai_model)))
        lc_model = ScriptedChatModel([langchain_model])
        langchain_agent = create_agent(
            lc_model,
            tools=[weather],
            system_prompt="You are a tea shop assistant.",
            middleware=[MemoryMiddleware(memory)],
        )
        with memory.session(user_id="alice", conversation_id=conversation):
            prompt = "My favourite tea is oolong."
            print(f"[pydantic-ai] alice: {prompt}")
            print(f"[pydantic-ai] agent: {pydantic_ai_agent.run_sync(prompt).output}\n")

            prompt = "Which tea do I like, and how is the weather in Lisbon?"
            print(f"[LangChain] alice: {prompt}")
            result = langchain_agent.invoke({"messages": [{"role": "user", "content": prompt}]})
            show("LangChain", describe_langchain(lc_model.calls[-1]))
            print(f"[LangChain] agent: {result['messages'][-1].text}\n")

            prompt = "What have I said so far?"
            print(f"[pydantic-ai] alice: {prompt}")
            output = pydantic_ai_agent.run_sync(prompt).output
            show("pydantic-ai", describe_pydantic_ai(shown_to_pydantic_ai[-1]))
            print(f"[pydantic-ai] agent: {output}\n")

            records = memory.conversation.read()
        frameworks = [r.message.framework or "?" for r in records]
        print(f"{conversation} holds {len(records)} messages, written by: {frameworks}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
