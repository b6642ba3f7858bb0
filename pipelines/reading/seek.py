"""Timestamp -> stream cut: where to start, and where to stop, reading a stream by time.

    cut = stream_cut_at("shop/orders", 1_700_000_000_000, delta_root="/data/delta", store=store)
    end = complete_cut_at("shop/orders", 1_700_000_600_000, delta_root="/data/delta")
    # end is None until a watermark has reached that time (the data is not complete)

Two questions, answered from the controller's ``index`` table (see
``controller.index``):

- :func:`stream_cut_at` -- where to **start** so that no event with time >= t
  is skipped: the cut of the latest watermark whose running-max upper time
  is below ``t``; the head of the stream when there is none.
- :func:`complete_cut_at` -- where to **stop** so that every event with time
  <= t is included: the cut of the first watermark whose time is >= ``t``;
  ``None`` while there is none yet.

Both hold when each writer's event times and noted times do not go
backwards ("if the writer's time is well behaved"). A writer whose events
run *ahead* of the time it notes is fine: the upper time of a watermark is
the largest time any writer has noted, and the start question uses the
running maximum of it.

How a lookup runs: a :class:`SeekIndex` keeps each stream's ``time`` and
``upper_time_max`` columns in memory as sorted int64 arrays, refreshed at
most every ``refresh_interval_ms`` and only by the table versions added
since (:class:`~pipelines.reading.watermark_tables.TableTail`: Delta file statistics
pick the new files that may hold newer rows of the stream). The search is
``controller.index.find`` (binary search); the cut of the watermark found
comes from the ``marks`` table (statistics on ``seq`` pick one file) and is
cached. :meth:`SeekIndex.cold_start_seq` answers without the cache: it
reads only the files whose statistics can hold the answer.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow.compute as pc

from controller.index import start_index, stop_index
from controller.metadata import StreamMetadata
from controller.model import StreamCut
from controller.navigation import SegmentRange, at_or_after_head, ranges_between, start_or_head
from controller.states import StreamState
from controller.store import MetadataStore
from controller.timestamps import MAX_TIMESTAMP, wall_clock_ms
from controller.timestamps import check_timestamp as check_time
from pipelines.reading.exceptions import (
    InvalidDurationError,
    StreamDeletedError,
)
from pipelines.reading.watermark_tables import (
    INDEX,
    INDEX_COLUMNS,
    MARKS,
    DataFile,
    DeltaSource,
    TableTail,
    read_cut_from,
    read_files,
    resolve_delta_root,
    table_path,
)

log = logging.getLogger(__name__)

# --- checking input -----------------------------------------------------------------------------


def check_timestamp(value: object) -> int:
    """``value`` as milliseconds >= 0: an int, or a string of digits; else
    :class:`InvalidTimestampError` (``controller.timestamps``, the one checker,
    in its lenient mode for user input)."""
    return check_time(value, parse=True)


_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")


def parse_duration(text: object) -> int:
    """``"1h30m"`` -> 5_400_000: one or more ``<number><unit>`` (ms, s, m, h, d)."""
    if not isinstance(text, str):
        raise InvalidDurationError(text)
    compact = text.strip().lower()
    if not compact or _DURATION.sub("", compact):
        raise InvalidDurationError(text)
    return sum(int(n) * _UNITS_MS[unit] for n, unit in _DURATION.findall(compact))


# --- the in-memory index ------------------------------------------------------------------------


@dataclass
class _StreamTimes:
    """One stream's index columns, in ``seq`` order."""

    tail: TableTail
    seqs: array[int]
    times: array[int]
    upper_time_max: array[int]
    checked_at: float = float("-inf")


@dataclass(frozen=True)
class Found:
    """The watermark a lookup found: its ``seq`` and cut (``None``: none found)."""

    seq: int
    time: int
    upper_time_max: int
    stream_cut: StreamCut


class SeekIndex:
    """Timestamp -> watermark lookups over the ``index`` table, cached per stream.

    Thread-safe. ``refresh_interval_ms`` bounds how stale a lookup may be (0:
    look at the table's version on every lookup); ``cut_cache_size`` bounds
    the cuts kept in memory.
    """

    def __init__(
        self,
        delta_root: str,
        *,
        storage_options: Mapping[str, str] | None = None,
        refresh_interval_ms: int = 100,
        cut_cache_size: int = 4096,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.delta_root = resolve_delta_root(delta_root)
        self.storage_options = dict(storage_options or {})
        self.refresh_interval_s = refresh_interval_ms / 1000
        self._cut_cache_size = cut_cache_size
        self._monotonic = monotonic
        self._lock = threading.RLock()
        self._streams: dict[str, _StreamTimes] = {}
        self._cuts: OrderedDict[tuple[str, int], dict[int, int]] = OrderedDict()
        self._marks = DeltaSource(table_path(self.delta_root, MARKS), self.storage_options)

    # -- warm path ----------------------------------------------------------------------------

    def refresh(self, stream: str, *, force: bool = False) -> int:
        """Read the stream's new index rows if due (or ``force``); the row count after."""
        with self._lock:
            entry = self._streams.get(stream)
            if entry is None:
                tail = TableTail(
                    table_path(self.delta_root, INDEX), stream, INDEX_COLUMNS, self.storage_options
                )
                entry = _StreamTimes(tail, array("q"), array("q"), array("q"))
                self._streams[stream] = entry
            now = self._monotonic()
            if force or now - entry.checked_at >= self.refresh_interval_s:
                entry.checked_at = now
                rows = entry.tail.poll()
                if rows.num_rows:
                    _extend(entry.seqs, rows.column("seq"))
                    _extend(entry.times, rows.column("time"))
                    _extend(entry.upper_time_max, rows.column("upper_time_max"))
            return len(entry.seqs)

    def columns(self, stream: str) -> tuple[array[int], array[int], array[int]]:
        """``(seqs, times, upper_time_max)`` of the stream, refreshed if due."""
        self.refresh(stream)
        entry = self._streams[stream]
        return entry.seqs, entry.times, entry.upper_time_max

    def start_position(self, stream: str, t: int) -> int | None:
        """Index (in the cached columns) of the latest row whose upper time max is < ``t``."""
        _, _, upper = self.columns(stream)
        return start_index(upper, t)

    def stop_position(self, stream: str, t: int) -> int | None:
        """Index of the first row whose time is >= ``t``; ``None`` while there is none."""
        _, times, _ = self.columns(stream)
        return stop_index(times, t)

    def start(self, stream: str, t: int) -> Found | None:
        """The watermark to start at for time ``t``; ``None``: the head of the stream."""
        return self._found(stream, self.start_position(stream, t))

    def stop(self, stream: str, t: int) -> Found | None:
        """The watermark to stop at for time ``t``; ``None``: not complete yet."""
        return self._found(stream, self.stop_position(stream, t))

    def _found(self, stream: str, index: int | None) -> Found | None:
        if index is None:
            return None
        entry = self._streams[stream]
        seq = entry.seqs[index]
        return Found(seq, entry.times[index], entry.upper_time_max[index], self.cut(stream, seq))

    def cut(self, stream: str, seq: int) -> dict[int, int]:
        """The stream cut of watermark ``seq`` (from ``marks``; cached)."""
        key = (stream, seq)
        with self._lock:
            cached = self._cuts.get(key)
            if cached is not None:
                self._cuts.move_to_end(key)
                return cached
            self._marks.refresh()
            found = read_cut_from(self._marks, stream, seq)
            if found is None:
                raise _missing_mark(stream, seq)
            self._cuts[key] = found
            if len(self._cuts) > self._cut_cache_size:
                self._cuts.popitem(last=False)
            return found

    # -- cold path ----------------------------------------------------------------------------

    def cold_start_seq(self, stream: str, t: int) -> int | None:
        """``seq`` of the start watermark for ``t``, reading only the files that can hold it.

        Candidates are the files whose minimum ``upper_time_max`` is below
        ``t``; taken by descending maximum ``seq``, a file is read only while
        it could still hold a later answer than the best found.
        """
        return self._cold_seq(stream, "upper_time_max", (None, t - 1), latest=True)

    def cold_stop_seq(self, stream: str, t: int) -> int | None:
        """``seq`` of the stop watermark for ``t``, reading only files that can hold it
        (the first ``seq`` whose ``time`` is >= ``t``; files by ascending minimum ``seq``)."""
        return self._cold_seq(stream, "time", (t, None), latest=False)

    def _cold_seq(
        self, stream: str, column: str, bounds: tuple[int | None, int | None], *, latest: bool
    ) -> int | None:
        """The latest (or first) ``seq`` whose ``column`` lies within ``bounds``, reading
        files in ``seq`` order only while one could still improve on the best found."""
        low, high = bounds

        def edge(f: DataFile) -> int:
            return _stat(f.maximum, "seq", MAX_TIMESTAMP) if latest else _stat(f.minimum, "seq", 0)

        candidates = sorted(
            (f for f in self._index_files(stream) if f.may_hold(column, low, high)),
            key=edge,
            reverse=latest,
        )
        best: int | None = None
        for f in candidates:
            if best is not None and (edge(f) <= best if latest else edge(f) >= best):
                break
            rows = read_files([f], ("stream", "seq", column), stream)
            values = rows.column(column)
            if low is not None:
                rows = rows.filter(pc.greater_equal(values, low))
                values = rows.column(column)
            if high is not None:
                rows = rows.filter(pc.less_equal(values, high))
            if rows.num_rows:
                seqs = rows.column("seq")
                found = int((pc.max(seqs) if latest else pc.min(seqs)).as_py())
                best = found if best is None else (max if latest else min)(best, found)
        return best

    def cold_start_cut(self, stream: str, t: int) -> StreamCut | None:
        """:meth:`start` without the in-memory index: a fresh table open, statistics, one file."""
        seq = self.cold_start_seq(stream, t)
        if seq is None:
            return None
        source = DeltaSource(table_path(self.delta_root, MARKS), self.storage_options)
        source.refresh()
        found = read_cut_from(source, stream, seq)
        if found is None:
            raise _missing_mark(stream, seq)
        return found

    def _index_files(self, stream: str) -> list[DataFile]:
        source = DeltaSource(table_path(self.delta_root, INDEX), self.storage_options)
        source.refresh()
        return [f for f in source.files() if f.may_hold("stream", stream, stream)]


def _stat(stats: Mapping[str, object], column: str, default: int) -> int:
    value = stats.get(column)
    return value if isinstance(value, int) else default


def _extend(target: array[int], column: object) -> None:
    values = column.to_numpy()  # type: ignore[attr-defined]
    target.frombytes(values.astype("int64", copy=False).tobytes())


def _missing_mark(stream: str, seq: int) -> Exception:
    from pipelines.reading.exceptions import WatermarksUnavailableError

    return WatermarksUnavailableError(
        f"stream {stream!r}: watermark {seq} is in the index table but not in marks"
    )


_SHARED: dict[tuple[str, tuple[tuple[str, str], ...]], SeekIndex] = {}
_SHARED_LOCK = threading.Lock()


def shared_index(
    delta_root: str | None = None, storage_options: Mapping[str, str] | None = None
) -> SeekIndex:
    """One :class:`SeekIndex` per delta root for the process (so lookups stay warm)."""
    root = resolve_delta_root(delta_root)
    key = (root, tuple(sorted((storage_options or {}).items())))
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            found = _SHARED[key] = SeekIndex(root, storage_options=storage_options)
        return found


# --- the public lookups -------------------------------------------------------------------------


def live_metadata(store: MetadataStore, stream: str, group: str | None = None) -> StreamMetadata:
    """The stream's metadata; :class:`StreamDeletedError` when it is being deleted."""
    meta = store.get_stream(stream)
    if meta.state is StreamState.DELETING:
        raise StreamDeletedError(stream, group)
    return meta


def start_cut_for(
    stream: str, timestamp: int, meta: StreamMetadata, index: SeekIndex
) -> dict[int, int]:
    """The one path from a time to where reading starts: ``index``'s start watermark
    (``controller.index``'s rule), else the head, moved up to the stream's head."""
    found = index.start(stream, timestamp)
    return start_or_head(None if found is None else found.stream_cut, meta)


def stream_cut_at(
    stream: str,
    timestamp: object,
    *,
    delta_root: str | None = None,
    store: MetadataStore | None = None,
    index: SeekIndex | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> dict[int, int]:
    """Where to start reading ``stream`` so that no event with time >= ``timestamp`` is skipped.

    With a ``store`` the stream is checked to exist and the head is the
    stream's head cut (its truncation point, else epoch 0 at offset 0), and
    a cut behind the truncation point is moved up to it; without one, an
    empty cut stands for "the head".
    """
    ts = check_timestamp(timestamp)
    idx = index or shared_index(delta_root, storage_options)
    if store is not None:
        return start_cut_for(stream, ts, live_metadata(store, stream), idx)
    found = idx.start(stream, ts)
    return {} if found is None else dict(found.stream_cut)


def complete_cut_at(
    stream: str,
    timestamp: object,
    *,
    delta_root: str | None = None,
    store: MetadataStore | None = None,
    index: SeekIndex | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> dict[int, int] | None:
    """Where to stop reading ``stream`` to have every event with time <= ``timestamp``.

    ``None`` while no watermark has reached ``timestamp`` (the data is not complete).
    """
    ts = check_timestamp(timestamp)
    if store is not None:
        live_metadata(store, stream)
    idx = index or shared_index(delta_root, storage_options)
    found = idx.stop(stream, ts)
    return None if found is None else dict(found.stream_cut)


__all__ = [
    "Found",
    "SeekIndex",
    "SegmentRange",
    "at_or_after_head",
    "check_timestamp",
    "complete_cut_at",
    "live_metadata",
    "parse_duration",
    "ranges_between",
    "shared_index",
    "start_cut_for",
    "stream_cut_at",
    "wall_clock_ms",
]
