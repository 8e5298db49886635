"""The MCP server (imported only where the ``mcp`` extra is installed).

:func:`memory_server` is a low-level ``mcp`` server offering the memory tools of a ``Memory``
(:attr:`Memory.tools <memory_adapters.Memory.tools>`: the same names, descriptions, schemas and
results a pydantic-ai or LangChain agent gets) and one read-only resource, ``memory://facts``.
Every call is bound to the scope ``identify`` gives for the request; no tool argument can name
another. :func:`serve_stdio` runs it for one local client and one scope; :func:`http_app` is
the streamable HTTP application whose every request must carry a bearer token that the
``mcp_authenticate`` hook maps to a scope.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    BearerAuthBackend,
    RequireAuthMiddleware,
)
from mcp.server.auth.provider import AccessToken
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import (
    StreamableHTTPASGIApp,
    StreamableHTTPSessionManager,
)
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route

from memory_adapters import Memory, Scope, ToolArgumentError, Writer
from memory_adapters.cli import version
from memory_adapters.errors import MemoryAdaptersError
from memory_adapters.validation import MAX_ID_LENGTH, describe

log = logging.getLogger(__name__)

SERVER_NAME = "memory-adapters"
FACTS_URI = "memory://facts"
"""The read-only resource of the scope's saved facts (JSON, as ``list_memories`` gives them)."""
FACTS_LIMIT = 100
"""How many facts the resource holds (the most important and recent first)."""
PATH = "/mcp"
"""Where the streamable HTTP endpoint is."""

Identify = Callable[[ServerRequestContext[Any, Any]], Scope]
"""Whose memory one request reaches: decided by the server from the request, never from its
arguments; raises :class:`MCPError` to refuse the request."""

_READ_ONLY = frozenset(("recall_memory", "search_memory", "list_memories", "search_conversations"))
_CLAIM = "memory_adapters.scope"


def _annotations(name: str) -> types.ToolAnnotations:
    return types.ToolAnnotations(
        read_only_hint=name in _READ_ONLY,
        destructive_hint=name == "forget_memory",
        idempotent_hint=name != "save_memory",
        open_world_hint=False,
    )


def client_writer(ctx: ServerRequestContext[Any, Any]) -> Writer:
    """The writer an MCP client's tool calls are recorded as: ``kind="mcp"``, the client's own
    name (``clientInfo.name``, when it gave a usable one) as ``agent``."""
    params = ctx.session.client_params
    name = params.client_info.name if params is not None else None
    ok = (
        isinstance(name, str)
        and 0 < len(name) <= MAX_ID_LENGTH
        and name.isprintable()
        and name.strip() == name
    )
    return Writer("mcp", framework="mcp", agent=name if ok else None)


def _tool_error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def memory_server(memory: Memory, identify: Identify) -> Server[Any]:
    """An MCP server offering ``memory``'s tools (and the ``memory://facts`` resource), every
    call in the scope ``identify`` returns for its request.

    A call with arguments outside a tool's schema is answered with an MCP tool error
    (``isError``) whose text is the :class:`~memory_adapters.errors.ToolArgumentError` message
    the adapters give a model, and changes nothing. A call runs to its end even when the
    client goes away (or cancels) meanwhile, so what it stores is stored whole or not at all.
    """

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        identify(ctx)
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=spec.name,
                    description=spec.description,
                    input_schema=dict(spec.parameters),
                    annotations=_annotations(spec.name),
                )
                for spec in memory.tools.specs
            ]
        )

    async def run_tool(name: str, args: dict[str, Any], scope: Scope, writer: Writer) -> str:
        # shielded: a client that disconnects or cancels mid-call does not cut a write short
        text = ""
        with anyio.CancelScope(shield=True):
            text = await memory.tools.acall(name, args, scope=scope, writer=writer)
        return text

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        scope = identify(ctx)
        names = {spec.name for spec in memory.tools.specs}
        args = params.arguments if params.arguments is not None else {}
        try:
            if params.name not in names:  # a tool the memory does not offer (switched off)
                raise ToolArgumentError(f"unknown memory tool {describe(params.name)}")
            text = await run_tool(params.name, args, scope, client_writer(ctx))
        except ToolArgumentError as exc:
            return _tool_error(str(exc))
        except MemoryAdaptersError as exc:
            log.warning("memory tool %s failed: %s: %s", params.name, type(exc).__name__, exc)
            return _tool_error(f"{type(exc).__name__}: {exc}")
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        identify(ctx)
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    name="facts",
                    title="Saved facts",
                    uri=FACTS_URI,
                    description="The facts saved in this memory (read-only), as the "
                    f"list_memories tool gives them (at most {FACTS_LIMIT}).",
                    mime_type="application/json",
                )
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        scope = identify(ctx)
        if str(params.uri) != FACTS_URI:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no resource {str(params.uri)!r}")
        text = await run_tool("list_memories", {"limit": FACTS_LIMIT}, scope, client_writer(ctx))
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=FACTS_URI, mime_type="application/json", text=text)
            ]
        )

    return Server(
        SERVER_NAME,
        version=version(),
        instructions=memory.tools.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


# -- stdio ----------------------------------------------------------------------------------------


async def serve_stdio(memory: Memory, scope: Scope) -> None:
    """Serve ``memory``'s tools in ``scope`` to the one client on stdin/stdout, until it closes
    them."""
    server = memory_server(memory, lambda ctx: scope)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


# -- streamable HTTP ------------------------------------------------------------------------------


def _refuse() -> MCPError:
    return MCPError(code=types.INVALID_REQUEST, message="not authenticated")


def request_scope(ctx: ServerRequestContext[Any, Any]) -> Scope:
    """The scope the bearer token of the HTTP request carrying ``ctx`` was mapped to (the
    request itself, not the session: checked on every request)."""
    request = ctx.request
    user = None if request is None else request.scope.get("user")
    if not isinstance(user, AuthenticatedUser):
        raise _refuse()
    scope = (user.access_token.claims or {}).get(_CLAIM)
    if not isinstance(scope, Scope):
        raise _refuse()
    return scope


class MemoryTokenVerifier:
    """The ``mcp`` SDK's token verifier over the ``mcp_authenticate`` hook: a token is valid
    when a plugin maps it to a scope with a user and no conversation or fork."""

    def __init__(self, memory: Memory, namespace: str | None = None) -> None:
        self._memory = memory
        self._namespace = namespace or memory.namespace

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access of ``token``, or ``None`` to refuse it (HTTP 401)."""
        try:
            scope = await self._memory.hooks.mcp_authenticate(token, self._namespace)
        except Exception as exc:  # a failing plugin refuses, never lets through
            log.warning("mcp_authenticate failed: %s: %s", type(exc).__name__, exc)
            return None
        if scope is None:
            return None
        if (
            not isinstance(scope, Scope)
            or scope.user_id is None
            or scope.conversation_id is not None
            or scope.fork
        ):
            log.warning("mcp_authenticate answered %r: not a user's scope; refused", scope)
            return None
        principal = ":".join(
            quote(p or "", safe="") for p in (scope.namespace, scope.user_id, scope.agent_id)
        )
        return AccessToken(
            token=hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest(),
            client_id=principal,
            scopes=[],
            subject=scope.user_id,
            claims={_CLAIM: scope},
        )


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def http_app(
    memory: Memory,
    *,
    namespace: str | None = None,
    host: str = "127.0.0.1",
    path: str = PATH,
    stateless: bool = False,
) -> Starlette:
    """The streamable HTTP application serving ``memory``'s tools at ``path``: a request
    without a bearer token that the ``mcp_authenticate`` hook maps to a user (in
    ``namespace``, by default the ``Memory``'s) is refused with HTTP 401, and each call is
    bound to the scope of the token of the request that carries it. Bound to a loopback
    ``host``, requests naming another host (DNS rebinding) are refused too."""
    server = memory_server(memory, request_scope)
    security = None
    if host in LOOPBACK:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    manager = StreamableHTTPSessionManager(
        app=server, stateless=stateless, security_settings=security
    )
    endpoint = RequireAuthMiddleware(StreamableHTTPASGIApp(manager), [])

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(
        routes=[Route(path, endpoint=endpoint)],
        middleware=[
            Middleware(
                AuthenticationMiddleware,
                backend=BearerAuthBackend(MemoryTokenVerifier(memory, namespace)),
            ),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lifespan,
    )


def serve_http(
    memory: Memory,
    host: str,
    port: int,
    *,
    namespace: str | None = None,
    path: str = PATH,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve :func:`http_app` on ``host``:``port`` (``0``: a free port) until interrupted;
    ``announce`` is called with the endpoint's URL once it listens (by default it is printed
    to stderr)."""
    import uvicorn

    app = http_app(memory, namespace=namespace, host=host, path=path)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:
                if server.should_exit:
                    return
                await anyio.sleep(0.02)
            bound = server.servers[0].sockets[0].getsockname()
            shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
            url = f"http://{shown}:{bound[1]}{path}"
            if announce is not None:
                announce(url)
            else:
                print(f"memory-adapters mcp: serving {url}", file=sys.stderr, flush=True)

    anyio.run(main)
