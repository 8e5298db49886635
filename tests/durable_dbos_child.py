"""A process running pydantic-ai agents with memory inside DBOS workflows, for
``tests/test_durable_dbos.py``: ``CRASH=<crash> python durable_dbos_child.py start <surface>
<id>`` starts one workflow (id, executor id and conversation id ``id``) and dies (``os._exit``)
where ``crash`` says; ``python durable_dbos_child.py recover <id>...`` recovers those
workflows in a new process and waits for them.

Environment: ``DIR`` (the DBOS system database, the model's log, the markers), ``URL`` (the
memory store). The model is scripted: it saves a fact (``save_memory``), calls ``checkpoint``
(a tool that, under the ``tool`` crash, kills the process), then answers; it logs the messages
of every call it gets, with the workflow id, to ``DIR/model.jsonl``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID, WorkflowHandleAsync
from memory_adapters_pydantic_ai import MemoryCapability, memory_toolset
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSAgent, DBOSDurability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import Memory, hookimpl
from memory_adapters.run import Run

DIR = Path(os.environ["DIR"])
SURFACES = ("durability", "dbos_agent")


def shape(messages: list[ModelMessage]) -> list[list[Any]]:
    """What the model was shown: each message's kind and its parts' kinds and contents."""
    out: list[list[Any]] = []
    for m in messages:
        parts = [
            [p.part_kind, str(getattr(p, "content", "")), getattr(p, "tool_name", None)]
            for p in m.parts
            if p.part_kind != "system-prompt"
        ]
        out.append([m.kind, parts])
    return out


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    with (DIR / "model.jsonl").open("a") as log:
        log.write(json.dumps({"wf": DBOS.workflow_id, "messages": shape(messages)}) + "\n")
    last = messages[-1].parts[-1]
    name = getattr(last, "tool_name", None)
    if last.part_kind == "user-prompt":
        return ModelResponse(parts=[ToolCallPart("save_memory", {"key": "tea", "value": "oolong"})])
    if name == "save_memory":
        return ModelResponse(parts=[ToolCallPart("checkpoint", {})])
    return ModelResponse(parts=[TextPart("Noted: oolong.")])


CRASH = os.environ.get("CRASH", "")


def checkpoint() -> str:
    """A tool step: kills the process the first time, under the ``tool`` crash."""
    if CRASH == "tool":
        os._exit(3)
    return "ok"


class DieAfterSaving:
    """Kills the process once memory has persisted the turn (under the ``saved`` crash)."""

    @hookimpl
    def run_finished(self, run: Run, messages: list[Any]) -> None:
        if CRASH == "saved":
            os._exit(3)


memory = Memory(os.environ["URL"], plugins=[DieAfterSaving()])
model = FunctionModel(script, model_name="scripted")


def agent(name: str, durable: bool) -> Agent[None, str]:
    # a user per conversation: each scenario's facts are its own
    user = lambda ctx: f"user-{ctx.conversation_id}"  # noqa: E731
    if durable:
        capabilities: list[Any] = [DBOSDurability(), MemoryCapability(memory, user_id=user)]
        return Agent(model, name=name, tools=[checkpoint], capabilities=capabilities)
    # DBOSAgent runs only the toolsets the agent was built with (not a capability's): the
    # memory tools go in as a toolset of their own
    return Agent(
        model,
        name=name,
        tools=[checkpoint],
        toolsets=[memory_toolset(memory)],
        capabilities=[MemoryCapability(memory, user_id=user, tools=False)],
    )


durable_agent = agent("durable", True)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    dbos_agent = DBOSAgent(agent("legacy", False))


@DBOS.workflow(name="durable_turn")
async def durable_turn(prompt: str, conversation_id: str) -> str:
    result = await durable_agent.run(prompt, conversation_id=conversation_id)
    return result.output


def launch(executor: str) -> None:
    """Launch DBOS as the executor ``executor``: at launch DBOS recovers that executor's
    pending workflows (none: each start is an executor of its own, dead once it crashed)."""
    config: DBOSConfig = {
        "executor_id": executor,
        "name": "memory-adapters-durable-test",
        "system_database_url": f"sqlite:///{DIR / 'dbos.sqlite'}",
        "application_version": "1",
    }
    DBOS(config=config)
    DBOS.launch()


async def start(surface: str, conversation_id: str) -> None:
    with SetWorkflowID(conversation_id):
        if surface == "durability":
            await durable_turn("My favourite tea is oolong", conversation_id)
        else:
            await dbos_agent.run("My favourite tea is oolong", conversation_id=conversation_id)


async def recover(ids: list[str]) -> None:
    """Recover the workflows of the dead executors (what a restarted executor does at launch
    for its own, and DBOS Conductor for another's), and wait for them."""
    DBOS._recover_pending_workflows(ids)
    for wid in ids:
        handle: WorkflowHandleAsync[str] = await DBOS.retrieve_workflow_async(wid)
        await handle.get_result()


if __name__ == "__main__":
    if sys.argv[1] == "start":
        launch(sys.argv[3])
        asyncio.run(start(sys.argv[2], sys.argv[3]))
    else:
        launch("recovery")
        asyncio.run(recover(sys.argv[2:]))
    DBOS.destroy()
    memory.close()
