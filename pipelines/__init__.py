"""What applications import: one connection, writers, readers, seek, the timeline SDK.

    from tidemark.pipelines import connect          # with connect() as tm: tm.writer(...)
    from tidemark.pipelines import EventWriter, TransactionalWriter, ReaderGroup
    from tidemark.pipelines import stream_cut_at, complete_cut_at
    from tidemark.pipelines import kafka_source_options   # Spark's Kafka source by time
    from tidemark.pipelines import complete_through, version_complete_at, read_complete

The same names are the front door, ``from tidemark import ...``.

Three parts that share nothing: ``tidemark.pipelines.writing`` (writers, marks,
timestamping), ``tidemark.pipelines.reading`` (readers, reader groups, windows, seek)
and ``tidemark.pipelines.timeline`` (scheduled messages). Names load lazily from their
modules, so importing one part does not import the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "connect": "tidemark.pipelines.connection",
    "Connection": "tidemark.pipelines.connection",
    "ConnectionConfig": "tidemark.pipelines.connection",
    "DeltaLocation": "tidemark.pipelines.connection",
    "EventWriter": "tidemark.pipelines.writing.writer",
    "BatchAck": "tidemark.pipelines.writing.writer",
    "TransactionalWriter": "tidemark.pipelines.writing.transactions",
    "Transaction": "tidemark.pipelines.writing.transactions",
    "WriterConfig": "tidemark.pipelines.writing.config",
    "StreamObserver": "tidemark.pipelines.writing.observer",
    "ObserverConfig": "tidemark.pipelines.writing.observer",
    "ReaderGroup": "tidemark.pipelines.reading.group",
    "ReaderConfig": "tidemark.pipelines.reading.config",
    "EventReader": "tidemark.pipelines.reading.reader",
    "EventRead": "tidemark.pipelines.reading.reader",
    "stream_cut_at": "tidemark.pipelines.reading.seek",
    "complete_cut_at": "tidemark.pipelines.reading.seek",
    "SeekIndex": "tidemark.pipelines.reading.seek",
    "kafka_source_options": "tidemark.pipelines.reading.spark_source",
    "complete_through": "tidemark.pipelines.reading.table_time",
    "version_complete_at": "tidemark.pipelines.reading.table_time",
    "read_complete": "tidemark.pipelines.reading.table_time",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tidemark.pipelines' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
