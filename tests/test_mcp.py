"""The MCP server (``memory-adapters mcp``), driven by real MCP clients.

The ``mcp`` SDK's own client over stdio (a ``memory-adapters mcp`` subprocess) and over
streamable HTTP (a subprocess on a free local port, and a server in a thread where a test needs
to reach inside), and pydantic-ai's MCP client (``MCPToolset``, which replaced
``MCPServerStdio`` / ``MCPServerStreamableHTTP`` in pydantic-ai 2): every tool works, the scope
is the server's (flags; a bearer token per request), a request without a valid token is
refused, the conformance kit's hostile-argument table changes nothing, a client that goes away
mid-call loses nothing, and agents of both adapters share one user's memory with an MCP client
on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from fastmcp.client import Client as FastMCPClient
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import Implementation, TextContent
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from memory_adapters_mcp import MemoryTokenVerifier, TokenFile, http_app
from memory_adapters_mcp.tokens import digest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from stores import open_memory

from memory_adapters import Memory, Message, Scope, ToolArgumentError, Writer, cli, hookimpl
from memory_adapters.errors import InvalidInput
from memory_adapters.testing.hostile import hostile_cases
from memory_adapters.testing.langchain import ScriptedChatModel, call_tool
from memory_adapters.transfer import export_jsonl, import_jsonl

CLIENT = "test-client"
TOKENS = {
    "alice": "alice-" + "a" * 26,
    "bob": "bob-" + "b" * 28,
    "carol": "carol-" + "c" * 26,
    "dave": "dave-" + "d" * 27,
}


def _env() -> dict[str, str]:
    # keyword search, as the in-process Memory(embed=False) of the tests
    return {**os.environ, "MEMORY_ADAPTERS_EMBED": "off"}


def command(url: str, options: dict[str, Any] | None = None) -> list[str]:
    """``memory-adapters --url URL [-o K=V] mcp``: the installed command beside this Python."""
    exe = Path(sys.executable).with_name("memory-adapters")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "memory_adapters"]
    argv += ["--url", url]
    for key, value in (options or {}).items():
        argv += ["-o", f"{key}={value}"]
    return [*argv, "mcp"]


def text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def write_tokens(path: Path) -> Path:
    """A tokens file: alice's token in the clear, the others by their SHA-256."""
    entries: dict[str, Any] = {TOKENS["alice"]: "alice"}
    entries.update({f"sha256:{digest(t)}": u for u, t in TOKENS.items() if u != "alice"})
    entries[f"sha256:{digest(TOKENS['dave'])}"] = {"user": "dave", "agent": "pydantic-ai"}
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


@asynccontextmanager
async def stdio_session(
    url: str, options: dict[str, Any] | None, *flags: str
) -> AsyncIterator[ClientSession]:
    argv = [*command(url, options), *flags]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=_env())
    errlog = sys.__stderr__ or sys.stderr  # a real file: the server's stderr is not captured
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write, client_info=Implementation(name=CLIENT, version="1")) as s,
    ):
        await s.initialize()
        yield s


@asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, client_info=Implementation(name=CLIENT, version="1")) as s,
    ):
        await s.initialize()
        yield s


@contextmanager
def http_server(
    url: str, tokens: Path, options: dict[str, Any] | None = None
) -> Iterator[tuple[str, list[str]]]:
    """``memory-adapters mcp --http 127.0.0.1:0 --tokens FILE`` in a subprocess: its endpoint
    URL (announced on stderr) and the rest of what it writes there."""
    argv = [*command(url, options), "--http", "127.0.0.1:0", "--tokens", str(tokens)]
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env=_env(),
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        line = proc.stderr.readline()
        assert "serving http://" in line, line + proc.stderr.read()
        rest: list[str] = []
        drain = threading.Thread(target=lambda: rest.extend(proc.stderr or ()), daemon=True)
        drain.start()
        yield line.split()[-1], rest
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@contextmanager
def server_in_thread(memory: Memory) -> Iterator[str]:
    """:func:`http_app` of ``memory`` served by uvicorn in a thread: its endpoint URL."""
    config = uvicorn.Config(http_app(memory), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


class RawSession:
    """JSON-RPC over streamable HTTP by hand, for what no SDK client would send."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url
        self.http = httpx2.Client(timeout=30)
        self.headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}".strip()

    def post(self, body: str) -> httpx2.Response:
        return self.http.post(self.url, content=body.encode("utf-8", "surrogatepass"),
                              headers=self.headers)  # fmt: skip

    def initialize(self) -> httpx2.Response:
        version = HANDSHAKE_PROTOCOL_VERSIONS[-1]
        params = {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        }
        response = self.post(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                         "params": params}))  # fmt: skip
        if response.status_code == 200:
            self.headers["mcp-session-id"] = response.headers["mcp-session-id"]
            self.headers["mcp-protocol-version"] = version
            self.post(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        return response

    def call(self, body: str) -> dict[str, Any]:
        """The JSON-RPC answer to ``body`` (an SSE stream's last message, or the JSON)."""
        response = self.post(body)
        assert response.status_code in (200, 400), (response.status_code, response.text)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            data = [ln[5:].strip() for ln in response.text.splitlines() if ln.startswith("data:")]
            answer: dict[str, Any] = json.loads(data[-1])
            return answer
        answer = response.json()
        return answer

    def close(self) -> None:
        self.http.close()


def _expected(name: str, args: Any) -> str | None:
    """What the adapters say to a model for this call: the core's ToolArgumentError, or
    ``None`` when the core accepts it."""
    memory = Memory("memory://", embed=False, load_entrypoints=False)
    try:
        memory.tools.call(name, args, scope=Scope(user_id="someone"))
    except ToolArgumentError as exc:
        return str(exc)
    finally:
        memory.close()
    return None


def _json(value: Any) -> str | None:
    """``value`` as strict JSON (UTF-8 encodable, no NaN), or ``None``."""
    try:
        out = json.dumps(value, allow_nan=False, ensure_ascii=False)
        out.encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError):
        return None
    return out


# -- stdio ------------------------------------------------------------------------------------


def test_stdio_every_tool_works_in_the_scope_of_the_flags(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    memory = Memory(url, embed=False)
    with memory.session(user_id="alice", conversation_id="roof"):
        memory.conversation.append(
            [Message.user("The roofer is Dana Whitfield"), Message.assistant("Noted.")]
        )
    specs = [(s.name, s.description, s.parameters) for s in memory.tools.specs]

    async def main() -> None:
        async with stdio_session(url, None, "--user", "alice") as s:
            tools = (await s.list_tools()).tools
            assert [(t.name, t.description, t.input_schema) for t in tools] == specs
            saved = await s.call_tool("save_memory", {"key": "tea", "value": "oolong"})
            assert json.loads(text(saved)) == {"saved": "tea", "version": 1}
            recalled = json.loads(text(await s.call_tool("recall_memory", {"key": "tea"})))
            assert recalled["value"] == "oolong"
            found = json.loads(text(await s.call_tool("search_memory", {"query": "tea"})))
            assert [f["key"] for f in found] == ["tea"]
            listed = json.loads(text(await s.call_tool("list_memories", {"limit": 10})))
            assert [f["key"] for f in listed] == ["tea"]
            said = await s.call_tool("search_conversations", {"query": "roofer"})
            hits = json.loads(text(said))
            assert hits[0]["conversation"] == "roof" and "Dana" in hits[0]["text"]
            await s.call_tool("save_memory", {"key": "temp", "value": "gone soon"})
            forgot = json.loads(text(await s.call_tool("forget_memory", {"key": "temp"})))
            assert forgot == {"forgotten": True, "key": "temp"}
            resources = (await s.list_resources()).resources
            assert [str(r.uri) for r in resources] == ["memory://facts"]
            read = await s.read_resource("memory://facts")
            assert [f["key"] for f in json.loads(read.contents[0].text)] == ["tea"]  # type: ignore[union-attr]
        flags = ("--user", "alice", "--agent", "cursor", "--namespace", "team")
        async with stdio_session(url, None, *flags) as s:
            await s.call_tool("save_memory", {"key": "editor", "value": "vim"})

    anyio.run(main)
    with memory.session(user_id="alice"):
        assert [f.key for f in memory.facts.all()] == ["tea"]
        (change,) = memory.facts.history("tea")
        assert change.writer == Writer("mcp", framework="mcp", agent=CLIENT)
    with memory.session(user_id="alice", agent_id="cursor", namespace="team"):
        assert [f.key for f in memory.facts.all()] == ["editor"]
    for other in (Scope(user_id="alice", agent_id="cursor"), Scope("team", user_id="alice")):
        with memory.session(
            user_id=other.user_id, agent_id=other.agent_id, namespace=other.namespace
        ):
            assert "editor" not in [f.key for f in memory.facts.all()]
    with memory.session(user_id="bob"):
        assert memory.facts.all() == []
    memory.close()


def scripted(calls: list[tuple[str, dict[str, Any]]]) -> FunctionModel:
    """A model that makes ``calls`` one by one, then answers with what each returned (a
    retry prompt's text for a refused one), as JSON."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(1 for m in messages if isinstance(m, ModelResponse))
        if step < len(calls):
            name, args = calls[step]
            return ModelResponse(parts=[ToolCallPart(name, args, f"call-{step}")])
        seen: list[Any] = []
        for m in messages:
            for p in getattr(m, "parts", ()):
                if isinstance(p, ToolReturnPart) and getattr(p, "outcome", "success") != "success":
                    seen.append({"retry": p.content})  # pydantic-ai 2: a retry is a return
                elif isinstance(p, ToolReturnPart):
                    seen.append(p.content)
                elif isinstance(p, RetryPromptPart) and p.tool_name:
                    seen.append({"retry": p.content})
        return ModelResponse(parts=[TextPart(json.dumps(seen, default=str))])

    return FunctionModel(reply)


EVERY_TOOL: list[tuple[str, dict[str, Any]]] = [
    ("save_memory", {"key": "tea", "value": "oolong"}),
    ("recall_memory", {"key": "tea"}),
    ("search_memory", {"query": "tea"}),
    ("list_memories", {}),
    ("search_conversations", {"query": "tea"}),
    ("save_memory", {"key": "tea", "value": "sencha", "user_id": "alice"}),
    ("forget_memory", {"key": "tea"}),
]


def _check_every_tool(outputs: list[Any]) -> None:
    def parsed(value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    saved, recalled, found, listed, said, refused, forgot = (parsed(o) for o in outputs)
    assert saved == {"saved": "tea", "version": 1}
    assert recalled["value"] == "oolong"
    assert found[0]["key"] == "tea" and listed[0]["key"] == "tea"
    assert isinstance(said, list)
    assert refused == {"retry": "save_memory does not take 'user_id'"}
    assert forgot == {"forgotten": True, "key": "tea"}


def test_pydantic_ai_mcp_client_over_stdio(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    argv = [*command(url), "--user", "erin"]
    toolset: MCPToolset[Any] = MCPToolset(FastMCPClient(StdioTransport(argv[0], argv[1:], _env())))
    agent = Agent(scripted(EVERY_TOOL), toolsets=[toolset])
    output = agent.run_sync("exercise every memory tool").output
    _check_every_tool(json.loads(output))


# -- streamable HTTP --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, list[str]]]:
    """One HTTP server for the module's HTTP tests: store URL, endpoint URL, its stderr."""
    path = tmp_path_factory.mktemp("mcp-http")
    store = f"sqlite:///{path / 'memory.db'}"
    with http_server(store, write_tokens(path / "tokens.json")) as (endpoint, stderr):
        yield store, endpoint, stderr


def test_http_every_tool_works(served: tuple[str, str, list[str]]) -> None:
    store, endpoint, _ = served

    async def main() -> list[Any]:
        out: list[Any] = []
        async with http_session(endpoint, TOKENS["carol"]) as s:
            for name, args in EVERY_TOOL:
                result = await s.call_tool(name, args)
                out.append({"retry": text(result)} if result.is_error else text(result))
            read = await s.read_resource("memory://facts")
            assert json.loads(read.contents[0].text) == []  # type: ignore[union-attr]
        return out

    _check_every_tool(anyio.run(main))
    with Memory(store, embed=False) as memory, memory.session(user_id="carol"):
        writers = {c.writer for c in memory.facts.history("tea")}
    assert writers == {Writer("mcp", framework="mcp", agent=CLIENT)}


def test_pydantic_ai_mcp_client_over_http(served: tuple[str, str, list[str]]) -> None:
    store, endpoint, _ = served
    transport = StreamableHttpTransport(endpoint, auth=TOKENS["dave"])
    agent = Agent(scripted(EVERY_TOOL), toolsets=[MCPToolset(FastMCPClient(transport))])
    _check_every_tool(json.loads(agent.run_sync("exercise every memory tool").output))
    with Memory(store, embed=False) as memory:
        # dave's token names an agent: his facts are kept apart from his other agents'
        with memory.session(user_id="dave", agent_id="pydantic-ai"):
            assert memory.facts.history("tea")
        with memory.session(user_id="dave"):
            assert memory.facts.history("tea") == []


def test_two_tokens_never_see_each_others_memory(served: tuple[str, str, list[str]]) -> None:
    store, endpoint, _ = served
    with Memory(store, embed=False) as memory:
        with memory.session(user_id="alice", conversation_id="tea-chat"):
            memory.conversation.append(
                [Message.user("My secret blend is Jasmine Pearl"), Message.assistant("Noted.")]
            )
        with memory.session(user_id="bob", conversation_id="tea-chat"):
            memory.conversation.append(
                [Message.user("I only drink black coffee"), Message.assistant("Noted.")]
            )
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("recall_memory", {"key": "blend"}),
        ("search_memory", {"query": "jasmine pearl blend secret"}),
        ("search_memory", {"query": "blend", "limit": 20}),
        ("list_memories", {"limit": 100}),
        ("search_conversations", {"query": "jasmine pearl secret blend", "limit": 20}),
        ("search_conversations", {"query": "secret", "user_id": "alice"}),
        ("list_memories", {"user_id": "alice"}),
        ("list_memories", {"namespace": "default", "scope": "user:alice"}),
        ("recall_memory", {"key": "blend", "agent_id": None, "conversation_id": "tea-chat"}),
        ("forget_memory", {"key": "blend"}),
        ("save_memory", {"key": "blend", "value": "overwritten by bob?"}),
    ]

    async def main() -> list[str]:
        async with http_session(endpoint, TOKENS["alice"]) as alice:
            await alice.call_tool("save_memory", {"key": "blend", "value": "Jasmine Pearl"})
        seen: list[str] = []
        async with http_session(endpoint, TOKENS["bob"]) as bob:
            for name, args in attempts:
                seen.append(text(await bob.call_tool(name, args)))
            read = await bob.read_resource("memory://facts")
            seen.append(read.contents[0].text)  # type: ignore[union-attr]
            for uri in ("memory://facts?user=alice", "memory://facts/alice", "file:///etc/passwd"):
                with pytest.raises(MCPError):
                    await bob.read_resource(uri)
        async with http_session(endpoint, TOKENS["alice"]) as alice:
            mine = json.loads(text(await alice.call_tool("recall_memory", {"key": "blend"})))
            assert mine["value"] == "Jasmine Pearl"  # bob's save went to bob's memory
            said = await alice.call_tool("search_conversations", {"query": "black coffee"})
            seen.append(text(said))
        return seen

    seen = anyio.run(main)
    bob_saw = "\n".join(seen[:-1])
    assert "Jasmine" not in bob_saw and "Pearl" not in bob_saw, bob_saw
    assert "coffee" not in seen[-1]  # nor alice bob's conversations
    with Memory(store, embed=False) as memory:
        with memory.session(user_id="alice"):
            assert memory.facts.get("blend").value == "Jasmine Pearl"  # type: ignore[union-attr]
        with memory.session(user_id="bob"):
            assert memory.facts.get("blend").value == "overwritten by bob?"  # type: ignore[union-attr]


def test_a_request_without_a_valid_token_is_refused(
    served: tuple[str, str, list[str]], tmp_path: Path
) -> None:
    _, endpoint, _ = served
    for token in (None, "", "wrong", TOKENS["alice"][:-1], TOKENS["alice"] + "x", digest("x")):
        raw = RawSession(endpoint, token)
        assert raw.initialize().status_code == 401
        answer = raw.post(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        assert answer.status_code == 401 and "tools" not in answer.text
        raw.close()
    basic = httpx2.post(endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                        headers={"Authorization": "Basic YWxpY2U6eA=="})  # fmt: skip
    assert basic.status_code == 401
    # another token cannot use a session it did not open
    alice = RawSession(endpoint, TOKENS["alice"])
    assert alice.initialize().status_code == 200
    bob = RawSession(endpoint, TOKENS["bob"])
    bob.headers["mcp-session-id"] = alice.headers["mcp-session-id"]
    bob.headers["mcp-protocol-version"] = alice.headers["mcp-protocol-version"]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "list_memories", "arguments": {}}}  # fmt: skip
    assert bob.post(json.dumps(call)).status_code == 404
    alice.close()
    bob.close()

    async def sdk_client() -> None:
        async with http_session(endpoint, "not-a-token-at-all"):
            pass

    with pytest.raises(BaseException) as info:  # the SDK's error, in its task groups
        anyio.run(sdk_client)
    assert "401" in repr(info.value) or "error" in repr(info.value).lower()


def test_the_hostile_argument_table_over_mcp_changes_nothing(
    served: tuple[str, str, list[str]],
) -> None:
    store, endpoint, _ = served
    user, token = "frank", "frank-" + "f" * 26
    cases = [
        c
        for c in hostile_cases(time.time())
        if c.target == "tools" and c.method == "call" and not c.kwargs  # no scope= over MCP
    ]
    assert len(cases) > 100
    by_sdk: list[tuple[str, dict[str, Any] | None, str | None]] = []
    raw: list[str] = []
    unsendable = 0
    for case in cases:
        name, args = case.args
        body = _json(args)
        if type(name) is str and isinstance(args, dict) and body is not None:
            wire = json.loads(body)  # what the server receives (JSON keys are strings)
            by_sdk.append((name, wire, _expected(name, wire)))
            continue
        if type(name) is str and args is None:  # MCP: a call without arguments has none
            by_sdk.append((name, None, _expected(name, {})))
            continue
        request = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                   "params": {"name": name, "arguments": args}}  # fmt: skip
        try:  # NaN as JavaScript writes it, a lone surrogate escaped: still sent
            raw.append(json.dumps(request))
        except TypeError:  # bytes, sets: no JSON can carry them
            unsendable += 1
    print(f"hostile tool calls: {len(by_sdk)} by the SDK client, {len(raw)} by hand, "
          f"{unsendable} not expressible in JSON")  # fmt: skip
    assert len(by_sdk) + len(raw) + unsendable == len(cases)
    assert len(by_sdk) > 70 and len(raw) > 30 and unsendable <= 12  # bytes

    tokens_path = Path(store.removeprefix("sqlite:///")).with_name("tokens.json")
    entries = json.loads(tokens_path.read_text())
    entries[f"sha256:{digest(token)}"] = user
    tokens_path.write_text(json.dumps(entries))  # read again by the server: no restart

    async def main() -> None:
        async with http_session(endpoint, token) as s:
            for name, wire, expected in by_sdk:
                result = await s.call_tool(name, wire)
                if expected is None:  # list_memories without arguments: it reads, that is all
                    assert not result.is_error and wire is None, (name, wire, text(result))
                    continue
                assert result.is_error, (name, wire, text(result))
                assert text(result) == expected, (name, wire)

    anyio.run(main)
    session = RawSession(endpoint, token)
    assert session.initialize().status_code == 200
    for body in raw:
        answer = session.call(body)
        refused = "error" in answer or answer.get("result", {}).get("isError") is True
        assert refused, (body[:200], answer)
    session.close()
    with Memory(store, embed=False) as memory, memory.session(user_id=user):
        assert memory.facts.all() == []
        for key in ("k", "1", "nul\x00key"[:3]):
            assert memory.facts.history(key) == []


# -- a client going away; telemetry; erase and export ---------------------------------------------


class SlowSaves:
    """Holds every ``save_memory`` call for a while once it has started."""

    def __init__(self) -> None:
        self.started = threading.Event()

    @hookimpl
    def operation_started(self, operation: Any) -> Any:
        if operation.name == "tool" and operation.attributes.get("tool") == "save_memory":
            self.started.set()
            return asyncio.sleep(0.5)
        return None


def test_a_client_that_goes_away_mid_call_loses_nothing(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    from memory_adapters_otel import OpenTelemetry

    slow = SlowSaves()
    tokens = write_tokens(tmp_path / "tokens.json")
    memory = Memory(
        f"sqlite:///{tmp_path / 'memory.db'}",
        embed=False,
        plugins=[TokenFile(tokens), slow, OpenTelemetry(tracer_provider=provider)],
    )
    with server_in_thread(memory) as endpoint:

        async def main() -> None:
            async with http_session(endpoint, TOKENS["alice"]) as s:
                await s.call_tool("save_memory", {"key": "early", "value": "kept"})
            slow.started.clear()
            # the client cancels, closes its session and goes, while the call is under way
            with anyio.move_on_after(5):
                async with (
                    http_session(endpoint, TOKENS["alice"]) as s,
                    anyio.create_task_group() as tg,
                ):
                    tg.start_soon(s.call_tool, "save_memory", {"key": "late", "value": "v"})
                    await anyio.to_thread.run_sync(slow.started.wait, 5)
                    tg.cancel_scope.cancel()
            keys: list[str] = []
            async with http_session(endpoint, TOKENS["alice"]) as s:
                with anyio.move_on_after(10):  # the call, shielded, finishes on the server
                    while keys != ["early", "late"]:
                        await anyio.sleep(0.1)
                        listed = json.loads(text(await s.call_tool("list_memories", {})))
                        keys = sorted(f["key"] for f in listed)
            assert keys == ["early", "late"]

        anyio.run(main)
    with memory.session(user_id="alice"):
        late = memory.facts.get("late")
        assert late is not None and late.value == "v" and late.version == 1
        assert memory.facts.get("early").value == "kept"  # type: ignore[union-attr]
    tools = [s for s in exporter.get_finished_spans() if s.name == "memory_adapters.tool"]
    assert tools, "no tool span"
    attributes = dict(tools[0].attributes or {})
    assert attributes["gen_ai.tool.name"] == "save_memory"
    assert attributes["memory_adapters.tool.caller"] == "mcp"
    assert attributes["memory_adapters.tool.client"] == CLIENT
    memory.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "mongo"])
def test_export_import_and_erase_cover_what_an_mcp_client_wrote(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    writer = Writer("mcp", framework="mcp", agent="claude-code")
    source = open_memory(kind, request, tmp_path)
    memory = next(source)
    scope = Scope(user_id="alice")
    memory.tools.call("save_memory", {"key": "tea", "value": "oolong"}, scope=scope, writer=writer)
    memory.tools.call("save_memory", {"key": "tea", "value": "sencha"}, scope=scope, writer=writer)
    path = tmp_path / "export.jsonl"
    with path.open("w", encoding="utf-8") as out:
        export_jsonl(memory, out)
    assert '"kind":"mcp"' in path.read_text().replace(" ", "")
    copy = Memory("memory://", embed=False)
    with path.open(encoding="utf-8") as inp:
        import_jsonl(copy, inp)
    with copy.session(user_id="alice"):
        assert [c.writer for c in copy.facts.history("tea")] == [
            Writer("mcp", framework="mcp", agent="claude-code")
        ] * 2
    memory.erase(user_id="alice")
    with memory.session(user_id="alice"):
        assert memory.facts.get("tea") is None and memory.facts.history("tea") == []
    with pytest.raises(InvalidInput):
        memory.tools.call("list_memories", {}, scope=scope, writer="mcp")  # type: ignore[arg-type]
    copy.close()
    with pytest.raises(StopIteration):
        next(source)


# -- agents of both adapters and an MCP client, one user's memory ----------------------------------


def test_agents_of_both_adapters_and_an_mcp_client_share_one_users_memory(
    shared_store: tuple[str, dict[str, Any]],
) -> None:
    url, options = shared_store
    memory = Memory(url, store_options=options, embed=False)
    from memory_adapters_langchain import MemoryMiddleware

    pydantic_agent = memory.wrap(
        Agent(scripted([("save_memory", {"key": "tea", "value": "oolong, no sugar"})]))
    )
    with memory.session(user_id="alice", conversation_id="p-1"):
        pydantic_agent.run_sync("I drink oolong, no sugar")
    langchain_agent: Any = create_agent(
        ScriptedChatModel(
            [call_tool("save_memory", key="coffee", value="flat white"), AIMessage("ok")]
        ),
        middleware=[MemoryMiddleware(memory)],
    )
    langchain_agent.invoke(
        {"messages": [("user", "and a flat white in the morning")]},
        {"configurable": {"thread_id": "l-1", "user_id": "alice"}},
    )

    async def mcp_client() -> list[str]:
        async with stdio_session(url, options, "--user", "alice") as s:
            out = [
                text(await s.call_tool("recall_memory", {"key": "tea"})),
                text(await s.call_tool("search_memory", {"query": "flat white"})),
                text(await s.call_tool("search_conversations", {"query": "oolong sugar"})),
            ]
            await s.call_tool("save_memory", {"key": "editor", "value": "helix"})
        return out

    tea, coffee, said = anyio.run(mcp_client)
    assert json.loads(tea)["value"] == "oolong, no sugar"
    assert json.loads(coffee)[0]["key"] == "coffee"
    assert any(h["conversation"] == "p-1" for h in json.loads(said))

    recall = scripted([("recall_memory", {"key": "editor"})])
    with memory.session(user_id="alice", conversation_id="p-2"):
        seen = json.loads(memory.wrap(Agent(recall)).run_sync("which editor?").output)
    assert json.loads(seen[0])["value"] == "helix"
    asker: Any = create_agent(
        ScriptedChatModel([call_tool("recall_memory", key="editor"), AIMessage("ok")]),
        middleware=[MemoryMiddleware(memory)],
    )
    result = asker.invoke(
        {"messages": [("user", "which editor?")]},
        {"configurable": {"thread_id": "l-2", "user_id": "alice"}},
    )
    tool = [m for m in result["messages"] if isinstance(m, ToolMessage)][-1]
    assert json.loads(str(tool.content))["value"] == "helix"
    with memory.session(user_id="alice"):
        kinds = {k: memory.facts.history(k)[0].writer.kind for k in ("tea", "coffee", "editor")}
    assert kinds == {"tea": "model", "coffee": "model", "editor": "mcp"}
    with memory.session(user_id="bob"):
        assert memory.facts.all() == []
    memory.close()


# -- the tokens file and the command's options ------------------------------------------------


def test_the_tokens_file(tmp_path: Path) -> None:
    path = write_tokens(tmp_path / "tokens.json")
    tokens = TokenFile(path)
    assert tokens.mcp_authenticate(TOKENS["alice"], "default") == Scope(user_id="alice")
    assert tokens.mcp_authenticate(TOKENS["bob"], "ns") == Scope(namespace="ns", user_id="bob")
    assert tokens.mcp_authenticate(TOKENS["dave"], "default") == Scope(
        user_id="dave", agent_id="pydantic-ai"
    )
    for wrong in ("", "wrong", TOKENS["alice"].upper(), f"sha256:{digest(TOKENS['bob'])}"):
        assert tokens.mcp_authenticate(wrong, "default") is None
    # revoked by editing the file, without a restart
    time.sleep(0.01)
    path.write_text(json.dumps({TOKENS["bob"]: {"user": "bob", "namespace": "team"}}))
    assert tokens.mcp_authenticate(TOKENS["alice"], "default") is None
    assert tokens.mcp_authenticate(TOKENS["bob"], "x") == Scope(namespace="team", user_id="bob")
    path.write_text("{not json")  # a broken edit: the last good tokens stay
    assert tokens.mcp_authenticate(TOKENS["bob"], "x") == Scope(namespace="team", user_id="bob")
    path.unlink()  # gone: nobody
    assert tokens.mcp_authenticate(TOKENS["bob"], "x") is None
    bad: list[Any] = [
        [],
        {"short-token": "alice"},
        {"sha256:abc": "alice"},
        {TOKENS["alice"]: ""},
        {TOKENS["alice"]: {"user": "alice", "role": "admin"}},
        {TOKENS["alice"]: {"user": "al\nice"}},
        {TOKENS["alice"]: 5},
    ]
    for content in bad:
        path.write_text(json.dumps(content))
        with pytest.raises(InvalidInput) as info:
            TokenFile(path)
        assert TOKENS["alice"] not in str(info.value)  # never the secret


def test_the_command_refuses_to_serve_without_a_scope_or_an_identity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    for args in (
        ["mcp"],  # stdio needs --user
        ["mcp", "--tokens", "t.json"],
        ["mcp", "--http", "127.0.0.1:0"],  # HTTP needs tokens or a plugin: never open
        ["mcp", "--http", "127.0.0.1:0", "--user", "alice"],
        ["mcp", "--http", "nonsense"],
    ):
        with pytest.raises(SystemExit) as info:
            cli.main(["--url", url, *args])
        assert info.value.code == 2, args
    (tmp_path / "bad.json").write_text(json.dumps({"short": "alice"}))
    bad = ["--url", url, "mcp", "--http", "127.0.0.1:0", "--tokens", str(tmp_path / "bad.json")]
    assert cli.main(bad) == 1
    assert "error: InvalidInput: tokens file" in capsys.readouterr().err
    assert cli.main(["--url", url, "mcp", "--user", "bad\nuser"]) == 1
    assert "error: InvalidId" in capsys.readouterr().err


def test_search_conversations_from_a_users_scope_without_a_conversation() -> None:
    memory = Memory("memory://", embed=False)
    for user, said in (("alice", "my tea is oolong"), ("bob", "my tea is sencha")):
        with memory.session(user_id=user, conversation_id=f"c-{uuid.uuid4().hex[:6]}"):
            memory.conversation.append([Message.user(said), Message.assistant("ok")])
    found = json.loads(
        memory.tools.call("search_conversations", {"query": "tea"}, scope=Scope(user_id="bob"))
    )
    assert found and all("sencha" in h["text"] or h["role"] == "assistant" for h in found)
    assert not any("oolong" in json.dumps(h) for h in found)
    assert math.isfinite(found[0]["score"])
    memory.close()


class KeyStore:
    """A third party's ``mcp_authenticate``: async, from its own store of keys."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    @hookimpl
    def mcp_authenticate(self, token: str, namespace: str) -> Any:
        if token not in self.answers:
            return None

        async def lookup() -> Any:
            answer = self.answers[token]
            if isinstance(answer, Exception):
                raise answer
            return answer

        return lookup()


def test_a_plugin_maps_tokens_and_whatever_it_gets_wrong_refuses() -> None:
    plugin = KeyStore(
        {
            "key-alice": Scope("tenant", user_id="alice"),
            "key-conversation": Scope(user_id="alice", conversation_id="c"),
            "key-fork": Scope(user_id="alice", fork=("f",)),
            "key-nobody": Scope(),
            "key-text": "alice",
            "key-raises": RuntimeError("the key store is down"),
        }
    )
    memory = Memory("memory://", embed=False, plugins=[plugin])
    assert memory.hooks.authenticates_mcp
    verifier = MemoryTokenVerifier(memory, "default")

    async def main() -> dict[str, Any]:
        return {t: await verifier.verify_token(t) for t in [*plugin.answers, "unknown"]}

    access = anyio.run(main)
    granted = {t: a for t, a in access.items() if a is not None}
    assert list(granted) == ["key-alice"]
    token = granted["key-alice"]
    assert token.claims is not None
    assert token.claims["memory_adapters.scope"] == Scope("tenant", user_id="alice")
    assert "key-alice" not in token.model_dump_json()  # the secret is not kept
    without = Memory("memory://", embed=False, load_entrypoints=False)
    assert not without.hooks.authenticates_mcp
    memory.close()
    without.close()
