"""pydantic-ai models and agents as memory-adapters extractors.

``Memory(url, extractor="openai:gpt-4o-mini")`` (any pydantic-ai model name, ``provider:model``),
``extractor=model`` (a pydantic-ai ``Model``, such as a test's ``FunctionModel``) or
``extractor=agent`` (an ``Agent``: its model and settings; a ``MemoryAgent`` extracts with the
agent it wraps, so that extracting is not a turn of a conversation). The model is asked, with
:data:`memory_adapters.extraction.INSTRUCTIONS` (and the ``Memory``'s
``extract_instructions``), for structured output: an :class:`Operations` object, through
pydantic-ai's output tool (``final_result``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from memory_adapters.extraction import Extractor, extraction_prompt, instructions_for
from memory_adapters.facts import Fact
from memory_adapters.messages import Message

from .summarizer import model_name


class Operation(BaseModel):
    """One proposed operation on the user's remembered facts."""

    op: Literal["add", "update", "forget"] = Field(
        description="add a new fact, update a remembered one (by key), or forget one"
    )
    key: str = Field(description="a short snake_case key, e.g. favourite_tea")
    value: str | None = Field(
        default=None, description="the fact in one short sentence (not for forget)"
    )
    importance: float | None = Field(
        default=None, ge=0, le=1, description="how important the fact is, from 0 to 1"
    )


class Operations(BaseModel):
    """The operations the new messages call for (none when nothing is worth remembering)."""

    operations: list[Operation] = Field(default_factory=list)


class PydanticAIExtractor(Extractor):
    """A pydantic-ai agent asked for :class:`Operations`; its name is its model's
    ``provider:model``."""

    def __init__(self, agent: Any, name: str, model: Any = None) -> None:
        self.agent = agent
        self.name = name
        self.model = model
        """The model to run the agent with (for an ``Agent`` given as it is: ``None``)."""

    async def aextract(
        self, messages: list[Message], facts: list[Fact], instructions: str | None = None
    ) -> list[Any]:
        result = await self.agent.run(
            extraction_prompt(messages, facts),
            output_type=Operations,
            instructions=instructions_for(instructions),
            model=self.model,
        )
        output = result.output
        if not isinstance(output, Operations):
            return output  # type: ignore[no-any-return]  # checked by the core: dropped
        return [op.model_dump() for op in output.operations]


def make(spec: object) -> Extractor | None:
    """A :class:`PydanticAIExtractor` for a pydantic-ai ``Agent``, ``Model`` or
    ``provider:model`` name; ``None`` for anything else."""
    from pydantic_ai import Agent
    from pydantic_ai.agent import AbstractAgent, WrapperAgent
    from pydantic_ai.models import Model

    if isinstance(spec, AbstractAgent):
        agent: Any = spec
        while isinstance(agent, WrapperAgent):  # a MemoryAgent: not a turn of a conversation
            agent = agent.wrapped
        model = getattr(agent, "model", None)
        return PydanticAIExtractor(agent, model_name(model) if model else "pydantic-ai:agent")
    if isinstance(spec, Model):
        return PydanticAIExtractor(Agent(spec), model_name(spec))
    if isinstance(spec, str) and ":" in spec:
        return PydanticAIExtractor(Agent(spec), spec)
    return None
