"""One memory for every agent: an MCP client (Claude Desktop, Claude Code, Cursor...) and a
pydantic-ai agent share one user's memory through ``memory-adapters mcp``.

The MCP client here is the ``mcp`` SDK's own, starting the server the way Claude Desktop does
(a ``memory-adapters mcp --user alice`` subprocess speaking MCP on stdio): it saves a fact, and a
pydantic-ai agent of the same application, in a new conversation, finds it. Then the same
memory is served over streamable HTTP, each request's user from its bearer token (a tokens
file): bob's client, whatever arguments it sends, sees none of alice's facts, and a request
without a valid token is refused.

Runs offline, with no API key: the pydantic-ai model is a scripted ``FunctionModel``.

    pip install ".[mcp,pydantic-ai,offline]" && python examples/mcp_server.py

Needs: pip install ".[mcp,pydantic-ai,offline]"

Run it again on the same store: the fact's version grows (memory surviving a restart).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation, TextContent
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import Memory
from memory_adapters.memory import DEFAULT_URL

NAMESPACE = "mcp_example"
SERVER = [sys.executable, "-m", "memory_adapters"]  # the `memory-adapters` command
CLIENT = Implementation(name="claude-desktop-stand-in", version="1")


def text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def desktop_client(url: str) -> None:
    """What Claude Desktop does with {"command": "memory-adapters", "args": ["mcp", ...]}."""
    args = ["--url", url, "mcp", "--user", "alice", "--namespace", NAMESPACE]
    params = StdioServerParameters(
        command=SERVER[0], args=[*SERVER[1:], *args], env=dict(os.environ)
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, client_info=CLIENT) as s,
    ):
        await s.initialize()
        tools = [t.name for t in (await s.list_tools()).tools]
        print(f"the MCP client sees the tools: {', '.join(tools)}")
        saved = await s.call_tool("save_memory", {"key": "favourite_tea", "value": "oolong"})
        print(f"the MCP client saves alice's favourite tea: {text(saved)}")
        refused = await s.call_tool("list_memories", {"user_id": "bob"})
        print(f"and may not name a user: {text(refused)} (error: {refused.is_error})")


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Searches memory once, then answers with the best fact found."""
    returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if returns:
        facts = json.loads(str(returns[0].content))
        answer = f"You like {facts[0]['value']}." if facts else "I don't know yet."
        return ModelResponse(parts=[TextPart(answer)])
    return ModelResponse(parts=[ToolCallPart("search_memory", {"query": "favourite tea"})])


async def http_clients(url: str, folder: Path) -> None:
    tokens = {"alice-token-" + "a" * 24: "alice", "bob-token-" + "b" * 26: "bob"}
    (folder / "tokens.json").write_text(json.dumps(tokens), encoding="utf-8")
    args = ["--url", url, "mcp", "--http", "127.0.0.1:0", "--namespace", NAMESPACE]
    proc = subprocess.Popen(
        [*SERVER, *args, "--tokens", str(folder / "tokens.json")],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        endpoint = proc.stderr.readline().split()[-1]  # "memory-adapters mcp: serving URL"
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        print(f"\nserved over streamable HTTP at {endpoint.rsplit(':', 1)[0]}:<port>/mcp")
        for token, user in tokens.items():
            headers = {"Authorization": f"Bearer {token}"}
            async with (
                httpx2.AsyncClient(headers=headers) as http,
                streamable_http_client(endpoint, http_client=http) as (read, write),
                ClientSession(read, write, client_info=CLIENT) as s,
            ):
                await s.initialize()
                got = await s.call_tool("recall_memory", {"key": "favourite_tea"})
                print(f"{user}'s token recalls favourite_tea: {_short(text(got))}")
        unauthenticated = httpx2.post(endpoint, json={"jsonrpc": "2.0", "id": 1,
                                                      "method": "tools/list"})  # fmt: skip
        print(f"a request without a token: HTTP {unauthenticated.status_code}")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _short(result: str) -> str:
    value: str = json.loads(result).get("value", "nothing (not found)")
    return value


def main(url: str | None) -> None:
    url = url or os.environ.get("MEMORY_ADAPTERS_URL") or DEFAULT_URL
    anyio.run(desktop_client, url)

    memory = Memory(url, namespace=NAMESPACE)
    agent = memory.wrap(Agent(FunctionModel(model)))
    with memory.session(user_id="alice", conversation_id="evening"):
        print("\nalice asks a pydantic-ai agent: which tea should I make?")
        print("  " + agent.run_sync("Which tea should I make?").output)
        memory.conversation.clear()  # this demo's question, gone with its conversation
    with memory.session(user_id="alice"):
        latest = memory.facts.history("favourite_tea")[0]
        print(f"  the fact (version {latest.version}) was written by an {latest.writer.kind} "
              f"client, {latest.writer.agent!r}")  # fmt: skip
    memory.close()

    with tempfile.TemporaryDirectory() as folder:
        anyio.run(http_clients, url, Path(folder))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
