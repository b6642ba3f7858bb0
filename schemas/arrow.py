"""The pyarrow schemas of the Delta tables named in :mod:`schemas.tables`.

    >>> MARKS_ARROW.names
    ['stream', 'seq', 'time', 'upper_time', 'stream_cut', 'writers', 'emitted_at']

Kept apart from :mod:`schemas.tables` so that importing the table names, the
rejection reasons or the row mapping does not import pyarrow (and numpy):
a command that never touches a Delta table (``tidemark read`` from the head)
starts faster. ``schemas.tables`` still offers these names, importing this
module on first use.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from schemas.tables import INDEX, INDEX_COLUMNS, LAGGARDS, MARKS, MARKS_COLUMNS, REJECTED_MARKS

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

LAGGARDS_ARROW = pa.schema(
    [
        pa.field("stream", pa.string(), False),
        pa.field("at", pa.int64(), False),
        pa.field("writer", pa.string()),
        pa.field("kind", pa.string(), False),
        pa.field("noted_time", pa.int64()),
        pa.field("watermark_time", pa.int64()),
        pa.field("behind_ms", pa.int64()),
        pa.field("since", pa.int64()),
    ]
)

ARROW_SCHEMAS: Mapping[str, pa.Schema] = {
    MARKS: MARKS_ARROW,
    INDEX: INDEX_ARROW,
    REJECTED_MARKS: REJECTED_ARROW,
    LAGGARDS: LAGGARDS_ARROW,
}

if (tuple(MARKS_ARROW.names), tuple(INDEX_ARROW.names)) != (MARKS_COLUMNS, INDEX_COLUMNS):
    raise ImportError("schemas.arrow and schemas.tables disagree on the table columns")

__all__ = [
    "ARROW_SCHEMAS",
    "CUT_ARROW",
    "INDEX_ARROW",
    "LAGGARDS_ARROW",
    "MARKS_ARROW",
    "REJECTED_ARROW",
]
