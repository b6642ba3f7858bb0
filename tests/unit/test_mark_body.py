"""tidemark.schemas.mark_body: the fast reader agrees with the generic codec on every input."""

from __future__ import annotations

import re
from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.schemas.codec import HEADER_SIZE, default_registry
from tidemark.schemas.mark_body import read_writer_mark
from tidemark.schemas.mark_input import Undecodable, decode_mark
from tidemark.schemas.records import WriterMarkRecord

LONGS = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=20)

records = st.builds(
    WriterMarkRecord,
    stream=TEXT,
    writer_id=TEXT,
    time=LONGS,
    position=st.dictionaries(LONGS, LONGS, max_size=4),
    alive=st.booleans(),
    transaction_id=st.none() | TEXT,
    instance=st.none() | TEXT,
    max_event_time=st.none() | LONGS,
)


def _v1(record: WriterMarkRecord) -> bytes:
    """``record`` as a v1 writer wrote it (no instance, no max_event_time)."""
    fields = record.to_dict()
    del fields["instance"], fields["max_event_time"]
    return default_registry().encode("writer_mark.v1", fields)


def _generic(data: bytes) -> WriterMarkRecord | None:
    try:
        return WriterMarkRecord.decode(data)
    except Exception:
        return None


@given(records, st.booleans())
def test_every_mark_of_both_versions_reads_as_the_codec_reads_it(
    record: WriterMarkRecord, v1: bool
) -> None:
    data = _v1(record) if v1 else record.encode()
    fast = read_writer_mark(data)
    assert fast is not None
    assert fast == _generic(data)
    if not v1:
        assert fast == record


@settings(max_examples=300)
@given(records, st.data())
def test_damaged_marks_are_read_as_the_codec_reads_them_or_left_to_it(
    record: WriterMarkRecord, data: Any
) -> None:
    """Cut, changed or extended bytes: the fast reader returns the codec's record or None
    (never a record the codec would refuse or read differently)."""
    raw = bytearray(record.encode())
    how = data.draw(st.sampled_from(["cut", "change", "extend"]))
    if how == "cut":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif how == "change":
        at = data.draw(st.integers(HEADER_SIZE, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    else:
        raw += data.draw(st.binary(min_size=1, max_size=4))
    damaged = bytes(raw)
    fast = read_writer_mark(damaged)
    if fast is not None:
        assert fast == _generic(damaged)
    assert _comparable(decode_mark(damaged)) == _comparable(_decode_generic(damaged))


@given(st.binary(max_size=40))
def test_arbitrary_bytes_behind_a_mark_header_never_read_differently(body: bytes) -> None:
    header = WriterMarkRecord("s/t", "w", 1).encode()[:HEADER_SIZE]
    data = header + body
    fast = read_writer_mark(data)
    if fast is not None:
        assert fast == _generic(data)
    assert read_writer_mark(body) is None or body[:HEADER_SIZE] == header


def _decode_generic(data: bytes) -> WriterMarkRecord | Undecodable:
    """decode_mark with the fast reader switched off: the codec alone."""
    with patch("tidemark.schemas.mark_input.read_writer_mark", lambda _data: None):
        return decode_mark(data)


def _comparable(result: WriterMarkRecord | Undecodable) -> object:
    """An Undecodable's detail may name a reader object's address (fastavro's EOF errors)."""
    if isinstance(result, Undecodable):
        return result.reason, re.sub(r" at 0x[0-9a-f]+", "", result.detail)
    return result


def test_a_long_wider_than_64_bits_is_left_to_the_codec() -> None:
    header = WriterMarkRecord("s/t", "w", 1).encode()[:HEADER_SIZE]
    eleven = b"\xff" * 10 + b"\x01"  # a varint of 71 bits
    assert read_writer_mark(header + b"\x02s" + b"\x02w" + eleven) is None
