"""A scripted LangChain chat model for testing agents offline (needs the ``langchain`` extra).

:class:`ScriptedChatModel` answers from a script instead of a provider, supports
``bind_tools`` (so ``create_agent`` can give it tools) and records every call it gets, so a
test can assert what the model was shown::

    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from memory_adapters.testing.langchain import ScriptedChatModel, call_tool

    model = ScriptedChatModel([call_tool("save_memory", key="tea", value="oolong"), "Noted."])
    agent = create_agent(model, tools=[...])

A script entry is an ``AIMessage``, a string (a text answer) or a callable that receives the
messages the model is shown and returns either. When the script runs out the model repeats
its last entry (or answers ``"ok"`` with an empty script).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

ScriptEntry = AIMessage | str | Callable[[list[BaseMessage]], "AIMessage | str"]


def call_tool(name: str, /, **args: Any) -> AIMessage:
    """A script entry: the model calls tool ``name`` with ``args`` (a fresh call id)."""
    return AIMessage(
        content="", tool_calls=[{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}"}]
    )


class ScriptedChatModel(BaseChatModel):
    """A chat model that plays a script and records what it was shown.

    ``calls`` holds, per model call, the messages it received (system message included);
    ``tools`` the names of the tools bound for each call.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: list[Any] = Field(default_factory=list)
    model_name: str = "scripted"
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    tools: list[list[str]] = Field(default_factory=list)
    _position: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, script: Sequence[ScriptEntry] = (), **kwargs: Any) -> None:
        fields: dict[str, Any] = {"script": list(script), **kwargs}
        super().__init__(**fields)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools the way provider models do (as OpenAI tool schemas)."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _next(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        with self._lock:
            self.calls.append(list(messages))
            self.tools.append([t["function"]["name"] for t in tools])
            if not self.script:
                entry: Any = "ok"
            else:
                entry = self.script[min(self._position, len(self.script) - 1)]
                self._position += 1
        if callable(entry) and not isinstance(entry, AIMessage):
            entry = entry(list(messages))
        if isinstance(entry, str):
            return AIMessage(content=entry)
        if isinstance(entry, AIMessage):
            return entry.model_copy(deep=True)
        raise TypeError(f"a script entry gave {type(entry).__name__}, not an AIMessage or str")

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self._next(messages, kwargs.get("tools") or [])
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop, None, **kwargs)

    def seen_texts(self, call: int = -1) -> list[str]:
        """The texts of the messages the model was shown in call ``call`` (default: the last)."""
        return [m.text for m in self.calls[call]]
