"""The controller's Delta tables: names, columns, schemas, and reading them without Spark.

    >>> table_path("/data/delta", MARKS)
    '/data/delta/marks'
    >>> [f.name for f in MARKS_ARROW]
    ['stream', 'seq', 'time', 'upper_time', 'stream_cut', 'writers', 'emitted_at']

    marks = read_watermarks("/data/delta", "shop/orders")    # deltalake, no Spark
    rows = read_index_rows("/data/delta", "shop/orders")     # IndexRow with stream_cut

Four tables live under one *delta root* (a local path or an object-store
URI such as ``s3://bucket/tidemark``):

- ``marks`` — one row per emitted watermark (Pravega's marks segment):
  ``stream, seq, time, upper_time, stream_cut, writers, emitted_at``;
  ``stream_cut`` is ``array<struct<segment: bigint, offset: bigint>>``
  sorted by segment (the Avro ``watermark`` schema's shape; delta-rs and
  Spark both read it).
- ``index`` — ``stream, seq, time, upper_time_max`` (running maximum of
  ``upper_time``), searched by binary search (``controller.index``).
- ``rejected_marks`` — the dead-letter table: ``stream, writer, reason, raw,
  kafka_partition, kafka_offset, at``.
- ``laggards`` — snapshots of the writers holding a stream back, appended
  when they change: ``stream, at, writer, kind (lagging | slowest | clear),
  noted_time, watermark_time, behind_ms, since`` (``controller.laggards``).

``seq`` strictly increases per stream and has no gaps; rows are appended by
the controller job only, exactly once per watermark. The names, columns and
pyarrow schemas are defined once in :mod:`schemas.tables` (readers in
``pipelines`` share them); this module adds the Spark schema (pyspark loads
lazily in :func:`spark_schema`) and re-exports the one deltalake reader
(``pipelines.reading.watermark_tables``) for jobs, tools and tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines.reading.watermark_tables import read_index_rows, read_table, read_watermarks
from schemas.tables import (
    ARROW_SCHEMAS,
    INDEX,
    INDEX_ARROW,
    LAGGARDS,
    MARKS,
    MARKS_ARROW,
    REJECTED_ARROW,
    REJECTED_MARKS,
    TABLES,
    Reason,
    cut_from_cell,
    table_path,
)

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

cut_from_arrow = cut_from_cell


def spark_schema(table: str) -> StructType:
    """The Spark schema of ``table`` (imports pyspark)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    cut = ArrayType(
        StructType([StructField("segment", LongType()), StructField("offset", LongType())])
    )  # Delta refuses NOT NULL inside arrays
    schemas = {
        MARKS: StructType(
            [
                StructField("stream", StringType(), False),
                StructField("seq", LongType(), False),
                StructField("time", LongType(), False),
                StructField("upper_time", LongType(), False),
                StructField("stream_cut", cut),
                StructField("writers", ArrayType(StringType())),
                StructField("emitted_at", LongType()),
            ]
        ),
        INDEX: StructType(
            [
                StructField("stream", StringType(), False),
                StructField("seq", LongType(), False),
                StructField("time", LongType(), False),
                StructField("upper_time_max", LongType(), False),
            ]
        ),
        REJECTED_MARKS: StructType(
            [
                StructField("stream", StringType()),
                StructField("writer", StringType()),
                StructField("reason", StringType(), False),
                StructField("raw", BinaryType()),
                StructField("kafka_partition", IntegerType()),
                StructField("kafka_offset", LongType()),
                StructField("at", LongType()),
            ]
        ),
        LAGGARDS: StructType(
            [
                StructField("stream", StringType(), False),
                StructField("at", LongType(), False),
                StructField("writer", StringType()),
                StructField("kind", StringType(), False),
                StructField("noted_time", LongType()),
                StructField("watermark_time", LongType()),
                StructField("behind_ms", LongType()),
                StructField("since", LongType()),
            ]
        ),
    }
    if table not in schemas:
        raise ValueError(f"unknown table {table!r}; valid: {', '.join(TABLES)}")
    return schemas[table]


__all__ = [
    "ARROW_SCHEMAS",
    "INDEX",
    "INDEX_ARROW",
    "LAGGARDS",
    "MARKS",
    "MARKS_ARROW",
    "REJECTED_ARROW",
    "REJECTED_MARKS",
    "TABLES",
    "Reason",
    "cut_from_arrow",
    "read_index_rows",
    "read_table",
    "read_watermarks",
    "spark_schema",
    "table_path",
]
