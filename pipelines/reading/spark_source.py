"""Spark's Kafka source by time: the options that read a stream from a time, or a window.

    options = kafka_source_options("shop/orders", from_time=t1, until_time=t2,
                                   bootstrap_servers="kafka:9092", delta_root="s3a://lake/tidemark")
    frame = (spark.read.format("kafka").options(**options).load()
             .where(f"timestamp >= timestamp_millis({t1}) AND timestamp < timestamp_millis({t2})"))

The options come from the Delta ``index``/``marks`` tables and Kafka's metadata alone (a
job needs no ZooKeeper): the stream's topic is named after the stream, a segment is a
partition, ``from_time``'s start cut is :func:`~tidemark.pipelines.reading.seek.stream_cut_at` and
``until_time``'s end cut is :func:`~tidemark.pipelines.reading.seek.complete_cut_at` of
``until_time - 1`` (the window is ``[from_time, until_time)``). The cuts are as coarse as
the watermarks: keep the records whose timestamp lies in the window (above), as Kafka
keeps no order by time.

Partition numbers only grow as a stream scales, and the highest one is always open, so a
partition missing from a cut is either sealed before it (numbered below the cut's highest:
nothing left to read there) or created after it (numbered above: read from its start).
With ``until_time`` the options are a batch read's (``assign``, ``startingOffsets``,
``endingOffsets`` as JSON by partition, only the partitions the window touches); without,
a streaming query's (``subscribe``, ``startingOffsets`` for every partition: Spark starts
partitions it discovers later at their earliest offset). Both read ``read_committed``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from tidemark.controller.delta.location import Root
from tidemark.controller.exceptions import UnknownStreamError
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.kafka.settings import spark_source_options
from tidemark.controller.naming import topic_for
from tidemark.pipelines.reading.exceptions import InvalidTimeRangeError, StreamNotCompleteError
from tidemark.pipelines.reading.seek import SeekIndex, check_timestamp, shared_index

EARLIEST = -2
"""Spark's JSON offset for "the partition's first record"."""
LATEST = -1
"""Spark's JSON offset for "the partition's end" (for a sealed partition: all of it)."""


@dataclass(frozen=True)
class PartitionRange:
    """Where Spark starts and stops one partition (``ending`` None: no end, streaming)."""

    partition: int
    starting: int
    ending: int | None


def _partitions_of(cut: Mapping[int, int]) -> dict[int, int]:
    """A cut keyed by segment id (``epoch << 32 | number``) as {partition: offset}."""
    return {seg_id & 0xFFFFFFFF: offset for seg_id, offset in cut.items()}


def partition_ranges(
    partitions: int, start_cut: Mapping[int, int], end_cut: Mapping[int, int] | None = None
) -> list[PartitionRange]:
    """The partitions of a ``partitions``-partition topic a read from ``start_cut`` (empty:
    the head) to ``end_cut`` (None: no end) touches, with their Spark offsets.

    Without an end every partition is listed (a streaming query names them all); with one,
    partitions sealed before the start or created after the end are left out.
    """
    start = _partitions_of(start_cut)
    end = None if end_cut is None else _partitions_of(end_cut)
    start_top = max(start, default=-1)
    ranges = []
    for p in range(partitions):
        if p in start:
            starting = start[p]
        elif p > start_top:
            starting = EARLIEST  # created after the start (or the start is the head)
        elif end is None:
            starting = LATEST  # sealed before the start: nothing to read
        else:
            continue
        if end is None:
            ranges.append(PartitionRange(p, starting, None))
            continue
        if p in end:
            ending = end[p]
        elif p > max(end, default=-1):
            continue  # created after the end
        else:
            ending = LATEST  # sealed before the end: read to its end
        ranges.append(PartitionRange(p, starting, ending))
    return ranges


def spark_offsets(topic: str, ranges: list[PartitionRange]) -> dict[str, str]:
    """``startingOffsets`` and, where every range ends, ``endingOffsets`` as Spark's JSON."""
    options = {
        "startingOffsets": json.dumps({topic: {str(r.partition): r.starting for r in ranges}})
    }
    if ranges and all(r.ending is not None for r in ranges):
        options["endingOffsets"] = json.dumps({topic: {str(r.partition): r.ending for r in ranges}})
    return options


def kafka_source_options(
    stream: str,
    from_time: object = None,
    until_time: object = None,
    *,
    bootstrap_servers: str,
    delta_root: Root = None,
    index: SeekIndex | None = None,
    partitions: int | None = None,
) -> dict[str, str]:
    """Options of Spark's Kafka source reading ``stream`` from ``from_time`` (None: its head)
    until ``until_time`` (exclusive; None: a streaming query with no end).

    :class:`StreamNotCompleteError` while no watermark has reached ``until_time - 1``;
    :class:`~tidemark.errors.UnknownStreamError` when the stream's topic does not exist.
    ``partitions`` (the topic's partition count) saves asking Kafka.
    """
    start_ms = None if from_time is None else check_timestamp(from_time)
    end_ms = None if until_time is None else check_timestamp(until_time)
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise InvalidTimeRangeError(start_ms, end_ms)
    topic = topic_for(stream)
    if partitions is None:
        partitions = StreamTopics(bootstrap_servers).partition_count(topic)
        if partitions is None:
            raise UnknownStreamError(stream)
    idx = index or shared_index(delta_root)
    start_cut: Mapping[int, int] = {}
    if start_ms is not None:
        found = idx.start(stream, start_ms)
        start_cut = {} if found is None else found.stream_cut
    end_cut = None
    if end_ms is not None:
        stop = idx.stop(stream, end_ms - 1)
        if stop is None:
            raise StreamNotCompleteError(stream, end_ms - 1)
        end_cut = stop.stream_cut
    ranges = partition_ranges(partitions, start_cut, end_cut)
    options = {
        **spark_source_options(bootstrap_servers),
        "kafka.isolation.level": "read_committed",
        "failOnDataLoss": "false",  # transaction markers leave gaps in the offsets
    }
    if end_cut is None:
        options["subscribe"] = topic
    else:
        options["assign"] = json.dumps({topic: [r.partition for r in ranges]})
    return {**options, **spark_offsets(topic, ranges)}
