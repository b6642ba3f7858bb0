"""tidemark — time for Kafka streams.

    import tidemark

    with tidemark.connect() as tm:      # where the services are: arguments or environment
        with tm.writer("sensor-7", "shop/orders") as writer: ...
        cut = tm.stream_cut_at("shop/orders", "-5m")

    from tidemark import EventWriter, ReaderGroup, stream_cut_at, complete_cut_at

The front door: the names an application needs load lazily from their modules, so
``import tidemark`` (and every ``tidemark.*`` import, which runs this module first)
loads no Kafka, Delta or ZooKeeper client. The subpackages: ``tidemark.controller``
(control plane and the pure watermark core), ``tidemark.pipelines`` (writers, readers,
seek, the timeline SDK), ``tidemark.schemas`` (Avro), ``tidemark.jobs`` (Spark),
``tidemark.infra`` (local services). This package itself holds the root error
(:mod:`tidemark.errors`), the names of every environment variable
(:mod:`tidemark.environment`), the one retry policy (:mod:`tidemark.retries`) -- three
leaf modules every package may import -- the
command line (:mod:`tidemark.cli`) and the time service (:mod:`tidemark.service`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The application's names are listed once, in tidemark.pipelines (whose __init__ loads
# nothing either); the root error is the one name of this package's own.
from tidemark.pipelines import __all__ as _APPLICATION_NAMES

__all__ = sorted([*_APPLICATION_NAMES, "TidemarkError"])

if TYPE_CHECKING:  # for type checkers: the names __getattr__ gives at run time
    from tidemark.errors import TidemarkError as TidemarkError
    from tidemark.pipelines.connection import Connection as Connection
    from tidemark.pipelines.connection import ConnectionConfig as ConnectionConfig
    from tidemark.pipelines.connection import DeltaLocation as DeltaLocation
    from tidemark.pipelines.connection import connect as connect
    from tidemark.pipelines.reading.config import ReaderConfig as ReaderConfig
    from tidemark.pipelines.reading.group import ReaderGroup as ReaderGroup
    from tidemark.pipelines.reading.reader import EventRead as EventRead
    from tidemark.pipelines.reading.reader import EventReader as EventReader
    from tidemark.pipelines.reading.seek import SeekIndex as SeekIndex
    from tidemark.pipelines.reading.seek import complete_cut_at as complete_cut_at
    from tidemark.pipelines.reading.seek import stream_cut_at as stream_cut_at
    from tidemark.pipelines.reading.spark_source import (
        kafka_source_options as kafka_source_options,
    )
    from tidemark.pipelines.reading.table_time import complete_through as complete_through
    from tidemark.pipelines.reading.table_time import read_complete as read_complete
    from tidemark.pipelines.reading.table_time import (
        version_complete_at as version_complete_at,
    )
    from tidemark.pipelines.writing.config import WriterConfig as WriterConfig
    from tidemark.pipelines.writing.observer import ObserverConfig as ObserverConfig
    from tidemark.pipelines.writing.observer import StreamObserver as StreamObserver
    from tidemark.pipelines.writing.transactions import Transaction as Transaction
    from tidemark.pipelines.writing.transactions import (
        TransactionalWriter as TransactionalWriter,
    )
    from tidemark.pipelines.writing.writer import BatchAck as BatchAck
    from tidemark.pipelines.writing.writer import EventWriter as EventWriter


def __getattr__(name: str) -> Any:
    if name == "TidemarkError":
        return importlib.import_module("tidemark.errors").TidemarkError
    if name in _APPLICATION_NAMES:
        return getattr(importlib.import_module("tidemark.pipelines"), name)
    raise AttributeError(f"module 'tidemark' has no attribute {name!r}")
