"""Writer marks read straight from their bytes: the controller's hot path.

    >>> from tidemark.schemas.records import WriterMarkRecord
    >>> data = WriterMarkRecord("shop/orders", "w1", 1_000, {0: 17}).encode()
    >>> read_writer_mark(data).position
    {0: 17}
    >>> read_writer_mark(b"garbage") is None
    True

The controller decodes every mark of every micro-batch. Through the generic
codec (:mod:`tidemark.schemas.codec`: header checks, a ``BytesIO`` around the body,
fastavro's schema-driven reader, a dict, then the record) a mark cost about
as much as the rest of its admission. :func:`read_writer_mark` reads the
kept versions of ``writer_mark`` (v1, v2 and v3, in the layout of their ``.avsc``
files) directly from the bytes.

It only recognises good marks quickly; it never judges bad ones. Anything
unusual -- another fingerprint, a union branch or array block form it does
not expect, a duplicate segment, invalid UTF-8, a long wider than 64 bits,
bytes missing or left over -- returns ``None``, and the caller takes the
generic path, which names the problem. A version added to
``schemas/versions`` is read by the generic path until it is added here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tidemark.schemas.codec import HEADER_SIZE, default_registry
from tidemark.schemas.records import WRITER_MARK, WriterMarkRecord

_T = TypeVar("_T")


class _Unusual(Exception):
    """Not a plain writer mark of a known version: leave it to the generic path."""


def _long(data: bytes, i: int) -> tuple[int, int]:
    """A zigzag varint at ``i``: (value, next index)."""
    b = data[i]
    if b < 0x80:  # one byte: most lengths, counts and union branches
        return (b >> 1) ^ -(b & 1), i + 1
    i += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
    if n >> 64:
        raise _Unusual
    return (n >> 1) ^ -(n & 1), i


def _string(data: bytes, i: int) -> tuple[str, int]:
    size, i = _long(data, i)
    end = i + size
    if size < 0 or end > len(data):
        raise _Unusual
    return data[i:end].decode("utf-8"), end


def _optional(
    read: Callable[[bytes, int], tuple[_T, int]], data: bytes, i: int
) -> tuple[_T | None, int]:
    """A ``["null", T]`` union at ``i``, ``T`` read by ``read``."""
    branch, i = _long(data, i)
    if branch == 0:
        return None, i
    if branch != 1:
        raise _Unusual
    return read(data, i)


def _headers() -> dict[bytes, int]:
    """Single-object header -> writer_mark version read here."""
    registry = default_registry()
    return {registry.get(f"{WRITER_MARK}.v{v}").header: v for v in (1, 2, 3)}


_VERSIONS = _headers()


def read_writer_mark(data: bytes) -> WriterMarkRecord | None:
    """The writer mark in ``data`` (v1, v2 or v3), or ``None``: take the generic path."""
    version = _VERSIONS.get(data[:HEADER_SIZE])
    if version is None:
        return None
    try:
        i = HEADER_SIZE
        stream, i = _string(data, i)
        writer_id, i = _string(data, i)
        time, i = _long(data, i)
        position: dict[int, int] = {}
        count, i = _long(data, i)
        while count:
            if count < 0:  # the block form with a byte size: rare, generic path
                raise _Unusual
            for _ in range(count):
                segment, i = _long(data, i)
                offset, i = _long(data, i)
                if segment in position:
                    raise _Unusual
                position[segment] = offset
            count, i = _long(data, i)
        alive = data[i]
        i += 1
        if alive > 1:
            raise _Unusual
        transaction_id, i = _optional(_string, data, i)
        instance = max_event_time = lateness = possibly_late = None
        if version >= 2:
            instance, i = _optional(_string, data, i)
            max_event_time, i = _optional(_long, data, i)
        if version >= 3:
            lateness, i = _optional(_long, data, i)
            possibly_late, i = _optional(_long, data, i)
        if i != len(data):
            raise _Unusual
    except (_Unusual, IndexError, UnicodeDecodeError):
        return None
    # Built without WriterMarkRecord's checks of caller-made positions: every key and
    # value here is an int read above (the checks cost as much as reading the body).
    record = object.__new__(WriterMarkRecord)
    record.__dict__.update(
        stream=stream,
        writer_id=writer_id,
        time=time,
        position=position,
        alive=alive == 1,
        transaction_id=transaction_id,
        instance=instance,
        max_event_time=max_event_time,
        observed_lateness_ms=lateness,
        possibly_late=possibly_late,
    )
    return record


__all__ = ["read_writer_mark"]
