"""memory-adapters without a framework: the three kinds of memory on the embedded SQLite store.

Runs offline, with no API key and no model: the "assistant" replies are canned. Run it twice
to see memory persist between runs:

    python examples/quickstart.py                 # sqlite:///memory_adapters_demo.db (cwd)
    python examples/quickstart.py /tmp/demo.db    # a file path
    python examples/quickstart.py memory://       # any store URL (this one forgets on exit)
    MEMORY_ADAPTERS_URL=sqlite:////tmp/demo.db python examples/quickstart.py

Several copies may run at once against one SQLite file: appends are conditional and retried
on conflict, so no turn is lost or interleaved.
"""

from __future__ import annotations

import os
import sys
import uuid

from memory_adapters import AppendConflict, Memory, Message

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
    with Memory(url) as memory, memory.session(user_id="alice", conversation_id="c-42"):
        # -- 1. conversation history --------------------------------------------------------
        conv = memory.conversation
        past = conv.read()
        user_turns = [r.message.text for r in past if r.message.role == "user"]
        print(f"\n[conversation] {len(past)} messages stored, {len(user_turns)} user turns")
        if user_turns:
            print(f"  Last time you said: {user_turns[-1]!r}")
        else:
            conv.append([Message.system("You are a helpful assistant. Be brief.")])

        run_id = uuid.uuid4().hex
        while True:  # a conditional append, retried if another process appended first
            last = conv.last_seq()
            run = len([r for r in conv.read() if r.message.role == "user"]) + 1
            turn = [
                Message.user(f"Hello again, this is visit number {run}. My favourite tea is oolong."),
                Message.assistant(f"Welcome back! Noted: oolong. (visit {run})"),
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
        print(f"  window for the next model call ({window.tokens} tokens of at most 120):")
        for m in window.messages():
            print(f"    {m.role:>9}: {m.text}")

        # -- 2. long-term facts ---------------------------------------------------------------
        fact = memory.facts.put("favourite_tea", "Alice likes oolong tea", importance=0.8)
        print(f"\n[facts] stored favourite_tea, version {fact.version}")
        for found in memory.facts.search("which tea?"):
            print(f"  search 'which tea?' -> {found.key}: {found.value}")

        # -- 3. working memory with a fork ------------------------------------------------------
        notes = memory.working
        notes.set("goal", "plan a tea tasting", importance=1.0)
        notes.set("budget", 100)
        researcher = notes.fork("researcher")  # a sub-agent's scratchpad
        print(f"\n[working] the fork reads through: goal = {researcher.get('goal')!r}")
        researcher.set("shop", "Tea House, 5th Street")
        researcher.set("budget", 80)
        print(f"  before merge the parent sees shop = {notes.get('shop')!r}")
        report = researcher.merge()
        print(f"  merged {sorted(report.applied)}, conflicts: {len(report.conflicts)}")
        print("  rendered for the prompt:")
        for line in notes.render(max_tokens=200).splitlines():
            print(f"    {line}")

        # -- 4. a memory tool, called by name as a framework adapter would --------------------------
        print(f"\n[tools] {', '.join(spec.name for spec in memory.tools.specs)}")
        answer = memory.tools.call("search_memory", {"query": "tea"})
        print(f"  search_memory(query='tea') -> {answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
