"""LangChain chat models as memory-adapters summarizers:
``Memory(url, summary_tokens=N, summarizer=ChatOpenAI(model="gpt-4o-mini"))``, or any other
``BaseChatModel``. The model gets the instructions as a system message and the previous
summary with the evicted messages as the user's (:func:`memory_adapters.summaries.summary_prompt`);
``ainvoke`` where it can, on the summaries' worker."""

from __future__ import annotations

from typing import Any

from memory_adapters.messages import Message
from memory_adapters.summaries import INSTRUCTIONS, Summarizer, summary_prompt


def chat_model_name(model: Any) -> str:
    """A name for a LangChain chat model: ``langchain:<class>:<model>``."""
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    base = f"langchain:{type(model).__name__}"
    return f"{base}:{name}" if isinstance(name, str) and name else base


class LangChainSummarizer(Summarizer):
    """A LangChain ``BaseChatModel`` asked for the summary."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = chat_model_name(model)

    def _messages(self, previous: str | None, messages: list[Message], max_tokens: int) -> Any:
        from langchain_core.messages import HumanMessage, SystemMessage

        return [
            SystemMessage(INSTRUCTIONS.format(max_tokens=max_tokens)),
            HumanMessage(summary_prompt(previous, messages)),
        ]

    def summarize(self, previous: str | None, messages: list[Message], max_tokens: int) -> str:
        return _content(self.model.invoke(self._messages(previous, messages, max_tokens)))

    async def asummarize(
        self, previous: str | None, messages: list[Message], max_tokens: int
    ) -> str:
        answer = await self.model.ainvoke(self._messages(previous, messages, max_tokens))
        return _content(answer)


def _content(answer: Any) -> str:
    text = getattr(answer, "text", None)  # the text blocks of the content, joined
    if isinstance(text, str):  # a property (older langchain-core: a method)
        return str(text)
    if callable(text):
        text = text()
        if isinstance(text, str):
            return text
    content = getattr(answer, "content", answer)
    return content if isinstance(content, str) else str(content)
