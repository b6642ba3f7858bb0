"""tidemark.service.listing: the dashboard's streams searched, ordered and paged."""

from __future__ import annotations

import pytest

from tidemark.errors import ConfigurationError
from tidemark.service.listing import held_back, page_of_streams


def row(name, lag_ms=None):
    return {"stream": name, "watermark": None if lag_ms is None else {"lag_ms": lag_ms}}


ROWS = [row(f"scope{i % 3}/s{i:04d}", None if i % 100 == 7 else i * 10) for i in range(1000)]


def test_a_thousand_streams_come_a_page_at_a_time_and_every_one_on_some_page():
    first = page_of_streams(ROWS, order="name")
    assert (first.number, first.pages, first.matching, first.total) == (1, 40, 1000, 1000)
    assert [r["stream"] for r in first.items][:2] == ["scope0/s0000", "scope0/s0003"]
    seen = [r["stream"] for n in range(1, 41) for r in page_of_streams(ROWS, page=n).items]
    assert sorted(seen) == sorted(r["stream"] for r in ROWS)


def test_by_lag_streams_without_a_watermark_come_first_then_the_largest_lag():
    items = page_of_streams(ROWS, order="lag", size=12).items
    assert [r["watermark"] for r in items[:10]] == [None] * 10
    assert [r["stream"] for r in items[10:]] == ["scope0/s0999", "scope2/s0998"]


def test_search_is_a_case_insensitive_substring_and_a_page_past_the_end_is_the_last():
    page = page_of_streams(ROWS, query=" SCOPE1/s00 ", page=99, size=10)
    assert page.matching == 33 and page.pages == 4 and page.number == 4
    assert all("scope1/s00" in r["stream"] for r in page.items) and len(page.items) == 3
    assert page_of_streams(ROWS, query="nothing").items == []
    assert page_of_streams([], page=0).number == 1


def test_an_unknown_order_is_refused_naming_the_choices():
    with pytest.raises(ConfigurationError, match="lag, name"):
        page_of_streams(ROWS, order="size")


def test_held_back_lists_every_streams_laggards_furthest_behind_first():
    by_stream = {
        "a/x": [{"writer": "w1", "behind_ms": 5}, {"writer": "w2", "behind_ms": 50}],
        "b/y": [{"writer": "w3", "behind_ms": 20}],
    }
    rows, total = held_back(by_stream, limit=2)
    assert total == 3
    assert [(r["stream"], r["writer"]) for r in rows] == [("a/x", "w2"), ("b/y", "w3")]
