"""The stream model's values: key ranges, segments, epochs, cuts, marks, watermarks.

    >>> s = Segment(segment_id(2, 5), KeyRange(0.5, 1.0))
    >>> (s.epoch, s.number)
    (2, 5)

Pure: frozen dataclasses, no I/O. Times are integers (milliseconds unless the
application says otherwise); a position or stream cut maps a segment id to
the **next** offset (last acknowledged + 1). A writer leaves a segment with
nothing acknowledged out of its position; in a reader's position, -1 means
"this sealed segment has been read to its end".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tidemark.controller.exceptions import InvalidModelError

StreamCut = Mapping[int, int]
"""segment id -> next offset."""

Position = Mapping[int, int]
"""A writer's or reader's position: segment id -> next offset."""

END_OF_SEGMENT = -1
"""In a reader's position: the sealed segment has been read to its end."""

_NUMBER_BITS = 32
_NUMBER_MASK = (1 << _NUMBER_BITS) - 1


def segment_id(epoch: int, number: int) -> int:
    """``epoch << 32 | number``: the epoch that created the segment, and its number."""
    if epoch < 0 or not 0 <= number <= _NUMBER_MASK:
        raise InvalidModelError(
            f"segment_id needs epoch >= 0 and 0 <= number < 2**32, got ({epoch}, {number})"
        )
    return (epoch << _NUMBER_BITS) | number


def segment_epoch(seg_id: int) -> int:
    return seg_id >> _NUMBER_BITS


def segment_number(seg_id: int) -> int:
    return seg_id & _NUMBER_MASK


@dataclass(frozen=True, order=True)
class KeyRange:
    """The half-open range ``[low, high)`` within ``[0, 1)`` of routing-key hashes."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.low < self.high <= 1.0:
            raise InvalidModelError(
                f"a key range needs 0 <= low < high <= 1, got [{self.low}, {self.high})"
            )

    def overlaps(self, other: KeyRange) -> bool:
        return self.low < other.high and other.low < self.high

    def contains(self, key: float) -> bool:
        return self.low <= key < self.high

    def __str__(self) -> str:
        return f"[{self.low:g}, {self.high:g})"


FULL_RANGE = KeyRange(0.0, 1.0)


@dataclass(frozen=True)
class Segment:
    """A segment: its id (``epoch << 32 | number``) and its key range."""

    id: int
    key_range: KeyRange

    @property
    def epoch(self) -> int:
        return segment_epoch(self.id)

    @property
    def number(self) -> int:
        return segment_number(self.id)

    def overlaps(self, other: Segment) -> bool:
        return self.key_range.overlaps(other.key_range)


@dataclass(frozen=True)
class Epoch:
    """An epoch: the set of segments active together. Immutable once written."""

    number: int
    segments: tuple[Segment, ...]
    created_at_ms: int = 0

    def segment_for(self, key: float) -> Segment:
        for seg in self.segments:
            if seg.key_range.contains(key):
                return seg
        raise InvalidModelError(f"epoch {self.number} has no segment for key {key}")


@dataclass(frozen=True)
class WriterMark:
    """A writer's noted time and its position when it noted it.

    ``alive=False`` is the shutdown mark a closing writer sends.
    ``max_event_time``: the highest record timestamp the writer has written
    up to its position (``None``: not known, e.g. a mark of an older
    writer). Events may run ahead of the noted time; this is how far.
    ``observed_lateness_ms``: set when the mark was observed from the brokers'
    offsets rather than noted by the writer of the records (its time is their
    largest timestamp minus this lateness); ``possibly_late``: such an observer's
    count of records that may lie behind a watermark.
    """

    time: int
    position: Position = field(default_factory=dict)
    alive: bool = True
    max_event_time: int | None = None
    observed_lateness_ms: int | None = None
    possibly_late: int | None = None

    @property
    def upper_time(self) -> int:
        """The highest time this mark vouches for: the noted time or any event's before it."""
        if self.max_event_time is None or self.max_event_time < self.time:
            return self.time
        return self.max_event_time


@dataclass(frozen=True)
class Watermark:
    """ "Everything written up to ``time`` lies before ``stream_cut``."

    ``time`` is the lower bound (min over writers), ``upper_time`` the max over
    writers, ``seq`` counts a stream's watermarks from 0.
    """

    stream: str
    time: int
    upper_time: int
    stream_cut: StreamCut
    seq: int


@dataclass(frozen=True)
class TimeWindow:
    """Bounds on the event times at a reader's position; ``None`` when unknown."""

    lower: int | None
    upper: int | None
