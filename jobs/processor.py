"""The per-stream stateful processor of the controller's query (``transformWithStateInPandas``).

    out = (marks.withColumn("slot", expr(slot_expression(slots))).groupBy("slot")
                .transformWithStateInPandas(ControllerProcessor(workflow_settings),
                                            OUTPUT_SCHEMA, "Append", "ProcessingTime"))

Key = the stream's slot (:mod:`tidemark.jobs.slots`). State = one ``ValueState``
holding the slot's streams' :class:`~tidemark.jobs.workflow.StreamState` as JSON
(writer marks, generation state, running max of ``upper_time``, the due
time), so its shape can evolve without a state-schema migration.

No Spark timers: ``ProcessingTime`` mode only gives the handler the batch's
timestamp (the clock, reused when a batch is re-run). Every call that
touched a slot reports the slot's earliest due time in a ``due`` row (``at``
``None``: nothing pending); the driver (:mod:`tidemark.jobs.due`) produces a due record
for the slot at that time, which makes the micro-batch that runs those
cycles. So an idle controller runs no micro-batch at all (with
``spark.sql.streaming.noDataMicroBatches.enabled=false``, which the job sets).
Output rows carry a ``kind``: ``watermark``, ``rejected``, ``laggard`` or
``due``, and that kind's typed fields (:data:`OUTPUT_SCHEMA`); :mod:`tidemark.jobs.sink`
splits them into the Delta tables. A watermark's row is made here, once, by the tables'
row converters (:func:`~tidemark.schemas.tables.marks_row`,
:func:`~tidemark.schemas.tables.index_row`), and keeps that shape to the Delta append.
Its ``noted_at`` (the Kafka timestamp of the newest mark it was made of) goes to no
table: the metrics measure freshness from it.

Why the pandas flavour: with a handful of slot keys per batch, a call's
input arrives as whole pandas frames (Arrow converts them column by column
in C) and its outputs leave as one frame per call; the row-based
``transformWithState`` of PySpark 4.1 builds every input row from Arrow
scalars one cell at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from tidemark.jobs.config import WorkflowSettings
from tidemark.jobs.lookups import worker_committed, worker_registrations, worker_streams
from tidemark.jobs.slot_keys import is_due_key, is_reevaluation
from tidemark.jobs.slots import SlotState, run_slot
from tidemark.jobs.tables import spark_schema
from tidemark.jobs.worker_setup import keep_zip_directories
from tidemark.jobs.workflow import Emitted, LaggardRows, MarkInput, Output, Rejected, StreamWorkflow
from tidemark.schemas.mark_input import Undecodable, decode_stream_key, printable_key
from tidemark.schemas.tables import (
    INDEX,
    LAGGARDS,
    MARKS,
    OBSERVATION_COLUMNS,
    REJECTED_MARKS,
    index_row,
    marks_row,
    rejected_row,
)

log = logging.getLogger(__name__)

WATERMARK = "watermark"
REJECTED = "rejected"
LAGGARD = "laggard"
DUE = "due"

KINDS = (WATERMARK, REJECTED, LAGGARD, DUE)


def _output_schema() -> StructType:
    """``kind`` and one struct per kind, named by it: a watermark's ``marks`` columns with
    ``index``'s running maximum and ``noted_at``, the ``rejected_marks`` and ``laggards``
    rows, a due slot and time. Each is its table's row as the layout types it."""
    marks, index = spark_schema(MARKS), spark_schema(INDEX)
    watermark = [
        *marks.fields,
        *(f for f in index.fields if f.name not in marks.fieldNames()),
        StructField("noted_at", LongType()),
    ]
    due = [StructField("slot", IntegerType()), StructField("at", LongType())]
    of_kind = {
        WATERMARK: watermark,
        REJECTED: spark_schema(REJECTED_MARKS).fields,
        LAGGARD: spark_schema(LAGGARDS).fields,
        DUE: due,
    }
    # Every field nullable: the driver's collect sees a null struct's fields as nulls.
    return StructType(
        [
            StructField("kind", StringType(), False),
            *(
                StructField(kind, StructType([StructField(f.name, f.dataType) for f in fields]))
                for kind, fields in of_kind.items()
            ),
        ]
    )


OUTPUT_SCHEMA = _output_schema()
"""What the operator emits: a row's ``kind``, and that kind's fields in the struct of its
name (the other kinds' are null). A ``watermark`` holds its ``marks`` and ``index`` rows
(:func:`tidemark.jobs.sink.split_rows` picks each table's columns) and ``noted_at``
(freshness, for the metrics); ``rejected`` and ``laggard`` are their tables' rows; ``due``
is a slot's earliest due time. Five columns, not one per field: the Python worker
converts each output column of each call (one call per slot) to Arrow on its own."""
COLUMNS = tuple(OUTPUT_SCHEMA.fieldNames())
"""The fields of an output row as the sink, the due scheduler and the metrics see it
(:func:`rows_of`): ``kind`` and one per kind."""

STATE_SCHEMA = StructType([StructField("json", StringType(), False)])


@dataclass(frozen=True)
class SlotDue:
    """A slot's earliest due time after a call (``None``: nothing pending)."""

    slot: int
    due_ms: int | None


def output_rows(o: Output | SlotDue) -> list[dict[str, Any]]:
    """An output as rows of ``OUTPUT_SCHEMA`` (a laggard snapshot: one row per laggard)."""
    if isinstance(o, LaggardRows):
        return [_row(LAGGARD, dict(lag)) for lag in o.rows]
    return [output_row(o)]


def output_row(o: Emitted | Rejected | SlotDue) -> dict[str, Any]:
    if isinstance(o, SlotDue):
        return _row(DUE, {"slot": o.slot, "at": o.due_ms})
    if isinstance(o, Emitted):
        wm, seen = o.watermark, o.observation
        observation = None
        if seen is not None:
            values = (list(seen.writers), seen.lateness_ms, seen.possibly_late)
            observation = dict(zip(OBSERVATION_COLUMNS, values, strict=True))
        fields = {
            **index_row(wm, o.upper_time_max),
            **marks_row(wm, o.writers, o.emitted_at, observation, o.vouchers),
            "noted_at": o.noted_at,
        }
        return _row(WATERMARK, fields)
    row = rejected_row(o.stream, o.writer, o.reason, o.raw, o.partition, o.offset, o.at)
    return _row(REJECTED, row)


def _row(kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row["kind"], row[kind] = kind, fields
    return row


def rows_of(frame: Any) -> list[dict[str, Any]]:
    """A micro-batch of the operator's output (a Spark DataFrame) as rows of :data:`COLUMNS`,
    collected to the driver once."""
    rows: list[dict[str, Any]] = frame.toArrow().to_pylist()
    return rows


def output_frames(outputs: list[Output | SlotDue]) -> Iterator[pd.DataFrame]:
    """A call's outputs as one frame of ``OUTPUT_SCHEMA``."""
    if outputs:
        rows = [row for o in outputs for row in output_rows(o)]
        yield pd.DataFrame({c: [r[c] for r in rows] for c in COLUMNS}, dtype=object)


class ControllerProcessor(StatefulProcessor):
    """Drives a :class:`~tidemark.jobs.workflow.StreamWorkflow` per stream from Spark's state store.

    Used with ``transformWithStateInPandas`` grouped by *slot* (:mod:`tidemark.jobs.slots`):
    each slot's input arrives as pandas frames of many streams and its outputs
    leave as one frame per call. Per slot and call, the state server sees one
    ``get`` and an ``update`` only when the stored JSON changed.
    """

    def __init__(self, settings: WorkflowSettings) -> None:
        self.settings = settings

    def init(self, handle: StatefulProcessorHandle) -> None:
        keep_zip_directories()  # from the next task of this worker on

        self.handle = handle
        self.value = handle.getValueState("slot", STATE_SCHEMA)
        self.workflow = StreamWorkflow(
            self.settings,
            worker_streams(self.settings),
            worker_committed(self.settings),
            worker_registrations(self.settings),
        )

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        now_ms = timerValues.getCurrentProcessingTimeInMs()
        records: dict[str, list[MarkInput]] = {}
        bad_keys: list[Output] = []
        reevaluate = False
        for frame in rows:
            for raw_key, value, part, offset, arrival in zip(
                frame["stream"].tolist(),  # the raw key: bytes, never assumed UTF-8
                frame["value"].tolist(),
                frame["partition"].tolist(),
                frame["offset"].tolist(),
                frame["arrival"].tolist(),
                strict=True,
            ):
                stream = decode_stream_key(raw_key)
                if isinstance(stream, Undecodable):
                    shown = printable_key(raw_key)
                    why = stream.reason
                    bad_keys.append(Rejected(shown, None, why, value, part, offset, now_ms))
                    continue
                if is_due_key(stream):
                    reevaluate = reevaluate or is_reevaluation(value)
                    continue  # it only brought the slot here
                arrival_ms = None if arrival is None or pd.isna(arrival) else int(arrival)
                records.setdefault(stream, []).append(MarkInput(value, part, offset, arrival_ms))
        got = self.value.get()  # None when absent: no separate exists() round trip
        stored = None if got is None else str(got[0])
        slot = SlotState.from_json(stored)
        outputs: list[Output | SlotDue] = [
            *bad_keys,
            *run_slot(self.workflow, slot, records, now_ms, reevaluate),
        ]
        text = slot.to_json()
        if text != stored and (stored is not None or slot.streams):
            self.value.update((text,))
        outputs.append(SlotDue(int(key[0]), slot.due(self.workflow)))
        yield from output_frames(outputs)

    def close(self) -> None:
        pass


__all__ = [
    "COLUMNS",
    "DUE",
    "KINDS",
    "LAGGARD",
    "OUTPUT_SCHEMA",
    "REJECTED",
    "WATERMARK",
    "ControllerProcessor",
    "SlotDue",
    "output_frames",
    "output_row",
    "output_rows",
    "rows_of",
]
