"""The hook specification: every event in memory's lifecycle, and the contract of each.

Plugins implement these with ``@memory_adapters.hookimpl``; the docstrings below are the
contract, and ``docs/hooks.md`` is generated from them (``python -m memory_adapters.docgen``;
a test keeps the page in step).

**Async policy.** pluggy calls hooks synchronously. Any implementation may instead return an
awaitable (for example by calling an ``async def`` helper); memory-adapters awaits it before
it goes on. From async code the awaitable runs on the caller's event loop; from sync code it
is run to completion on a private event loop (in a worker thread when the calling thread
already runs a loop). Hooks marked *firstresult* stop at the first implementation that
returns something other than ``None``, and an awaitable is not ``None``: an async
implementation of a firstresult hook must decide synchronously whether it answers, and
return ``None`` when it does not, or an awaitable of its answer when it does.

**Mutating hooks.** Hooks that may rewrite something (``history_loaded``,
``before_model_call``, ``before_save``) receive a mutable object and change it in place, as
``pytest_collection_modifyitems`` does; their return value is ignored.

**Cost.** A hook with no implementation is not called at all: the host keeps the set of
implemented hooks and skips the rest, so an unused event costs one set lookup.

**Idle plugins.** A plugin that has nothing to do until something is configured (the
OpenTelemetry plugin, until a tracer provider is) may have a method
``memory_adapters_active() -> bool``, not a hook. Before it calls a hook that only such
plugins implement, the host asks their ``memory_adapters_active()`` and calls the hook only
when one of them returns true; when none does, the event costs what an unimplemented one
does (no :class:`~memory_adapters.tracing.Operation` is built for ``operation_started``).
It is asked at every call and never cached, so it must be cheap, and the plugin may become
active at any time. A hook that some other plugin implements too is called as usual, so the
plugin's implementations must still return at once when it is idle. ``operation_finished``,
``run_finished`` and ``run_failed`` reach every plugin that got the matching start, active by
then or not. A ``memory_adapters_active()`` that raises counts as true, with a
:class:`~memory_adapters.errors.PluginWarning`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from .embedders import Embedder
    from .extraction import Extractor, FactOp
    from .facts import Fact
    from .messages import Message, Record
    from .run import Run
    from .scope import Scope
    from .summaries import Summarizer
    from .tracing import Operation
    from .window import Window
    from .working import MergeReport

PROJECT = "memory_adapters"

hookspec = pluggy.HookspecMarker(PROJECT)
"""Marks a function in this module as a hook specification."""

hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin's function as the implementation of the hook of the same name."""


# --- registration ----------------------------------------------------------------------------


@hookspec
def register_stores(register: Callable[..., None]) -> None:
    """Register store factories by URL scheme.

    Call ``register(scheme, factory)`` once per scheme (``"sqlite"``, ``"postgresql"``...).
    ``factory(url: str, **options) -> Store`` builds a store for a URL of that scheme; the
    options are the keyword arguments given to ``Memory(url, store_options={...})``. A factory
    should import its driver inside the call and raise
    :class:`~memory_adapters.errors.MissingExtra` when it is missing, so that loading the
    plugin never fails for a user who did not install the extra.

    The host records which plugin registered each scheme. Two plugins registering the same
    scheme is an error, except that a ``trylast`` implementation (a built-in fallback) gives
    way silently to any other.
    """


@hookspec
def register_adapters(register: Callable[..., None]) -> None:
    """Register framework adapters.

    Call ``register(adapter)`` with an object that has a ``name: str``, a
    ``handles(obj) -> bool`` method and a ``wrap(obj, memory, **options)`` method returning
    something with the same call surface as ``obj``. ``Memory.wrap(obj)`` asks each adapter
    in registration order and uses the first that handles ``obj``. ``handles`` must not
    import a framework the user did not install (check ``sys.modules`` first).
    """


@hookspec(firstresult=True)
def count_tokens(texts: list[str], model: str | None) -> list[int] | None:
    """Count the tokens of each text as ``model`` would see it (``model`` may be ``None``).

    Return one count per text, or ``None`` to let the next implementation answer. This is
    how a token counter is installed: the built-in tiktoken counter is ``trylast``, so any
    plugin implementing this hook replaces it. Counts are computed once, when a message is
    written, and stored with it. *firstresult*.
    """


@hookspec(firstresult=True)
def make_embedder(spec: object) -> Embedder | None:
    """Turn what the application gave as ``Memory(url, embed=spec)`` into an
    :class:`~memory_adapters.embedders.Embedder`, or return ``None`` when this plugin does not
    know ``spec``.

    ``spec`` is ``None`` when the application chose nothing: a plugin offering a default
    embedder answers then (the built-in all-MiniLM-L6-v2 plugin does when the ``embeddings``
    extra is installed; the WordLlama plugin, ``trylast``, when only the ``wordllama`` extra
    is); otherwise a name (``"minilm"``, ``"wordllama"``,
    ``"openai:text-embedding-3-small"``) or an object (a pydantic-ai ``Embedder``, a LangChain
    ``Embeddings``, a callable). Answer without importing a framework the user did not install
    (check ``sys.modules`` for objects). *firstresult*: the first answer wins; the built-in
    fallback for :class:`~memory_adapters.embedders.Embedder` instances and plain callables is
    ``trylast``.
    """


@hookspec(firstresult=True)
def make_summarizer(spec: object) -> Summarizer | None:
    """Turn what the application gave as ``Memory(url, summarizer=spec)`` into a
    :class:`~memory_adapters.summaries.Summarizer`, or return ``None`` when this plugin does
    not know ``spec``.

    ``spec`` is a pydantic-ai model name (``"openai:gpt-4o-mini"``) or an object (a pydantic-ai
    ``Model`` or ``Agent``, a LangChain chat model, a callable). Answer without importing a
    framework the user did not install (check ``sys.modules`` for objects). *firstresult*: the
    first answer wins; the built-in fallback for
    :class:`~memory_adapters.summaries.Summarizer` instances and plain callables
    ``fn(previous_summary, messages) -> str`` is ``trylast``.
    """


@hookspec(firstresult=True)
def make_extractor(spec: object) -> Extractor | None:
    """Turn what the application gave as ``Memory(url, extractor=spec)`` into an
    :class:`~memory_adapters.extraction.Extractor`, or return ``None`` when this plugin does
    not know ``spec``.

    ``spec`` is a pydantic-ai model name (``"openai:gpt-4o-mini"``) or an object (a pydantic-ai
    ``Model`` or ``Agent``, a LangChain chat model, a callable). Answer without importing a
    framework the user did not install (check ``sys.modules`` for objects). *firstresult*: the
    first answer wins; the built-in fallback for
    :class:`~memory_adapters.extraction.Extractor` instances and plain callables
    ``fn(messages, facts) -> list`` of operations is ``trylast``.
    """


@hookspec(firstresult=True)
def embed(texts: list[str], model: str, input_type: str) -> list[list[float]] | None:
    """Vectors for ``texts`` in place of embedder ``model`` (its
    :attr:`~memory_adapters.embedders.Embedder.name`), or ``None`` to let the embedder compute
    them — for a cache, a proxy or a test counting what is embedded. ``input_type`` is
    ``"document"`` (facts being stored) or ``"query"`` (a search). Return one vector per text;
    vectors must be what the embedder would return (they are stored under ``model``).
    *firstresult*.
    """


# --- a run -----------------------------------------------------------------------------------


@hookspec
def run_started(run: Run) -> None:
    """An adapter is starting an agent run under ``run.scope``. ``run.state`` is a dict the
    plugin may use to carry data to the later hooks of the same run."""


@hookspec
def history_loaded(run: Run | None, window: Window) -> None:
    """The window of past messages for a run has been read and trimmed to its budget.

    Change ``window.records``, ``window.pinned`` or ``window.summary`` in place to rewrite
    what the model will be shown; the changes are not persisted. ``run`` is ``None`` when the
    window is read outside a run.
    """


@hookspec
def before_model_call(run: Run, messages: list[Message], instructions: list[str]) -> None:
    """The model is about to be called with ``messages`` and extra ``instructions`` (the
    memory fragments: tool guidance, working memory, preloaded facts). Change either list in
    place; nothing is persisted from here."""


@hookspec
def run_finished(run: Run, messages: list[Message]) -> None:
    """A run completed; ``messages`` are the new messages it persisted."""


@hookspec
def run_failed(run: Run, error: BaseException, messages: list[Message]) -> None:
    """A run raised ``error``; ``messages`` are what completed before it and was persisted,
    marked ``meta["failed"] = True``. The error is re-raised to the caller afterwards."""


# --- persistence ---------------------------------------------------------------------------


@hookspec
def before_save(scope: Scope, messages: list[Message]) -> None:
    """A turn's messages are about to be appended to ``scope``'s conversation.

    Change the messages in place (redact text, encrypt ``raw``) or replace items of the list;
    what the list holds afterwards is what is stored. Token counts are computed after this
    hook, so they describe the stored form.
    """


@hookspec
def after_save(scope: Scope, records: list[Record]) -> None:
    """A turn was appended; ``records`` are the stored messages with their seqs. Not called
    for a retried persist that its idempotency key made a no-op."""


# --- budget ---------------------------------------------------------------------------------


@hookspec(firstresult=True)
def select_window(
    records: list[Record], max_tokens: int | None, max_messages: int | None, opening: bool
) -> list[Record] | None:
    """Choose the tail of the window from ``records``: the newest records after the pinned
    messages and the summary, read from the store within the budget (the store never reads
    more than that). ``max_tokens`` / ``max_messages`` are what the pins and the summary left
    of the budget; ``opening`` is true when ``records`` begin at the conversation's start
    (right after the pins), where a window may open with any role.

    Return the records to show the model, in order, or ``None`` to leave it to the next
    implementation. The built-in strategy (``trylast``) keeps the newest whole turns that fit:
    it starts at a user message, or at the opening when everything fits. Whatever an
    implementation returns, the host then holds it to the window's rules: records over the
    limits are cut from the front, a window that does not start at the opening starts at its
    first user message, and tool calls without their results, and results without their
    calls, are left out (see :mod:`memory_adapters.window`). *firstresult*.
    """


@hookspec(firstresult=True)
def summarize(
    messages: list[Message], previous: str | None, max_tokens: int, model: str | None
) -> str | None:
    """Summarize messages evicted from the window, continuing the ``previous`` summary of
    even earlier ones, in at most about ``max_tokens`` tokens.

    Return the summary text, or an awaitable of it, or ``None`` to not summarize. The summary
    is stored with the seq range it covers and reused on later turns: it is computed once per
    evicted range, not once per turn. An implementation runs inside the window read, while the
    run waits; ``Memory(summarizer=...)`` (:mod:`memory_adapters.summaries`) summarizes in the
    background instead, and is used only where no implementation of this hook is registered.
    No built-in implementation. *firstresult*.
    """


# --- facts and working memory ---------------------------------------------------------------


@hookspec
def fact_stored(scope: Scope, fact: Fact) -> None:
    """A long-term fact was written (created or updated) in ``scope``."""


@hookspec
def facts_proposed(scope: Scope, operations: list[FactOp], messages: list[Message]) -> None:
    """An extractor proposed ``operations`` (:class:`~memory_adapters.extraction.FactOp`:
    add, update or forget) on the facts of ``scope`` after reading ``messages``, the new
    messages of one of its conversations; they are about to be applied.

    Change the list in place to have a say: remove operations (keep secrets and payment data
    out of memory), replace them (a redacted value), or add some. What the list holds
    afterwards is applied, each checked again (a malformed one is dropped and counted), under
    the duplicate rule (:mod:`memory_adapters.consolidation`). Runs on the ``Memory``'s
    background worker, never while a run waits; an implementation that raises fails that
    extraction (nothing is written; an :class:`~memory_adapters.errors.ExtractionWarning`
    says so).
    """


@hookspec
def fact_recalled(scope: Scope, key: str, fact: Fact | None) -> None:
    """A fact was read by key; ``fact`` is ``None`` when there was none."""


@hookspec
def facts_searched(scope: Scope, query: str, results: list[Fact]) -> None:
    """A keyword search over ``scope``'s facts returned ``results``, best first."""


@hookspec
def fact_forgotten(scope: Scope, key: str, deleted: bool) -> None:
    """A fact was deleted by key; ``deleted`` is false when there was nothing to delete."""


@hookspec
def working_written(path: str, key: str, value: Any, deleted: bool) -> None:
    """A working-memory entry at ``path`` was set (``deleted`` false) or deleted."""


@hookspec
def working_forked(parent: str, child: str) -> None:
    """A working memory at ``parent`` was forked into ``child``, which reads through to it."""


@hookspec
def working_merged(child: str, parent: str, report: MergeReport) -> None:
    """The writes of ``child`` were merged into ``parent``; ``report`` says what was applied
    and which keys conflicted."""


# --- observing operations -------------------------------------------------------------------


@hookspec
def operation_started(operation: Operation) -> None:
    """An operation is starting: ``operation.name`` is ``"window"`` (a window read for a model
    call), ``"append"`` (a turn written to a conversation log), ``"search"`` (a search of
    long-term facts), ``"tool"`` (a memory tool called by a model) or ``"extract"`` (a
    background extraction of a conversation's new turns, :mod:`memory_adapters.extraction`).
    For tracing, metrics and logs: ``operation.run`` is the agent run it belongs to, if any;
    ``operation.state`` carries data to :func:`operation_finished`. Operations nest (a search
    made by a tool). Nothing is built for these two hooks when no plugin implements them. A
    failing implementation is reported with a
    :class:`~memory_adapters.errors.HookErrorWarning`, never raised.
    """


@hookspec
def operation_finished(operation: Operation, result: Any, error: BaseException | None) -> None:
    """The operation of :func:`operation_started` ended, with ``result`` (a
    :class:`~memory_adapters.window.Window`, an
    :class:`~memory_adapters.messages.AppendResult`, the list of
    :class:`~memory_adapters.facts.Fact` found, or the text a tool returned to the model), or
    raising ``error`` (then ``result`` is ``None``; the error reaches the caller afterwards).
    Called once for every ``operation_started``, except when the task running the operation is
    cancelled. A failing implementation is reported with a
    :class:`~memory_adapters.errors.HookErrorWarning`, never raised.
    """


# --- the MCP server -------------------------------------------------------------------------


@hookspec(firstresult=True)
def mcp_authenticate(token: str, namespace: str) -> Scope | None:
    """Whose memory an MCP client presenting the bearer ``token`` may reach through
    ``memory-adapters mcp --http`` (see docs/mcp.md): a
    :class:`~memory_adapters.scope.Scope` with a ``user_id`` (and, to keep that client's facts
    apart, an ``agent_id``), or ``None`` when this plugin does not know the token.

    ``namespace`` is the server's (``--namespace``, else the ``Memory``'s): return a scope in
    it unless the token belongs to another. The scope must not name a conversation or a fork;
    one that does, or has no user, refuses the token. Asked for every HTTP request, before the
    request reaches the MCP server; a request whose token no implementation answers for is
    refused with HTTP 401, and so is one whose implementation raises. The tools never take a
    user or scope: this answer is the only way a client's requests reach anyone's memory.
    Compare secrets in constant time (``hmac.compare_digest``) or by a hash of the token.
    *firstresult*: the first answer wins; an async implementation returns an awaitable of the
    scope or of ``None`` (which refuses the token: later implementations are not asked). The
    built-in tokens file (``--tokens FILE``) is a ``trylast`` implementation.
    """
