"""The Spark session factory: local[2], Delta, the Kafka source and Avro.

    spark = spark_session(SparkSettings(work_dir=tmp_path / "spark"))
    ...
    stop_spark(spark)     # also ends the JVM, so no process outlives the owner

``TIDEMARK_SPARK_MASTER`` points it at a cluster instead of ``local[2]``.
The Spark packages come from the jars that ``make setup`` resolved (see
:mod:`tidemark.infra.jars`); nothing is downloaded when a session starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.environment import Environment
from tidemark.infra import jars
from tidemark.infra.java import java_executable
from tidemark.infra.ports import HOST

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
KAFKA_CONSUMER_CACHE = "spark.kafka.consumer.cache.capacity"
KAFKA_CONSUMER_CACHE_SIZE = 1024
"""Kafka consumers an executor keeps between micro-batches (one per topic partition a
query reads). Spark's default is 64, and its pool clears its oldest idle consumers
whenever it holds that many when a task borrows one: with 64 or more partitions
(a controller's buckets) every batch closed and re-created consumers ("Pool exceeds
its soft max size"). A soft limit: only partitions in use hold a consumer."""


LOCAL_JVM_OPTIONS = ("-XX:+UseParallelGC", "-XX:TieredStopAtLevel=1")
"""The driver JVM's options on a local master, where it runs the tasks too: the
parallel collector and the C1 compiler only. On two cores, G1's concurrent cycles
and C2's compile queue took the cores the controller's small micro-batches need
(figures: ``docs/benchmarks.md``). Cluster masters keep Spark's defaults."""


SPARK_LOG4J_CONF = Path(__file__).resolve().parent / "conf" / "spark-log4j2.properties"
"""The driver's logging when :attr:`SparkSettings.log_file` is set: all of it to that file."""


@dataclass(frozen=True)
class SparkSettings:
    work_dir: Path
    app_name: str = "tidemark"
    master: str | None = None  # None: TIDEMARK_SPARK_MASTER, else local[2]
    shuffle_partitions: int = 2
    driver_memory: str = "2g"
    rocksdb_state: bool = True
    extra: dict[str, str] = field(default_factory=dict)
    python: str | None = None
    """Spark's Python executable (``PYSPARK_PYTHON``); ``None``: this interpreter, which
    has pandas and pyarrow (e.g. :mod:`tidemark.python_zygote`'s launcher on a local master)."""
    log_file: Path | None = None
    """Where the driver JVM's own logging goes (Spark's warnings, Kafka and Delta
    clients'); ``None``: the process's stderr, as Spark's default."""
    jvm_options: tuple[str, ...] = LOCAL_JVM_OPTIONS
    """Options of the driver JVM on a local master (:data:`LOCAL_JVM_OPTIONS`; empty:
    the JVM's defaults). With them, its initial heap is its maximum (``driver_memory``):
    the collector does not start small and collect every second while the heap grows."""


def driver_java_options(settings: SparkSettings, master: str) -> str:
    """The driver JVM's options: Derby's home under the work directory; on a local
    master also ``settings.jvm_options`` and an initial heap of ``driver_memory``."""
    options = [f"-Dderby.system.home={settings.work_dir / 'derby'}"]
    if settings.log_file is not None:
        options += [
            f"-Dlog4j2.configurationFile=file:{SPARK_LOG4J_CONF}",
            f"-Dtidemark.spark.log={settings.log_file}",
        ]
    if master.startswith("local") and settings.jvm_options:
        options += [*settings.jvm_options, f"-Xms{settings.driver_memory}"]
    return " ".join(options)


def spark_conf(settings: SparkSettings, env: Environment | None = None) -> dict[str, str]:
    """The configuration a tidemark session starts with (also used for spark-submit)."""
    env = env or Environment.from_env()
    work = settings.work_dir
    master = settings.master or env.spark_master or "local[2]"
    conf = {
        "spark.master": master,
        "spark.app.name": settings.app_name,
        "spark.jars": ",".join(jars.spark_extra_jars(env)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.default.parallelism": str(settings.shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.driver.memory": settings.driver_memory,
        "spark.sql.warehouse.dir": str(work / "warehouse"),
        "spark.local.dir": str(work / "local"),
        "spark.driver.extraJavaOptions": driver_java_options(settings, master),
        "spark.sql.session.timeZone": "UTC",
        # Plain Delta tables, so delta-rs readers see every feature they need.
        "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.streaming.stopTimeout": "30s",
        KAFKA_CONSUMER_CACHE: str(KAFKA_CONSUMER_CACHE_SIZE),
    }
    if settings.rocksdb_state:
        conf["spark.sql.streaming.stateStore.providerClass"] = ROCKSDB_PROVIDER
    conf.update(settings.extra)
    return conf


def spark_session(settings: SparkSettings, env: Environment | None = None) -> SparkSession:
    from pyspark.sql import SparkSession  # lazily: importing tidemark.infra.spark loads no Spark

    env = env or Environment.from_env()
    java_executable(env)  # a clear error before pyspark's obscure one
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    os.environ["PYSPARK_PYTHON"] = settings.python or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder: Any = SparkSession.builder
    for key, value in spark_conf(settings, env).items():
        builder = builder.config(key, value)
    session: SparkSession = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    start_callback_server(session)
    log.info("spark session %s on %s", settings.app_name, session.sparkContext.master)
    return session


def start_callback_server(session: SparkSession) -> None:
    """Start py4j's callback server (JVM -> Python calls: ``foreachBatch``, query listeners) now.

    PySpark starts it lazily, at the first ``foreachBatch``; its accept loop
    watches its socket with ``select()``, which fails on a file descriptor of
    1024 or more ("filedescriptor out of range in select()"), and every
    callback then fails ("Connection reset"). A process that has opened many
    Kafka clients by then (a benchmark's 200 writers) gets such a descriptor;
    started with the session, the socket takes a low one.
    """
    from pyspark.java_gateway import ensure_callback_server_started  # lazily, as above

    ensure_callback_server_started(session.sparkContext._gateway)  # type: ignore[no-untyped-call]


def stop_spark(session: SparkSession | None = None) -> None:
    """Stop the session and the JVM behind it (pyspark keeps it alive otherwise)."""
    from pyspark import SparkContext  # lazily, as above
    from pyspark.sql import SparkSession  # lazily, as above

    session = session or SparkSession.getActiveSession()
    if session is not None:
        session.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        proc = getattr(gateway, "proc", None)
        with contextlib.suppress(Exception):
            gateway.shutdown()
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
            try:
                proc.wait(timeout=20)
            except Exception:
                proc.kill()
        SparkContext._gateway = None
        SparkContext._jvm = None
