"""Timestamps: the one checker and the one wall clock (pure rules, no I/O).

    >>> check_timestamp(1_700_000_000_000)
    1700000000000
    >>> check_timestamp(" 42 ", parse=True)
    42

A timestamp is an int of milliseconds within 0 … 2**63-1 (a Java long, what
Kafka stores). Writers take ints only (``check_timestamp(value, what)``);
user input -- a CLI argument, a ``from_time`` -- may also be a string of
digits or a whole float (``parse=True``). Either way a bad value raises
:class:`tidemark.controller.exceptions.InvalidTimestampError` naming it.
"""

from __future__ import annotations

import re
import time

from tidemark.controller.exceptions import InvalidTimestampError

MAX_TIMESTAMP = 2**63 - 1
"""The largest timestamp Kafka (a Java long) can hold."""

_INTEGER = re.compile(r"[+-]?\d+")
_MAX_DIGITS = len(str(MAX_TIMESTAMP))


def check_timestamp(value: object, what: str = "timestamp", *, parse: bool = False) -> int:
    """``value`` as milliseconds within 0 … 2**63-1, else :class:`InvalidTimestampError`.

    ``parse``: also accept a string of digits or a whole float (booleans never).
    """
    if parse:
        number = _parsed(value, what)
    elif type(value) is not int:
        raise InvalidTimestampError(
            f"{what} must be an int of milliseconds, got {value!r} ({type(value).__name__})",
            value,
        )
    else:
        number = value
    if not 0 <= number <= MAX_TIMESTAMP:
        raise InvalidTimestampError(f"{what} {number} is outside 0 … 2**63-1", value)
    return number


def _parsed(value: object, what: str) -> int:
    def refuse(detail: str) -> InvalidTimestampError:
        return InvalidTimestampError(
            f"{what} must be an integer of milliseconds >= 0, got {value!r} ({detail})", value
        )

    if isinstance(value, bool):
        raise refuse("a boolean is not a time")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise refuse("not a whole number of milliseconds")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if not _INTEGER.fullmatch(text):
            raise refuse("not an integer")
        if len(text.lstrip("+-").lstrip("0")) > _MAX_DIGITS:
            # int() of thousands of digits is slow or refused (Python's digit limit)
            raise InvalidTimestampError(f"{what} {text[:24]}… is outside 0 … 2**63-1", value)
        return int(text)
    raise refuse(f"a {type(value).__name__} is not a time")


def wall_clock_ms() -> int:
    """Milliseconds since the epoch by this machine's clock (the one wall clock)."""
    return time.time_ns() // 1_000_000


__all__ = ["MAX_TIMESTAMP", "InvalidTimestampError", "check_timestamp", "wall_clock_ms"]
