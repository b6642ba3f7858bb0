"""The watermark controller: one streaming query over every bucket, drivers in active/standby.

    job = ControllerJob(spark, settings, "driver-a").start()   # leads, or waits as a standby
    ...
    job.stop()

    # on a cluster (more executors, more capacity):
    spark-submit --master spark://... --packages io.delta:delta-spark_4.1_2.13:4.4.0,... \\
        jobs/controller_job.py --instance a --bootstrap kafka:9092 --zk zk:2181 \\
        --bucket-count 64 --delta-root s3a://lake/tidemark --checkpoint-root s3a://lake/ckpt

**One query.** The Kafka source reads every partition of the marks topic,
``read_committed`` (a transaction's mark is seen exactly when its data is),
from the earliest offset on first start. Records are grouped by slot
(:mod:`tidemark.jobs.slots`) into ``transformWithStateInPandas``
(:mod:`tidemark.jobs.processor`). The buckets (partitions of the marks topic, 4 slots
each) are spread over the operator's **state partitions**:
``spark.sql.shuffle.partitions`` = ``--state-partitions`` (default: Spark's
default parallelism, i.e. the cores the job runs on) when the checkpoint is
new, fixed by it from then on. Spark schedules those tasks on its executors
and, when an executor is lost, runs them elsewhere from the checkpoint with
their state. A micro-batch costs a Python runner per state partition, data or
not, so the parallelism follows the cores, not the bucket count. Each
micro-batch's output is appended to the Delta tables idempotently
(:mod:`tidemark.jobs.sink`); its ``due`` rows feed the driver's
:class:`~tidemark.jobs.due.DueScheduler`.

**Nothing runs when idle.** No Spark timers, and
``spark.sql.streaming.noDataMicroBatches.enabled=false``: a micro-batch runs
only when the marks topic has new records -- writer marks, or a due record
the driver produced because some stream's writer timeout (or first-watermark
delay, or a held cut's retry) fell due. The trigger (``--interval-ms``) only
bounds how often a batch may start.

**Active/standby.** Every driver contends in a ZooKeeper election
(:class:`tidemark.controller.zookeeper.driver.DriverElection`); the leader runs the query,
the others wait. When the leader's session ends (it died, or was cut off
for longer than ``zk_session_timeout_ms``) a standby is elected and starts
the query from the shared checkpoint ``<checkpoint root>/query``: same
offsets, same state, same query id (hence the same Delta appId), the next
batch id. A leader that loses its connection (SUSPENDED) keeps its query for a
quarter of the session timeout while kazoo reconnects to another ZooKeeper
node within the same session; still disconnected then, it stops the query,
before its session can expire. Should a cut-off leader still run a
batch, the checkpoint fences it: both queries would write the same batch id
to the offset log, Spark refuses the second ("concurrent update to the
log"); the Delta appends of a batch both ran carry the same transaction
identifier (appId, version), the sink skips a batch a table already holds,
and delta-rs refuses the slower of two concurrent commits ("concurrent
transaction"), failing that query.

Why one module: it is the controller's Spark driver, from its one streaming query's
layout and plan to its warm-up and its leadership; each part reads the same settings
and checkpoint layout of that query.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pyspark.sql import SparkSession
from pyspark.sql.functions import expr

from tidemark.controller.delta.appends import DeltaTables, ensure_tables
from tidemark.controller.delta.maintenance import MaintenanceSwitch, maintenance_switch
from tidemark.controller.kafka.admin import StreamTopics, ensure_marks_topic
from tidemark.controller.kafka.settings import forwarded_environment, spark_source_options
from tidemark.controller.zookeeper.driver import DriverElection
from tidemark.controller.zookeeper.session import close_session, open_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.infra.spark import (
    KAFKA_CONSUMER_CACHE,
    KAFKA_CONSUMER_CACHE_SIZE,
    SparkSettings,
    spark_session,
    stop_spark,
)
from tidemark.jobs.cli_args import add_controller_arguments, settings_from_args
from tidemark.jobs.config import DEFAULT_STOP_TIMEOUT_MS, ControllerSettings
from tidemark.jobs.config_changes import ConfigChanges
from tidemark.jobs.due import DueScheduler
from tidemark.jobs.exceptions import JobConfigurationError, QueryFailedError
from tidemark.jobs.lookups import KafkaCommittedOffsets
from tidemark.jobs.metrics import serve_metrics
from tidemark.jobs.processor import OUTPUT_SCHEMA, ControllerProcessor, rows_of
from tidemark.jobs.sink import DeltaSink, split_rows
from tidemark.jobs.slot_keys import due_key, slot_expression
from tidemark.jobs.tables import MARKS, REJECTED_MARKS
from tidemark.schemas.tables import on_object_store

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG_CHECKPOINTING = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
"""For a checkpoint root on the local file system. Spark's default manager renames
through Hadoop's ``FileContext``, which on a local path runs ``readlink`` in a
forked process for every rename (offset log, commit log, state changelog); plain
``FileSystem`` renames are atomic there and fork nothing (figures: ``docs/benchmarks.md``).
Other file systems keep Spark's default."""


FETCH_MAX_WAIT_MS = 1
"""How long the broker may hold a fetch of the Kafka source's consumers with no new
data (Kafka's default: 500 ms). The broker answers a connection's requests in order,
so the two ``ListOffsets`` Spark's consumer sends after every poll wait behind a held
fetch; a task reading many partitions waits so for each poll of each. Not 0: 1 ms
bounds how fast an empty poll asks again. Consumers poll only inside a batch's
tasks, so this costs nothing when idle (figures: ``docs/benchmarks.md``)."""

MAX_POLL_RECORDS = 100_000
"""Records one poll of the Kafka source's consumers may return (Kafka's default: 500):
as many as a fetch brings (``max.partition.fetch.bytes``, 1 MiB: ~12 k marks). Spark's
consumer follows every poll with two ``ListOffsets`` round trips, so fewer, larger
polls mean fewer round trips per batch. No extra memory: a poll hands over only
records already fetched (figures: ``docs/benchmarks.md``)."""


def is_local(root: str) -> bool:
    """A plain path or a ``file:`` URI (not HDFS, S3, ...)."""
    return not on_object_store(root)


def layout(settings: ControllerSettings) -> dict[str, Any]:
    """What the checkpoint fixes, and where things are (published for ``status``);
    ``settings`` resolved (:func:`resolve`)."""
    return {
        "bucket_count": settings.bucket_count,
        "slot_count": settings.slot_count,
        "slot_keys": "balanced" if settings.balanced_slots else "identity",
        "state_partitions": settings.state_partitions,
        "checkpoint": settings.checkpoint_dir,
        "delta_root": settings.delta_root,
        "marks_topic": settings.cluster.marks_topic,
        "interval_ms": settings.interval_ms,
    }


def check_layout(settings: ControllerSettings, published: Mapping[str, Any] | None) -> None:
    """Refuse a bucket count other than the one the checkpoint was started with."""
    if published is None or published.get("checkpoint") != settings.checkpoint_dir:
        return
    if published.get("bucket_count") != settings.bucket_count:
        raise JobConfigurationError(
            f"checkpoint {settings.checkpoint_dir} was started with bucket_count "
            f"{published.get('bucket_count')}, not {settings.bucket_count}: the bucket count "
            "is fixed by the checkpoint (use a new checkpoint root to change it)"
        )
    fixed = published.get("state_partitions")
    if settings.state_partitions is not None and fixed not in (None, settings.state_partitions):
        raise JobConfigurationError(
            f"checkpoint {settings.checkpoint_dir} was started with state_partitions {fixed}, "
            f"not {settings.state_partitions}: the state partitions are fixed by the "
            "checkpoint (use a new checkpoint root to change them)"
        )


def resolve(
    spark: Any, settings: ControllerSettings, published: Mapping[str, Any] | None
) -> ControllerSettings:
    """``settings`` with the query's state partitions (and so its slot count) filled in:
    the checkpoint's once it has started (:func:`check_layout` refuses a contrary
    setting), else the settings' or Spark's default parallelism."""
    partitions: int | None = None
    balanced = settings.balanced_slots
    if published is not None and published.get("checkpoint") == settings.checkpoint_dir:
        fixed = published.get("state_partitions")
        # a checkpoint started before the setting had one state partition per bucket
        partitions = fixed if isinstance(fixed, int) else settings.bucket_count
        # ... and before balanced slot keys, keys 0 .. slot_count - 1
        balanced = published.get("slot_keys") == "balanced"
    elif _exists(spark, f"{settings.checkpoint_dir.rstrip('/')}/offsets"):
        balanced = False  # a started checkpoint whose layout is gone: the older keys
    if partitions is None:
        parallelism = int(spark.sparkContext.defaultParallelism)
        partitions = settings.resolved_state_partitions(parallelism)
    return dataclasses.replace(settings, state_partitions=partitions, balanced_slots=balanced)


def query_name(settings: ControllerSettings) -> str:
    return f"tidemark-controller-{settings.cluster.marks_topic}"


def marks_frame(
    spark: Any, settings: ControllerSettings, max_offsets_per_trigger: int | None = None
) -> Any:
    """Every partition's records: ``stream`` (the raw key), ``value``, ``partition``,
    ``offset``, ``arrival`` (the broker's append time in ms; null unless the topic is
    ``LogAppendTime``). ``max_offsets_per_trigger``: instead of the settings'."""
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_source_options(settings.kafka_bootstrap))
        .option("subscribe", settings.cluster.marks_topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        # Marks past the topic's retention are gone for every reader; keep going.
        .option("failOnDataLoss", "false")
        .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
        .option("kafka.max.poll.records", str(MAX_POLL_RECORDS))
    )
    limit = max_offsets_per_trigger or settings.max_offsets_per_trigger
    if limit is not None:
        reader = reader.option("maxOffsetsPerTrigger", limit)
    # The key stays binary: a key that is not UTF-8 must reach the processor as data
    # (a rejected mark), not fail the Python worker on conversion. xxhash64 hashes a
    # binary and a string of the same bytes alike, so the slots are those of the name.
    return reader.load().selectExpr(
        "coalesce(key, X'') AS stream",
        "value",
        "partition",
        "offset",
        "CASE WHEN timestampType = 1 THEN unix_millis(timestamp) END AS arrival",
    )


def controller_operator(records: Any, settings: ControllerSettings) -> Any:
    """The stateful part: ``records`` (:func:`marks_frame`'s columns) by slot through
    :class:`~tidemark.jobs.processor.ControllerProcessor`; rows of ``OUTPUT_SCHEMA``."""
    return (
        records.withColumn("slot", expr(slot_expression(settings.slot_keys)))
        .groupBy("slot")
        .transformWithStateInPandas(
            statefulProcessor=ControllerProcessor(settings.workflow()),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="ProcessingTime",  # for the batch timestamp only; no timers
        )
    )


def prepare_session(spark: Any, partitions: int) -> None:
    """What a query reads from the session when it starts: the state partitions (the
    checkpoint fixes them from its first start on) and no no-data batches."""
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    spark.conf.set(NO_DATA_BATCHES, "false")


BatchHandler = Any
"""``foreachBatch`` callable: ``(frame, batch_id) -> None``."""


def start_query(spark: Any, settings: ControllerSettings, on_batch: BatchHandler) -> Any:
    """Start the controller's query (from its checkpoint if one exists); ``settings``
    resolved (:func:`resolve`)."""
    partitions = settings.query_partitions
    # As many read tasks as state partitions, not one per bucket: a task per Kafka
    # partition and batch costs its launch and consumer fetch whether or not the
    # bucket has marks (64 buckets: 64 tasks a batch). Coalescing is narrow: each task
    # reads several partitions in turn, before the shuffle to the stateful operator.
    records = marks_frame(spark, settings).coalesce(partitions)
    writer = (
        controller_operator(records, settings)
        .writeStream.queryName(query_name(settings))
        .option("checkpointLocation", settings.checkpoint_dir)
        .trigger(processingTime=f"{settings.interval_ms} milliseconds")
        .foreachBatch(on_batch)
    )
    prepare_session(spark, partitions)
    query = writer.start()
    log.info(
        "query %s started (%d buckets on %d state partitions)",
        query.id,
        settings.bucket_count,
        partitions,
    )
    return query


WARM_UP_MARKS = 200
"""Marks per warm-up batch read from the marks topic."""


def warm_up(
    spark: Any,
    settings: ControllerSettings,
    instance_id: str,
    batches: int = 3,
    kafka_timeout_s: float = 120.0,
) -> None:
    """Run the controller's plan on a few batches before contending: first the real plan
    (the marks topic, coalesced, through the operator) over a few retained marks, or, when
    the topic has none, the operator on due-only rows of Spark's ``rate`` source.

    A query's first micro-batches take many seconds (code generation, the JIT,
    Python workers and their metadata caches, RocksDB, the Kafka source); a
    standby that ran these takes over with a query whose first batch is much
    shorter. A loaded machine's first batches of the marks topic take a minute or more,
    hence the marks' generous ``kafka_timeout_s``. The checkpoints are under
    ``<checkpoint root>/warm-up/<instance>``; the output goes to Spark's ``noop`` sink:
    nothing is written to Kafka or Delta.
    """
    topic, partitions = settings.cluster.marks_topic, list(range(settings.bucket_count))
    rows = _due_rows(spark, settings.slot_keys[0])
    if KafkaCommittedOffsets(settings.kafka_bootstrap).retained(topic, partitions) > 0:
        marks = marks_frame(spark, settings, max_offsets_per_trigger=WARM_UP_MARKS).coalesce(
            settings.query_partitions
        )
        if _warm_up_query(spark, settings, instance_id, "kafka", marks, batches, kafka_timeout_s):
            log.info("controller %s: warmed up on the marks topic", instance_id)
            _warm_up_resume(spark, settings, instance_id, rows)
            return
    _warm_up_query(spark, settings, instance_id, "rate", rows, batches, 300)
    _warm_up_resume(spark, settings, instance_id, rows)
    log.info("controller %s: warmed up", instance_id)


def _due_rows(spark: Any, slot: int) -> Any:
    """Due-only rows of ``slot`` (:func:`~tidemark.jobs.slot_keys.due_key`) from Spark's ``rate``
    source, one a second."""
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1)
        .load()
        .selectExpr(
            f"CAST('{due_key(slot)}' AS BINARY) AS stream",
            "CAST(NULL AS BINARY) AS value",
            "0 AS partition",
            "value AS offset",
            "CAST(NULL AS BIGINT) AS arrival",
        )
    )


def _warm_up_resume(spark: Any, settings: ControllerSettings, instance_id: str, rows: Any) -> None:
    """Stop a query and start it again on its checkpoint, as a take-over does.

    A take-over's first batch loads each state partition from the checkpoint's files
    (snapshot and changelogs), code a query on a fresh checkpoint never runs; without
    this step a warmed standby still loaded that code during its first batch."""
    name = "resume"
    _delete_path(spark, _warm_up_checkpoint(settings, instance_id, name))
    for batches in (2, 1):
        if not _warm_up_query(spark, settings, instance_id, name, rows, batches, 60):
            return


def _warm_up_checkpoint(settings: ControllerSettings, instance_id: str, name: str) -> str:
    """The checkpoint of warm-up query ``name`` of this driver."""
    return f"{settings.checkpoint_root.rstrip('/')}/warm-up/{instance_id}/{name}"


def _hadoop_path(spark: Any, location: str) -> tuple[Any, Any]:
    """``location``'s Hadoop file system and path (any scheme Hadoop reaches)."""
    path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(location)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def _exists(spark: Any, location: str) -> bool:
    fs, path = _hadoop_path(spark, location)
    return bool(fs.exists(path))


def _delete_path(spark: Any, location: str) -> None:
    """Delete ``location`` recursively."""
    fs, path = _hadoop_path(spark, location)
    fs.delete(path, True)


def _warm_up_query(
    spark: Any,
    settings: ControllerSettings,
    instance_id: str,
    name: str,
    records: Any,
    batches: int,
    timeout_s: float,
) -> bool:
    """Run ``records`` through the operator into ``noop`` until ``batches`` batches ran
    (``True``) or ``timeout_s`` passed (``False``)."""
    frame = controller_operator(records, settings)
    prepare_session(spark, settings.query_partitions)
    query = (
        frame.writeStream.format("noop")
        .queryName(f"tidemark-warm-up-{name}-{instance_id}")
        .option("checkpointLocation", _warm_up_checkpoint(settings, instance_id, name))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        ran: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while query.isActive and time.monotonic() < deadline:
            for progress in query.recentProgress:
                if "addBatch" in progress["durationMs"]:
                    ran.add(int(progress["batchId"]))
            if len(ran) >= batches:
                return True
            time.sleep(0.2)
        log.info(
            "controller %s: warm-up %s ran %d of %d batches in %.0f s",
            instance_id,
            name,
            len(ran),
            batches,
            timeout_s,
        )
        return False
    finally:
        query.stop()


def _import_processor(_: object) -> None:
    importlib.import_module("tidemark.jobs.processor")  # pandas, pyarrow, pyspark's worker side


def start_python_workers(spark: Any, count: int) -> None:
    """Start ``count`` Python workers (one per task slot) with the operator's modules
    imported, in the background (a job of ``count`` tasks): a first leader's query starts meanwhile,
    and its first batch finds them idle (Spark reuses Python workers) instead of
    starting its own."""

    def run() -> None:
        try:
            spark.sparkContext.parallelize(range(count), count).foreach(_import_processor)
        except Exception as exc:  # only the first batch gets slower
            log.info("Python workers not started ahead: %s", exc)

    threading.Thread(target=run, name="python-workers", daemon=True).start()


class LeaderTask(Protocol):
    """Something that runs only while this driver leads (the tables' maintenance,
    the stream policy loop): told on every change, closed when the driver stops.
    :class:`~tidemark.controller.delta.maintenance.MaintenanceSwitch` is one; the CLI passes others
    (``tidemark.controller.policy_loop.PolicySwitch``) so that ``jobs`` imports nothing of them."""

    def lead(self, leading: bool) -> None: ...

    def close(self) -> None: ...


def end_offsets(progress: Mapping[str, Any] | None, topic: str) -> dict[int, int]:
    """Partition -> end offset of a progress report's batch on ``topic`` (empty: none)."""
    for source in (progress or {}).get("sources", ()):
        end = source.get("endOffset")
        if isinstance(end, str):  # JSON, or (PySpark 4.1) a Python repr of the dict
            try:
                end = json.loads(end)
            except ValueError:
                end = ast.literal_eval(end)
        if isinstance(end, dict) and topic in end:
            return {int(p): int(o) for p, o in end[topic].items()}
    return {}


def first_batch(query: Any) -> Mapping[str, Any] | None:
    """The query's first progress report of a batch that ran (has an ``addBatch`` phase)."""
    for progress in query.recentProgress:
        if "addBatch" in progress.get("durationMs", {}):
            return dict(progress)
    return None


QUERY_LABEL = "all"
"""The ``bucket`` label of the metrics of the one query (it runs every bucket)."""


class Batches:
    """The query's ``foreachBatch``: Delta appends, due times, progress (one per leadership)."""

    def __init__(self, settings: ControllerSettings, job: ControllerJob) -> None:
        self.sink = DeltaSink(settings.lake, settings.app_id, tables=job.take_tables())
        self.due = DueScheduler(
            settings, on_failed=None if job.metrics is None else job.metrics.due_failed.inc
        )
        self.job = job
        self.last: dict[str, Any] | None = None
        if job.metrics is not None:  # --- metrics hook (tidemark.jobs.metrics) ---
            self.sink.observer = job.metrics.batch_observer(QUERY_LABEL)

    def __call__(self, frame: Any, batch_id: int) -> None:
        started = time.monotonic()
        rows = rows_of(frame)  # runs the batch's Spark job
        collected = time.monotonic()
        self.sink.write(rows, batch_id)
        if self.sink.observer is not None:  # --- metrics hook ---
            self.sink.observer(rows, batch_id, time.monotonic() - started)
        self.due.report(rows)
        by_table = split_rows(rows)
        self.last = {
            "leader": self.job.instance_id,
            "batch_id": batch_id,
            "at_ms": time.time_ns() // 1_000_000,
            "watermarks": len(by_table[MARKS]),
            "rejected": len(by_table[REJECTED_MARKS]),
            "write_ms": round((time.monotonic() - started) * 1000),
            "spark_ms": round((collected - started) * 1000),
            "delta_ms": round((time.monotonic() - collected) * 1000),
        }
        self.job.publish_progress(self.last)


class ControllerJob:
    """One controller driver: contends for leadership, runs the query while it leads."""

    def __init__(
        self,
        spark: Any,
        settings: ControllerSettings,
        instance_id: str,
        zk_client: Any = None,
        metrics: Any = None,
        leader_tasks: Sequence[LeaderTask] = (),
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.instance_id = instance_id
        self._client = zk_client
        self._own_client = zk_client is None
        self._election: Any = None
        self._query: Any = None
        self._batches: Batches | None = None
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._maintenance: MaintenanceSwitch | None = None
        self._tables: DeltaTables | None = None
        self.leader_tasks: tuple[LeaderTask, ...] = tuple(leader_tasks)
        """Run while this driver leads, after the maintenance (see :class:`LeaderTask`)."""
        self.failures: list[str] = []
        # Prometheus metrics (tidemark.jobs.metrics.ControllerMetrics); None: off
        self.metrics: Any = metrics

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> ControllerJob:
        self.spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        # Commit a small changelog per batch instead of uploading a RocksDB snapshot
        # (about 0.3-0.4 s per partition and batch); snapshots are taken in the background.
        self.spark.conf.set(CHANGELOG_CHECKPOINTING, "true")
        if is_local(self.settings.checkpoint_root):
            self.spark.conf.set(CHECKPOINT_FILE_MANAGER, LOCAL_CHECKPOINT_FILE_MANAGER)
        ensure_marks_topic(self.settings.kafka_bootstrap, self.settings.cluster, alter=True)
        ensure_tables(self.settings.lake)
        self._maintenance = maintenance_switch(self.settings)  # runs while this driver leads
        if self._client is None:
            self._client = open_session(
                self.settings.zk_connect, timeout_ms=self.settings.zk_session_timeout_ms
            )
        self._election = DriverElection(
            self._client,
            self.settings.cluster.zk_root,
            self.settings.cluster.marks_topic,
            self.instance_id,
        )
        check_layout(self.settings, self._election.read("layout"))
        self._thread = threading.Thread(
            target=self._run, name=f"controller-{self.instance_id}", daemon=True
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        if not self._standing_by():
            start_python_workers(self.spark, int(self.spark.sparkContext.defaultParallelism))
        elif self.settings.warm_up:
            try:
                published = self._election.read("layout")
                warm_up(self.spark, resolve(self.spark, self.settings, published), self.instance_id)
                # A standby opens the tables now; the sink reads what is new when its
                # query starts (DeltaSink.bind), not in its first batch.
                tables = DeltaTables(self.settings.lake)
                tables.open_all()
                self._tables = tables
            except Exception:  # only the first batches get slower
                log.exception("controller %s: warm-up failed", self.instance_id)
        self._election.run(self._lead, self._stopping)

    def _standing_by(self) -> bool:
        """Whether another driver leads: only a standby warms up. The first driver leads
        at once (its first batches pay for first-time planning, but a warm-up before
        contending delayed a new system's first watermark by half a minute)."""
        try:
            leader = self._election.leader()
        except Exception as exc:  # ZooKeeper busy: warm up, as a standby would
            log.warning("controller %s: no leader known (%s)", self.instance_id, exc)
            return True
        if leader is None:
            log.info("controller %s: no driver leads; contending without warm-up", self.instance_id)
        return leader is not None

    def take_tables(self) -> DeltaTables | None:
        """The tables the warm-up opened, once (``None``: the sink opens its own)."""
        tables, self._tables = self._tables, None
        return tables

    def stop(self) -> None:
        """Stop the query (if leading), then leave the election."""
        self._stopping.set()
        if self._election is not None:
            self._election.cancel()
        if self._thread is not None:
            self._thread.join(timeout=120)
        for task in self._tasks():
            try:
                task.close()
            except Exception:
                log.exception("controller %s: closing %r failed", self.instance_id, task)
        if self._own_client and self._client is not None:
            close_session(self._client)

    def __enter__(self) -> ControllerJob:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- while leading ---------------------------------------------------------------------

    def _tasks(self) -> list[LeaderTask]:
        metrics = [] if self.metrics is None else [self.metrics]  # its leader gauge
        return [
            *([] if self._maintenance is None else [self._maintenance]),
            *metrics,
            *self.leader_tasks,
        ]

    def _lead(self, lost: threading.Event) -> None:
        """While leading: the query, the tables' maintenance and the other
        leader tasks (the stream policy loop). They stop before the
        leadership is given up: the query first, then each task."""
        started: list[LeaderTask] = []
        try:
            for task in self._tasks():
                try:
                    task.lead(True)
                    started.append(task)
                except Exception:  # a task that cannot start never stops the query
                    log.exception("controller %s: %r did not start", self.instance_id, task)
            self._run_query(lost)
        finally:
            for task in reversed(started):
                try:
                    task.lead(False)
                except Exception:
                    log.exception("controller %s: %r did not stop", self.instance_id, task)

    def _run_query(self, lost: threading.Event) -> None:
        """Run the query until the leadership is lost, the job stops, or the query fails."""
        published = self._election.read("layout")
        check_layout(self.settings, published)
        settings = resolve(self.spark, self.settings, published)
        self._election.publish("layout", layout(settings))
        elected = time.monotonic()
        while not lost.is_set() and not self._stopping.is_set():
            batches = Batches(settings, self)
            batches.due.start()
            changes = ConfigChanges(
                ZooKeeperStore(self._client, settings.cluster.zk_root), batches.due.sweep
            ).start()
            query: Any = None
            error: Any = None
            try:
                with self._lock:
                    self._batches = batches
                    self._query = query = start_query(self.spark, settings, batches)
                batches.sink.bind(str(query.id))
                batches.due.sweep()
                log.info(
                    "controller %s: query started %.1f s after the election",
                    self.instance_id,
                    time.monotonic() - elected,
                )
                first: Mapping[str, Any] | None = None
                while query.isActive and not lost.is_set() and not self._stopping.is_set():
                    lost.wait(0.2)
                    self._observe(query)
                    if first is None and (first := first_batch(query)) is not None:
                        log.info(
                            "controller %s: first batch %s ended %.1f s after the election; "
                            "its phases (ms): %s; in foreachBatch, Spark job %s ms, Delta %s ms",
                            self.instance_id,
                            first["batchId"],
                            time.monotonic() - elected,
                            first.get("durationMs"),
                            (batches.last or {}).get("spark_ms"),
                            (batches.last or {}).get("delta_ms"),
                        )
                error = None if query.isActive else query.exception()
            except Exception as exc:
                log.exception("controller %s: the query did not start", self.instance_id)
                self.failures.append(f"start: {exc}")
                error = exc
            finally:
                if query is not None:
                    self._wait_between_batches(query)
                    query.stop()
                    self._observe(query)
                changes.stop()
                batches.due.stop()
                with self._lock:
                    self._query = None
            if error is not None:
                log.error("controller %s: query failed: %s", self.instance_id, error)
                self.failures.append(str(error))
                return  # give the leadership up; contend again after a pause

    def _observe(self, query: Any) -> None:
        if self.metrics is not None:  # --- metrics hook (tidemark.jobs.metrics) ---
            try:
                self.metrics.observe_query(QUERY_LABEL, query)
            except Exception as exc:  # metrics never stop the query
                log.debug("progress not observed: %s", exc)

    def publish_progress(self, progress: Mapping[str, Any]) -> None:
        try:
            self._election.publish("progress", progress)
        except Exception as exc:  # progress is for humans; never fail a batch for it
            log.debug("progress not published: %s", exc)

    def _wait_between_batches(self, query: Any) -> None:
        """Stop right after a batch ends, not in the middle of one.

        A query stopped mid-batch leaves a batch in its offset log without a
        commit, which the next leader runs again (its Delta appends are skipped
        by their transaction identifiers): work done twice.
        """
        deadline = time.monotonic() + 3 * self.settings.interval_ms / 1000 + 10
        while query.isActive and time.monotonic() < deadline:
            if not query.status.get("isTriggerActive"):
                return
            time.sleep(0.01)

    # --- what tests and tools ask ----------------------------------------------------------

    @property
    def leading(self) -> bool:
        return self._election is not None and self._election.leading

    @property
    def query(self) -> Any:
        with self._lock:
            return self._query

    @property
    def last_batch(self) -> dict[str, Any] | None:
        with self._lock:
            return None if self._batches is None else self._batches.last

    def wait_leading(self, timeout_s: float = 120) -> Any:
        """Wait until this driver leads and its query runs; the query."""
        deadline = time.monotonic() + timeout_s
        while True:
            query = self.query
            if self.leading and query is not None and query.isActive:
                return query
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.instance_id}: not leading after {timeout_s}s; failures {self.failures}"
                )
            time.sleep(0.2)

    def process_all_available(self, timeout_s: float = 120) -> None:
        """Wait until the query has processed what the marks topic holds now (tests).

        Not Spark's ``processAllAvailable``, which waits for a moment without
        new data -- never, while writers keep noting: instead read every
        partition's last stable offset, then wait for a batch that reached it.
        A query that fails is waited out while the job starts another (it
        contends again after a pause, as in production: a Python worker slow to
        start on a loaded machine fails a query's start); its error is raised
        when none runs again before the timeout.
        """
        query = self.wait_leading(timeout_s)
        topic = self.settings.cluster.marks_topic
        partitions = list(range(self.settings.bucket_count))
        # retried while a partition has no leader yet (a marks topic made a moment ago)
        targets = StreamTopics(self.settings.kafka_bootstrap).last_stable_offsets(topic, partitions)
        deadline = time.monotonic() + timeout_s
        while True:
            reached = end_offsets(query.lastProgress, topic)
            if all(reached.get(p, 0) >= off for p, off in targets.items() if off > 0):
                return
            if not query.isActive:
                query = self._next_query(query, deadline)
            if time.monotonic() > deadline:
                raise TimeoutError(f"query at {reached}, expected {targets}")
            time.sleep(0.05)

    def _next_query(self, ended: Any, deadline: float) -> Any:
        """The query the job runs after ``ended`` (one it stopped, or one that failed: it
        contends again after a pause); the failure once none runs before ``deadline``."""
        error = ended.exception()
        try:
            query = self.wait_leading(max(1.0, deadline - time.monotonic()))
        except TimeoutError:
            if error is None:
                raise
            raise QueryFailedError(str(error)) from None
        if error is not None:
            log.warning(
                "controller %s: the query failed and runs again: %s",
                self.instance_id,
                str(error).splitlines()[0],
            )
        return query

    def run_until_signalled(
        self,
        stop_timeout_ms: int = DEFAULT_STOP_TIMEOUT_MS,
        then: Callable[[], None] | None = None,
    ) -> int:
        """Run until SIGINT/SIGTERM, then stop (and run ``then``: the session's stop)
        within ``stop_timeout_ms``; a second signal exits at once.

        With a service gone, stopping could block for minutes (the query waits on
        Kafka, the election on ZooKeeper): past the timeout the process exits
        without waiting (its Spark JVM ends with it), one line saying so."""
        done = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            if done.is_set():
                _exit_now(128 + signum, f"controller {self.instance_id}: stopped at once")
            log.info("controller %s: stopping (%s)", self.instance_id, signal.Signals(signum).name)
            done.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        stopped = threading.Event()

        def stop() -> None:
            try:
                self.stop()
                if then is not None:
                    then()
            except Exception as exc:  # reported in one line: the services may be gone
                self.failures.append(f"stop: {exc}")
            finally:
                stopped.set()

        try:
            self.start()
            while not done.wait(1.0):
                pass
        finally:
            threading.Thread(target=stop, name="controller-stop", daemon=True).start()
            if not stopped.wait(stop_timeout_ms / 1000):
                _exit_now(
                    1,
                    f"controller {self.instance_id}: not stopped within "
                    f"{stop_timeout_ms / 1000:g} s (Kafka, ZooKeeper or the store out of "
                    "reach?); exiting without waiting",
                )
        if self.failures:
            log.error("controller %s: %s", self.instance_id, "; ".join(self.failures))
        return 1 if self.failures else 0


def _exit_now(code: int, why: str) -> None:
    """End the process now (no thread is waited for), ``why`` logged as one line."""
    if code:
        log.error(why)
    else:
        log.info(why)
    logging.shutdown()
    os._exit(code)


# --- entry points (spark-submit and `tidemark controller run`) --------------------------------


def metrics_from_args(args: argparse.Namespace) -> Any:
    """``--metrics-port N``: serve the metrics of :mod:`tidemark.jobs.metrics` there; None: off."""
    port = getattr(args, "metrics_port", None)
    if port is None:
        return None
    return serve_metrics(port)


LeaderTasks = Callable[[ControllerSettings], Sequence[LeaderTask]]
"""What runs beside the query while a driver leads, given the driver's settings."""


def driver_work_dir(settings: ControllerSettings, instance: str) -> Path:
    """A local driver's Spark work directory: beside a local checkpoint root, else in
    the user's home."""
    if not is_local(settings.checkpoint_root):
        return Path.home() / ".tidemark" / "spark" / instance
    return Path(settings.checkpoint_root).parent / "spark" / instance


def spark_log_path(work_dir: Path) -> Path:
    """Where a local driver's own Spark logging goes (:attr:`SparkSettings.log_file`)."""
    return work_dir / "spark.log"


def run_local(
    args: argparse.Namespace,
    leader_tasks: LeaderTasks | None = None,
    python: str | None = None,
) -> int:
    """``tidemark controller run``: a local Spark session (or TIDEMARK_SPARK_MASTER);
    ``leader_tasks(settings)`` run while this driver leads (the CLI: the policy loop);
    ``python``: Spark's Python executable (:attr:`tidemark.infra.spark.SparkSettings.python`)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = settings_from_args(args)
    work_dir = driver_work_dir(settings, args.instance)
    spark_log = spark_log_path(work_dir)
    log.info("controller %s: Spark's own log goes to %s", args.instance, spark_log)
    spark = spark_session(
        SparkSettings(
            work_dir=work_dir,
            app_name=f"tidemark-controller-{args.instance}",
            python=python,
            log_file=spark_log,
        )
    )
    try:
        return ControllerJob(
            spark,
            settings,
            args.instance,
            metrics=metrics_from_args(args),
            leader_tasks=() if leader_tasks is None else leader_tasks(settings),
        ).run_until_signalled(args.stop_timeout_ms, then=lambda: stop_spark(spark))
    finally:
        stop_spark(spark)  # (at once when already stopped)


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry: the session comes from spark-submit's configuration."""
    parser = argparse.ArgumentParser(prog="controller_job", description=__doc__.split("\n")[0])
    add_controller_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = settings_from_args(args)
    builder = SparkSession.builder
    for name, value in forwarded_environment().items():  # executors build Kafka clients too
        builder = builder.config(f"spark.executorEnv.{name}", value)
    spark = (
        builder.appName(f"tidemark-controller-{args.instance}")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config(CHANGELOG_CHECKPOINTING, "true")
        .config(NO_DATA_BATCHES, "false")
        .config(KAFKA_CONSUMER_CACHE, str(KAFKA_CONSUMER_CACHE_SIZE))
        .config("spark.databricks.delta.properties.defaults.enableDeletionVectors", "false")
        .getOrCreate()
    )
    try:
        return ControllerJob(
            spark, settings, args.instance, metrics=metrics_from_args(args)
        ).run_until_signalled(args.stop_timeout_ms, then=spark.stop)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
