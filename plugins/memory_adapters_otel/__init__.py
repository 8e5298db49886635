"""OpenTelemetry spans for memory (``pip install "memory-adapters[otel]"``).

With ``opentelemetry-api`` importable, this built-in plugin emits a span for every agent run
(``memory_adapters.run``, from ``run_started`` to ``run_finished`` / ``run_failed``) and, under
it, one for each window read (``memory_adapters.window``), append
(``memory_adapters.append``), fact search (``memory_adapters.search``) and memory tool call
(``memory_adapters.tool``), and one for each background extraction of a conversation
(``memory_adapters.extract``, on the ``Memory``'s worker, with the searches and tool-like writes
it makes under it), through the ``operation_started`` / ``operation_finished`` hooks.
Spans carry what an operator filters on (store, namespace, conversation key, run id,
framework, agent, model, message and token counts, search mode and result count, tool name;
an error sets the span's status) and never message content or fact values, unless the
operator asks for them: ``Memory(telemetry_content=True)`` or
``MEMORY_ADAPTERS_OTEL_CONTENT=1``.

The span hooks are added to a ``Memory`` when it is created with a tracer provider
configured (``opentelemetry.trace.set_tracer_provider``, or an SDK's setup such as
``logfire.configure()``): configure tracing first, then create the ``Memory``. Where no
provider is configured, or ``opentelemetry-api`` is not installed, the plugin adds no hook at
all, so it costs nothing. To trace one ``Memory`` with a provider of its own, register
:class:`OpenTelemetry` yourself::

    memory = Memory(url, plugins=[OpenTelemetry(tracer_provider=provider)])

See docs/operations.md for the attributes.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from memory_adapters.errors import MissingExtra

if TYPE_CHECKING:
    from .spans import OpenTelemetry

__all__ = ["OpenTelemetry"]


def _has_otel() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:
        return False


def memory_adapters_plugins() -> list[object]:
    """The span hooks for a ``Memory`` being created: an :class:`OpenTelemetry` plugin when
    ``opentelemetry-api`` is installed and a tracer provider is configured, else nothing."""
    if not _has_otel():
        return []
    from .spans import OpenTelemetry

    plugin = OpenTelemetry()
    return [plugin] if plugin.tracer() is not None else []


def __getattr__(name: str) -> Any:
    if name != "OpenTelemetry":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _has_otel():
        raise MissingExtra("otel", "opentelemetry-api")
    from .spans import OpenTelemetry

    return OpenTelemetry
