"""``Memory``: one object over one store that gives agents their three kinds of memory."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from . import environment as env
from .conversation import UNSET, Conversation, Unset
from .conversation_search import ConversationIndex, IndexDue
from .embedders import Embedder
from .errors import InvalidInput, NoAdapter, UnknownScheme
from .extraction import IDLE_SECONDS, TIMEOUT_SECONDS, Extraction, ExtractionDue, Extractor
from .facts import Facts
from .hooks import Hooks
from .operations import (
    DEFAULT_HISTORY_LIMIT,
    ConversationInfo,
    EraseReport,
    RetentionReport,
    conversations_plan,
    erase_plan,
    retain_plan,
)
from .plugins import PluginManager
from .scope import Scope, Session
from .steps import Plan, drive_async, drive_sync
from .store import Store
from .summaries import CLOSE_TIMEOUT_SECONDS, LEASE_SECONDS, Summaries, Summarizer
from .tools import MemoryTools
from .validation import (
    MAX_TURN_BYTES,
    check_bool,
    check_model,
    check_number,
    check_positive_int,
)
from .worker import Worker
from .working import WorkingMemory

if TYPE_CHECKING:  # the adapters' types, for type checkers only: never imported at run time
    from memory_adapters_pydantic_ai.agent import MemoryAgent
    from pydantic_ai.agent import AbstractAgent

DepsT = TypeVar("DepsT")
OutputT = TypeVar("OutputT")
WrappedT = TypeVar("WrappedT")
T = TypeVar("T")

DEFAULT_URL = "sqlite:///memory_adapters.db"
"""Where ``Memory()`` keeps memory when given no URL and ``MEMORY_ADAPTERS_URL`` is unset."""

ENV_URL = env.URL
DEFAULT_HISTORY_TOKENS = 8000
DEFAULT_WORKING_TOKENS = 1000


class Memory:
    """Durable memory for agents: conversation history, working memory, long-term facts.

    ``Memory(url)`` opens the store whose plugin serves the URL's scheme (``sqlite:///path``,
    ``memory://``, ``postgresql://...``, ``mongodb://...``); ``Memory(store=obj)`` uses a
    store built by the application. Every ``Memory`` has its own plugin manager: plugins given
    in ``plugins=[...]`` or registered with :meth:`register` affect only this one.

    Options: ``namespace`` separates applications sharing a store; ``model`` picks the
    tokenizer; ``history_tokens`` is the default window budget; ``pin_system`` /
    ``pin_first_turn`` keep the head of the conversation in every window; ``summary_tokens``
    (0 = off) enables summaries of evicted turns, made by ``summarizer`` in the background
    (:mod:`memory_adapters.summaries`: a pydantic-ai model name, ``Model`` or ``Agent``, a
    LangChain chat model, a :class:`~memory_adapters.summaries.Summarizer` or a callable
    ``fn(previous_summary, messages) -> str``; :attr:`summaries` runs them) or by a
    ``summarize`` hook, inline;
    ``working_tokens`` bounds rendered working memory; ``max_turn_bytes`` bounds one append.
    ``embed`` chooses the embedder of semantic recall (:mod:`memory_adapters.embedders`): a
    name (``"wordllama"``, ``"openai:text-embedding-3-small"``), an embedder object (pydantic-ai,
    LangChain, :class:`~memory_adapters.embedders.Embedder`) or a callable; ``None`` takes the
    installed default (the ``embeddings`` extra's offline model), ``False`` none.
    ``telemetry_content`` lets telemetry plugins record message content and fact values (off
    by default). Options not given are read from the environment where an operator sets them
    per deployment (:mod:`memory_adapters.environment`: ``MEMORY_ADAPTERS_URL``,
    ``MEMORY_ADAPTERS_NAMESPACE``, ``MEMORY_ADAPTERS_HISTORY_TOKENS``, ``MEMORY_ADAPTERS_MODEL``,
    ``MEMORY_ADAPTERS_EMBED``, ``MEMORY_ADAPTERS_OTEL_CONTENT``); a bad value there raises
    ``InvalidInput`` naming the variable.
    ``history_limit`` is how many versions of each fact's history the store keeps (0: no
    history; :meth:`Facts.history <memory_adapters.Facts.history>`).
    ``extractor`` turns on the background extraction of facts from new turns
    (:mod:`memory_adapters.extraction`; what ``summarizer`` takes, or a callable
    ``fn(messages, facts) -> list`` of :class:`~memory_adapters.FactOp`; :attr:`extraction`
    runs it): every ``extract_every`` turns of a conversation (0: off), and when one has had
    no turn for ``extract_idle`` seconds (``None``: never), each call at most
    ``extract_timeout`` seconds; ``extract_instructions`` says what is worth remembering.
    ``index_conversations`` indexes each stored turn for conversation search on the worker
    right away (``False``: the first search that needs it does;
    :mod:`memory_adapters.conversation_search`); ``index_tool_messages`` indexes tool calls
    and results too (off: user and assistant text only).
    The token counts and ``max_turn_bytes`` are ints up to
    :data:`~memory_adapters.validation.MAX_INT` (``InvalidInput`` otherwise).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        store: Store | None = None,
        namespace: str | None = None,
        model: str | None = None,
        plugins: tuple[object, ...] | list[object] = (),
        load_entrypoints: bool = True,
        history_tokens: int | Unset | None = UNSET,
        pin_system: bool = True,
        pin_first_turn: bool = False,
        summary_tokens: int = 0,
        working_tokens: int = DEFAULT_WORKING_TOKENS,
        max_turn_bytes: int = MAX_TURN_BYTES,
        store_options: dict[str, Any] | None = None,
        embed: object = None,
        telemetry_content: bool | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        summarizer: object = None,
        extractor: object = None,
        extract_every: int = 1,
        extract_instructions: str | None = None,
        extract_idle: float | None = IDLE_SECONDS,
        extract_timeout: float = TIMEOUT_SECONDS,
        index_conversations: bool = True,
        index_tool_messages: bool = False,
    ) -> None:
        if namespace is None:
            namespace = _from_env(env.NAMESPACE, lambda v: Scope(namespace=v).namespace)
        if model is None:
            model = _from_env(env.MODEL, check_model)
        if history_tokens is UNSET:
            budget = env.budget(env.HISTORY_TOKENS)
            history_tokens = DEFAULT_HISTORY_TOKENS if budget is False else budget
        if embed is None:
            embed = env.embed_spec(env.EMBED)
        if telemetry_content is None:
            telemetry_content = bool(env.flag(env.OTEL_CONTENT))
        self.telemetry_content = check_bool(telemetry_content, "telemetry_content")
        """Whether telemetry plugins may record message content and fact values (see
        :class:`~memory_adapters.tracing.Operation`)."""
        self.pm = PluginManager(load_entrypoints=load_entrypoints)
        for plugin in plugins:
            self.pm.register(plugin)
        self.hooks = Hooks(self.pm)
        self._base = Scope(namespace="default" if namespace is None else namespace)
        self.model = check_model(model)
        self.history_tokens = (
            None if history_tokens is None else check_positive_int(history_tokens, "history_tokens")
        )
        self.pin_system = check_bool(pin_system, "pin_system")
        self.pin_first_turn = check_bool(pin_first_turn, "pin_first_turn")
        self.summary_tokens = check_positive_int(summary_tokens, "summary_tokens", allow_zero=True)
        self.working_tokens = check_positive_int(working_tokens, "working_tokens")
        self.max_turn_bytes = check_positive_int(max_turn_bytes, "max_turn_bytes")
        self.history_limit = check_positive_int(history_limit, "history_limit", allow_zero=True)
        if store is not None:
            if url is not None:
                raise InvalidInput("give Memory a url or a store, not both")
            if not isinstance(store, Store):
                raise InvalidInput(
                    f"store must be a memory_adapters.Store, not {type(store).__name__}"
                )
            self.store = store
        else:
            self.store = self.open_store(
                url or env.get(ENV_URL) or DEFAULT_URL, **(store_options or {})
            )
        self.worker = Worker()
        """The background worker (:mod:`memory_adapters.worker`): summaries, message indexing
        and embedding, extraction; a run never waits for it."""
        self.conversation_index = ConversationIndex(
            self, background=index_conversations, tools=index_tool_messages
        )
        """The index of what was said (:mod:`memory_adapters.conversation_search`)."""
        self.summaries: Summaries | None = self._make_summaries(summarizer)
        """The background summaries (``None`` without a ``summarizer``)."""
        self.extraction: Extraction | None = self._make_extraction(
            extractor, extract_every, extract_instructions, extract_idle, extract_timeout
        )
        """The background extraction of facts (``None`` without an ``extractor``, or with
        ``extract_every=0``)."""
        self.embedder: Embedder | None = self._make_embedder(embed)
        """The embedder of semantic recall, or ``None`` (keyword search only)."""
        self._scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
            f"memory_adapters.scope.{id(self):x}", default=None
        )
        self.tools = MemoryTools(self)
        self.working_version = 0
        """Counts the working-memory writes made through this ``Memory``: a run renders its
        working memory from what it read at its start until this changes."""

    # -- plugins -------------------------------------------------------------------------------

    def register(self, plugin: object, name: str | None = None) -> None:
        """Register a plugin with this ``Memory`` only."""
        self.pm.register(plugin, name=name)

    def unregister(self, plugin: object | None = None, name: str | None = None) -> None:
        """Unregister a plugin by object or name."""
        self.pm.unregister(plugin, name=name)

    def _make_summaries(self, spec: object) -> Summaries | None:
        if spec is None:
            return None
        if self.summary_tokens == 0:
            raise InvalidInput(
                "a summarizer needs summary_tokens (the size of a summary in tokens, above 0)"
            )
        self.pm.ensure_loaded()  # with store=..., nothing has loaded the plugins yet
        summarizer = self.hooks.make_summarizer(spec)
        if summarizer is None:
            raise InvalidInput(
                f"no installed plugin makes a summarizer of {spec!r}: give a pydantic-ai model "
                'name such as "openai:gpt-4o-mini", a pydantic-ai Model or Agent, a LangChain '
                "chat model, a memory_adapters.Summarizer or a callable "
                "fn(previous_summary, messages) -> str"
            )
        if not isinstance(summarizer, Summarizer):
            raise TypeError(
                f"make_summarizer returned {type(summarizer).__name__}, not a Summarizer"
            )
        return Summaries(self, summarizer, LEASE_SECONDS)

    def _make_extraction(
        self,
        spec: object,
        every: int,
        instructions: str | None,
        idle: float | None,
        timeout: float,
    ) -> Extraction | None:
        every = check_positive_int(every, "extract_every", allow_zero=True)
        if instructions is not None and not isinstance(instructions, str):
            raise InvalidInput("extract_instructions must be a str or None")
        idle = None if idle is None else check_number(idle, "extract_idle")
        timeout = check_number(timeout, "extract_timeout")
        if (idle is not None and idle < 0) or timeout <= 0:
            raise InvalidInput("extract_idle must be >= 0 (or None) and extract_timeout > 0")
        if spec is None or every == 0:
            return None
        self.pm.ensure_loaded()
        extractor = self.hooks.make_extractor(spec)
        if extractor is None:
            raise InvalidInput(
                f"no installed plugin makes an extractor of {spec!r}: give a pydantic-ai model "
                'name such as "openai:gpt-4o-mini", a pydantic-ai Model or Agent, a LangChain '
                "chat model, a memory_adapters.Extractor or a callable "
                "fn(messages, facts) -> list of FactOp"
            )
        if not isinstance(extractor, Extractor):
            raise TypeError(f"make_extractor returned {type(extractor).__name__}, not an Extractor")
        return Extraction(
            self,
            extractor,
            every=every,
            instructions=instructions,
            idle=idle,
            timeout=timeout,
        )

    def _make_embedder(self, spec: object) -> Embedder | None:
        if spec is False:
            return None
        self.pm.ensure_loaded()  # with store=..., nothing has loaded the plugins yet
        embedder = self.hooks.make_embedder(spec)
        if embedder is None and spec is not None:
            raise InvalidInput(
                f"no installed plugin makes an embedder of {spec!r}: give an embedder name "
                '("wordllama", or a pydantic-ai model name such as '
                '"openai:text-embedding-3-small"), a pydantic-ai Embedder, a LangChain '
                "Embeddings, a memory_adapters.Embedder or a callable"
            )
        if embedder is not None and not isinstance(embedder, Embedder):
            raise TypeError(f"make_embedder returned {type(embedder).__name__}, not an Embedder")
        return embedder

    @property
    def schemes(self) -> list[str]:
        """The URL schemes the installed store plugins serve."""
        return sorted(self.pm.registries.stores)

    def open_store(self, url: str, **options: Any) -> Store:
        """Build a store for ``url`` through the store plugins."""
        if not isinstance(url, str) or "://" not in url:
            raise UnknownScheme(
                f"not a store URL: {url!r}; expected scheme://..., with a scheme among "
                f"{', '.join(self.schemes)}"
            )
        scheme = url.split("://", 1)[0].lower()
        reg = self.pm.registries.stores.get(scheme)
        if reg is None:
            raise UnknownScheme(
                f"no store plugin serves {scheme}://; installed schemes: "
                f"{', '.join(s + '://' for s in self.schemes)}"
            )
        store = reg.factory(url, **options)
        if not isinstance(store, Store):
            raise TypeError(
                f"plugin {reg.plugin!r} built a {type(store).__name__} for {scheme}://, not a Store"
            )
        return store

    # -- scope -----------------------------------------------------------------------------------

    def session(
        self,
        *,
        user_id: str | None = None,
        conversation_id: str | None = None,
        agent_id: str | None = None,
        namespace: str | None = None,
        fork: tuple[str, ...] | None = None,
    ) -> Session:
        """Set whose memory the code inside uses; ``with`` or ``async with``.

        Nested sessions inherit what they leave unset. The scope lives in a context
        variable, so it follows async tasks.
        """
        current = self._scope.get() or self._base
        return Session(
            self._scope,
            current.merged(
                user_id=user_id,
                conversation_id=conversation_id,
                agent_id=agent_id,
                namespace=namespace,
                fork=fork,
            ),
        )

    @property
    def namespace(self) -> str:
        """The namespace this ``Memory`` was opened with (a session may name another)."""
        return self._base.namespace

    @property
    def scope(self) -> Scope:
        """The scope in force: the innermost session's, or the bare namespace."""
        return self._scope.get() or self._base

    @property
    def conversation(self) -> Conversation:
        """The conversation log of the current scope."""
        return Conversation(self, self.scope)

    @property
    def facts(self) -> Facts:
        """The long-term facts of the current scope's user."""
        return Facts(self, self.scope)

    @property
    def working(self) -> WorkingMemory:
        """The working memory of the current scope (a fork's, inside a sub-agent)."""
        return WorkingMemory(self, self.scope)

    # -- adapters --------------------------------------------------------------------------------

    @property
    def adapters(self) -> list[str]:
        """Names of the installed framework adapters."""
        return [a.name for a, _ in self.pm.registries.adapters]

    @overload
    def wrap(
        self, obj: AbstractAgent[DepsT, OutputT], **options: Any
    ) -> MemoryAgent[DepsT, OutputT]: ...

    @overload
    def wrap(self, obj: WrappedT, **options: Any) -> WrappedT: ...

    def wrap(self, obj: Any, **options: Any) -> Any:
        """Give ``obj`` (an agent of a supported framework) this memory.

        Returns an object with the same call surface as ``obj``, typed as such: a pydantic-ai
        ``Agent[D, O]`` gives a ``MemoryAgent[D, O]`` (an agent of the same deps and output
        types); anything else is typed as what was given (a compiled LangGraph graph gives a
        ``MemoryGraph``, a ``Runnable`` with the graph's call surface that hands everything
        else to the graph, typed as the graph). Raises
        :class:`~memory_adapters.errors.NoAdapter` naming the installed adapters when none
        handles it.
        """
        for adapter, _plugin in self.pm.registries.adapters:
            if adapter.handles(obj):
                return adapter.wrap(obj, self, **options)
        installed = ", ".join(self.adapters) or "none"
        raise NoAdapter(
            f"no installed adapter handles {type(obj).__module__}.{type(obj).__qualname__}; "
            f"installed adapters: {installed}. Install one with "
            'pip install "memory-adapters[pydantic-ai]" or "memory-adapters[langchain]".'
        )

    # -- operations ------------------------------------------------------------------------------

    def conversations(
        self,
        user_id: str | None = None,
        namespace: str | None = None,
        limit: int = 100,
        before: tuple[float, str] | None = None,
    ) -> list[ConversationInfo]:
        """The conversations of ``namespace`` (default: this ``Memory``'s), of one user with
        ``user_id``, newest activity first, at most ``limit``; pass the last item's
        ``cursor`` as ``before`` for the next page."""
        plan = conversations_plan(namespace or self.namespace, user_id, limit, before)
        return self._drive(plan)

    async def aconversations(
        self,
        user_id: str | None = None,
        namespace: str | None = None,
        limit: int = 100,
        before: tuple[float, str] | None = None,
    ) -> list[ConversationInfo]:
        """Async :meth:`conversations`."""
        plan = conversations_plan(namespace or self.namespace, user_id, limit, before)
        return await self._adrive(plan)

    def erase(self, *, user_id: str, namespace: str | None = None) -> EraseReport:
        """Delete everything of ``user_id`` in ``namespace`` (default: this ``Memory``'s):
        conversations, summaries, facts with their vectors and history, working memory;
        nothing of anyone else, and the messages from the conversation-search index. Returns
        the counts of what went."""
        self.conversation_index.wait()  # what this process is indexing, first
        if self.extraction is not None:  # and extracting: it would write facts back
            self.extraction.wait(flush=False)
        return self._drive(erase_plan(namespace or self.namespace, user_id))

    async def aerase(self, *, user_id: str, namespace: str | None = None) -> EraseReport:
        """Async :meth:`erase`."""
        await self._indexed()
        if self.extraction is not None and self.worker.busy_with(ExtractionDue):
            await asyncio.to_thread(self.extraction.wait, flush=False)
        return await self._adrive(erase_plan(namespace or self.namespace, user_id))

    def retain(
        self,
        *,
        idle_days: float | None = None,
        idle_seconds: float | None = None,
        namespace: str | None = None,
    ) -> RetentionReport:
        """Apply retention: delete the conversations of ``namespace`` (default: this
        ``Memory``'s) with no append for ``idle_days`` days or ``idle_seconds`` seconds (one
        of them), with their summaries, working memory and conversation-search index, and
        prune every expired fact."""
        self.conversation_index.wait()  # what this process is indexing, first
        return self._drive(retain_plan(namespace or self.namespace, idle_days, idle_seconds))

    async def aretain(
        self,
        *,
        idle_days: float | None = None,
        idle_seconds: float | None = None,
        namespace: str | None = None,
    ) -> RetentionReport:
        """Async :meth:`retain`."""
        await self._indexed()
        return await self._adrive(retain_plan(namespace or self.namespace, idle_days, idle_seconds))

    async def _indexed(self) -> None:
        """Wait for the indexing under way on the worker (off the event loop)."""
        if self.worker.busy_with(IndexDue):
            await asyncio.to_thread(self.conversation_index.wait)

    def _drive(self, plan: Plan[T]) -> T:
        return drive_sync(plan, self.store, self.hooks)

    async def _adrive(self, plan: Plan[T]) -> T:
        return await drive_async(plan, self.store, self.hooks)

    # -- utilities -------------------------------------------------------------------------------

    def count_tokens(self, texts: list[str], model: str | None = None) -> list[int]:
        """Token counts of ``texts`` (a list of ``str``) through the ``count_tokens`` hook."""
        return self.hooks.count_tokens_sync(_texts(texts), check_model(model) or self.model)

    async def acount_tokens(self, texts: list[str], model: str | None = None) -> list[int]:
        """Async :meth:`count_tokens`."""
        return await self.hooks.count_tokens_async(_texts(texts), check_model(model) or self.model)

    def close(self, timeout: float | None = CLOSE_TIMEOUT_SECONDS) -> None:
        """Wait for the background work under way (:attr:`worker`: summaries, indexing,
        extraction), at most ``timeout`` seconds (``None``: as long as it takes), then close the
        store. Summaries still unfinished then are abandoned, not stored, and named in a
        :class:`~memory_adapters.SummaryWarning`; other work left undone is done later (by the
        next search, turn or process)."""
        self._stop_worker(timeout)
        self.store.close()

    def _stop_worker(self, timeout: float | None) -> None:
        abandoned = self.worker.close(timeout)
        if self.summaries is not None:
            self.summaries.abandon(abandoned, timeout)
        if self.extraction is not None:
            self.extraction.abandon(abandoned, timeout)

    async def aclose(self, timeout: float | None = CLOSE_TIMEOUT_SECONDS) -> None:
        """Async :meth:`close`."""
        await asyncio.to_thread(self._stop_worker, timeout)
        await self.store.aclose()

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<Memory store={type(self.store).__name__} namespace={self._base.namespace!r}>"


def _from_env(name: str, check: Callable[[str], object]) -> str | None:
    """The value of variable ``name`` if set, checked by ``check``; its ``InvalidInput`` is
    raised again naming the variable."""
    value = env.get(name)
    if value is not None:
        try:
            check(value)
        except InvalidInput as exc:
            raise InvalidInput(f"{name}={value!r}: {exc}") from exc
    return value


def _texts(texts: object) -> list[str]:
    """``texts`` as a list, if it is a list (or another iterable, not a string) of ``str``."""
    if isinstance(texts, str | bytes | bytearray) or not isinstance(texts, Iterable):
        raise InvalidInput(f"texts must be a list of str, not {type(texts).__name__}")
    out = list(texts)
    for text in out:
        if not isinstance(text, str):
            raise InvalidInput(f"texts must be a list of str; it holds a {type(text).__name__}")
    return out
