"""A writer's position, folded from delivery reports; pure, no I/O.

    >>> t = PositionTracker()
    >>> t.sent(7); t.sent(7)
    >>> note = t.note(time=100)          # waits for both records in flight
    >>> t.delivered(7, offset=41); t.ready()
    []
    >>> t.delivered(7, offset=42); [(n.time, n.position) for n in t.ready()]
    [(100, {7: 43})]

The position maps each segment id to the **next** offset (last acknowledged
+ 1); a segment with nothing acknowledged is left out. Kafka reports
deliveries of one partition in the order the records were sent, so counting
reports per segment tells exactly when every record sent before a
``note`` has been acknowledged; the note's position is captured at that
moment, per segment, and never includes a record sent after the note.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass
class PendingNote:
    """A noted time waiting for the records sent before it to be acknowledged."""

    time: int
    alive: bool = True
    position: dict[int, int] = field(default_factory=dict)
    waiting: dict[int, int] = field(default_factory=dict)
    """segment id -> count of reports that completes it."""
    failed: bool = False
    """A record sent before the note was not delivered."""
    max_event_time: int | None = None
    """The highest timestamp among the records sent before the note."""


class PositionTracker:
    """Counts records sent and reported per segment, and the next offset of each."""

    def __init__(self) -> None:
        self._sent: dict[int, int] = {}
        self._reported: dict[int, int] = {}
        self._next: dict[int, int] = {}
        self._pending: list[PendingNote] = []

    def position(self) -> dict[int, int]:
        """Next offset per segment with anything acknowledged."""
        return dict(self._next)

    def in_flight(self, segments: Iterable[int] | None = None) -> int:
        """Records sent but not yet reported (in ``segments`` when given)."""
        keys = self._sent.keys() if segments is None else segments
        return sum(self._sent.get(s, 0) - self._reported.get(s, 0) for s in keys)

    def sent(self, segment: int) -> None:
        self._sent[segment] = self._sent.get(segment, 0) + 1

    def delivered(self, segment: int, offset: int) -> None:
        """A record of ``segment`` was stored at ``offset``."""
        reported = self._reported.get(segment, 0) + 1
        self._reported[segment] = reported
        nxt = offset + 1
        if nxt > self._next.get(segment, 0):
            self._next[segment] = nxt
        if self._pending:
            self._complete(segment, reported, failed=False)

    def failed(self, segment: int) -> None:
        """A record of ``segment`` was not stored."""
        reported = self._reported.get(segment, 0) + 1
        self._reported[segment] = reported
        if self._pending:
            self._complete(segment, reported, failed=True)

    def _complete(self, segment: int, reported: int, failed: bool) -> None:
        for note in self._pending:
            target = note.waiting.get(segment)
            if target is None:
                continue
            if failed and reported <= target:
                note.failed = True
            if reported >= target:
                del note.waiting[segment]
                if segment in self._next:
                    note.position[segment] = self._next[segment]

    def note(self, time: int, alive: bool = True, max_event_time: int | None = None) -> PendingNote:
        """Queue a note whose position includes every record sent so far
        (``max_event_time``: the highest timestamp among them, as the writer knows it)."""
        waiting = {s: n for s, n in self._sent.items() if n > self._reported.get(s, 0)}
        pending = PendingNote(time, alive, dict(self._next), waiting)
        pending.max_event_time = max_event_time
        self._pending.append(pending)
        return pending

    def ready(self) -> list[PendingNote]:
        """Notes whose records are all reported, in the order they were noted."""
        out = []
        while self._pending and not self._pending[0].waiting:
            out.append(self._pending.pop(0))
        return out

    def pending(self) -> int:
        return len(self._pending)


def merge(position: Mapping[int, int], other: Mapping[int, int]) -> dict[int, int]:
    """Per segment, the larger next offset of the two."""
    out = dict(position)
    for seg, off in other.items():
        if off > out.get(seg, -1):
            out[seg] = off
    return out


__all__ = ["PendingNote", "PositionTracker", "merge"]
