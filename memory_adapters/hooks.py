"""A typed facade over ``pm.hook``: core code never calls untyped hooks directly.

Each method returns the :class:`~memory_adapters.steps.HookCall` for one event, or ``None``
when no plugin implements that hook (so an unused event costs a set lookup and nothing
else), or when every plugin implementing it says it has nothing to do now (its
``memory_adapters_active()`` returns false: the OpenTelemetry plugin while no tracer provider
is configured). Plans ``yield`` the call; the sync or async driver executes it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .asyncs import resolve_async, resolve_sync
from .errors import PluginWarning
from .steps import HookCall

if TYPE_CHECKING:
    from .embedders import Embedder
    from .extraction import Extractor, FactOp
    from .facts import Fact
    from .messages import Message, Record
    from .plugins import PluginManager
    from .run import Run
    from .scope import Scope
    from .summaries import Summarizer
    from .tracing import Operation
    from .window import Window
    from .working import MergeReport


AFTER_COMMIT = frozenset(
    (
        "after_save",
        "fact_stored",
        "fact_forgotten",
        "working_written",
        "working_merged",
        "operation_started",
        "operation_finished",
    )
)
"""Hooks that report a write already made, or only observe: their failures warn instead of
raising."""

OPERATION_HOOKS = ("operation_started", "operation_finished")


class Hooks:
    """Typed access to the hooks of one plugin manager."""

    __slots__ = ("_pm",)

    def __init__(self, pm: PluginManager) -> None:
        self._pm = pm

    def call(self, step: HookCall) -> Any:
        """Execute a hook call; the results may still be awaitables (see :mod:`.asyncs`)."""
        return getattr(self._pm.hook, step.name)(**step.kwargs)

    def live(self, name: str) -> bool:
        """Whether hook ``name`` is called now: a plugin implements it and, where each plugin
        implementing it has a ``memory_adapters_active()`` method, one of them returns true.
        Asked at every call, never cached, so that a plugin may become active at any time (the
        OpenTelemetry plugin once a tracer provider is configured)."""
        pm = self._pm
        if name not in pm.implemented:
            return False
        gates = pm.gates.get(name)
        return gates is None or _any_active(gates)

    def _step(
        self, name: str, firstresult: bool = False, *, ungated: bool = False, **kwargs: Any
    ) -> HookCall | None:
        """The call of hook ``name``, or ``None`` when it is not :meth:`live`; with
        ``ungated``, whenever it is implemented (a finishing hook whose start was called)."""
        if not (name in self._pm.implemented if ungated else self.live(name)):
            return None
        return HookCall(name, kwargs, firstresult, name in AFTER_COMMIT)

    def notify(self, step: HookCall | None) -> None:
        """Run a notification hook from sync code, outside a plan."""
        if step is not None:
            for r in self.call(step):
                resolve_sync(r)

    async def anotify(self, step: HookCall | None) -> None:
        """Run a notification hook from async code, outside a plan."""
        if step is not None:
            for r in self.call(step):
                await resolve_async(r)

    # -- counting and embedding -------------------------------------------------------------

    def count_tokens(self, texts: list[str], model: str | None) -> HookCall:
        """Token counts for ``texts`` (the built-in counter always answers)."""
        return HookCall("count_tokens", {"texts": texts, "model": model}, True)

    def count_tokens_sync(self, texts: list[str], model: str | None) -> list[int]:
        """Token counts for ``texts``, from sync code."""
        result: list[int] = resolve_sync(self.call(self.count_tokens(texts, model)))
        return result

    async def count_tokens_async(self, texts: list[str], model: str | None) -> list[int]:
        """Token counts for ``texts``, from async code."""
        result: list[int] = await resolve_async(self.call(self.count_tokens(texts, model)))
        return result

    def make_embedder(self, spec: object) -> Embedder | None:
        """The embedder a plugin makes of ``spec`` (``Memory(embed=spec)``), or ``None``."""
        result: Embedder | None = self._pm.hook.make_embedder(spec=spec)
        return result

    def make_summarizer(self, spec: object) -> Summarizer | None:
        """The summarizer a plugin makes of ``spec`` (``Memory(summarizer=spec)``), or
        ``None``."""
        result: Summarizer | None = self._pm.hook.make_summarizer(spec=spec)
        return result

    def make_extractor(self, spec: object) -> Extractor | None:
        """The extractor a plugin makes of ``spec`` (``Memory(extractor=spec)``), or
        ``None``."""
        result: Extractor | None = self._pm.hook.make_extractor(spec=spec)
        return result

    def embed(self, texts: list[str], model: str, input_type: str) -> HookCall | None:
        """Vectors for ``texts`` from a plugin standing in for embedder ``model``."""
        return self._step("embed", True, texts=texts, model=model, input_type=input_type)

    # -- runs --------------------------------------------------------------------------------

    def run_started(self, run: Run) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.run_started`."""
        return self._step("run_started", run=run)

    def history_loaded(self, run: Run | None, window: Window) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.history_loaded`."""
        return self._step("history_loaded", run=run, window=window)

    def before_model_call(
        self, run: Run, messages: list[Message], instructions: list[str]
    ) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.before_model_call`."""
        return self._step(
            "before_model_call", run=run, messages=messages, instructions=instructions
        )

    def run_finished(
        self, run: Run, messages: list[Message], started: bool = False
    ) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.run_finished`. ``started``: ``run_started`` was
        called for this run, so every plugin that saw it sees the end, active now or not."""
        return self._step("run_finished", ungated=started, run=run, messages=messages)

    def run_failed(
        self, run: Run, error: BaseException, messages: list[Message], started: bool = False
    ) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.run_failed` (``started`` as for
        :meth:`run_finished`)."""
        return self._step("run_failed", ungated=started, run=run, error=error, messages=messages)

    # -- persistence --------------------------------------------------------------------------

    def before_save(self, scope: Scope, messages: list[Message]) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.before_save`."""
        return self._step("before_save", scope=scope, messages=messages)

    def after_save(self, scope: Scope, records: list[Record]) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.after_save`."""
        return self._step("after_save", scope=scope, records=records)

    # -- budget ---------------------------------------------------------------------------------

    def select_window(
        self,
        records: list[Record],
        max_tokens: int | None,
        max_messages: int | None,
        opening: bool = False,
    ) -> HookCall:
        """The windowing strategy (the built-in one always answers)."""
        return HookCall(
            "select_window",
            {
                "records": records,
                "max_tokens": max_tokens,
                "max_messages": max_messages,
                "opening": opening,
            },
            True,
        )

    def summarize(
        self, messages: list[Message], previous: str | None, max_tokens: int, model: str | None
    ) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.summarize`."""
        return self._step(
            "summarize",
            True,
            messages=messages,
            previous=previous,
            max_tokens=max_tokens,
            model=model,
        )

    # -- facts and working memory ------------------------------------------------------------

    def fact_stored(self, scope: Scope, fact: Fact) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.fact_stored`."""
        return self._step("fact_stored", scope=scope, fact=fact)

    def facts_proposed(
        self, scope: Scope, operations: list[FactOp], messages: list[Message]
    ) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.facts_proposed`."""
        return self._step("facts_proposed", scope=scope, operations=operations, messages=messages)

    def fact_recalled(self, scope: Scope, key: str, fact: Fact | None) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.fact_recalled`."""
        return self._step("fact_recalled", scope=scope, key=key, fact=fact)

    def facts_searched(self, scope: Scope, query: str, results: list[Fact]) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.facts_searched`."""
        return self._step("facts_searched", scope=scope, query=query, results=results)

    def fact_forgotten(self, scope: Scope, key: str, deleted: bool) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.fact_forgotten`."""
        return self._step("fact_forgotten", scope=scope, key=key, deleted=deleted)

    def working_written(self, path: str, key: str, value: Any, deleted: bool) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.working_written`."""
        return self._step("working_written", path=path, key=key, value=value, deleted=deleted)

    def working_forked(self, parent: str, child: str) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.working_forked`."""
        return self._step("working_forked", parent=parent, child=child)

    def working_merged(self, child: str, parent: str, report: MergeReport) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.working_merged`."""
        return self._step("working_merged", child=child, parent=parent, report=report)

    # -- observing operations --------------------------------------------------------------------

    @property
    def observes_operations(self) -> bool:
        """Whether a plugin observes operations now: ``operation_started`` or
        ``operation_finished`` is :meth:`live`. Asked per operation; when false, the operation
        is run as it is, with no :class:`~memory_adapters.tracing.Operation` built. A plugin
        implementing both hooks is asked once."""
        pm = self._pm
        implemented, gates = pm.implemented, pm.gates
        ask: list[Callable[[], bool]] = []
        for name in OPERATION_HOOKS:
            if name in implemented:
                found = gates.get(name)
                if found is None:
                    return True  # a plugin that is always active
                ask.extend(g for g in found if g not in ask)
        return bool(ask) and _any_active(ask)

    def operation_started(self, operation: Operation) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.operation_started`."""
        return self._step("operation_started", operation=operation)

    def operation_finished(
        self,
        operation: Operation,
        result: Any,
        error: BaseException | None,
        started: bool = False,
    ) -> HookCall | None:
        """See :func:`memory_adapters.hookspecs.operation_finished`. ``started``:
        ``operation_started`` was called for it, so every plugin that saw the start sees the
        end, active now or not."""
        return self._step(
            "operation_finished",
            ungated=started,
            operation=operation,
            result=result,
            error=error,
        )

    # -- the MCP server --------------------------------------------------------------------------

    async def mcp_authenticate(self, token: str, namespace: str) -> Scope | None:
        """See :func:`memory_adapters.hookspecs.mcp_authenticate`: the scope of the first
        implementation that answers, awaited; ``None`` when none does."""
        step = self._step("mcp_authenticate", True, token=token, namespace=namespace)
        if step is None:
            return None
        result: Scope | None = await resolve_async(self.call(step))
        return result

    @property
    def authenticates_mcp(self) -> bool:
        """Whether any plugin implements ``mcp_authenticate``."""
        return self.live("mcp_authenticate")


def _any_active(gates: Sequence[Callable[[], bool]]) -> bool:
    """Whether one of the plugins' ``memory_adapters_active()`` returns true. One that raises
    counts as active (its hooks are called, and report their own failures) and is warned of."""
    for gate in gates:
        try:
            if gate():
                return True
        except Exception as exc:
            warnings.warn(
                f"memory_adapters_active() of plugin {gate!r} raised {type(exc).__name__}: "
                f"{exc}; its hooks are called as if it were active",
                PluginWarning,
                stacklevel=2,
            )
            return True
    return False
