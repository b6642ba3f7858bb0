"""A marks-topic record's key and value, decoded without ever raising.

    >>> decode_stream_key(b"shop/orders")
    'shop/orders'
    >>> decode_stream_key(b"\\xff/x")
    Undecodable(reason='malformed_key', detail='key is not UTF-8: \\\\xff/x')
    >>> decode_mark(b"garbage").reason
    'malformed'

Everything on the marks topic is data: anybody who may produce to it can
write any bytes. The controller job turns what these functions call
:class:`Undecodable` into a ``rejected_marks`` row (the reason, the raw
value) and carries on; no input makes a batch fail.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.schemas.exceptions import UnknownFingerprintError
from tidemark.schemas.mark_body import read_writer_mark
from tidemark.schemas.records import WriterMarkRecord
from tidemark.schemas.tables import Reason


@dataclass(frozen=True)
class Undecodable:
    """Why a record is not a writer mark: a :class:`~tidemark.schemas.tables.Reason` and a
    detail."""

    reason: str
    detail: str


def printable_key(key: bytes) -> str:
    """``key`` as text, every byte kept: invalid UTF-8 as ``\\xNN`` escapes."""
    return bytes(key).decode("utf-8", "backslashreplace")


def decode_stream_key(key: bytes | None) -> str | Undecodable:
    """The stream a record's key names (``""`` for no key), or why it names none."""
    if key is None:
        return ""
    try:
        return bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        return Undecodable(Reason.MALFORMED_KEY, f"key is not UTF-8: {printable_key(key)}")


def decode_mark(value: bytes | None) -> WriterMarkRecord | Undecodable:
    """The writer mark in ``value``, or why it is not one (never raises)."""
    if value is None:
        return Undecodable(Reason.MALFORMED, "no value")
    data = value if type(value) is bytes else bytes(value)
    record = read_writer_mark(data)  # the common case, fast; None: the generic codec says
    if record is None:
        try:
            record = WriterMarkRecord.decode(data)
        except UnknownFingerprintError as exc:
            return Undecodable(Reason.UNKNOWN_SCHEMA, str(exc))
        except Exception as exc:  # any failure of foreign bytes is a malformed mark
            return Undecodable(Reason.MALFORMED, f"{type(exc).__name__}: {exc}")
    if not record.writer_id:
        return Undecodable(Reason.MALFORMED, "empty writer_id")
    for segment, offset in record.position.items():
        if segment < 0 or offset < 0:
            return Undecodable(Reason.MALFORMED, f"negative segment or offset {segment}:{offset}")
    return record


__all__ = ["Undecodable", "decode_mark", "decode_stream_key", "printable_key"]
