"""What applications import: writers, readers, seek, the timeline SDK.

    from pipelines import EventWriter, TransactionalWriter, ReaderGroup
    from pipelines import stream_cut_at, complete_cut_at

Names load lazily from their modules (``pipelines.writer``,
``pipelines.transactions``, ``pipelines.reader_group``, ``pipelines.seek``, ...),
so importing one part does not import the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EventWriter": "pipelines.writer",
    "BatchAck": "pipelines.writer",
    "TransactionalWriter": "pipelines.transactions",
    "Transaction": "pipelines.transactions",
    "WriterConfig": "pipelines.config",
    "ReaderGroup": "pipelines.reader_group",
    "ReaderConfig": "pipelines.reader_group",
    "EventReader": "pipelines.reader",
    "EventRead": "pipelines.reader",
    "stream_cut_at": "pipelines.seek",
    "complete_cut_at": "pipelines.seek",
    "SeekIndex": "pipelines.seek",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipelines' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
