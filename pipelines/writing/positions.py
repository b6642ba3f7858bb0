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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


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
        self.waiting = False
        """True while a note waits for its records (a plain attribute: writers' hot path)."""

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
        self.waiting = True
        return pending

    def ready(self) -> list[PendingNote]:
        """Notes whose records are all reported, in the order they were noted."""
        out = []
        while self._pending and not self._pending[0].waiting:
            out.append(self._pending.pop(0))
        self.waiting = bool(self._pending)
        return out

    def pending(self) -> int:
        return len(self._pending)


@dataclass
class GroupNote:
    """A noted time and, per partition written since the previous note, its group's bucket."""

    time: int
    alive: bool
    closed: dict[int, dict[Any, Any]]
    position: dict[int, int] = field(default_factory=dict)
    failed: list[Any] = field(default_factory=list)
    """The delivery reports (messages) of records that were not stored."""
    max_event_time: int | None = None
    """Not known to the drop-in producer yet (it passes timestamps through)."""


class DeliveryGroups:
    """Positions from delivery reports with no Python call per report (the drop-in producer's).

        >>> g = DeliveryGroups([0, 1])
        >>> g.used[0] = True; g.setters[0](None, "msg@4")   # sent; reported: bucket[err] = msg
        >>> note = g.note(100)
        >>> g.ready(idle=False, offset=lambda m: int(m[4:]))   # nothing later on 0 yet
        []
        >>> [(n.time, n.position) for n in g.ready(idle=True, offset=lambda m: int(m[4:]))]
        [(100, {0: 5})]

    Records are grouped per partition between notes; a record's delivery
    callback is the C-level ``__setitem__`` of its group's bucket (a dict), so
    a report stores ``bucket[None] = message`` (the group's latest stored
    record, reports of a partition arriving in send order) or, for a record
    not stored, ``bucket[error] = message``. ``note`` closes the groups and
    opens new ones; a closed group is complete when a report of a *later*
    group of its partition arrived, or when nothing is in flight (``idle``).
    The note's position is then the latest stored offset + 1 of every
    partition. A group holding an error fails its note (its position would
    hide the gap). Callers mark a partition written (``used``) when they
    send to it. Pure: no I/O.
    """

    def __init__(self, partitions: Iterable[int]) -> None:
        self._open: dict[int, dict[Any, Any]] = {}
        self.setters: dict[int, Callable[[Any, Any], None]] = {}
        self.used: dict[int, bool] = {}
        self._chains: dict[int, list[dict[Any, Any]]] = {}
        self._next: dict[int, int] = {}
        self._pending: list[GroupNote] = []
        self.add_partitions(partitions)

    def add_partitions(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            if p not in self._open:
                self._open_group(p)

    def _open_group(self, p: int) -> None:
        bucket: dict[Any, Any] = {}
        self._open[p] = bucket
        self.setters[p] = bucket.__setitem__
        self.used[p] = False
        self._chains.setdefault(p, []).append(bucket)

    @property
    def waiting(self) -> bool:
        return bool(self._pending)

    def position(self, offset: Callable[[Any], int]) -> dict[int, int]:
        """Partition -> next offset of every partition with a record reported stored so far."""
        out = dict(self._next)
        for p, chain in self._chains.items():
            for bucket in chain:
                msg = bucket.get(None)
                if msg is not None and offset(msg) + 1 > out.get(p, 0):
                    out[p] = offset(msg) + 1
        return out

    def note(self, time: int, alive: bool = True) -> GroupNote:
        """Close every written partition's group: the note covers what was sent so far."""
        closed = {p: self._open[p] for p, used in self.used.items() if used}
        for p in closed:
            self._open_group(p)
        pending = GroupNote(time, alive, closed)
        self._pending.append(pending)
        return pending

    def ready(self, idle: bool, offset: Callable[[Any], int]) -> list[GroupNote]:
        """Notes whose groups are complete, in order; ``offset(message)`` reads a report."""
        out = []
        while self._pending:
            note = self._pending[0]
            if not idle and not all(self._later_reported(p, b) for p, b in note.closed.items()):
                break
            self._pending.pop(0)
            for p, bucket in note.closed.items():
                for err, msg in bucket.items():
                    if err is None:
                        nxt = offset(msg) + 1
                        if nxt > self._next.get(p, 0):
                            self._next[p] = nxt
                    else:
                        note.failed.append(msg)
                chain = self._chains[p]
                del chain[: _index(chain, bucket) + 1]
            note.position = dict(self._next)
            out.append(note)
        return out

    def _later_reported(self, p: int, bucket: dict[Any, Any]) -> bool:
        chain = self._chains[p]
        return any(chain[_index(chain, bucket) + 1 :])


def _index(chain: list[dict[Any, Any]], bucket: dict[Any, Any]) -> int:
    """Where ``bucket`` itself is (by identity: empty buckets are all equal)."""
    return next(i for i, b in enumerate(chain) if b is bucket)


def merge(position: Mapping[int, int], other: Mapping[int, int]) -> dict[int, int]:
    """Per segment, the larger next offset of the two."""
    out = dict(position)
    for seg, off in other.items():
        if off > out.get(seg, -1):
            out[seg] = off
    return out


__all__ = ["DeliveryGroups", "GroupNote", "PendingNote", "PositionTracker", "merge"]
