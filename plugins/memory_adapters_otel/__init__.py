"""OpenTelemetry spans for memory (``pip install "memory-adapters[otel]"``).

With ``opentelemetry-api`` importable, this built-in plugin emits a span for every agent run
(``memory_adapters.run``, from ``run_started`` to ``run_finished`` / ``run_failed``) and, under
it, one for each window read (``memory_adapters.window``), append
(``memory_adapters.append``), fact search (``memory_adapters.search``) and memory tool call
(``memory_adapters.tool``), through the ``operation_started`` / ``operation_finished`` hooks.
Spans carry what an operator filters on (store, namespace, conversation key, run id,
framework, agent, model, message and token counts, search mode and result count, tool name;
an error sets the span's status) and never message content or fact values, unless the
operator asks for them: ``Memory(telemetry_content=True)`` or
``MEMORY_ADAPTERS_OTEL_CONTENT=1``.

Where ``opentelemetry-api`` is installed, the span hooks are on every ``Memory`` and trace
with the global tracer provider (``opentelemetry.trace.set_tracer_provider``, or an SDK's setup
such as ``logfire.configure()``) whenever one is configured when a run or an operation starts:
tracing may be configured before or after the ``Memory`` is created. The provider is looked up
at each run and operation, and nothing about it is kept that would stop a later one from
being used. While none is configured the hooks are not called at all (the plugin's
``memory_adapters_active()`` says it has nothing to do), so a turn costs what it costs without
the plugin: the same store calls, its reads in one batch. Without ``opentelemetry-api`` the
plugin adds no hook. To trace one ``Memory`` with a provider of its own, register
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
    """The span hooks for a ``Memory`` being created: an :class:`OpenTelemetry` plugin on the
    global tracer provider when ``opentelemetry-api`` is installed, else nothing. It is active
    whenever a provider is configured when a run or an operation starts, configured before the
    ``Memory`` was created or after, and idle (its hooks not called) while none is."""
    if not _has_otel():
        return []
    from .spans import OpenTelemetry

    return [OpenTelemetry()]


def __getattr__(name: str) -> Any:
    if name != "OpenTelemetry":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _has_otel():
        raise MissingExtra("otel", "opentelemetry-api")
    from .spans import OpenTelemetry

    return OpenTelemetry
