"""Memories that form themselves (issue 29): ``Memory(extractor=..., extract_every=N)`` reads
new turns on the ``Memory``'s worker, once per range across processes, and proposes operations
that the core applies under the duplicate rule, with history; failures are harmless; both
adapters; never on a run's path."""

from __future__ import annotations

import contextlib
import json
import math
import re
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from memory_adapters_langchain import MemoryMiddleware
from memory_adapters_langchain.extractor import TOOL_NAME, LangChainExtractor
from memory_adapters_pydantic_ai.extractor import PydanticAIExtractor
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_adapters import (
    ExtractionWarning,
    Extractor,
    Fact,
    FactOp,
    InvalidInput,
    Memory,
    Message,
    hookimpl,
)
from memory_adapters.extraction import (
    NO_EXTRACT,
    STATE_KEY,
    CallableExtractor,
    ExtractionDue,
    parse_ops,
    state_scope,
)
from memory_adapters.testing.embedders import ConceptEmbedder
from memory_adapters.testing.langchain import ScriptedChatModel

STORES = ["memory", "sqlite", "postgres", "mongo"]
TURNS = 200


@contextlib.contextmanager
def memory_on(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, **options: Any
) -> Iterator[Memory]:
    """A fresh Memory over one kind of store with ``options`` (no embedder unless given),
    closed (and its schema dropped) afterwards."""
    options.setdefault("embed", False)
    options.setdefault("extract_idle", None)
    schema = None
    if kind == "memory":
        memory = Memory("memory://", **options)
    elif kind == "sqlite":
        memory = Memory(f"sqlite:///{tmp_path / f'{uuid.uuid4().hex}.db'}", **options)
    elif kind == "mongo":
        import mongomock

        memory = Memory(
            "mongodb://localhost/ma_test",
            store_options={"client": mongomock.MongoClient()},
            **options,
        )
    else:
        url: str = request.getfixturevalue("postgres_url")
        schema = "t_" + uuid.uuid4().hex[:12]
        memory = Memory(url, store_options={"schema": schema}, **options)
    try:
        yield memory
    finally:
        memory.close()
        if schema is not None:
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A chat model that never calls a tool (never ``save_memory``)."""
    return ModelResponse([TextPart("noted")])


def chat(memory: Memory, **options: Any) -> Any:
    return memory.wrap(Agent(FunctionModel(answer)), **options)


def user_lines(prompt: str) -> list[str]:
    """The user messages in an extraction prompt."""
    return [line[len("user: ") :] for line in prompt.splitlines() if line.startswith("user: ")]


def slug(text: str) -> str:
    return "_".join(re.findall(r"[a-z]+", text.lower())[:3]) or "fact"


def rules(texts: list[str], facts: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """A scripted extractor's judgement: a statement about tea is added under a key made of its
    first words (so that differently worded ones get different keys: the core must merge
    them); where the user lives updates ``home_city`` when it is remembered already."""
    ops: list[dict[str, Any]] = []
    known = dict(facts)
    for text in texts:
        lowered = text.lower()
        if "oolong" in lowered:
            ops.append({"op": "add", "key": slug(text), "value": text})
        found = re.search(r"(?:live in|moved to) (\w+)", text)
        if found:
            value = f"lives in {found.group(1)}"
            op = "update" if "home_city" in known else "add"
            ops.append({"op": op, "key": "home_city", "value": value})
            known["home_city"] = value
        if "forget where i live" in lowered:
            ops.append({"op": "forget", "key": "home_city"})
        colour = re.search(r"favourite colour is (\w+)", text)
        if colour:
            ops.append({"op": "add", "key": "favourite_colour", "value": colour.group(1)})
    return ops


class Recorder:
    """A function extractor following :func:`rules`, recording what it was shown."""

    def __init__(self) -> None:
        self.calls = 0
        self.seen: list[str] = []
        self.batches: list[list[str]] = []

    def __call__(self, messages: list[Message], facts: list[Fact]) -> list[Any]:
        self.calls += 1
        texts = [m.text for m in messages if m.role == "user"]
        self.seen.extend(texts)
        self.batches.append(texts)
        return rules(texts, [(f.key, f.value) for f in facts])


def scripted_model(calls: list[str]) -> FunctionModel:
    """A pydantic-ai FunctionModel playing an extractor: it reads the prompt and answers through
    the output tool with the operations of :func:`rules`."""

    def extract(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = str(messages[-1].parts[-1].content)  # type: ignore[union-attr]
        calls.append(prompt)
        facts = [
            tuple(line[2:].split(": ", 1))
            for line in prompt.split("\n\n")[0].splitlines()
            if line.startswith("- ")
        ]
        ops = rules(user_lines(prompt), facts)  # type: ignore[arg-type]
        return ModelResponse([ToolCallPart(info.output_tools[0].name, {"operations": ops})])

    return FunctionModel(extract, model_name="extractor")


def state_of(memory: Memory, conversation_key: str) -> Fact | None:
    namespace = memory.namespace + "#working"
    return memory.store.get_fact(namespace, state_scope(conversation_key), STATE_KEY)


# -- configuration --------------------------------------------------------------------------------


def test_extractors_are_resolved_like_summarizers() -> None:
    def sync(messages: list[Message], facts: list[Fact]) -> list[Any]:
        return [FactOp.add("k", "s")]

    async def coro(messages: list[Message], facts: list[Fact]) -> list[Any]:
        return [{"op": "add", "key": "k", "value": "a"}]

    class Mine(Extractor):
        name = "mine"

        def extract(self, messages: Any, facts: Any, instructions: Any = None) -> list[Any]:
            return [FactOp.add("k", "m")]

    mine = Mine()
    model = FunctionModel(lambda m, i: ModelResponse([TextPart("x")]))
    for spec, cls in (
        (sync, CallableExtractor),
        (coro, CallableExtractor),
        (mine, Mine),
        (model, PydanticAIExtractor),
        (Agent(model), PydanticAIExtractor),
        (ScriptedChatModel(["l"]), LangChainExtractor),
    ):
        memory = Memory("memory://", embed=False, extractor=spec)
        assert memory.extraction is not None
        assert isinstance(memory.extraction.extractor, cls)
        memory.close()
    assert Memory("memory://", embed=False, extractor=mine).extraction.extractor is mine  # type: ignore[union-attr]
    assert Memory("memory://", embed=False).extraction is None
    assert Memory("memory://", embed=False, extractor=sync, extract_every=0).extraction is None
    for spec, value in ((sync, "s"), (coro, "a"), (mine, "m")):
        made = Memory("memory://", embed=False, extractor=spec).extraction
        assert made is not None
        ops, dropped = parse_ops(made.extractor.extract([], []))
        assert [op.value for op in ops] == [value] and not dropped


def test_bad_configuration_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="no installed plugin makes an extractor of 42"):
        Memory("memory://", embed=False, extractor=42)
    for bad in (
        {"extract_every": -1},
        {"extract_every": 1.5},
        {"extract_timeout": 0},
        {"extract_idle": -1},
        {"extract_instructions": 3},
    ):
        with pytest.raises(InvalidInput):
            Memory("memory://", embed=False, extractor=lambda m, f: [], **bad)


def test_fact_ops_and_plain_dicts() -> None:
    assert FactOp.add("tea", "oolong", 0.7) == FactOp("add", "tea", "oolong", 0.7)
    assert FactOp.update("tea", "green") == FactOp.of(
        {"op": "update", "key": "tea", "value": "green"}
    )
    assert FactOp.forget("tea") == FactOp.of({"op": "forget", "key": "tea"})
    ops, dropped = parse_ops(
        [
            {"op": "add", "key": "a", "value": "x"},
            {"op": "upsert", "key": "b", "value": "x"},  # unknown op
            {"op": "add", "key": "", "value": "x"},  # empty key
            {"op": "add", "key": "c"},  # no value
            {"op": "add", "key": "d", "value": "x", "user_id": "bob"},  # no such field
            {"op": "add", "key": "e", "value": float("nan")},  # not JSON
            {"op": "add", "key": "f", "value": "x", "importance": 7},  # out of range
            {"op": "forget", "key": "g", "value": "x"},  # forget takes no value
            "add h",  # not an operation
            FactOp.forget("i"),
        ]
    )
    assert [op.key for op in ops] == ["a", "i"]
    assert len(dropped) == 8
    assert parse_ops({"operations": [{"op": "forget", "key": "x"}]})[0] == [FactOp.forget("x")]
    for garbage in ("[]", None, 42, {"op": "add"}):
        with pytest.raises(InvalidInput):
            parse_ops(garbage)


# -- the hot path: never on a run's path ---------------------------------------------------------


def test_a_turn_never_calls_the_extractor_on_its_own_path() -> None:
    """A slow extractor delays no run: while the extractor is held, every run completes, and no
    extractor call was made from a run's thread (counted, not timed)."""
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []
    finished: list[int] = []

    def slow(messages: list[Message], facts: list[Fact]) -> list[Any]:
        calls.append(threading.get_ident())
        entered.set()
        release.wait(30)
        finished.append(1)
        return [FactOp.add("last", messages[-2].text)]

    memory = Memory("memory://", embed=False, extractor=slow, extract_idle=None)
    agent = chat(memory)
    with memory.session(user_id="ann", conversation_id="c"):
        for i in range(10):
            agent.run_sync(f"turn {i}")
            entered.wait(30)
        # ten runs returned while the one extractor call started was held: none waited for it
        assert len(calls) == 1 and not finished
        assert threading.get_ident() not in calls
        release.set()
        assert memory.extraction is not None
        memory.extraction.wait()
        # the held call took turn 0; the turns stored meanwhile were extracted after it
        assert len(calls) >= 2 and memory.facts.get("last") is not None
    memory.close()


def test_extraction_off_costs_a_run_nothing() -> None:
    """Without an extractor (or with extract_every=0) a run stores no state and starts no job."""
    memory = Memory("memory://", embed=False)
    with memory.session(user_id="ann", conversation_id="c"):
        chat(memory).run_sync("My favourite colour is teal")
        assert state_of(memory, memory.conversation.key) is None
    assert memory.extraction is None
    assert memory.worker.wait(0, tags=ExtractionDue)  # no extraction job was ever queued
    memory.close()


# -- once per range, across processes ------------------------------------------------------------


WORKER = """
import json, sys
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel
from memory_adapters import Memory, FactOp

url, options, name, every, kind, out = sys.argv[1:7]
seen = []


def extract(messages, facts):
    texts = [m.text for m in messages if m.role == "user"]
    seen.append(texts)
    return [FactOp.add("last_" + t.split()[0], t) for t in texts[-1:]]


def model(messages, info):  # a pydantic-ai FunctionModel playing the extractor
    from pydantic_ai.messages import ToolCallPart

    prompt = str(messages[-1].parts[-1].content)
    texts = [line[6:] for line in prompt.splitlines() if line.startswith("user: ")]
    seen.append(texts)
    ops = [{"op": "add", "key": "last_" + t.split()[0], "value": t} for t in texts[-1:]]
    return ModelResponse([ToolCallPart(info.output_tools[0].name, {"operations": ops})])


extractor = extract if kind == "function" else FunctionModel(model, model_name="x")
memory = Memory(url, store_options=json.loads(options), embed=False, extractor=extractor,
                extract_every=int(every), extract_idle=None)
agent = memory.wrap(Agent(FunctionModel(lambda m, i: ModelResponse([TextPart("ok")]))))
for i in range(100):
    for conversation in ("c0", "c1"):
        with memory.session(user_id="ann", conversation_id=conversation):
            agent.run_sync(f"{conversation} turn {i} from {name}")
memory.close(timeout=60)
with open(out, "w") as f:
    json.dump(seen, f)
"""


@pytest.mark.processes
@pytest.mark.parametrize(("every", "kind"), [(3, "function"), (7, "model")])
def test_two_processes_extract_each_range_once(
    shared_store: tuple[str, Any], tmp_path: Path, every: int, kind: str
) -> None:
    """Two processes serve the same two conversations at once, 200 turns each: each message is
    given to an extractor once, and the calls stay within ceil(turns / extract_every) + 1 per
    conversation (the last one: the read-your-writes wait of a third process)."""
    url, options = shared_store
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, json.dumps(options), name, str(every), *args]
        )
        for name, out in zip("ab", outs, strict=True)
        for args in [(kind, str(out))]
    ]
    assert [w.wait(300) for w in workers] == [0, 0]
    calls = [call for out in outs for call in json.loads(out.read_text())]
    last = Recorder()
    memory = Memory(url, store_options=options, embed=False, extractor=last, extract_every=every)
    for conversation in ("c0", "c1"):
        with memory.session(user_id="ann", conversation_id=conversation):
            assert memory.extraction is not None
            memory.extraction.wait()  # what is left, below extract_every: read-your-writes
    calls.extend(last.batches)
    seen = [t for call in calls for t in call]
    print(f"extract_every={every}: {len(calls)} calls ({last.calls} at the end)")
    assert not [t for t, n in Counter(seen).items() if n > 1], "a message extracted twice"
    for conversation in ("c0", "c1"):
        mine = [c for c in calls if c and c[0].startswith(conversation)]
        assert len(mine) <= math.ceil(TURNS / every) + 1
        expected = {f"{conversation} turn {i} from {n}" for i in range(100) for n in "ab"}
        assert {t for t in seen if t.startswith(conversation)} == expected
        with memory.session(user_id="ann", conversation_id=conversation):
            state = state_of(memory, memory.conversation.key)
            assert state is not None and state.value["through"] == 2 * TURNS
            assert state.value["claim"] is None
    memory.close()


def test_a_claimed_range_is_left_to_its_claimant(tmp_path: Path) -> None:
    """While one process extracts a conversation, another one's extraction of it does nothing
    (no call), and after it, what the first covered is not read again."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    entered, release = threading.Event(), threading.Event()
    first_calls: list[list[str]] = []

    def held(messages: list[Message], facts: list[Fact]) -> list[Any]:
        first_calls.append([m.text for m in messages if m.role == "user"])
        entered.set()
        release.wait(30)
        return []

    other = Recorder()
    first = Memory(url, embed=False, extractor=held, extract_idle=None)
    second = Memory(url, embed=False, extractor=other, extract_idle=None)
    with first.session(user_id="ann", conversation_id="c"):
        chat(first).run_sync("one")
    entered.wait(30)
    with second.session(user_id="ann", conversation_id="c"):
        chat(second).run_sync("two")
        assert second.extraction is not None
        second.extraction.wait()
    assert other.calls == 0  # the claim held it back
    release.set()
    assert first.extraction is not None
    first.extraction.wait()
    with second.session(user_id="ann", conversation_id="c"):
        second.extraction.wait()
    assert first_calls == [["one"]] and other.seen == ["two"]
    first.close()
    second.close()


# -- consolidation --------------------------------------------------------------------------------


TEA = [
    "I like oolong tea",
    "Oolong is my favourite tea",
    "my favourite tea is oolong",
    "Honestly, oolong tea is the tea I like most",
    "I drink oolong every morning",
    "oolong, that's the tea for me",
    "Did I mention I love oolong tea?",
    "Nothing beats a cup of oolong",
    "Oolong tea is what I like to drink",
    "My tea of choice: oolong",
]


@pytest.mark.parametrize("kind", STORES)
def test_a_statement_repeated_in_ten_turns_leaves_one_fact(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Worded differently, under ten different keys the extractor made up: one fact, updated;
    with the embedder's duplicate threshold (concepts: every wording is about a drink)."""
    calls: list[str] = []
    embedder = ConceptEmbedder()
    embedder.duplicate_similarity = 0.9
    with memory_on(
        kind, request, tmp_path, embed=embedder, extractor=scripted_model(calls)
    ) as memory:
        agent = chat(memory)
        with memory.session(user_id="ann", conversation_id="tea"):
            for text in TEA:
                agent.run_sync(text)
                assert memory.extraction is not None
                memory.extraction.wait()
            facts = memory.facts.all()
            assert len(facts) == 1, [(f.key, f.value) for f in facts]
            assert len(calls) == len(TEA)
            history = memory.facts.history(facts[0].key)
            assert history[-1].value == TEA[0] and history[0].writer.kind == "extractor"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_without_an_embedder_equal_text_is_the_same_fact(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with memory_on(kind, request, tmp_path, extractor=Recorder()) as memory:
        agent = chat(memory)
        with memory.session(user_id="ann", conversation_id="c"):
            for text in ("I like oolong tea.", "i like OOLONG tea", "I like oolong tea!!"):
                agent.run_sync(text)
            assert memory.extraction is not None
            memory.extraction.wait()
            facts = memory.facts.all()
            assert [f.value for f in facts] == ["I like oolong tea."]  # equal: not rewritten
            assert len(memory.facts.history(facts[0].key)) == 1
            agent.run_sync("I like green tea")  # not about oolong: the rules add nothing
            memory.extraction.wait()
            assert len(memory.facts.all()) == 1


def test_the_minilm_threshold_merges_paraphrases_not_neighbours() -> None:
    pytest.importorskip("onnxruntime")
    memory = Memory("memory://", embed="minilm")
    from memory_adapters.consolidation import consolidated_put
    from memory_adapters.operations import Writer

    model = Writer("model", model="m")
    with memory.session(user_id="ann"):
        facts = memory.facts
        for key, value in (
            ("favourite_tea", "I like oolong tea"),
            ("tea", "Oolong is my favourite tea"),
            ("pet", "has a dog named Rex"),
            ("dog", "owns a dog called Rex"),
            ("green", "likes green tea"),
            ("home_city", "lives in Paris"),
            ("city", "lives in Berlin"),
        ):
            facts._run(consolidated_put(facts, key, value, None, model))
        assert sorted(f.key for f in facts.all()) == [
            "city",
            "favourite_tea",
            "green",
            "home_city",
            "pet",
        ]
    memory.close()


@pytest.mark.parametrize("kind", STORES)
def test_a_contradiction_updates_the_fact_with_history_and_as_of(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    calls: list[str] = []
    with memory_on(kind, request, tmp_path, extractor=scripted_model(calls)) as memory:
        agent = chat(memory)
        with memory.session(user_id="ann", conversation_id="c"):
            agent.run_sync("I live in Paris")
            assert memory.extraction is not None
            memory.extraction.wait()
            paris = memory.facts.get("home_city")
            assert paris is not None and paris.value == "lives in Paris"
            between = time.time()
            time.sleep(0.01)
            agent.run_sync("I moved to Berlin last month")
            memory.extraction.wait()
            # the extractor saw the remembered fact, and updated it
            assert "- home_city: lives in Paris" in calls[-1]
            now = memory.facts.get("home_city")
            assert now is not None and now.value == "lives in Berlin" and now.version == 2
            assert [f.key for f in memory.facts.all()] == ["home_city"]
            history = memory.facts.history("home_city")
            assert [c.value for c in history] == ["lives in Berlin", "lives in Paris"]
            writer = history[0].writer
            assert writer.kind == "extractor" and writer.model == "function:extractor"
            assert writer.conversation == memory.conversation.key
            assert (writer.start_seq, writer.end_seq) == (3, 4)
            assert history[1].writer.start_seq == 1
            old = memory.facts.get("home_city", as_of=between)
            assert old is not None and old.value == "lives in Paris" and old.version == 1
            assert memory.facts.get("home_city", as_of=time.time()) == now
            assert memory.facts.get("home_city", as_of=paris.updated_at - 1) is None
            # search never returns the superseded value
            found = memory.facts.search("lives Paris Berlin")
            assert [f.value for f in found] == ["lives in Berlin"]
            # forget ends the fact; history keeps it, and it can be restored
            agent.run_sync("Please forget where I live")
            memory.extraction.wait()
            assert memory.facts.get("home_city") is None
            assert memory.facts.history("home_city")[0].op == "forget"
            before = memory.facts.get("home_city", as_of=time.time() - 0.001)
            kept = memory.facts.get("home_city", as_of=history[0].at)
            assert kept is not None and kept.value == "lives in Berlin"
            assert before is None or before.value == "lives in Berlin"
            f = memory.facts
            assert memory.store.restore_fact(f.namespace, f._owner, kept)
            restored = memory.facts.get("home_city")
            assert restored is not None and restored.value == "lives in Berlin"


# -- failures are harmless ------------------------------------------------------------------------


def run_turns(memory: Memory, texts: list[str]) -> list[Any]:
    agent = chat(memory)
    outputs = []
    with memory.session(user_id="ann", conversation_id="c"):
        for text in texts:
            outputs.append(agent.run_sync(text).output)
        assert memory.extraction is not None
        memory.extraction.wait()
    return outputs


def caught(memory: Memory, texts: list[str]) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert run_turns(memory, texts) == ["noted"] * len(texts)  # every run succeeded
    return [w for w in got if issubclass(w.category, ExtractionWarning)]


TEXTS = ["I live in Paris", "I like oolong tea", "My favourite colour is teal"]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_an_extractor_that_raises_fails_nothing(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    calls = 0

    def broken(messages: list[Message], facts: list[Fact]) -> list[Any]:
        nonlocal calls
        calls += 1
        raise RuntimeError("provider down")

    with memory_on(kind, request, tmp_path, extractor=broken) as memory:
        got = caught(memory, TEXTS)
        assert calls == 1  # it backs off after a failure
        assert any("provider down" in str(w.message) for w in got)
        extraction = memory.extraction
        assert extraction is not None and extraction.failures == 1 == extraction.calls
        with memory.session(user_id="ann", conversation_id="c"):
            assert memory.facts.all() == []
            state = state_of(memory, memory.conversation.key)
            assert state is not None and state.value["through"] == 0
            assert state.value["claim"] is None  # given back


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_an_extractor_that_hangs_is_given_up_on(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    hold = threading.Event()

    def hangs(messages: list[Message], facts: list[Fact]) -> list[Any]:
        hold.wait(60)
        return [FactOp.add("late", "should never be written")]

    with memory_on(kind, request, tmp_path, extractor=hangs, extract_timeout=0.2) as memory:
        got = caught(memory, TEXTS)
        assert any("took longer than 0.2 s" in str(w.message) for w in got)
        with memory.session(user_id="ann", conversation_id="c"):
            assert memory.facts.all() == []
        started = time.monotonic()
        memory.close(timeout=5)  # nothing hangs shutdown
        assert time.monotonic() - started < 5
    hold.set()


def test_close_gives_up_on_a_hanging_async_extractor() -> None:
    entered = threading.Event()

    async def hangs(messages: list[Message], facts: list[Fact]) -> list[Any]:
        import asyncio

        entered.set()
        await asyncio.sleep(60)
        return []

    memory = Memory("memory://", embed=False, extractor=hangs, extract_timeout=120)
    with memory.session(user_id="ann", conversation_id="c"):
        chat(memory).run_sync("I live in Paris")
    assert entered.wait(10)
    with pytest.warns(ExtractionWarning, match="abandoned 1 extraction"):
        memory.close(timeout=0.2)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_an_extractor_that_answers_garbage_writes_no_bad_fact(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    answers: list[Any] = [
        "I think the user likes tea",  # not a list: the whole answer is refused
        [
            {"op": "add", "key": "colour", "value": "teal"},  # good
            {"op": "add", "key": "x" * 5000, "value": "too long a key"},
            {"op": "add", "key": "bad\nkey", "value": "control character"},
            {"op": "remember", "key": "k", "value": "v"},
            {"op": "add", "key": "secret", "value": {"nested": float("inf")}},
            None,
            {"op": "update", "key": "city", "value": "Paris"},  # good
        ],
    ]

    def garbage(messages: list[Message], facts: list[Fact]) -> Any:
        return answers.pop(0) if answers else []

    with memory_on(kind, request, tmp_path, extractor=garbage, extract_every=1) as memory:
        extraction = memory.extraction
        assert extraction is not None
        got = caught(memory, TEXTS[:1])
        assert extraction.failures == 1 and any("not 'I think" in str(w.message) for w in got)
        extraction._retry_at = 0.0  # as after the back-off
        got = caught(memory, TEXTS[1:2])
        assert extraction.dropped == 5 and extraction.applied == 2
        assert any("5 malformed operations" in str(w.message) for w in got)
        with memory.session(user_id="ann", conversation_id="c"):
            facts = {f.key: f.value for f in memory.facts.all()}
            assert facts == {"colour": "teal", "city": "Paris"}


# -- scope and the application's say --------------------------------------------------------------


@pytest.mark.parametrize("kind", STORES)
def test_another_users_facts_are_never_touched(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    def greedy(messages: list[Message], facts: list[Fact]) -> list[Any]:
        return [
            {"op": "add", "key": "home_city", "value": "lives in Paris"},
            {"op": "forget", "key": "tea"},
            {"op": "add", "key": "tea", "value": "mine", "user_id": "bob"},  # dropped
        ]

    with memory_on(kind, request, tmp_path, extractor=greedy) as memory:
        with memory.session(user_id="bob"):
            memory.facts.put("tea", "green")
            memory.facts.put("home_city", "lives in Oslo")
        with memory.session(user_id="ann"):
            memory.facts.put("tea", "oolong")
        run_turns(memory, ["I live in Paris"])
        with memory.session(user_id="bob"):
            assert {f.key: f.value for f in memory.facts.all()} == {
                "tea": "green",
                "home_city": "lives in Oslo",
            }
        with memory.session(user_id="ann"):
            assert {f.key: f.value for f in memory.facts.all()} == {"home_city": "lives in Paris"}


def test_a_hook_drops_and_rewrites_proposals() -> None:
    class Guard:
        seen: list[list[FactOp]] = []

        @hookimpl
        def facts_proposed(self, scope: Any, operations: list[FactOp], messages: Any) -> None:
            self.seen.append(list(operations))
            operations[:] = [
                FactOp.add(op.key, re.sub(r"\d{4}", "****", str(op.value)))
                for op in operations
                if "card" not in op.key
            ]
            operations.append("garbage")  # type: ignore[arg-type]  # checked again: dropped

    def extract(messages: list[Message], facts: list[Fact]) -> list[Any]:
        return [FactOp.add("card_number", "4111 1111"), FactOp.add("pin_hint", "1234 is it")]

    memory = Memory("memory://", embed=False, extractor=extract, plugins=[Guard()])
    run_turns(memory, ["my card is 4111 1111 and my pin 1234"])
    with memory.session(user_id="ann"):
        assert {f.key: f.value for f in memory.facts.all()} == {"pin_hint": "**** is it"}
    assert memory.extraction is not None and memory.extraction.dropped == 1
    assert len(Guard.seen) == 1 and len(Guard.seen[0]) == 2
    memory.close()


@pytest.mark.parametrize("kind", STORES)
def test_read_your_writes_after_wait(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """extract_every=5 and one turn: wait() extracts what is pending, and search finds it."""
    with memory_on(kind, request, tmp_path, extractor=Recorder(), extract_every=5) as memory:
        agent = chat(memory)
        with memory.session(user_id="ann", conversation_id="c"):
            agent.run_sync("My favourite colour is teal")
            assert memory.extraction is not None
            assert memory.extraction.calls == 0
            memory.extraction.wait()
            assert [f.value for f in memory.facts.search("favourite colour")] == ["teal"]


def test_idle_conversations_are_extracted() -> None:
    recorder = Recorder()
    memory = Memory(
        "memory://", embed=False, extractor=recorder, extract_every=10, extract_idle=0.05
    )
    with memory.session(user_id="ann", conversation_id="c"):
        chat(memory).run_sync("My favourite colour is teal")
        deadline = time.monotonic() + 10
        while recorder.calls == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert memory.extraction is not None
        memory.extraction.wait(flush=False)
        assert memory.facts.get("favourite_colour") is not None
    memory.close()


def test_per_run_opt_out_in_both_adapters() -> None:
    recorder = Recorder()
    memory = Memory("memory://", embed=False, extractor=recorder)
    with memory.session(user_id="ann", conversation_id="p"):
        agent = chat(memory)
        agent.run_sync("secret one", metadata={"memory_extract": False})
        agent.run_sync("public one")
        chat(memory, extract=False).run_sync("secret two")
        assert memory.extraction is not None
        memory.extraction.wait()
        marked = [r.message.meta.get(NO_EXTRACT) for r in memory.conversation.read()]
        assert marked == [True, True, None, None, True, True]
    lc_agent: Any = create_agent(
        ScriptedChatModel(["ok"]), middleware=[MemoryMiddleware(memory, tools=False)]
    )
    lc_agent.invoke(
        {"messages": [("user", "secret three")]},
        {"configurable": {"thread_id": "l", "user_id": "ann", "memory_extract": False}},
    )
    lc_agent.invoke(
        {"messages": [("user", "public two")]},
        {"configurable": {"thread_id": "l", "user_id": "ann"}},
    )
    with memory.session(user_id="ann", conversation_id="l"):
        memory.extraction.wait()
    assert recorder.seen == ["public one", "public two"]
    memory.close()


# -- erase, retention, clear -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", STORES)
def test_erase_retention_and_clear_cover_the_extraction_state(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    recorder = Recorder()
    with memory_on(kind, request, tmp_path, extractor=recorder) as memory:
        run_turns(memory, ["I live in Paris"])
        with memory.session(user_id="ann", conversation_id="c"):
            key = memory.conversation.key
        assert state_of(memory, key) is not None
        with memory.session(user_id="bob", conversation_id="c"):
            chat(memory).run_sync("I live in Oslo")
            assert memory.extraction is not None
            memory.extraction.wait()
            bob = memory.conversation.key
        memory.erase(user_id="ann")
        assert state_of(memory, key) is None and state_of(memory, bob) is not None
        memory.retain(idle_seconds=0)
        assert state_of(memory, bob) is None
        # a conversation cleared and written again is extracted from its start
        with memory.session(user_id="cy", conversation_id="c"):
            agent = chat(memory)
            agent.run_sync("I live in Rome")
            memory.extraction.wait()
            memory.conversation.clear()
            agent.run_sync("I moved to Lima")
            memory.extraction.wait()
        assert recorder.seen[-2:] == ["I live in Rome", "I moved to Lima"]


# -- both adapters, end to end ---------------------------------------------------------------------


def asking(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The next conversation's model: asks search_memory, then answers with what it found."""
    returns = [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]  # fmt: skip
    if not returns:
        prompt = [
            p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, UserPromptPart)
        ][-1]  # fmt: skip
        return ModelResponse([ToolCallPart("search_memory", {"query": prompt})])
    return ModelResponse([TextPart(f"From memory: {returns[-1].content}")])


@pytest.mark.parametrize("kind", STORES)
def test_pydantic_ai_agent_that_never_saves_still_remembers(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    calls: list[str] = []
    with memory_on(kind, request, tmp_path, extractor=scripted_model(calls)) as memory:
        first = chat(memory)
        with memory.session(user_id="ann", conversation_id="monday"):
            first.run_sync("Hi! I like oolong tea, by the way.")
            first.run_sync("Also, I live in Lisbon.")
        assert memory.extraction is not None
        memory.extraction.wait()  # read-your-writes, for the test
        assert 1 <= len(calls) <= 2  # extract_every=1: at most one call per turn
        second = memory.wrap(Agent(FunctionModel(asking)))
        with memory.session(user_id="ann", conversation_id="tuesday"):
            result = second.run_sync("oolong tea")
            assert "I like oolong tea" in result.output
        with memory.session(user_id="ann", conversation_id="wednesday"):
            result = second.run_sync("Where do I live? Lisbon?")
            assert "lives in Lisbon" in result.output
        with memory.session(user_id="ann", conversation_id="monday"):
            assert not [c for r in memory.conversation.read() for c in r.message.tool_calls]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_langchain_agent_that_never_saves_still_remembers(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    prompts: list[list[BaseMessage]] = []

    def extract(messages: list[BaseMessage]) -> AIMessage:
        prompts.append(messages)
        ops = rules(user_lines(messages[-1].text), [])
        call = {"name": TOOL_NAME, "args": {"operations": ops}, "id": f"x{len(prompts)}"}
        return AIMessage("", tool_calls=[call])

    extractor = ScriptedChatModel([extract], model_name="extractor")

    def ask(messages: list[BaseMessage]) -> AIMessage:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if not results:
            query = [m for m in messages if m.type == "human"][-1].text
            call = {"name": "search_memory", "args": {"query": query}, "id": "s1"}
            return AIMessage("", tool_calls=[call])
        return AIMessage(f"From memory: {results[-1].text}")

    with memory_on(kind, request, tmp_path, extractor=extractor) as memory:
        never_saves: Any = create_agent(
            ScriptedChatModel(["noted"]), middleware=[MemoryMiddleware(memory)]
        )
        config: Any = {"configurable": {"thread_id": "monday", "user_id": "ann"}}
        never_saves.invoke({"messages": [("user", "I like oolong tea")]}, config)
        never_saves.invoke({"messages": [("user", "I live in Porto")]}, config)
        assert memory.extraction is not None
        with memory.session(user_id="ann", conversation_id="monday"):
            memory.extraction.wait()
        asker: Any = create_agent(ScriptedChatModel([ask]), middleware=[MemoryMiddleware(memory)])
        config = {"configurable": {"thread_id": "tuesday", "user_id": "ann"}}
        out = asker.invoke({"messages": [("user", "oolong tea")]}, config)
        assert "I like oolong tea" in out["messages"][-1].text
        # extract_every=1: a call per turn, or one for both when the second came before the
        # first's job started
        assert 1 <= len(prompts) <= 2
        with memory.session(user_id="ann"):
            city = memory.facts.get("home_city")
            assert city is not None and city.value == "lives in Porto"
            writer = memory.facts.history("home_city")[0].writer
            assert (
                writer.kind == "extractor"
                and writer.model == "langchain:ScriptedChatModel:extractor"
            )


# -- the save_memory tool follows the same rule ----------------------------------------------------


def test_save_memory_merges_duplicates() -> None:
    memory = Memory("memory://", embed=False)
    with memory.session(user_id="ann"):
        said = {"key": "tea", "value": "I like Oolong tea!"}
        first = json.loads(memory.tools.call("save_memory", said))
        again = json.loads(
            memory.tools.call("save_memory", {"key": "favourite_tea", "value": "i like oolong TEA"})
        )
        assert first == {"saved": "tea", "version": 1} and again == first
        assert [f.key for f in memory.facts.all()] == ["tea"]
        # a short value is compared with its key: these are two facts
        memory.tools.call("save_memory", {"key": "has_dog", "value": "yes"})
        memory.tools.call("save_memory", {"key": "likes_cats", "value": "yes"})
        memory.tools.call("save_memory", {"key": "has dog", "value": "Yes."})
        assert sorted(f.key for f in memory.facts.all()) == ["has_dog", "likes_cats", "tea"]
        memory.tools.call("save_memory", {"key": "tea", "value": "green", "importance": 0.9})
        fact = memory.facts.get("tea")
        assert fact is not None and fact.value == "green" and fact.importance == 0.9
    concepts = ConceptEmbedder()
    concepts.duplicate_similarity = 0.9
    memory = Memory("memory://", embed=concepts)
    with memory.session(user_id="ann"):
        memory.tools.call("save_memory", {"key": "tea", "value": "I drink oolong"})
        saved = json.loads(
            memory.tools.call("save_memory", {"key": "beverage", "value": "favourite tea"})
        )
        assert saved["saved"] == "tea"
        memory.tools.call("save_memory", {"key": "city", "value": "lives in Lisbon"})
        assert sorted(f.key for f in memory.facts.all()) == ["city", "tea"]
        memory.facts.put("drink", "espresso")  # the application names its keys: not merged
        assert sorted(f.key for f in memory.facts.all()) == ["city", "drink", "tea"]


# -- telemetry and operators -----------------------------------------------------------------------


def test_extraction_runs_are_traced() -> None:
    from memory_adapters_otel import OpenTelemetry
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    memory = Memory(
        "memory://", embed=False, extractor=Recorder(), plugins=[OpenTelemetry(provider)]
    )
    run_turns(memory, ["I live in Paris", "My favourite colour is teal"])
    memory.close()
    spans = [s for s in exporter.get_finished_spans() if s.name == "memory_adapters.extract"]
    # one per turn (extract_every=1), and wait()'s look at the session's conversation
    spans = [s for s in spans if (s.attributes or {}).get("memory_adapters.extract.calls")]
    assert len(spans) == 2
    attributes = dict(spans[0].attributes or {})
    assert attributes["memory_adapters.extract.applied"] == 1
    assert attributes["memory_adapters.extract.first_seq"] == 1
    assert str(attributes["memory_adapters.extractor"]).endswith("Recorder")
    searches = [s for s in exporter.get_finished_spans() if s.name == "memory_adapters.search"]
    assert any(
        s.parent is not None and s.parent.span_id == spans[0].context.span_id for s in searches
    )


def test_the_command_shows_the_extractor_as_writer(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from memory_adapters.cli import app

    url = f"sqlite:///{tmp_path / 'm.db'}"
    memory = Memory(url, embed=False, extractor=Recorder(), extract_idle=None)
    run_turns(memory, ["I live in Paris"])
    memory.close()
    dump = tmp_path / "dump.jsonl"
    out = CliRunner().invoke(app, ["--url", url, "export", "--user", "ann", "-o", str(dump)])
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in dump.read_text().splitlines() if line.strip()]
    history = [c for line in lines for c in line.get("history") or []]
    writers = [c["writer"] for c in history]
    assert writers and writers[0]["kind"] == "extractor"
    assert writers[0]["conversation"].endswith(":ann:c") and writers[0]["end_seq"] == 2
    shown = CliRunner().invoke(app, ["--url", url, "history", "home_city", "--user", "ann"])
    assert shown.exit_code == 0, shown.output
    assert '"lives in Paris"  by extractor ' in shown.output
    assert ":ann:c seqs 1..2)" in shown.output
    as_json = CliRunner().invoke(
        app, ["--url", url, "history", "home_city", "--user", "ann", "--json"]
    )
    assert json.loads(as_json.output)[0]["writer"]["kind"] == "extractor"
    # and it imports back
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    back = CliRunner().invoke(app, ["--url", target, "import", str(dump)])
    assert back.exit_code == 0, back.output
    copy = Memory(target, embed=False)
    with copy.session(user_id="ann"):
        assert copy.facts.history("home_city")[0].writer.kind == "extractor"
    copy.close()


def test_a_forked_child_extracts_on_its_own(tmp_path: Path) -> None:
    from stores import in_forked_child

    memory = Memory(
        f"sqlite:///{tmp_path / 'm.db'}", embed=False, extractor=Recorder(), extract_idle=0.5
    )
    run_turns(memory, ["I live in Paris"])

    def child() -> None:
        with memory.session(user_id="ann", conversation_id="c"):
            # (not an agent run: pydantic-ai's run_sync does not survive a fork, extraction
            # or not)
            memory.conversation.append([Message.user("My favourite colour is teal")])
            assert memory.extraction is not None
            assert memory.extraction.wait(30)
            assert memory.facts.get("favourite_colour") is not None

    assert in_forked_child(child) == 0
    with memory.session(user_id="ann", conversation_id="c"):
        assert memory.facts.get("favourite_colour") is not None
    memory.close()


def test_erase_waits_for_the_extraction_under_way() -> None:
    """An extraction that read a user's turn before the erase must not write facts after it."""
    entered, release = threading.Event(), threading.Event()

    def slow(messages: list[Message], facts: list[Fact]) -> list[Any]:
        entered.set()
        release.wait(30)
        return [FactOp.add("home_city", "lives in Paris")]

    memory = Memory("memory://", embed=False, extractor=slow, extract_idle=None)
    with memory.session(user_id="ann", conversation_id="c"):
        chat(memory).run_sync("I live in Paris")
    assert entered.wait(30)
    erased = threading.Thread(target=memory.erase, kwargs={"user_id": "ann"})
    erased.start()
    erased.join(0.2)
    assert erased.is_alive()  # waiting for the extraction
    release.set()
    erased.join(30)
    with memory.session(user_id="ann"):
        assert memory.facts.all() == []
    memory.close()
