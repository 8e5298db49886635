"""pydantic-ai models and agents as memory-adapters summarizers.

``Memory(url, summary_tokens=N, summarizer="openai:gpt-4o-mini")`` (any pydantic-ai model name,
``provider:model``), ``summarizer=model`` (a pydantic-ai ``Model``, such as a test's
``FunctionModel``) or ``summarizer=agent`` (an ``Agent``: its model, instructions and settings;
a ``MemoryAgent`` is summarized with by the agent it wraps, so that summarizing is not a turn
of a conversation). The prompt holds the instructions, the previous summary and the evicted
messages (:func:`memory_adapters.summaries.summary_prompt`).
"""

from __future__ import annotations

from typing import Any

from memory_adapters.messages import Message
from memory_adapters.summaries import INSTRUCTIONS, Summarizer, summary_prompt


def model_name(model: Any) -> str:
    """``provider:model`` of a pydantic-ai model (or the name it was given)."""
    if isinstance(model, str):
        return model
    system = getattr(model, "system", None) or type(model).__name__
    return f"{system}:{getattr(model, 'model_name', '?')}"


class PydanticAISummarizer(Summarizer):
    """A pydantic-ai agent asked for the summary; its name is its model's ``provider:model``."""

    def __init__(self, agent: Any, name: str) -> None:
        self.agent = agent
        self.name = name

    async def asummarize(
        self, previous: str | None, messages: list[Message], max_tokens: int
    ) -> str:
        prompt = INSTRUCTIONS.format(max_tokens=max_tokens) + "\n\n"
        result = await self.agent.run(prompt + summary_prompt(previous, messages))
        output = result.output
        return output if isinstance(output, str) else str(output)


def make(spec: object) -> Summarizer | None:
    """A :class:`PydanticAISummarizer` for a pydantic-ai ``Agent``, ``Model`` or
    ``provider:model`` name; ``None`` for anything else."""
    from pydantic_ai import Agent
    from pydantic_ai.agent import AbstractAgent, WrapperAgent
    from pydantic_ai.models import Model

    if isinstance(spec, AbstractAgent):
        agent: Any = spec
        while isinstance(agent, WrapperAgent):  # a MemoryAgent: not a turn of a conversation
            agent = agent.wrapped
        model = getattr(agent, "model", None)
        return PydanticAISummarizer(agent, model_name(model) if model else "pydantic-ai:agent")
    if isinstance(spec, Model):
        return PydanticAISummarizer(Agent(spec, output_type=str), model_name(spec))
    if isinstance(spec, str) and ":" in spec:
        return PydanticAISummarizer(Agent(spec, output_type=str), spec)
    return None
