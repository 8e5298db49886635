"""The conformance suite for pydantic-ai ``ConversationStore`` backends.

Subclass :class:`ConversationStoreConformance` and give it a ``conversation_store`` fixture
that yields a fresh, empty ``pydantic_ai.conversation_store.ConversationStore``; pytest runs
the suite against it::

    import pytest
    from memory_adapters import Memory
    from memory_adapters.testing.pydantic_ai import ConversationStoreConformance
    from memory_adapters_pydantic_ai import MemoryConversationStore

    class TestMyBackend(ConversationStoreConformance):
        @pytest.fixture
        def conversation_store(self, tmp_path):
            yield MemoryConversationStore(Memory(f"sqlite:///{tmp_path / 'db'}"))

It checks what pydantic-ai's contract asks of a backend: an exact round trip of every kind of
message, appending only new messages, ``limit``, the revision compare-and-swap
(``ConversationConflict``) under many concurrent writers, scopes, branches, forks, deletes, and
real ``Agent`` runs through ``conversation=``. pydantic-ai is imported when the tests run, not
when this module is imported, so the kit loads without the ``pydantic-ai`` extra.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import TYPE_CHECKING, TypeVar

import pytest

if TYPE_CHECKING:
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import ConversationStore
    from pydantic_ai.messages import ModelMessage

T = TypeVar("T")

WRITERS = 8
"""How many concurrent writers race to save one conversation from one revision."""


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    """Run an async test body on a fresh event loop."""

    async def main() -> T:
        return await coro_fn()

    return asyncio.run(main())


def sample_messages(tag: str = "") -> list[ModelMessage]:
    """A conversation exercising the message kinds a backend must keep exactly: system and
    user prompts, text, thinking, a tool call and its return, a failed tool return, retry
    feedback and a multi-part user prompt."""
    from datetime import datetime

    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        RetryFeedbackPart,
        RetryInfo,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    ts = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("Be brief.", timestamp=ts),
                UserPromptPart(f"Weather in Lisbon?{tag}", timestamp=ts),
            ],
            timestamp=ts,
            run_id="run-1",
        ),
        ModelResponse(
            parts=[
                ThinkingPart("I should call the tool."),
                TextPart("Let me check."),
                ToolCallPart("get_weather", {"city": "Lisbon", "units": ["c"]}, "call-1"),
                ToolCallPart("get_time", '{"tz": "WET"}', "call-2"),
            ],
            timestamp=ts,
            model_name="function:model",
            run_id="run-1",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    "get_weather", {"celsius": 21, "sky": "sunny ☀"}, "call-1", timestamp=ts
                ),
                ToolReturnPart("get_time", "boom", "call-2", outcome="failed", timestamp=ts),
            ],
            timestamp=ts,
            run_id="run-1",
        ),
        ModelResponse(parts=[TextPart("21°C and sunny.")], timestamp=ts, run_id="run-1"),
        ModelRequest(
            parts=[
                RetryFeedbackPart(
                    "please answer in JSON", retry=RetryInfo(cause="model_retry", attempt=1)
                ),
                UserPromptPart(["and ", "tomorrow?"], timestamp=ts),
            ],
            timestamp=ts,
            run_id="run-2",
        ),
        ModelResponse(parts=[TextPart("Rain.")], timestamp=ts, run_id="run-2"),
    ]


class ConversationStoreConformance:
    """The suite; subclasses provide a ``conversation_store`` fixture (a fresh, empty store)."""

    @pytest.fixture
    def conversation_store(self) -> ConversationStore:
        raise NotImplementedError("give the subclass a conversation_store fixture")

    @staticmethod
    def conversation(cid: str, messages: list[ModelMessage] | None = None) -> Conversation:
        from pydantic_ai.conversation import Conversation

        return Conversation(conversation_id=cid, messages=list(messages or []))

    # -- round trips ------------------------------------------------------------------------------

    def test_a_missing_conversation_loads_as_none(
        self, conversation_store: ConversationStore
    ) -> None:
        async def body() -> None:
            assert await conversation_store.load("nope") is None
            assert await conversation_store.load_entries("nope") is None
            assert await conversation_store.list_conversations() == []

        run(body)

    def test_every_kind_of_message_round_trips_exactly(
        self, conversation_store: ConversationStore
    ) -> None:
        async def body() -> None:
            messages = sample_messages()
            stored = await conversation_store.save(self.conversation("c-1", messages))
            assert len(stored) == len(messages)
            loaded = await conversation_store.load("c-1")
            assert loaded is not None
            assert loaded.messages == messages
            assert loaded.conversation_id == "c-1"
            entries = await conversation_store.load_entries("c-1")
            assert entries is not None
            assert [e.id for e in entries] == [e.id for e in stored]
            assert [e.parent_id for e in entries] == [None, *[e.id for e in stored[:-1]]]

        run(body)

    def test_a_save_appends_only_new_messages(self, conversation_store: ConversationStore) -> None:
        async def body() -> None:
            from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

            first = await conversation_store.save(self.conversation("c", sample_messages()))
            loaded = await conversation_store.load("c")
            assert loaded is not None
            assert await conversation_store.save(loaded) == []  # nothing new: nothing stored
            loaded.messages.append(ModelRequest(parts=[UserPromptPart("next")]))
            loaded.messages.append(ModelResponse(parts=[TextPart("ok")]))
            added = await conversation_store.save(loaded)
            assert len(added) == 2 and added[0].parent_id == first[-1].id
            entries = await conversation_store.load_entries("c")
            assert entries is not None and len(entries) == len(first) + 2

        run(body)

    def test_limit_loads_the_last_messages(self, conversation_store: ConversationStore) -> None:
        async def body() -> None:
            messages = sample_messages() + sample_messages(" again")
            await conversation_store.save(self.conversation("c", messages))
            for limit in (0, 1, 3, len(messages), len(messages) + 5):
                loaded = await conversation_store.load("c", limit=limit)
                assert loaded is not None
                assert loaded.messages == messages[len(messages) - min(limit, len(messages)) :]

        run(body)

    # -- the revision contract --------------------------------------------------------------------

    def test_a_stale_revision_is_a_conflict(self, conversation_store: ConversationStore) -> None:
        async def body() -> None:
            from pydantic_ai.conversation_store import ConversationConflict
            from pydantic_ai.messages import ModelRequest, UserPromptPart

            await conversation_store.save(self.conversation("c", sample_messages()))
            a = await conversation_store.load("c")
            b = await conversation_store.load("c")
            assert a is not None and b is not None and a.revision == b.revision
            a.messages.append(ModelRequest(parts=[UserPromptPart("from a")]))
            b.messages.append(ModelRequest(parts=[UserPromptPart("from b")]))
            await conversation_store.save(a)
            with pytest.raises(ConversationConflict):
                await conversation_store.save(b)
            with pytest.raises(ConversationConflict):  # a new one under a stored id
                await conversation_store.save(self.conversation("c", sample_messages()))
            fresh = await conversation_store.load("c")
            assert fresh is not None and fresh.revision == a.revision
            texts = [
                p.content for m in fresh.messages for p in m.parts if p.part_kind == "user-prompt"
            ]
            assert "from a" in texts and "from b" not in texts

        run(body)

    def test_many_writers_from_one_revision_exactly_one_wins(
        self, conversation_store: ConversationStore
    ) -> None:
        async def body() -> tuple[int, int]:
            from pydantic_ai.conversation_store import ConversationConflict
            from pydantic_ai.messages import ModelRequest, UserPromptPart

            await conversation_store.save(self.conversation("race", sample_messages()))
            copies = []
            for i in range(WRITERS):
                loaded = await conversation_store.load("race")
                assert loaded is not None
                loaded.messages.append(ModelRequest(parts=[UserPromptPart(f"writer {i}")]))
                copies.append(loaded)

            async def save(conversation: Conversation) -> bool:
                try:
                    await conversation_store.save(conversation)
                except ConversationConflict:
                    return False
                return True

            outcomes = await asyncio.gather(*(save(c) for c in copies))
            final = await conversation_store.load("race")
            assert final is not None
            written = [
                p.content
                for m in final.messages
                for p in m.parts
                if p.part_kind == "user-prompt" and str(p.content).startswith("writer")
            ]
            assert len(written) == 1, written
            winner = outcomes.index(True)
            assert written == [f"writer {winner}"]
            return sum(outcomes), len(outcomes)

        wins, tried = run(body)
        assert (wins, tried) == (1, WRITERS)

    def test_a_deleted_conversation_is_gone_and_a_new_one_gets_a_new_revision(
        self, conversation_store: ConversationStore
    ) -> None:
        async def body() -> None:
            from pydantic_ai.conversation_store import ConversationConflict

            await conversation_store.save(self.conversation("c", sample_messages()))
            old = await conversation_store.load("c")
            assert old is not None
            await conversation_store.delete("c")
            assert await conversation_store.load("c") is None
            await conversation_store.delete("c")  # deleting again is a no-op
            await conversation_store.save(self.conversation("c", sample_messages(" new")))
            with pytest.raises(ConversationConflict):  # the copy loaded before the delete
                await conversation_store.save(old)

        run(body)

    def test_write_record_refuses_an_unknown_head(
        self, conversation_store: ConversationStore
    ) -> None:
        async def body() -> None:
            from pydantic_ai.conversation_store import ConversationConflict, ConversationRecord

            record = ConversationRecord(conversation_id="x", head_id="no-such-entry")
            with pytest.raises(ConversationConflict):
                await conversation_store.write_record(record, expected_revision=None)
            assert await conversation_store.load("x") is None

        run(body)

    # -- scopes, branches, forks ------------------------------------------------------------------

    def test_scope_keeps_a_conversation_to_its_owner(
        self, conversation_store: ConversationStore
    ) -> None:
        async def body() -> None:
            from pydantic_ai.conversation_store import ConversationConflict

            await conversation_store.save(self.conversation("a1", sample_messages()), scope="alice")
            await conversation_store.save(self.conversation("b1", sample_messages()), scope="bob")
            assert await conversation_store.load("a1", scope="bob") is None
            assert await conversation_store.load("a1", scope="alice") is not None
            listed = await conversation_store.list_conversations(scope="alice")
            assert [r.conversation_id for r in listed] == ["a1"]
            assert len(await conversation_store.list_conversations()) == 2
            loaded = await conversation_store.load("a1")
            assert loaded is not None
            with pytest.raises(ConversationConflict):
                await conversation_store.save(loaded, scope="bob")
            await conversation_store.delete("a1", scope="bob")  # not bob's: left as it is
            assert await conversation_store.load("a1") is not None

        run(body)

    def test_branch_keeps_the_old_history_and_fork_shares_entries(
        self, conversation_store: ConversationStore
    ) -> None:
        async def body() -> None:
            from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

            messages = sample_messages()
            stored = await conversation_store.save(self.conversation("c", messages))
            loaded = await conversation_store.load("c")
            assert loaded is not None
            branched = await conversation_store.branch("c", at=2, expected_revision=loaded.revision)
            assert branched.messages == messages[:2]
            branched.messages.append(ModelRequest(parts=[UserPromptPart("instead")]))
            branched.messages.append(ModelResponse(parts=[TextPart("new branch")]))
            await conversation_store.save(branched)
            now = await conversation_store.load("c")
            assert now is not None and now.messages[:2] == messages[:2]
            assert len(now.messages) == 4
            record = await conversation_store.read_record("c")
            assert record is not None and record.branches == [stored[-1].id]
            back = await conversation_store.branch(
                "c", from_entry=stored[-1].id, expected_revision=now.revision
            )
            assert back.messages == messages

            fork = await conversation_store.fork("c", at=3, new_conversation_id="f")
            assert fork.messages == messages[:3]
            fork.messages.append(ModelRequest(parts=[UserPromptPart("in the fork")]))
            await conversation_store.save(fork)
            forked = await conversation_store.load("f")
            original = await conversation_store.load("c")
            assert forked is not None and original is not None
            assert len(forked.messages) == 4 and original.messages == messages

        run(body)

    # -- real runs --------------------------------------------------------------------------------

    def test_agent_runs_continue_a_stored_conversation(
        self, conversation_store: ConversationStore
    ) -> None:
        async def body() -> None:
            from pydantic_ai import Agent
            from pydantic_ai.messages import ModelResponse, TextPart
            from pydantic_ai.models.function import AgentInfo, FunctionModel

            seen: list[int] = []

            def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
                seen.append(len(messages))
                return ModelResponse(parts=[TextPart(f"reply {len(seen)}")])

            agent = Agent(FunctionModel(model))
            for turn in range(3):
                conversation = await conversation_store.load("chat") or self.conversation("chat")
                result = await agent.run(f"turn {turn}", conversation=conversation)
                await conversation_store.save(result)
            assert seen == [1, 3, 5]  # every turn saw the whole stored history
            loaded = await conversation_store.load("chat")
            assert loaded is not None and len(loaded.messages) == 6
            assert loaded.usage.requests == 3

        run(body)
