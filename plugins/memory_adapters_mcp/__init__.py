"""The MCP server: ``memory-adapters mcp`` (``pip install "memory-adapters[mcp]"``).

Any MCP client (Claude Desktop, Claude Code, Cursor, an OpenAI Agents SDK app, pydantic-ai's
``MCPServerStdio`` / ``MCPServerStreamableHTTP``, LangChain's MCP adapters) gets the memory
tools a pydantic-ai or LangChain agent gets, over the same store, so that every agent of one
user shares one memory. Whose memory is decided by the server, never by a tool argument: over
stdio by ``--user`` / ``--agent`` / ``--namespace``; over streamable HTTP by the bearer token
of each request, mapped to a user by a tokens file (:class:`TokenFile`) or a plugin
implementing the ``mcp_authenticate`` hook. See docs/mcp.md.

This package imports ``mcp`` only when its server is asked for, so loading the plugin never
fails for a user who did not install the extra.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from memory_adapters.errors import MissingExtra

from .tokens import TokenFile

if TYPE_CHECKING:
    from .server import (
        FACTS_URI,
        MemoryTokenVerifier,
        client_writer,
        http_app,
        memory_server,
        serve_http,
        serve_stdio,
    )

__all__ = [
    "FACTS_URI",
    "MemoryTokenVerifier",
    "TokenFile",
    "client_writer",
    "http_app",
    "memory_server",
    "serve_http",
    "serve_stdio",
]

_SERVER_NAMES = frozenset(__all__) - {"TokenFile"}


def has_mcp() -> bool:
    """Whether the ``mcp`` extra's SDK is importable."""
    try:
        return importlib.util.find_spec("mcp.server") is not None
    except ModuleNotFoundError:
        return False


def __getattr__(name: str) -> Any:
    if name not in _SERVER_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not has_mcp():
        raise MissingExtra("mcp", "mcp")
    from . import server

    return getattr(server, name)
