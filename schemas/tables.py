"""The Delta tables the watermark controller writes: names, columns, rows, reasons.

    >>> table_path("/data/delta", MARKS)
    '/data/delta/marks'
    >>> MARKS_COLUMNS
    ('stream', 'seq', 'time', 'upper_time', 'stream_cut', 'writers', 'emitted_at')

One definition for both sides: the Spark job (``jobs``) writes these tables
and derives its Spark schema from here (the pyarrow schemas are in
:mod:`schemas.arrow`, imported on first use of ``MARKS_ARROW`` etc. here);
readers (``pipelines``) read them with deltalake. Three tables live under
one *delta root* (a local path or an object-store URI such as
``s3://bucket/tidemark``):

- ``marks`` — one row per emitted watermark (Pravega's marks segment), the
  Avro ``watermark`` record's shape; ``stream_cut`` is
  ``array<struct<segment: bigint, offset: bigint>>`` sorted by segment.
- ``index`` — ``stream, seq, time, upper_time_max`` (running maximum of
  ``upper_time``), searched by binary search (``controller.index``).
- ``rejected_marks`` — the dead-letter table: ``stream, writer, reason, raw,
  kafka_partition, kafka_offset, at``; ``reason`` is one of :class:`Reason`.
- ``laggards`` — who holds a stream's watermark back: snapshots ``stream, at,
  writer, kind, noted_time, watermark_time, behind_ms, since`` appended when
  a stream's set of laggards changes (``controller.laggards``); a snapshot
  with no laggard left is one row with ``writer`` null and kind ``clear``.

``seq`` strictly increases per stream with no gaps; rows are appended by the
controller job only, exactly once per watermark. :func:`marks_row`,
:func:`index_row` and :func:`watermark_from_row` are the one mapping between
a watermark and its rows, both ways.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:  # at run time: the arrow names through __getattr__ below
    from schemas.arrow import (
        ARROW_SCHEMAS,
        CUT_ARROW,
        INDEX_ARROW,
        LAGGARDS_ARROW,
        MARKS_ARROW,
        REJECTED_ARROW,
    )
    from schemas.records import WatermarkLike

W = TypeVar("W")


class LaggardLike(Protocol):
    """What :func:`laggard_rows` reads of a ``controller.laggards.Laggard``."""

    @property
    def writer(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def noted_time(self) -> int: ...
    @property
    def watermark_time(self) -> int | None: ...
    @property
    def behind_ms(self) -> int: ...
    @property
    def since_ms(self) -> int | None: ...


MARKS = "marks"
INDEX = "index"
REJECTED_MARKS = "rejected_marks"
LAGGARDS = "laggards"
TABLES = (MARKS, INDEX, REJECTED_MARKS, LAGGARDS)
CLEAR = "clear"
"""``laggards.kind`` of the row that says a stream has no laggard any more."""


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


MARKS_COLUMNS = ("stream", "seq", "time", "upper_time", "stream_cut", "writers", "emitted_at")
INDEX_COLUMNS = ("stream", "seq", "time", "upper_time_max")

_ARROW_NAMES = frozenset(
    {"ARROW_SCHEMAS", "CUT_ARROW", "INDEX_ARROW", "LAGGARDS_ARROW", "MARKS_ARROW", "REJECTED_ARROW"}
)


def __getattr__(name: str) -> Any:
    """The pyarrow schemas (``MARKS_ARROW``, ``ARROW_SCHEMAS``, ...) live in
    :mod:`schemas.arrow`; imported on first use so this module needs no pyarrow."""
    if name in _ARROW_NAMES:
        from schemas import arrow

        return getattr(arrow, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    from schemas.records import cut_to_avro  # not at import: it needs fastavro

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


def laggard_rows(stream: str, at: int, laggards: Sequence[LaggardLike]) -> list[dict[str, Any]]:
    """One snapshot of ``stream``'s laggards as rows of ``laggards`` (a ``clear`` row
    when there is none)."""
    if not laggards:
        return [
            {
                "stream": stream,
                "at": at,
                "writer": None,
                "kind": CLEAR,
                "noted_time": None,
                "watermark_time": None,
                "behind_ms": None,
                "since": None,
            }
        ]
    return [
        {
            "stream": stream,
            "at": at,
            "writer": x.writer,
            "kind": x.kind,
            "noted_time": x.noted_time,
            "watermark_time": x.watermark_time,
            "behind_ms": x.behind_ms,
            "since": x.since_ms,
        }
        for x in laggards
    ]


def latest_laggards(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The last snapshot among one stream's ``laggards`` rows (empty when it is ``clear``)."""
    rows = list(rows)
    if not rows:
        return []
    at = max(int(r["at"]) for r in rows)
    return sorted(
        (dict(r) for r in rows if int(r["at"]) == at and r["kind"] != CLEAR),
        key=lambda r: (-(r["behind_ms"] or 0), str(r["writer"])),
    )


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
    "CLEAR",
    "CUT_ARROW",
    "INDEX",
    "INDEX_ARROW",
    "INDEX_COLUMNS",
    "LAGGARDS",
    "LAGGARDS_ARROW",
    "MARKS",
    "MARKS_ARROW",
    "MARKS_COLUMNS",
    "REJECTED_ARROW",
    "REJECTED_MARKS",
    "TABLES",
    "LaggardLike",
    "Reason",
    "cut_from_cell",
    "index_row",
    "laggard_rows",
    "latest_laggards",
    "marks_row",
    "table_path",
    "watermark_from_row",
]
