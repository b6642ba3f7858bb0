"""Wait until a stream's time passes T: the first watermark with ``time >= T``.

    wm = wait_for_time("shop/orders", t, timeout_ms=60_000, delta_root="/data/delta")
    wm = await wait_for_time_async("shop/orders", t, timeout_ms=60_000)
    trigger = on_stream_time("shop/orders", t, lambda wm: run_report(wm), timeout_ms=60_000)
    trigger.cancel()
    clock = LatestStreamTimes("/data/delta")   # stream -> latest watermark time

A watermark with ``time >= T`` says every event with time <= T was written
before its cut (for well-behaved writers): data up to T is complete. On
timeout, :class:`StreamTimeTimeoutError` names the writers holding the
stream back (the controller's ``laggards`` table, and writers whose marks
were refused as stale).

Woken by new watermarks, not by a tight poll. The waiting is a
:class:`WatermarkSource` (:func:`watermark_source` picks the default):

- with ``TIDEMARK_TIME_SERVICE`` set, :class:`ServiceWatermarkSource` asks
  the running ``tidemark serve`` (``GET /api/streams/S/wait?t=T``, a long
  poll the service answers as soon as its refresh sees a watermark with
  ``time >= T``); while the service cannot be reached it reads Delta as
  below, and asks the service again after 30 s;
- otherwise :class:`DeltaWatermarkSource` reads the ``marks`` table
  incrementally and, between reads, watches the table's ``_delta_log`` for
  the next version's commit file with a backoff (10 ms doubling to 250 ms: a
  ``stat`` per step on a local path; on object stores each step is one
  incremental log read).

Another source plugs in by implementing the same three methods.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypedDict, Unpack, overload

from tidemark.controller.delta.tables import MarksTail, Root, TableLocation
from tidemark.controller.model import Watermark
from tidemark.controller.timestamps import check_timestamp, wall_clock_ms
from tidemark.pipelines.reading.exceptions import (
    ReaderConfigError,
    StreamTimeTimeoutError,
    WaitCancelledError,
)
from tidemark.pipelines.reading.lateness import read_laggards, stale_marks
from tidemark.pipelines.reading.streams import check_streams, wait_for_all
from tidemark.pipelines.reading.time_service import (
    ServiceUnavailableError,
    TimeServiceClient,
    stream_path,
    time_service_url,
    watermark_from_json,
)

log = logging.getLogger(__name__)

EXIT_NOT_YET = 75
"""Exit code of ``tidemark wait`` on timeout and of ``tidemark window run`` while the
window is not complete (sysexits' EX_TEMPFAIL: try again later)."""

STALE_LOOKBACK_MS = 3_600_000
"""Stale marks of the last hour are named on a timeout."""


class WatermarkSource(Protocol):
    """Where a waiter learns of a stream's new watermarks."""

    def poll(self) -> Sequence[Watermark]:
        """Watermarks emitted since the last poll, in ``seq`` order (all of them at first)."""
        ...

    def wait_for_change(self, timeout_ms: int, stop: threading.Event) -> None:
        """Return when a new watermark may be there, after ``timeout_ms``, or once ``stop``
        is set -- whichever comes first."""
        ...

    def holding(self) -> list[str]:
        """Descriptions of the writers holding the stream back (may be empty)."""
        ...


class DeltaWatermarkSource:
    """A stream's watermarks from the controller's ``marks`` table (deltalake)."""

    def __init__(
        self,
        lake: Root,
        stream: str,
        *,
        min_backoff_ms: int = 10,
        max_backoff_ms: int = 250,
    ) -> None:
        if not 1 <= min_backoff_ms <= max_backoff_ms:
            raise ReaderConfigError(
                f"need 1 <= min_backoff_ms <= max_backoff_ms, got {min_backoff_ms}, "
                f"{max_backoff_ms}"
            )
        self.location = TableLocation.of(lake)
        self.stream = stream
        self.min_backoff_ms = min_backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self._tail = MarksTail(self.location, stream)
        self._remote_delay_ms = min_backoff_ms
        """Object stores: the pause before the next read, grown while nothing comes."""

    def poll(self) -> list[Watermark]:
        found = self._tail.poll()
        if found:
            self._remote_delay_ms = self.min_backoff_ms
        return found

    def wait_for_change(self, timeout_ms: int, stop: threading.Event) -> None:
        commit = self._tail.next_commit_file()
        if commit is None:
            # Object store: one incremental read (the next poll) per step, the
            # steps growing while nothing new comes.
            stop.wait(min(self._remote_delay_ms, max(0, timeout_ms)) / 1000)
            self._remote_delay_ms = min(self._remote_delay_ms * 2, self.max_backoff_ms)
            return
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        delay_ms = self.min_backoff_ms
        while not stop.is_set():
            if os.path.exists(commit):
                return
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return
            if stop.wait(min(delay_ms / 1000, remaining_s)):
                return
            delay_ms = min(delay_ms * 2, self.max_backoff_ms)

    def holding(self) -> list[str]:
        found = [_describe(row) for row in read_laggards(self.location, self.stream)]
        stale = stale_marks(
            self.location, self.stream, since_ms=wall_clock_ms() - STALE_LOOKBACK_MS
        )
        found += [f"{w} ({n} mark(s) refused as stale)" for w, n in sorted(stale.items())]
        return found


class ServiceWatermarkSource:
    """A stream's progress towards ``time_ms`` from the time service (``tidemark serve``).

    :meth:`wait_for_change` is one long poll (at most ``slice_ms``, so a
    ``stop`` is seen within that); :meth:`poll` hands out what the answers
    brought: the first watermark with ``time >= time_ms`` once there is one,
    before that the stream's latest watermark when it is new -- not every
    watermark in between. When the service cannot be reached (refused, timed
    out, an answer that is not JSON) it logs once and reads Delta
    (:class:`DeltaWatermarkSource`) for ``retry_after_s``. Errors the service
    names (an unknown stream, a bad time) are raised.
    """

    def __init__(
        self,
        url: str,
        stream: str,
        time_ms: int,
        *,
        lake: Root = None,
        slice_ms: int = 1_000,
        retry_after_s: float = 30.0,
    ) -> None:
        if slice_ms < 1:
            raise ReaderConfigError(f"slice_ms must be >= 1, got {slice_ms}")
        self.stream = stream
        self.time_ms = time_ms
        self.slice_ms = slice_ms
        self.client = TimeServiceClient(url, timeout_s=slice_ms / 1000 + 5.0)
        self._lake = lake
        self._fallback: DeltaWatermarkSource | None = None
        self._retry_after_s = retry_after_s
        self._down_until = 0.0
        self._pending: list[Watermark] = []
        self._answered = False
        """The service answered since the last poll (what it brought is pending)."""
        self._last_seq = -1

    def _delta(self) -> DeltaWatermarkSource:
        if self._fallback is None:
            self._fallback = DeltaWatermarkSource(self._lake, self.stream)
        return self._fallback

    def _service_down(self) -> bool:
        return time.monotonic() < self._down_until

    def _ask(self, timeout_ms: int) -> bool:
        """One request (held up to ``timeout_ms``); False when the service is down."""
        try:
            body = self.client.get(
                f"{stream_path(self.stream)}/wait", t=self.time_ms, timeout_ms=timeout_ms
            )
        except ServiceUnavailableError as exc:
            log.warning("time service unavailable (%s); watching Delta instead", exc)
            self._down_until = time.monotonic() + self._retry_after_s
            return False
        found = watermark_from_json(self.stream, body.get("watermark"))
        latest = watermark_from_json(self.stream, body.get("latest"))
        fresh = found if found is not None else latest
        if fresh is not None and (found is not None or fresh.seq > self._last_seq):
            self._last_seq = max(self._last_seq, fresh.seq)
            self._pending.append(fresh)
        self._answered = True
        return True

    def poll(self) -> list[Watermark]:
        if not self._answered and (self._service_down() or not self._ask(0)):
            return self._delta().poll()
        found, self._pending, self._answered = self._pending, [], False
        return found

    def wait_for_change(self, timeout_ms: int, stop: threading.Event) -> None:
        if self._answered or stop.is_set():
            return
        if self._service_down() or not self._ask(max(0, min(timeout_ms, self.slice_ms))):
            self._delta().wait_for_change(min(timeout_ms, self.slice_ms), stop)

    def holding(self) -> list[str]:
        return self._delta().holding()

    def close(self) -> None:
        self.client.close()


def watermark_source(
    stream: str,
    time_ms: int,
    *,
    lake: Root = None,
) -> WatermarkSource:
    """The source a wait for ``time_ms`` uses by default: the time service's when
    ``TIDEMARK_TIME_SERVICE`` is set (falling back to Delta), else the ``marks`` table."""
    url = time_service_url()
    if url is None:
        return DeltaWatermarkSource(lake, stream)
    return ServiceWatermarkSource(url, stream, time_ms, lake=lake)


def _describe(row: Mapping[str, object]) -> str:
    since = "" if row.get("since") is None else f" since {row['since']}"
    return (
        f"{row['writer']} ({row['kind']}{since}: noted {row['noted_time']}, "
        f"{row['behind_ms']} ms behind)"
    )


def _check_timeout(timeout_ms: object) -> int:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 0:
        raise ReaderConfigError(f"timeout_ms must be an integer >= 0, got {timeout_ms!r}")
    return timeout_ms


class WaitSource(TypedDict, total=False):
    """Where :func:`wait_for_time` watches (keywords, all optional): ``source``, else
    :func:`watermark_source` of ``delta_root`` (a root, or a
    :class:`~tidemark.controller.delta.location.TableLocation`) with ``storage_options``."""

    delta_root: Root
    source: WatermarkSource | None
    storage_options: Mapping[str, str] | None


@overload
def wait_for_time(  # type: ignore[overload-overlap]  # (a str is a Sequence[str])
    stream: str,
    time_ms: object,
    timeout_ms: int,
    *,
    stop: threading.Event | None = None,
    **where: Unpack[WaitSource],
) -> Watermark: ...


@overload
def wait_for_time(
    stream: Sequence[str],
    time_ms: object,
    timeout_ms: int,
    *,
    stop: threading.Event | None = None,
    **where: Unpack[WaitSource],
) -> dict[str, Watermark]: ...


def wait_for_time(
    stream: str | Sequence[str],
    time_ms: object,
    timeout_ms: int,
    *,
    stop: threading.Event | None = None,
    **where: Unpack[WaitSource],
) -> Watermark | dict[str, Watermark]:
    """The first watermark of ``stream`` with ``time >= time_ms``.

    Raises :class:`StreamTimeTimeoutError` after ``timeout_ms`` (0: look once),
    :class:`WaitCancelledError` when ``stop`` is set first. ``source`` defaults
    to :func:`watermark_source`: the time service where ``TIDEMARK_TIME_SERVICE``
    is set, else the ``marks`` table under ``delta_root`` (or ``$TIDEMARK_DELTA_ROOT``).
    A list of streams gives ``{stream: watermark}`` once every one has passed
    ``time_ms`` (:func:`tidemark.pipelines.reading.streams.wait_for_all`).
    """
    if not isinstance(stream, str):
        if where.get("source") is not None:
            raise ReaderConfigError("a wait on several streams takes no source")
        names, at = check_streams(stream), check_timestamp(time_ms, "time", parse=True)
        lake = _lake_of(where)

        def wait_one(one: str, left_ms: int) -> Watermark:
            return wait_for_time(one, at, left_ms, delta_root=lake, stop=stop)

        return wait_for_all(names, at, _check_timeout(timeout_ms), wait_one)
    target = check_timestamp(time_ms, "time", parse=True)
    timeout = _check_timeout(timeout_ms)
    source = where.get("source")
    feed = source or watermark_source(stream, target, lake=_lake_of(where))
    try:
        return _wait(stream, target, timeout, feed, stop or threading.Event())
    finally:
        if source is None and isinstance(feed, ServiceWatermarkSource):
            feed.close()


def _wait(
    stream: str, target: int, timeout: int, feed: WatermarkSource, halt: threading.Event
) -> Watermark:
    deadline = time.monotonic() + timeout / 1000
    last: Watermark | None = None
    while True:
        for watermark in feed.poll():
            last = watermark
            if watermark.time >= target:
                return watermark
        if halt.is_set():
            raise WaitCancelledError(f"wait for time {target} on {stream!r} cancelled")
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            raise StreamTimeTimeoutError(stream, target, last, feed.holding())
        feed.wait_for_change(remaining_ms, halt)


def _lake_of(where: WaitSource) -> Root:
    """The one location the wait's keywords name. With no storage options it is the root
    as given, resolved on first use (``$TIDEMARK_DELTA_ROOT`` when none): a wait the time
    service answers needs no root."""
    root, options = where.get("delta_root"), where.get("storage_options")
    return root if options is None else TableLocation.of(root, options)


async def wait_for_time_async(
    stream: str, time_ms: object, timeout_ms: int, **where: Unpack[WaitSource]
) -> Watermark:
    """:func:`wait_for_time` for asyncio: runs in a worker thread; cancelling the
    awaiting task stops the wait at its next wake-up (at most one backoff step)."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(
            lambda: wait_for_time(stream, time_ms, timeout_ms, stop=stop, **where)
        )
    finally:
        stop.set()


class LatestStreamTimes:
    """The latest watermark time of any stream, from the ``marks`` table (one open
    :class:`DeltaWatermarkSource` per stream asked about). It is what the timeline's
    consumer takes as ``stream_clock`` for event-time messages."""

    def __init__(self, lake: Root = None) -> None:
        self.location = TableLocation.of(lake)
        self._sources: dict[str, DeltaWatermarkSource] = {}
        self._times: dict[str, int] = {}
        self._lock = threading.Lock()

    def stream_time_ms(self, stream: str) -> int | None:
        with self._lock:
            source = self._sources.get(stream)
            if source is None:
                source = self._sources[stream] = DeltaWatermarkSource(self.location, stream)
            for watermark in source.poll():
                self._times[stream] = max(watermark.time, self._times.get(stream, watermark.time))
            return self._times.get(stream)


class StreamTimeTrigger:
    """Calls ``callback(watermark)`` once the stream passes the time (on its own thread),
    or ``on_error(error)`` on timeout or failure; :meth:`cancel` stops it."""

    def __init__(
        self,
        stream: str,
        time_ms: object,
        callback: Callable[[Watermark], None],
        *,
        timeout_ms: int,
        on_error: Callable[[Exception], None] | None = None,
        lake: Root = None,
        source: WatermarkSource | None = None,
    ) -> None:
        self.stream = stream
        self.time_ms = check_timestamp(time_ms, "time", parse=True)
        self.timeout_ms = _check_timeout(timeout_ms)
        self._callback = callback
        self._on_error = on_error
        self._source = source or watermark_source(stream, self.time_ms, lake=lake)
        self._stop = threading.Event()
        self.result: Watermark | None = None
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name=f"stream-time-{stream}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = wait_for_time(
                self.stream, self.time_ms, self.timeout_ms, source=self._source, stop=self._stop
            )
        except WaitCancelledError:
            return
        except Exception as exc:
            self.error = exc
            if self._on_error is not None:
                self._on_error(exc)
            else:
                log.warning("stream time trigger on %s: %s", self.stream, exc)
            return
        self._callback(self.result)

    def cancel(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the trigger to finish; True when it has."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


on_stream_time = StreamTimeTrigger
"""The callback form of :func:`wait_for_time`: ``on_stream_time(stream, t, callback,
timeout_ms=..., on_error=...)`` starts a :class:`StreamTimeTrigger`."""


__all__ = [
    "EXIT_NOT_YET",
    "DeltaWatermarkSource",
    "LatestStreamTimes",
    "ServiceWatermarkSource",
    "StreamTimeTrigger",
    "WaitSource",
    "WatermarkSource",
    "on_stream_time",
    "wait_for_time",
    "wait_for_time_async",
    "watermark_source",
]
