"""What an ``EventWriter`` keeps of the records it sent; pure, no I/O.

    >>> log = SentRecords(window_ms=1_000, offset=lambda m: m)  # a report is (error, offset)
    >>> a, b = {}, {}
    >>> log.sent(7, b"k", b"v1", 100, 0, a); log.sent(7, b"k", b"v2", 101, 0, b)
    >>> note = log.note(500)
    >>> a[None] = 40; log.harvest(0), log.ready()      # Kafka reported the first one
    ([], [])
    >>> b[None] = 41; log.harvest(0), [(n.time, n.position) for n in log.ready()]
    ([], [(500, {7: 42})])
    >>> [r.value for r in log.cut_off(7, sealed_size=41)]
    [b'v2']

**No Python call per delivery report.** Each record is sent with a fresh dict
of its own as its report: the producer's delivery callback is that dict's
C-level ``__setitem__``, so Kafka's report stores ``report[None] = message``
(stored) or ``report[error] = message`` (not stored). ``harvest`` reads the
reports later, many at once and mostly at C speed (``map`` over the reports,
the offsets through ``offset(message)``), and keeps only each record's
offset (-1: not stored) so no message outlives its harvest.

Kafka reports the records of one partition in the order they were sent (the
producer is idempotent), so the reported records of a segment are always a
prefix of those not yet harvested; ``harvest`` finds its end by bisection.

What the log gives the writer:

- **Failures**: ``harvest`` returns ``(error, message)`` of every record not
  stored since the previous harvest.
- **Position**: per segment the next offset (last stored offset + 1) of the
  harvested records; a segment with nothing stored is left out.
- **Notes**: ``note(time)`` waits for every record sent before it; its
  position is, per segment, the offset after the *last record sent before
  the note* (never one sent after it), on top of the position when it was
  noted. A record sent before the note that was not stored fails the note
  (its position would hide the gap).
- **Replay** (``controller.streams`` explains why): every record sent in the
  last ``window_ms`` (and every one not yet harvested) is kept with its
  offset; ``cut_off`` gives those stored at or beyond a sealed size, in
  order, and ``lost`` says when such a record was already forgotten.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter, not_
from typing import Any

Report = dict[Any, Any]
"""A record's delivery report: ``{None: message}`` stored, ``{error: message}`` not."""

_SENT_MS = itemgetter(3)


@dataclass(frozen=True)
class Retained:
    """A record sent to a segment and stored at ``offset``."""

    key: bytes | None
    value: bytes
    timestamp: int
    offset: int


@dataclass
class SentNote:
    """A noted time waiting for the records sent before it to be reported."""

    time: int
    alive: bool = True
    max_event_time: int | None = None
    """The highest timestamp among the records sent before the note."""
    position: dict[int, int] = field(default_factory=dict)
    waiting: dict[int, int] = field(default_factory=dict)
    """segment id -> how many records of it had been sent when the note was taken."""
    failed: bool = False
    """A record sent before the note was not stored."""


class _Segment:
    """One segment's records: ``records[i]`` is (key, value, timestamp, sent_ms); the
    first ``len(offsets)`` are harvested, the rest wait for the ``reports`` (aligned)."""

    __slots__ = ("base", "dropped_max", "next", "offsets", "records", "reports")

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes, int, int]] = []
        self.offsets: list[int] = []
        self.reports: list[Report] = []
        self.base = 0
        """How many records of the segment were forgotten (the number of records[0])."""
        self.next: int | None = None
        self.dropped_max = -1
        """The highest offset of a forgotten record."""

    @property
    def harvested(self) -> int:
        """How many records of the segment have been harvested, ever."""
        return self.base + len(self.offsets)

    @property
    def sent(self) -> int:
        return self.base + len(self.records)


class SentRecords:
    """The records a writer sent, per segment, with their reports read lazily (module doc).

    ``offset(message)`` reads a stored record's offset from its report
    (``confluent_kafka.Message.offset``).
    """

    def __init__(self, window_ms: int, offset: Callable[[Any], int]) -> None:
        self.window_ms = window_ms
        self._offset = offset
        self._segments: dict[int, _Segment] = {}
        self._pending: list[SentNote] = []
        self.waiting = False
        """True while a note waits for its records (a plain attribute: the hot path)."""

    # --- sending (the hot path) -------------------------------------------------------------

    def sent(
        self,
        segment: int,
        key: bytes | None,
        value: bytes,
        timestamp: int,
        now_ms: int,
        report: Report,
    ) -> None:
        """Keep a record just sent with ``report`` as its delivery report."""
        seg = self._segments.get(segment)
        if seg is None:
            seg = self._segments[segment] = _Segment()
        seg.records.append((key, value, timestamp, now_ms))
        seg.reports.append(report)

    def appenders(self, segment: int) -> tuple[Callable[[Any], None], Callable[[Report], None]]:
        """``sent`` in two calls, for a writer's hot path: append ``(key, value, timestamp,
        now_ms)``, then append the record's report (the lists are never replaced)."""
        seg = self._segments.get(segment)
        if seg is None:
            seg = self._segments[segment] = _Segment()
        return seg.records.append, seg.reports.append

    # --- reading the reports ----------------------------------------------------------------

    def harvest(self, now_ms: int) -> list[tuple[Any, Any]]:
        """Read every report that arrived; (error, message) of the records not stored.

        Completes the notes whose records are all reported (``ready`` gives
        them) and forgets harvested records older than the window.
        """
        failures: list[tuple[Any, Any]] = []
        for seg_id, seg in self._segments.items():
            reports = seg.reports
            if not reports or not reports[0]:
                continue
            # Reports of a segment arrive in order: the reported ones are a prefix.
            end = bisect_left(reports, True, key=not_)
            batch = reports[:end]
            if not all(batch):  # not a prefix after all: stop at the first unreported
                end = batch.index({})
                batch = reports[:end]
            del reports[:end]
            first = seg.harvested
            if None in map(dict.get, batch, repeat(None)):
                self._harvest_failures(seg_id, seg, batch, first, failures)
            else:
                seg.offsets.extend(map(self._offset, map(dict.get, batch, repeat(None))))
                seg.next = seg.offsets[-1] + 1
            if self._pending:
                self._complete(seg_id, seg)
            self._forget_old(seg, now_ms)
        return failures

    def _harvest_failures(
        self,
        seg_id: int,
        seg: _Segment,
        batch: list[Report],
        first: int,
        failures: list[tuple[Any, Any]],
    ) -> None:
        for i, report in enumerate(batch):
            msg = report.get(None)
            if msg is not None:
                off = self._offset(msg)
                seg.offsets.append(off)
                seg.next = off + 1
                continue
            seg.offsets.append(-1)
            failures.append(next(iter(report.items())))
            for note in self._pending:
                if note.waiting.get(seg_id, 0) > first + i:
                    note.failed = True

    def _complete(self, seg_id: int, seg: _Segment) -> None:
        harvested = seg.harvested
        for note in self._pending:
            target = note.waiting.get(seg_id)
            if target is None or target > harvested:
                continue
            del note.waiting[seg_id]
            # The last record sent before the note; a failed one failed the note.
            off = seg.offsets[target - 1 - seg.base]
            if off >= 0:
                note.position[seg_id] = off + 1

    def _forget_old(self, seg: _Segment, now_ms: int) -> None:
        records = seg.records
        horizon = now_ms - self.window_ms
        if not seg.offsets or records[0][3] >= horizon:
            return
        old = bisect_left(records, horizon, 0, len(seg.offsets), key=_SENT_MS)
        # Forget in chunks (a quarter of what is kept at least): deleting from the front
        # of a list moves the rest.
        if old < max(1, len(records) // 4):
            return
        dropped = max(seg.offsets[:old])
        if dropped > seg.dropped_max:
            seg.dropped_max = dropped
        del records[:old]
        del seg.offsets[:old]
        seg.base += old

    # --- notes ------------------------------------------------------------------------------

    def note(self, time: int, alive: bool = True, max_event_time: int | None = None) -> SentNote:
        """Queue a note covering every record sent so far (harvest first: its position
        starts from the harvested one)."""
        waiting = {s: seg.sent for s, seg in self._segments.items() if seg.reports}
        note = SentNote(time, alive, max_event_time, self.position(), waiting)
        self._pending.append(note)
        self.waiting = True
        return note

    def ready(self) -> list[SentNote]:
        """Notes whose records are all reported, in the order they were noted."""
        out = []
        while self._pending and not self._pending[0].waiting:
            out.append(self._pending.pop(0))
        self.waiting = bool(self._pending)
        return out

    # --- position and replay ----------------------------------------------------------------

    def position(self) -> dict[int, int]:
        """Next offset per segment with anything stored (as harvested)."""
        return {s: seg.next for s, seg in self._segments.items() if seg.next is not None}

    def in_flight(self) -> int:
        """Records whose reports were not harvested yet."""
        return sum(len(seg.reports) for seg in self._segments.values())

    def retained(self, segment: int) -> int:
        seg = self._segments.get(segment)
        return len(seg.records) if seg is not None else 0

    def cut_off(self, segment: int, sealed_size: int) -> list[Retained]:
        """Harvested records of ``segment`` stored at or beyond ``sealed_size``, in order."""
        seg = self._segments.get(segment)
        if seg is None:
            return []
        out = []
        for i in range(len(seg.offsets) - 1, -1, -1):
            off = seg.offsets[i]
            if off < 0:
                continue  # not stored: already reported as failed
            if off < sealed_size:
                break
            key, value, ts, _ = seg.records[i]
            out.append(Retained(key, value, ts, off))
        out.reverse()
        return out

    def lost(self, segment: int, sealed_size: int) -> bool:
        """True when a record stored at or beyond ``sealed_size`` was already forgotten."""
        seg = self._segments.get(segment)
        return seg is not None and seg.dropped_max >= sealed_size

    def forget(self, segment: int) -> None:
        """Drop a segment's harvested records (its position stays)."""
        seg = self._segments.get(segment)
        if seg is not None:
            done = len(seg.offsets)
            del seg.records[:done]
            seg.offsets.clear()
            seg.base += done
            seg.dropped_max = -1

    def segments(self) -> list[int]:
        return list(self._segments)


__all__ = ["Report", "Retained", "SentNote", "SentRecords"]
