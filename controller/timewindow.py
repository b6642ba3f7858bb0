"""Where a reader's position lies relative to watermarks, and its time window.

    >>> from tidemark.controller.model import KeyRange, Segment, Watermark
    >>> segments = {0: Segment(0, KeyRange(0.0, 1.0))}
    >>> compare({0: 7}, {0: 5}, segments), compare({0: 3}, {0: 5}, segments)
    (1, -1)
    >>> compare({0: 5}, {0: 5}, segments)     # exactly at the cut: time advances
    1
    >>> marks = [Watermark("s/t", 100, 130, {0: 5}, 0), Watermark("s/t", 200, 260, {0: 9}, 1)]
    >>> tracker = WindowTracker(marks, segments)
    >>> tracker.advance_to({0: 3})
    TimeWindow(lower=None, upper=130)
    >>> tracker.advance_to({0: 5})
    TimeWindow(lower=100, upper=260)

A position or stream cut maps segment id -> next offset; in a reader's
position, ``END_OF_SEGMENT`` (-1) means the sealed segment has been read to
its end. Only segments whose key ranges overlap are compared: a later
segment (created in a later epoch) is ahead of an earlier one whatever the
offsets, and within one segment the offsets decide: an equal offset is
neither before nor after there, and a reader that is exactly at a cut (before
nowhere, after nowhere) has passed it -- "if the reader is exactly at a mark,
time should advance", as Pravega's ``WatermarkReaderImpl.compare`` says.
(The fast path in ``tidemark.pipelines.reading.windows.PositionWindow`` relies on the
same three-way order of offsets; a property test checks the two agree.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from tidemark.controller.exceptions import InvalidModelError
from tidemark.controller.model import (
    END_OF_SEGMENT,
    Position,
    Segment,
    StreamCut,
    TimeWindow,
    Watermark,
)

__all__ = ["WindowTracker", "compare"]


def compare(position: Position, cut: StreamCut, segments: Mapping[int, Segment]) -> int:
    """Pravega's rule (``WatermarkReaderImpl.compare``), segment by segment of ``cut``:

    - the position holds the cut's segment: a smaller offset is *before*, a
      larger one *after*, an **equal offset is neither**;
    - it does not: each overlapping segment it holds is *before* when older
      (smaller id: an earlier epoch), *after* when newer.

    0: before somewhere and after somewhere; -1: before somewhere and after
    nowhere (entirely ahead of the reader); +1 otherwise: passed, including a
    position exactly at the cut (before nowhere, after nowhere).
    ``END_OF_SEGMENT`` (-1) ranks above every offset (a sealed segment read
    to its end). ``segments`` maps segment id -> :class:`Segment` (for key
    ranges); an id it lacks is an :class:`InvalidModelError`.
    """
    held: list[tuple[Segment, int]] | None = None  # looked up only when a cut segment is not held
    before = after = False
    for cut_id, cut_offset in cut.items():
        offset = position.get(cut_id)
        if offset is not None:
            if offset == cut_offset:
                continue
            if offset == END_OF_SEGMENT or (cut_offset != END_OF_SEGMENT and offset > cut_offset):
                after = True
            else:
                before = True
        else:
            if held is None:
                held = [(_segment(segments, seg), seg) for seg in position]
            cut_seg = _segment(segments, cut_id)
            for seg, seg_id in held:
                if seg.overlaps(cut_seg):
                    if seg_id < cut_id:
                        before = True
                    else:
                        after = True
        if before and after:
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
    looked at again. ``lower`` resumes a tracker: the time of the last watermark
    passed before the first of ``watermarks``.
    """

    def __init__(
        self,
        watermarks: Iterable[Watermark],
        segments: Mapping[int, Segment],
        *,
        lower: int | None = None,
    ) -> None:
        self._source = iter(watermarks)
        self._segments = segments
        self._lower = lower
        self.passed = 0
        """How many of ``watermarks`` the position has passed (they are its first ones)."""
        self._ahead: deque[Watermark] = deque()
        """Watermarks read but not yet passed, in ``seq`` order."""
        self.next_to_pass: Watermark | None = None
        """After :meth:`advance_to`: the first watermark not passed (None: all read are)."""
        self.first_ahead: Watermark | None = None
        """After :meth:`advance_to`: the first watermark wholly ahead (the upper bound's)."""

    def advance_to(self, position: Position) -> TimeWindow:
        """The window at ``position``: lower = ``time`` of the latest watermark it
        has passed (compare > 0), upper = ``upper_time`` of the first watermark
        entirely ahead of it (compare < 0) or, while there is none, of the latest
        one it is partly past (compare == 0), as Pravega's reader keeps the last
        watermark in flight; ``None`` when there is none (yet). An empty
        position has passed every watermark."""
        upper: int | None = None
        self.first_ahead = None
        index = 0
        while True:
            if index == len(self._ahead):
                mark = next(self._source, None)
                if mark is None:
                    break
                self._ahead.append(mark)
            mark = self._ahead[index]
            order = compare(position, mark.stream_cut, self._segments) if position else 1
            if order > 0 and index == 0:
                # Watermarks pass in seq order (their cuts never go backwards).
                self._lower = mark.time
                self._ahead.popleft()
                self.passed += 1
                continue
            if order <= 0:
                upper = mark.upper_time
            if order < 0:
                self.first_ahead = mark
                break
            index += 1
        self.next_to_pass = self._ahead[0] if self._ahead else None
        return TimeWindow(self._lower, upper)


def _segment(segments: Mapping[int, Segment], seg: int) -> Segment:
    try:
        return segments[seg]
    except KeyError:
        raise InvalidModelError(f"segment {seg} is not a known segment of the stream") from None
