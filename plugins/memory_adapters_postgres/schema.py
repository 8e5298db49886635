"""The PostgreSQL schema, created and migrated automatically.

Everything lives in one PostgreSQL schema (``memory_adapters`` by default). Migrations run
in one transaction under an advisory lock, so several processes starting at once are safe;
the schema's ``schema_version`` table records which have run.
"""

from __future__ import annotations

import re

from memory_adapters.errors import InvalidId

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def check_schema_name(name: str) -> str:
    """Validate a schema name: lower-case letters, digits and underscores, 1-63 long."""
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise InvalidId(
            f"schema name {name!r} is not a plain identifier (lower-case letters, digits and "
            "underscores, starting with a letter or underscore, at most 63 characters)"
        )
    return name


# Each migration is a list of statements; {s} is the quoted schema name.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE {s}.conversations (
            key text PRIMARY KEY,
            last_seq bigint NOT NULL,
            total_tokens bigint NOT NULL
        )""",
        """CREATE TABLE {s}.messages (
            conversation text NOT NULL,
            seq bigint NOT NULL,
            batch bigint NOT NULL,
            start_tokens bigint NOT NULL,
            tokens integer NOT NULL,
            role text NOT NULL,
            data text NOT NULL,
            run_id text,
            created_at double precision NOT NULL,
            PRIMARY KEY (conversation, seq)
        )""",
        "CREATE INDEX messages_by_tokens ON {s}.messages (conversation, start_tokens, seq)",
        """CREATE TABLE {s}.batches (
            conversation text NOT NULL,
            idempotency_key text NOT NULL,
            first_seq bigint NOT NULL,
            last_seq bigint NOT NULL,
            PRIMARY KEY (conversation, idempotency_key)
        )""",
        """CREATE TABLE {s}.summaries (
            conversation text NOT NULL,
            end_seq bigint NOT NULL,
            start_seq bigint NOT NULL,
            text text NOT NULL,
            tokens integer NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (conversation, end_seq)
        )""",
        """CREATE TABLE {s}.facts (
            namespace text NOT NULL,
            scope text NOT NULL,
            key text NOT NULL,
            data text NOT NULL,
            version bigint NOT NULL,
            importance double precision NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            expires_at double precision,
            search tsvector NOT NULL,
            PRIMARY KEY (namespace, scope, key)
        )""",
        "CREATE INDEX facts_search ON {s}.facts USING gin (search)",
        "CREATE INDEX facts_expiry ON {s}.facts (expires_at) WHERE expires_at IS NOT NULL",
        # One round trip per append: the conversation's head row is locked, so seq order is
        # commit order, batches never interleave and readers never see a gap.
        """CREATE FUNCTION {s}.append_batch(
            p_conversation text, p_roles text[], p_data text[], p_tokens integer[],
            p_run_id text, p_idempotency_key text, p_expected bigint, p_now double precision
        ) RETURNS TABLE (first_seq bigint, last_seq bigint, duplicate boolean)
        LANGUAGE plpgsql AS $fn$
        DECLARE
            v_last bigint;
            v_total bigint;
            v_first bigint;
            v_end bigint;
            n integer := cardinality(p_roles);
        BEGIN
            SELECT c.last_seq, c.total_tokens INTO v_last, v_total FROM {s}.conversations c
                WHERE c.key = p_conversation FOR UPDATE;
            IF NOT FOUND THEN
                INSERT INTO {s}.conversations (key, last_seq, total_tokens)
                    VALUES (p_conversation, 0, 0) ON CONFLICT (key) DO NOTHING;
                SELECT c.last_seq, c.total_tokens INTO v_last, v_total FROM {s}.conversations c
                    WHERE c.key = p_conversation FOR UPDATE;
            END IF;
            IF p_idempotency_key IS NOT NULL THEN
                SELECT b.first_seq, b.last_seq INTO v_first, v_end FROM {s}.batches b
                    WHERE b.conversation = p_conversation
                    AND b.idempotency_key = p_idempotency_key;
                IF FOUND THEN
                    RETURN QUERY SELECT v_first, v_end, true;
                    RETURN;
                END IF;
            END IF;
            IF p_expected IS NOT NULL AND p_expected <> v_last THEN
                RAISE EXCEPTION 'append conflict' USING ERRCODE = 'MA409', DETAIL = v_last::text;
            END IF;
            v_first := v_last + 1;
            v_end := v_last + n;
            INSERT INTO {s}.messages
                (conversation, seq, batch, start_tokens, tokens, role, data, run_id, created_at)
            SELECT p_conversation, v_last + u.i, v_first,
                   v_total + coalesce(sum(u.t) OVER (ORDER BY u.i
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0),
                   u.t, u.r, u.d, p_run_id, p_now
            FROM unnest(p_roles, p_data, p_tokens) WITH ORDINALITY AS u(r, d, t, i);
            UPDATE {s}.conversations
                SET last_seq = v_end,
                    total_tokens = v_total + (SELECT coalesce(sum(x), 0) FROM unnest(p_tokens) x)
                WHERE key = p_conversation;
            IF p_idempotency_key IS NOT NULL THEN
                INSERT INTO {s}.batches VALUES (p_conversation, p_idempotency_key, v_first, v_end);
            END IF;
            RETURN QUERY SELECT v_first, v_end, false;
        END
        $fn$""",
        # The tail within a token budget. The range is closed on both sides (BETWEEN): with
        # parameters the planner then estimates a narrow range and keeps the index range
        # scan even in a generic (cached) plan; an open ">=" is guessed at a third of the
        # table and may be planned as a full scan and a sort.
        """CREATE FUNCTION {s}.tail_within(p_conversation text, p_budget bigint, p_limit bigint)
        RETURNS TABLE (seq bigint, data text, tokens integer, batch bigint, run_id text,
                       created_at double precision)
        LANGUAGE plpgsql STABLE AS $fn$
        DECLARE
            v_total bigint;
        BEGIN
            SELECT c.total_tokens INTO v_total FROM {s}.conversations c
                WHERE c.key = p_conversation;
            IF NOT FOUND THEN
                RETURN;
            END IF;
            RETURN QUERY SELECT m.seq, m.data, m.tokens, m.batch, m.run_id, m.created_at
                FROM {s}.messages m WHERE m.conversation = p_conversation
                AND m.start_tokens BETWEEN v_total - p_budget AND v_total
                ORDER BY m.start_tokens DESC, m.seq DESC LIMIT p_limit;
        END
        $fn$""",
        # The pinned head and the tail of a window in one round trip (part 0, then part 1).
        """CREATE FUNCTION {s}.head_and_tail(
            p_conversation text, p_head integer, p_budget bigint, p_limit bigint
        ) RETURNS TABLE (part integer, seq bigint, data text, tokens integer, batch bigint,
                         run_id text, created_at double precision)
        LANGUAGE plpgsql STABLE AS $fn$
        BEGIN
            RETURN QUERY SELECT 0, m.seq, m.data, m.tokens, m.batch, m.run_id, m.created_at
                FROM {s}.messages m WHERE m.conversation = p_conversation
                ORDER BY m.seq LIMIT p_head;
            IF p_budget IS NULL THEN
                RETURN QUERY SELECT 1, m.seq, m.data, m.tokens, m.batch, m.run_id, m.created_at
                    FROM {s}.messages m WHERE m.conversation = p_conversation
                    ORDER BY m.seq DESC LIMIT p_limit;
            ELSE
                RETURN QUERY SELECT 1, t.seq, t.data, t.tokens, t.batch, t.run_id, t.created_at
                    FROM {s}.tail_within(p_conversation, p_budget, p_limit) t;
            END IF;
        END
        $fn$""",
    ],
    [
        # Listing the scopes under a prefix (Store.list_fact_scopes): a range on scope in
        # byte order ("C"), whatever the database's collation, so that a prefix is one
        # contiguous range of the index.
        'CREATE INDEX facts_by_scope ON {s}.facts (namespace, scope COLLATE "C")',
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)
