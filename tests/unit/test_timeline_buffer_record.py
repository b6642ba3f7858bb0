"""The buffer's record envelope and settings: byte for byte, and every bad input named."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.errors import ConfigurationError
from tidemark.pipelines.timeline.buffer import record_id
from tidemark.pipelines.timeline.config import BufferConfig, DueRule
from tidemark.pipelines.timeline.exceptions import InvalidMessageError
from tidemark.pipelines.timeline.record import KafkaRecord, decode_record, encode_record


@pytest.mark.parametrize(
    "record",
    [
        KafkaRecord(b"k", b"v", (("a", b"1"), ("a", b"2"), ("empty", None)), 1_700_000_000_000),
        KafkaRecord(None, None, (), 0),  # a tombstone without key or headers
        KafkaRecord(b"", b"\x00" * 1000, (("ü", b""),), -1),
    ],
)
def test_a_record_comes_back_byte_for_byte(record):
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize(
    "data, rule",
    [
        (b"", "cut short"),
        (encode_record(KafkaRecord(b"k", b"v", (), 1))[:-3], "cut short"),
        (encode_record(KafkaRecord(b"k", b"v", (), 1)) + b"x", "after its end"),
        (b"\x02" + encode_record(KafkaRecord(b"k", b"v", (), 1))[1:], "version 2"),
    ],
)
def test_other_bytes_are_refused_naming_the_problem(data, rule):
    with pytest.raises(InvalidMessageError, match=rule):
        decode_record(data)


_blobs = st.none() | st.binary(max_size=40)
_records = st.builds(
    KafkaRecord,
    _blobs,
    _blobs,
    st.lists(st.tuples(st.text(max_size=8), _blobs), max_size=4).map(tuple),
    st.integers(-(2**63), 2**63 - 1),
)


@given(_records)
def test_any_record_comes_back_byte_for_byte(record):
    assert decode_record(encode_record(record)) == record


@given(_records, st.data())
def test_a_cut_or_changed_envelope_is_refused_or_read_never_crashes(record, data):
    """Bad bytes are an InvalidMessageError (cut short, bytes added) or, a byte
    changed, a record again: never another exception."""
    body = bytearray(encode_record(record))
    how = data.draw(st.sampled_from(["cut", "change", "add"]))
    if how == "cut":
        body = body[: data.draw(st.integers(0, len(body) - 1))]
    elif how == "change":
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))
    else:
        body += data.draw(st.binary(min_size=1, max_size=8))
    if how == "change":  # may still read as a record (a changed byte of a value)
        with contextlib.suppress(InvalidMessageError):
            decode_record(bytes(body))
    else:  # cut short or with bytes after its end: always refused
        with pytest.raises(InvalidMessageError):
            decode_record(bytes(body))


def test_buffer_settings():
    config = BufferConfig("in", "out", DueRule(delay_ms=5_000))
    assert config.timeline == "buffer.in.out"
    with pytest.raises(ConfigurationError, match="exactly one"):
        DueRule(delay_ms=1, at_header="due")
    with pytest.raises(ConfigurationError, match="exactly one"):
        DueRule()
    with pytest.raises(ConfigurationError, match="delay_ms"):
        DueRule(delay_ms=-1)
    with pytest.raises(ConfigurationError, match="feed itself"):
        BufferConfig("in", "in", DueRule(delay_ms=1))
    with pytest.raises(ConfigurationError, match="not a Kafka topic"):
        BufferConfig("in", "o/ut", DueRule(delay_ms=1))
    with pytest.raises(ConfigurationError, match="lease_ms"):
        BufferConfig("in", "out", DueRule(delay_ms=1), lease_ms=1_000, flush_timeout_ms=2_000)


def test_record_ids_are_unique_per_offset_and_short():
    assert record_id("t", 1, 2) != record_id("t", 2, 1)
    assert len(record_id("x" * 249, 2**31, 2**62)) <= 200
