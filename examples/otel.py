"""OpenTelemetry spans of one agent run, printed by the SDK's console exporter.

A pydantic-ai agent (a scripted FunctionModel: offline, no key) saves a fact with a memory
tool and answers; memory-adapters' built-in OpenTelemetry plugin emits a span for the run and,
under it, for the window read, the tool call and the append, with what an operator filters on
(store, conversation, run id, message and token counts) and no message content.

    pip install ".[pydantic-ai,offline,otel-sdk]" && python examples/otel.py [PATH-OR-URL]

Needs: pip install ".[pydantic-ai,offline,otel-sdk]"

Tracing may be configured before or after the ``Memory`` is created: the plugin traces
whenever a tracer provider is configured when a run starts (while none is, it is idle and
costs nothing). Set ``MEMORY_ADAPTERS_OTEL_CONTENT=1`` to see message content in the spans
too.
"""

from __future__ import annotations

import json
import os
import sys
import uuid

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import Memory

DEFAULT_URL = "sqlite:///memory_adapters_demo.db"


def one_line(span: ReadableSpan) -> str:
    """A span as one line: its name, its parent, its memory attributes."""
    attributes = {
        k.removeprefix("memory_adapters."): v
        for k, v in (span.attributes or {}).items()
        if k.startswith(("memory_adapters.", "gen_ai."))
    }
    parent = f"{span.parent.span_id:016x}" if span.parent else "-"
    me = f"{span.context.span_id:016x}" if span.context else "?"
    return f"{span.name} id={me} parent={parent} {json.dumps(attributes, sort_keys=True)}\n"


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Save a fact with the memory tool, then answer (what a real model would do)."""
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart("Noted: oolong it is.")])
    call = ToolCallPart("save_memory", {"key": "favourite_tea", "value": "oolong"})
    return ModelResponse(parts=[call])


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
    trace.set_tracer_provider(provider)  # before or after creating the Memory: either works

    arg = sys.argv[1] if len(sys.argv) > 1 else None
    url = arg or os.environ.get("MEMORY_ADAPTERS_URL") or DEFAULT_URL
    if "://" not in url:
        url = f"sqlite:///{url}"
    with Memory(url, embed=False, namespace="otel") as memory:
        agent = memory.wrap(Agent(FunctionModel(model)))
        with memory.session(user_id="alice", conversation_id=f"otel-{uuid.uuid4().hex[:8]}"):
            print("agent:", agent.run_sync("My favourite tea is oolong.").output)
    provider.shutdown()


if __name__ == "__main__":
    main()
