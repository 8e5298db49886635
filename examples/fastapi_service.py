"""A FastAPI service whose pydantic-ai agent remembers each user, and only that user.

One ``Memory`` and one wrapped agent serve every request; each request runs inside
``memory.session(user_id=..., conversation_id=...)``, with the user taken from the request by
the application (a header here; your authentication in a real service), never from the model.
So a user's conversations and facts are theirs: another user's requests cannot see them.

``POST /chat/{conversation_id}`` runs the agent on a message; ``GET /facts`` lists what it
remembers of the caller (``?q=`` searches). This example calls the app in-process with
FastAPI's ``TestClient`` (no server, no socket) and exits; serve it with
``uvicorn examples.fastapi_service:app`` (``pip install uvicorn``).

Store: argv[1] (a URL or a file path), ``$MEMORY_ADAPTERS_URL`` or
``sqlite:///memory_adapters_demo.db``. Offline: the model is a ``FunctionModel`` that saves
what the user says they like with the ``save_memory`` tool.

    pip install ".[pydantic-ai,offline,fastapi]" && python examples/fastapi_service.py

Needs: pip install ".[pydantic-ai,offline,fastapi]"
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException
from fastapi.testclient import TestClient
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import Memory

DEFAULT_URL = "sqlite:///memory_adapters_demo.db"


def offline_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Saves "my favourite X is Y" with the memory tool, else says how much history it saw."""
    last = messages[-1]
    if any(p.part_kind == "tool-return" for p in last.parts):
        return ModelResponse(parts=[TextPart("Noted.")])
    prompt = next((str(p.content) for p in last.parts if p.part_kind == "user-prompt"), "")
    liked = re.search(r"favourite (\w+) is (\w+)", prompt, re.IGNORECASE)
    if liked:
        args = {"key": f"favourite_{liked[1].lower()}", "value": liked[2]}
        return ModelResponse(parts=[ToolCallPart("save_memory", args, "call-1")])
    return ModelResponse(parts=[TextPart(f"I was shown {len(messages)} messages.")])


class ChatIn(BaseModel):
    """A user's message."""

    message: str


class ChatOut(BaseModel):
    """The agent's answer."""

    reply: str


def current_user(x_user_id: Annotated[str, Header()]) -> str:
    """The caller, as the application knows them (stand-in for real authentication)."""
    if not x_user_id.isidentifier():
        raise HTTPException(status_code=401, detail="unknown user")
    return x_user_id


def create_app(memory: Memory) -> FastAPI:
    """The service: one memory and one agent for every request, scoped per request."""
    agent = memory.wrap(Agent(FunctionModel(offline_model)))
    app = FastAPI(title="memory-adapters per-user memory")

    @app.post("/chat/{conversation_id}")
    async def chat(
        conversation_id: str, body: ChatIn, user: Annotated[str, Depends(current_user)]
    ) -> ChatOut:
        async with memory.session(user_id=user, conversation_id=conversation_id):
            result = await agent.run(body.message)
        return ChatOut(reply=str(result.output))

    @app.get("/facts")
    async def facts(user: Annotated[str, Depends(current_user)], q: str = "") -> dict[str, Any]:
        async with memory.session(user_id=user):
            found = await memory.facts.asearch(q) if q else await memory.facts.aall()
        return {fact.key: fact.value for fact in found}

    return app


def store_url(argv: list[str]) -> str:
    """The store URL from argv[1] (a URL or a file path), $MEMORY_ADAPTERS_URL, or the default."""
    arg = argv[1] if len(argv) > 1 else os.environ.get("MEMORY_ADAPTERS_URL") or DEFAULT_URL
    return arg if "://" in arg else f"sqlite:///{arg}"


app = create_app(
    Memory(store_url(sys.argv if __name__ == "__main__" else []), namespace="fastapi_service")
)


def main() -> int:
    chat = f"chat-{uuid.uuid4().hex[:8]}"  # each run a new conversation; facts persist
    with TestClient(app) as client:
        alice, bob = {"X-User-Id": "alice"}, {"X-User-Id": "bob"}
        for message in ("Hi! My favourite tea is oolong.", "What do you remember?"):
            response = client.post(f"/chat/{chat}", json={"message": message}, headers=alice)
            response.raise_for_status()
            print("alice:", message, "->", response.json()["reply"])
        print("alice's facts:", client.get("/facts", headers=alice).json())
        print("bob's facts:  ", client.get("/facts", headers=bob).json())
        print("no user:      ", client.get("/facts").status_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
