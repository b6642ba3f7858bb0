"""Time windows for readers: a live feed of watermarks and the position to compare.

    feed = WatermarkFeed(lake, "shop/orders")
    tracker = WindowTracker(feed.iterator(), segments)
    tracker.advance_to(reader_position(owned, finished, segments))   # TimeWindow(lower, upper)

:class:`WatermarkFeed` reads a stream's watermarks from the ``marks`` Delta table
with deltalake, incrementally by table version (no Spark), and keeps them in
memory in ``seq`` order. Its iterators can be asked again after they ran
dry, which is what ``WindowTracker`` needs to keep up with a live stream.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Set

from tidemark.controller.delta.tables import (
    MarksTail,
    Root,
    TableLocation,
    read_watermarks,
)
from tidemark.controller.model import (
    END_OF_SEGMENT,
    Position,
    Segment,
    StreamCut,
    TimeWindow,
    Watermark,
)
from tidemark.controller.timewindow import WindowTracker

log = logging.getLogger(__name__)


class WatermarkFeed:
    """A stream's watermarks from ``marks``, in ``seq`` order, refreshed when asked.

    ``refresh_interval_ms`` bounds how often the table's version is looked
    at (0: on every refresh). Thread-safe.
    """

    def __init__(
        self,
        lake: Root,
        stream: str,
        *,
        refresh_interval_ms: int = 100,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self._location = TableLocation.of(lake)
        self._tail = MarksTail(self._location, stream)
        self._interval_s = refresh_interval_ms / 1000
        self._monotonic = monotonic
        self._checked_at = float("-inf")
        self._lock = threading.Lock()
        self.watermarks: list[Watermark] = []

    def refresh(self, *, force: bool = False) -> int:
        """Append the watermarks committed since the last refresh (if due); the count after."""
        with self._lock:
            now = self._monotonic()
            if force or now - self._checked_at >= self._interval_s:
                self._checked_at = now
                self.watermarks.extend(self._tail.poll())
            return len(self.watermarks)

    def iterator(self, start: int = 0) -> FeedIterator:
        return FeedIterator(self, start)

    def since(self, time_ms: int) -> list[Watermark]:
        """Watermarks whose time is >= ``time_ms`` (after a refresh). A feed not loaded
        yet reads only those (``read_watermarks(since=...)``) and stays unloaded."""
        with self._lock:
            loaded = bool(self.watermarks) or self._tail.last_seq >= 0
        if not loaded:
            return read_watermarks(self._location, self.stream, since=time_ms)
        self.refresh(force=True)
        return [w for w in self.watermarks if w.time >= time_ms]


class FeedIterator(Iterator[Watermark]):
    """Iterates a feed's watermarks; when it runs dry it refreshes the feed (if due)
    and stops, and may be asked again later."""

    def __init__(self, feed: WatermarkFeed, start: int = 0) -> None:
        self._feed = feed
        self._next = start

    def __iter__(self) -> FeedIterator:
        return self

    def __next__(self) -> Watermark:
        watermarks = self._feed.watermarks
        if self._next >= len(watermarks):
            self._feed.refresh()
            watermarks = self._feed.watermarks
            if self._next >= len(watermarks):
                raise StopIteration
        watermark = watermarks[self._next]
        self._next += 1
        return watermark


def reader_position(
    offsets: Mapping[int, int], finished: Set[int], segments: Mapping[int, Segment]
) -> dict[int, int]:
    """A reader's position for window comparison: its segments' next offsets, plus
    ``END_OF_SEGMENT`` for each finished segment no later segment of the
    position (or finished) overlaps -- so a finished predecessor still counts
    as "read to its end" until a successor takes over its keys.
    """
    position = dict(offsets)
    known = set(offsets) | set(finished)
    for seg_id in finished:
        seg = segments[seg_id]
        if not any(other > seg_id and segments[other].overlaps(seg) for other in known):
            position[seg_id] = END_OF_SEGMENT
    return position


class PositionWindow:
    """Time windows along one moving position, rebuilt when the position jumps back.

    After each full resolution (``WindowTracker``) it keeps, per segment of the
    position, the range of offsets within which the answer cannot change: from
    the position up to the nearest offset of the bounding watermarks' cuts above
    it (the next watermark to pass and the first one wholly ahead), or just the
    position itself when it sits at such a cut offset (an equal offset is neither
    before nor after on that segment, one more is after:
    ``tidemark.controller.timewindow.compare``). While every segment's offset stays in its
    range the last window is returned as is: one chained comparison per event
    when the position holds one segment and a watermark is wholly ahead.

    Past that range, a one-segment position steps along the feed's list instead
    of resolving while the cuts it passes are *plain* for its segment (they name
    it and no other segment of theirs overlaps it): there an offset at or past
    the cut's has passed the watermark and a smaller one is before it, so the
    step is the plain offset comparison. Anything else resolves.
    """

    __slots__ = (
        "_feed",
        "_head",
        "_high",
        "_known",
        "_last",
        "_low",
        "_plain_keys",
        "_ranges",
        "_seg",
        "_segments",
        "_settled",
        "_start",
        "_start_lower",
        "_stepped",
        "_tracker",
        "_window",
    )

    def __init__(self, feed: WatermarkFeed, segments: Callable[[], Mapping[int, Segment]]) -> None:
        self._feed = feed
        self._segments = segments
        self._window = TimeWindow(None, None)
        self._tracker: WindowTracker | None = None
        self._start = 0
        """Where a new tracker starts in the feed; _start_lower: the time passed before."""
        self._start_lower: int | None = None
        self._last: Position | None = None
        self._ranges: dict[int, range] | None = None
        self._settled = False
        """True when new watermarks cannot change the window (one is wholly ahead)."""
        self._known = 0
        self._seg = -1
        """The one segment of the fast path; _low <= its offset < _high: the window holds."""
        self._low = self._high = 0
        self._head = -1
        """Index in the feed of the next watermark to pass when its cut is plain (-1: no step)."""
        self._plain_keys: frozenset[int] = frozenset()
        """The segments of the last cut of several found plain for ``_seg``."""
        self._stepped = False
        """True after a step: the tracker, ranges and start are stale (:meth:`_leave_steps`)."""

    def reset(self) -> None:
        """Forget the progress (after the position moved backwards or lost segments)."""
        self._tracker = None
        self._start, self._start_lower = 0, None
        self._last = None
        self._ranges = None
        self._low = self._high = 0
        self._head = -1
        self._stepped = False

    def at(self, position: Position) -> TimeWindow:
        if len(position) == 1:
            try:
                if self._low <= position[self._seg] < self._high:
                    return self._window
            except KeyError:
                pass
        return self._checked(position)

    def _checked(self, position: Position) -> TimeWindow:
        """The window when :meth:`at`'s shortest path does not apply."""
        if self._head >= 0 and len(position) == 1:
            offset = position.get(self._seg, -1)
            if offset >= self._high:
                window = self._step(offset)
                if window is not None:
                    return window
        if self._stepped:
            self._leave_steps()
        if self._within(position) and (self._settled or self._feed.refresh() == self._known):
            return self._window
        return self._resolve(position)

    def _step(self, offset: int) -> TimeWindow | None:
        """Past the range on the fast path's segment: pass the watermarks whose plain cuts
        are at or below ``offset``; the window when a plain one is then ahead, else None
        (the progress kept for :meth:`_resolve`).

        Only the fast path's state moves here (window, range, head); what a resolution
        needs of the steps is derived from it when the steps end (:meth:`_leave_steps`).
        """
        marks = self._feed.watermarks
        seg, head = self._seg, self._head
        index = head
        count = len(marks)
        while index < count:
            mark = marks[index]
            cut = mark.stream_cut
            cut_offset = cut.get(seg, -1) if len(cut) == 1 else self._plain_offset(cut)
            if cut_offset > offset:  # the first plain cut ahead: the window until it
                lower = marks[index - 1].time if index > head else self._window.lower
                window = self._window = TimeWindow(lower, mark.upper_time)
                self._low, self._high, self._head = offset, cut_offset, index
                self._stepped = True
                return window
            if cut_offset < 0:
                break
            index += 1
        self._start = index
        self._start_lower = marks[index - 1].time if index > head else self._window.lower
        self._last = {seg: offset}
        self._tracker = None  # behind now: _resolve starts a new one where the steps end
        self._ranges = None
        self._stepped = False
        self._low = self._high = 0
        self._head = -1
        return None

    def _leave_steps(self) -> None:
        """Turn the steps' progress into where :meth:`_resolve` starts: at the head, the
        window's lower bound passed, from the last position stepped to."""
        self._start, self._start_lower = self._head, self._window.lower
        self._last = {self._seg: self._low}
        self._tracker = None
        self._ranges = None  # (only the one range of the fast path was kept)
        self._stepped = False

    def _plain_offset(self, cut: StreamCut) -> int:
        """The cut's offset on ``_seg`` when no other segment of the cut overlaps it (then
        ``compare`` orders a one-segment position by that offset alone), else -1."""
        seg = self._seg
        offset = cut.get(seg, -1)
        if offset >= 0 and len(cut) > 1 and cut.keys() != self._plain_keys:
            segments = self._segments()
            mine = segments.get(seg)
            if mine is None:
                return -1
            for other_id in cut:
                if other_id != seg:
                    other = segments.get(other_id)
                    if other is None or other.overlaps(mine):
                        return -1
            self._plain_keys = frozenset(cut)
        return offset

    def _within(self, position: Position) -> bool:
        """True when every offset of ``position`` lies in its segment's stable range."""
        ranges = self._ranges
        if ranges is None or len(position) != len(ranges):
            return False
        for seg, offset in position.items():
            stable = ranges.get(seg)
            if stable is None or offset not in stable:
                return False
        return True

    def _resolve(self, position: Position) -> TimeWindow:
        tracker = self._tracker
        forward = _forward(self._last, position)
        if tracker is None or not forward:
            if not forward:
                self._start, self._start_lower = 0, None
            tracker = WindowTracker(
                self._feed.iterator(self._start),
                _LiveSegments(self._segments),
                lower=self._start_lower,
            )
            self._tracker = tracker
        self._last = dict(position)
        window = tracker.advance_to(position)
        self._window = window
        self._known = len(self._feed.watermarks)
        ranges = _stable_ranges(position, window, tracker)
        self._ranges = ranges
        self._settled = tracker.first_ahead is not None
        self._low = self._high = 0
        self._head = -1
        if ranges is not None and len(ranges) == 1 and self._settled:
            ((seg, stable),) = ranges.items()
            if seg != self._seg:
                self._seg, self._plain_keys = seg, frozenset()
            self._low, self._high = stable.start, stable.stop
            head = tracker.first_ahead  # when the next to pass too, a step may pass it
            if (
                head is not None
                and head is tracker.next_to_pass
                and self._plain_offset(head.stream_cut) >= 0
            ):
                self._head = self._start + tracker.passed
        return window


def _stable_ranges(
    position: Position, window: TimeWindow, tracker: WindowTracker
) -> dict[int, range] | None:
    """Per segment, range(offset, nearest bounding cut offset) -- or None (no fast path)."""
    if window.upper is not None and tracker.first_ahead is None:
        return None  # the upper bound is a partly passed watermark's: resolve every time
    bounding = [tracker.next_to_pass, tracker.first_ahead]
    cuts = [w.stream_cut for w in bounding if w is not None]
    ranges: dict[int, range] = {}
    for seg, offset in position.items():
        if offset < 0:
            return None  # read to its end: rare, resolved every time
        high = _NO_LIMIT
        for cut in cuts:
            cut_offset = cut.get(seg)
            if cut_offset is not None:
                if cut_offset < 0:
                    return None
                if cut_offset > offset:
                    high = min(high, cut_offset)
                elif cut_offset == offset:
                    # At the cut's offset the segment is neither before nor
                    # after it (Pravega's rule); one further, it is after.
                    high = min(high, offset + 1)
        ranges[seg] = range(offset, high)
    return ranges


_NO_LIMIT = 2**63


def _forward(before: Position | None, after: Position) -> bool:
    """True when ``after`` names the same segments at offsets no smaller (cheap check)."""
    if before is None or before.keys() != after.keys():
        return False
    for seg, off in after.items():
        prev = before[seg]
        if off != END_OF_SEGMENT and (prev == END_OF_SEGMENT or off < prev):
            return False
    return True


class _LiveSegments(Mapping[int, Segment]):
    """The stream's segments as the metadata has them now (new epochs included)."""

    def __init__(self, source: Callable[[], Mapping[int, Segment]]) -> None:
        self._source = source

    def __getitem__(self, key: int) -> Segment:
        return self._source()[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self._source())

    def __len__(self) -> int:
        return len(self._source())


def window_at(
    feed: WatermarkFeed, position: Position, segments: Mapping[int, Segment]
) -> TimeWindow:
    """The window at ``position`` computed from scratch (for a group's committed cut)."""
    feed.refresh()
    return WindowTracker(feed.iterator(), segments).advance_to(position)


__all__ = [
    "FeedIterator",
    "PositionWindow",
    "WatermarkFeed",
    "reader_position",
    "window_at",
]
