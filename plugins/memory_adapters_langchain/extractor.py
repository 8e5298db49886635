"""LangChain chat models as memory-adapters extractors:
``Memory(url, extractor=ChatOpenAI(model="gpt-4o-mini"))``, or any other ``BaseChatModel`` that
calls tools. The model gets :data:`memory_adapters.extraction.INSTRUCTIONS` (and the
``Memory``'s ``extract_instructions``) as a system message, the related facts and the new
messages as the user's (:func:`memory_adapters.extraction.extraction_prompt`), and one tool,
:data:`TOOL_NAME`, whose arguments are the operations (bound with ``bind_tools``, the model
made to call it where the provider supports ``tool_choice``); a model that answers in text
instead may answer the same JSON. ``ainvoke`` where it can, on the ``Memory``'s worker."""

from __future__ import annotations

import json
from typing import Any

from memory_adapters.extraction import Extractor, extraction_prompt, instructions_for
from memory_adapters.facts import Fact
from memory_adapters.messages import Message

from .summarizer import _content, chat_model_name

TOOL_NAME = "record_memory_operations"

TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Record the operations on the user's remembered facts that the new "
        "messages call for (an empty list when nothing is worth remembering).",
        "parameters": {
            "type": "object",
            "properties": {
                "operations": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "op": {"type": "string", "enum": ["add", "update", "forget"]},
                            "key": {
                                "type": "string",
                                "description": "a short snake_case key, e.g. favourite_tea",
                            },
                            "value": {
                                "type": "string",
                                "description": "the fact in one short sentence (not for forget)",
                            },
                            "importance": {"type": "number", "minimum": 0, "maximum": 1},
                        },
                        "required": ["op", "key"],
                    },
                }
            },
            "required": ["operations"],
        },
    },
}
"""The tool the model calls with the operations (an OpenAI tool schema)."""


class LangChainExtractor(Extractor):
    """A LangChain ``BaseChatModel`` made to call :data:`TOOL_NAME` with the operations."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = chat_model_name(model)
        self._bound: Any = None

    def _runnable(self) -> Any:
        if self._bound is None:
            try:
                self._bound = self.model.bind_tools([TOOL], tool_choice=TOOL_NAME)
            except (TypeError, ValueError, NotImplementedError):  # no tool_choice there
                self._bound = self.model.bind_tools([TOOL])
        return self._bound

    def _messages(
        self, messages: list[Message], facts: list[Fact], instructions: str | None
    ) -> Any:
        from langchain_core.messages import HumanMessage, SystemMessage

        return [
            SystemMessage(instructions_for(instructions)),
            HumanMessage(extraction_prompt(messages, facts)),
        ]

    def extract(
        self, messages: list[Message], facts: list[Fact], instructions: str | None = None
    ) -> Any:
        return operations_of(self._runnable().invoke(self._messages(messages, facts, instructions)))

    async def aextract(
        self, messages: list[Message], facts: list[Fact], instructions: str | None = None
    ) -> Any:
        answer = await self._runnable().ainvoke(self._messages(messages, facts, instructions))
        return operations_of(answer)


def operations_of(answer: Any) -> Any:
    """The operations in a chat model's answer: the arguments of its :data:`TOOL_NAME` calls,
    else the JSON of its text (what is not a list of operations is refused by the core)."""
    calls = [c for c in getattr(answer, "tool_calls", None) or [] if c.get("name") == TOOL_NAME]
    if calls:
        ops: list[Any] = []
        for call in calls:
            args = call.get("args") or {}
            found = args.get("operations") if isinstance(args, dict) else None
            if not isinstance(found, list):
                return args  # not operations: the core says so
            ops.extend(found)
        return ops
    text = _content(answer).strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        return json.loads(text) if text else []
    except ValueError:
        return text  # not operations: the core says so
