"""Late data and laggards, read back: who holds a stream back, whose marks were stale,
and how many events a reader saw below its window.

    holding = read_laggards("/data/delta", "shop/orders")     # the last snapshot, dicts
    stale = stale_marks("/data/delta", "shop/orders")         # {writer: count}
    late = LateEvents(group.reader("r1"))      # wraps a reader
    event = late.read_next(1_000)
    late.counter.counts                         # {segment id: late events}

The controller appends snapshots to the ``laggards`` table and refused marks
to ``rejected_marks`` (reason ``stale_time``: a writer noted a time below one
it had noted before); both are read here with deltalake. An event is **late**
for a reader when its event time is below the lower bound of the reader's
time window at the moment it is read: a watermark said everything up to that
bound had been written, and this event arrived after it anyway. The bound is
taken per event: the latest watermark whose cut, in the event's segment, lies
at or before the event's offset (a pointer per segment, since offsets only
grow). A wrapper, to opt in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

import pyarrow as pa

from tidemark.controller.delta.tables import (
    DeltaSource,
    Root,
    TableLocation,
    append_rows,
    read_table,
)
from tidemark.controller.model import Watermark
from tidemark.schemas.arrow import LAGGARDS_ARROW
from tidemark.schemas.tables import (
    LAGGARDS,
    REJECTED_MARKS,
    LaggardLike,
    Reason,
    laggard_rows,
    latest_laggards,
)


def read_laggards(lake: Root, stream: str) -> list[dict[str, Any]]:
    """The latest snapshot of ``stream``'s laggards (empty: none, or no table yet)."""
    return latest_laggards(read_table(lake, LAGGARDS, stream))


def stale_marks(lake: Root, stream: str, since_ms: int = 0) -> dict[str, int]:
    """Marks of ``stream`` refused as stale since ``since_ms``, counted per writer."""
    source = DeltaSource(TableLocation.of(lake).table(REJECTED_MARKS))
    source.refresh()
    counts: Counter[str] = Counter()
    for row in source.rows(stream).to_pylist():
        if row["reason"] == Reason.STALE_TIME and int(row["at"] or 0) >= since_ms:
            counts[str(row["writer"])] += 1
    return dict(counts)


def lateness_rows(lake: Root, stream: str) -> list[dict[str, Any]]:
    """What an operator sees for ``stream`` (``tidemark laggards``; the hook for
    ``tidemark controller status``): one row per laggard of the last snapshot, then
    one per writer with marks refused as stale (``kind`` = ``stale_marks``)."""
    lake = TableLocation.of(lake)
    rows: list[dict[str, Any]] = [
        {
            "stream": stream,
            "writer": r["writer"],
            "kind": r["kind"],
            "noted_time": r["noted_time"],
            "watermark_time": r["watermark_time"],
            "behind_ms": r["behind_ms"],
            "since": r["since"],
            "at": r["at"],
            "instance": r["instance"],
            "first_seen": r["first_seen"],
            "last_seen": r["last_seen"],
        }
        for r in read_laggards(lake, stream)
    ]
    stale = stale_marks(lake, stream)
    rows += [
        {"stream": stream, "writer": w, "kind": "stale_marks", "refused": n}
        for w, n in sorted(stale.items())
    ]
    return rows


def append_laggards(lake: Root, stream: str, at: int, laggards: Sequence[LaggardLike]) -> None:
    """Append one snapshot (the controller's sink does this in production; tools, tests)."""
    rows = pa.Table.from_pylist(laggard_rows(stream, at, laggards), schema=LAGGARDS_ARROW)
    append_rows(TableLocation.of(lake).table(LAGGARDS), rows)


class LateCounter:
    """Counts events read below the reader's window lower bound, per segment id."""

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self.seen: Counter[int] = Counter()

    def observe(self, segment: int, event_time: int | None, lower: int | None) -> bool:
        """Record one event; True when it is late (both times known, event below lower)."""
        self.seen[segment] += 1
        late = event_time is not None and lower is not None and event_time < lower
        if late:
            self.counts[segment] += 1
        return late

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class _Event(Protocol):
    @property
    def segment(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def is_checkpoint(self) -> bool: ...


class _Feed(Protocol):
    watermarks: list[Watermark]

    def refresh(self, *, force: bool = False) -> int: ...


class _Reader(Protocol):
    @property
    def group(self) -> Any: ...
    def read_next(self, timeout_ms: float | None = None) -> Any: ...


def passed(watermark: Watermark, segment: int, offset: int, named_before: bool) -> bool:
    """Whether the event at ``offset`` of ``segment`` lies at or after ``watermark``'s cut
    there. A cut that does not name the segment: before the segment existed
    (``named_before`` False) everything in it is after the cut; after it was sealed,
    nothing is."""
    if segment in watermark.stream_cut:
        return watermark.stream_cut[segment] <= offset
    return not named_before


class LateEvents:
    """A reader that counts, per segment, the events it reads below their window: an
    event at or after a watermark's cut in its segment whose time is below that
    watermark's time was written after the watermark said that time was complete."""

    def __init__(self, reader: _Reader) -> None:
        self.reader = reader
        self.counter = LateCounter()
        self._feed: _Feed = reader.group.watermark_feed()
        self._next: dict[int, int] = {}
        """Per segment: the index of the first watermark not yet passed."""
        self._named: set[int] = set()

    def lower_bound(self, segment: int, offset: int) -> int | None:
        """The time of the latest watermark the event at ``offset`` of ``segment`` is
        past (offsets of one segment only grow, so a pointer per segment suffices)."""
        self._feed.refresh()
        marks = self._feed.watermarks
        i = self._next.get(segment, 0)
        while i < len(marks):
            named = segment in self._named
            if not passed(marks[i], segment, offset, named):
                break
            if segment in marks[i].stream_cut:
                self._named.add(segment)
            i += 1
        self._next[segment] = i
        return marks[i - 1].time if i else None

    def read_next(self, timeout_ms: float | None = None) -> Any:
        event: _Event | None = self.reader.read_next(timeout_ms)
        if event is not None and not event.is_checkpoint:
            lower = self.lower_bound(event.segment, event.offset)
            self.counter.observe(event.segment, event.timestamp, lower)
        return event


__all__ = [
    "LateCounter",
    "LateEvents",
    "append_laggards",
    "lateness_rows",
    "read_laggards",
    "stale_marks",
]
