"""Time across several streams: the rules that turn one-stream answers into joint ones.

    stream_cut_at(["shop/orders", "shop/payments"], t, store=store)   # {stream: cut}
    complete_cut_at(["shop/orders", "shop/payments"], t)   # None until both are complete
    wait_for_time(["shop/orders", "shop/payments"], t, timeout_ms=60_000)   # {stream: wm}

The public functions (``tidemark.pipelines.reading.seek``,
``tidemark.pipelines.reading.stream_time``)
take a list of streams and answer with these rules, each asking its own
one-stream question per stream; given one name (a ``str``) they answer as
before. This module knows nothing of where the answers come from.

Each stream keeps its own watermarks: a joint cut is each stream's own cut for
``t``, so reading every stream from its start cut misses no event with time
>= ``t`` on any of them, and reading each to its complete cut has every event
with time <= ``t`` of all of them. A joint complete cut exists only when
**every** stream is complete up to ``t`` (``None`` otherwise, as for one
stream); a joint wait returns once every stream's watermark has passed ``t``
and, on timeout, raises :class:`StreamsTimeTimeoutError` naming each stream
still short of ``t`` and the writers holding it back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from tidemark.controller.model import TimeWindow, Watermark
from tidemark.pipelines.reading.exceptions import (
    ReaderConfigError,
    StreamsTimeTimeoutError,
    StreamTimeTimeoutError,
)

T = TypeVar("T")


def check_streams(streams: object) -> list[str]:
    """``streams`` as a list of distinct names: a non-empty sequence of strings (not one
    string), else :class:`ReaderConfigError` naming what is wrong."""
    if isinstance(streams, str | bytes) or not isinstance(streams, Sequence):
        raise ReaderConfigError(f"streams must be a list of stream names, got {streams!r}")
    names = list(streams)
    if not names:
        raise ReaderConfigError("streams must name at least one stream, got none")
    wrong = [s for s in names if not isinstance(s, str) or not s]
    if wrong:
        raise ReaderConfigError(f"stream names must be non-empty strings, got {wrong!r}")
    repeated = sorted({s for s in names if names.count(s) > 1})
    if repeated:
        raise ReaderConfigError(f"each stream may be named once, repeated: {repeated}")
    return names


def each_stream(streams: Sequence[str], answer: Callable[[str], T]) -> dict[str, T]:
    """``{stream: answer(stream)}`` in the order given (where to start: each stream's own)."""
    return {s: answer(s) for s in streams}


def all_complete(streams: Sequence[str], answer: Callable[[str], T | None]) -> dict[str, T] | None:
    """``{stream: answer(stream)}`` once every answer is there; ``None`` at the first stream
    whose answer is ``None`` (not complete yet), without asking the rest."""
    found: dict[str, T] = {}
    for s in streams:
        cut = answer(s)
        if cut is None:
            return None
        found[s] = cut
    return found


def joint_window(windows: Iterable[TimeWindow]) -> TimeWindow:
    """The time window of several streams read together: lower = the smallest lower
    bound (everything before it has been read on every stream), upper = the largest
    upper bound; either ``None`` when any stream's is unknown (or there is none)."""
    found = list(windows)
    lowers = [w.lower for w in found]
    uppers = [w.upper for w in found]
    return TimeWindow(
        None if not found or None in lowers else min(t for t in lowers if t is not None),
        None if not found or None in uppers else max(t for t in uppers if t is not None),
    )


def wait_for_all(
    streams: Sequence[str],
    time_ms: int,
    timeout_ms: int,
    wait_one: Callable[[str, int], Watermark],
) -> dict[str, Watermark]:
    """``{stream: wait_one(stream, ms_left)}`` once every stream has passed ``time_ms``.

    The streams are waited on one after the other within one deadline of
    ``timeout_ms`` (the wait ends when the slowest is there). Once one times out
    the rest are looked at once (``ms_left`` 0) so that
    :class:`StreamsTimeTimeoutError` names every stream still short of the time,
    with its latest watermark and the writers holding it back.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    reached: dict[str, Watermark] = {}
    behind: dict[str, Watermark | None] = {}
    holding: dict[str, list[str]] = {}
    for s in streams:
        left_ms = 0 if behind else max(0, int((deadline - time.monotonic()) * 1000))
        try:
            reached[s] = wait_one(s, left_ms)
        except StreamTimeTimeoutError as exc:
            behind[s] = exc.last
            holding[s] = exc.holding
    if behind:
        raise StreamsTimeTimeoutError(time_ms, behind, holding)
    return reached


__all__ = ["all_complete", "check_streams", "each_stream", "joint_window", "wait_for_all"]
