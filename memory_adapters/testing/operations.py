"""The operators' part of the conformance kit: listing conversations, erasing a user,
retention, fact history with its writers, and restoring a fact as an import does.

:class:`OperationsConformance` is mixed into
:class:`~memory_adapters.testing.StoreConformance` and uses its ``store`` fixture. A store's
test module may also give a ``store_dump`` fixture: a zero-argument callable returning every
row of every table (collection) of the store, as ``{table: sorted list of row reprs}``. The
erase and retention tests then check the store itself, not only what its API shows: after
erasing a user, every table is exactly what it was before that user wrote anything.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_adapters import (
    ConversationInfo,
    EraseReport,
    FactChange,
    InvalidId,
    InvalidInput,
    Memory,
    Message,
    ToolArgumentError,
    Writer,
)
from memory_adapters.embedders import WHOLE, Embedding, normalized
from memory_adapters.facts import Fact, supports_vectors
from memory_adapters.messages import Entry, Summary
from memory_adapters.operations import DEFAULT_HISTORY_LIMIT, user_keys
from memory_adapters.run import RunLifecycle
from memory_adapters.scope import Scope
from memory_adapters.store import Store

Dump = Callable[[], dict[str, list[str]]]

NS = "ops"


def _key(user: str | None, conv: str, namespace: str = NS) -> str:
    return Scope(namespace=namespace, user_id=user, conversation_id=conv).conversation_key


def _entries(*texts: str) -> list[Entry]:
    return [Entry.of(Message.user(t), 3, 1 << 20) for t in texts]


def _emb(*values: float) -> Embedding:
    return Embedding("m", len(values), {WHOLE: normalized(list(values))})


def _wait_past(moment: float) -> None:
    """Return once the clock reads later than ``moment`` (at most a clock tick away): what
    is written next is strictly newer. Orders events; asserts nothing about durations."""
    while time.time() <= moment:
        pass


def _populate(memory: Memory, user: str, namespace: str = NS) -> dict[str, int]:
    """Write one user's memory of every kind in ``namespace``; return how many rows of each
    kind an erase of that user must report."""
    store = memory.store
    vectors = supports_vectors(store)
    counts = dict.fromkeys(EraseReport.__slots__, 0)
    for conv in ("c1", "c2"):
        with memory.session(namespace=namespace, user_id=user, conversation_id=conv):
            memory.conversation.append(
                [Message.user(f"hi from {user}"), Message.assistant("hello")]
            )
            memory.conversation.append([Message.user(f"again {user}")])
            memory.working.set("plan", f"{user} plan")
            fork = memory.working.fork("helper")
            fork.set("draft", f"{user} draft")
            counts["working"] += 2
        counts["conversations"] += 1
        counts["messages"] += 3
    key = _key(user, "c1", namespace)
    store.append(key, _entries("retried"), idempotency_key="idem-1")
    counts["messages"] += 1
    store.put_summary(key, Summary(1, 2, f"summary of {user}", 4, time.time()))
    counts["summaries"] += 1
    with memory.session(namespace=namespace, user_id=user):
        memory.facts.put("tea", f"{user} likes oolong")
        memory.facts.put("tea", f"{user} likes sencha")
        memory.facts.put("city", "Lisbon")
        memory.facts.forget("city")
        counts["facts"] += 1  # tea
        counts["history"] += 4 if memory.history_limit else 0
    with memory.session(namespace=namespace, user_id=user, agent_id="planner"):
        memory.facts.put("goal", f"{user} goal")
        counts["facts"] += 1
        counts["history"] += 1 if memory.history_limit else 0
    scope = user_keys(namespace, user)
    store.put_fact(namespace, scope.conversation_scope_prefix + "c9", "note", '"n"', text="note")
    # a scope an adapter keeps beneath the user (the LangGraph store's other namespaces)
    store.put_fact(namespace, scope.beneath_prefix + "lg:docs/", "doc", '"d"', text="doc")
    counts["facts"] += 1
    store.put_fact(
        namespace, scope.user_scope, "gone", '"g"', text="gone", expires_at=time.time() - 1
    )
    counts["facts"] += 2
    if vectors:
        store.put_fact(
            namespace, scope.user_scope, "vec", '"v"', text="vec", embedding=_emb(1.0, 0.0)
        )
        counts["facts"] += 1
        counts["vectors"] += 1
    return counts


def _needs(store: Store, *methods: str) -> None:
    """Skip unless the store implements the optional ``methods`` (the built-in stores all
    do; CI fails on a skip)."""
    missing = [m for m in methods if getattr(type(store), m) is getattr(Store, m)]
    if missing:
        pytest.skip(f"{type(store).__name__} does not implement {', '.join(missing)}")


ALL = ("list_conversations", "erase", "delete_idle_conversations", "fact_history", "restore_fact")


class OperationsConformance:
    """Conversations, erase, retention, fact history and restore on the store under test.
    A store without the optional operations skips these tests, as one without
    ``list_fact_scopes`` skips those."""

    @pytest.fixture
    def store_dump(self) -> Dump | None:
        """Every row of every table of the store (``None``: the suite checks through the
        API only). Store test modules override it."""
        return None

    # -- list conversations ---------------------------------------------------------------------

    def test_list_conversations_newest_first_paged_and_by_prefix(self, store: Store) -> None:
        _needs(store, "list_conversations")
        keys = [_key("ann", "a1"), _key("anna", "b1"), _key("ann", "a2"), _key(None, "anon")]
        keys.append(_key("ann", "x", namespace="ops2"))
        before = time.time()
        for i, key in enumerate(keys):
            store.append(key, _entries(*(f"m{j}" for j in range(i + 1))))
        after = time.time()
        listed = store.list_conversations("ops:")
        assert {c.key for c in listed} == set(keys[:4])
        order = [(c.last_activity, c.key) for c in listed]
        assert order == sorted(order, reverse=True)
        by_key = {c.key: c for c in listed}
        ann = by_key[_key("ann", "a2")]
        assert (ann.namespace, ann.user_id, ann.conversation_id) == ("ops", "ann", "a2")
        assert (ann.messages, ann.tokens) == (3, 9)
        assert before <= ann.created_at <= ann.last_activity <= after
        assert by_key[_key(None, "anon")].user_id is None
        # a user's prefix never takes another user whose id starts with it
        assert {c.key for c in store.list_conversations("ops:ann:")} == {keys[0], keys[2]}
        assert [c.key for c in store.list_conversations("ops2:")] == [keys[4]]
        assert store.list_conversations("nope:") == []
        # pages of two, each after the previous page's last cursor, give the whole listing
        pages: list[ConversationInfo] = []
        cursor = None
        while True:
            page = store.list_conversations("ops:", limit=2, before=cursor)
            if not page:
                break
            assert len(page) <= 2
            pages += page
            cursor = page[-1].cursor
        assert pages == listed
        # appending moves a conversation to the front; its creation time stays
        _wait_past(max(c.last_activity for c in listed))
        store.append(keys[0], _entries("later"))
        first = store.list_conversations("ops:", limit=1)[0]
        assert first.key == keys[0] and first.messages == 2
        assert first.created_at == by_key[keys[0]].created_at
        store.delete_conversation(keys[0])
        assert keys[0] not in {c.key for c in store.list_conversations("ops:")}

    def test_memory_conversations_facade(self, memory: Memory) -> None:
        _needs(memory.store, "list_conversations")
        for user, conv in (("ann", "1"), ("anna", "2"), ("ann", "3")):
            with memory.session(namespace="ops", user_id=user, conversation_id=conv):
                memory.conversation.append([Message.user("hi")])
        with memory.session(namespace="default", user_id="ann", conversation_id="d"):
            memory.conversation.append([Message.user("hi")])
        assert {c.conversation_id for c in memory.conversations(namespace="ops")} == {
            "1",
            "2",
            "3",
        }
        got = memory.conversations(user_id="ann", namespace="ops")
        assert {c.conversation_id for c in got} == {"1", "3"}
        assert [c.conversation_id for c in memory.conversations(user_id="ann")] == ["d"]
        page = memory.conversations(namespace="ops", limit=1)
        rest = memory.conversations(namespace="ops", before=page[0].cursor)
        assert [c.key for c in page + rest] == [
            c.key for c in memory.conversations(namespace="ops")
        ]
        again = asyncio.run(memory.aconversations(user_id="ann", namespace="ops"))
        assert again == got
        bad_cursors: list[Any] = [(1.0,), ("x", "k"), (10**400, "k"), (float("inf"), "k"), "k"]
        bad_calls: list[dict[str, Any]] = [{"limit": 0}, {"limit": "3"}, {"limit": True}]
        for bad in bad_calls + [{"before": c} for c in bad_cursors]:
            with pytest.raises(InvalidInput):
                memory.conversations(**bad)
        with pytest.raises(InvalidId):
            memory.conversations(user_id="")

    # -- erase ---------------------------------------------------------------------------------

    def test_erase_removes_everything_of_one_user_and_nothing_else(
        self, memory: Memory, store_dump: Dump | None
    ) -> None:
        _needs(memory.store, *ALL)
        others = [("anna", NS), ("an", NS), ("bob", NS), ("ann", "ops2")]
        for user, namespace in others:
            _populate(memory, user, namespace)
        with memory.session(namespace=NS, conversation_id="no-user"):
            memory.conversation.append([Message.user("anonymous")])
            memory.facts.put("k", "anonymous fact")
        expected_elsewhere = {
            (user, ns): {c.key for c in memory.conversations(user, ns)} for user, ns in others
        }
        memory.conversation_index.wait()  # the others' messages indexed: part of "before"
        before = store_dump() if store_dump is not None else None
        counts = _populate(memory, "ann", NS)
        if before is not None and store_dump is not None:
            assert store_dump() != before
        report = memory.erase(user_id="ann", namespace=NS)
        assert report == EraseReport(**counts)
        if before is not None and store_dump is not None:
            after = store_dump()
            for table in before:
                assert after[table] == before[table], f"erase changed {table} wrongly"
        assert memory.conversations("ann", NS) == []
        for (user, ns), keys in expected_elsewhere.items():
            assert {c.key for c in memory.conversations(user, ns)} == keys
            with memory.session(namespace=ns, user_id=user, conversation_id="c1"):
                assert memory.working.get("plan") == f"{user} plan"
                fact = memory.facts.get("tea")
                assert fact is not None and fact.value == f"{user} likes sencha"
                assert len(memory.facts.history("tea")) == 2
        with memory.session(namespace=NS, user_id="ann", conversation_id="c1"):
            assert memory.facts.get("tea") is None
            assert memory.facts.history("tea") == []
            assert memory.facts.history("city") == []
            assert memory.working.get("plan") is None
            assert memory.conversation.messages() == []
        with memory.session(namespace=NS, conversation_id="no-user"):
            assert memory.facts.get("k") is not None
        # erasing again finds nothing; the async twin answers alike
        assert asyncio.run(memory.aerase(user_id="ann", namespace=NS)) == EraseReport()
        with pytest.raises(InvalidId):
            memory.erase(user_id="")

    def test_erase_never_reaches_another_user_whatever_the_ids(self, memory: Memory) -> None:
        """Over random pairs of user ids made of the characters that separate key parts
        (``:``, ``/``, ``%``) and prefixes of each other, erasing one leaves the other's
        conversation, facts (user, agent and conversation scopes) and notes whole."""
        _needs(memory.store, "erase", "list_conversations")
        ids = st.text(alphabet="an:/%_2", min_size=1, max_size=5)

        @settings(
            max_examples=12,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(gone=ids, kept=ids, same_namespace=st.booleans())
        def check(gone: str, kept: str, same_namespace: bool) -> None:
            if gone == kept and same_namespace:
                return
            ns = "p-" + uuid.uuid4().hex[:8]
            other_ns = ns if same_namespace else ns + ":x"
            for user, namespace in ((gone, ns), (kept, other_ns)):
                for agent in (None, "a"):
                    with memory.session(
                        namespace=namespace, user_id=user, conversation_id="c", agent_id=agent
                    ):
                        memory.conversation.append([Message.user("hi")])
                        memory.facts.put("k", user)
                        memory.working.set("n", user)
                key = _key(user, "c", namespace)
                memory.store.put_fact(namespace, "conversation:" + key, "k", '"v"', text="v")
            report = memory.erase(user_id=gone, namespace=ns)
            assert (report.conversations, report.facts, report.working) == (1, 3, 1)
            assert [c.user_id for c in memory.conversations(namespace=other_ns)] == [kept]
            for agent in (None, "a"):
                with memory.session(
                    namespace=other_ns, user_id=kept, conversation_id="c", agent_id=agent
                ):
                    assert memory.facts.get("k") is not None
                    assert memory.working.get("n") == kept
            scope = "conversation:" + _key(kept, "c", other_ns)
            assert memory.store.get_fact(other_ns, scope, "k") is not None

        check()

    # -- retention -----------------------------------------------------------------------------

    def test_retention_deletes_exactly_the_idle_conversations(
        self, memory: Memory, store: Store, store_dump: Dump | None
    ) -> None:
        _needs(store, *ALL)
        # the store's own retention: the conversation index is the Memory's, and
        # memory.retain removes it (ConversationSearchConformance)
        memory = Memory(store=store, load_entrypoints=False, embed=False, index_conversations=False)

        def conversation(conv: str, namespace: str = NS) -> None:
            with memory.session(namespace=namespace, user_id="u", conversation_id=conv):
                memory.conversation.append([Message.user(conv)])
                memory.working.set("note", conv)
                memory.working.fork("f").set("draft", conv)
            store.put_summary(_key("u", conv, namespace), Summary(1, 1, conv, 1, time.time()))

        conversation("old1")
        conversation("old2")
        conversation("old", namespace="ops2")
        _wait_past(max(c.last_activity for c in memory.conversations("u", NS)))
        cutoff = time.time()  # later than the old ones' last append, earlier than the new's
        _wait_past(cutoff)
        conversation("new")
        with memory.session(namespace=NS, user_id="u"):
            memory.facts.put("kept", "a fact is not a conversation")
        assert store.delete_idle_conversations("ops:", cutoff) == 2
        assert [c.conversation_id for c in memory.conversations("u", NS)] == ["new"]
        assert [c.conversation_id for c in memory.conversations("u", "ops2")] == ["old"]
        for conv, alive in (("old1", False), ("new", True)):
            with memory.session(namespace=NS, user_id="u", conversation_id=conv):
                assert (memory.working.get("note") is not None) is alive
                assert (memory.working.fork("f").get("draft") is not None) is alive
                assert (store.latest_summary(_key("u", conv)) is not None) is alive
                assert (len(memory.conversation.messages()) == 1) is alive
        with memory.session(namespace=NS, user_id="u"):
            assert memory.facts.get("kept") is not None
        if store_dump is not None:
            rows = "\n".join(r for table in store_dump().values() for r in table)
            assert "old1" not in rows and "old2" not in rows
        # the facade: nothing is a day old; everything of the namespace is idle for 0 seconds
        assert memory.retain(idle_days=1, namespace=NS).conversations == 0
        assert asyncio.run(memory.aretain(idle_seconds=0, namespace=NS)).conversations == 1
        assert [c.conversation_id for c in memory.conversations("u", "ops2")] == ["old"]
        bad_ages: list[dict[str, Any]] = [
            {},
            {"idle_days": 1, "idle_seconds": 1},
            {"idle_days": -1},
            {"idle_days": True},
            {"idle_seconds": 10**400},
            {"idle_days": "30"},
        ]
        for bad in bad_ages:
            with pytest.raises(InvalidInput):
                memory.retain(**bad)
        with pytest.raises(InvalidInput):
            memory.retain(idle_seconds=float("nan"))

    def test_prune_removes_expired_facts_with_their_vectors(
        self, store: Store, store_dump: Dump | None
    ) -> None:
        vectors = supports_vectors(store)
        extra: dict[str, Any] = {"embedding": _emb(0.0, 1.0)} if vectors else {}
        store.put_fact(NS, "s", "old", '"o"', text="old", expires_at=time.time() - 1, **extra)
        store.put_fact(NS, "s", "live", '"l"', text="live", **extra)
        assert store.prune() == 1
        assert [f.key for f in store.list_facts(NS, "s")] == ["live"]
        if store_dump is not None:
            rows = "\n".join(r for table in store_dump().values() for r in table)
            assert "old" not in rows
            if vectors:  # one vector left: the live fact's
                assert store.search_fact_vectors(NS, "s", [0.0, 1.0], model="m")[0].key == "live"

    # -- fact history --------------------------------------------------------------------------

    def test_history_keeps_each_put_and_forget_with_its_writer(self, memory: Memory) -> None:
        _needs(memory.store, "fact_history")
        with memory.session(namespace=NS, user_id="ann", conversation_id="c"):
            memory.facts.put("tea", "oolong")
            memory.facts.put("tea", "sencha", importance=0.5)
            memory.facts.forget("tea")
            memory.facts.put("tea", "matcha")
            history = memory.facts.history("tea")
            assert [(h.op, h.version, h.value) for h in history] == [
                ("put", 1, "matcha"),
                ("forget", 2, None),
                ("put", 2, "sencha"),
                ("put", 1, "oolong"),
            ]
            assert all(isinstance(h, FactChange) for h in history)
            assert all(h.writer == Writer() for h in history)
            ats = [h.at for h in history]
            assert ats == sorted(ats, reverse=True)
            assert memory.facts.history("tea", limit=2) == history[:2]
            assert asyncio.run(memory.facts.ahistory("tea")) == history
            assert memory.facts.history("never") == []
            # a model writes through a memory tool inside a run; the application does not
            run = RunLifecycle(
                memory, memory.scope, framework="test-fw", agent="helper", model="test:model"
            )
            with run.activate():
                memory.tools.call("save_memory", {"key": "tea", "value": "genmaicha"})
                memory.facts.put("tea", "hojicha")  # the application's own code, in the run
                memory.tools.call("forget_memory", {"key": "tea"})
                with pytest.raises(ToolArgumentError):  # a model cannot name the writer
                    memory.tools.call(
                        "save_memory", {"key": "tea", "value": "x", "writer": "application"}
                    )
            memory.tools.call("save_memory", {"key": "tea", "value": "outside"})
            newest = memory.facts.history("tea", limit=4)
            model = Writer("model", run.run.run_id, "test-fw", "helper", "test:model")
            assert [(h.op, h.value, h.writer) for h in newest] == [
                ("put", "outside", Writer()),
                ("forget", None, model),
                ("put", "hojicha", Writer()),
                ("put", "genmaicha", model),
            ]
            with pytest.raises(InvalidInput):
                memory.facts.history("tea", limit=0)

    def test_history_is_bounded_and_can_be_off(self, store: Store) -> None:
        _needs(store, "fact_history")
        small = Memory(store=store, load_entrypoints=False, history_limit=3)
        off = Memory(store=store, load_entrypoints=False, history_limit=0)
        with small.session(namespace=NS, user_id="u"):
            for i in range(7):
                small.facts.put("k", i)
            assert [h.value for h in small.facts.history("k")] == [6, 5, 4]
        # the store itself keeps no more than the limit
        assert [h.version for h in store.fact_history(NS, "user:u", "k")] == [7, 6, 5]
        with off.session(namespace=NS, user_id="v"):
            off.facts.put("k", 1)
            off.facts.forget("k")
            assert off.facts.history("k") == []
        assert store.fact_history(NS, "user:v", "k") == []
        assert Memory(store=store, load_entrypoints=False).history_limit == DEFAULT_HISTORY_LIMIT
        with pytest.raises(InvalidInput):
            Memory(store=store, load_entrypoints=False, history_limit=-1)

    def test_working_memory_keeps_no_history(self, memory: Memory, store: Store) -> None:
        _needs(store, "fact_history")
        with memory.session(namespace=NS, user_id="u", conversation_id="c"):
            memory.working.set("k", 1)
            memory.working.set("k", 2)
            memory.working.delete("k")
            path = memory.working.path
        assert store.fact_history(NS + "#working", path, "k") == []

    # -- restore -------------------------------------------------------------------------------

    def test_restore_fact_writes_exactly_and_idempotently(self, store: Store) -> None:
        _needs(store, "restore_fact", "fact_history")
        now = time.time()
        fact = Fact("tea", {"kind": "oolong", "n": [1, 2]}, 3, 0.7, now - 100, now - 10, now + 1e6)
        app = Writer()
        model = Writer("model", "run-1", "pydantic-ai", "agent", "openai:gpt")
        history = [
            FactChange("tea", 3, fact.value, "put", now - 10, model),
            FactChange("tea", 2, "green", "put", now - 50, app),
            FactChange("tea", 1, "black", "put", now - 100, app),
        ]
        vectors = supports_vectors(store)
        extra: dict[str, Any] = {"embedding": _emb(1.0, 0.0)} if vectors else {}
        assert store.restore_fact(NS, "user:u", fact, history=history, **extra) is True
        got = store.get_fact(NS, "user:u", "tea")
        assert got == fact
        assert store.fact_history(NS, "user:u", "tea") == history
        assert [h.key for h in store.match_terms(NS, "user:u", ["oolong"]).hits] == ["tea"]
        if vectors:
            assert [
                f.key for f in store.search_fact_vectors(NS, "user:u", [1.0, 0.0], model="m")
            ] == ["tea"]
        # idempotent: the same version again, or an older one, changes nothing
        assert store.restore_fact(NS, "user:u", fact, history=history) is False
        older = Fact("tea", "stale", 2, 0.0, now, now)
        assert store.restore_fact(NS, "user:u", older) is False
        assert store.get_fact(NS, "user:u", "tea") == fact
        assert store.fact_history(NS, "user:u", "tea") == history
        # a newer version replaces it; later writes continue its versions
        newer = Fact("tea", "sencha", 5, 0.1, now - 100, now - 1)
        assert asyncio.run(store.arestore_fact(NS, "user:u", newer)) is True
        assert store.get_fact(NS, "user:u", "tea") == newer
        assert store.fact_history(NS, "user:u", "tea") == []
        written = store.put_fact(NS, "user:u", "tea", '"matcha"', text="matcha")
        assert written.version == 6 and written.created_at == newer.created_at
        # a fact restored without expiry, into a scope that had none
        plain = Fact("x", None, 1, 0.0, now, now)
        assert store.restore_fact(NS, "other", plain) is True
        assert store.get_fact(NS, "other", "x") == plain

    def test_async_operations(self, store: Store) -> None:
        _needs(store, *ALL)

        async def main() -> None:
            await store.aappend(_key("u", "c"), _entries("a", "b"))
            listed = await store.alist_conversations("ops:u:")
            assert [c.messages for c in listed] == [2]
            await store.aput_fact(NS, "user:u", "k", '"v"', text="v", writer=Writer())
            await store.adelete_fact(NS, "user:u", "k", writer=Writer())
            history = await store.afact_history(NS, "user:u", "k")
            assert [h.op for h in history] == ["forget", "put"]
            assert await store.adelete_idle_conversations("nope:", time.time()) == 0
            report = await store.aerase(NS, "u")
            assert (report.conversations, report.messages, report.history) == (1, 2, 2)

        asyncio.run(main())
