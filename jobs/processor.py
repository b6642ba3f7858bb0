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
``due``; :mod:`tidemark.jobs.sink` splits them into the Delta tables. A watermark
row's ``noted_at`` (the Kafka timestamp of the newest mark it was made of)
goes to no table: the metrics measure freshness from it.

Why the pandas flavour: with a handful of slot keys per batch, a call's
input arrives as whole pandas frames (Arrow converts them column by column
in C) and its outputs leave as one frame per call; the row-based
``transformWithState`` of PySpark 4.1 builds every input row from Arrow
scalars one cell at a time.
"""

from __future__ import annotations

import json
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
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from tidemark.jobs.config import WorkflowSettings
from tidemark.jobs.lookups import worker_committed, worker_registrations, worker_streams
from tidemark.jobs.slot_keys import is_due_key
from tidemark.jobs.slots import SlotState, run_slot
from tidemark.jobs.worker_setup import keep_zip_directories
from tidemark.jobs.workflow import Emitted, LaggardRows, MarkInput, Output, Rejected, StreamWorkflow
from tidemark.schemas.mark_input import Undecodable, decode_stream_key, printable_key
from tidemark.schemas.tables import TABLES, columns, rejected_row

log = logging.getLogger(__name__)

WATERMARK = "watermark"
REJECTED = "rejected"
LAGGARD = "laggard"
DUE = "due"

_AS_FIELDS = {"stream_cut": ("cut_segments", "cut_offsets"), "kind": ("laggard_kind",)}
"""Table columns an output row spells otherwise: the cut as two arrays (segment ids,
offsets), a laggard's ``kind`` apart from the row's own."""

COLUMNS = (
    "kind",
    *dict.fromkeys(
        field
        for table in TABLES
        for column in columns(table)
        for field in _AS_FIELDS.get(column, (column,))
    ),
    "slot",
    "noted_at",
)
"""The fields of an output row as the sink, the due scheduler and the metrics see it
(:func:`rows_of`): ``kind`` says which are set. They are the tables' columns
(:data:`tidemark.schemas.tables.LAYOUT`, so :func:`tidemark.jobs.sink.split_rows` makes each
table's rows
from them), plus the due slot and ``noted_at`` (freshness, for the metrics)."""

OUTPUT_SCHEMA = StructType(
    [
        StructField("kind", StringType(), False),
        StructField("row", StringType(), False),
        StructField("raw", BinaryType()),
    ]
)
"""What the operator emits: a row's set fields but ``raw`` as compact JSON, and ``raw``
(a rejected mark's bytes). Three columns, not one per field: the Python worker
converts each output column of each call (one call per slot) to Arrow on its own."""
OUTPUT_COLUMNS = OUTPUT_SCHEMA.fieldNames()

STATE_SCHEMA = StructType([StructField("json", StringType(), False)])


@dataclass(frozen=True)
class SlotDue:
    """A slot's earliest due time after a call (``None``: nothing pending)."""

    slot: int
    due_ms: int | None


def output_rows(o: Output | SlotDue) -> list[dict[str, Any]]:
    """An output as rows of ``OUTPUT_SCHEMA`` (a laggard snapshot: one row per laggard)."""
    if isinstance(o, LaggardRows):
        rows = []
        for lag in o.rows:
            row: dict[str, Any] = dict.fromkeys(COLUMNS)
            row.update(lag, kind=LAGGARD, laggard_kind=lag["kind"])
            rows.append(row)
        return rows
    return [output_row(o)]


def output_row(o: Emitted | Rejected | SlotDue) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    if isinstance(o, SlotDue):
        row.update(kind=DUE, slot=o.slot, at=o.due_ms)
    elif isinstance(o, Emitted):
        wm = o.watermark
        cut = sorted(wm.stream_cut.items())
        row.update(
            kind=WATERMARK,
            stream=wm.stream,
            seq=wm.seq,
            time=wm.time,
            upper_time=wm.upper_time,
            upper_time_max=o.upper_time_max,
            cut_segments=[s for s, _ in cut],
            cut_offsets=[off for _, off in cut],
            writers=list(o.writers),
            emitted_at=o.emitted_at,
            noted_at=o.noted_at,
        )
        if o.observation is not None:
            row.update(
                observed=list(o.observation.writers),
                observed_lateness_ms=o.observation.lateness_ms,
                possibly_late=o.observation.possibly_late,
            )
    else:
        row.update(
            rejected_row(o.stream, o.writer, o.reason, o.raw, o.partition, o.offset, o.at),
            kind=REJECTED,
        )
    return row


def pack(row: dict[str, Any]) -> tuple[str, str, bytes | None]:
    """A row of :data:`COLUMNS` as the operator's ``(kind, row, raw)``."""
    rest = {k: v for k, v in row.items() if v is not None and k not in ("kind", "raw")}
    return row["kind"], json.dumps(rest, separators=(",", ":")), row["raw"]


def unpack(kind: str, packed: str, raw: bytes | None) -> dict[str, Any]:
    """:func:`pack`'s inverse: every field of :data:`COLUMNS`, ``None`` where unset."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(json.loads(packed), kind=kind, raw=raw)
    return row


def rows_of(frame: Any) -> list[dict[str, Any]]:
    """A micro-batch of the operator's output (a Spark DataFrame) as rows of :data:`COLUMNS`,
    collected to the driver once."""
    table = frame.toArrow()
    columns = (table.column(name).to_pylist() for name in OUTPUT_COLUMNS)
    return [unpack(*cells) for cells in zip(*columns, strict=True)]


def output_frames(outputs: list[Output | SlotDue]) -> Iterator[pd.DataFrame]:
    """A call's outputs as one frame of ``OUTPUT_SCHEMA``."""
    if outputs:
        packed = [pack(row) for o in outputs for row in output_rows(o)]
        yield pd.DataFrame(packed, columns=OUTPUT_COLUMNS, dtype=object)


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
                    continue  # it only brought the slot here
                arrival_ms = None if arrival is None or pd.isna(arrival) else int(arrival)
                records.setdefault(stream, []).append(MarkInput(value, part, offset, arrival_ms))
        got = self.value.get()  # None when absent: no separate exists() round trip
        stored = None if got is None else str(got[0])
        slot = SlotState.from_json(stored)
        outputs: list[Output | SlotDue] = [
            *bad_keys,
            *run_slot(self.workflow, slot, records, now_ms),
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
    "LAGGARD",
    "OUTPUT_SCHEMA",
    "REJECTED",
    "WATERMARK",
    "ControllerProcessor",
    "SlotDue",
    "pack",
    "rows_of",
    "unpack",
]
