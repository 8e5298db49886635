"""memory-adapters: durable, budgeted memory for the agents people already have.

The public contract::

    from memory_adapters import Memory, hookimpl

    memory = Memory("sqlite:///memory.db")
    agent = memory.wrap(agent)
    with memory.session(user_id="alice", conversation_id="c-42"):
        agent.run_sync("My favourite tea is oolong")
"""

from .conversation import AwaitingRun, Conversation
from .conversation_search import MessageHit
from .errors import (
    AppendConflict,
    ConflictError,
    ExtractionWarning,
    HookErrorWarning,
    InvalidId,
    InvalidInput,
    InvalidTTL,
    InvalidURL,
    InvalidValue,
    MemoryAdaptersError,
    MemoryAdaptersWarning,
    MergeConflict,
    MissingExtra,
    NoAdapter,
    NoScope,
    PluginError,
    PluginWarning,
    RunCompleted,
    StoreClosed,
    StoreNotReady,
    StoreUnavailable,
    SummaryWarning,
    TokenCountWarning,
    ToolArgumentError,
    UnknownScheme,
    Unsupported,
    ValueTooLarge,
    VersionConflict,
)
from .extraction import Extractor, FactOp
from .facts import Fact, Facts
from .hookspecs import hookimpl, hookspec
from .memory import Memory
from .messages import AppendResult, Message, RawJSON, Record, Summary, ToolCall, ToolResult
from .operations import (
    ConversationInfo,
    EraseReport,
    FactChange,
    RetentionReport,
    Writer,
)
from .run import Run
from .scope import Scope
from .store import Store
from .summaries import Summarizer
from .tools import MEMORY_TOOLS, TOOL_INSTRUCTIONS, ToolSpec
from .window import Window
from .working import Conflict, MergeReport, Note, WorkingMemory

__all__ = [
    "MEMORY_TOOLS",
    "TOOL_INSTRUCTIONS",
    "AppendConflict",
    "AppendResult",
    "AwaitingRun",
    "Conflict",
    "ConflictError",
    "Conversation",
    "ConversationInfo",
    "EraseReport",
    "ExtractionWarning",
    "Extractor",
    "Fact",
    "FactChange",
    "FactOp",
    "Facts",
    "HookErrorWarning",
    "InvalidId",
    "InvalidInput",
    "InvalidTTL",
    "InvalidURL",
    "InvalidValue",
    "Memory",
    "MemoryAdaptersError",
    "MemoryAdaptersWarning",
    "MergeConflict",
    "MergeReport",
    "Message",
    "MessageHit",
    "MissingExtra",
    "NoAdapter",
    "NoScope",
    "Note",
    "PluginError",
    "PluginWarning",
    "RawJSON",
    "Record",
    "RetentionReport",
    "Run",
    "RunCompleted",
    "Scope",
    "Store",
    "StoreClosed",
    "StoreNotReady",
    "StoreUnavailable",
    "Summarizer",
    "Summary",
    "SummaryWarning",
    "TokenCountWarning",
    "ToolArgumentError",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "UnknownScheme",
    "Unsupported",
    "ValueTooLarge",
    "VersionConflict",
    "Window",
    "WorkingMemory",
    "Writer",
    "hookimpl",
    "hookspec",
]
