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
reached T2 - 1, :class:`~tidemark.jobs.exceptions.WindowNotCompleteError`
(``run_due_windows`` simply stops there). The write is idempotent: it
replaces the rows of ``(stream, window_start)`` (Delta ``replaceWhere``), so
a window run again (after a crash, by a second scheduler, in any order)
leaves one result, and ``run_due_windows`` resumes after the last window
written.

Instead of the built-in aggregates, ``sql`` runs a query over the window's
records, the view ``window_events`` (``key``, ``value`` binary, ``ts`` ms,
``segment`` = partition, ``offset``); its rows are written with ``stream``,
``window_start``, ``window_end`` added.

From the command line (``tidemark window run``, or ``spark-submit
jobs/complete_window.py``; exit :data:`EXIT_NOT_YET` = 75 while the window
is not complete)::

    spark-submit --packages ... jobs/complete_window.py shop/orders \
        --from 1700000000000 --to 1700000300000 --output s3a://lake/orders_5m \
        [--sql "SELECT count(*) AS n FROM window_events"] [--every 5m] [--wait-ms 600000]

Several streams (``tidemark window run shop/orders shop/payments --from T1 --to T2``):
a window runs once it is complete on **every** stream (one wait on all of them,
then each stream's own two cuts, :func:`plan_window`); without ``sql`` each stream
gets its row of aggregates, with ``sql`` the view ``window_events`` holds every
stream's records with a ``stream`` column, and the query's rows are written under
the stream name ``"s1+s2"`` (:func:`joint_name`) -- a join of two streams by time.

Both cuts assume well-behaved writers (noted times never below the times of
events written before them); see ``tidemark.controller.index``. They are looked up as
``tidemark.pipelines.reading.seek``'s ``stream_cut_at`` / ``complete_cut_at`` do (one
:class:`~tidemark.pipelines.reading.seek.SeekIndex`: the ``index`` table's statistics
and a row group or two, one ``marks`` row group for each cut), never by
reading the stream's whole history.

Why one module: it is one job, from a window's plan to its Spark read, its write and
its entry point; each step takes the value the step before made.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

from tidemark.controller.delta.tables import column_max
from tidemark.controller.kafka.settings import spark_source_options
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.navigation import SegmentRange, ranges_between
from tidemark.controller.store import MetadataStore
from tidemark.controller.timestamps import joined_spans
from tidemark.controller.zookeeper.session import close_session, open_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import Environment
from tidemark.errors import TidemarkError
from tidemark.infra.services import KAFKA, ZOOKEEPER, data_root, resolve_services
from tidemark.infra.spark import SparkSettings, spark_session, stop_spark
from tidemark.jobs.compact_index import launched_by_spark_submit
from tidemark.jobs.exceptions import JobConfigurationError, WindowNotCompleteError
from tidemark.jobs.window_args import WindowRun, add_window_arguments, window_run_from_args
from tidemark.pipelines.reading.exceptions import StreamTimeTimeoutError
from tidemark.pipelines.reading.seek import SeekIndex, start_cut_for
from tidemark.pipelines.reading.spark_source import EARLIEST, PartitionRange, spark_offsets
from tidemark.pipelines.reading.stream_time import EXIT_NOT_YET, wait_for_time
from tidemark.retries import RetryPolicy

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
        ranges = [
            PartitionRange(r.segment.number, EARLIEST if r.start is None else r.start, r.end)
            for r in self.ranges
        ]
        return {
            "assign": json.dumps({self.topic: [r.partition for r in ranges]}),
            **spark_offsets(self.topic, ranges),
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
) -> WindowPlan:
    """The offset ranges of [start_ms, end_ms); :class:`WindowNotCompleteError` until complete.

    A fresh :class:`SeekIndex` looking at the tables' latest version: the cuts of
    this one window, read from the table, not from a cache of another's.
    """
    start = _timestamp(start_ms, "the window start")
    end = _timestamp(end_ms, "the window end")
    if end <= start:
        raise JobConfigurationError(f"a window needs start < end, got [{start}, {end})")
    meta = store.get_stream(stream)
    index = SeekIndex(delta_root, refresh_interval_ms=0)
    stop = index.stop(stream, end - 1)
    if stop is None:
        raise WindowNotCompleteError(stream, end - 1)
    begin = start_cut_for(stream, start, meta, index)
    ranges = ranges_between(meta.segments(), meta.sealed_sizes, begin, dict(stop.stream_cut))
    return WindowPlan(stream, meta.topic, start, end, tuple(ranges))


def output_path(delta_root: str) -> str:
    return f"{delta_root.rstrip('/')}/{AGGREGATES_TABLE}"


EVENTS_VIEW = "window_events"


def window_events(spark: Any, plan: WindowPlan, bootstrap_servers: str) -> Any:
    """The window's records: the plan's offset ranges from Kafka (read_committed), those
    with time in [start, end); columns ``key, value, ts, segment, offset``."""
    # pyspark: only the Spark steps load it; planning a window needs none
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType  # as above

    if not plan.ranges:
        empty = StructType(
            [
                StructField("key", BinaryType()),
                StructField("value", BinaryType()),
                StructField("ts", LongType()),
                StructField("segment", LongType()),
                StructField("offset", LongType()),
            ]
        )
        return spark.createDataFrame([], empty)
    reader = (
        spark.read.format("kafka")
        .options(**spark_source_options(bootstrap_servers))
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "false")  # commit markers leave gaps in the offsets
    )
    for key, value in plan.kafka_options().items():
        reader = reader.option(key, value)
    frame = reader.load().select(
        "key",
        "value",
        F.unix_millis(F.col("timestamp")).alias("ts"),
        F.col("partition").cast("long").alias("segment"),
        "offset",
    )
    return frame.where((F.col("ts") >= plan.start_ms) & (F.col("ts") < plan.end_ms))


def query_window(
    spark: Any, plan: WindowPlan | Sequence[WindowPlan], bootstrap_servers: str, sql: str
) -> Any:
    """``sql`` over the view ``window_events``, with ``stream, window_start, window_end``.

    Several plans (one window on several streams): the view holds all their records
    and a column ``stream`` naming each record's stream."""
    # pyspark: only the Spark steps load it; planning a window needs none
    from pyspark.sql import functions as F

    plans = [plan] if isinstance(plan, WindowPlan) else list(plan)
    if len(plans) == 1:
        events = window_events(spark, plans[0], bootstrap_servers)
    else:
        frames = [
            window_events(spark, p, bootstrap_servers).withColumn("stream", F.lit(p.stream))
            for p in plans
        ]
        events = frames[0]
        for frame in frames[1:]:
            events = events.unionByName(frame)
    events.createOrReplaceTempView(EVENTS_VIEW)
    plan = plans[0]
    name = plan.stream if len(plans) == 1 else joint_name([p.stream for p in plans])
    try:
        result = spark.sql(sql)
    except Exception as exc:
        raise JobConfigurationError(f"the window query failed: {exc}") from exc
    return result.select(
        F.lit(name).alias("stream"),
        F.lit(plan.start_ms).cast("long").alias("window_start"),
        F.lit(plan.end_ms).cast("long").alias("window_end"),
        *[F.col(f"`{c}`") for c in result.columns],
    )


def write_window(frame: Any, stream: str, window_start: int, output: str) -> None:
    """Replace the rows of ``(stream, window_start)`` in the Delta table ``output`` with
    ``frame`` (which has those columns): running a window twice leaves one result."""
    quoted = stream.replace("'", "''")
    (
        frame.coalesce(1)
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", f"stream = '{quoted}' AND window_start = {int(window_start)}")
        .save(output)
    )


def aggregate(spark: Any, plan: WindowPlan, bootstrap_servers: str) -> WindowResult:
    """Read the plan's ranges from Kafka (read_committed) and aggregate [start, end)."""
    # pyspark: only the Spark steps load it; planning a window needs none
    from pyspark.sql import functions as F

    now = int(time.time() * 1000)
    if not plan.ranges:
        return WindowResult(plan.stream, plan.start_ms, plan.end_ms, 0, 0, 0, None, None, now)
    kept = window_events(spark, plan, bootstrap_servers)
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


def write_result(
    spark: Any, result: WindowResult, delta_root: str, output: str | None = None
) -> None:
    """Write the row, idempotently (:func:`write_window`); ``output`` defaults to
    ``<delta root>/window_aggregates``."""
    # pyspark: only the Spark steps load it; planning a window needs none
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(
        [StructField("stream", StringType(), False)]
        + [
            StructField(c, LongType(), c in ("window_start", "window_end", "events"))
            for c in AGGREGATE_COLUMNS[1:]
        ]
    )
    values = tuple(getattr(result, c) for c in AGGREGATE_COLUMNS)
    write_window(
        spark.createDataFrame([values], schema),
        result.stream,
        result.window_start,
        output or output_path(delta_root),
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
    output: str | None = None,
    sql: str | None = None,
) -> WindowResult:
    """Plan, read, aggregate and write one complete window (tables under ``delta_root``;
    the result to ``output``, default ``<delta root>/window_aggregates``). With ``sql``,
    the query's rows are written instead; the returned aggregates are then not computed
    (``events`` = -1)."""
    plan = plan_window(stream, start_ms, end_ms, store=store, delta_root=delta_root)
    return run_plans(
        spark,
        [plan],
        bootstrap_servers=bootstrap_servers,
        delta_root=delta_root,
        output=output,
        sql=sql,
    )[0]


def joint_name(streams: Sequence[str]) -> str:
    """The ``stream`` value of a query's rows over several streams: their names joined by +."""
    return "+".join(streams)


def run_plans(
    spark: Any,
    plans: Sequence[WindowPlan],
    *,
    bootstrap_servers: str,
    delta_root: str,
    output: str | None = None,
    sql: str | None = None,
) -> list[WindowResult]:
    """Read, aggregate and write one window, planned (so complete) on every stream.

    Without ``sql``, one row of aggregates per stream. With ``sql``, one query over
    the view ``window_events`` -- with several plans, every stream's records, a
    ``stream`` column naming each -- whose rows are written under the stream
    name :func:`joint_name` (the returned aggregates are then not computed:
    ``events`` = -1)."""
    for plan in plans:
        log.info(
            "window [%d, %d) of %s: %s",
            plan.start_ms,
            plan.end_ms,
            plan.stream,
            [(r.segment.id, r.start, r.end) for r in plan.ranges],
        )
    if sql is None:
        results = [aggregate(spark, plan, bootstrap_servers) for plan in plans]
        for result in results:
            write_result(spark, result, delta_root, output)
        return results
    first = plans[0]
    name = first.stream if len(plans) == 1 else joint_name([p.stream for p in plans])
    target = output or output_path(delta_root)
    write_window(query_window(spark, plans, bootstrap_servers, sql), name, first.start_ms, target)
    now = int(time.time() * 1000)
    return [WindowResult(name, first.start_ms, first.end_ms, -1, -1, -1, None, None, now)]


def last_window_start(delta_root: str, stream: str, output: str | None = None) -> int | None:
    """The start of the last window written for ``stream`` to ``output``, if any."""
    return column_max(output or output_path(delta_root), "window_start", stream)


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
    output: str | None = None,
    sql: str | None = None,
) -> Sequence[WindowResult]:
    """Run every complete window of ``size_ms`` after the last one written (from
    ``first_start_ms`` on the first run); stop at the first incomplete one."""
    if size_ms < 1:
        raise JobConfigurationError(f"size_ms must be >= 1, got {size_ms}")
    last = last_window_start(delta_root, stream, output)
    start = first_start_ms if last is None or last < first_start_ms else last + size_ms
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
                    output=output,
                    sql=sql,
                )
            )
        except WindowNotCompleteError:
            break
        start += size_ms
    return out


# --- the entry point: ``tidemark window run`` and ``spark-submit jobs/complete_window.py`` ---


INDEX_LAG_ATTEMPTS = 20
INDEX_LAG_PAUSE_S = 0.05


def run_windows(
    spark: Any,
    run: WindowRun,
    *,
    store: MetadataStore,
    bootstrap_servers: str,
    delta_root: str,
    on_result: Any = None,
) -> int:
    """Run ``run``'s windows in order; 0 when all are written, :data:`EXIT_NOT_YET` when
    one is not complete within ``wait_ms``. Each window waits for the watermark that
    completes it (woken by new watermarks, :func:`wait_for_time`)."""
    resume = _resume_after(run, delta_root) if run.every_ms else None
    waited: str | list[str] = list(run.streams) if run.also else run.stream
    for start, end in run.windows(resume):
        if run.wait_ms != 0:
            try:
                wait_for_time(
                    waited,
                    end - 1,
                    2**31 if run.wait_ms is None else run.wait_ms,
                    delta_root=delta_root,
                )
            except StreamTimeTimeoutError as exc:
                log.warning("window [%d, %d) of %s: %s", start, end, run.streams, exc)
                return EXIT_NOT_YET
        # The wait saw the watermark in ``marks``; the controller job appends its ``index``
        # row (where the plan looks) in its next commit: give it a moment after a wait.
        index_lag = RetryPolicy(
            first_delay_s=INDEX_LAG_PAUSE_S,
            max_delay_s=INDEX_LAG_PAUSE_S,
            max_attempts=1 if run.wait_ms == 0 else INDEX_LAG_ATTEMPTS,
        )
        try:
            plans = index_lag.call(
                lambda: [
                    plan_window(s, start, end, store=store, delta_root=delta_root)  # noqa: B023
                    for s in run.streams
                ],
                retry_on=WindowNotCompleteError,
                what=f"window [{start}, {end})",
                logger=log,
                level=logging.DEBUG,
            )
        except WindowNotCompleteError as exc:
            log.warning("%s", exc)
            return EXIT_NOT_YET
        results = run_plans(
            spark,
            plans,
            bootstrap_servers=bootstrap_servers,
            delta_root=delta_root,
            output=run.output,
            sql=run.sql,
        )
        if on_result is not None:
            for result in results:
                on_result(result)
    return 0


def _resume_after(run: WindowRun, delta_root: str) -> int | None:
    """The start of the last window written by ``run`` on every stream (rows per stream;
    a query over several streams writes its rows under their :func:`joint_name`)."""
    names = [joint_name(run.streams)] if run.also and run.sql else run.streams
    starts = [last_window_start(delta_root, name, run.output) for name in names]
    return None if any(s is None for s in starts) else min(s for s in starts if s is not None)


def run_from_args(args: argparse.Namespace, spark: Any = None) -> int:
    """Resolve services, start Spark (unless given or under spark-submit), run."""
    run = window_run_from_args(args)
    env = Environment.from_env()
    found = resolve_services(KAFKA, ZOOKEEPER, kafka=args.bootstrap, zk=args.zk, env=env)
    delta_root = args.delta_root or str(data_root(env))
    client = open_session(str(found.zk_connect), start_timeout_s=15)
    local = None
    try:
        store = ZooKeeperStore(client, args.zk_root or ClusterSettings().zk_root)
        if spark is None:
            spark, local = _spark()
        return run_windows(
            spark,
            run,
            store=store,
            bootstrap_servers=str(found.kafka_bootstrap),
            delta_root=delta_root,
            on_result=lambda r: print(
                json.dumps(
                    {
                        "stream": r.stream,
                        "window_start": r.window_start,
                        "window_end": r.window_end,
                        "events": r.events,
                    }
                ),
                flush=True,
            ),
        )
    finally:
        close_session(client)
        if local is not None:
            stop_spark(local)


def _spark() -> tuple[Any, Any]:
    """(session, the local session to stop afterwards or None under spark-submit)."""
    if launched_by_spark_submit():
        # pyspark: as in window_events
        from pyspark.sql import SparkSession

        return SparkSession.builder.appName("tidemark-window-run").getOrCreate(), None

    session = spark_session(
        SparkSettings(work_dir=Path(mkdtemp(prefix="tidemark-window-")), app_name="window-run")
    )
    return session, session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="complete_window", description=__doc__.split("\n")[0])
    add_window_arguments(parser)
    args = parser.parse_args(joined_spans(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=logging.INFO)
    try:
        return run_from_args(args)
    except TidemarkError as exc:
        print(f"complete_window: error: {exc}", file=sys.stderr)
        return 1


__all__ = [
    "AGGREGATES_TABLE",
    "AGGREGATE_COLUMNS",
    "EVENTS_VIEW",
    "EXIT_NOT_YET",
    "WindowPlan",
    "WindowResult",
    "WindowRun",
    "add_window_arguments",
    "aggregate",
    "joint_name",
    "last_window_start",
    "main",
    "output_path",
    "plan_window",
    "query_window",
    "run_due_windows",
    "run_from_args",
    "run_plans",
    "run_window",
    "run_windows",
    "window_events",
    "window_run_from_args",
    "write_result",
    "write_window",
]


if __name__ == "__main__":
    sys.exit(main())
