"""memory-adapters without a framework: the three kinds of memory on the embedded SQLite store.

Runs offline, with no API key and no model: the "assistant" replies are canned.

    pip install . && python examples/quickstart.py

Needs: pip install "."

Run it twice to see memory persist between runs:

    python examples/quickstart.py                 # sqlite:///memory_adapters_demo.db (cwd)
    python examples/quickstart.py /tmp/demo.db    # a file path
    python examples/quickstart.py memory://       # any store URL (this one forgets on exit)
    MEMORY_ADAPTERS_URL=sqlite:////tmp/demo.db python examples/quickstart.py

Several copies may run at once against one SQLite file: appends are conditional and retried
on conflict, so no turn is lost or interleaved.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid

from memory_adapters import AppendConflict, Memory, Message, ToolArgumentError

DEFAULT_URL = "sqlite:///memory_adapters_demo.db"


def store_url(argv: list[str]) -> str:
    """The store URL from argv[1] (a URL or a file path), $MEMORY_ADAPTERS_URL, or the default."""
    if len(argv) > 1:
        arg = argv[1]
        return arg if "://" in arg else "sqlite:///" + arg
    return os.environ.get("MEMORY_ADAPTERS_URL") or DEFAULT_URL


def main(argv: list[str]) -> int:
    url = store_url(argv)
    print(f"store: {url}")
    with (
        Memory(url, namespace="quickstart") as memory,
        memory.session(user_id="alice", conversation_id="c-42"),
    ):
        # -- 1. conversation history --------------------------------------------------------
        conv = memory.conversation
        past = conv.read()
        user_turns = [r.message.text for r in past if r.message.role == "user"]
        print(f"\n[conversation] {len(past)} messages stored, {len(user_turns)} user turns")
        if user_turns:
            print(f"  Last time you said: {user_turns[-1]!r}")
        else:
            # expected_last_seq=0: only if the conversation is still empty (another process
            # may have started it first).
            with contextlib.suppress(AppendConflict):
                system = Message.system("You are a tea shop assistant. Be brief.")
                conv.append([system], expected_last_seq=0)

        run_id = uuid.uuid4().hex
        while True:  # a conditional append, retried if another process appended first
            last = conv.last_seq()
            run = sum(r.message.role == "user" for r in conv.read()) + 1  # fine for a demo
            turn = [
                Message.user(f"Hi, this is visit {run}. My favourite tea is oolong."),
                Message.assistant(f"Nice to see you (visit {run}). Noted: oolong."),
            ]
            try:
                result = conv.append(
                    turn, run_id=run_id, expected_last_seq=last, idempotency_key=run_id
                )
                break
            except AppendConflict:
                continue
        print(f"  appended this turn as seq {result.first_seq}..{result.last_seq}")
        retry = conv.append(turn, idempotency_key=run_id)  # a retried run: stored once
        print(f"  retried with the same idempotency key: duplicate={retry.duplicate}")

        window = conv.window(max_tokens=120)
        shown = window.messages()
        print(
            f"  the window for the next model call holds {len(shown)} of {conv.last_seq()} "
            f"messages, {window.tokens} tokens (budget 120):"
        )
        for m in shown:
            print(f"    {m.role:>9}: {m.text}")

        # -- 2. long-term facts ---------------------------------------------------------------
        fact = memory.facts.put("favourite_tea", "Alice likes oolong tea", importance=0.8)
        print(f"\n[facts] stored favourite_tea, version {fact.version}")
        for found in memory.facts.search("which tea?"):
            print(f"  search 'which tea?' -> {found.key}: {found.value}")

        # -- 3. working memory with a fork ------------------------------------------------------
        notes = memory.working
        left = notes.items()
        print(f"\n[working] {len(left)} notes left from the last run; clearing them for a new task")
        for key in left:
            notes.delete(key)
        notes.set("goal", "plan a tea tasting", importance=1.0)
        notes.set("budget", 100)
        researcher = notes.fork("researcher")  # a sub-agent's scratchpad
        print(f"  the fork reads through: goal = {researcher.get('goal')!r}")
        researcher.set("shop", "Tea House, 5th Street")
        researcher.set("budget", 80)
        print(f"  before merge the parent sees shop = {notes.get('shop')!r}")
        report = researcher.merge()
        print(f"  merged {sorted(report.applied)}, conflicts: {len(report.conflicts)}")
        print("  rendered for the prompt:")
        for line in notes.render(max_tokens=200).splitlines():
            print(f"    {line}")

        # -- 4. a memory tool, called by name as a framework adapter would ------------------------
        print(f"\n[tools] {', '.join(spec.name for spec in memory.tools.specs)}")
        # The arguments come from the model; the scope (alice) comes from the session.
        answer = memory.tools.call("search_memory", {"query": "tea"})
        print(f"  search_memory(query='tea') -> {answer}")
        try:
            memory.tools.call("search_memory", {"query": "tea", "user_id": "bob"})
        except ToolArgumentError as exc:
            print(f"  a model cannot pick whose memory it reads: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
