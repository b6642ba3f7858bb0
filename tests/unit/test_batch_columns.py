"""A batch's events as columns, made from Kafka records without the events
(pipelines.reading.columns): the same fields the events would carry."""

from __future__ import annotations

import pytest
from confluent_kafka import Message

from pipelines.reading.columns import BatchColumns, columns_of_events, columns_of_records
from pipelines.reading.reader import EventRead, _events_of

pytestmark = pytest.mark.unit


def record(partition: int, offset: int, ts: int, value: bytes | None, **kw: object) -> Message:
    return Message(
        topic="t", partition=partition, offset=offset, timestamp=(1, ts), value=value, **kw
    )


def rows(columns: BatchColumns) -> list[EventRead]:
    return [EventRead(*fields) for fields in zip(*columns, strict=True)]


@pytest.mark.parametrize(
    "records",
    [
        [record(0, 5, 100, b"a", key=b"k"), record(0, 6, 90, b"b")],
        [record(0, 5, 100, None), record(1, 7, 101, b"c", headers=[("h", b"v"), ("h", None)])],
        [],
    ],
    ids=["one-partition", "two-partitions-no-value-headers", "empty"],
)
def test_columns_of_records_carry_what_the_events_would(records: list[Message]) -> None:
    segment_of = {0: 1 << 32, 1: (1 << 32) | 1}
    made, left = _events_of(records, segment_of, "s/x")
    assert left == []
    columns = columns_of_records(records, segment_of, "s/x")
    assert rows(columns) == made
    assert columns_of_events(made) == columns


def test_select_and_slice_pick_rows_of_every_column() -> None:
    records = [record(0, n, 100 - n, bytes([n])) for n in range(4)]
    columns = columns_of_records(records, {0: 0}, "s/x")
    assert columns.select([3, 1]).offsets == [3, 1]
    assert columns.select([3, 1]).bodies == [b"\x03", b"\x01"]
    assert columns.slice(1, 3).timestamps == [99, 98]
    assert all(len(c) == 2 for c in columns.slice(1, 3))
