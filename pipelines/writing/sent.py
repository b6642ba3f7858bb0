"""What an ``EventWriter`` keeps of the records it sent; pure, no I/O.

    >>> log = SentRecords(window_ms=1_000, offset=lambda m: m)  # a message is its offset
    >>> add, report = log.appenders(7)
    >>> add((b"k", b"v1", 100, 0, None)); add((b"k", b"v2", 101, 0, None))
    >>> note = log.note(500)
    >>> report(None, 40); log.harvest(0), log.ready()     # Kafka reported the first one
    ([], [])
    >>> report(None, 41); log.harvest(0), [(n.time, n.position) for n in log.ready()]
    ([], [(500, {7: 42})])
    >>> [r.value for r in log.cut_off(7, sealed_size=41)]
    [b'v2']

**Delivery reports.** Each segment has one report callback (``appenders``),
given to the producer with every record sent to it: it appends the record's
offset (-1 when not stored) to the segment's list and nothing else, so a
report costs one short Python call and no report's message outlives it.
Kafka reports the records of one partition in the order they were sent (the
producer is idempotent), so the offsets line up with the records. (Keeping
each report's message until it is read later, in bulk, looks cheaper but is
not: thousands of live messages, each with a copy of its record, cost more
in allocation and garbage collection than the Python calls they save.)

What the log gives the writer, when it ``harvest``\\ s:

- **Failures**: ``(error, message)`` of every record not stored since.
- **Position**: per segment the next offset (last stored offset + 1); a
  segment with nothing stored is left out.
- **Notes**: ``note(time)`` waits for every record sent before it; its
  position is, per segment, the offset after the *last record sent before
  the note* (never one sent after it), on top of the position when it was
  noted. A record sent before the note and reported failed after it fails
  the note (its position would hide the gap).
- **Replay** (``tidemark.controller.streams`` explains why): every record sent in the
  last ``window_ms`` (and every one not yet reported) is kept with its
  offset; ``cut_off`` gives those stored at or beyond a sealed size, in
  order, and ``lost`` says when such a record was already forgotten.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from tidemark.pipelines.writing.headers import KafkaHeaders

KeptHeaders = tuple[tuple[str, str | bytes | None], ...]
"""A record's headers as the log keeps them: a tuple, so that the record (a tuple of
bytes, ints and these) holds no list, and the garbage collector stops tracking it after
one young collection instead of walking every kept record at each older one."""
Record = tuple[bytes | None, bytes, int, int, KeptHeaders | None]
"""(key, value, timestamp, sent_ms, headers)"""
Report = Callable[[Any, Any], None]
"""A delivery callback: ``report(error, message)``."""

_SENT_MS = itemgetter(3)


@dataclass(frozen=True)
class Retained:
    """A record sent to a segment and stored at ``offset``."""

    key: bytes | None
    value: bytes
    timestamp: int
    offset: int
    headers: KafkaHeaders | None = None


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
    """One segment's records, oldest first, and the offsets of the reported ones (a
    prefix: ``offsets[i]`` is ``records[i]``'s, -1 when it was not stored)."""

    __slots__ = ("base", "dropped_max", "failed", "next", "offsets", "records", "report")

    def __init__(self, offset: Callable[[Any], int], failures: list[tuple[Any, Any]]) -> None:
        self.records: list[Record] = []
        self.offsets: list[int] = []
        self.base = 0
        """How many records of the segment were forgotten (the number of records[0])."""
        self.next: int | None = None
        self.dropped_max = -1
        """The highest offset of a forgotten record."""
        self.failed: list[int] = []
        """Numbers of the records reported failed since the last harvest."""
        offsets = self.offsets
        append = offsets.append

        def report(err: Any, msg: Any) -> None:
            if err is None:
                append(offset(msg))
            else:
                self.failed.append(self.base + len(offsets))
                append(-1)
                failures.append((err, msg))

        self.report: Report = report

    @property
    def reported(self) -> int:
        """How many records of the segment have been reported, ever."""
        return self.base + len(self.offsets)

    @property
    def sent(self) -> int:
        return self.base + len(self.records)


class SentRecords:
    """The records a writer sent, per segment, and their delivery reports (module doc).

    ``offset(message)`` reads a stored record's offset from its report
    (``confluent_kafka.Message.offset``).
    """

    def __init__(self, window_ms: int, offset: Callable[[Any], int]) -> None:
        self.window_ms = window_ms
        self._offset = offset
        self._segments: dict[int, _Segment] = {}
        self._failures: list[tuple[Any, Any]] = []
        self._pending: list[SentNote] = []
        self.waiting = False
        """True while a note waits for its records (a plain attribute: the hot path)."""

    def _segment(self, segment: int) -> _Segment:
        seg = self._segments.get(segment)
        if seg is None:
            seg = self._segments[segment] = _Segment(self._offset, self._failures)
        return seg

    # --- sending (the hot path) -------------------------------------------------------------

    def appenders(self, segment: int) -> tuple[Callable[[Record], None], Report]:
        """For a writer's hot path: append a record sent to ``segment`` (key, value,
        timestamp, now_ms, headers), and the report callback to produce it with."""
        seg = self._segment(segment)
        return seg.records.append, seg.report

    # --- reading the reports ----------------------------------------------------------------

    def harvest(self, now_ms: int) -> list[tuple[Any, Any]]:
        """Take in the reports that arrived; (error, message) of the records not stored.

        Completes the notes whose records are all reported (``ready`` gives
        them) and forgets reported records older than the window.
        """
        failures = self._failures[:]
        self._failures.clear()
        for seg_id, seg in self._segments.items():
            offsets = seg.offsets
            if not offsets:
                continue
            if seg.failed:
                for note in self._pending:
                    target = note.waiting.get(seg_id, 0)
                    if any(f < target for f in seg.failed):
                        note.failed = True
                seg.failed.clear()
            last = offsets[-1]
            if last < 0:
                last = max(offsets)
            if last >= 0:
                seg.next = last + 1
            if self._pending:
                self._complete(seg_id, seg)
            self._forget_old(seg, now_ms)
        return failures

    def _complete(self, seg_id: int, seg: _Segment) -> None:
        reported = seg.reported
        for note in self._pending:
            target = note.waiting.get(seg_id)
            if target is None or target > reported:
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
        starts from the harvested one, and failures reported before it are not its)."""
        waiting = {s: seg.sent for s, seg in self._segments.items() if seg.sent > seg.reported}
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
        """Next offset per segment with anything stored (as of the last harvest)."""
        return {s: seg.next for s, seg in self._segments.items() if seg.next is not None}

    def in_flight(self) -> int:
        """Records not reported yet."""
        return sum(seg.sent - seg.reported for seg in self._segments.values())

    def retained(self, segment: int) -> int:
        seg = self._segments.get(segment)
        return len(seg.records) if seg is not None else 0

    def cut_off(self, segment: int, sealed_size: int) -> list[Retained]:
        """Reported records of ``segment`` stored at or beyond ``sealed_size``, in order."""
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
            key, value, ts, _, headers = seg.records[i]
            out.append(Retained(key, value, ts, off, list(headers) if headers else None))
        out.reverse()
        return out

    def lost(self, segment: int, sealed_size: int) -> bool:
        """True when a record stored at or beyond ``sealed_size`` was already forgotten."""
        seg = self._segments.get(segment)
        return seg is not None and seg.dropped_max >= sealed_size

    def forget(self, segment: int) -> None:
        """Drop a segment's reported records (its position stays)."""
        seg = self._segments.get(segment)
        if seg is not None:
            done = len(seg.offsets)
            del seg.records[:done]
            seg.offsets.clear()
            seg.base += done
            seg.dropped_max = -1

    def segments(self) -> list[int]:
        return list(self._segments)


__all__ = ["KeptHeaders", "Record", "Report", "Retained", "SentNote", "SentRecords"]
