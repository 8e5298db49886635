"""The argument checks themselves, apart from any store (the conformance kit runs them
against every store)."""

from __future__ import annotations

import sys

import pytest

from memory_adapters import InvalidInput, InvalidTTL, InvalidValue
from memory_adapters.facts import (
    MAX_QUERY_TERMS,
    MAX_SEARCH_TEXT_BYTES,
    MAX_TERM_LENGTH,
    bound_search_text,
    search_terms,
)
from memory_adapters.validation import (
    MAX_INT,
    MAX_TTL,
    check_expires_at,
    check_importance,
    check_int,
    check_read_range,
    check_ttl,
    describe,
    dumps,
)


def test_max_int_is_sys_maxsize_and_the_int64_limit() -> None:
    assert MAX_INT == 2**63 - 1 == sys.maxsize
    assert check_int(MAX_INT, "n") == MAX_INT
    assert check_int(0, "n") == 0
    for bad in (MAX_INT + 1, -1, True, 1.0, None, "1"):
        with pytest.raises(InvalidInput):
            check_int(bad, "n")
    with pytest.raises(InvalidInput, match="an int of 1329 bits"):
        check_int(10**400, "n")
    assert check_read_range(1, None, None) == (1, None, None)
    assert check_read_range(MAX_INT, 0, MAX_INT) == (MAX_INT, 0, MAX_INT)


def test_ttls_are_bounded_before_any_float_conversion() -> None:
    assert check_ttl(MAX_TTL) == float(MAX_TTL)
    assert MAX_TTL == 1000 * 365.25 * 24 * 3600
    for bad in (MAX_TTL + 1, 10**400, 10**5000, 1e12, float("inf"), float("nan"), 0, -(10**400)):
        with pytest.raises(InvalidTTL):
            check_ttl(bad)
    now = 1_700_000_000.0
    assert check_expires_at(now + MAX_TTL, now) == now + MAX_TTL
    for bad in (now, now + MAX_TTL + 1, 10**400, float("inf"), float("nan"), -(10**400)):
        with pytest.raises(InvalidTTL):
            check_expires_at(bad, now)
    for bad in (10**400, -(10**400), float("inf"), float("nan")):
        with pytest.raises(InvalidValue):
            check_importance(bad)


def test_error_messages_never_fail_on_huge_or_hostile_values() -> None:
    assert describe(10**5000) == "an int of 16610 bits"
    assert describe(-(10**5000)) == "a negative int of 16610 bits"
    assert len(describe("x" * 10_000)) == 80

    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert describe(Hostile()) == "a Hostile"
    with pytest.raises(InvalidValue, match="too long"):
        dumps(10**5000)
    assert dumps(10**400) == "1" + "0" * 400


def test_search_text_is_bounded_at_a_word_boundary() -> None:
    short = "key\nsome words"
    assert bound_search_text(short) is short
    text = "é" * (MAX_SEARCH_TEXT_BYTES // 2 - 1) + " tail words"
    cut = bound_search_text(text)
    assert len(cut.encode()) <= MAX_SEARCH_TEXT_BYTES
    assert cut == "é" * (MAX_SEARCH_TEXT_BYTES // 2 - 1)  # "tail" is not indexed in part
    one_word = "🦜" * MAX_SEARCH_TEXT_BYTES  # no whitespace: cut on a character boundary
    cut = bound_search_text(one_word)
    assert cut == "🦜" * (MAX_SEARCH_TEXT_BYTES // 4)


def test_search_terms_are_bounded() -> None:
    assert search_terms("Tea, TEA and\x00oolong!") == ["tea", "oolong"]  # "and": a stop word
    assert search_terms("What is my favourite tea?") == ["favourit", "tea"]  # stems
    assert search_terms("to be or not to be") == []
    assert search_terms("x" * (MAX_TERM_LENGTH + 1) + " tea") == ["tea"]
    assert search_terms("w" * MAX_TERM_LENGTH) == ["w" * MAX_TERM_LENGTH]
    words = search_terms(" ".join(f"w{i}" for i in range(10_000)))
    assert words == [f"w{i}" for i in range(MAX_QUERY_TERMS)]
    assert search_terms("?!.,;:'\"()") == []
    assert search_terms("a" * (1 << 20)) == []
