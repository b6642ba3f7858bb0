"""A Kafka record kept whole in a message body, so the buffer gives it back byte for byte.

    body = encode_record(KafkaRecord(b"k", b"v", (("trace", b"1"),), 1_700_000_000_000))
    decode_record(body).value == b"v"

The timeline buffer (:mod:`.buffer`) stores each source record as one
message whose body is this envelope: key, value and header values may be
absent (``None``, as Kafka allows: a tombstone, a header without value),
header names repeat and keep their order, and the timestamp is the record's.
Layout (big-endian): version byte, timestamp (int64), key and value
(int32 length, -1 for none, then the bytes), header count (int32), then per
header its UTF-8 name (int32 length + bytes) and value (as key).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tidemark.pipelines.timeline.exceptions import InvalidMessageError

VERSION = 1
_HEAD = struct.Struct(">Bq")
_LEN = struct.Struct(">i")

RecordHeaders = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class KafkaRecord:
    """What a produce needs to recreate a record: key, value, headers, timestamp (ms)."""

    key: bytes | None
    value: bytes | None
    headers: RecordHeaders
    timestamp_ms: int


def _put(out: list[bytes], data: bytes | None) -> None:
    if data is None:
        out.append(_LEN.pack(-1))
    else:
        out.append(_LEN.pack(len(data)))
        out.append(data)


def encode_record(record: KafkaRecord) -> bytes:
    out = [_HEAD.pack(VERSION, record.timestamp_ms)]
    _put(out, record.key)
    _put(out, record.value)
    out.append(_LEN.pack(len(record.headers)))
    for name, value in record.headers:
        _put(out, name.encode())
        _put(out, value)
    return b"".join(out)


def _short(at: int, n: int) -> InvalidMessageError:
    return InvalidMessageError(f"a buffered record is cut short at byte {at} (wants {n} more)")


def _length(data: bytes, at: int) -> int:
    if at + _LEN.size > len(data):
        raise _short(at, _LEN.size)
    return int(_LEN.unpack_from(data, at)[0])


def _blob(data: bytes, at: int) -> tuple[bytes | None, int]:
    """The bytes at ``at`` (length first; -1: none) and where the next field starts."""
    n = _length(data, at)
    at += _LEN.size
    if n == -1:
        return None, at
    if n < 0 or at + n > len(data):
        raise _short(at, n)
    return data[at : at + n], at + n


def decode_record(data: bytes) -> KafkaRecord:
    """The record :func:`encode_record` wrote; :class:`InvalidMessageError` for other bytes.

    (Offsets into the bytes, no reader object: the relay decodes one a record it sends.)"""
    data = bytes(data)
    if len(data) < _HEAD.size:
        raise _short(0, _HEAD.size)
    version, timestamp_ms = _HEAD.unpack_from(data, 0)
    if version != VERSION:
        raise InvalidMessageError(f"a buffered record of version {version}, not {VERSION}")
    key, at = _blob(data, _HEAD.size)
    value, at = _blob(data, at)
    count = _length(data, at)
    at += _LEN.size
    if count < 0:
        raise InvalidMessageError(f"a buffered record with {count} headers")
    headers = []
    for _ in range(count):
        name, at = _blob(data, at)
        if name is None:
            raise InvalidMessageError("a buffered record's header has no name")
        header, at = _blob(data, at)
        headers.append((name.decode(), header))
    if at != len(data):
        raise InvalidMessageError(f"a buffered record has {len(data) - at} bytes after its end")
    return KafkaRecord(key, value, tuple(headers), int(timestamp_ms))
