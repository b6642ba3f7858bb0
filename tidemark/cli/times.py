"""The CLI's one time syntax: every flag that takes a time or a span parses here.

A time is epoch milliseconds (``1700000000000``), ISO-8601 / RFC 3339
(``2026-11-27T01:00:00Z``, ``2026-11-27 01:00+01:00``; no zone means UTC), or
``now``. A span (``--ago``) is a duration: ``500ms``, ``90s``, ``15m``, ``2h``,
``1h30m``, ``2d`` (``tidemark.pipelines.reading.seek.parse_duration``, the one duration
parser). Bad input raises :class:`InvalidTimestampError` /
:class:`InvalidDurationError` naming the flag, which ``tidemark`` reports as a
usage error (exit 2).
"""

from __future__ import annotations

from datetime import UTC, datetime

from tidemark.controller.exceptions import InvalidTimestampError
from tidemark.controller.timestamps import check_timestamp, wall_clock_ms

TIME_HELP = "epoch ms, ISO-8601/RFC 3339 (2026-11-27T01:00:00Z) or 'now'"


def parse_time(text: object, flag: str = "time") -> int:
    """``text`` as UTC milliseconds since the epoch (see the module's syntax)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return check_timestamp(text, flag)
    if not isinstance(text, str) or not text.strip():
        raise InvalidTimestampError(f"{flag}: give a time ({TIME_HELP}), got {text!r}", text)
    value = text.strip()
    if value.isdigit():
        return check_timestamp(value, flag, parse=True)
    if value.lower() == "now":
        return wall_clock_ms()
    try:
        moment = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise InvalidTimestampError(
            f"{flag} {value!r} is no timestamp: use {TIME_HELP}", value
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return check_timestamp(round(moment.timestamp() * 1000), flag)


def parse_ago(text: object, flag: str = "--ago") -> int:
    """The time ``text`` (a duration) before now, in epoch milliseconds."""
    # tidemark.pipelines.reading.seek: off tidemark --help (the parser imports every verb module)
    from tidemark.pipelines.reading.seek import parse_duration

    at = wall_clock_ms() - parse_duration(text)
    if at < 0:
        raise InvalidTimestampError(f"{flag} {text}: that is before 1970 (time 0)", text)
    return at
