"""Spark jobs as stream writers: a DataFrame's rows become a stream's events, with time noted.

    target = StreamTarget("shop/orders", kafka_bootstrap=bootstrap, zk_connect=zk)
    write_to_stream(df, target, job_id="nightly-orders", batch_id=20260101)   # batch
    query = (spark.readStream...                                             # streaming
             .writeStream.foreachBatch(stream_writer(target, job_id="orders")).start())

Each Spark task (one partition of the DataFrame) is one ``EventWriter`` with
the stable id ``<job_id>/<batch_id>/<partition>``: a re-run of the same
batch (a retried task, a restarted query) is the same writer to the
controller. A task writes its rows (``value_col`` as the event, bytes or
text; ``key_col`` as the routing key; ``time_col`` as the event time in
ms, or a timestamp column; ``headers_col``, when the DataFrame has it, as the
Kafka headers, typed as Spark's Kafka sink takes them:
``array<struct<key: string, value: binary>>``), notes the maximum timestamp it stored, and
closes (the shutdown mark), so the job's output gets watermarks with no
extra code. Its marks are ``EventWriter``'s: the instance token, the
position, ``max_event_time``, the shutdown mark.

Timestamps follow the stream's timestamping rules as for any writer
(:mod:`tidemark.pipelines.writing.timestamping`): a null event time is "none
given" (the arrival time on a ``client-prefer`` stream); a
``client-require`` stream refuses the job before anything is sent when
a row's time is null (:class:`MissingTimestampError`); under
``refuse_adjustments`` a task fails at the first row whose time would be
adjusted (:class:`TimestampAdjustmentError`; its earlier rows are
written). ``StreamTarget(automatically_note_time=True)`` makes each task
note the time every ``note_time_interval_ms`` while it writes (a slow
task keeps the stream's watermark moving) and close at the time of its
end instead of noting its largest timestamp.

One run of ``write_to_stream`` is one writer *instance* to the
controller: the driver draws an instance token, registers the tasks'
writers under it (in the metadata store, and with the marks below) and
hands it to the tasks, so a retried task is heard at once. A later run of
the same batch (a restarted query) is a new instance, registered anew:
heard at once, whether the earlier run's tasks closed or died
(``schemas/README.md``, ``instance``).

Before the tasks start, the driver *registers* every task's writer with a
mark at time 0 and an empty position (``register=True``, the default;
``register=False`` skips those marks, not the registrations: a mark of an
unregistered writer is refused).
A writer whose time is not above the last watermark lags and holds the
stream's watermark (``tidemark.controller.watermarks.watermark_cycle``), so no
watermark can pass a task's events before that task has noted its time —
otherwise the first task to finish would let a watermark through while the
others still write older events. Once every task has closed, the
stream's watermark reaches the largest event time the job wrote (the
controller drops each shut-down writer as the watermark passes it). A task
must finish within the controller's writer timeout, or its registration
stops holding the watermark.

Executors need the metadata store (ZooKeeper) and Kafka reachable, and
tidemark importable.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from tidemark.controller.config import TimestampingMode
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.admin import ensure_marks_topic
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import WriterMark
from tidemark.controller.naming import ClusterSettings, split_stream
from tidemark.controller.zookeeper.session import zookeeper_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.jobs.exceptions import JobConfigurationError
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.exceptions import MissingTimestampError
from tidemark.pipelines.writing.marks import instance_token, mark_message
from tidemark.pipelines.writing.writer import EventWriter

log = logging.getLogger(__name__)

_REGISTRATION_TIMEOUT_S = 30


@dataclass(frozen=True)
class StreamTarget:
    """Where a job writes: the stream, the services, the columns it takes, and how its
    tasks' writers talk to Kafka and note time.

    ``automatically_note_time`` / ``note_time_interval_ms``: as ``WriterConfig``'s,
    for each task's writer (see the module doc).
    """

    stream: str
    kafka_bootstrap: str
    zk_connect: str
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    value_col: str = "value"
    key_col: str | None = "key"
    time_col: str = "event_time"
    linger_ms: int = 5
    headers_col: str | None = "headers"
    """Optional: used when the DataFrame has it (``None``: never)."""
    automatically_note_time: bool = False
    note_time_interval_ms: int = 1_000

    def __post_init__(self) -> None:
        split_stream(self.stream)
        if not self.kafka_bootstrap or not self.zk_connect:
            raise JobConfigurationError("StreamTarget needs kafka_bootstrap and zk_connect")
        self.writer_config()  # checks the writer settings on the driver

    def writer_config(self) -> WriterConfig:
        """The settings of each task's ``EventWriter``."""
        return WriterConfig(
            cluster=self.cluster,
            linger_ms=self.linger_ms,
            automatically_note_time=self.automatically_note_time,
            note_time_interval_ms=self.note_time_interval_ms,
        )

    def metadata(self) -> StreamMetadata:
        """The stream's metadata, read from the store."""
        with zookeeper_session(self.zk_connect) as client:
            return ZooKeeperStore(client, self.cluster.zk_root).get_stream(self.stream)


@dataclass(frozen=True)
class TaskReport:
    """What one task wrote: its writer id, how many events, and the time it noted."""

    writer_id: str
    events: int
    max_time: int | None


def writer_id(job_id: str, batch_id: int, partition: int) -> str:
    """The stable writer id of one task: ``<job_id>/<batch_id>/<partition>``."""
    return f"{job_id}/{batch_id}/{partition}"


def event_time_ms(value: Any) -> int | None:
    """A row's event time as integer ms: an int, or a datetime (a naive one is local
    time, as PySpark returns timestamp columns); ``None`` for a null (none given: the
    stream's timestamping decides)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise JobConfigurationError(f"event time must be ms or a timestamp, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, dt.datetime):
        return int(value.timestamp() * 1000)
    raise JobConfigurationError(
        f"event time must be ms (int) or a timestamp, got {type(value).__name__}"
    )


def _value_bytes(value: Any, column: str) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise JobConfigurationError(f"column {column!r} must be binary or string, got {value!r}")


def _headers(row: Any, column: str) -> list[tuple[str, bytes]] | None:
    """A row's headers column (Spark's Kafka sink type) as Kafka headers."""
    entries = row[column]
    if entries is None:
        return None
    try:
        return [(h["key"], _value_bytes(h["value"], f"{column}.value")) for h in entries]
    except (TypeError, KeyError, ValueError) as exc:
        raise JobConfigurationError(
            f"column {column!r} must be array<struct<key: string, value: binary>> "
            f"(as Spark's Kafka sink takes), got {entries!r}"
        ) from exc


def write_partition(
    target: StreamTarget, writer: str, rows: Iterable[Any], instance: str | None = None
) -> TaskReport:
    """One task's work: write ``rows`` as ``writer`` (instance token ``instance``: the one
    its registration carries), note the largest timestamp stored, close."""
    with zookeeper_session(target.zk_connect) as client:
        events, top = 0, None
        with EventWriter(
            writer,
            target.stream,
            store=ZooKeeperStore(client, target.cluster.zk_root),
            bootstrap_servers=target.kafka_bootstrap,
            config=target.writer_config(),
            instance=instance,
        ) as w:
            for row in rows:
                given = event_time_ms(row[target.time_col])
                key = row[target.key_col] if target.key_col is not None else None
                value = _value_bytes(row[target.value_col], target.value_col)
                headers = _headers(row, target.headers_col) if target.headers_col else None
                ts = w.write(value, key, timestamp=given, headers=headers)
                events += 1
                top = ts if top is None else max(top, ts)
            if not target.automatically_note_time:  # else close notes the time of its end
                # A task with no rows notes time 0, so its close ends its registration.
                w.note_time(top if top is not None else 0)
        return TaskReport(writer, events, top)


def register_writers(
    target: StreamTarget, writers: Iterable[str], instance: str | None = None, hold: bool = True
) -> str:
    """Register each writer under the instance token ``instance`` (a new one unless given)
    in the metadata store, then (``hold``) publish a time-0 mark with an empty position for
    each (see the module doc); the token."""
    token = instance_token(instance)
    writers = list(writers)
    with zookeeper_session(target.zk_connect) as client:  # before their first marks
        store = ZooKeeperStore(client, target.cluster.zk_root)
        for wid in writers:
            store.register_writer(target.stream, wid, token)
    if not hold:
        return token
    ensure_marks_topic(target.kafka_bootstrap, target.cluster, create=True)
    producer = roles.client(roles.MARKS_PRODUCER, target.kafka_bootstrap)
    for wid in writers:
        mark = WriterMark(0, {})
        msg = mark_message(target.cluster, target.stream, wid, mark, instance=token)
        producer.produce(msg.topic, msg.value, msg.key, partition=msg.partition)
    if producer.flush(_REGISTRATION_TIMEOUT_S):
        raise JobConfigurationError(
            f"marks topic {target.cluster.marks_topic!r}: registrations not acknowledged in "
            f"{_REGISTRATION_TIMEOUT_S} s"
        )
    return token


def require_times(df: Any, target: StreamTarget, metadata: StreamMetadata) -> None:
    """On a ``client-require`` stream, refuse the job before anything is sent when a row's
    event time is null (every task would write the rows before it, then fail)."""
    if metadata.config.timestamping is not TimestampingMode.CLIENT_REQUIRE:
        return
    if df.where(df[target.time_col].isNull()).limit(1).count():
        raise MissingTimestampError(target.stream, f"a row whose {target.time_col!r} is null")


def write_to_stream(
    df: Any, target: StreamTarget, *, job_id: str, batch_id: int = 0, register: bool = True
) -> list[TaskReport]:
    """Write ``df`` to ``target.stream``, one writer per partition; the tasks' reports."""
    if not job_id or "/" in job_id:
        raise JobConfigurationError(f"job_id must be a non-empty name without '/', got {job_id!r}")
    missing = [
        c for c in (target.value_col, target.key_col, target.time_col) if c and c not in df.columns
    ]
    if missing:
        raise JobConfigurationError(
            f"the DataFrame has no column(s) {missing}; it has {df.columns} "
            "(set StreamTarget.value_col / key_col / time_col)"
        )
    if target.headers_col is not None and target.headers_col not in df.columns:
        target = replace(target, headers_col=None)
    columns = [
        c for c in (target.value_col, target.key_col, target.time_col, target.headers_col) if c
    ]
    require_times(df, target, target.metadata())
    rdd = df.select(*columns).rdd
    writers = [writer_id(job_id, batch_id, p) for p in range(rdd.getNumPartitions())]
    instance = register_writers(target, writers, hold=register)

    def task(partition: int, rows: Iterator[Any]) -> Iterator[TaskReport]:
        yield write_partition(target, writer_id(job_id, batch_id, partition), rows, instance)

    reports: list[TaskReport] = rdd.mapPartitionsWithIndex(task).collect()
    log.info(
        "job %s batch %d: %d events to %s from %d tasks",
        job_id,
        batch_id,
        sum(r.events for r in reports),
        target.stream,
        len(reports),
    )
    return reports


def stream_writer(
    target: StreamTarget, *, job_id: str, register: bool = True
) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function: each micro-batch is written as batch ``batch_id``."""

    def write_batch(df: Any, batch_id: int) -> None:
        write_to_stream(df, target, job_id=job_id, batch_id=int(batch_id), register=register)

    return write_batch


__all__ = [
    "StreamTarget",
    "TaskReport",
    "event_time_ms",
    "register_writers",
    "require_times",
    "stream_writer",
    "write_partition",
    "write_to_stream",
    "writer_id",
]
