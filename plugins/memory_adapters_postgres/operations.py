"""Operations on many conversations and facts at once, as operations (see :mod:`.sql`):
listing conversations, erasing a user, retention. A fact's postings and vectors go with it
(foreign keys, ``ON DELETE CASCADE``)."""

from __future__ import annotations

from typing import Any

from memory_adapters.operations import (
    ConversationInfo,
    EraseReport,
    user_keys,
    working_namespace_of,
)
from memory_adapters.store import prefix_upper_bound

from .sql import Op, Q, Statements


class Operations(Statements):
    """Listing, erasure and retention."""

    def _list_conversations(
        self, prefix: str, *, limit: int = 100, before: tuple[float, str] | None = None
    ) -> Op[list[ConversationInfo]]:
        upper = prefix_upper_bound(prefix)
        below = "" if upper is None else ' AND key COLLATE "C" < %(hi)s::text'
        rows = yield Q(
            self.q(
                "SELECT key, last_seq, total_tokens, last_activity, created_at "
                'FROM {s}.conversations WHERE key COLLATE "C" >= %(lo)s::text' + below + " "
                "AND last_seq > 0 AND (%(b0)s::float8 IS NULL OR last_activity < %(b0)s "
                'OR (last_activity = %(b0)s AND key COLLATE "C" < %(b1)s::text)) '
                'ORDER BY last_activity DESC, key COLLATE "C" DESC LIMIT %(n)s'
            ),
            {
                "lo": prefix,
                "hi": upper,
                "b0": None if before is None else before[0],
                "b1": None if before is None else before[1],
                "n": limit,
            },
        )
        return [ConversationInfo.of(*row) for row in rows]

    def _erase(self, namespace: str, user_id: str) -> Op[EraseReport]:
        keys = user_keys(namespace, user_id)

        def within(col: str, prefix: str) -> str:
            return f'({col} COLLATE "C" >= %({prefix})s AND {col} COLLATE "C" < %({prefix}_hi)s)'

        mine = f"(scope = %(us)s OR {within('scope', 'ap')} OR {within('scope', 'cp')})"
        work = within("scope", "lo")
        p: dict[str, Any] = {"ns": namespace, "wns": keys.working_namespace, "us": keys.user_scope}
        for name, prefix in (
            ("lo", keys.conversation_prefix),
            ("ap", keys.beneath_prefix),
            ("cp", keys.conversation_scope_prefix),
        ):
            p[name], p[name + "_hi"] = prefix, prefix_upper_bound(prefix)
        row = yield Q(
            self.q(
                "WITH k AS (SELECT key FROM {s}.conversations WHERE "
                + within("key", "lo")
                + "), h AS (DELETE FROM {s}.conversations WHERE key IN (SELECT key FROM k) "
                "RETURNING 1), m AS (DELETE FROM {s}.messages WHERE conversation IN "
                "(SELECT key FROM k) RETURNING 1), b AS (DELETE FROM {s}.batches WHERE "
                "conversation IN (SELECT key FROM k)), su AS (DELETE FROM {s}.summaries WHERE "
                + within("conversation", "lo")
                + " RETURNING 1), v AS (SELECT count(*) AS n FROM {s}.fact_vectors WHERE "
                f"(namespace = %(ns)s AND {mine}) OR (namespace = %(wns)s AND {work})), "
                f"f AS (DELETE FROM {{s}}.facts WHERE namespace = %(ns)s AND {mine} RETURNING 1), "
                f"w AS (DELETE FROM {{s}}.facts WHERE namespace = %(wns)s AND {work} RETURNING 1), "
                "hi AS (DELETE FROM {s}.fact_history WHERE "
                f"(namespace = %(ns)s AND {mine}) OR (namespace = %(wns)s AND {work}) RETURNING 1) "
                "SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM m), "
                "(SELECT count(*) FROM su), (SELECT count(*) FROM f), (SELECT count(*) FROM w), "
                "(SELECT n FROM v), (SELECT count(*) FROM hi)"
            ),
            p,
            "one",
        )
        return EraseReport(*(int(x) for x in row))

    def _delete_idle_conversations(self, namespace_prefix: str, idle_before: float) -> Op[int]:
        upper = prefix_upper_bound(namespace_prefix)
        below = "" if upper is None else ' AND key COLLATE "C" < %(hi)s::text'
        rows = yield Q(
            self.q(
                'SELECT key FROM {s}.conversations WHERE key COLLATE "C" >= %(lo)s::text'
                + below
                + " AND last_activity < %(t)s"
            ),
            {"lo": namespace_prefix, "hi": upper, "t": idle_before},
        )
        if not rows:
            return 0
        idle = [r[0] for r in rows]
        # Deleted only if still idle (an append since the read keeps the conversation).
        row = yield Q(
            self.q(
                "WITH x AS (SELECT * FROM unnest(%(keys)s::text[], %(wns)s::text[]) "
                "AS x(key, wns)), h AS (DELETE FROM {s}.conversations c USING x "
                "WHERE c.key = x.key AND c.last_activity < %(t)s RETURNING c.key, x.wns), "
                "m AS (DELETE FROM {s}.messages WHERE conversation IN (SELECT key FROM h)), "
                "b AS (DELETE FROM {s}.batches WHERE conversation IN (SELECT key FROM h)), "
                "su AS (DELETE FROM {s}.summaries WHERE conversation IN (SELECT key FROM h)), "
                "w AS (DELETE FROM {s}.facts f USING h WHERE f.namespace = h.wns AND "
                "(f.scope = h.key OR (f.scope COLLATE \"C\" >= h.key || '/' "
                "AND f.scope COLLATE \"C\" < h.key || '0'))) "
                "SELECT count(*) FROM h"
            ),
            {"keys": idle, "wns": [working_namespace_of(k) for k in idle], "t": idle_before},
            "one",
        )
        return int(row[0])
