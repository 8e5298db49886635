"""The MongoDB store's keyword postings, metadata and filters, and the migration of facts
written before the store kept terms (the conformance kit runs in ``test_store_mongo.py``)."""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import pymongo
import pytest
from memory_adapters_mongo import MongoStore
from memory_adapters_mongo import terms as term_plans
from memory_adapters_mongo.ops import FACTS, Handles, run_sync
from test_store_mongo import Locked, mock_client, only_op

from memory_adapters import InvalidInput
from memory_adapters.embedders import WHOLE, Embedding, normalized
from memory_adapters.facts import FactFilter, index_text, json_equal, search_text

LEGACY_FACTS: dict[str, Any] = {f"note{i}": f"oolong tea number {i}" for i in range(300)}
LEGACY_FACTS.update({"city": "Lisbon is home", "coffee": {"drink": "coffee", "cups": 2}})


def write_legacy(db: Any) -> None:
    """Facts as the store wrote them before it kept terms: ``text``, ``words`` and a word
    count, on the word-list index; one of them expired."""
    db[FACTS].create_index([("scope", 1), ("namespace", 1), ("words", 1)], name="ma_facts_words")
    now = time.time()
    docs = []
    for key, value in LEGACY_FACTS.items():
        text = search_text(key, value)
        words = text.lower().split()
        docs.append(
            {
                "scope": "u",
                "namespace": "ns",
                "key": key,
                "data": json.dumps(value),
                "version": 1,
                "rev": uuid.uuid4().hex[:16],
                "importance": 0.0,
                "created_at": now,
                "updated_at": now,
                "expires_at": None,
                "text": text,
                "words": sorted(set(words)),
                "length": len(words),
            }
        )
    docs.append({**docs[-1], "key": "gone", "expires_at": now - 5})
    db[FACTS].insert_many(docs)


def check_legacy_indexed(store: MongoStore, db: Any) -> None:
    found = store.match_terms("ns", "u", ["oolong", "lisbon", "coffe", "cup"])
    assert found.documents == len(LEGACY_FACTS)
    assert found.total_length == sum(len(index_text(k, v).split()) for k, v in LEGACY_FACTS.items())
    by_key = {h.key: h.counts for h in found.hits}
    assert len(by_key) == 302
    assert by_key["note7"] == (1, 0, 0, 0) and by_key["city"] == (0, 1, 0, 0)
    assert by_key["coffee"] == (0, 0, 2, 1)  # the key and the value's string; "cups" stemmed
    assert db[FACTS].count_documents({"text": {"$exists": True}}) == 0
    assert db[FACTS].count_documents({"words": {"$exists": True}}) == 0
    assert db[FACTS].count_documents({"terms": {"$exists": False}}) == 0
    indexes = db[FACTS].index_information()
    assert "ma_facts_words" not in indexes and "ma_facts_text" not in indexes
    fact = store.get_fact("ns", "u", "note7")
    assert fact is not None and fact.version == 1 and fact.metadata is None


def test_opening_gives_older_facts_their_terms() -> None:
    raw = mock_client()
    write_legacy(raw["old"])
    store = MongoStore(client=raw, database="old")
    check_legacy_indexed(store, raw["old"])
    again = MongoStore(client=raw, database="old")  # nothing left to do
    check_legacy_indexed(again, raw["old"])


def test_the_backfill_is_safe_beside_another_and_beside_writers() -> None:
    """Two processes opening at once, and a write meanwhile: each fact is indexed once, from
    its newest value."""
    raw = mock_client()
    db = raw["race"]
    write_legacy(db)
    handles = Handles.of(db)
    slow = term_plans.backfill(batch=50)
    first = only_op(next(slow))
    docs = list(db[FACTS].find(*first.args, **first.kwargs))
    assert len(docs) == 50
    # meanwhile: another process migrates everything, and a writer rewrites one fact
    assert run_sync(term_plans.backfill(batch=64), handles) == len(LEGACY_FACTS) + 1
    newest = MongoStore(client=raw, database="race")
    newest.put_fact("ns", "u", docs[0]["key"], '"jasmine"', text="jasmine")
    # the slow process goes on with what it read: it updates nothing
    step = slow.send(docs)
    updated = 0
    while True:
        try:
            op = only_op(step)
            result = getattr(db[FACTS], op.method)(*op.args, **op.kwargs)
            if op.method == "find":
                result = list(result)
            elif op.method == "update_one":
                updated += result.modified_count
            step = slow.send(result)
        except StopIteration as stop:
            assert stop.value == 0
            break
    assert updated == 0
    hits = newest.match_terms("ns", "u", ["jasmine", "oolong"]).hits
    assert {h.key for h in hits if h.counts[0]} == {docs[0]["key"]}
    assert docs[0]["key"] not in {h.key for h in hits if h.counts[1]}


def test_the_fact_document_holds_postings_and_metadata() -> None:
    raw = mock_client()
    store = MongoStore(client=Locked(raw), database="doc")
    meta = {"kind": "note", "n": 1.0, "ok": True, "none": None, "list": [1], "a.b": 1, "$x": 2}
    written = store.put_fact(
        "ns",
        "u",
        "k",
        '"v"',
        text="tea tea north_east $gt",
        metadata=json.dumps(meta),
    )
    assert written.metadata == meta
    doc = raw["doc"][FACTS].find_one({"key": "k"})
    assert doc is not None
    assert doc["terms"] == ["$gt", "north_east", "tea"]
    assert doc["tf"] == {"tea": 2, "_6e6f7274685f65617374": 1, "_246774": 1}
    assert doc["length"] == 4
    assert json.loads(doc["metadata"]) == meta
    assert doc["meta"] == {"kind": "s:note", "n": "n:1", "ok": "b:1", "none": "z"}
    assert not {"text", "words"} & set(doc)
    store.put_fact("ns", "u", "k", '"w"', text="coffee")
    doc = raw["doc"][FACTS].find_one({"key": "k"})
    assert doc is not None and not {"metadata", "meta"} & set(doc)
    assert (doc["terms"], doc["tf"], doc["length"]) == (["coffee"], {"coffee": 1}, 1)
    got = store.get_fact("ns", "u", "k")
    assert got is not None and got.metadata is None


SCALARS: list[Any] = [
    None,
    True,
    False,
    0,
    0.0,
    -0.0,
    1,
    1.0,
    -1,
    1.5,
    2**53,
    2**53 + 1,
    float(2**53),
    2**63 - 1,
    1e300,
    0.1,
    "1",
    "",
    "true",
    "null",
    "n:1",
    "z",
]


def test_filter_codes_are_equal_exactly_when_json_equal_says() -> None:
    for a in SCALARS:
        for b in SCALARS:
            same = term_plans.scalar_code(a) == term_plans.scalar_code(b)
            assert same == json_equal(a, b), (a, b)
    assert term_plans.scalar_code([1]) is None and term_plans.scalar_code({"a": 1}) is None


def test_filters_are_checked_before_they_reach_a_query() -> None:
    store = MongoStore(client=mock_client(), database="f")
    store.put_fact("ns", "u", "k", '"v"', text="tea", metadata='{"a": 1}')
    bad: list[Any] = [
        {"a": 1},
        FactFilter((("$where", 1),)),
        FactFilter((("a.b", 1),)),
        FactFilter((("a", {"$gt": 0}),)),
        FactFilter((("a", [1]),)),
        FactFilter((("a", float("nan")),)),
        FactFilter(since="0"),  # type: ignore[arg-type]
    ]
    for where in bad:
        with pytest.raises(InvalidInput):
            store.match_terms("ns", "u", ["tea"], where=where)
        with pytest.raises(InvalidInput):
            store.search_fact_vectors("ns", "u", [1.0], model="m", where=where)
    with pytest.raises(InvalidInput):
        store.put_fact("ns", "u", "k", '"v"', text="tea", metadata="[1]")
    with pytest.raises(InvalidInput):
        store.put_fact("ns", "u", "k", '"v"', text="tea", metadata={"a": 1})  # type: ignore[arg-type]
    two = FactFilter((("a", 1), ("a", 2)))
    assert store.match_terms("ns", "u", ["tea"], where=two).hits == []
    same = FactFilter((("a", 1), ("a", 1.0)))
    assert [h.key for h in store.match_terms("ns", "u", ["tea"], where=same).hits] == ["k"]


def test_atlas_searches_within_keys_or_filters_on_the_exact_path() -> None:
    """``$vectorSearch`` pre-filters only on its index's fields: within keys or a filter,
    the store ranks the candidates itself (before the limit)."""
    store = MongoStore(client=mock_client(), database="a", vector_search="atlas")
    for key, vector, kind in (("a", [1.0, 0.0], "x"), ("b", [0.9, 0.1], "y"), ("c", [0, 1], "x")):
        unit = normalized(vector)
        store.put_fact(
            "ns",
            "u",
            key,
            '"v"',
            text=key,
            embedding=Embedding("m", 2, {WHOLE: unit}),
            metadata=json.dumps({"kind": kind}),
        )
    q = [1.0, 0.0]
    found = store.search_fact_vectors("ns", "u", q, model="m", limit=1, keys=["c", "b"])
    assert [f.key for f in found] == ["b"]
    where = FactFilter((("kind", "x"),))
    found = store.search_fact_vectors("ns", "u", q, model="m", limit=5, where=where)
    assert [f.key for f in found] == ["a", "c"] and found[0].metadata == {"kind": "x"}
    plan = store._search_vectors("ns", "u", q, "m", 5)()
    assert only_op(next(plan)).args[0][0].get("$vectorSearch") is not None


SERVER_URL = os.environ.get("MEMORY_ADAPTERS_MONGODB_URL")

if SERVER_URL:
    _server_url: str = SERVER_URL

    def test_server_gives_older_facts_their_terms() -> None:
        """On a server: opening drops the old indexes (the text index too) and indexes the
        old facts."""
        client: Any = pymongo.MongoClient(_server_url, serverSelectionTimeoutMS=5000)
        name = f"ma_legacy_{uuid.uuid4().hex[:12]}"
        try:
            db = client[name]
            write_legacy(db)
            db[FACTS].create_index(
                [("scope", 1), ("namespace", 1), ("text", "text")],
                name="ma_facts_text",
                default_language="none",
                language_override="ma_language",
            )
            store = MongoStore(_server_url, database=name)
            check_legacy_indexed(store, db)
            store.close()
        finally:
            client.drop_database(name)
            client.close()
