"""The Delta tables the watermark controller writes: names, columns, rows, reasons.

    >>> table_path("/data/delta", MARKS)
    '/data/delta/marks'
    >>> MARKS_COLUMNS[:7]
    ('stream', 'seq', 'time', 'upper_time', 'stream_cut', 'writers', 'emitted_at')

The one definition of the tables' layout: :data:`LAYOUT` gives each table's
columns with logical types, from which :mod:`tidemark.schemas.arrow` derives the
pyarrow schemas (readers, delta-rs appends) and ``tidemark.jobs.tables`` the Spark
schemas (table creation). Pure data: importing it needs neither pyarrow nor
fastavro. The controller's four tables, and the tracking's fifth, live under one
*delta root* (a local path or an object-store URI such as ``s3://bucket/tidemark``):

- ``marks`` — one row per emitted watermark (Pravega's marks segment), the
  Avro ``watermark`` record's shape; ``stream_cut`` is
  ``array<struct<segment: bigint, offset: bigint>>`` sorted by segment.
- ``index`` — ``stream, seq, time, upper_time_max`` (running maximum of
  ``upper_time``), searched by binary search (``tidemark.controller.index``), and the
  watermark's ``stream_cut`` again (as in ``marks``), so that a cold lookup
  answers from one table; rows written before that column joined read as null
  there, and their cut is read from ``marks``. A loaded index keeps only
  :data:`INDEX_SEARCH_COLUMNS`.
- ``rejected_marks`` — the dead-letter table; ``reason`` is one of :class:`Reason`.
- ``table_completeness`` — beside them, written by the tracking of derived tables
  (``tidemark.pipelines.reading.completeness``): one row per version of a tracked
  table and per time it was raised -- the time it is complete through (null: none yet,
  or unknown, then ``reason`` says why), what its writer had consumed (``consumed``,
  JSON ``{stream: {partition: next offset}}``), the writer's ``batch`` that committed it
  (null: none), the ``checkpoint``, writer id (``app_id``) and the checkpoint's ``query_id`` it was
  tracked by.
- ``laggards`` — who holds a stream's watermark back: snapshots appended when
  a stream's set of laggards changes (``tidemark.controller.laggards``); a snapshot
  with no laggard left is one row with ``writer`` null and kind ``clear``.
  Each row names the writer: id, ``instance`` token, ``first_seen`` (its
  first accepted mark) and ``last_seen`` (its latest mark's arrival).

A column added to :data:`LAYOUT` later is nullable, and the controller adds
it to an existing table when it starts (``tidemark.controller.delta.appends.evolve_tables``): rows
written before read as null there.

``seq`` strictly increases per stream with no gaps; rows are appended by the
controller job only, exactly once per watermark. :func:`marks_row`,
:func:`index_row`, :func:`rejected_row`, :func:`laggard_rows` and
:func:`watermark_from_row` are the one mapping between values and rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from tidemark.schemas.records import WatermarkLike

W = TypeVar("W")


class LaggardLike(Protocol):
    """What :func:`laggard_rows` reads of a ``tidemark.controller.laggards.Laggard``."""

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
    @property
    def instance(self) -> str | None: ...
    @property
    def first_seen_ms(self) -> int | None: ...
    @property
    def last_seen_ms(self) -> int | None: ...


MARKS = "marks"
INDEX = "index"
REJECTED_MARKS = "rejected_marks"
LAGGARDS = "laggards"
TABLES = (MARKS, INDEX, REJECTED_MARKS, LAGGARDS)
TABLE_COMPLETENESS = "table_completeness"
"""The derived tables' completeness, written by the tracking of those tables (created on
its first answer), not by the controller: not one of :data:`TABLES`."""
CLEAR = "clear"
"""``laggards.kind`` of the row that says a stream has no laggard any more."""

# --- the layout: one definition, from which the pyarrow and Spark schemas are derived -------------


class ColumnType:
    """The logical types of :data:`LAYOUT`'s columns (each reader or writer maps them)."""

    STRING = "string"
    INT32 = "int32"
    INT64 = "int64"
    BINARY = "binary"
    STRINGS = "list<string>"
    CUT = "list<struct<segment: int64, offset: int64>>"
    """A stream cut: ``[{segment, offset}, ...]`` sorted by segment; Delta refuses NOT NULL
    inside arrays, so its fields are nullable."""
    VOUCHERS = "list<struct<writer: string, instance: string>>"
    """Writer instances: ``[{writer, instance}, ...]`` sorted (nullable fields, as ``CUT``)."""

    ALL = (STRING, INT32, INT64, BINARY, STRINGS, CUT, VOUCHERS)


_T = ColumnType


@dataclass(frozen=True)
class Column:
    """One column of a table: its name, :class:`ColumnType`, nullability."""

    name: str
    type: str
    nullable: bool = True


_WATERMARK_KEY = (
    Column("stream", _T.STRING, False),
    Column("seq", _T.INT64, False),
    Column("time", _T.INT64, False),
)
"""What names a watermark: the first columns of both tables that hold watermarks."""

LAYOUT: Mapping[str, tuple[Column, ...]] = {
    MARKS: (
        *_WATERMARK_KEY,
        Column("upper_time", _T.INT64, False),
        Column("stream_cut", _T.CUT),
        Column("writers", _T.STRINGS),
        Column("emitted_at", _T.INT64),
        Column("observed", _T.STRINGS),
        Column("observed_lateness_ms", _T.INT64),
        Column("possibly_late", _T.INT64),
        Column("vouchers", _T.VOUCHERS),
    ),
    INDEX: (
        *_WATERMARK_KEY,
        Column("upper_time_max", _T.INT64, False),
        Column("stream_cut", _T.CUT),
    ),
    REJECTED_MARKS: (
        Column("stream", _T.STRING),
        Column("writer", _T.STRING),
        Column("reason", _T.STRING, False),
        Column("raw", _T.BINARY),
        Column("kafka_partition", _T.INT32),
        Column("kafka_offset", _T.INT64),
        Column("at", _T.INT64),
    ),
    LAGGARDS: (
        Column("stream", _T.STRING, False),
        Column("at", _T.INT64, False),
        Column("writer", _T.STRING),
        Column("kind", _T.STRING, False),
        Column("noted_time", _T.INT64),
        Column("watermark_time", _T.INT64),
        Column("behind_ms", _T.INT64),
        Column("since", _T.INT64),
        Column("instance", _T.STRING),
        Column("first_seen", _T.INT64),
        Column("last_seen", _T.INT64),
    ),
    TABLE_COMPLETENESS: (
        Column("table", _T.STRING, False),
        Column("version", _T.INT64, False),
        Column("complete_through", _T.INT64),
        Column("consumed", _T.STRING),
        Column("batch", _T.INT64),
        Column("reason", _T.STRING),
        Column("checkpoint", _T.STRING),
        Column("app_id", _T.STRING),
        Column("query_id", _T.STRING),
        Column("recorded_at", _T.INT64, False),
    ),
}


def layout(table: str) -> tuple[Column, ...]:
    """The columns of ``table``; ``ValueError`` naming the tables for an unknown one."""
    found = LAYOUT.get(table)
    if found is None:
        raise ValueError(f"unknown table {table!r}; valid: {', '.join(TABLES)}")
    return found


def columns(table: str) -> tuple[str, ...]:
    """The column names of ``table``, in order."""
    return tuple(c.name for c in layout(table))


MARKS_COLUMNS = columns(MARKS)
OBSERVATION_COLUMNS = ("observed", "observed_lateness_ms", "possibly_late")
"""The ``marks`` columns that say a watermark rests on observation: the observing writer
ids, the largest lateness they stated, and the records they counted as possibly late
(null on watermarks every writer noted)."""
INDEX_COLUMNS = columns(INDEX)
INDEX_SEARCH_COLUMNS = tuple(c for c in INDEX_COLUMNS if c != "stream_cut")
"""``stream, seq, time, upper_time_max``: what a search of ``index`` needs (every index
column but the wide ``stream_cut``, which is read only for the row found)."""
REJECTED_COLUMNS = columns(REJECTED_MARKS)
LAGGARDS_COLUMNS = columns(LAGGARDS)


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
    """The writer id has registrations and none names this mark's token."""
    UNREGISTERED = "unregistered"
    """The writer id has no registration in the metadata store, or the mark no instance
    token: a writer registers its token before its first mark."""
    SUPERSEDED = "superseded"
    """A registered instance's mark that arrived after a later instance registered under
    the same writer id (a restarted writer replaced it)."""
    UNKNOWN_WRITER = "unknown_writer"
    """The stream accepts marks only from its registered writer ids (``writers``),
    and this one is not among them."""

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
        UNREGISTERED,
        SUPERSEDED,
        UNKNOWN_WRITER,
    )


def on_object_store(uri: str) -> bool:
    """Whether ``uri`` names an object store (``s3://``, ``s3a://``, ``gs://``, ...), not
    a local path or ``file://``."""
    return "://" in uri and not uri.startswith("file://")


def table_path(root: str, table: str) -> str:
    """``<root>/<table>``: where the layout puts ``table`` under the tables' root (a path
    or a URI, ``s3://...``)."""
    layout(table)
    return f"{str(root).rstrip('/')}/{table}"


# --- rows <-> values: the one place that knows the row layout -----------------------------------


def cut_cell(cut: Mapping[int, int]) -> list[dict[str, int]]:
    """``{segment id: offset}`` -> a ``stream_cut`` cell, sorted by segment."""
    return [{"segment": s, "offset": o} for s, o in sorted(cut.items())]


def cut_from_cell(items: Iterable[Mapping[str, int]] | None) -> dict[int, int]:
    """A ``stream_cut`` cell (list of ``{segment, offset}``) -> ``{segment id: offset}``."""
    return {int(i["segment"]): int(i["offset"]) for i in items or ()}


def marks_row(
    watermark: WatermarkLike,
    writers: Sequence[str] = (),
    emitted_at: int = 0,
    observation: Mapping[str, Any] | None = None,
    vouchers: Sequence[tuple[str, str | None]] | None = None,
) -> dict[str, Any]:
    """A watermark as a row of ``marks``; ``observation``: the :data:`OBSERVATION_COLUMNS`
    of a watermark some writer observed rather than noted (``None``: all noted);
    ``vouchers``: the (writer id, instance token) whose accepted marks made it (``None``:
    not known, as in rows written before the column)."""
    return {
        "stream": watermark.stream,
        "seq": watermark.seq,
        "time": watermark.time,
        "upper_time": watermark.upper_time,
        "stream_cut": cut_cell(watermark.stream_cut),
        "writers": list(writers),
        "emitted_at": emitted_at,
        **{c: (observation or {}).get(c) for c in OBSERVATION_COLUMNS},
        "vouchers": None
        if vouchers is None
        else [{"writer": w, "instance": i} for w, i in sorted(vouchers, key=str)],
    }


def observation_of(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a ``marks`` row says of observation: ``{"writers", "lateness_ms",
    "possibly_late"}``, or ``None`` when every writer noted its time (or the row was
    written before the :data:`OBSERVATION_COLUMNS` joined)."""
    writers = row.get("observed")
    if not writers:
        return None
    return {
        "writers": list(writers),
        "lateness_ms": row.get("observed_lateness_ms"),
        "possibly_late": row.get("possibly_late"),
    }


def index_row(watermark: WatermarkLike, upper_time_max: int) -> dict[str, Any]:
    """A watermark as a row of ``index``; ``upper_time_max`` is the running maximum
    of ``upper_time`` up to it (``tidemark.controller.index.running_max``)."""
    return {
        "stream": watermark.stream,
        "seq": watermark.seq,
        "time": watermark.time,
        "upper_time_max": upper_time_max,
        "stream_cut": cut_cell(watermark.stream_cut),
    }


def rejected_row(
    stream: str | None,
    writer: str | None,
    reason: str,
    raw: bytes | None,
    kafka_partition: int | None,
    kafka_offset: int | None,
    at: int | None,
) -> dict[str, Any]:
    """A refused writer mark as a row of ``rejected_marks``."""
    return {
        "stream": stream,
        "writer": writer,
        "reason": reason,
        "raw": None if raw is None else bytes(raw),
        "kafka_partition": kafka_partition,
        "kafka_offset": kafka_offset,
        "at": at,
    }


def laggard_rows(stream: str, at: int, laggards: Sequence[LaggardLike]) -> list[dict[str, Any]]:
    """One snapshot of ``stream``'s laggards as rows of ``laggards`` (a ``clear`` row
    when there is none)."""
    if not laggards:
        return [{**dict.fromkeys(LAGGARDS_COLUMNS), "stream": stream, "at": at, "kind": CLEAR}]
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
            "instance": x.instance,
            "first_seen": x.first_seen_ms,
            "last_seen": x.last_seen_ms,
        }
        for x in laggards
    ]


def latest_laggards(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The last snapshot among one stream's ``laggards`` rows (empty when it is ``clear``);
    each row with every column of the layout (``None`` where a table written before
    the column existed has none)."""
    rows = list(rows)
    if not rows:
        return []
    at = max(int(r["at"]) for r in rows)
    return sorted(
        (
            {c: r.get(c) for c in LAGGARDS_COLUMNS}
            for r in rows
            if int(r["at"]) == at and r["kind"] != CLEAR
        ),
        key=lambda r: (-(r["behind_ms"] or 0), str(r["writer"])),
    )


def laggards_by_stream(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each stream's last snapshot among ``laggards`` rows of many streams (a stream
    whose last snapshot is ``clear`` is left out)."""
    by_stream: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_stream.setdefault(str(row["stream"]), []).append(row)
    found = {stream: latest_laggards(rs) for stream, rs in sorted(by_stream.items())}
    return {stream: lags for stream, lags in found.items() if lags}


def watermark_from_row(row: Mapping[str, Any], make: Callable[..., W]) -> W:
    """A ``marks`` row -> ``make(stream, time, upper_time, stream_cut, seq)`` (pass
    ``tidemark.controller.model.Watermark``; ``schemas`` imports no model)."""
    return make(
        str(row["stream"]),
        int(row["time"]),
        int(row["upper_time"]),
        cut_from_cell(row["stream_cut"]),
        int(row["seq"]),
    )


__all__ = [
    "CLEAR",
    "INDEX",
    "INDEX_COLUMNS",
    "INDEX_SEARCH_COLUMNS",
    "LAGGARDS",
    "LAGGARDS_COLUMNS",
    "LAYOUT",
    "MARKS",
    "MARKS_COLUMNS",
    "OBSERVATION_COLUMNS",
    "REJECTED_COLUMNS",
    "REJECTED_MARKS",
    "TABLES",
    "Column",
    "ColumnType",
    "LaggardLike",
    "Reason",
    "columns",
    "cut_cell",
    "cut_from_cell",
    "index_row",
    "laggard_rows",
    "laggards_by_stream",
    "latest_laggards",
    "layout",
    "marks_row",
    "observation_of",
    "rejected_row",
    "table_path",
    "watermark_from_row",
]
