"""A user's script, type-checked with ``mypy --strict`` by tests/test_typing.py: what
``memory.wrap`` returns keeps the agent's types, so a mistake in using its output is caught.
(The project's own mypy run checks it too; it must stay free of errors.)"""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from memory_adapters import Memory
from memory_adapters.testing.langchain import ScriptedChatModel


class City(BaseModel):
    name: str


def main() -> None:
    memory = Memory("memory://")
    agent = memory.wrap(Agent(TestModel(), output_type=City))
    with memory.session(conversation_id="typed"):
        result = agent.run_sync("Where?")
        city: City = result.output  # the agent's output type, kept
        print(city.name.upper())
        graph = memory.wrap(create_agent(ScriptedChatModel([AIMessage("hi")]), tools=[]))
        state = graph.invoke({"messages": [{"role": "user", "content": "hi"}]})
        print(state)


if __name__ == "__main__":
    main()
