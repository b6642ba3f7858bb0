"""The Delta tables the watermark controller writes: names, columns, pyarrow schemas.

    >>> table_path("/data/delta", MARKS)
    '/data/delta/marks'
    >>> MARKS_ARROW.names
    ['stream', 'seq', 'time', 'upper_time', 'stream_cut', 'writers', 'emitted_at']

One definition for both sides: the Spark job (``jobs``) writes these tables
and derives its Spark schema from here; readers (``pipelines``) read them with
deltalake. Three tables live under one *delta root* (a local path or an
object-store URI such as ``s3://bucket/tidemark``):

- ``marks`` — one row per emitted watermark (Pravega's marks segment), the
  Avro ``watermark`` record's shape; ``stream_cut`` is
  ``array<struct<segment: bigint, offset: bigint>>`` sorted by segment.
- ``index`` — ``stream, seq, time, upper_time_max`` (running maximum of
  ``upper_time``), searched by binary search (``controller.index``).
- ``rejected_marks`` — the dead-letter table: ``stream, writer, reason, raw,
  kafka_partition, kafka_offset, at``; ``reason`` is one of :class:`Reason`.

``seq`` strictly increases per stream with no gaps; rows are appended by the
controller job only, exactly once per watermark. :func:`marks_row`,
:func:`index_row` and :func:`watermark_from_row` are the one mapping between
a watermark and its rows, both ways.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from schemas.records import WatermarkLike, cut_to_avro

W = TypeVar("W")

MARKS = "marks"
INDEX = "index"
REJECTED_MARKS = "rejected_marks"
TABLES = (MARKS, INDEX, REJECTED_MARKS)


class Reason:
    """Values of ``rejected_marks.reason``."""

    STALE_TIME = "stale_time"
    """The writer's noted time went backwards."""
    REGRESSED_POSITION = "regressed_position"
    """The writer's position went backwards on a segment, or to an older segment."""
    UNKNOWN_STREAM = "unknown_stream"
    """No stream of that name in the metadata store."""
    UNKNOWN_SEGMENT = "unknown_segment"
    """The position names a segment the stream never had."""
    MALFORMED = "malformed"
    """Not a decodable writer mark, or its stream differs from the record key."""
    BEYOND_COMMITTED = "beyond_committed"
    """The position stayed past the data topic's last stable offset for too long."""
    MALFORMED_KEY = "malformed_key"
    """The record key is not UTF-8; ``stream`` holds it with ``\\x..`` escapes."""
    UNKNOWN_SCHEMA = "unknown_schema"
    """Avro single-object bytes whose writer schema this build does not know
    (a newer writer: upgrade the controller)."""
    NEGATIVE_TIME = "negative_time"
    """The noted time is below zero."""
    FUTURE_TIME = "future_time"
    """The noted time is more than the stream's ``max_future_ms`` ahead of the mark's
    arrival (the marks topic's ``LogAppendTime``)."""
    IMPERSONATED = "impersonated"
    """The writer id is bound to another live writer instance (its token differs)."""

    ALL = (
        STALE_TIME,
        REGRESSED_POSITION,
        UNKNOWN_STREAM,
        UNKNOWN_SEGMENT,
        MALFORMED,
        BEYOND_COMMITTED,
        MALFORMED_KEY,
        UNKNOWN_SCHEMA,
        NEGATIVE_TIME,
        FUTURE_TIME,
        IMPERSONATED,
    )


# Delta refuses NOT NULL inside arrays, so the cut's fields are nullable.
CUT_ARROW = pa.list_(pa.struct([pa.field("segment", pa.int64()), pa.field("offset", pa.int64())]))

MARKS_ARROW = pa.schema(
    [
        pa.field("stream", pa.string(), False),
        pa.field("seq", pa.int64(), False),
        pa.field("time", pa.int64(), False),
        pa.field("upper_time", pa.int64(), False),
        pa.field("stream_cut", CUT_ARROW),
        pa.field("writers", pa.list_(pa.string())),
        pa.field("emitted_at", pa.int64()),
    ]
)

INDEX_ARROW = pa.schema(
    [
        pa.field("stream", pa.string(), False),
        pa.field("seq", pa.int64(), False),
        pa.field("time", pa.int64(), False),
        pa.field("upper_time_max", pa.int64(), False),
    ]
)

REJECTED_ARROW = pa.schema(
    [
        pa.field("stream", pa.string()),
        pa.field("writer", pa.string()),
        pa.field("reason", pa.string(), False),
        pa.field("raw", pa.binary()),
        pa.field("kafka_partition", pa.int32()),
        pa.field("kafka_offset", pa.int64()),
        pa.field("at", pa.int64()),
    ]
)

ARROW_SCHEMAS: Mapping[str, pa.Schema] = {
    MARKS: MARKS_ARROW,
    INDEX: INDEX_ARROW,
    REJECTED_MARKS: REJECTED_ARROW,
}

MARKS_COLUMNS = tuple(MARKS_ARROW.names)
INDEX_COLUMNS = tuple(INDEX_ARROW.names)


def table_path(delta_root: str, table: str) -> str:
    """``<delta root>/<table>``; the root may be a path or a URI (``s3://...``)."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; valid: {', '.join(TABLES)}")
    return f"{str(delta_root).rstrip('/')}/{table}"


def cut_from_cell(items: Iterable[Mapping[str, int]] | None) -> dict[int, int]:
    """A ``stream_cut`` cell (list of ``{segment, offset}``) -> ``{segment id: offset}``."""
    return {int(i["segment"]): int(i["offset"]) for i in items or ()}


# --- rows <-> watermarks: the one place that knows the row layout --------------------------------


def marks_row(
    watermark: WatermarkLike, writers: Sequence[str] = (), emitted_at: int = 0
) -> dict[str, Any]:
    """A watermark as a row of ``marks``."""
    return {
        "stream": watermark.stream,
        "seq": watermark.seq,
        "time": watermark.time,
        "upper_time": watermark.upper_time,
        "stream_cut": cut_to_avro(watermark.stream_cut),
        "writers": list(writers),
        "emitted_at": emitted_at,
    }


def index_row(watermark: WatermarkLike, upper_time_max: int) -> dict[str, Any]:
    """A watermark as a row of ``index``; ``upper_time_max`` is the running maximum
    of ``upper_time`` up to it (``controller.index.running_max``)."""
    return {
        "stream": watermark.stream,
        "seq": watermark.seq,
        "time": watermark.time,
        "upper_time_max": upper_time_max,
    }


def watermark_from_row(row: Mapping[str, Any], make: Callable[..., W]) -> W:
    """A ``marks`` row -> ``make(stream, time, upper_time, stream_cut, seq)`` (pass
    ``controller.model.Watermark``; ``schemas`` imports no model)."""
    return make(
        str(row["stream"]),
        int(row["time"]),
        int(row["upper_time"]),
        cut_from_cell(row["stream_cut"]),
        int(row["seq"]),
    )


__all__ = [
    "ARROW_SCHEMAS",
    "CUT_ARROW",
    "INDEX",
    "INDEX_ARROW",
    "INDEX_COLUMNS",
    "MARKS",
    "MARKS_ARROW",
    "MARKS_COLUMNS",
    "REJECTED_ARROW",
    "REJECTED_MARKS",
    "TABLES",
    "Reason",
    "cut_from_cell",
    "index_row",
    "marks_row",
    "table_path",
    "watermark_from_row",
]
