"""The span-making hook implementations (imported only where ``opentelemetry-api`` is)."""

from __future__ import annotations

import contextvars
import importlib.metadata as md
import json
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from memory_adapters import hookimpl
from memory_adapters.facts import Fact
from memory_adapters.messages import AppendResult, Message
from memory_adapters.window import Window

if TYPE_CHECKING:
    from memory_adapters.run import Run
    from memory_adapters.scope import Scope
    from memory_adapters.tracing import Operation

TRACER_NAME = "memory_adapters"
PREFIX = "memory_adapters."
RUN_SPAN = "memory_adapters.otel.span"
RUN_TOKENS = "memory_adapters.otel.tokens"
OP_SPAN = "memory_adapters.otel.span"
OP_TOKEN = "memory_adapters.otel.context"
_CONTAINERS = frozenset(("tool", "extract"))
"""Operations that others run inside (a memory tool's search): their span becomes the current
one while they last. The rest (windows, appends, searches) hold none, and the core runs some of
them side by side (a run's window with its working memory, a LangChain run's steps), so they
never change the current span: each is a child of the operation or run it belongs to."""
MAX_CONTENT = 16_384
"""Characters of content kept in one attribute (when content is asked for)."""

_UNCONFIGURED = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
"""What ``get_tracer_provider()`` returns while no provider is configured (or a no-op one)."""

_OPEN: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "memory_adapters.otel.open", default=None
)
"""The span of the innermost operation open in this context (operations nest: a search made
by a tool)."""


class OpenTelemetry:
    """Emits OpenTelemetry spans for runs, windows, appends, fact searches and memory tool
    calls (see :mod:`memory_adapters_otel`).

    ``tracer_provider`` is the provider to use; ``None`` uses the global one
    (``opentelemetry.trace.set_tracer_provider``), looked up at every operation: nothing is
    emitted while none is configured, and spans from the first operation after one is,
    whenever the ``Memory`` was created.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._provider = tracer_provider
        self._cached: tuple[trace.TracerProvider, trace.Tracer] | None = None

    def memory_adapters_active(self) -> bool:
        """Whether a tracer provider is configured now (asked by the host before it calls
        these hooks, at every run and operation: while this says false, they are not called
        and memory builds nothing for them)."""
        return not isinstance(self._provider or trace.get_tracer_provider(), _UNCONFIGURED)

    def tracer(self) -> trace.Tracer | None:
        """The tracer to use, or ``None`` when no tracer provider is configured."""
        provider = self._provider or trace.get_tracer_provider()
        cached = self._cached
        if cached is not None and cached[0] is provider:
            return cached[1]
        if isinstance(provider, _UNCONFIGURED):
            return None  # nothing configured: no spans, no work
        tracer = provider.get_tracer(TRACER_NAME, _version())
        self._cached = (provider, tracer)
        return tracer

    # -- runs ------------------------------------------------------------------------------------

    @hookimpl
    def run_started(self, run: Run) -> None:
        """Open the run's span: a child of the current span, or else of the parent run's."""
        tracer = self.tracer()
        if tracer is None:
            return
        parent_ctx = None
        if not trace.get_current_span().get_span_context().is_valid and run.parent is not None:
            parent_span = run.parent.state.get(RUN_SPAN)
            if parent_span is not None:
                parent_ctx = trace.set_span_in_context(parent_span)
        attributes = _scope_attributes(run.scope)
        attributes.update(
            {
                PREFIX + "run.id": run.run_id,
                PREFIX + "run.framework": run.framework,
                "gen_ai.conversation.id": run.scope.conversation_id or "",
            }
        )
        if run.agent:
            attributes["gen_ai.agent.name"] = run.agent
        if run.model:
            attributes["gen_ai.request.model"] = run.model
        if run.parent is not None:
            attributes[PREFIX + "run.parent_id"] = run.parent.run_id
        run.state[RUN_SPAN] = tracer.start_span(
            "memory_adapters.run", parent_ctx, SpanKind.INTERNAL, attributes
        )
        run.state[RUN_TOKENS] = 0

    @hookimpl
    def run_finished(self, run: Run, messages: list[Message]) -> None:
        """Close the run's span with the count of messages it persisted and their tokens."""
        self._end_run(run, messages, None)

    @hookimpl
    def run_failed(self, run: Run, error: BaseException, messages: list[Message]) -> None:
        """Close the run's span as failed."""
        self._end_run(run, messages, error)

    def _end_run(self, run: Run, messages: list[Message], error: BaseException | None) -> None:
        span: Span | None = run.state.pop(RUN_SPAN, None)
        if span is None:
            return
        span.set_attribute(PREFIX + "run.messages", len(messages))
        span.set_attribute(PREFIX + "run.tokens", int(run.state.pop(RUN_TOKENS, 0)))
        _end(span, error)

    # -- operations ------------------------------------------------------------------------------

    @hookimpl
    def operation_started(self, operation: Operation) -> None:
        """Open the operation's span, under the operation it is part of, else its run."""
        tracer = self.tracer()
        if tracer is None:
            return
        run_span = None if operation.run is None else operation.run.state.get(RUN_SPAN)
        parent_ctx = None
        if _OPEN.get() is None and run_span is not None:
            parent_ctx = trace.set_span_in_context(run_span)
        attributes = _scope_attributes(operation.scope)
        attributes[PREFIX + "store"] = operation.store
        if operation.run is not None:
            attributes[PREFIX + "run.id"] = operation.run.run_id
        if operation.name == "tool":
            tool = str(operation.attributes.get("tool", ""))
            attributes["gen_ai.operation.name"] = "execute_tool"
            attributes["gen_ai.tool.name"] = tool
            attributes[PREFIX + "tool.name"] = tool
            for name in ("caller", "client"):  # who called, when the host says (the MCP server)
                if operation.attributes.get(name):
                    attributes[PREFIX + "tool." + name] = str(operation.attributes[name])
            if operation.capture_content:
                attributes[PREFIX + "tool.arguments"] = _json(operation.content.get("arguments"))
        elif operation.name == "search":
            attributes[PREFIX + "search.limit"] = int(operation.attributes.get("limit", 0))
            if operation.capture_content:
                attributes[PREFIX + "search.query"] = _clip(str(operation.content.get("query")))
        elif operation.name == "extract":
            attributes[PREFIX + "extractor"] = str(operation.attributes.get("extractor", ""))
        if run_span is not None and operation.name in ("window", "append"):
            run_span.set_attribute(PREFIX + "store", operation.store)
        span = tracer.start_span(
            "memory_adapters." + operation.name, parent_ctx, SpanKind.INTERNAL, attributes
        )
        operation.state[OP_SPAN] = span
        if operation.name in _CONTAINERS:
            operation.state[OP_TOKEN] = (
                otel_context.attach(trace.set_span_in_context(span, parent_ctx)),
                _OPEN.set(span),
            )

    @hookimpl
    def operation_finished(
        self, operation: Operation, result: Any, error: BaseException | None
    ) -> None:
        """Close the operation's span with what came of it."""
        span: Span | None = operation.state.pop(OP_SPAN, None)
        if span is None:
            return
        tokens = operation.state.pop(OP_TOKEN, None)
        if tokens is not None:
            ctx_token, open_token = tokens
            _OPEN.reset(open_token)
            otel_context.detach(ctx_token)
        content = operation.capture_content
        if isinstance(result, Window):
            _window_attributes(span, result, content)
        elif isinstance(result, AppendResult):
            n = operation.attributes.get("messages")
            tokens = int(operation.attributes.get("tokens", 0))
            if n is not None:
                span.set_attribute(PREFIX + "append.messages", int(n))
                span.set_attribute(PREFIX + "append.tokens", tokens)
            span.set_attribute(PREFIX + "append.first_seq", result.first_seq)
            span.set_attribute(PREFIX + "append.last_seq", result.last_seq)
            span.set_attribute(PREFIX + "append.duplicate", result.duplicate)
            run = operation.run
            if run is not None and RUN_TOKENS in run.state and not result.duplicate:
                run.state[RUN_TOKENS] += tokens
            if content:
                messages = operation.content.get("messages") or []
                span.set_attribute(PREFIX + "append.content", _messages_json(messages))
        elif operation.name == "search":
            if "mode" in operation.attributes:
                span.set_attribute(PREFIX + "search.mode", str(operation.attributes["mode"]))
            if isinstance(result, list):
                span.set_attribute(PREFIX + "search.results", len(result))
                if content:
                    span.set_attribute(PREFIX + "search.facts", _facts_json(result))
        elif operation.name == "tool" and isinstance(result, str) and content:
            span.set_attribute(PREFIX + "tool.result", _clip(result))
        elif operation.name == "extract" and isinstance(result, list):
            # ExtractionResult, one per extractor call (memory_adapters.extraction)
            span.set_attribute(PREFIX + "extract.calls", len(result))
            span.set_attribute(PREFIX + "extract.applied", sum(r.applied for r in result))
            span.set_attribute(PREFIX + "extract.dropped", sum(r.dropped for r in result))
            if result:
                span.set_attribute(PREFIX + "extract.first_seq", result[0].start_seq)
                span.set_attribute(PREFIX + "extract.last_seq", result[-1].end_seq)
        _end(span, error)


def _end(span: Span, error: BaseException | None) -> None:
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.set_attribute("error.type", type(error).__qualname__)
        span.record_exception(error)
    span.end()


def _scope_attributes(scope: Scope) -> dict[str, Any]:
    out: dict[str, Any] = {PREFIX + "namespace": scope.namespace}
    if scope.conversation_id is not None:
        out[PREFIX + "conversation"] = scope.conversation_key
    return out


def _window_attributes(span: Span, window: Window, content: bool) -> None:
    span.set_attribute(PREFIX + "window.messages", len(window.pinned) + len(window.records))
    span.set_attribute(PREFIX + "window.tokens", window.tokens)
    span.set_attribute(PREFIX + "window.pinned", len(window.pinned))
    span.set_attribute(PREFIX + "window.summary", window.summary is not None)
    span.set_attribute(PREFIX + "window.left_out", len(window.left_out))
    span.set_attribute(PREFIX + "window.last_seq", window.last_seq)
    if window.max_tokens is not None:
        span.set_attribute(PREFIX + "window.max_tokens", window.max_tokens)
    if window.max_messages is not None:
        span.set_attribute(PREFIX + "window.max_messages", window.max_messages)
    if content:
        span.set_attribute(PREFIX + "window.content", _messages_json(window.messages()))


def _messages_json(messages: list[Message]) -> str:
    return _json(
        [
            {
                "role": m.role,
                "text": m.text,
                "tool_calls": [{"name": c.name, "args": c.args} for c in m.tool_calls],
                "tool_results": [r.content for r in m.tool_results],
            }
            for m in messages
            if isinstance(m, Message)
        ]
    )


def _facts_json(facts: list[Any]) -> str:
    return _json([{"key": f.key, "value": f.value} for f in facts if isinstance(f, Fact)])


def _json(value: Any) -> str:
    return _clip(json.dumps(value, ensure_ascii=False, default=str))


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CONTENT else text[:MAX_CONTENT] + "…"


def _version() -> str | None:
    try:
        return md.version("memory-adapters")
    except md.PackageNotFoundError:  # pragma: no cover - a source tree never installed
        return None
