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
the window at the reader's position *before* the event: a watermark the
position has passed lies before the event, so an event time below it means
the event was written after the watermark said the time was complete.
Counting costs one time-window lookup per event, hence a wrapper to opt in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa

from pipelines.reading.watermark_tables import DeltaSource
from schemas.tables import (
    LAGGARDS,
    LAGGARDS_ARROW,
    REJECTED_MARKS,
    LaggardLike,
    Reason,
    laggard_rows,
    latest_laggards,
    table_path,
)


def read_laggards(
    delta_root: str, stream: str, storage_options: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The latest snapshot of ``stream``'s laggards (empty: none, or no table yet)."""
    source = DeltaSource(table_path(delta_root, LAGGARDS), storage_options)
    source.refresh()
    return latest_laggards(source.rows(stream).to_pylist())


def stale_marks(
    delta_root: str,
    stream: str,
    since_ms: int = 0,
    storage_options: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Marks of ``stream`` refused as stale since ``since_ms``, counted per writer."""
    source = DeltaSource(table_path(delta_root, REJECTED_MARKS), storage_options)
    source.refresh()
    counts: Counter[str] = Counter()
    for row in source.rows(stream).to_pylist():
        if row["reason"] == Reason.STALE_TIME and int(row["at"] or 0) >= since_ms:
            counts[str(row["writer"])] += 1
    return dict(counts)


def lateness_rows(
    delta_root: str, stream: str, storage_options: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """What an operator sees for ``stream`` (``tidemark laggards``; the hook for
    ``tidemark controller status``): one row per laggard of the last snapshot, then
    one per writer with marks refused as stale (``kind`` = ``stale_marks``)."""
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
        }
        for r in read_laggards(delta_root, stream, storage_options)
    ]
    stale = stale_marks(delta_root, stream, storage_options=storage_options)
    rows += [
        {"stream": stream, "writer": w, "kind": "stale_marks", "refused": n}
        for w, n in sorted(stale.items())
    ]
    return rows


def append_laggards(
    delta_root: str,
    stream: str,
    at: int,
    laggards: Sequence[LaggardLike],
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Append one snapshot (the controller's sink does this in production; tools, tests)."""
    from deltalake import write_deltalake

    rows = pa.Table.from_pylist(laggard_rows(stream, at, laggards), schema=LAGGARDS_ARROW)
    write_deltalake(
        table_path(delta_root, LAGGARDS),
        rows,
        mode="append",
        storage_options=dict(storage_options or {}) or None,
    )


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
    def timestamp(self) -> int: ...


class _Window(Protocol):
    @property
    def lower(self) -> int | None: ...


class _Reader(Protocol):
    def read_next(self, timeout_ms: float | None = None) -> Any: ...
    def current_time_window(self) -> Any: ...
    def position(self) -> Mapping[int, int]: ...


class LateEvents:
    """A reader that counts, per segment, the events it reads below its window."""

    def __init__(self, reader: _Reader) -> None:
        self.reader = reader
        self.counter = LateCounter()

    def read_next(self, timeout_ms: float | None = None) -> Any:
        # A reader that owns no segment yet has an empty position, which has "passed"
        # every watermark: no bound until it holds a position.
        lower = None
        if self.reader.position():
            window: _Window = self.reader.current_time_window()
            lower = window.lower
        event: _Event | None = self.reader.read_next(timeout_ms)
        if event is not None:
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
