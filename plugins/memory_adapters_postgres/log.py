"""The conversation log as operations (see :mod:`.sql`): appends through the ``append_batch``
and ``append_batches`` functions (one statement each), window reads as index range scans on
``(conversation, start_tokens, seq)``, and summaries with their claims."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from memory_adapters.errors import AppendConflict
from memory_adapters.messages import AppendResult, Entry, Record, Summary

from .sql import Op, Q, Statements

_MSG = "seq, data, tokens, batch, run_id, created_at"

# The tail within a token budget %(b)s (at most %(n)s messages): one range of the index
# (conversation, start_tokens, seq), read backwards from the conversation's running total, a
# plain statement (no function: the planner sees it whole, and it is one short plan to run).
# The range is closed on both sides (BETWEEN): the planner then estimates a narrow range and
# keeps the index range scan even in a generic (cached) plan; an open ">=" is guessed at a
# third of the table and may be planned as a full scan and a sort.
_TAIL_WITHIN = (
    f"SELECT {_MSG} FROM {{s}}.messages WHERE conversation = %(c)s AND start_tokens BETWEEN "
    "(SELECT total_tokens FROM {s}.conversations WHERE key = %(c)s) - %(b)s "
    "AND (SELECT total_tokens FROM {s}.conversations WHERE key = %(c)s) "
    "ORDER BY start_tokens DESC, seq DESC LIMIT %(n)s"
)
# The first %(h)s messages (part 0) and the tail (part 1) of a window, in one statement.
_HEAD = f"SELECT 0, {_MSG} FROM {{s}}.messages WHERE conversation = %(c)s ORDER BY seq LIMIT %(h)s"
_HEAD_AND_TAIL_WITHIN = f"({_HEAD}) UNION ALL (SELECT 1, {_TAIL_WITHIN[7:]})"
_HEAD_AND_TAIL = (
    f"({_HEAD}) UNION ALL (SELECT 1, {_MSG} FROM {{s}}.messages WHERE conversation = %(c)s "
    "ORDER BY seq DESC LIMIT %(n)s)"
)


class LogOps(Statements):
    """The operations of the conversation log."""

    def _append_batches(
        self,
        conversation: str,
        batches: Sequence[Sequence[Entry]],
        keys: Sequence[str],
        run_id: str | None,
    ) -> Op[list[AppendResult]]:
        """Append ``batches``, each keyed by its key in ``keys``, as :meth:`append` would one
        after the other, in one statement (and one transaction)."""
        entries = [e for batch in batches for e in batch]
        rows = yield Q(
            self.q("SELECT * FROM {s}.append_batches(%s, %b, %b, %b, %b, %s, %b, %s)"),
            (
                conversation,
                [e.role for e in entries],
                [e.data for e in entries],
                [e.tokens for e in entries],
                [len(batch) for batch in batches],
                run_id,
                list(keys),
                time.time(),
            ),
            "all",
            binary=True,
        )
        return [AppendResult(int(r[0]), int(r[1]), bool(r[2])) for r in rows]

    def _append(
        self,
        conversation: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> Op[AppendResult]:
        try:
            row = yield Q(
                self.q("SELECT * FROM {s}.append_batch(%s, %b, %b, %b, %s, %s, %s, %s)"),
                (
                    conversation,
                    [e.role for e in entries],
                    [e.data for e in entries],
                    [e.tokens for e in entries],
                    run_id,
                    idempotency_key,
                    expected_last_seq,
                    time.time(),
                ),
                "one",
                binary=True,
            )
        except self._psycopg.Error as exc:
            actual = int(exc.diag.message_detail or 0)
            raise AppendConflict(conversation, expected_last_seq or 0, actual) from None
        return AppendResult(int(row[0]), int(row[1]), bool(row[2]))

    def _tail(
        self, conversation: str, *, max_tokens: int | None = None, max_messages: int | None = None
    ) -> Op[list[Record]]:
        if max_tokens is None:
            rows = yield Q(
                self.q(
                    f"SELECT {_MSG} FROM {{s}}.messages WHERE conversation = %s "
                    "ORDER BY seq DESC LIMIT %s"
                ),
                (conversation, max_messages),
            )
        else:
            rows = yield Q(
                self.q(_TAIL_WITHIN), {"c": conversation, "b": max_tokens, "n": max_messages}
            )
        return Record.from_rows(reversed(rows))

    def _head_and_tail(
        self,
        conversation: str,
        *,
        head: int,
        max_tokens: int | None = None,
        max_messages: int | None = None,
    ) -> Op[tuple[list[Record], list[Record]]]:
        rows = yield Q(
            self.q(_HEAD_AND_TAIL if max_tokens is None else _HEAD_AND_TAIL_WITHIN),
            {"c": conversation, "h": head, "b": max_tokens, "n": max_messages},
        )
        first = Record.from_rows(r[1:] for r in rows if r[0] == 0)
        last = Record.from_rows(r[1:] for r in rows if r[0] == 1)
        last.reverse()
        return first, last

    def _read(
        self,
        conversation: str,
        *,
        start_seq: int = 1,
        end_seq: int | None = None,
        limit: int | None = None,
    ) -> Op[list[Record]]:
        rows = yield Q(
            self.q(
                f"SELECT {_MSG} FROM {{s}}.messages WHERE conversation = %s AND seq >= %s "
                "AND seq <= %s ORDER BY seq LIMIT %s"
            ),
            (conversation, start_seq, end_seq if end_seq is not None else 2**62, limit),
        )
        return Record.from_rows(rows)

    def _last_seq(self, conversation: str) -> Op[int]:
        row = yield Q(
            self.q("SELECT last_seq FROM {s}.conversations WHERE key = %s"), (conversation,), "one"
        )
        return 0 if row is None else int(row[0])

    def _delete_conversation(self, conversation: str) -> Op[int]:
        row = yield Q(
            self.q(
                "WITH m AS (DELETE FROM {s}.messages WHERE conversation = %(c)s RETURNING 1), "
                "b AS (DELETE FROM {s}.batches WHERE conversation = %(c)s), "
                "s AS (DELETE FROM {s}.summaries WHERE conversation = %(c)s), "
                "h AS (DELETE FROM {s}.conversations WHERE key = %(c)s) "
                "SELECT count(*) FROM m"
            ),
            {"c": conversation},
            "one",
        )
        return int(row[0])

    def _put_summary(self, conversation: str, summary: Summary) -> Op[None]:
        # The text column holds JSON: the text alone, or with the model that made it. The
        # claim this summary answers (the row at end_seq -1, see _claim_summary) ends.
        text: Any = summary.text
        if summary.model is not None:
            text = {"text": summary.text, "model": summary.model}
        yield Q(
            self.q(
                "WITH r AS (DELETE FROM {s}.summaries WHERE conversation = %(c)s "
                "AND end_seq = -1 AND start_seq <= %(e)s) "
                "INSERT INTO {s}.summaries (conversation, end_seq, start_seq, text, tokens, "
                "created_at) VALUES (%(c)s, %(e)s, %(b)s, %(t)s, %(n)s, %(at)s) "
                "ON CONFLICT (conversation, end_seq) "
                "DO UPDATE SET start_seq = excluded.start_seq, text = excluded.text, "
                "tokens = excluded.tokens, created_at = excluded.created_at"
            ),
            {
                "c": conversation,
                "e": summary.end_seq,
                "b": summary.start_seq,
                "t": json.dumps(text),
                "n": summary.tokens,
                "at": summary.created_at or time.time(),
            },
            "none",
        )

    def _latest_summary(self, conversation: str) -> Op[Summary | None]:
        row = yield Q(
            self.q(
                "SELECT start_seq, end_seq, text, tokens, created_at FROM {s}.summaries "
                "WHERE conversation = %s AND end_seq >= 0 ORDER BY end_seq DESC LIMIT 1"
            ),
            (conversation,),
            "one",
        )
        if row is None:
            return None
        text = json.loads(row[2])
        model = None
        if isinstance(text, dict):
            text, model = text["text"], text.get("model")
        return Summary(int(row[0]), int(row[1]), text, int(row[3]), float(row[4]), model)

    def _claim_summary(
        self, conversation: str, end_seq: int, owner: str, *, lease_seconds: float
    ) -> Op[bool]:
        # A claim is the conversation's row at end_seq -1 (no migration: the claimed end seq
        # in start_seq, the owner in text, tokens -1, the lease's end in created_at). The
        # conflict arm takes the row's lock, so of owners claiming at once one wins.
        now = time.time()
        row = yield Q(
            self.q(
                "INSERT INTO {s}.summaries AS x (conversation, end_seq, start_seq, text, tokens, "
                "created_at) SELECT %(c)s, -1, %(e)s, %(o)s, -1, %(until)s "
                "WHERE NOT EXISTS (SELECT 1 FROM {s}.summaries WHERE conversation = %(c)s "
                "AND end_seq >= %(e)s) "
                "ON CONFLICT (conversation, end_seq) DO UPDATE SET start_seq = excluded.start_seq, "
                "text = excluded.text, created_at = excluded.created_at "
                "WHERE x.created_at <= %(now)s OR x.text = excluded.text RETURNING 1"
            ),
            {
                "c": conversation,
                "e": end_seq,
                "o": json.dumps(owner),
                "until": now + lease_seconds,
                "now": now,
            },
            "one",
        )
        return row is not None
