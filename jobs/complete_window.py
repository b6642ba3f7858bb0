"""Complete-window reads: a scheduled Spark batch job driven by watermarks.

    result = run_window(spark, "shop/orders", start_ms, end_ms, store=store,
                        bootstrap_servers=bootstrap, delta_root="/data/delta")
    results = run_due_windows(spark, "shop/orders", size_ms=60_000, first_start_ms=t0, ...)

For a window [T1, T2) the job reads from Kafka exactly the records between
``stream_cut_at(T1)`` (nothing with time >= T1 lies before it) and
``complete_cut_at(T2 - 1)`` (everything with time < T2 lies before it), with
the Spark Kafka source's per-partition ``startingOffsets`` / ``endingOffsets``
(JSON) and ``read_committed`` isolation, keeps the records whose timestamp is
in [T1, T2), and appends one row of aggregates per window to a Delta table
(default ``<delta root>/window_aggregates``).

It runs a window only once it is **complete**: while no watermark has
reached T2 - 1, :class:`~jobs.exceptions.WindowNotCompleteError`
(``run_due_windows`` simply stops there). The append is idempotent: Delta's
``txnAppId`` = ``tidemark-complete-window/<stream>``, ``txnVersion`` = T1, so a
window run again (after a crash, or by a second scheduler) is skipped, and
``run_due_windows`` resumes after the last window written.

Both cuts assume well-behaved writers (noted times never below the times of
events written before them); see ``controller.index``. The cuts come from
the ``index``/``marks`` tables read with deltalake and searched by
``controller.index`` -- the same answers as ``pipelines.reading.seek``'s
``stream_cut_at`` / ``complete_cut_at``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.index import start_cut, stop_cut
from controller.navigation import SegmentRange, ranges_between, start_or_head
from controller.store import MetadataStore
from jobs.exceptions import JobConfigurationError, WindowNotCompleteError
from jobs.tables import read_index_rows

log = logging.getLogger(__name__)

AGGREGATES_TABLE = "window_aggregates"
AGGREGATE_COLUMNS = (
    "stream",
    "window_start",
    "window_end",
    "events",
    "bytes",
    "keys",
    "first_time",
    "last_time",
    "computed_at",
)


@dataclass(frozen=True)
class WindowPlan:
    """What to read for [start_ms, end_ms): the topic and one offset range per segment."""

    stream: str
    topic: str
    start_ms: int
    end_ms: int
    ranges: tuple[SegmentRange, ...]

    def kafka_options(self) -> dict[str, str]:
        """The Spark Kafka source's ``assign``, ``startingOffsets``, ``endingOffsets``."""
        parts = [r.segment.number for r in self.ranges]
        return {
            "assign": json.dumps({self.topic: parts}),
            "startingOffsets": json.dumps(
                {
                    self.topic: {
                        str(r.segment.number): -2 if r.start is None else r.start
                        for r in self.ranges
                    }
                }
            ),
            "endingOffsets": json.dumps(
                {self.topic: {str(r.segment.number): r.end for r in self.ranges}}
            ),
        }


@dataclass(frozen=True)
class WindowResult:
    """One window's aggregates (also the row appended to the table)."""

    stream: str
    window_start: int
    window_end: int
    events: int
    bytes: int
    keys: int
    first_time: int | None
    last_time: int | None
    computed_at: int


def _timestamp(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise JobConfigurationError(f"{what} must be an integer time in ms >= 0, got {value!r}")
    return value


def plan_window(
    stream: str,
    start_ms: object,
    end_ms: object,
    *,
    store: MetadataStore,
    delta_root: str,
    storage_options: Mapping[str, str] | None = None,
) -> WindowPlan:
    """The offset ranges of [start_ms, end_ms); :class:`WindowNotCompleteError` until complete."""
    start = _timestamp(start_ms, "the window start")
    end = _timestamp(end_ms, "the window end")
    if end <= start:
        raise JobConfigurationError(f"a window needs start < end, got [{start}, {end})")
    meta = store.get_stream(stream)
    rows = read_index_rows(delta_root, stream, storage_options)
    stop = stop_cut(rows, end - 1)
    if stop is None:
        raise WindowNotCompleteError(stream, end - 1)
    begin = start_or_head(start_cut(rows, start), meta)
    ranges = ranges_between(meta.segments(), meta.sealed_sizes, begin, dict(stop))
    return WindowPlan(stream, meta.topic, start, end, tuple(ranges))


def output_path(delta_root: str) -> str:
    return f"{delta_root.rstrip('/')}/{AGGREGATES_TABLE}"


def app_id(stream: str) -> str:
    return f"tidemark-complete-window/{stream}"


def aggregate(spark: Any, plan: WindowPlan, bootstrap_servers: str) -> WindowResult:
    """Read the plan's ranges from Kafka (read_committed) and aggregate [start, end)."""
    from pyspark.sql import functions as F

    from controller.kafka_client import spark_kafka_options

    now = int(time.time() * 1000)
    if not plan.ranges:
        return WindowResult(plan.stream, plan.start_ms, plan.end_ms, 0, 0, 0, None, None, now)
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "false")  # commit markers leave gaps in the offsets
        .options(**spark_kafka_options())
    )
    for key, value in plan.kafka_options().items():
        reader = reader.option(key, value)
    frame = reader.load().withColumn("ts", F.unix_millis(F.col("timestamp")))
    kept = frame.where((F.col("ts") >= plan.start_ms) & (F.col("ts") < plan.end_ms))
    row = kept.agg(
        F.count(F.lit(1)).alias("events"),
        F.coalesce(F.sum(F.length("value")), F.lit(0)).alias("bytes"),
        F.count_distinct("key").alias("keys"),
        F.min("ts").alias("first_time"),
        F.max("ts").alias("last_time"),
    ).collect()[0]
    return WindowResult(
        plan.stream,
        plan.start_ms,
        plan.end_ms,
        int(row["events"]),
        int(row["bytes"]),
        int(row["keys"]),
        None if row["first_time"] is None else int(row["first_time"]),
        None if row["last_time"] is None else int(row["last_time"]),
        now,
    )


def write_result(spark: Any, result: WindowResult, delta_root: str) -> None:
    """Append the row, idempotently (txnAppId per stream, txnVersion = window start)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(
        [StructField("stream", StringType(), False)]
        + [
            StructField(c, LongType(), c in ("window_start", "window_end", "events"))
            for c in AGGREGATE_COLUMNS[1:]
        ]
    )
    values = tuple(getattr(result, c) for c in AGGREGATE_COLUMNS)
    (
        spark.createDataFrame([values], schema)
        .coalesce(1)
        .write.format("delta")
        .mode("append")
        .option("txnAppId", app_id(result.stream))
        .option("txnVersion", result.window_start)
        .save(output_path(delta_root))
    )


def run_window(
    spark: Any,
    stream: str,
    start_ms: object,
    end_ms: object,
    *,
    store: MetadataStore,
    bootstrap_servers: str,
    delta_root: str,
) -> WindowResult:
    """Plan, read, aggregate and append one complete window (tables under ``delta_root``)."""
    plan = plan_window(stream, start_ms, end_ms, store=store, delta_root=delta_root)
    log.info(
        "window [%d, %d) of %s: %s",
        plan.start_ms,
        plan.end_ms,
        stream,
        [(r.segment.id, r.start, r.end) for r in plan.ranges],
    )
    result = aggregate(spark, plan, bootstrap_servers)
    write_result(spark, result, delta_root)
    return result


def last_window_start(delta_root: str, stream: str) -> int | None:
    """The start of the last window written for ``stream`` (Delta's txn version), if any."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(output_path(delta_root))
    except TableNotFoundError:
        return None
    found = table.transaction_version(app_id(stream))
    return None if found is None else int(found)


def run_due_windows(
    spark: Any,
    stream: str,
    *,
    size_ms: int,
    first_start_ms: int,
    store: MetadataStore,
    bootstrap_servers: str,
    delta_root: str,
    limit: int = 1000,
) -> Sequence[WindowResult]:
    """Run every complete window of ``size_ms`` after the last one written (from
    ``first_start_ms`` on the first run); stop at the first incomplete one."""
    if size_ms < 1:
        raise JobConfigurationError(f"size_ms must be >= 1, got {size_ms}")
    last = last_window_start(delta_root, stream)
    start = first_start_ms if last is None else last + size_ms
    out: list[WindowResult] = []
    for _ in range(limit):
        try:
            out.append(
                run_window(
                    spark,
                    stream,
                    start,
                    start + size_ms,
                    store=store,
                    bootstrap_servers=bootstrap_servers,
                    delta_root=delta_root,
                )
            )
        except WindowNotCompleteError:
            break
        start += size_ms
    return out


__all__ = [
    "AGGREGATES_TABLE",
    "AGGREGATE_COLUMNS",
    "WindowPlan",
    "WindowResult",
    "aggregate",
    "last_window_start",
    "output_path",
    "plan_window",
    "run_due_windows",
    "run_window",
    "write_result",
]
