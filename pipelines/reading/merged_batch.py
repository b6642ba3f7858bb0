"""What the event-time merge releases at once: records of several streams in time order,
their events made only when asked.

    batch = merged.read_batch(timeout_ms=100)    # pipelines.reading.merge.TimeMerge
    batch.values()                               # the bodies, in time order (no EventRead made)
    batch.times(), batch.streams()               # each record's timestamp and stream, same order
    for event in batch:                          # batch.events: each EventRead, naming its stream
        ...

A :class:`MergedBatch` holds one run per stream (that stream's released records in
time order, as its reader fetched them: Kafka records, or events where the reader
made them) and merges the runs by time when first asked: one stable sort of record
indexes by time, in C (timsort finds the runs), so records with equal times come
in the readers' order. Making each record's
:class:`~pipelines.reading.reader.EventRead` is most of a merge's cost when the
caller wants only the bodies; :class:`~pipelines.reading.reader.EventBatch` avoids
it the same way for one stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain, repeat
from operator import attrgetter, gt, itemgetter
from typing import Any, NamedTuple

from confluent_kafka import Message

from pipelines.reading.reader import EventRead, make_events

_record_value = Message.value
_record_timestamp = Message.timestamp
_second = itemgetter(1)
_times = attrgetter("times")


def times_of(records: Sequence[Any], made: bool) -> list[int]:
    """Each record's timestamp: Kafka records, or (``made``) events among them."""
    if not made:
        return list(map(_second, map(_record_timestamp, records)))
    return [r.timestamp if type(r) is EventRead else r.timestamp()[1] for r in records]


class Run(NamedTuple):
    """One stream's records released together, in time order, with their times.

    ``records`` are Kafka records of the segments in ``segment_of`` (partition ->
    segment id) or, when ``made``, events among them (fetches the reader handed out
    as events)."""

    stream: str
    records: list[Any]
    times: list[int]
    segment_of: Mapping[int, int]
    made: bool

    def values(self) -> list[bytes]:
        if self.made:
            return [r.body if type(r) is EventRead else (r.value() or b"") for r in self.records]
        values: list[bytes | None] = list(map(_record_value, self.records))
        if not all(values):  # a record without a value: an empty body, as EventRead's
            return [v or b"" for v in values]
        return values  # type: ignore[return-value]

    def events(self) -> list[EventRead]:
        if not self.made:
            return make_events(self.records, self.segment_of, self.stream)
        return [
            r if type(r) is EventRead else make_events((r,), self.segment_of, self.stream)[0]
            for r in self.records
        ]

    def streams(self) -> Iterable[str]:
        return repeat(self.stream, len(self.records))


def _first_time(run: Run) -> int:
    return run.times[0]


def _last_time(run: Run) -> int:
    return run.times[-1]


class MergedBatch:
    """Records of several streams in timestamp order (equal times in the readers' order).

    ``len()`` costs nothing; :meth:`values`, :meth:`times`, :meth:`streams` make no
    event; :attr:`events` (or iteration, indexing) makes each record's
    :class:`~pipelines.reading.reader.EventRead` once, when first asked."""

    __slots__ = ("_events", "_order", "_runs", "_sorted")

    def __init__(self, runs: Iterable[Run]) -> None:
        self._runs = [run for run in runs if run.records]
        self._sorted = False
        self._order: list[int] | None = None
        """Once sorted: record indexes (over the runs joined) in time order; None when the
        runs joined are in time order as they are."""
        self._events: tuple[EventRead, ...] | None = None

    def _column(self, of: Callable[[Run], Iterable[Any]]) -> list[Any]:
        """``of`` every run, joined and put in time order."""
        if not self._sorted:
            self._order = self._sort()
            self._sorted = True
        joined = list(chain.from_iterable(map(of, self._runs)))
        order = self._order
        return joined if order is None else list(map(joined.__getitem__, order))

    def _sort(self) -> list[int] | None:
        """The record indexes in time order (a stable sort over the runs joined: timsort
        merges the sorted runs in C); None when the runs do not overlap in time (they
        are then put one after the other, with no sort)."""
        runs = self._runs
        if len(runs) > 1:
            in_turn = sorted(runs, key=_first_time)
            if any(map(gt, map(_last_time, in_turn), map(_first_time, in_turn[1:]))):
                times = list(chain.from_iterable(map(_times, runs)))
                return sorted(range(len(times)), key=times.__getitem__)
            self._runs = in_turn
        return None

    def values(self) -> list[bytes]:
        """The bodies in time order (``[e.body for e in batch.events]``), without making
        the events."""
        return self._column(Run.values)

    def times(self) -> list[int]:
        """Each record's timestamp, in the same order (ascending)."""
        return self._column(_times)

    def streams(self) -> list[str]:
        """Each record's stream, in the same order."""
        return self._column(Run.streams)

    @property
    def events(self) -> tuple[EventRead, ...]:
        """The events in the same order, made once, when first asked for."""
        if self._events is None:
            self._events = tuple(self._column(Run.events))
        return self._events

    @property
    def last_time(self) -> int | None:
        """The largest timestamp in the batch (None when it is empty)."""
        return max(map(_last_time, self._runs), default=None)

    def __len__(self) -> int:
        return sum(len(run.records) for run in self._runs)

    def __iter__(self) -> Iterator[EventRead]:
        return iter(self.events)

    def __getitem__(self, index: int) -> EventRead:
        return self.events[index]

    def __repr__(self) -> str:
        streams = [run.stream for run in self._runs]
        return f"MergedBatch({len(self)} records of {streams})"


__all__ = ["MergedBatch", "Run", "times_of"]
