"""CI: use each extra no example uses, in an environment holding the built wheel.

    python .ci/smoke_extras.py postgres mongo motor embeddings minilm wordllama otel dbos

Run by ``.ci/run_examples.py`` in the wheel-installed environment of those extras, offline and
with no server: each store plugin loads its driver and opens a store (PostgreSQL and MongoDB
on an address where nothing listens, so the driver itself must answer ``StoreUnavailable``,
not ``MissingExtra``), and the ``embeddings`` (``minilm``) and ``wordllama`` extras' offline
models find a fact by meaning.
Only the standard library and the wheel's packages are used.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import memory_adapters
from memory_adapters import Memory, StoreUnavailable

NOBODY = "127.0.0.1:9"
"""The discard port: nothing listens there, so a connection fails at once."""


def refused(url: str, **options: object) -> str:
    """Open ``url`` and write to it; the store must say it is unavailable."""
    try:
        memory = Memory(url, store_options=options)
        with memory.session(user_id="u", conversation_id="c"):
            memory.facts.put("k", "v")
    except StoreUnavailable as exc:
        return f"StoreUnavailable: {str(exc).splitlines()[0][:100]}"
    raise AssertionError(f"{url} should be unavailable")


def postgres() -> str:
    import psycopg  # noqa: F401  the extra's driver
    from memory_adapters_postgres import PostgresStore  # noqa: F401

    return refused(f"postgresql://u@{NOBODY}/db?connect_timeout=2")


def mongo() -> str:
    from memory_adapters_mongo import MongoStore  # noqa: F401

    return refused(f"mongodb://{NOBODY}/db?serverSelectionTimeoutMS=300")


def motor() -> str:
    import motor.motor_asyncio as motor_asyncio
    from memory_adapters_mongo import open_store

    async def write() -> None:
        client: Any = motor_asyncio.AsyncIOMotorClient(
            f"mongodb://{NOBODY}", serverSelectionTimeoutMS=300
        )
        memory = Memory(store=open_store(f"mongodb://{NOBODY}/db", async_client=client))
        async with memory.session(user_id="u", conversation_id="c"):
            await memory.facts.aput("k", "v")

    try:
        asyncio.run(write())
    except StoreUnavailable as exc:
        return f"StoreUnavailable through Motor: {str(exc).splitlines()[0][:80]}"
    raise AssertionError("Motor should find no server")


def embeddings() -> str:
    memory = Memory("memory://")
    assert memory.embedder is not None, "the embeddings extra's default embedder"
    assert memory.embedder.name.startswith("minilm:"), memory.embedder.name
    with memory.session(user_id="u", conversation_id="c"):
        memory.facts.put("favourite_tea", "my favourite tea is oolong")
        memory.facts.put("car", "I drive a blue bicycle to work")
        found = memory.facts.search("Which drink do I prefer?", mode="semantic")
    assert found and found[0].key == "favourite_tea", found
    return f"found by meaning: {found[0].value!r}"


def minilm() -> str:
    memory = Memory("memory://", embed="minilm")
    assert memory.embedder is not None and memory.embedder.name.startswith("minilm:")
    with memory.session(user_id="u", conversation_id="c"):
        memory.facts.put("favourite_tea", "oolong")
        memory.facts.put("dog_name", "Rex")
        found = memory.facts.search("Which drink do I prefer?", mode="semantic")
    assert found and found[0].key == "favourite_tea", found
    return f"found by meaning with {memory.embedder.name}: {found[0].value!r}"


def wordllama() -> str:
    memory = Memory("memory://", embed="wordllama")
    assert memory.embedder is not None and memory.embedder.name.startswith("wordllama:")
    with memory.session(user_id="u", conversation_id="c"):
        memory.facts.put("favourite_tea", "oolong")
        memory.facts.put("dog_name", "Rex")
        found = memory.facts.search("Which drink do I prefer?", mode="semantic")
    assert found and found[0].key == "favourite_tea", found
    return f"found by meaning with {memory.embedder.name}: {found[0].value!r}"


def otel() -> str:
    from memory_adapters_otel import OpenTelemetry
    from opentelemetry import trace

    memory = Memory("memory://")  # no tracer provider configured: the plugin is there, idle
    found = [p for p in memory.pm.get_plugins() if isinstance(p, OpenTelemetry)]
    assert found and not found[0].memory_adapters_active()
    assert not memory.hooks.observes_operations  # no span hook is called, no cost
    memory.close()
    plugin = OpenTelemetry(tracer_provider=trace.get_tracer_provider())
    Memory("memory://", plugins=[plugin]).close()
    return "the plugin loads; idle (no hook called) without a tracer provider"


def dbos() -> str:
    import dbos as dbos_package  # noqa: F401  the extra's engine
    from pydantic_ai.durable_exec.dbos import DBOSAgent  # noqa: F401  pydantic-ai's side

    from memory_adapters import durable

    assert durable.current() is None  # outside a workflow: memory reads and writes live
    return "durable runs found through DBOS; none outside a workflow"


SMOKES: dict[str, Callable[[], str]] = {
    "otel": otel,
    "dbos": dbos,
    "postgres": postgres,
    "mongo": mongo,
    "motor": motor,
    "embeddings": embeddings,
    "minilm": minilm,
    "wordllama": wordllama,
}


def main(extras: list[str]) -> int:
    print("memory_adapters from", memory_adapters.__file__)
    for extra in extras:
        print(f"{extra}: {SMOKES[extra]()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
