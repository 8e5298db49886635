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
    [
        # Semantic recall (issue 12). facts.embed_model: the model whose embedding the fact
        # has (NULL: none); with no rows in fact_vectors it was deliberately left unindexed.
        "ALTER TABLE {s}.facts ADD COLUMN embed_model text",
        # One row per indexed field. The vector is a real[] whether or not the server has
        # pgvector, so the table is the same either way and installing pgvector later needs
        # no rewrite: with pgvector the store casts it (embedding::vector(dims), an immutable
        # cast) in its queries and in one partial HNSW index per dims (ensure_hnsw). The
        # foreign key removes a fact's vectors with the fact (delete, prune).
        """CREATE TABLE {s}.fact_vectors (
            namespace text NOT NULL,
            scope text NOT NULL,
            key text NOT NULL,
            field text NOT NULL,
            model text NOT NULL,
            dims integer NOT NULL,
            embedding real[] NOT NULL,
            PRIMARY KEY (namespace, scope, key, field),
            FOREIGN KEY (namespace, scope, key) REFERENCES {s}.facts (namespace, scope, key)
                ON DELETE CASCADE
        )""",
        "CREATE INDEX fact_vectors_by_scope ON {s}.fact_vectors (namespace, scope, model, dims)",
        # pgvector where the server has it and the role may install it (a superuser: it is
        # not a trusted extension); anything else leaves the exact search, without failing.
        """DO $do$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions WHERE name = 'vector')
               AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'vector')
            THEN
                BEGIN
                    CREATE EXTENSION IF NOT EXISTS vector;
                EXCEPTION WHEN OTHERS THEN
                    RAISE NOTICE 'pgvector not installed: %', SQLERRM;
                END;
            END IF;
        END
        $do$""",
        # The HNSW index (cosine) of the vectors of one dims value, created the first time
        # a store writes vectors of that size. A role that may not create it (or pgvector
        # missing, or too many dims for HNSW) gets false: searches are then exact.
        """CREATE FUNCTION {s}.ensure_hnsw(p_dims integer, p_vs text) RETURNS boolean
        LANGUAGE plpgsql AS $fn$
        BEGIN
            IF to_regclass('{s}.fact_vectors_hnsw_' || p_dims) IS NOT NULL THEN
                RETURN true;
            END IF;
            IF p_dims > 2000 THEN
                RETURN false;
            END IF;
            BEGIN
                EXECUTE format(
                    'CREATE INDEX IF NOT EXISTS fact_vectors_hnsw_%2$s ON {s}.fact_vectors '
                    'USING hnsw ((embedding::%1$I.vector(%2$s)) %1$I.vector_cosine_ops) '
                    'WHERE dims = %2$s', p_vs, p_dims);
            EXCEPTION
                WHEN unique_violation OR duplicate_table THEN
                    RETURN true;  -- another session created it at the same time
                WHEN OTHERS THEN
                    RAISE NOTICE 'no HNSW index for % dims: %', p_dims, SQLERRM;
                    RETURN false;
            END;
            RETURN true;
        END
        $fn$""",
        # Vector search in one scope with pgvector, exact for the scope whatever the table:
        # a scope of at most p_exact_below vectors is compared in full (the scope index, then
        # <=> on each vector); a larger one asks the HNSW index for the p_ef nearest vectors
        # of its dims (hnsw.ef_search = p_ef), keeps the scope's, and falls back to the full
        # comparison when that leaves fewer than p_limit facts (pgvector 0.6 filters an
        # index scan's results after the scan, so a scope that is a small part of the
        # table may be missed by it). A fact scores its best field.
        """CREATE FUNCTION {s}.vector_search(
            p_ns text, p_scope text, p_model text, p_query real[], p_limit integer,
            p_now double precision, p_exact_below integer, p_ef integer, p_vs text
        ) RETURNS TABLE (key text, data text, version bigint, importance double precision,
                         created_at double precision, updated_at double precision,
                         expires_at double precision, score double precision, path text)
        LANGUAGE plpgsql AS $fn$
        DECLARE
            v_dims integer := cardinality(p_query);
            v_n bigint;
            v_keys text[];
            v_sims double precision[];
            v_live bigint;
        BEGIN
            SELECT count(*) INTO v_n FROM (SELECT 1 FROM {s}.fact_vectors v
                WHERE v.namespace = p_ns AND v.scope = p_scope AND v.model = p_model
                AND v.dims = v_dims LIMIT p_exact_below + 1) c;
            IF v_n = 0 THEN
                RETURN;
            END IF;
            IF v_n > p_exact_below
               AND to_regclass('{s}.fact_vectors_hnsw_' || v_dims) IS NOT NULL THEN
                PERFORM set_config('hnsw.ef_search', p_ef::text, true);
                EXECUTE format(
                    'SELECT array_agg(g.key ORDER BY g.sim DESC), array_agg(g.sim ORDER BY '
                    'g.sim DESC) FROM (SELECT c.key, max(c.sim) AS sim FROM (SELECT v.key, '
                    '1 - (v.embedding::%1$I.vector(%2$s) OPERATOR(%1$I.<=>) '
                    '$4::%1$I.vector(%2$s)) AS sim FROM {s}.fact_vectors v '
                    'WHERE v.dims = %2$s AND v.namespace = $1 AND v.scope = $2 '
                    'AND v.model = $3 ORDER BY v.embedding::%1$I.vector(%2$s) '
                    'OPERATOR(%1$I.<=>) $4::%1$I.vector(%2$s) LIMIT $5) c GROUP BY c.key) g',
                    p_vs, v_dims)
                    INTO v_keys, v_sims USING p_ns, p_scope, p_model, p_query, p_ef;
                SELECT count(*) INTO v_live FROM unnest(v_keys) AS u(k)
                    JOIN {s}.facts f ON f.namespace = p_ns AND f.scope = p_scope AND f.key = u.k
                        AND f.embed_model = p_model
                    WHERE f.expires_at IS NULL OR f.expires_at > p_now;
                IF v_live >= p_limit THEN
                    RETURN QUERY SELECT f.key, f.data, f.version, f.importance, f.created_at,
                        f.updated_at, f.expires_at, u.sim, 'hnsw'::text
                        FROM unnest(v_keys, v_sims) AS u(k, sim)
                        JOIN {s}.facts f ON f.namespace = p_ns AND f.scope = p_scope
                            AND f.key = u.k AND f.embed_model = p_model
                        WHERE f.expires_at IS NULL OR f.expires_at > p_now
                        ORDER BY u.sim DESC, f.importance DESC, f.updated_at DESC,
                            f.key COLLATE "C"
                        LIMIT p_limit;
                    RETURN;
                END IF;
            END IF;
            RETURN QUERY EXECUTE format(
                'SELECT f.key, f.data, f.version, f.importance, f.created_at, f.updated_at, '
                'f.expires_at, g.sim, ''exact''::text FROM (SELECT v.key, max(1 - '
                '(v.embedding::%1$I.vector OPERATOR(%1$I.<=>) $4::%1$I.vector)) AS sim '
                'FROM {s}.fact_vectors v WHERE v.namespace = $1 AND v.scope = $2 '
                'AND v.model = $3 AND v.dims = $7 GROUP BY v.key) g JOIN {s}.facts f '
                'ON f.namespace = $1 AND f.scope = $2 AND f.key = g.key AND f.embed_model = $3 '
                'WHERE f.expires_at IS NULL OR f.expires_at > $6 '
                'ORDER BY g.sim DESC, f.importance DESC, f.updated_at DESC, '
                'f.key COLLATE "C" LIMIT $5', p_vs)
                USING p_ns, p_scope, p_model, p_query, p_limit, p_now, v_dims;
        END
        $fn$""",
    ],
    [
        # Operations (issue 14). The head row records when the conversation was created and
        # last appended to (existing rows take their first and newest message's times), for
        # listing and retention. No index covers those columns, so the append's update of the
        # head row stays a HOT update; the index on the key in byte order ("C") serves prefix
        # ranges (a namespace's or a user's conversations) and never changes once written.
        "ALTER TABLE {s}.conversations ADD COLUMN created_at double precision NOT NULL "
        "DEFAULT 0, ADD COLUMN last_activity double precision NOT NULL DEFAULT 0",
        """UPDATE {s}.conversations c SET
            created_at = coalesce((SELECT m.created_at FROM {s}.messages m
                WHERE m.conversation = c.key ORDER BY m.seq LIMIT 1), 0),
            last_activity = coalesce((SELECT m.created_at FROM {s}.messages m
                WHERE m.conversation = c.key ORDER BY m.seq DESC LIMIT 1), 0)""",
        'CREATE INDEX conversations_by_key ON {s}.conversations (key COLLATE "C")',
        # Fact history: each put and forget with its writer (JSON), inserted by the same
        # statement as the change (a CTE) and trimmed to the newest versions there too.
        """CREATE TABLE {s}.fact_history (
            id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            namespace text NOT NULL,
            scope text NOT NULL,
            key text NOT NULL,
            version bigint NOT NULL,
            op text NOT NULL,
            data text,
            at double precision NOT NULL,
            writer text NOT NULL
        )""",
        'CREATE INDEX fact_history_by_key ON {s}.fact_history (namespace, scope COLLATE "C", '
        "key, id)",
        # The append, as before, recording the time of the append on the head row (still one
        # round trip, no added read).
        """CREATE OR REPLACE FUNCTION {s}.append_batch(
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
                INSERT INTO {s}.conversations (key, last_seq, total_tokens, created_at)
                    VALUES (p_conversation, 0, 0, p_now) ON CONFLICT (key) DO NOTHING;
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
                    last_activity = p_now,
                    total_tokens = v_total + (SELECT coalesce(sum(x), 0) FROM unnest(p_tokens) x)
                WHERE key = p_conversation;
            IF p_idempotency_key IS NOT NULL THEN
                INSERT INTO {s}.batches VALUES (p_conversation, p_idempotency_key, v_first, v_end);
            END IF;
            RETURN QUERY SELECT v_first, v_end, false;
        END
        $fn$""",
    ],
    [
        # Several keyed batches (a run's steps) in one call: the conversation locked once, one
        # INSERT of the messages of every batch whose key is new, one UPDATE; a batch whose key
        # was used already is answered with its original seqs, as append_batch does. Batches
        # are numbered in order: p_sizes[k] messages each, keyed p_keys[k] (distinct).
        """CREATE FUNCTION {s}.append_batches(
            p_conversation text, p_roles text[], p_data text[], p_tokens integer[],
            p_sizes integer[], p_run_id text, p_keys text[], p_now double precision
        ) RETURNS TABLE (first_seq bigint, last_seq bigint, duplicate boolean)
        LANGUAGE plpgsql AS $fn$
        DECLARE
            v_last bigint;
            v_total bigint;
            v_next bigint;
            v_first bigint;
            v_end bigint;
            v_firsts bigint[] := '{}';
            v_ends bigint[] := '{}';
            v_dups boolean[] := '{}';
            v_of integer[] := '{}';
            k integer;
        BEGIN
            SELECT c.last_seq, c.total_tokens INTO v_last, v_total FROM {s}.conversations c
                WHERE c.key = p_conversation FOR UPDATE;
            IF NOT FOUND THEN
                INSERT INTO {s}.conversations (key, last_seq, total_tokens, created_at)
                    VALUES (p_conversation, 0, 0, p_now) ON CONFLICT (key) DO NOTHING;
                SELECT c.last_seq, c.total_tokens INTO v_last, v_total FROM {s}.conversations c
                    WHERE c.key = p_conversation FOR UPDATE;
            END IF;
            v_next := v_last;
            FOR k IN 1 .. cardinality(p_sizes) LOOP
                SELECT b.first_seq, b.last_seq INTO v_first, v_end FROM {s}.batches b
                    WHERE b.conversation = p_conversation AND b.idempotency_key = p_keys[k];
                IF FOUND THEN
                    v_dups := v_dups || true;
                ELSE
                    v_first := v_next + 1;
                    v_next := v_next + p_sizes[k];
                    v_end := v_next;
                    v_dups := v_dups || false;
                END IF;
                v_firsts := v_firsts || v_first;
                v_ends := v_ends || v_end;
                v_of := v_of || array_fill(k, ARRAY[p_sizes[k]]);
            END LOOP;
            IF v_next > v_last THEN
                INSERT INTO {s}.messages
                    (conversation, seq, batch, start_tokens, tokens, role, data, run_id,
                     created_at)
                SELECT p_conversation, v_last + row_number() OVER (ORDER BY u.i),
                       v_firsts[u.k],
                       v_total + coalesce(sum(u.t) OVER (ORDER BY u.i
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0),
                       u.t, u.r, u.d, p_run_id, p_now
                FROM unnest(p_roles, p_data, p_tokens, v_of) WITH ORDINALITY AS u(r, d, t, k, i)
                WHERE NOT v_dups[u.k];
                UPDATE {s}.conversations
                    SET last_seq = v_next,
                        last_activity = p_now,
                        total_tokens = v_total + (
                            SELECT coalesce(sum(u.t), 0)
                            FROM unnest(p_tokens, v_of) AS u(t, k) WHERE NOT v_dups[u.k])
                    WHERE key = p_conversation;
                INSERT INTO {s}.batches
                    SELECT p_conversation, b.key, b.f, b.e
                    FROM unnest(p_keys, v_firsts, v_ends, v_dups) AS b(key, f, e, dup)
                    WHERE NOT b.dup;
            END IF;
            RETURN QUERY SELECT b.f, b.e, b.dup
                FROM unnest(v_firsts, v_ends, v_dups) WITH ORDINALITY AS b(f, e, dup, i)
                ORDER BY b.i;
        END
        $fn$""",
    ],
    [
        # One ranking in the core: the store finds keyword candidates and counts statistics,
        # and memory_adapters.ranking scores them (BM25). The tsvector and its GIN index go;
        # each fact's terms (the core's analyzer) are postings of fact_terms, one row per
        # (namespace, scope, term, key) with the term's count, so a search reads the scope's
        # own posting lists. facts.length: the fact's number of terms (NULL: a fact stored
        # before this migration, indexed by the store in Python when it opens). Postings go
        # with their fact (the foreign key; the index by key serves its cascade and the
        # rewrite of a fact's postings); each records the fact's version it was written with.
        "DROP INDEX {s}.facts_search",
        "ALTER TABLE {s}.facts DROP COLUMN search, ADD COLUMN length integer, "
        "ADD COLUMN metadata json",
        # The scope's statistics (count and total length of its unexpired facts) are an
        # index-only scan of this index, which also serves the skip scan of scopes.
        "DROP INDEX {s}.facts_by_scope",
        'CREATE INDEX facts_by_scope ON {s}.facts (namespace, scope COLLATE "C") '
        "INCLUDE (length, expires_at)",
        "CREATE INDEX facts_unindexed ON {s}.facts (namespace, scope, key) WHERE length IS NULL",
        """CREATE TABLE {s}.fact_terms (
            namespace text NOT NULL,
            scope text NOT NULL,
            term text NOT NULL,
            key text NOT NULL,
            tf integer NOT NULL,
            version bigint NOT NULL,
            PRIMARY KEY (namespace, scope, term, key),
            FOREIGN KEY (namespace, scope, key) REFERENCES {s}.facts (namespace, scope, key)
                ON DELETE CASCADE
        )""",
        "CREATE INDEX fact_terms_by_key ON {s}.fact_terms (namespace, scope, key)",
        # Vector search within given keys and filters (applied before the limit), returning
        # the fact's metadata: a new signature, so the old function is dropped. p_keys NULL:
        # any key. A filter: each metadata key p_fk[i] present with a value equal (as jsonb)
        # to p_fv[i], and p_since <= updated_at < p_until. With keys the search is exact on
        # them (the primary key); with a filter the HNSW path keeps the passing facts and
        # falls back to the exact comparison when that leaves fewer than p_limit.
        "DROP FUNCTION {s}.vector_search(text, text, text, real[], integer, double precision, "
        "integer, integer, text)",
        """CREATE FUNCTION {s}.vector_search(
            p_ns text, p_scope text, p_model text, p_query real[], p_limit integer,
            p_now double precision, p_exact_below integer, p_ef integer, p_vs text,
            p_keys text[], p_fk text[], p_fv text[], p_since double precision,
            p_until double precision
        ) RETURNS TABLE (key text, data text, version bigint, importance double precision,
                         created_at double precision, updated_at double precision,
                         expires_at double precision, metadata text, score double precision,
                         path text)
        LANGUAGE plpgsql AS $fn$
        DECLARE
            v_dims integer := cardinality(p_query);
            v_n bigint;
            v_keys text[];
            v_sims double precision[];
            v_live bigint;
        BEGIN
            IF p_keys IS NULL THEN
                SELECT count(*) INTO v_n FROM (SELECT 1 FROM {s}.fact_vectors v
                    WHERE v.namespace = p_ns AND v.scope = p_scope AND v.model = p_model
                    AND v.dims = v_dims LIMIT p_exact_below + 1) c;
                IF v_n = 0 THEN
                    RETURN;
                END IF;
            ELSE
                v_n := 0;
            END IF;
            IF v_n > p_exact_below
               AND to_regclass('{s}.fact_vectors_hnsw_' || v_dims) IS NOT NULL THEN
                PERFORM set_config('hnsw.ef_search', p_ef::text, true);
                EXECUTE format(
                    'SELECT array_agg(g.key ORDER BY g.sim DESC), array_agg(g.sim ORDER BY '
                    'g.sim DESC) FROM (SELECT c.key, max(c.sim) AS sim FROM (SELECT v.key, '
                    '1 - (v.embedding::%1$I.vector(%2$s) OPERATOR(%1$I.<=>) '
                    '$4::%1$I.vector(%2$s)) AS sim FROM {s}.fact_vectors v '
                    'WHERE v.dims = %2$s AND v.namespace = $1 AND v.scope = $2 '
                    'AND v.model = $3 ORDER BY v.embedding::%1$I.vector(%2$s) '
                    'OPERATOR(%1$I.<=>) $4::%1$I.vector(%2$s) LIMIT $5) c GROUP BY c.key) g',
                    p_vs, v_dims)
                    INTO v_keys, v_sims USING p_ns, p_scope, p_model, p_query, p_ef;
                SELECT count(*) INTO v_live FROM unnest(v_keys) AS u(k)
                    JOIN {s}.facts f ON f.namespace = p_ns AND f.scope = p_scope AND f.key = u.k
                        AND f.embed_model = p_model
                    WHERE (f.expires_at IS NULL OR f.expires_at > p_now)
                    AND (p_since IS NULL OR f.updated_at >= p_since)
                    AND (p_until IS NULL OR f.updated_at < p_until)
                    AND NOT EXISTS (SELECT 1 FROM unnest(p_fk, p_fv) AS m(k, v)
                        WHERE (f.metadata -> m.k)::jsonb IS DISTINCT FROM m.v::jsonb);
                IF v_live >= p_limit THEN
                    RETURN QUERY SELECT f.key, f.data, f.version, f.importance, f.created_at,
                        f.updated_at, f.expires_at, f.metadata::text, u.sim, 'hnsw'::text
                        FROM unnest(v_keys, v_sims) AS u(k, sim)
                        JOIN {s}.facts f ON f.namespace = p_ns AND f.scope = p_scope
                            AND f.key = u.k AND f.embed_model = p_model
                        WHERE (f.expires_at IS NULL OR f.expires_at > p_now)
                        AND (p_since IS NULL OR f.updated_at >= p_since)
                        AND (p_until IS NULL OR f.updated_at < p_until)
                        AND NOT EXISTS (SELECT 1 FROM unnest(p_fk, p_fv) AS m(k, v)
                            WHERE (f.metadata -> m.k)::jsonb IS DISTINCT FROM m.v::jsonb)
                        ORDER BY u.sim DESC, f.importance DESC, f.updated_at DESC,
                            f.key COLLATE "C"
                        LIMIT p_limit;
                    RETURN;
                END IF;
            END IF;
            RETURN QUERY EXECUTE format(
                'SELECT f.key, f.data, f.version, f.importance, f.created_at, f.updated_at, '
                'f.expires_at, f.metadata::text, g.sim, ''exact''::text FROM (SELECT v.key, '
                'max(1 - (v.embedding::%1$I.vector OPERATOR(%1$I.<=>) $4::%1$I.vector)) AS sim '
                'FROM {s}.fact_vectors v WHERE v.namespace = $1 AND v.scope = $2 '
                'AND v.model = $3 AND v.dims = $7 AND ($8::text[] IS NULL OR v.key = ANY($8)) '
                'GROUP BY v.key) g JOIN {s}.facts f '
                'ON f.namespace = $1 AND f.scope = $2 AND f.key = g.key AND f.embed_model = $3 '
                'WHERE (f.expires_at IS NULL OR f.expires_at > $6) '
                'AND ($11::float8 IS NULL OR f.updated_at >= $11) '
                'AND ($12::float8 IS NULL OR f.updated_at < $12) '
                'AND NOT EXISTS (SELECT 1 FROM unnest($9::text[], $10::text[]) AS m(k, v) '
                'WHERE (f.metadata -> m.k)::jsonb IS DISTINCT FROM m.v::jsonb) '
                'ORDER BY g.sim DESC, f.importance DESC, f.updated_at DESC, '
                'f.key COLLATE "C" LIMIT $5', p_vs)
                USING p_ns, p_scope, p_model, p_query, p_limit, p_now, v_dims, p_keys,
                    p_fk, p_fv, p_since, p_until;
        END
        $fn$""",
    ],
    [
        # Exact scores with pgvector: the server screens, the store scores. vector_candidates
        # takes vector_search's arguments and p_slack, and answers the facts that can be among
        # the p_limit best, each with its vectors (a real[][]: one row per field), for the
        # store to score exactly in double precision (memory_adapters.exact_vectors) as every
        # other store does. Each fact of the scope that passes the filter is screened by its
        # best field's inner product with the float32 query (<#>, computed in float32; the
        # store's score is the dot product of unit vectors, so no norms are computed), and
        # every fact within p_slack (a bound of twice float32's rounding error) of the
        # p_limit-th best is kept, ties included: the exact ranking of those is the exact
        # ranking of the scope. A scope above p_exact_below vectors with an HNSW index (as in
        # vector_search) is screened among the facts of the index's p_ef nearest vectors
        # that pass the filter (approximate by design), or in full when fewer than p_limit
        # do. vector_search stays for processes of the previous release.
        """CREATE FUNCTION {s}.vector_candidates(
            p_ns text, p_scope text, p_model text, p_query real[], p_limit integer,
            p_now double precision, p_exact_below integer, p_ef integer, p_vs text,
            p_keys text[], p_fk text[], p_fv text[], p_since double precision,
            p_until double precision, p_slack double precision
        ) RETURNS TABLE (key text, data text, version bigint, importance double precision,
                         created_at double precision, updated_at double precision,
                         expires_at double precision, metadata text, vectors real[],
                         path text)
        LANGUAGE plpgsql AS $fn$
        DECLARE
            v_dims integer := cardinality(p_query);
            v_n bigint;
            v_keys text[];
            v_within text[] := p_keys;
            v_path text := 'exact';
        BEGIN
            IF p_keys IS NULL THEN
                SELECT count(*) INTO v_n FROM (SELECT 1 FROM {s}.fact_vectors v
                    WHERE v.namespace = p_ns AND v.scope = p_scope AND v.model = p_model
                    AND v.dims = v_dims LIMIT p_exact_below + 1) c;
                IF v_n = 0 THEN
                    RETURN;
                END IF;
            ELSE
                v_n := 0;
            END IF;
            IF v_n > p_exact_below
               AND to_regclass('{s}.fact_vectors_hnsw_' || v_dims) IS NOT NULL THEN
                PERFORM set_config('hnsw.ef_search', p_ef::text, true);
                EXECUTE format(
                    'SELECT array_agg(DISTINCT c.key) FROM (SELECT v.key '
                    'FROM {s}.fact_vectors v '
                    'WHERE v.dims = %2$s AND v.namespace = $1 AND v.scope = $2 '
                    'AND v.model = $3 ORDER BY v.embedding::%1$I.vector(%2$s) '
                    'OPERATOR(%1$I.<=>) $4::%1$I.vector(%2$s) LIMIT $5) c',
                    p_vs, v_dims)
                    INTO v_keys USING p_ns, p_scope, p_model, p_query, p_ef;
                SELECT array_agg(f.key) INTO v_keys FROM unnest(v_keys) AS u(k)
                    JOIN {s}.facts f ON f.namespace = p_ns AND f.scope = p_scope AND f.key = u.k
                        AND f.embed_model = p_model
                    WHERE (f.expires_at IS NULL OR f.expires_at > p_now)
                    AND (p_since IS NULL OR f.updated_at >= p_since)
                    AND (p_until IS NULL OR f.updated_at < p_until)
                    AND NOT EXISTS (SELECT 1 FROM unnest(p_fk, p_fv) AS m(k, v)
                        WHERE (f.metadata -> m.k)::jsonb IS DISTINCT FROM m.v::jsonb);
                IF coalesce(cardinality(v_keys), 0) >= p_limit THEN
                    v_within := v_keys;
                    v_path := 'hnsw';
                END IF;
            END IF;
            RETURN QUERY EXECUTE format(
                'WITH g AS (SELECT v.key, max(-(v.embedding::%1$I.vector OPERATOR(%1$I.<#>) '
                '$4::%1$I.vector)) AS sim FROM {s}.fact_vectors v WHERE v.namespace = $1 '
                'AND v.scope = $2 AND v.model = $3 AND v.dims = $7 '
                'AND ($8::text[] IS NULL OR v.key = ANY($8)) GROUP BY v.key), '
                'p AS MATERIALIZED (SELECT g.key, g.sim FROM g JOIN {s}.facts f '
                'ON f.namespace = $1 AND f.scope = $2 AND f.key = g.key AND f.embed_model = $3 '
                'WHERE (f.expires_at IS NULL OR f.expires_at > $6) '
                'AND ($11::float8 IS NULL OR f.updated_at >= $11) '
                'AND ($12::float8 IS NULL OR f.updated_at < $12) '
                'AND NOT EXISTS (SELECT 1 FROM unnest($9::text[], $10::text[]) AS m(k, v) '
                'WHERE (f.metadata -> m.k)::jsonb IS DISTINCT FROM m.v::jsonb)) '
                'SELECT f.key, f.data, f.version, f.importance, f.created_at, f.updated_at, '
                'f.expires_at, f.metadata::text, (SELECT array_agg(v.embedding) '
                'FROM {s}.fact_vectors v WHERE v.namespace = $1 AND v.scope = $2 '
                'AND v.key = p.key AND v.model = $3 AND v.dims = $7), $14 '
                'FROM p JOIN {s}.facts f ON f.namespace = $1 AND f.scope = $2 AND f.key = p.key '
                'WHERE p.sim >= (SELECT min(t.sim) FROM (SELECT p.sim FROM p '
                'ORDER BY p.sim DESC LIMIT $5) t) - $13', p_vs)
                USING p_ns, p_scope, p_model, p_query, p_limit, p_now, v_dims, v_within,
                    p_fk, p_fv, p_since, p_until, p_slack, v_path;
        END
        $fn$""",
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)
