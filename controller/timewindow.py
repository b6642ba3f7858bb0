"""Where a reader's position lies relative to watermarks, and its time window.

    >>> from controller.model import KeyRange, Segment, Watermark
    >>> segments = {0: Segment(0, KeyRange(0.0, 1.0))}
    >>> compare({0: 7}, {0: 5}, segments), compare({0: 3}, {0: 5}, segments)
    (1, -1)
    >>> marks = [Watermark("s/t", 100, 130, {0: 5}, 0), Watermark("s/t", 200, 260, {0: 9}, 1)]
    >>> tracker = WindowTracker(marks, segments)
    >>> tracker.advance_to({0: 7})
    TimeWindow(lower=100, upper=260)

A position or stream cut maps segment id -> next offset; in a reader's
position, ``END_OF_SEGMENT`` (-1) means the sealed segment has been read to
its end. Only segments whose key ranges overlap are compared: a later
segment (created in a later epoch) is ahead of an earlier one whatever the
offsets, and within one segment the offsets decide.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from controller.exceptions import InvalidModelError
from controller.model import END_OF_SEGMENT, Position, Segment, StreamCut, TimeWindow, Watermark

__all__ = ["WindowTracker", "compare"]


def compare(position: Position, cut: StreamCut, segments: Mapping[int, Segment]) -> int:
    """-1: ``position`` is entirely before ``cut``; +1: it has reached or passed
    it everywhere, or shares no key range with it; 0: partly before, partly not.

    ``segments`` maps segment id -> :class:`Segment` (for key ranges); an id
    it lacks is an :class:`InvalidModelError`. An offset of -1 in the cut
    (a sealed segment's end) is reached only by -1 in the position.
    """
    cut_segments = [(_segment(segments, seg), offset) for seg, offset in cut.items()]
    before = reached = False
    for seg_id, offset in position.items():
        seg = _segment(segments, seg_id)
        for other, cut_offset in cut_segments:
            if not seg.overlaps(other):
                continue
            if _at_or_past(seg, offset, other, cut_offset):
                reached = True
            else:
                before = True
            if before and reached:
                return 0
    return -1 if before else 1


class WindowTracker:
    """A reader's time window, advanced incrementally along a stream's watermarks.

    ``watermarks`` (any iterable, in ``seq`` order) is read lazily: only as far
    as the first watermark entirely ahead of the position. An iterator that
    ran dry is asked again on the next :meth:`advance_to`, so a live source
    can keep feeding. ``segments`` (segment id -> :class:`Segment`) is looked
    up on every comparison, so the caller may add the segments of new epochs
    to it. Positions must only move forward; the passed watermarks are never
    looked at again.
    """

    def __init__(self, watermarks: Iterable[Watermark], segments: Mapping[int, Segment]) -> None:
        self._source = iter(watermarks)
        self._segments = segments
        self._lower: int | None = None
        self._ahead: deque[Watermark] = deque()
        """Watermarks read but not yet passed, in ``seq`` order."""

    def advance_to(self, position: Position) -> TimeWindow:
        """The window at ``position``: lower = ``time`` of the latest watermark it
        has passed (compare > 0), upper = ``upper_time`` of the first watermark
        entirely ahead of it (compare < 0); ``None`` when there is none (yet).
        An empty position has passed every watermark."""
        upper: int | None = None
        index = 0
        while True:
            if index == len(self._ahead):
                mark = next(self._source, None)
                if mark is None:
                    break
                self._ahead.append(mark)
            mark = self._ahead[index]
            order = compare(position, mark.stream_cut, self._segments)
            if order > 0 and index == 0:
                # Watermarks pass in seq order (their cuts never go backwards).
                self._lower = mark.time
                self._ahead.popleft()
                continue
            if order < 0:
                upper = mark.upper_time
                break
            index += 1
        return TimeWindow(self._lower, upper)


def _at_or_past(seg: Segment, offset: int, other: Segment, cut_offset: int) -> bool:
    if seg.id != other.id:
        return seg.id > other.id
    if offset == END_OF_SEGMENT:
        return True
    return cut_offset != END_OF_SEGMENT and offset >= cut_offset


def _segment(segments: Mapping[int, Segment], seg: int) -> Segment:
    try:
        return segments[seg]
    except KeyError:
        raise InvalidModelError(f"segment {seg} is not a known segment of the stream") from None
