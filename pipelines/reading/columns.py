"""A batch of events as columns: one list per field, made without making the events.

    cols = batch.columns()                  # EventBatch.columns()
    cols.timestamps[0], cols.bodies[0]      # the first event's time and body

Each column comes from the Kafka records by one C-level ``map`` over them,
and holds only ints, bytes, ``None`` and tuples: a consumer that keeps events
for a while (the event-time merge holds records until every stream has
passed their time) keeps a few lists of plain values per batch, which
Python's garbage collector never walks record by record, instead of a
tracked object per record that each collection walks and promotes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple, cast

from confluent_kafka import Message

Header = tuple[str, bytes | None]


class BatchColumns(NamedTuple):
    """The fields of a batch's events, a list each, in ``EventRead``'s field order (so
    ``zip(*columns)`` gives each event's fields)."""

    streams: list[str]
    segments: list[int]
    offsets: list[int]
    timestamps: list[int]
    bodies: list[bytes]
    keys: list[bytes | None]
    headers: list[tuple[Header, ...]]

    @property
    def lists(self) -> tuple[list[Any], ...]:
        """The columns typed alike, for what is done to each of them."""
        return cast("tuple[list[Any], ...]", self)

    def select(self, keep: Iterable[int]) -> BatchColumns:
        """The rows at the indexes ``keep``, in that order."""
        at = list(keep)
        return BatchColumns(*(list(map(column.__getitem__, at)) for column in self.lists))

    def slice(self, start: int, stop: int) -> BatchColumns:
        """Rows ``start`` to ``stop`` (exclusive)."""
        return BatchColumns(*(column[start:stop] for column in self.lists))


_record_timestamp = itemgetter(1)
_record_partition = Message.partition
_no_headers: tuple[Header, ...] = ()


def columns_of_records(
    records: Sequence[Any], segment_of: Mapping[int, int], stream: str
) -> BatchColumns:
    """The columns of Kafka records of ``stream``, each of a partition in ``segment_of``
    (partition -> segment id) and none an error (an empty body where a record has no
    value, as ``EventRead`` has)."""
    partitions: list[Any] = list(map(_record_partition, records))
    if partitions and partitions.count(partitions[0]) == len(partitions):  # (the usual case)
        segments = [segment_of[partitions[0]]] * len(partitions)
    else:
        segments = list(map(segment_of.__getitem__, partitions))
    bodies: list[Any] = list(map(Message.value, records))
    if not all(bodies):
        bodies = [b or b"" for b in bodies]
    headers: list[Any] = list(map(Message.headers, records))
    if any(headers):
        headers = [_no_headers if h is None else tuple(h) for h in headers]
    else:
        headers = [_no_headers] * len(headers)
    offsets: list[Any] = list(map(Message.offset, records))  # (never None for a record)
    return BatchColumns(
        [stream] * len(partitions),
        segments,
        offsets,
        list(map(_record_timestamp, map(Message.timestamp, records))),
        bodies,
        list(map(Message.key, records)),
        headers,
    )


_event_fields = tuple(
    attrgetter(name)
    for name in ("stream", "segment", "offset", "timestamp", "body", "routing_key", "headers")
)


def columns_of_events(events: Sequence[Any]) -> BatchColumns:
    """The columns of ``EventRead``\\ s (or anything with their fields)."""
    return BatchColumns(*(list(map(field, events)) for field in _event_fields))


__all__ = ["BatchColumns", "columns_of_events", "columns_of_records"]
