"""The schema of the SQLite store: the migration scripts, one per version
(``PRAGMA user_version``), and how a script is cut into statements."""

from __future__ import annotations

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS ma_conversations (
    key TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    total_tokens INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ma_messages (
    conversation TEXT NOT NULL,
    seq INTEGER NOT NULL,
    batch INTEGER NOT NULL,
    start_tokens INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    role TEXT NOT NULL,
    data TEXT NOT NULL,
    run_id TEXT,
    idem_key TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (conversation, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ma_messages_tokens ON ma_messages (conversation, start_tokens);
CREATE UNIQUE INDEX IF NOT EXISTS ma_messages_idem
    ON ma_messages (conversation, idem_key) WHERE idem_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS ma_summaries (
    conversation TEXT NOT NULL,
    end_seq INTEGER NOT NULL,
    start_seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (conversation, end_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ma_facts (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    data TEXT NOT NULL,
    version INTEGER NOT NULL,
    importance REAL NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    UNIQUE (namespace, scope, key)
);
CREATE INDEX IF NOT EXISTS ma_facts_expiry ON ma_facts (expires_at) WHERE expires_at IS NOT NULL;
CREATE VIRTUAL TABLE IF NOT EXISTS ma_facts_fts USING fts5(
    owner, text, tokenize = 'unicode61 remove_diacritics 2'
);
"""
"""Version 1: the conversation log, summaries, facts and their full-text index."""

VECTORS = """
ALTER TABLE ma_facts ADD COLUMN embed_model TEXT;
CREATE TABLE IF NOT EXISTS ma_fact_vectors (
    fact_id INTEGER NOT NULL,
    field TEXT NOT NULL,
    owner TEXT NOT NULL,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    expires_at REAL,
    vector BLOB NOT NULL,
    UNIQUE (fact_id, field)
);
CREATE INDEX IF NOT EXISTS ma_fact_vectors_search
    ON ma_fact_vectors (owner, model, dims, expires_at);
CREATE TRIGGER IF NOT EXISTS ma_fact_vectors_gone AFTER DELETE ON ma_facts BEGIN
    DELETE FROM ma_fact_vectors WHERE fact_id = old.id;
END;
"""
"""Version 2: fact embeddings. ``ma_facts.embed_model`` is the model that embedded a fact
(``NULL``: none; set with no vectors: deliberately unindexed by that model);
``ma_fact_vectors`` holds one float32 vector per indexed field, with the fact's scope (as its
``owner`` hash) and expiry copied, so that a search is one range of the index
``(owner, model, dims, expires_at)`` and reads nothing but vectors. (It is a rowid table:
rows of a vector of up to ~1,000 dimensions stay on their page, where a ``WITHOUT ROWID``
table would spill every vector of 256 dimensions or more to an overflow page.) A fact's
vectors are rewritten whenever its expiry can change (every ``put_fact``). The trigger
deletes a fact's vectors with the fact (expiry, ``delete_fact``, ``prune``)."""

OPERATIONS = """
ALTER TABLE ma_conversations ADD COLUMN created_at REAL NOT NULL DEFAULT 0;
ALTER TABLE ma_conversations ADD COLUMN last_activity REAL NOT NULL DEFAULT 0;
UPDATE ma_conversations SET
    created_at = coalesce((SELECT m.created_at FROM ma_messages AS m
        WHERE m.conversation = ma_conversations.key ORDER BY m.seq LIMIT 1), 0),
    last_activity = coalesce((SELECT m.created_at FROM ma_messages AS m
        WHERE m.conversation = ma_conversations.key ORDER BY m.seq DESC LIMIT 1), 0);
CREATE TABLE IF NOT EXISTS ma_fact_history (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    op TEXT NOT NULL,
    data TEXT,
    at REAL NOT NULL,
    writer TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ma_fact_history_key ON ma_fact_history (namespace, scope, key, id);
"""
"""Version 3: operations (issue 14). ``ma_conversations`` records when a conversation was
created and last appended to (existing rows take the times of their first and newest
message), for listing and retention; it has no index on them, so an append updates its head
row as before (listing sorts the conversations of one key range). ``ma_fact_history`` keeps
each put and forget of a fact with its writer (JSON), written in the fact's transaction."""

SUMMARY_MODEL = """
ALTER TABLE ma_summaries ADD COLUMN model TEXT;
"""
"""Version 4: summaries made in the background (issue 15). ``ma_summaries.model`` names the
summarizer that made a summary (``NULL``: a ``summarize`` hook, or made before). A claim on a
conversation's next summary (``claim_summary``) is the row at ``end_seq = -1``: the claimed
end seq in ``start_seq``, the owner in ``text``, ``tokens = -1``, the lease's end in
``created_at``; it goes with the conversation like its summaries. Independent of version 3:
it applies after whatever comes before it."""


TERMS = """
DROP TABLE IF EXISTS ma_facts_fts;
ALTER TABLE ma_facts ADD COLUMN metadata TEXT;
ALTER TABLE ma_facts ADD COLUMN length INTEGER;
CREATE TABLE IF NOT EXISTS ma_fact_terms (
    owner INTEGER NOT NULL,
    term TEXT NOT NULL,
    fact_id INTEGER NOT NULL,
    tf INTEGER NOT NULL,
    PRIMARY KEY (owner, term, fact_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ma_fact_terms_fact ON ma_fact_terms (fact_id);
CREATE TABLE IF NOT EXISTS ma_fact_stats (
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    documents INTEGER NOT NULL,
    total_length INTEGER NOT NULL,
    PRIMARY KEY (namespace, scope)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ma_facts_unindexed ON ma_facts (id) WHERE length IS NULL;
CREATE INDEX IF NOT EXISTS ma_facts_expiring
    ON ma_facts (namespace, scope, expires_at, length) WHERE expires_at IS NOT NULL;
CREATE TRIGGER IF NOT EXISTS ma_fact_terms_gone AFTER DELETE ON ma_facts BEGIN
    DELETE FROM ma_fact_terms WHERE fact_id = old.id;
END;
CREATE TRIGGER IF NOT EXISTS ma_fact_stats_added AFTER INSERT ON ma_facts
WHEN new.length IS NOT NULL BEGIN
    INSERT INTO ma_fact_stats (namespace, scope, documents, total_length)
    VALUES (new.namespace, new.scope, 1, new.length)
    ON CONFLICT (namespace, scope) DO UPDATE SET documents = documents + 1,
        total_length = total_length + excluded.total_length;
END;
CREATE TRIGGER IF NOT EXISTS ma_fact_stats_indexed AFTER UPDATE OF length ON ma_facts
WHEN old.length IS NULL AND new.length IS NOT NULL BEGIN
    INSERT INTO ma_fact_stats (namespace, scope, documents, total_length)
    VALUES (new.namespace, new.scope, 1, new.length)
    ON CONFLICT (namespace, scope) DO UPDATE SET documents = documents + 1,
        total_length = total_length + excluded.total_length;
END;
CREATE TRIGGER IF NOT EXISTS ma_fact_stats_changed AFTER UPDATE OF length ON ma_facts
WHEN old.length IS NOT NULL AND new.length IS NOT NULL BEGIN
    UPDATE ma_fact_stats SET total_length = total_length - old.length + new.length
    WHERE namespace = new.namespace AND scope = new.scope;
END;
CREATE TRIGGER IF NOT EXISTS ma_fact_stats_gone AFTER DELETE ON ma_facts
WHEN old.length IS NOT NULL BEGIN
    UPDATE ma_fact_stats SET documents = documents - 1, total_length = total_length - old.length
    WHERE namespace = old.namespace AND scope = old.scope;
    DELETE FROM ma_fact_stats
    WHERE namespace = old.namespace AND scope = old.scope AND documents <= 0;
END;
"""
"""Version 5: one ranking in the core (keyword search scored by
:mod:`memory_adapters.ranking`; the store finds candidates and counts statistics). The FTS5
table goes. ``ma_facts.metadata`` holds a fact's metadata (JSON object text, ``NULL``: none;
never indexed, read by filters); ``ma_facts.length`` how many index terms the fact was put
with (``NULL``: a fact written before this version, whose terms the store computes in Python
when it opens: :meth:`~memory_adapters_sqlite.facts.FactStore._index_old_facts`, found
through the partial index ``ma_facts_unindexed``, empty once done).

``ma_fact_terms`` is the inverted index: one row per (scope, term, fact) with the term's count
in the fact, ``owner`` a 64-bit hash of the namespace and scope, so a term's postings are one
range of the primary key holding only that scope's facts (a hash collision only adds rows the
join with ``ma_facts`` drops). Triggers keep the rest: a fact's postings go with it (through
``ma_fact_terms_fact``), and ``ma_fact_stats`` counts each scope's indexed facts and their
total length (a row goes when its scope has none left); a search subtracts the scope's facts
that expired but are not pruned yet, found through ``ma_facts_expiring``, so the statistics
cost a search nothing proportional to the scope."""

MIGRATIONS = (SCHEMA, VECTORS, OPERATIONS, SUMMARY_MODEL, TERMS)
"""The scripts that bring a database from version ``i`` (``PRAGMA user_version``) to
``i + 1``, in order. A new database runs them all; an existing one the ones it lacks, in one
transaction. Add a script to change the schema; never edit one that was released."""

SCHEMA_VERSION = len(MIGRATIONS)


def statements(script: str) -> list[str]:
    """The statements of a migration script (``sqlite3.complete_statement`` keeps a
    trigger's body, which has semicolons of its own, in one statement)."""
    out: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    if current.strip():
        out.append(current.strip())
    return out
