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


def _blob(data: bytes, at: int, size: int) -> tuple[bytes | None, int]:
    """The bytes at ``at`` (length first; -1: none) and where the next field starts."""
    if at + 4 > size:
        raise _short(at, 4)
    (n,) = _unpack_len(data, at)
    at += 4
    if n == -1:
        return None, at
    end = at + n
    if n < 0 or end > size:
        raise _short(at, n)
    return data[at:end], end


_unpack_len = _LEN.unpack_from
_HEAD_KEY = struct.Struct(">Bqi")
"""The version, the timestamp and the key's length: read at once."""


def decode_record(data: bytes) -> KafkaRecord:
    """The record :func:`encode_record` wrote; :class:`InvalidMessageError` for other bytes.

    (Offsets into the bytes, no reader object, the first fields in one unpack: the relay
    decodes one a record it sends.)"""
    data = bytes(data)
    size = len(data)
    if size < _HEAD_KEY.size:
        raise _short(0, _HEAD_KEY.size)
    version, timestamp_ms, n = _HEAD_KEY.unpack_from(data, 0)
    if version != VERSION:
        raise InvalidMessageError(f"a buffered record of version {version}, not {VERSION}")
    at = _HEAD_KEY.size
    key: bytes | None = None
    if n != -1:
        end = at + n
        if n < 0 or end > size:
            raise _short(at, n)
        key, at = data[at:end], end
    value, at = _blob(data, at, size)
    if at + 4 > size:
        raise _short(at, 4)
    (count,) = _unpack_len(data, at)
    at += 4
    if count < 0:
        raise InvalidMessageError(f"a buffered record with {count} headers")
    headers: RecordHeaders = ()
    if count:
        found = []
        for _ in range(count):
            name, at = _blob(data, at, size)
            if name is None:
                raise InvalidMessageError("a buffered record's header has no name")
            header, at = _blob(data, at, size)
            try:
                found.append((name.decode(), header))
            except UnicodeDecodeError:
                raise InvalidMessageError("a buffered record's header name is not UTF-8") from None
        headers = tuple(found)
    if at != size:
        raise InvalidMessageError(f"a buffered record has {size - at} bytes after its end")
    return KafkaRecord(key, value, headers, int(timestamp_ms))
