"""The CLI's face of the one time syntax (``tidemark.controller.timestamps``).

    add_time_flag(parser, "--at", "due then")       # --at and --at-ms, into args.at_ms
    add_duration_flag(parser, "--timeout", "give up after this long")   # args.timeout_ms

Every flag that takes a time or a duration parses there: a time is epoch ms, ISO-8601
(no zone: UTC), ``now`` or a signed span from now (``-5m``); a duration is ms or
``<number><unit>`` parts (``30s``, ``1h30m``). A ``-ms`` flag is kept as an alias of its
flag without the suffix: a bare number still means milliseconds. Bad input names the
flag and the accepted forms: a verb's own parse raises :class:`InvalidTimestampError` /
:class:`InvalidDurationError`, which ``tidemark`` reports as a usage error (exit 2);
an argparse ``type`` does the same through argparse (exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from tidemark.controller.exceptions import InvalidDurationError, InvalidTimestampError
from tidemark.controller.timestamps import (
    DURATION_FORMS,
    TIME_FORMS,
    add_duration_flag,
    add_time_flag,
    duration_argument,
    parse_duration,
    parse_time,
    time_argument,
    wall_clock_ms,
)

TIME_HELP = TIME_FORMS
DURATION_HELP = DURATION_FORMS


def parse_ago(text: object, flag: str = "--ago") -> int:
    """The time ``text`` (a duration, its unit required) before now, in epoch ms."""
    at = wall_clock_ms() - parse_duration(text, flag, bare_ms=False)
    if at < 0:
        raise InvalidTimestampError(f"{flag} {text}: that is before 1970 (time 0)", text)
    return at


def seconds_argument(flag: str) -> Callable[[str], float]:
    """An argparse ``type`` for a ``-s`` flag: a bare number is seconds (the suffix's unit,
    as a ``-ms`` flag's is milliseconds), or a duration with its unit (``90s``, ``2m``)."""

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            try:
                return parse_duration(text, flag, bare_ms=False) / 1000
            except InvalidDurationError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        if not value >= 0:  # also NaN
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: give seconds >= 0 or 90s, 2m")
        return value

    return seconds


__all__ = [
    "DURATION_HELP",
    "TIME_HELP",
    "add_duration_flag",
    "add_time_flag",
    "duration_argument",
    "parse_ago",
    "parse_duration",
    "parse_time",
    "seconds_argument",
    "time_argument",
]
