"""``MemoryAgent``: what ``memory.wrap(agent)`` returns for a pydantic-ai agent.

It composes, it does not patch: a :class:`pydantic_ai.agent.WrapperAgent` around the user's
agent whose only change is to add a :class:`~.capability.MemoryCapability` to the
``capabilities`` of every run. pydantic-ai's own entry points (``run``, ``run_sync``,
``run_stream``, ``run_stream_sync``, ``run_stream_events`` and ``iter``) all start their run
through ``iter``, so each of them loads and persists memory, once. The user's agent is not
modified, and remains usable on its own, without memory.

Anything else (``agent.tool``, ``agent.instructions``, ``agent.override`` ...) reaches the
wrapped agent.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.agent import AbstractAgent, AgentRun, WrapperAgent
from pydantic_ai.capabilities import AgentCapability
from pydantic_ai.messages import UserContent
from pydantic_ai.output import OutputDataT
from pydantic_ai.tools import AgentDepsT

from .capability import MemoryCapability


class MemoryAgent(WrapperAgent[AgentDepsT, OutputDataT]):
    """A pydantic-ai agent with memory: ``wrapped`` plus ``capability`` on every run."""

    def __init__(
        self,
        wrapped: AbstractAgent[AgentDepsT, OutputDataT],
        capability: MemoryCapability[AgentDepsT],
    ) -> None:
        super().__init__(wrapped)
        self.capability = capability

    @property
    def memory(self) -> Any:
        """The :class:`~memory_adapters.Memory` this agent remembers with."""
        return self.capability.memory

    @asynccontextmanager
    async def iter(
        self,
        user_prompt: str | Sequence[UserContent] | None = None,
        *,
        capabilities: Sequence[AgentCapability[AgentDepsT]] | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[AgentRun[AgentDepsT, Any]]:
        """The wrapped agent's ``iter``, with the memory capability added to the run's."""
        run_capabilities: list[AgentCapability[AgentDepsT]] = [
            *(capabilities or ()),
            self.capability,
        ]
        async with self.wrapped.iter(
            user_prompt, capabilities=run_capabilities, **kwargs
        ) as agent_run:
            yield agent_run

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":  # not set yet (for example while unpickling)
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return f"MemoryAgent({self.wrapped!r}, memory={self.capability.memory!r})"
