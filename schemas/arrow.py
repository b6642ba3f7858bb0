"""The pyarrow schemas of the Delta tables, derived from :data:`tidemark.schemas.tables.LAYOUT`.

    >>> MARKS_ARROW.names[:7]
    ['stream', 'seq', 'time', 'upper_time', 'stream_cut', 'writers', 'emitted_at']

Apart from :mod:`tidemark.schemas.tables` so that importing the table names, the
rejection reasons or the row mapping does not import pyarrow (and numpy): a
command that never touches a Delta table (``tidemark read`` from the head)
starts faster. This module imports :mod:`tidemark.schemas.tables`, never the reverse.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from tidemark.schemas.tables import (
    INDEX,
    LAGGARDS,
    LAYOUT,
    MARKS,
    REJECTED_MARKS,
    Column,
    ColumnType,
)

CUT_ARROW = pa.list_(pa.struct([pa.field("segment", pa.int64()), pa.field("offset", pa.int64())]))

_TYPES: Mapping[str, pa.DataType] = {
    ColumnType.STRING: pa.string(),
    ColumnType.INT32: pa.int32(),
    ColumnType.INT64: pa.int64(),
    ColumnType.BINARY: pa.binary(),
    ColumnType.STRINGS: pa.list_(pa.string()),
    ColumnType.CUT: CUT_ARROW,
    ColumnType.VOUCHERS: pa.list_(
        pa.struct([pa.field("writer", pa.string()), pa.field("instance", pa.string())])
    ),
}


def arrow_field(column: Column) -> pa.Field:
    """One column of the layout as a pyarrow field."""
    return pa.field(column.name, _TYPES[column.type], column.nullable)


ARROW_SCHEMAS: Mapping[str, pa.Schema] = {
    table: pa.schema([arrow_field(c) for c in cols]) for table, cols in LAYOUT.items()
}
MARKS_ARROW = ARROW_SCHEMAS[MARKS]
INDEX_ARROW = ARROW_SCHEMAS[INDEX]
REJECTED_ARROW = ARROW_SCHEMAS[REJECTED_MARKS]
LAGGARDS_ARROW = ARROW_SCHEMAS[LAGGARDS]

__all__ = [
    "ARROW_SCHEMAS",
    "CUT_ARROW",
    "INDEX_ARROW",
    "LAGGARDS_ARROW",
    "MARKS_ARROW",
    "REJECTED_ARROW",
    "arrow_field",
]
