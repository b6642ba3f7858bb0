"""What the event-time merge holds and releases: records of several streams in time order,
their events made only when asked.

    batch = merged.read_batch(timeout_ms=100)    # tidemark.pipelines.reading.merge.TimeMerge
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

A :class:`MergedBatch` holds the released runs (each a stream's fetch, or part of
one, sorted by time; a stream's runs in its order) and merges them by time when a
column is first asked: one stable sort of the column keyed by time, in C (timsort
finds the runs), so records with equal times come in the readers' order. A merge
made ``bodies_only`` takes each record's time and body alone. Each
:class:`~tidemark.pipelines.reading.reader.EventRead` is made only when
:attr:`MergedBatch.events` asks, as :class:`~tidemark.pipelines.reading.reader.EventBatch`
does for one stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, compress, repeat
from operator import attrgetter, ge, itemgetter
from typing import Any, NamedTuple

from confluent_kafka import Message

from tidemark.pipelines.reading.exceptions import ReaderConfigError
from tidemark.pipelines.reading.reader import EventRead

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
_event_time = attrgetter("timestamp")
_event_body = attrgetter("body")
_object_new = object.__new__
_NOT_TAKEN: list[Any] = []
"""The columns of records taken ``full`` False (segments, offsets, keys, headers): one
shared empty list, never changed (such records' columns are never extended, cut or
read, see :meth:`Columns._columns`), not four new ones a fetch: each list is an
object the garbage collector counts, and a merge's held fetches are what set off its
collections."""
_NO_COLUMNS = (_NOT_TAKEN,) * 4


@dataclass(slots=True)
class Columns:
    """Records of one stream as columns of plain values, one entry a record, in order:
    ``times``, ``bodies``, ``segments`` (segment ids), ``offsets``, ``keys`` (routing
    keys) and ``headers`` (as Kafka gives them: None or a list of pairs).

    ``full`` False: times and bodies only, the other columns empty (taken for a merge
    made ``bodies_only``: a record's key and headers cost as much to take from Kafka's
    record as its body, and a bodies-only read never asks them); such records make
    no :class:`~tidemark.pipelines.reading.reader.EventRead`."""

    times: list[int]
    bodies: list[bytes]
    segments: list[int]
    offsets: list[int]
    keys: list[bytes | None]
    headers: list[Any]
    full: bool = field(default=True, kw_only=True)

    @classmethod
    def of_records(
        cls, records: Sequence[Any], segment_of: Mapping[int, int], *, full: bool = True
    ) -> Columns:
        """Kafka records, each of a segment in ``segment_of`` (partition -> segment id);
        ``full`` False: their times and bodies only."""
        bodies: list[bytes | None] = list(map(_record_value, records))
        if not all(bodies):  # a record without a value: an empty body, as EventRead's
            bodies = [v or b"" for v in bodies]
        times = list(map(_second, map(_record_timestamp, records)))
        if not full:
            return cls(times, bodies, *_NO_COLUMNS, full=False)  # type: ignore[arg-type]
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
            times,
            bodies,  # type: ignore[arg-type]
            segments,
            list(map(_record_offset, records)) if offsets is None else offsets,
            list(map(_record_key, records)),
            list(map(_record_headers, records)),
        )

    @classmethod
    def of_events(cls, events: Sequence[EventRead], *, full: bool = True) -> Columns:
        """Events a reader made (a fetch it handed out as events); ``full`` False: their
        times and bodies only."""
        if not full:
            times = list(map(_event_time, events))
            return cls(times, list(map(_event_body, events)), *_NO_COLUMNS, full=False)
        return cls(*(list(map(column, events)) for column in _event_columns))

    def __len__(self) -> int:
        return len(self.times)

    def _columns(self) -> list[list[Any]]:
        if not self.full:
            return [self.times, self.bodies]
        return [self.times, self.bodies, self.segments, self.offsets, self.keys, self.headers]

    def _of(self, columns: Iterable[list[Any]]) -> Columns:
        """Records of these columns (as :meth:`_columns` gives them), as full as ``self``."""
        if not self.full:
            times, bodies = columns
            return Columns(times, bodies, *_NO_COLUMNS, full=False)
        return Columns(*columns)

    def kept(self, keep: Iterable[bool]) -> Columns:
        """The records where ``keep`` (one flag a record) is true."""
        flags = list(keep)
        return self._of([list(compress(column, flags)) for column in self._columns()])

    def in_time_order(self) -> Columns:
        """These records by time (a stable sort; ``self`` when they are in order)."""
        times = self.times
        if sorted(times) == times:  # (in C: a sort finding one run, equal items identical)
            return self
        order = sorted(range(len(times)), key=times.__getitem__)
        return self._of([list(map(column.__getitem__, order)) for column in self._columns()])

    def extend(self, other: Columns) -> None:
        for column, more in zip(self._columns(), other._columns(), strict=True):
            column.extend(more)

    def take(self, count: int) -> Columns:
        """The first ``count`` records, no longer in ``self``."""
        columns = self._columns()
        taken = self._of([column[:count] for column in columns])
        for column in columns:
            del column[:count]
        return taken

    def events(self, stream: str) -> list[EventRead]:
        """Each record's :class:`~tidemark.pipelines.reading.reader.EventRead` (of ``stream``)."""
        if not self.full:
            raise ReaderConfigError(
                "records taken for a bodies_only merge make no events (ask values(), times()"
                " or streams(), or make the merge without bodies_only)"
            )
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
    :class:`~tidemark.pipelines.reading.reader.EventRead` once, when first asked."""

    __slots__ = ("_events", "_overlap", "_runs")

    def __init__(self, runs: Iterable[Run]) -> None:
        self._runs = [run for run in runs if len(run.records)]
        self._overlap: bool | None = None
        """Whether the runs overlap in time (each column is then sorted by time); None
        until first asked. Runs that do not are put one after the other, by time."""
        self._events: tuple[EventRead, ...] | None = None

    def _column(self, of: Callable[[Run], Iterable[Any]]) -> list[Any]:
        """``of`` every run, joined and put in time order: a stable sort of the joined
        column keyed by the joined times (each record's key is the next time: CPython
        takes an item's key once, in the list's order), in C; timsort merges the
        runs. (Sorting record indexes, then taking each column's items by index,
        cost ~1.5x as much a column.)"""
        overlap = self._overlaps()  # (first: runs that do not are put in time order)
        joined = list(chain.from_iterable(map(of, self._runs)))
        if overlap:
            joined.sort(key=partial(next, chain.from_iterable(map(Run.times, self._runs))))
        return joined

    def _overlaps(self) -> bool:
        """Whether the runs overlap in time, even at an equal time; runs that do not are
        put in time order first (one after the other, no sort)."""
        overlap = self._overlap
        if overlap is None:
            runs = self._runs
            overlap = False
            if len(runs) > 1:
                in_turn = sorted(runs, key=Run.first_time)
                overlap = any(
                    map(ge, map(Run.last_time, in_turn), map(Run.first_time, in_turn[1:]))
                )
                if not overlap:
                    self._runs = in_turn
            self._overlap = overlap
        return overlap

    def values(self) -> list[bytes]:
        """The bodies in time order (``[e.body for e in batch.events]``), without making
        the events."""
        return self._column(Run.values)

    def times(self) -> list[int]:
        """Each record's timestamp, in the same order (ascending)."""
        overlap = self._overlaps()
        times = list(chain.from_iterable(map(Run.times, self._runs)))
        if overlap:
            times.sort()  # (by time, each its own key)
        return times

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
