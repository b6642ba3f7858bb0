"""What the event-time merge holds and releases: records of several streams in time order,
their events made only when asked.

    batch = merged.read_batch(timeout_ms=100)    # pipelines.reading.merge.TimeMerge
    batch.values()                               # the bodies, in time order (no EventRead made)
    batch.times(), batch.streams()               # each record's timestamp and stream, same order
    for event in batch:                          # batch.events: each EventRead, naming its stream
        ...

A stream's records are held as :class:`Columns` of plain values (times, bodies,
segments, offsets, keys, headers), taken from a fetch at C speed, not as Kafka
records or events: objects kept alive across Python's young garbage collections
are promoted and walked again by the older ones, so records held until every
stream passed their time set off about a collection a fetch, costing the merge more
than the rest of its work; bytes and ints are not tracked by the collector at all.

A :class:`MergedBatch` holds one released run per stream and merges the runs by
time when first asked: one stable sort of record indexes by time, in C (timsort
finds the runs), so records with equal times come in the readers' order. Each
:class:`~pipelines.reading.reader.EventRead` is made only when
:attr:`MergedBatch.events` asks, as :class:`~pipelines.reading.reader.EventBatch`
does for one stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import attrgetter, ge, gt, itemgetter
from typing import Any, NamedTuple

from confluent_kafka import Message

from pipelines.reading.reader import EventRead

_record_timestamp: Callable[[Any], tuple[int, int]] = Message.timestamp
_record_value: Callable[[Any], Any] = Message.value
_record_partition: Callable[[Any], int] = Message.partition  # type: ignore[assignment]
_record_offset: Callable[[Any], int] = Message.offset  # type: ignore[assignment]
_record_key: Callable[[Any], Any] = Message.key
_record_headers: Callable[[Any], Any] = Message.headers
"""Kafka record accessors (a fetched record always has a partition and an offset)."""
_second = itemgetter(1)
_event_columns = tuple(
    attrgetter(name)
    for name in ("timestamp", "body", "segment", "offset", "routing_key", "headers")
)
_object_new = object.__new__


@dataclass(slots=True)
class Columns:
    """Records of one stream as columns of plain values, one entry a record, in order:
    ``times``, ``bodies``, ``segments`` (segment ids), ``offsets``, ``keys`` (routing
    keys) and ``headers`` (as Kafka gives them: None or a list of pairs)."""

    times: list[int]
    bodies: list[bytes]
    segments: list[int]
    offsets: list[int]
    keys: list[bytes | None]
    headers: list[Any]

    @classmethod
    def of_records(cls, records: Sequence[Any], segment_of: Mapping[int, int]) -> Columns:
        """Kafka records, each of a segment in ``segment_of`` (partition -> segment id)."""
        bodies: list[bytes | None] = list(map(_record_value, records))
        if not all(bodies):  # a record without a value: an empty body, as EventRead's
            bodies = [v or b"" for v in bodies]
        count = len(records)
        offsets: list[int] | None = None
        if len(segment_of) == 1:  # (a fetch is usually one partition's run)
            segments = [*segment_of.values()] * count
            first = _record_offset(records[0])
            if _record_offset(records[-1]) - first == count - 1:  # no gap: one range
                offsets = list(range(first, first + count))
        else:
            segments = list(map(segment_of.__getitem__, map(_record_partition, records)))
        return cls(
            list(map(_second, map(_record_timestamp, records))),
            bodies,  # type: ignore[arg-type]
            segments,
            list(map(_record_offset, records)) if offsets is None else offsets,
            list(map(_record_key, records)),
            list(map(_record_headers, records)),
        )

    @classmethod
    def of_events(cls, events: Sequence[EventRead]) -> Columns:
        """Events a reader made (a fetch it handed out as events)."""
        return cls(*(list(map(column, events)) for column in _event_columns))

    def __len__(self) -> int:
        return len(self.times)

    def _columns(self) -> list[list[Any]]:
        return [self.times, self.bodies, self.segments, self.offsets, self.keys, self.headers]

    def kept(self, keep: Iterable[bool]) -> Columns:
        """The records where ``keep`` (one flag a record) is true."""
        flags = list(keep)
        return Columns(*(list(compress(column, flags)) for column in self._columns()))

    def in_time_order(self) -> Columns:
        """These records by time (a stable sort; ``self`` when they are in order)."""
        times = self.times
        if not any(map(gt, times, times[1:])):
            return self
        order = sorted(range(len(times)), key=times.__getitem__)
        return Columns(*(list(map(column.__getitem__, order)) for column in self._columns()))

    def extend(self, other: Columns) -> None:
        for column, more in zip(self._columns(), other._columns(), strict=True):
            column.extend(more)

    def take(self, count: int) -> Columns:
        """The first ``count`` records, no longer in ``self``."""
        taken = Columns(*(column[:count] for column in self._columns()))
        for column in self._columns():
            del column[:count]
        return taken

    def events(self, stream: str) -> list[EventRead]:
        """Each record's :class:`~pipelines.reading.reader.EventRead` (of ``stream``)."""
        new = _object_new
        made: list[EventRead] = []
        append = made.append
        for time_ms, body, seg_id, offset, key, headers in zip(
            self.times,
            self.bodies,
            self.segments,
            self.offsets,
            self.keys,
            self.headers,
            strict=True,
        ):
            # EventRead(...) without its generated __init__ (object.__setattr__ per field),
            # as the reader makes its events.
            event = new(EventRead)
            fields = event.__dict__
            fields["stream"] = stream
            fields["segment"] = seg_id
            fields["offset"] = offset
            fields["timestamp"] = time_ms
            fields["body"] = body
            fields["routing_key"] = key
            fields["headers"] = () if headers is None else tuple(headers)
            append(event)
        return made


class Run(NamedTuple):
    """One stream's records released together, in time order."""

    stream: str
    records: Columns

    def times(self) -> list[int]:
        return self.records.times

    def values(self) -> list[bytes]:
        return self.records.bodies

    def streams(self) -> Iterable[str]:
        return repeat(self.stream, len(self.records))

    def events(self) -> list[EventRead]:
        return self.records.events(self.stream)

    def first_time(self) -> int:
        return self.records.times[0]

    def last_time(self) -> int:
        return self.records.times[-1]


class MergedBatch:
    """Records of several streams in timestamp order (equal times in the readers' order).

    ``len()`` costs nothing; :meth:`values`, :meth:`times`, :meth:`streams` make no
    event; :attr:`events` (or iteration, indexing) makes each record's
    :class:`~pipelines.reading.reader.EventRead` once, when first asked."""

    __slots__ = ("_events", "_order", "_runs", "_sorted")

    def __init__(self, runs: Iterable[Run]) -> None:
        self._runs = [run for run in runs if len(run.records)]
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
        merges the sorted runs in C); None when the runs do not overlap in time, not
        even at an equal time (they are then put one after the other, with no sort)."""
        runs = self._runs
        if len(runs) > 1:
            in_turn = sorted(runs, key=Run.first_time)
            if any(map(ge, map(Run.last_time, in_turn), map(Run.first_time, in_turn[1:]))):
                times = list(chain.from_iterable(map(Run.times, runs)))
                return sorted(range(len(times)), key=times.__getitem__)
            self._runs = in_turn
        return None

    def values(self) -> list[bytes]:
        """The bodies in time order (``[e.body for e in batch.events]``), without making
        the events."""
        return self._column(Run.values)

    def times(self) -> list[int]:
        """Each record's timestamp, in the same order (ascending)."""
        return self._column(Run.times)

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
        return max(map(Run.last_time, self._runs), default=None)

    def __len__(self) -> int:
        return sum(len(run.records) for run in self._runs)

    def __iter__(self) -> Iterator[EventRead]:
        return iter(self.events)

    def __getitem__(self, index: int) -> EventRead:
        return self.events[index]

    def __repr__(self) -> str:
        streams = [run.stream for run in self._runs]
        return f"MergedBatch({len(self)} records of {streams})"


__all__ = ["Columns", "MergedBatch", "Run"]
