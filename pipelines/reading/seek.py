"""Timestamp -> stream cut: where to start, and where to stop, reading a stream by time.

    cut = stream_cut_at("shop/orders", 1_700_000_000_000, delta_root="/data/delta", store=store)
    end = complete_cut_at("shop/orders", 1_700_000_600_000, delta_root="/data/delta")
    # end is None until a watermark has reached that time (the data is not complete)

Two questions, answered from the controller's ``index`` table (see
``tidemark.controller.index``):

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

How a lookup runs. The first ``warm_after`` lookups of a stream in a
:class:`SeekIndex` are *cold*: they read the table, not memory. The ``index``
table's files are visited by their Delta statistics of the searched column
(``upper_time_max`` to start, ``time`` to stop), then the row groups of a
file by their Parquet statistics, and the walk stops as soon as nothing left
can hold a better row; the cut is the found row's own ``stream_cut`` (read with it:
one table opened), or for a row written before ``index`` had that column, read
from the one ``marks`` row group whose statistics hold that ``seq`` and ``time``
(``marks`` opened after the index, so it holds the row). The maintenance
(``tidemark.controller.delta.maintenance``) keeps files few and compacts them in commit order
with small row groups, so a cold lookup reads a checkpoint, a short log
tail, and one or two row groups of ``index`` -- whatever the table's age and
the number of streams. A stream asked about again is loaded: its ``time`` and
``upper_time_max`` columns are kept in memory as sorted int64 arrays,
refreshed at most every ``refresh_interval_ms`` and only by the table
versions added since (:class:`~tidemark.controller.delta.tables.TableTail`),
and searched by ``tidemark.controller.index`` (binary search); cuts are cached.

Why one module: both questions (where to start, where to stop) are answered from
one :class:`SeekIndex` over the ``index`` table, warm or cold; the lookups and the
index they read change together.
"""

from __future__ import annotations

import logging
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict, Unpack, overload

from tidemark.controller.delta.location import TableLocation, shared
from tidemark.controller.delta.tables import (
    INDEX,
    INDEX_SEARCH_COLUMNS,
    MARKS,
    DataFile,
    DeltaSource,
    Root,
    TableTail,
    cut_from_cell,
    find_in_group,
    read_cell,
    read_cut_from,
)
from tidemark.controller.index import START, STOP, Rule
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import StreamCut
from tidemark.controller.navigation import (
    SegmentRange,
    at_or_after_head,
    ranges_between,
    start_or_head,
)
from tidemark.controller.states import StreamState
from tidemark.controller.store import MetadataStore
from tidemark.controller.timestamps import MAX_TIMESTAMP, wall_clock_ms
from tidemark.controller.timestamps import check_timestamp as check_time
from tidemark.controller.timestamps import parse_duration as parse_time_span
from tidemark.pipelines.reading.exceptions import (
    StreamDeletedError,
    WatermarksUnavailableError,
)
from tidemark.pipelines.reading.streams import all_complete, check_streams

log = logging.getLogger(__name__)

# --- checking input -----------------------------------------------------------------------------


def check_timestamp(value: object) -> int:
    """``value`` as milliseconds >= 0: an int, or a string of digits; else
    :class:`InvalidTimestampError` (``tidemark.controller.timestamps``, the one checker,
    in its lenient mode for user input)."""
    return check_time(value, parse=True)


def parse_duration(text: object) -> int:
    """``"1h30m"`` -> 5_400_000: one or more ``<number><unit>`` (ms, s, m, h, d), a unit
    required (``tidemark.controller.timestamps.parse_duration``, the one parser)."""
    return parse_time_span(text, bare_ms=False)


# --- the in-memory index ------------------------------------------------------------------------


@dataclass
class _StreamTimes:
    """One stream's index columns, in ``seq`` order."""

    tail: TableTail
    seqs: array[int]
    times: array[int]
    upper_time_max: array[int]
    checked_at: float = float("-inf")

    def values(self, rule: Rule) -> array[int]:
        """The column ``rule`` searches."""
        return self.upper_time_max if rule.column == "upper_time_max" else self.times


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
    the cuts kept in memory; a stream's first ``warm_after`` lookups are cold
    (statistics and row groups, always the table's latest version), the next
    one loads its columns (0: load at once, as :meth:`refresh` does).
    """

    def __init__(
        self,
        lake: Root,
        *,
        refresh_interval_ms: int = 100,
        cut_cache_size: int = 4096,
        warm_after: int = 2,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.location = TableLocation.of(lake)
        self.refresh_interval_s = refresh_interval_ms / 1000
        self._cut_cache_size = cut_cache_size
        self._monotonic = monotonic
        self._lock = threading.RLock()
        self._streams: dict[str, _StreamTimes] = {}
        self._cuts: OrderedDict[tuple[str, int], dict[int, int]] = OrderedDict()
        self._marks = DeltaSource(self.location.table(MARKS))
        self._index = DeltaSource(self.location.table(INDEX))
        self._warm_after = warm_after
        self._cold_lookups: dict[str, int] = {}

    # -- warm path ----------------------------------------------------------------------------

    def refresh(self, stream: str, *, force: bool = False) -> int:
        """Read the stream's new index rows if due (or ``force``); the row count after."""
        with self._lock:
            entry = self._streams.get(stream)
            if entry is None:
                # Every loaded stream follows the one ``index`` snapshot (self._index).
                tail = TableTail(
                    self._index.location, stream, INDEX_SEARCH_COLUMNS, source=self._index
                )
                entry = _StreamTimes(tail, array("q"), array("q"), array("q"))
                self._streams[stream] = entry
            now = self._monotonic()
            if force or now - entry.checked_at >= self.refresh_interval_s:
                entry.checked_at = now
                _append_rows(entry, entry.tail.poll())
            return len(entry.seqs)

    def _refresh_loaded(self, streams: Sequence[str]) -> None:
        """Refresh the loaded ones of ``streams`` that are due together: one read of the
        index table's log, then each stream's rows added since (if the version moved)."""
        now = self._monotonic()
        loaded = (self._streams.get(s) for s in streams)
        due = [e for e in loaded if e is not None and now - e.checked_at >= self.refresh_interval_s]
        if due:
            self._index.refresh()
            for entry in due:
                entry.checked_at = now
                _append_rows(entry, entry.tail.poll(refreshed=True))

    def start_cuts(self, streams: Sequence[str], t: int) -> dict[str, StreamCut | None]:
        """:meth:`start`'s cut for each of ``streams`` (``None``: the head), in one go:
        the loaded streams are refreshed together and searched under one lock; the
        others are asked one by one (cold lookups, or the lookup that loads them)."""
        return self._cuts_of(streams, START, t)

    def stop_cuts(self, streams: Sequence[str], t: int) -> dict[str, StreamCut | None]:
        """:meth:`stop`'s cut for each of ``streams`` (``None``: not complete yet), as
        :meth:`start_cuts` does it."""
        return self._cuts_of(streams, STOP, t)

    def _cuts_of(self, streams: Sequence[str], rule: Rule, t: int) -> dict[str, StreamCut | None]:
        found: dict[str, StreamCut | None] = {}
        with self._lock:
            self._refresh_loaded(streams)
            for stream in streams:
                entry = self._streams.get(stream)
                if entry is None:
                    continue
                at = rule.position(entry.values(rule), t)
                found[stream] = (
                    None if at is None else self.cut(stream, entry.seqs[at], entry.times[at])
                )
        rest = [s for s in streams if s not in found]  # not loaded: asked outside the lock
        found.update(self._one_by_one(rest, rule, t))
        return {s: found[s] for s in streams}

    def _one_by_one(
        self, streams: Sequence[str], rule: Rule, t: int
    ) -> dict[str, StreamCut | None]:
        """:meth:`start` (or :meth:`stop`) asked for each stream on its own."""
        found = {s: self.find(s, rule, t) for s in streams}
        return {s: None if f is None else f.stream_cut for s, f in found.items()}

    def columns(self, stream: str) -> tuple[array[int], array[int], array[int]]:
        """``(seqs, times, upper_time_max)`` of the stream, refreshed if due."""
        self.refresh(stream)
        entry = self._streams[stream]
        return entry.seqs, entry.times, entry.upper_time_max

    def start_position(self, stream: str, t: int) -> int | None:
        """Index (in the cached columns) of the latest row whose upper time max is < ``t``."""
        return self.position(stream, START, t)

    def stop_position(self, stream: str, t: int) -> int | None:
        """Index of the first row whose time is >= ``t``; ``None`` while there is none."""
        return self.position(stream, STOP, t)

    def position(self, stream: str, rule: Rule, t: int) -> int | None:
        """Index (in the cached columns, refreshed if due) of the row ``rule`` picks."""
        self.refresh(stream)
        return rule.position(self._streams[stream].values(rule), t)

    def start(self, stream: str, t: int) -> Found | None:
        """The watermark to start at for time ``t``; ``None``: the head of the stream."""
        return self.find(stream, START, t)

    def stop(self, stream: str, t: int) -> Found | None:
        """The watermark to stop at for time ``t``; ``None``: not complete yet."""
        return self.find(stream, STOP, t)

    def find(self, stream: str, rule: Rule, t: int) -> Found | None:
        """The watermark ``rule`` picks for time ``t``: from the table while the stream is
        cold (its statistics searched by the same rule), then from memory."""
        if self._cold(stream):
            return self._found_row(stream, self._cold_row(stream, rule, t))
        return self._found(stream, self.position(stream, rule, t))

    def warm(self, stream: str) -> bool:
        """True when the stream's index columns are in memory (lookups are searches)."""
        with self._lock:
            return stream in self._streams

    def _cold(self, stream: str) -> bool:
        """Answer from the table (statistics, a row group) until the stream was asked
        about ``warm_after`` times; then load its columns and search in memory."""
        with self._lock:
            if stream in self._streams:
                return False
            asked = self._cold_lookups.get(stream, 0) + 1
            if asked > self._warm_after:
                self._cold_lookups.pop(stream, None)
                return False
            self._cold_lookups[stream] = asked
            return True

    def _found(self, stream: str, index: int | None) -> Found | None:
        if index is None:
            return None
        entry = self._streams[stream]
        seq, at = entry.seqs[index], entry.times[index]
        return Found(seq, at, entry.upper_time_max[index], self.cut(stream, seq, at))

    def _found_row(self, stream: str, row: _Row | None) -> Found | None:
        if row is None:
            return None
        if row.stream_cut is None:  # a row written before index had the column
            cut = self.cut(stream, row.seq, row.time)
        else:
            cut = self._remember((stream, row.seq), row.stream_cut)
        return Found(row.seq, row.time, row.upper_time_max, cut)

    def _remember(self, key: tuple[str, int], cut: dict[int, int]) -> dict[int, int]:
        """Keep ``cut`` in the cache (the one already there, if any, is returned): one
        ``setdefault``, not a look-up then a store."""
        with self._lock:
            kept = self._cuts.setdefault(key, cut)
            self._cuts.move_to_end(key)
            if len(self._cuts) > self._cut_cache_size:
                self._cuts.popitem(last=False)
            return kept

    def cut(self, stream: str, seq: int, at: int | None = None) -> dict[int, int]:
        """The stream cut of watermark ``seq`` (from ``marks``; cached); ``at``, its
        time when known, narrows the files read."""
        key = (stream, seq)
        with self._lock:
            cached = self._cuts.get(key)
            if cached is not None:
                self._cuts.move_to_end(key)
                return cached
            # Refreshed after the index was read: a marks row is committed before its
            # index row, so this snapshot holds it.
            self._marks.refresh()
            found = read_cut_from(self._marks, stream, seq, at)
            if found is None:
                raise _missing_mark(stream, seq)
            return self._remember(key, found)

    # -- cold path ----------------------------------------------------------------------------

    def cold_start_seq(self, stream: str, t: int) -> int | None:
        """``seq`` of the start watermark for ``t``, reading only the files that can hold it."""
        row = self._cold_row(stream, START, t)
        return None if row is None else row.seq

    def cold_stop_seq(self, stream: str, t: int) -> int | None:
        """``seq`` of the stop watermark for ``t``, reading only files that can hold it."""
        row = self._cold_row(stream, STOP, t)
        return None if row is None else row.seq

    def _cold_row(self, stream: str, rule: Rule, t: int) -> _Row | None:
        """The row ``rule`` picks for ``t``: the latest (or first) row whose ``column``
        lies within the rule's bounds.

        ``column`` is monotonic in ``seq`` within the stream, so files are visited by
        their ``column`` statistics (compacted files are in commit order: their
        ranges are narrow whatever the number of streams), each read with the bound
        pushed down to its row groups, and the walk stops as soon as no file left
        can beat the best row found. To start: files whose minimum is below ``t``, by
        descending maximum; to stop: files whose maximum reaches ``t``, by ascending
        minimum.
        """
        column, latest = rule.column, rule.latest
        bounds = low, high = rule.bounds(t)

        def edge(f: DataFile) -> int:
            if latest:
                return _stat(f.maximum, column, MAX_TIMESTAMP)
            return _stat(f.minimum, column, 0)

        def order(f: DataFile) -> tuple[int, int]:
            """``edge``, then the unit most likely to hold the answer first."""
            if latest:
                return edge(f), _stat(f.maximum, "seq", MAX_TIMESTAMP)
            return edge(f), _stat(f.minimum, "seq", 0)

        with self._lock:
            files = self._index.latest_files()
        candidates = sorted(
            (
                f
                for f in files
                if f.may_hold("stream", stream, stream) and f.may_hold(column, low, high)
            ),
            key=order,
            reverse=latest,
        )
        best: _Row | None = None
        best_at: tuple[DataFile, int] | None = None
        """The row group holding ``best`` and its position there."""

        def beaten(unit: DataFile) -> bool:
            """No unit from here on (in ``edge`` order) can hold a better row."""
            if best is None:
                return False
            value = rule.value(best)
            return edge(unit) < value if latest else edge(unit) > value

        def behind(unit: DataFile) -> bool:
            """This unit's ``seq`` range cannot beat the best row."""
            if best is None:
                return False
            if latest:
                return _stat(unit.maximum, "seq", MAX_TIMESTAMP) <= best.seq
            return _stat(unit.minimum, "seq", 0) >= best.seq

        for f in candidates:
            if beaten(f):
                break
            if behind(f):
                continue
            groups = sorted(
                (
                    g
                    for g in f.row_groups(("stream", "seq", column))
                    if g.may_hold("stream", stream, stream) and g.may_hold(column, low, high)
                ),
                key=order,
                reverse=latest,
            )
            for g in groups:
                if beaten(g):
                    break
                if behind(g):
                    continue
                hit = find_in_group(
                    g, stream, INDEX_SEARCH_COLUMNS, {column: bounds}, latest=latest
                )
                if hit is not None:
                    row, position = hit
                    found = _Row(int(row["seq"]), int(row["time"]), int(row["upper_time_max"]))
                    if best is None or (found.seq > best.seq if latest else found.seq < best.seq):
                        best, best_at = found, (g, position)
        if best is None or best_at is None or not best_at[0].has_column("stream_cut"):
            return best  # (a file written before index had the column: marks has the cut)
        cell = read_cell(*best_at, "stream_cut")
        return best if cell is None else replace(best, stream_cut=cut_from_cell(cell))

    def cold_start_cut(self, stream: str, t: int) -> StreamCut | None:
        """:meth:`start` without the in-memory index: statistics, one row group, one cut."""
        found = self._found_row(stream, self._cold_row(stream, START, t))
        return None if found is None else found.stream_cut


@dataclass(frozen=True)
class _Row:
    seq: int
    time: int
    upper_time_max: int
    stream_cut: dict[int, int] | None = None
    """``None``: the row was written before ``index`` had the column (ask ``marks``)."""


def _stat(stats: Mapping[str, object], column: str, default: int) -> int:
    value = stats.get(column)
    return value if isinstance(value, int) else default


def _append_rows(entry: _StreamTimes, rows: Any) -> None:
    """Add a stream's new index rows (a pyarrow table, in ``seq`` order) to its columns."""
    if rows.num_rows:
        _extend(entry.seqs, rows.column("seq"))
        _extend(entry.times, rows.column("time"))
        _extend(entry.upper_time_max, rows.column("upper_time_max"))


def _extend(target: array[int], column: object) -> None:
    values = column.to_numpy()  # type: ignore[attr-defined]
    target.frombytes(values.astype("int64", copy=False).tobytes())


def _missing_mark(stream: str, seq: int) -> Exception:
    return WatermarksUnavailableError(
        f"stream {stream!r}: watermark {seq} is in the index table but not in marks"
    )


def shared_index(lake: Root = None) -> SeekIndex:
    """One :class:`SeekIndex` per delta root for the process (so lookups stay warm)."""
    location = TableLocation.of(lake)
    return shared("seek index", location, lambda: SeekIndex(location))


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
    (``tidemark.controller.index``'s rule), else the head, moved up to the stream's head."""
    found = index.start(stream, timestamp)
    return start_or_head(None if found is None else found.stream_cut, meta)


class Lookup(TypedDict, total=False):
    """Where :func:`stream_cut_at` and :func:`complete_cut_at` look (keywords, all optional):
    ``index`` (else the shared index of ``delta_root`` -- a root, or a
    :class:`~tidemark.controller.delta.location.TableLocation` -- with ``storage_options``) and
    ``store`` (then the stream must exist, and its head bounds the answer)."""

    delta_root: Root
    store: MetadataStore | None
    index: SeekIndex | None
    storage_options: Mapping[str, str] | None


def _shared_index_of(where: Lookup) -> SeekIndex:
    """The shared index of the one location the lookup's keywords name."""
    return shared_index(TableLocation.of(where.get("delta_root"), where.get("storage_options")))


def _lookup(
    stream: str, timestamp: object, where: Lookup
) -> tuple[int, StreamMetadata | None, SeekIndex]:
    """What :func:`stream_cut_at` and :func:`complete_cut_at` check and open alike: the
    timestamp, the stream (it must exist when a ``store`` is given) and the index."""
    ts = check_timestamp(timestamp)
    store = where.get("store")
    meta = None if store is None else live_metadata(store, stream)
    index = where.get("index") or _shared_index_of(where)
    return ts, meta, index


@overload
def stream_cut_at(  # type: ignore[overload-overlap]  # (a str is a Sequence[str])
    stream: str, timestamp: object, **where: Unpack[Lookup]
) -> dict[int, int]: ...


@overload
def stream_cut_at(
    stream: Sequence[str], timestamp: object, **where: Unpack[Lookup]
) -> dict[str, dict[int, int]]: ...


def stream_cut_at(
    stream: str | Sequence[str], timestamp: object, **where: Unpack[Lookup]
) -> dict[int, int] | dict[str, dict[int, int]]:
    """Where to start reading ``stream`` so that no event with time >= ``timestamp`` is skipped.

    With a ``store`` the stream is checked to exist and the head is the
    stream's head cut (its truncation point, else epoch 0 at offset 0), and
    a cut behind the truncation point is moved up to it; without one, an
    empty cut stands for "the head". A list of streams gives ``{stream: cut}``,
    each stream's own cut, looked up together (:meth:`SeekIndex.start_cuts`).
    """
    if not isinstance(stream, str):
        ts, names, metas, idx = _joint(stream, timestamp, where)
        cuts = idx.start_cuts(names, ts)
        if metas is None:
            return {s: dict(cuts[s] or {}) for s in names}
        return {s: start_or_head(cuts[s], metas[s]) for s in names}
    ts, meta, idx = _lookup(stream, timestamp, where)
    if meta is not None:
        return start_cut_for(stream, ts, meta, idx)
    found = idx.start(stream, ts)
    return {} if found is None else dict(found.stream_cut)


@overload
def complete_cut_at(  # type: ignore[overload-overlap]  # (a str is a Sequence[str])
    stream: str, timestamp: object, **where: Unpack[Lookup]
) -> dict[int, int] | None: ...


@overload
def complete_cut_at(
    stream: Sequence[str], timestamp: object, **where: Unpack[Lookup]
) -> dict[str, dict[int, int]] | None: ...


def complete_cut_at(
    stream: str | Sequence[str], timestamp: object, **where: Unpack[Lookup]
) -> dict[int, int] | dict[str, dict[int, int]] | None:
    """Where to stop reading ``stream`` to have every event with time <= ``timestamp``.

    ``None`` while no watermark has reached ``timestamp`` (the data is not complete).
    A list of streams gives ``{stream: cut}`` once every one is complete
    (:func:`tidemark.pipelines.reading.streams.all_complete`).
    """
    if not isinstance(stream, str):
        ts, names, _, idx = _joint(stream, timestamp, where)
        cuts = idx.stop_cuts(names, ts)
        return all_complete(names, lambda s: None if (cut := cuts[s]) is None else dict(cut))
    ts, _, idx = _lookup(stream, timestamp, where)
    found = idx.stop(stream, ts)
    return None if found is None else dict(found.stream_cut)


def _joint(
    streams: object, timestamp: object, where: Lookup
) -> tuple[int, list[str], dict[str, StreamMetadata] | None, SeekIndex]:
    """What a joint lookup checks and opens once for all its streams: the time, the
    names, each stream's metadata (with a ``store``: every stream must exist) and the
    index (its :meth:`SeekIndex.start_cuts` / :meth:`~SeekIndex.stop_cuts` answer all)."""
    ts = check_timestamp(timestamp)
    names = check_streams(streams)
    store = where.get("store")
    metas = None if store is None else {s: live_metadata(store, s) for s in names}
    index = where.get("index") or _shared_index_of(where)
    return ts, names, metas, index


__all__ = [
    "Found",
    "Lookup",
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
