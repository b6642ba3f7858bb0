"""The per-stream stateful processor of a bucket's query (``transformWithStateInPandas``).

    out = (marks.groupBy("stream")
                .transformWithStateInPandas(ControllerProcessor(workflow_settings),
                                            OUTPUT_SCHEMA, "Append", "ProcessingTime"))

Key = the stream (the Kafka record key). State = one ``ValueState`` holding
the stream's :class:`~jobs.workflow.StreamState` as JSON (writer marks,
generation state, running max of ``upper_time``, the next due time), so its
shape can evolve without a state-schema migration. A processing-time timer
per stream runs the cycle every interval when no marks arrive. Output rows
carry a ``kind``: ``watermark`` or ``rejected``; :mod:`jobs.sink` splits them
into the Delta tables.

Why ``transformWithStateInPandas`` and not ``applyInPandasWithState``: the
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
from jobs.workflow import (
    Emitted,
    MarkInput,
    Output,
    StreamState,
    StreamWorkflow,
)

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


def output_frame(outputs: list[Output]) -> pd.DataFrame:
    rows = [output_row(o) for o in outputs]
    return pd.DataFrame({c: pd.Series([r[c] for r in rows], dtype=object) for c in COLUMNS})


class ControllerProcessor(StatefulProcessor):
    """Drives a :class:`~jobs.workflow.StreamWorkflow` per stream from Spark's state store."""

    def __init__(self, settings: WorkflowSettings) -> None:
        self.settings = settings

    def init(self, handle: StatefulProcessorHandle) -> None:
        from jobs.lookups import worker_committed, worker_streams

        self.handle = handle
        self.value = handle.getValueState("stream", STATE_SCHEMA)
        self.workflow = StreamWorkflow(
            self.settings, worker_streams(self.settings), worker_committed(self.settings)
        )

    def _load(self, stream: str) -> StreamState:
        if not self.value.exists():
            return StreamState()
        got = self.value.get()
        assert got is not None
        return StreamState.from_json(stream, got[0])

    def _save(self, state: StreamState) -> None:
        wanted = self.workflow.wants_timer(state)
        if wanted is not None and state.timer_ms != wanted:
            if state.timer_ms is not None:
                self.handle.deleteTimer(state.timer_ms)
            self.handle.registerTimer(wanted)
            state.timer_ms = wanted
        self.value.update((state.to_json(),))

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        stream = str(key[0])
        now_ms = timerValues.getCurrentProcessingTimeInMs()
        records: list[MarkInput] = []
        for frame in rows:
            for value, partition, offset in zip(
                frame["value"], frame["partition"], frame["offset"], strict=True
            ):
                records.append(
                    MarkInput(None if value is None else bytes(value), int(partition), int(offset))
                )
        state = self._load(stream)
        outputs = self.workflow.on_records(stream, state, records, now_ms)
        self._save(state)
        if outputs:
            yield output_frame(outputs)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        stream = str(key[0])
        state = self._load(stream)
        if state.timer_ms == expiredTimerInfo.getExpiryTimeInMs():
            state.timer_ms = None
        outputs = self.workflow.on_timer(stream, state, timerValues.getCurrentProcessingTimeInMs())
        self._save(state)
        if outputs:
            yield output_frame(outputs)

    def close(self) -> None:
        pass


__all__ = ["COLUMNS", "OUTPUT_SCHEMA", "REJECTED", "WATERMARK", "ControllerProcessor"]
