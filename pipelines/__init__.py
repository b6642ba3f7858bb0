"""What applications import: writers, readers, seek, the timeline SDK.

    from pipelines import EventWriter, TransactionalWriter, ReaderGroup
    from pipelines import stream_cut_at, complete_cut_at
    from pipelines import kafka_source_options   # Spark's Kafka source by time

Three parts that share nothing: ``pipelines.writing`` (writers, marks,
timestamping), ``pipelines.reading`` (readers, reader groups, windows, seek)
and ``pipelines.timeline`` (scheduled messages). Names load lazily from their
modules, so importing one part does not import the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EventWriter": "pipelines.writing.writer",
    "BatchAck": "pipelines.writing.writer",
    "TransactionalWriter": "pipelines.writing.transactions",
    "Transaction": "pipelines.writing.transactions",
    "WriterConfig": "pipelines.writing.config",
    "ReaderGroup": "pipelines.reading.group",
    "ReaderConfig": "pipelines.reading.config",
    "EventReader": "pipelines.reading.reader",
    "EventRead": "pipelines.reading.reader",
    "stream_cut_at": "pipelines.reading.seek",
    "complete_cut_at": "pipelines.reading.seek",
    "SeekIndex": "pipelines.reading.seek",
    "kafka_source_options": "pipelines.reading.spark_source",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipelines' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
