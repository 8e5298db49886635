"""Core operations are written once, as generators of steps, and driven sync or async.

A step is a :class:`StoreCall` (a store method by its sync name; the async driver calls the
``a``-prefixed twin), a :class:`StoreBatch` (store calls that do not depend on each other,
which a store may send in one round trip), a :class:`HookCall` or an :class:`EmbedCall`. The
generator receives each step's result and returns the operation's result; a step that raises
raises at the ``yield`` of the generator (which may handle it, or observe it and re-raise, as
:func:`~memory_adapters.tracing.traced` does). :func:`drive_sync` and :func:`drive_async` run
a generator, so that ``Conversation.window`` and ``Conversation.awindow`` share every line of
logic; :func:`gather` runs several plans side by side, so that the reads of a run's start (its
window, its working memory) cost one round trip.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .asyncs import resolve_async, resolve_sync
from .errors import HookErrorWarning

if TYPE_CHECKING:
    from .embedders import Embedder
    from .hooks import Hooks
    from .store import Store

T = TypeVar("T")
log = logging.getLogger("memory_adapters")


@dataclass(slots=True)
class StoreCall:
    """Call ``store.<method>(*args, **kwargs)`` (or ``store.a<method>`` when async)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StoreBatch:
    """Store calls that do not depend on each other, made together: the result is the list of
    their results, in order (the first call that raises raises). A store sends them in one
    round trip where it can (:meth:`~memory_adapters.store.Store.batch`)."""

    calls: list[StoreCall]


@dataclass(slots=True)
class HookCall:
    """Call hook ``name`` with ``kwargs``; awaitable results are resolved by the driver.

    The result sent back is the list of results, or the single result of a firstresult hook.
    """

    name: str
    kwargs: dict[str, Any]
    firstresult: bool = False
    after_commit: bool = False
    """A notification about a write that already happened: a failing implementation is
    reported with a :class:`HookErrorWarning` instead of failing the caller, who would
    otherwise retry a write that succeeded."""


@dataclass(slots=True)
class EmbedCall:
    """Call ``embedder.embed(texts, input_type)`` (``aembed`` when async).

    The result sent back is the embedder's answer, or the exception it raised (an embedder is
    a remote service as often as not: the plan decides what a failure means)."""

    embedder: Embedder
    texts: list[str]
    input_type: str


def _report(step: HookCall, exc: Exception) -> None:
    log.error("plugin hook %s raised after the write committed", step.name, exc_info=exc)
    warnings.warn(
        f"a {step.name} hook implementation raised {type(exc).__name__}: {exc} "
        "(the write it reports was made and stands)",
        HookErrorWarning,
        stacklevel=4,
    )


Step = StoreCall | StoreBatch | HookCall | EmbedCall
Plan = Generator[Step, Any, T]


def one_call(call: StoreCall) -> Plan[Any]:
    """A plan of one store call (to :func:`gather` calls with plans)."""
    result = yield call
    return result


def gather(*plans: Plan[Any]) -> Plan[list[Any]]:
    """Run ``plans`` side by side; return their results, in order.

    Each round, every plan still going is advanced to its next store call: any other step (a
    hook, an embedding) is made on its own, before the round's store calls. Then their store
    calls (and the calls of their own batches) are made as one :class:`StoreBatch`. So the
    first reads of independent plans share one round trip, and so do their second ones, even
    where one plan calls a hook before it reads (a window observed by a tracing plugin starts
    with ``operation_started``) and the others do not."""
    results: list[Any] = [None] * len(plans)
    pending: dict[int, Step] = {}
    for i, plan in enumerate(plans):
        try:
            pending[i] = next(plan)
        except StopIteration as stop:
            results[i] = stop.value
    while pending:
        for i in list(pending):  # hooks and embeddings first: each plan to its store call
            s = pending[i]
            try:
                while not isinstance(s, StoreCall | StoreBatch):
                    answer = yield s
                    s = plans[i].send(answer)
            except StopIteration as stop:
                results[i] = stop.value
                del pending[i]
            else:
                pending[i] = s
        if not pending:
            break
        answers: dict[int, Any] = {}
        calls: list[tuple[int, StoreCall]] = []  # a plan's own batch joins the round's batch
        for i, s in pending.items():
            if isinstance(s, StoreCall):
                calls.append((i, s))
            elif isinstance(s, StoreBatch):
                answers[i] = []
                calls.extend((i, c) for c in s.calls)
        if len(calls) == 1 and isinstance(pending[calls[0][0]], StoreCall):
            answers[calls[0][0]] = yield calls[0][1]
        elif calls:
            got = yield StoreBatch([s for _, s in calls])
            for (i, _), value in zip(calls, got, strict=True):
                if isinstance(pending[i], StoreBatch):
                    answers[i].append(value)
                else:
                    answers[i] = value
        for i in list(pending):
            try:
                pending[i] = plans[i].send(answers[i])
            except StopIteration as stop:
                results[i] = stop.value
                del pending[i]
    return results


def drive_sync(plan: Plan[T], store: Store, hooks: Hooks) -> T:
    """Run ``plan`` with blocking store calls; hook awaitables run on a private loop."""
    result: Any = None
    error: Exception | None = None
    try:
        while True:
            if error is None:
                step = plan.send(result)
            else:  # a step raised: the plan may handle it (or observe it and re-raise)
                step, error = plan.throw(error), None
            try:
                if isinstance(step, StoreCall):
                    result = getattr(store, step.method)(*step.args, **step.kwargs)
                elif isinstance(step, StoreBatch):
                    result = store.batch(step.calls)
                elif isinstance(step, EmbedCall):
                    try:
                        result = step.embedder.embed(step.texts, step.input_type)  # type: ignore[arg-type]
                    except Exception as exc:
                        result = exc
                elif step.after_commit:
                    try:
                        result = [resolve_sync(r) for r in hooks.call(step)]
                    except Exception as exc:
                        _report(step, exc)
                        result = []
                else:
                    result = hooks.call(step)
                    if step.firstresult:
                        result = resolve_sync(result)
                    else:
                        result = [resolve_sync(r) for r in result]
            except Exception as exc:
                error = exc
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def drive_async(plan: Plan[T], store: Store, hooks: Hooks) -> T:
    """Run ``plan`` with the store's async methods; hook awaitables run on this loop."""
    result: Any = None
    error: Exception | None = None
    try:
        while True:
            if error is None:
                step = plan.send(result)
            else:  # a step raised: the plan may handle it (or observe it and re-raise)
                step, error = plan.throw(error), None
            try:
                if isinstance(step, StoreCall):
                    result = await getattr(store, "a" + step.method)(*step.args, **step.kwargs)
                elif isinstance(step, StoreBatch):
                    result = await store.abatch(step.calls)
                elif isinstance(step, EmbedCall):
                    try:
                        result = await step.embedder.aembed(step.texts, step.input_type)  # type: ignore[arg-type]
                    except Exception as exc:
                        result = exc
                elif step.after_commit:
                    try:
                        result = [await resolve_async(r) for r in hooks.call(step)]
                    except Exception as exc:
                        _report(step, exc)
                        result = []
                else:
                    result = hooks.call(step)
                    if step.firstresult:
                        result = await resolve_async(result)
                    else:
                        result = [await resolve_async(r) for r in result]
            except Exception as exc:
                error = exc
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
