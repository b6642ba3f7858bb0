"""The watermark controller: one streaming query per owned bucket of the marks topic.

    instance = ControllerInstance(spark, settings, "controller-1").start()
    ...                                  # buckets come and go with ZooKeeper ownership
    instance.stop()

    # on a cluster:
    spark-submit --packages io.delta:delta-spark_2.13:4.0.0,... jobs/controller_job.py \\
        --instance c1 --bootstrap kafka:9092 --zk zk:2181 \\
        --delta-root s3a://lake/tidemark --checkpoint-root s3a://lake/tidemark-checkpoints

For **each owned bucket** ``n`` the instance runs one query: the Kafka source
reads only partition ``n`` of the marks topic (``assign``), ``read_committed``
(a transaction's mark is seen exactly when its data is), from the earliest
offset on first start; per-stream state lives in Spark's state store, keyed
by slots of streams (:mod:`jobs.processor`, :mod:`jobs.slots`); each
micro-batch is appended to the Delta tables idempotently (:mod:`jobs.sink`).
The query's checkpoint is ``<checkpoint root>/bucket-<n>`` on shared
storage, so whoever owns the bucket next resumes from its offsets *and*
state: nothing is skipped, duplicated or goes backwards. The trigger is the watermark interval.

Hand-over order. :class:`controller.buckets.BucketOwner` decides who *should*
own a bucket and deletes its ownership znode as soon as it gives a bucket up,
before this instance can stop the query. So a second, job-level lock fences
the *query*: ``<zk root>/controller-job/running/<n>`` (ephemeral, data = the
instance id) is created before a bucket's query starts and deleted only
after ``query.stop()`` returned. An instance that gains a bucket starts its
query only once it holds that znode; until then it retries every
``recheck_s``. If the old owner dies, its session's ephemeral znode goes with
it. If it is alive but cut off from ZooKeeper (its session expired while it
still runs a query), the checkpoint fences it: both queries would write the
same batch id to the bucket's offset log, Spark refuses the second
("concurrent update to the log") and that query fails; the Delta appends of
a batch both ran carry the same transaction identifier (appId, version):
the sink skips a batch a table already holds, and delta-rs refuses the
slower of two concurrent commits ("concurrent transaction"), failing that
query. On SUSPENDED, ``BucketOwner`` reports no buckets and this instance
stops its queries at once (safety over availability).
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from jobs.cli_args import add_controller_arguments, settings_from_args
from jobs.config import ControllerSettings
from jobs.exceptions import JobConfigurationError, QueryFailedError
from jobs.maintenance import MAINTENANCE_BUCKET, MaintenanceSwitch, maintenance_switch
from jobs.sink import DeltaSink, ensure_tables

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG_CHECKPOINTING = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
"""For a checkpoint root on the local file system. Spark's default manager renames
through Hadoop's ``FileContext``, which on a local path runs ``readlink`` in a
forked process for every rename (offset log, commit log, state changelog); plain
``FileSystem`` renames are atomic there and fork nothing: about 0.3 s less per
micro-batch on two cores. Other file systems keep Spark's default."""


def is_local(root: str) -> bool:
    """A plain path or a ``file:`` URI (not HDFS, S3, ...)."""
    return urlparse(root).scheme in ("", "file")


STATE_PARTITIONS = 1
"""Shuffle (hence state) partitions of a bucket's query when its checkpoint is new: the
bucket is the unit of parallelism; each extra partition costs a RocksDB commit and a
Python worker call per micro-batch."""


def ensure_marks_topic(settings: ControllerSettings) -> None:
    """Create the marks topic (``bucket_count`` partitions) if missing; refuse another count."""
    from controller.kafka_admin import StreamTopics
    from controller.naming import LOG_APPEND_TIME, MARKS_TOPIC_CONFIGS, TIMESTAMP_TYPE

    topics = StreamTopics(settings.kafka_bootstrap)
    topic, buckets = settings.cluster.marks_topic, settings.cluster.bucket_count
    if topics.partition_count(topic) is None:
        topics.create(topic, buckets, MARKS_TOPIC_CONFIGS)
    elif topics.topic_configs(topic).get(TIMESTAMP_TYPE) != LOG_APPEND_TIME:
        log.warning("marks topic %s: setting %s=%s", topic, TIMESTAMP_TYPE, LOG_APPEND_TIME)
        topics.alter_configs(topic, MARKS_TOPIC_CONFIGS)
    found = topics.partition_count(topic)
    if found != buckets:
        raise JobConfigurationError(
            f"marks topic {topic!r} has {found} partitions but bucket_count is {buckets}; "
            "writers and controllers must agree on it"
        )


def query_name(settings: ControllerSettings, bucket: int) -> str:
    return f"tidemark-controller-{settings.cluster.marks_topic}-bucket-{bucket}"


def marks_frame(spark: Any, settings: ControllerSettings, bucket: int) -> Any:
    """The bucket's records: ``stream`` (the raw key), ``value``, ``partition``, ``offset``,
    ``arrival`` (the broker's append time in ms; null unless the topic is ``LogAppendTime``)."""
    from controller.kafka_client import spark_kafka_options

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
        .option("assign", json.dumps({settings.cluster.marks_topic: [bucket]}))
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        # Marks past the topic's retention are gone for every reader; keep going.
        .option("failOnDataLoss", "false")
        .options(**spark_kafka_options())
    )
    if settings.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
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


def start_bucket_query(
    spark: Any, settings: ControllerSettings, bucket: int, metrics: Any = None
) -> Any:
    """Start bucket ``bucket``'s query (from its checkpoint if one exists)."""
    from pyspark.sql.functions import expr

    from jobs.processor import OUTPUT_SCHEMA, ControllerProcessor
    from jobs.slots import SLOT_EXPRESSION

    watermarks = (
        marks_frame(spark, settings, bucket)
        .withColumn("slot", expr(SLOT_EXPRESSION))
        .groupBy("slot")
        .transformWithStateInPandas(
            statefulProcessor=ControllerProcessor(settings.workflow()),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="ProcessingTime",
        )
    )
    sink = DeltaSink(settings.delta_root, settings.app_id(bucket))
    if metrics is not None:  # --- metrics hook (jobs.metrics) ---
        sink.observer = metrics.batch_observer(bucket)
    writer = (
        watermarks.writeStream.queryName(query_name(settings, bucket))
        .option("checkpointLocation", settings.checkpoint_dir(bucket))
        .trigger(processingTime=f"{settings.interval_ms} milliseconds")
        .foreachBatch(sink)
    )
    # The state's partitions are the session's spark.sql.shuffle.partitions when the
    # query first starts; its checkpoint fixes them from then on.
    with _START_LOCK:
        previous = spark.conf.get("spark.sql.shuffle.partitions")
        spark.conf.set("spark.sql.shuffle.partitions", str(STATE_PARTITIONS))
        try:
            query = writer.start()
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", previous)
    sink.bind(str(query.id))
    log.info("bucket %d: query %s started", bucket, query.id)
    return query


_START_LOCK = threading.Lock()


@dataclass(frozen=True)
class BucketQuery:
    bucket: int
    query: Any


def is_transient(error: Any) -> bool:
    """A query failure that a restart from the checkpoint recovers from (see
    :meth:`ControllerInstance._wait_between_batches`)."""
    return "scala.Option.get()" in str(error) and "null" in str(error)


def _reached(query: Any, topic: str, bucket: int) -> int:
    """The end offset of the query's last completed batch on ``bucket`` (-1: none yet)."""
    progress = query.lastProgress
    if not progress:
        return -1
    for source in progress.get("sources", ()):
        end = source.get("endOffset")
        if isinstance(end, str):  # JSON, or (PySpark 4.1) a Python repr of the dict
            try:
                end = json.loads(end)
            except ValueError:
                end = ast.literal_eval(end)
        if isinstance(end, dict) and topic in end:
            return int(end[topic].get(str(bucket), -1))
    return -1


class ControllerInstance:
    """One controller instance: bucket ownership in ZooKeeper, a query per owned bucket."""

    def __init__(
        self,
        spark: Any,
        settings: ControllerSettings,
        instance_id: str,
        zk_client: Any = None,
        recheck_s: float = 0.5,
        metrics: Any = None,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.instance_id = instance_id
        self._client = zk_client
        self._own_client = zk_client is None
        self._owner: Any = None
        self._recheck_s = recheck_s
        self._queries: dict[int, Any] = {}
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._maintenance: MaintenanceSwitch | None = None
        self.failures: list[str] = []
        # Prometheus metrics (jobs.metrics); None: off
        self.metrics: Any = metrics

    @property
    def _running_path(self) -> str:
        return f"{self.settings.cluster.zk_root.rstrip('/')}/controller-job/running"

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> ControllerInstance:
        from kazoo.client import KazooClient

        self.spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        # Commit a small changelog per batch instead of uploading a RocksDB snapshot
        # (about 0.3-0.4 s per partition and batch); snapshots are taken in the background.
        self.spark.conf.set(CHANGELOG_CHECKPOINTING, "true")
        if is_local(self.settings.checkpoint_root):
            self.spark.conf.set(CHECKPOINT_FILE_MANAGER, LOCAL_CHECKPOINT_FILE_MANAGER)
        ensure_marks_topic(self.settings)
        ensure_tables(self.spark, self.settings.delta_root)
        self._maintenance = maintenance_switch(self.settings)  # issue 19: bucket 0 leads
        if self._client is None:
            self._client = KazooClient(hosts=self.settings.zk_connect)
            self._client.start(timeout=30)
        self._client.ensure_path(self._running_path)
        self._owner = self._new_owner()
        self._thread = threading.Thread(
            target=self._loop, name=f"controller-{self.instance_id}", daemon=True
        )
        self._thread.start()
        return self

    def _new_owner(self) -> Any:
        from controller.buckets import BucketOwner

        return BucketOwner(
            self._client,
            self.instance_id,
            self.settings.cluster.bucket_count,
            root=self.settings.cluster.zk_root,
            on_change=lambda _owned: self._wake.set(),
        ).start()

    def stop(self) -> None:
        """Stop every query (then release its run lock), then leave the ownership."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
        with self._lock:
            for bucket in sorted(self._queries):
                self._stop_query(bucket)
        if self._maintenance is not None:
            self._maintenance.close()
        if self._owner is not None:
            self._owner.stop()
        if self._own_client and self._client is not None:
            self._client.stop()
            self._client.close()

    def __enter__(self) -> ControllerInstance:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- queries ---------------------------------------------------------------------------

    def running(self) -> frozenset[int]:
        with self._lock:
            return frozenset(b for b, q in self._queries.items() if q.isActive)

    def query(self, bucket: int) -> Any:
        with self._lock:
            return self._queries.get(bucket)

    def process_all_available(self, timeout_s: float = 120) -> None:
        """Wait until every running query has processed what its partition holds now (tests).

        ``StreamingQuery.processAllAvailable`` never returns here: with
        processing-time timers, ``transformWithState`` runs a batch on every
        trigger, so the query never reports "no new data". Instead: read each
        bucket's last stable offset, then wait for a completed batch that
        reached it.
        """
        from jobs.lookups import KafkaCommittedOffsets

        topic = self.settings.cluster.marks_topic
        with self._lock:
            queries = dict(self._queries)
        if not queries:
            return
        targets = KafkaCommittedOffsets(self.settings.kafka_bootstrap).query(topic, sorted(queries))
        deadline = time.monotonic() + timeout_s
        for bucket, query in queries.items():
            while query.isActive and _reached(query, topic, bucket) < targets[bucket]:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"bucket {bucket}: at offset {_reached(query, topic, bucket)}, "
                        f"expected {targets[bucket]}"
                    )
                time.sleep(0.05)
            error = None if query.isActive else query.exception()
            if error is not None and not is_transient(error):
                raise QueryFailedError(f"bucket {bucket}: {error}")

    def wait_running(self, buckets: frozenset[int] | set[int], timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while self.running() != frozenset(buckets):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.instance_id}: running {sorted(self.running())}, "
                    f"expected {sorted(buckets)}; failures: {self.failures}"
                )
            time.sleep(0.2)

    # --- the reconcile loop ----------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._reconcile()
            except Exception:
                log.exception("controller %s: reconcile failed", self.instance_id)
            self._wake.wait(self._recheck_s)
            self._wake.clear()

    def _reconcile(self) -> None:
        from controller.buckets import OwnerState

        owner = self._owner
        if owner.state is OwnerState.LOST:
            log.warning(
                "controller %s: session lost; stopping queries, rejoining", self.instance_id
            )
            with self._lock:
                for bucket in sorted(self._queries):
                    self._stop_query(bucket)
            owner.stop()
            self._owner = owner = self._new_owner()
        owned = owner.owned() if owner.state is OwnerState.RUNNING else frozenset()
        if self._maintenance is not None:
            self._maintenance.lead(MAINTENANCE_BUCKET in owned)
        with self._lock:
            if self.metrics is not None:  # --- metrics hook (jobs.metrics) ---
                for bucket, query in self._queries.items():
                    self.metrics.observe_query(bucket, query)
            for bucket in sorted(self._queries):
                query = self._queries[bucket]
                if bucket not in owned or not query.isActive:
                    self._stop_query(bucket)
            for bucket in sorted(owned - set(self._queries)):
                if self._stopping.is_set():
                    return
                if not self._take_run_lock(bucket):
                    continue
                try:
                    self._queries[bucket] = start_bucket_query(
                        self.spark, self.settings, bucket, self.metrics
                    )
                except Exception as exc:
                    log.exception(
                        "controller %s: bucket %d did not start", self.instance_id, bucket
                    )
                    self.failures.append(f"bucket {bucket}: {exc}")
                    self._release_run_lock(bucket)

    def _stop_query(self, bucket: int) -> None:
        query = self._queries.pop(bucket)
        try:
            error = query.exception() if not query.isActive else None
            if error is not None and is_transient(error):
                log.warning(
                    "controller %s: bucket %d restarts after %s", self.instance_id, bucket, error
                )
            elif error is not None:
                log.error("controller %s: bucket %d failed: %s", self.instance_id, bucket, error)
                self.failures.append(f"bucket {bucket}: {error}")
            self._wait_between_batches(query)
            query.stop()
        except Exception:
            log.exception("controller %s: stopping bucket %d", self.instance_id, bucket)
        finally:
            self._release_run_lock(bucket)
        log.info("controller %s: bucket %d stopped", self.instance_id, bucket)

    def _wait_between_batches(self, query: Any) -> None:
        """Stop right after a batch ends, not in the middle of one.

        A query stopped mid-batch leaves a batch in its offset log without a
        commit; the next owner re-runs it, and Spark 4.1.1's Kafka source then
        fails while reporting that batch's metrics (NullPointerException in
        ``KafkaMicroBatchStream.metrics``) -- after committing it, so a restart
        recovers (see :func:`is_transient`), but it costs a restart.
        """
        deadline = time.monotonic() + 3 * self.settings.interval_ms / 1000 + 10
        seen_active = False
        while query.isActive and time.monotonic() < deadline:
            active = bool(query.status.get("isTriggerActive"))
            if seen_active and not active:
                return
            seen_active = seen_active or active
            time.sleep(0.01)

    def _take_run_lock(self, bucket: int) -> bool:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        try:
            self._client.create(
                f"{self._running_path}/{bucket}", self.instance_id.encode(), ephemeral=True
            )
            return True
        except NodeExistsError:
            try:
                data, _ = self._client.get(f"{self._running_path}/{bucket}")
            except NoNodeError:  # released between the two calls: try again next round
                return False
            return bool(data.decode() == self.instance_id)

    def _release_run_lock(self, bucket: int) -> None:
        from kazoo.exceptions import KazooException, NoNodeError

        path = f"{self._running_path}/{bucket}"
        try:
            data, stat = self._client.get(path)
            if data.decode() == self.instance_id:
                self._client.delete(path, version=stat.version)
        except (NoNodeError, KazooException):
            pass

    def run_until_signalled(self) -> int:
        """Run until SIGINT/SIGTERM; exit status 1 if a query failed for good."""
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        self.start()
        try:
            while not done.wait(1.0):
                pass
        finally:
            self.stop()
        if self.failures:
            log.error("controller %s: %s", self.instance_id, "; ".join(self.failures))
        return 1 if self.failures else 0


# --- entry points (spark-submit and `tidemark controller run`) --------------------------------


def metrics_from_args(args: argparse.Namespace) -> Any:
    """``--metrics-port N``: serve the metrics of :mod:`jobs.metrics` there; None: off."""
    port = getattr(args, "metrics_port", None)
    if port is None:
        return None
    from jobs.metrics import serve_metrics

    return serve_metrics(port)


def run_local(args: argparse.Namespace) -> int:
    """``tidemark controller run``: a local Spark session (or TIDEMARK_SPARK_MASTER)."""
    from pathlib import Path

    from infra.spark import SparkSettings, spark_session, stop_spark

    settings = settings_from_args(args)
    spark = spark_session(
        SparkSettings(
            work_dir=Path(settings.checkpoint_root).parent / "spark" / args.instance
            if "://" not in settings.checkpoint_root
            else Path.home() / ".tidemark" / "spark" / args.instance,
            app_name=f"tidemark-controller-{args.instance}",
        )
    )
    try:
        return ControllerInstance(
            spark, settings, args.instance, metrics=metrics_from_args(args)
        ).run_until_signalled()
    finally:
        stop_spark(spark)


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry: the session comes from spark-submit's configuration."""
    from pyspark.sql import SparkSession

    parser = argparse.ArgumentParser(prog="controller_job", description=__doc__.split("\n")[0])
    add_controller_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = settings_from_args(args)
    spark = (
        SparkSession.builder.appName(f"tidemark-controller-{args.instance}")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config(CHANGELOG_CHECKPOINTING, "true")
        .config("spark.databricks.delta.properties.defaults.enableDeletionVectors", "false")
        .getOrCreate()
    )
    try:
        return ControllerInstance(
            spark, settings, args.instance, metrics=metrics_from_args(args)
        ).run_until_signalled()
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
