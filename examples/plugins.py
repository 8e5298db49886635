"""Two small plugins: one masks e-mail addresses before a turn is stored, one keeps an audit log.

Runs offline, with no API key:

    pip install . && python examples/plugins.py

Needs: pip install "."

Both are registered on one ``Memory`` only (``Memory(..., plugins=[...])``); other ``Memory``
objects in the process are not affected.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from typing import Any

from memory_adapters import (
    Fact,
    Memory,
    Message,
    RawJSON,
    Record,
    Scope,
    ToolCall,
    ToolResult,
    hookimpl,
)

EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def mask(value: Any) -> Any:
    """``value`` with every e-mail address in its strings replaced, at any depth."""
    if isinstance(value, str):
        return EMAIL.sub("[email]", value)
    if isinstance(value, list):
        return [mask(v) for v in value]
    if isinstance(value, dict):
        return {k: mask(v) for k, v in value.items()}
    return value


def mask_raw(raw: Any) -> Any:
    """``raw`` masked. The framework's JSON text (``RawJSON``, as both built-in adapters write
    it) is parsed, masked and written back as JSON text: a regular expression run over the text
    could break its escapes, and plain text would no longer be the framework's message."""
    if isinstance(raw, RawJSON):
        return RawJSON(json.dumps(mask(json.loads(raw))))
    return mask(raw)


class Redaction:
    """Masks e-mail addresses in everything a stored message holds."""

    @hookimpl
    def before_save(self, scope: Scope, messages: list[Message]) -> None:
        for i, m in enumerate(messages):
            # Replace the list item rather than editing ``m``: the caller's object stays as it
            # was. ``raw`` (the framework's own copy of the message) is masked too, or the
            # address would come back when the framework reads its raw form.
            messages[i] = replace(
                m,
                text=mask(m.text),
                tool_calls=[replace(c, args=mask(c.args)) for c in m.tool_calls],
                tool_results=[replace(r, content=mask(r.content)) for r in m.tool_results],
                raw=mask_raw(m.raw),
            )


class Audit:
    """Keeps one line per write; a real one would log or send these somewhere."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    @hookimpl
    def after_save(self, scope: Scope, records: list[Record]) -> None:
        first, last = records[0].seq, records[-1].seq
        tokens = sum(r.tokens for r in records)
        self.lines.append(
            f"saved seq {first}..{last} of {scope.conversation_id!r} for {scope.user_id!r} "
            f"({len(records)} messages, {tokens} tokens)"
        )

    @hookimpl
    def fact_stored(self, scope: Scope, fact: Fact) -> None:
        self.lines.append(f"fact {fact.key!r} v{fact.version} for {scope.user_id!r}")


def main() -> int:
    audit = Audit()
    memory = Memory("memory://", plugins=[Redaction(), audit])
    with memory.session(user_id="alice", conversation_id="support-1"):
        prompt = Message.user("Please mail the invoice to alice@example.com, not a.b@corp.co.uk.")
        call = ToolCall("c1", "send_invoice", {"to": "alice@example.com"})
        result = ToolResult("c1", {"sent_to": "alice@example.com"}, name="send_invoice")
        memory.conversation.append(
            [
                prompt,
                Message.assistant("", [call]),
                Message.tool(result),
                Message.assistant("Done: the invoice went to alice@example.com."),
            ]
        )
        memory.tools.call("save_memory", {"key": "billing_email", "value": "bob@example.org"})

        print("stored messages:")
        for r in memory.conversation.read():
            m = r.message
            detail = m.text or [c.args for c in m.tool_calls] or [t.content for t in m.tool_results]
            print(f"  {r.seq} {m.role:>9}: {detail}")
        print(f"the caller's own message is unchanged: {prompt.text!r}")
        fact = memory.facts.get("billing_email")
        print(f"fact billing_email: {fact.value if fact else None!r} (facts are not redacted here)")

    print("audit log:")
    for line in audit.lines:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
