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


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.at = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise InvalidMessageError(
                f"a buffered record is cut short at byte {self.at} (wants {n} more)"
            )
        chunk = bytes(self.data[self.at : self.at + n])
        self.at += n
        return chunk

    def length(self) -> int:
        return int(_LEN.unpack(self.take(_LEN.size))[0])

    def blob(self) -> bytes | None:
        n = self.length()
        return None if n == -1 else self.take(n)


def decode_record(data: bytes) -> KafkaRecord:
    """The record :func:`encode_record` wrote; :class:`InvalidMessageError` for other bytes."""
    reader = _Reader(data)
    version, timestamp_ms = _HEAD.unpack(reader.take(_HEAD.size))
    if version != VERSION:
        raise InvalidMessageError(f"a buffered record of version {version}, not {VERSION}")
    key, value = reader.blob(), reader.blob()
    count = reader.length()
    if count < 0:
        raise InvalidMessageError(f"a buffered record with {count} headers")
    headers = []
    for _ in range(count):
        name = reader.blob()
        if name is None:
            raise InvalidMessageError("a buffered record's header has no name")
        headers.append((name.decode(), reader.blob()))
    if reader.at != len(reader.data):
        raise InvalidMessageError(
            f"a buffered record has {len(reader.data) - reader.at} bytes after its end"
        )
    return KafkaRecord(key, value, tuple(headers), int(timestamp_ms))
