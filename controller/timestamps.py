"""Timestamps and durations: the one checker, the one parser, the one wall clock (no I/O).

    >>> check_timestamp(1_700_000_000_000)
    1700000000000
    >>> check_timestamp(" 42 ", parse=True)
    42
    >>> parse_time("2023-11-14T22:13:20Z")
    1700000000000
    >>> parse_time("-5m", now_ms=1_700_000_000_000)
    1699999700000
    >>> parse_duration("1h30m")
    5400000

A timestamp is an int of milliseconds within 0 … 2**63-1 (a Java long, what
Kafka stores). Writers take ints only (``check_timestamp(value, what)``);
user input -- a CLI argument, a ``from_time`` -- may also be a string of
digits or a whole float (``parse=True``). Either way a bad value raises
:class:`tidemark.controller.exceptions.InvalidTimestampError` naming it.

The one syntax of every time and duration a user types (each CLI flag, each HTTP
parameter): a **time** (:func:`parse_time`) is epoch milliseconds (``1700000000000``),
ISO-8601 / RFC 3339 (``2026-11-27T01:00:00Z``, ``2026-11-27 02:00+01:00``; a time
without a zone is UTC), ``now``, or a span from now with its sign (``-5m``: five
minutes ago, ``+1h30m``: ahead). A **duration** (:func:`parse_duration`) is a whole
number of milliseconds (``30000``) or ``<number><unit>`` parts with units ms, s, m, h,
d (``500ms``, ``30s``, ``1h30m``, ``2d``). Bad input raises
:class:`InvalidTimestampError` / :class:`InvalidDurationError` naming the flag or
parameter and the accepted forms (:data:`TIME_FORMS`, :data:`DURATION_FORMS`).
:func:`format_time` and :func:`format_duration` write values that parse back.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from tidemark.controller.exceptions import InvalidDurationError, InvalidTimestampError

MAX_TIMESTAMP = 2**63 - 1
"""The largest timestamp Kafka (a Java long) can hold."""

_INTEGER = re.compile(r"[+-]?\d+")
_MAX_DIGITS = len(str(MAX_TIMESTAMP))


def check_timestamp(
    value: object, what: str = "timestamp", *, parse: bool = False, maximum: int = MAX_TIMESTAMP
) -> int:
    """``value`` as milliseconds within 0 … ``maximum`` (default 2**63-1), else
    :class:`InvalidTimestampError`.

    ``parse``: also accept a string of digits or a whole float (booleans never).
    ``maximum``: a lower bound of a store that adds to times (the timeline's).
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
    if not 0 <= number <= maximum:
        bound = "2**63-1" if maximum == MAX_TIMESTAMP else str(maximum)
        raise InvalidTimestampError(f"{what} {number} is outside 0 … {bound}", value)
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


# --- the one syntax of times and durations that users type --------------------------------------

TIME_FORMS = (
    "epoch ms (1700000000000), ISO-8601 (2026-11-27T01:00:00Z; no zone: UTC), "
    "'now', or a span from now (-5m, +1h30m)"
)
"""The forms :func:`parse_time` accepts, as error messages and help texts name them."""
DURATION_FORMS = "ms (30000) or <number><unit> with units ms, s, m, h, d (500ms, 90s, 15m, 1h30m)"
"""The forms :func:`parse_duration` accepts, as error messages and help texts name them."""

UNITS_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
"""A duration's units, largest first (the order :func:`format_duration` writes them)."""
_PART = re.compile(r"(\d+)(ms|s|m|h|d)")
_SPAN = re.compile(r"(?:\d+(?:ms|s|m|h|d))+")
_DIGITS = re.compile(r"\d+")
_MAX_INPUT = 64
"""Longer input is refused before any arithmetic (no valid time or duration is longer)."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_INPUT else f"{text[:_MAX_INPUT]}…"


def _span_ms(text: str) -> int | None:
    """``text`` (lower case, no blanks) as a sum of ``<number><unit>`` parts, else None."""
    if len(text) > _MAX_INPUT or not _SPAN.fullmatch(text):
        return None
    return sum(int(n) * UNITS_MS[unit] for n, unit in _PART.findall(text))


def parse_duration(value: object, what: str = "duration", *, bare_ms: bool = True) -> int:
    """``value`` as a duration in milliseconds >= 0 (see the module's syntax).

    ``bare_ms``: a whole number without a unit is milliseconds (the ``-ms`` flags); off,
    a unit is required (an ``--ago 5`` is more likely a slip than 5 ms).
    """
    if isinstance(value, int) and not isinstance(value, bool) and bare_ms and value >= 0:
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if text and bare_ms and _DIGITS.fullmatch(text) and len(text) <= _MAX_INPUT:
        return int(text)
    found = None if text is None else _span_ms(text)
    if found is None:
        forms = DURATION_FORMS if bare_ms else DURATION_FORMS.split(" or ", 1)[1]
        raise InvalidDurationError(f"{what} {_shown(value)} is no duration: use {forms}", value)
    return found


def parse_time(value: object, what: str = "time", *, now_ms: int | None = None) -> int:
    """``value`` as UTC milliseconds since the epoch (see the module's syntax); ``now``
    and spans count from ``now_ms`` (default: :func:`wall_clock_ms`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return check_timestamp(value, what)
    if not isinstance(value, str) or not value.strip():
        raise InvalidTimestampError(f"{what}: give a time ({TIME_FORMS}), got {value!r}", value)
    text = value.strip()
    if _DIGITS.fullmatch(text):
        return check_timestamp(text, what, parse=True)
    lowered = text.lower()
    if lowered == "now":
        return wall_clock_ms() if now_ms is None else now_ms
    if lowered[0] in "+-" and (span := _span_ms(lowered[1:])) is not None:
        now = wall_clock_ms() if now_ms is None else now_ms
        return check_timestamp(now - span if lowered[0] == "-" else now + span, what)
    if _span_ms(lowered) is not None:
        raise InvalidTimestampError(
            f"{what} {text!r} is a duration, not a time: give it a sign "
            f"(-{lowered}: that long ago, +{lowered}: that far ahead)",
            value,
        )
    return check_timestamp(_iso_ms(text, what, value), what)


def _iso_ms(text: str, what: str, value: object) -> int:
    try:
        if len(text) > _MAX_INPUT:
            raise ValueError(text)
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise InvalidTimestampError(
            f"{what} {_shown(text)} is no timestamp: use {TIME_FORMS}", value
        ) from None
    if moment.tzinfo is None:  # no zone: UTC, as the module says
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def format_time(time_ms: int) -> str:
    """``time_ms`` as ISO-8601 in UTC with milliseconds (``2026-11-27T01:00:00.250Z``),
    which :func:`parse_time` reads back; up to the year 9999 (``datetime``'s range)."""
    moment = _EPOCH + timedelta(milliseconds=time_ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_duration(duration_ms: int) -> str:
    """``duration_ms`` as ``<number><unit>`` parts, largest unit first (``1h30m``,
    ``0ms``), which :func:`parse_duration` reads back."""
    if duration_ms == 0:
        return "0ms"
    parts = []
    rest = duration_ms
    for unit, size in UNITS_MS.items():
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def time_argument(flag: str) -> Callable[[str], int]:
    """An argparse ``type`` for the time flag ``flag`` (:func:`parse_time`; a bad value
    is argparse's usage error naming the flag and the forms, exit 2)."""

    def time(text: str) -> int:
        try:
            return parse_time(text, flag)
        except InvalidTimestampError as exc:
            raise _usage_error(exc) from None

    return time


def duration_argument(flag: str, *, minimum_ms: int = 0) -> Callable[[str], int]:
    """An argparse ``type`` for the duration flag ``flag`` and its ``-ms`` alias
    (:func:`parse_duration`: a bare number is milliseconds), at least ``minimum_ms``.

    A negative whole number passes as it is (unless ``minimum_ms`` refuses it), as
    ``type=int`` passed it: the setting's own check refuses it, naming its bound."""

    def duration(text: str) -> int:
        try:
            found = int(text) if _NEGATIVE.fullmatch(text.strip()) else parse_duration(text, flag)
        except InvalidDurationError as exc:
            raise _usage_error(exc) from None
        if minimum_ms > 0 and found < minimum_ms:
            raise _usage_error(ValueError(f"{flag} {text!r}: at least {minimum_ms} ms"))
        return found

    return duration


class _TakesArguments(Protocol):
    """An argparse parser, argument group or mutually exclusive group."""

    def add_argument(self, *names: str, **settings: Any) -> Any: ...


TIME_HINT = "epoch ms, ISO-8601, now or -5m"
DURATION_HINT = "ms, or 30s, 1h30m, ..."


def add_time_flag(
    parser: _TakesArguments, flag: str, help: str, *, ms_alias: bool = True, **more: Any
) -> None:
    """``flag`` (and, with ``ms_alias``, ``flag-ms``, the name it had) on ``parser``: a
    time in the one syntax, at ``args.<name>_ms``."""
    _add_flag(parser, flag, help, ms_alias, "TIME", time_argument(flag), TIME_HINT, more)


def add_duration_flag(
    parser: _TakesArguments,
    flag: str,
    help: str,
    *,
    ms_alias: bool = True,
    minimum_ms: int = 0,
    **more: Any,
) -> None:
    """``flag`` (and, with ``ms_alias``, ``flag-ms``) on ``parser``: a duration in the one
    syntax (a bare number: ms), at ``args.<name>_ms``."""
    kind = duration_argument(flag, minimum_ms=minimum_ms)
    _add_flag(parser, flag, help, ms_alias, "DURATION", kind, DURATION_HINT, more)


def _add_flag(
    parser: _TakesArguments,
    flag: str,
    help: str,
    ms_alias: bool,
    metavar: str,
    kind: Callable[[str], int],
    hint: str,
    more: dict[str, Any],
) -> None:
    names = (flag, f"{flag}-ms") if ms_alias else (flag,)
    settings = {"dest": f"{flag.lstrip('-').replace('-', '_')}_ms", **more}
    text = f"{help} ({metavar}: {hint})" if help else f"{metavar}: {hint}"
    parser.add_argument(*names, metavar=metavar, type=kind, help=text, **settings)


_NEGATIVE = re.compile(r"-\d{1,18}")
_SIGNED_SPAN = re.compile(r"-(?:\d+(?:ms|s|m|h|d))+", re.IGNORECASE)


def joined_spans(argv: Sequence[str]) -> list[str]:
    """``argv`` with each ``--flag -5m`` written ``--flag=-5m``: argparse takes a word
    that starts with ``-`` (and is no plain negative number) for a flag of its own."""
    out: list[str] = []
    for word in argv:
        previous = out[-1] if out else ""
        if (
            _SIGNED_SPAN.fullmatch(word)
            and previous.startswith("--")
            and "=" not in previous
            and len(previous) > 2
        ):
            out[-1] = f"{previous}={word}"
        else:
            out.append(word)
    return out


def _usage_error(exc: Exception) -> Exception:
    import argparse  # only on a refusal: library users never load it through this module

    return argparse.ArgumentTypeError(str(exc))


__all__ = [
    "DURATION_FORMS",
    "DURATION_HINT",
    "MAX_TIMESTAMP",
    "TIME_FORMS",
    "TIME_HINT",
    "InvalidDurationError",
    "InvalidTimestampError",
    "add_duration_flag",
    "add_time_flag",
    "check_timestamp",
    "duration_argument",
    "format_duration",
    "format_time",
    "joined_spans",
    "parse_duration",
    "parse_time",
    "time_argument",
    "wall_clock_ms",
]
