"""The controller's Delta tables for Spark: the Spark schemas, derived from the one layout.

    >>> spark_schema(MARKS).fieldNames()[:7]      # doctest: +SKIP
    ['stream', 'seq', 'time', 'upper_time', 'stream_cut', 'writers', 'emitted_at']

The tables (``marks``, ``index``, ``rejected_marks``, ``laggards``), their
columns and rows are defined once in :mod:`tidemark.schemas.tables` (``LAYOUT``); the
pyarrow schemas are derived from it in :mod:`tidemark.schemas.arrow`, the Spark ones
here (only ``jobs`` imports pyspark). The names and the one deltalake reader
(:mod:`tidemark.controller.delta.tables`) are re-exported for jobs, tools
and tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidemark.controller.delta.tables import read_table, read_watermarks
from tidemark.schemas.arrow import ARROW_SCHEMAS, INDEX_ARROW, MARKS_ARROW, REJECTED_ARROW
from tidemark.schemas.tables import (
    INDEX,
    LAGGARDS,
    MARKS,
    REJECTED_MARKS,
    TABLES,
    ColumnType,
    Reason,
    cut_from_cell,
    layout,
    table_path,
)

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

cut_from_arrow = cut_from_cell


def _spark_types() -> Mapping[str, DataType]:
    # pyspark is imported here, not at module level: readers and tools import this
    # module for the names above and must not start a JVM-bound import.
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    cut = StructType([StructField("segment", LongType()), StructField("offset", LongType())])
    voucher = StructType(
        [StructField("writer", StringType()), StructField("instance", StringType())]
    )
    return {
        ColumnType.STRING: StringType(),
        ColumnType.INT32: IntegerType(),
        ColumnType.INT64: LongType(),
        ColumnType.BINARY: BinaryType(),
        ColumnType.STRINGS: ArrayType(StringType()),
        ColumnType.CUT: ArrayType(cut),
        ColumnType.VOUCHERS: ArrayType(voucher),
    }


def spark_schema(table: str) -> StructType:
    """The Spark schema of ``table`` (imports pyspark)."""
    from pyspark.sql.types import StructField, StructType  # pyspark only when asked

    types = _spark_types()
    return StructType([StructField(c.name, types[c.type], c.nullable) for c in layout(table)])


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
    "read_table",
    "read_watermarks",
    "spark_schema",
    "table_path",
]
