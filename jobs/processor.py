"""The per-stream stateful processor of a bucket's query (``transformWithStateInPandas``).

    out = (marks.withColumn("slot", expr(SLOT_EXPRESSION)).groupBy("slot")
                .transformWithStateInPandas(ControllerProcessor(workflow_settings),
                                            OUTPUT_SCHEMA, "Append", "ProcessingTime"))

Key = the stream's slot (:mod:`jobs.slots`: ``pmod(xxhash64(stream), SLOTS)``).
State = one ``ValueState`` holding the slot's streams'
:class:`~jobs.workflow.StreamState` as JSON (writer marks, generation state,
running max of ``upper_time``, the next due time), so its shape can evolve
without a state-schema migration. A processing-time timer per slot, at its
earliest due stream, runs the cycles every interval when no marks arrive.
Output rows carry a ``kind``: ``watermark`` or ``rejected``; :mod:`jobs.sink`
splits them into the Delta tables.

Why the pandas flavour: with a handful of slot keys per batch, a call's
input arrives as whole pandas frames (Arrow converts them column by column
in C) and its outputs leave as one frame per call. The row-based
``transformWithState`` of PySpark 4.1 builds every input row from Arrow
scalars one cell at a time -- profiled, a third of a busy worker's time --
which only paid off while the state was keyed by stream (a frame per stream
and call cost ~5 ms to convert).

Why transformWithState and not ``applyInPandasWithState``: the
latter's ``ProcessingTimeTimeout`` fires only for a key that received *no*
data for the timeout, so a busy stream would never see a timer-driven cycle
and a quiet one only once; real per-key timers that re-arm themselves are
what the periodic workflow needs, and they work on PySpark 4.1.1 with the
RocksDB state store.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from jobs.config import WorkflowSettings
from jobs.slots import SlotState, run_slot
from jobs.workflow import Emitted, MarkInput, Output, Rejected, StreamWorkflow
from schemas.mark_input import Undecodable, decode_stream_key, printable_key

log = logging.getLogger(__name__)

WATERMARK = "watermark"
REJECTED = "rejected"

OUTPUT_SCHEMA = StructType(
    [
        StructField("kind", StringType(), False),
        StructField("stream", StringType()),
        StructField("seq", LongType()),
        StructField("time", LongType()),
        StructField("upper_time", LongType()),
        StructField("upper_time_max", LongType()),
        StructField("cut_segments", ArrayType(LongType())),
        StructField("cut_offsets", ArrayType(LongType())),
        StructField("writers", ArrayType(StringType())),
        StructField("emitted_at", LongType()),
        StructField("writer", StringType()),
        StructField("reason", StringType()),
        StructField("raw", BinaryType()),
        StructField("kafka_partition", IntegerType()),
        StructField("kafka_offset", LongType()),
        StructField("at", LongType()),
    ]
)
COLUMNS = [f.name for f in OUTPUT_SCHEMA.fields]

STATE_SCHEMA = StructType([StructField("json", StringType(), False)])


def output_row(o: Output) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    if isinstance(o, Emitted):
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
        )
    else:
        row.update(
            kind=REJECTED,
            stream=o.stream,
            writer=o.writer,
            reason=o.reason,
            raw=o.raw,
            kafka_partition=o.partition,
            kafka_offset=o.offset,
            at=o.at,
        )
    return row


def output_frames(outputs: list[Output]) -> Iterator[pd.DataFrame]:
    """A call's outputs as one frame (object columns: nullable ints stay exact)."""
    if outputs:
        yield pd.DataFrame([output_row(o) for o in outputs], columns=COLUMNS, dtype=object)


class ControllerProcessor(StatefulProcessor):
    """Drives a :class:`~jobs.workflow.StreamWorkflow` per stream from Spark's state store.

    Used with ``transformWithStateInPandas`` grouped by *slot* (:mod:`jobs.slots`):
    each slot's input arrives as pandas frames of many streams and its outputs
    leave as one frame per call. Per slot and call, the state server sees one
    ``get``, an ``update`` only when the stored JSON changed, and a timer
    ``delete``/``register`` only when the slot's earliest due time moved.
    """

    def __init__(self, settings: WorkflowSettings) -> None:
        self.settings = settings

    def init(self, handle: StatefulProcessorHandle) -> None:
        from jobs.lookups import worker_committed, worker_streams
        from jobs.worker_setup import keep_zip_directories

        keep_zip_directories()  # from the next task of this worker on

        self.handle = handle
        self.value = handle.getValueState("slot", STATE_SCHEMA)
        self.workflow = StreamWorkflow(
            self.settings, worker_streams(self.settings), worker_committed(self.settings)
        )

    def _load(self) -> tuple[SlotState, str | None]:
        """The slot's state and the JSON it was read from (``None``: no state yet)."""
        got = self.value.get()  # None when absent: no separate exists() round trip
        text = None if got is None else str(got[0])
        return SlotState.from_json(text), text

    def _save(self, slot: SlotState, stored: str | None) -> None:
        wanted = slot.wanted_timer(self.workflow)
        if wanted is not None and slot.timer_ms != wanted:
            if slot.timer_ms is not None:
                self.handle.deleteTimer(slot.timer_ms)
            self.handle.registerTimer(wanted)
            slot.timer_ms = wanted
        text = slot.to_json()
        if text != stored:
            self.value.update((text,))

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        now_ms = timerValues.getCurrentProcessingTimeInMs()
        records: dict[str, list[MarkInput]] = {}
        bad_keys: list[Output] = []
        for frame in rows:
            for key, value, part, offset, arrival in zip(
                frame["stream"].tolist(),  # the raw key: bytes, never assumed UTF-8
                frame["value"].tolist(),
                frame["partition"].tolist(),
                frame["offset"].tolist(),
                frame["arrival"].tolist(),
                strict=True,
            ):
                stream = decode_stream_key(key)
                if isinstance(stream, Undecodable):
                    shown = printable_key(key)
                    why = stream.reason
                    bad_keys.append(Rejected(shown, None, why, value, part, offset, now_ms))
                    continue
                arrival_ms = None if arrival is None or pd.isna(arrival) else int(arrival)
                records.setdefault(stream, []).append(MarkInput(value, part, offset, arrival_ms))
        slot, stored = self._load()
        outputs = bad_keys + run_slot(self.workflow, slot, records, now_ms)
        self._save(slot, stored)
        yield from output_frames(outputs)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        slot, stored = self._load()
        if slot.timer_ms == expiredTimerInfo.getExpiryTimeInMs():
            slot.timer_ms = None  # Spark deletes a timer once it fired
        outputs = run_slot(self.workflow, slot, {}, timerValues.getCurrentProcessingTimeInMs())
        self._save(slot, stored)
        yield from output_frames(outputs)

    def close(self) -> None:
        pass


__all__ = ["COLUMNS", "OUTPUT_SCHEMA", "REJECTED", "WATERMARK", "ControllerProcessor"]
