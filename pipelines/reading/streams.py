"""Time across several streams: one cut per stream for a time, and a wait on all of them.

    cuts = start_cuts(["shop/orders", "shop/payments"], t, store=store)   # {stream: cut}
    ends = complete_cuts(["shop/orders", "shop/payments"], t)   # None until both are complete
    marks = wait_for_streams(["shop/orders", "shop/payments"], t, timeout_ms=60_000)

The public one-stream functions take a list too and land here:
``stream_cut_at([s1, s2], t)``, ``complete_cut_at([s1, s2], t)`` and
``wait_for_time([s1, s2], t, timeout_ms)``; given one stream name (a ``str``)
they answer for that stream alone, as before.

Each stream keeps its own watermarks: a joint cut is each stream's own cut
for ``t``, so reading every stream from its start cut misses no event with
time >= ``t`` on any of them, and reading each to its complete cut has every
event with time <= ``t`` of all of them. ``complete_cuts`` answers only when
**every** stream is complete up to ``t`` (``None`` otherwise, as for one
stream); ``wait_for_streams`` returns once every stream's watermark has
passed ``t`` and, on timeout, raises :class:`StreamsTimeTimeoutError` naming
the streams still short of ``t`` and the writers holding each back. All
lookups share one :class:`~pipelines.reading.seek.SeekIndex`, so a joint
lookup costs about one lookup per stream.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

from controller.model import Watermark
from controller.store import MetadataStore
from controller.timestamps import check_timestamp as check_time
from pipelines.reading.exceptions import (
    ReaderConfigError,
    StreamsTimeTimeoutError,
    StreamTimeTimeoutError,
)
from pipelines.reading.seek import (
    SeekIndex,
    check_timestamp,
    complete_cut_at,
    shared_index,
    stream_cut_at,
)
from pipelines.reading.stream_time import _check_timeout as check_timeout
from pipelines.reading.stream_time import wait_for_time


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


def start_cuts(
    streams: Sequence[str],
    timestamp: object,
    *,
    delta_root: str | None = None,
    store: MetadataStore | None = None,
    index: SeekIndex | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> dict[str, dict[int, int]]:
    """``{stream: stream_cut_at(stream, timestamp)}``: where to start reading each stream
    so that no event with time >= ``timestamp`` is skipped on any of them."""
    names = check_streams(streams)
    ts = check_timestamp(timestamp)
    idx = index or shared_index(delta_root, storage_options)
    return {s: stream_cut_at(s, ts, store=store, index=idx) for s in names}


def complete_cuts(
    streams: Sequence[str],
    timestamp: object,
    *,
    delta_root: str | None = None,
    store: MetadataStore | None = None,
    index: SeekIndex | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> dict[str, dict[int, int]] | None:
    """``{stream: complete_cut_at(stream, timestamp)}`` once **every** stream is complete
    up to ``timestamp``; ``None`` while any one is not."""
    names = check_streams(streams)
    ts = check_timestamp(timestamp)
    idx = index or shared_index(delta_root, storage_options)
    found: dict[str, dict[int, int]] = {}
    for s in names:
        cut = complete_cut_at(s, ts, store=store, index=idx)
        if cut is None:
            return None
        found[s] = cut
    return found


def wait_for_streams(
    streams: Sequence[str],
    time_ms: object,
    timeout_ms: int,
    *,
    delta_root: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    stop: threading.Event | None = None,
) -> dict[str, Watermark]:
    """``{stream: its first watermark with time >= time_ms}`` once every stream has one.

    The streams are waited on one after the other within one deadline (the wait
    ends when the slowest is there). On timeout (0: look once)
    :class:`StreamsTimeTimeoutError` names every stream still short of the time,
    with its latest watermark and the writers holding it back;
    :class:`~pipelines.reading.exceptions.WaitCancelledError` when ``stop`` is set.
    """
    names = check_streams(streams)
    target = check_time(time_ms, "time", parse=True)
    deadline = time.monotonic() + check_timeout(timeout_ms) / 1000
    reached: dict[str, Watermark] = {}
    behind: dict[str, Watermark | None] = {}
    holding: dict[str, list[str]] = {}
    for s in names:
        left_ms = 0 if behind else max(0, int((deadline - time.monotonic()) * 1000))
        try:
            reached[s] = wait_for_time(
                s,
                target,
                left_ms,
                delta_root=delta_root,
                storage_options=storage_options,
                stop=stop,
            )
        except StreamTimeTimeoutError as exc:  # look at the others once, to name them all
            behind[s] = exc.last
            holding[s] = exc.holding
    if behind:
        raise StreamsTimeTimeoutError(target, behind, holding)
    return reached


__all__ = ["check_streams", "complete_cuts", "start_cuts", "wait_for_streams"]
