"""A pydantic-ai agent that delegates to a sub-agent, both wrapped with memory.

The parent's tool runs the researcher sub-agent (``await researcher.run(task,
usage=ctx.usage)``). Because it runs inside the parent's run, the researcher works on a fork of
the parent's working memory: it reads the parent's notes, its own notes stay in its fork while
it runs, and they are merged back when it finishes (``merge="child"``, the default). It sees the
same user's long-term facts, and its messages go to a conversation of its own
(``<conversation>/researcher``). Scope comes from resolvers over the run's ``deps``.

Runs offline: the models are ``FunctionModel``s (store: argv[1], ``$MEMORY_ADAPTERS_URL`` or
``sqlite:///memory_adapters_demo.db``):

    pip install ".[pydantic-ai,offline]" && python examples/pydantic_ai_subagents.py

Needs: pip install ".[pydantic-ai,offline]"

Run again on the same store, it continues the conversations the first run stored; other
examples on that store do not touch them (its own namespace).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import Memory, WorkingMemory


@dataclass
class Deps:
    """What the application knows about the request: whose it is, and which thread."""

    user: str
    thread: str


def calls_then_answers(tool: str, args: dict[str, Any], answer: str) -> FunctionModel:
    """A model that calls ``tool`` once, then answers with ``answer`` and the tool's result."""

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"{answer} {returns[0].content}")])
        return ModelResponse(parts=[ToolCallPart(tool, args, f"call-{tool}")])

    return FunctionModel(model)


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else os.environ.get("MEMORY_ADAPTERS_URL")
    memory = Memory(url or "sqlite:///memory_adapters_demo.db", namespace="pydantic_ai_subagents")
    scope = {"user_id": lambda ctx: ctx.deps.user, "conversation_id": lambda ctx: ctx.deps.thread}

    researcher = Agent(
        calls_then_answers("find_shop", {}, "Found:"), name="researcher", deps_type=Deps
    )

    @researcher.tool_plain
    def find_shop() -> str:
        # Inside the sub-agent's run, memory.working is its fork of the parent's notes.
        goal = memory.working.get("goal")
        memory.working.set("shop", "Tea House, 5th Street", importance=0.8)
        print(f"  [researcher] reads the parent's goal: {goal!r}; notes the shop in its fork")
        print(f"  [researcher] the user's facts: {[f.key for f in memory.facts.all()]}")
        return "Tea House, 5th Street"

    planner = Agent(
        calls_then_answers("delegate", {"task": "find a tea shop"}, "Plan ready:"),
        deps_type=Deps,
    )
    wrapped_researcher = memory.wrap(researcher, **scope)

    @planner.tool
    async def delegate(ctx: RunContext[Deps], task: str) -> str:
        parent_notes = WorkingMemory(memory, memory.scope)
        result = await wrapped_researcher.run(task, deps=ctx.deps, usage=ctx.usage)
        print(
            f"  [planner] after the sub-agent, its notes are merged: {parent_notes.get('shop')!r}"
        )
        return str(result.output)

    wrapped_planner = memory.wrap(planner, **scope)
    deps = Deps(user="alice", thread="tasting")
    with memory.session(user_id="alice", conversation_id="tasting"):
        memory.facts.put("favourite_tea", "oolong")
        memory.working.set("goal", "plan an oolong tasting", importance=1.0)
        memory.working.delete("shop")  # a fresh task on every run of the example
    result = wrapped_planner.run_sync("Plan my tea tasting.", deps=deps)
    print(f"planner: {result.output}")
    with memory.session(user_id="alice", conversation_id="tasting"):
        print("working memory now:\n" + memory.working.render())
    with memory.session(user_id="alice", conversation_id="tasting/researcher"):
        print(f"the researcher's own conversation holds {memory.conversation.last_seq()} messages")
    memory.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
