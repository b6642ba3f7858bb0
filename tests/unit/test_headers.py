"""Kafka headers as tidemark's writers take them (tidemark.pipelines.writing.headers): pure
checks."""

from __future__ import annotations

import pytest

from tidemark.pipelines.writing.exceptions import InvalidHeaderError, WriterError
from tidemark.pipelines.writing.headers import checked_headers


def test_pairs_and_mappings_become_the_producers_list_in_order() -> None:
    pairs = [("a", b"1"), ("a", b""), ("b", bytearray(b"\xff")), ("c", memoryview(b"x"))]
    assert checked_headers(pairs) == [("a", b"1"), ("a", b""), ("b", b"\xff"), ("c", b"x")]
    assert checked_headers((["k", b"v"],)) == [("k", b"v")]
    assert checked_headers({"k": b"v", "l": b"w"}) == [("k", b"v"), ("l", b"w")]
    assert checked_headers([]) is None and checked_headers({}) is None
    assert checked_headers(None) is None


def test_as_the_producer_takes_them_text_and_null_values_pass() -> None:
    assert checked_headers([("k", "text"), ("n", None)], as_producer=True) == [
        ("k", "text"),
        ("n", None),
    ]


@pytest.mark.parametrize(
    ("headers", "as_producer", "message"),
    [
        ([("a", b"1"), (b"b", b"2")], False, "header 1 (b'b'): name must be str, got bytes"),
        ([(None, b"2")], True, "header 0 (None): name must be str, got NoneType"),
        ([("k", "v")], False, "header 0 ('k'): value must be bytes, got str (encode text"),
        ([("k", None)], False, "header 0 ('k'): value must be bytes, got NoneType"),
        ({"k": 1}, True, "header 0 ('k'): value must be bytes, str or None, got int"),
        ([("k", b"v", b"w")], False, "header 0: must be a (name, value) pair"),
        (["kv"], False, "header 0: must be a (name, value) pair, got 'kv'"),
        ("k=v", False, "headers must be a list of (name, value) pairs or a mapping"),
        (b"k=v", True, "headers must be a list"),
        (7, False, "got int"),
    ],
)
def test_a_bad_header_is_named(headers: object, as_producer: bool, message: str) -> None:
    with pytest.raises(InvalidHeaderError) as caught:
        checked_headers(headers, as_producer=as_producer)  # type: ignore[arg-type]
    assert message in str(caught.value)
    assert isinstance(caught.value, WriterError) and isinstance(caught.value, TypeError)
