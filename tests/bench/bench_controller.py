"""The watermark controller: idle cost, capacity, freshness (``make bench``; not a timed test).

Run one part: ``python -m tests.bench bench_controller:idle`` (``capacity``,
``freshness``; comma-separated). ``TIDEMARK_BENCH_QUICK=1`` shrinks every
part to check that it runs (the figures then mean little).

- **idle**: ``tidemark controller run`` as its own process (driver, its
  Spark JVM, Python workers), 64 buckets, 1 000 registered streams, no
  marks; after its first batch, the CPU time of that process tree over
  60 s (from ``/proc``, sampled every 0.5 s: a process that exits in the
  window keeps what it used) divided by 60 s. Goal <= 0.05 core.
- **capacity**: 1 000 streams x 20 writers; a backlog of marks produced
  straight to the marks topic (empty positions: the streams' topics are not
  created, so the last-stable-offset check has nothing to ask). A warm-up
  backlog is drained first (a query's first batches start Python workers
  and wait for code generation and the JIT); then the measured backlog,
  encoded beforehand, lands at once while the query runs (one Kafka
  transaction: the query sees it when it commits, after the producer's and
  the broker's work, as the baseline does); wall clock from the start of the
  first batch that reads it to the end of the last. Six such bursts (each
  noting later times), one after another drained; the first is not counted
  (a query's bursts got faster over its first ~10 s: 36.7, 46.0, 53.1 k
  marks/s in one run) and the figure is the median of the other five's,
  all printed (a burst lasts about 3 s, and one burst's rate varied by a
  fifth from run to run, either way). For 8 buckets the job
  then stops, a backlog is produced, and the job resumes from its
  checkpoint in the same session: that figure (first batch's planning,
  state stores loaded from the checkpoint, new consumers) is printed beside,
  as a restart's cost.
  Bucket count 8, then 64 (each its own topic and checkpoint), both on the
  default state partitions (Spark's default parallelism); baseline: the
  same marks (the measured backlog's offsets) read from Kafka and appended to
  a Delta table by a plain Spark batch job (no decoding, no state). Goals:
  controller >= 0.7 x baseline, and 8 vs 64 buckets within 15 %.
- **freshness**: 100 streams x 2 writers noting wall-clock time every 200
  ms, 1 s interval; for each watermark, the wall time at which it is first
  visible in the Delta table ``marks`` (polled with deltalake every 50 ms,
  reading only new data files) minus its ``time``. Goal p99 <= 1.5 s.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.bench.load import produce_all

QUICK = os.environ.get("TIDEMARK_BENCH_QUICK") == "1"
STREAMS = 200 if QUICK else 1_000
WRITERS = 20
ROUNDS = 2 if QUICK else 8
WARMUP_ROUNDS = 1 if QUICK else 4
MAX_PER_TRIGGER = 100_000
BURSTS = 1 if QUICK else 5
WARMUP_BURSTS = 0 if QUICK else 1
IDLE_BUCKETS = 64
IDLE_SECONDS = 15 if QUICK else 60
FRESH_STREAMS = 20 if QUICK else 100
FRESH_SECONDS = 15 if QUICK else 30
FRESH_BUCKETS = 8


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} {five:.1f} {fifteen:.1f}"


def run(services: Any, parts: list[str] | None = None) -> list[str]:
    from kazoo.client import KazooClient

    from tidemark.infra.spark import SparkSettings, spark_session, stop_spark

    work = Path(services.work_dir) / f"bench-controller-{uuid.uuid4().hex[:6]}"
    root = f"/bench-{uuid.uuid4().hex[:8]}"
    zk = KazooClient(hosts=services.zk_connect)
    zk.start(timeout=30)
    zk.ensure_path(root)
    wanted = parts or list(PARTS)
    spark = None
    lines: list[str] = []
    try:
        for name in wanted:
            part = PARTS[name]
            if name != "idle" and spark is None:
                spark = spark_session(
                    SparkSettings(work_dir=work / "spark", app_name="bench-controller")
                )
            try:
                lines += [
                    f"{line} [{_load()}]" for line in part(spark, services, root, work / name)
                ]
            except Exception as exc:  # report what was measured, and why the rest was not
                lines.append(f"{name}: failed: {exc!r}")
            print(*(f"   {line}" for line in lines), sep="\n", flush=True)
    finally:
        if spark is not None:
            for q in spark.streams.active:
                q.stop()
            stop_spark(spark)
        zk.delete(root, recursive=True)
        zk.stop()
        zk.close()
    return lines


def _settings(services: Any, root: str, work: Path, buckets: int, **kw: Any) -> Any:
    from tidemark.controller.naming import ClusterSettings
    from tidemark.jobs.config import ControllerSettings

    cluster = ClusterSettings(
        marks_topic=f"bench-marks-{uuid.uuid4().hex[:8]}", bucket_count=buckets, zk_root="/tidemark"
    )
    return ControllerSettings(
        kafka_bootstrap=services.bootstrap,
        zk_connect=f"{services.zk_connect}{root}",
        delta_root=str(work / "delta"),
        checkpoint_root=str(work / "checkpoints"),
        cluster=cluster,
        **kw,
    )


def _create_streams(settings: Any, prefix: str, count: int, writers: int = 0) -> None:
    """``count`` streams under ``prefix``, each with ``writers`` writer ids ``w<n>``
    registered under the token ``w<n>`` (the marks of :func:`_encode_marks`)."""
    from kazoo.client import KazooClient

    from tidemark.controller.config import StreamConfiguration
    from tidemark.controller.exceptions import ControllerError
    from tidemark.controller.metadata import new_stream_metadata
    from tidemark.controller.zookeeper.store import ZooKeeperStore

    client = KazooClient(hosts=settings.zk_connect)
    client.start(timeout=30)
    try:
        store = ZooKeeperStore(client, settings.cluster.zk_root)
        store.create_scope(prefix)
        for i in range(count):
            with contextlib.suppress(ControllerError):  # made by an earlier part
                store.create_stream(new_stream_metadata(f"{prefix}/s{i}", StreamConfiguration(), 0))
            for w in range(writers):
                store.register_writer(f"{prefix}/s{i}", f"w{w}", f"w{w}")
    finally:
        client.stop()
        client.close()


# --- idle ---------------------------------------------------------------------------------------


def _tree_ticks(root_pid: int) -> dict[tuple[int, int], int]:
    """``(pid, start time) -> own CPU ticks (user + system)`` of a process and all its
    descendants, from /proc. The start time tells a reused pid from the process before."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        ticks[pid] = (int(fields[19]), int(fields[11]) + int(fields[12]))  # starttime; utime+stime
    found, todo = {}, [root_pid]
    while todo:
        pid = todo.pop()
        if pid in ticks:
            started, used = ticks[pid]
            found[(pid, started)] = used
        todo += children.get(pid, [])
    return found


def _tree_cpu_s(root_pid: int, seconds: float, every_s: float = 0.5) -> float:
    """CPU seconds a process tree uses over the next ``seconds``.

    Sampled every ``every_s``: each process counts from its first sample (or from 0
    when it started during the window) to its last, so a process that exits -- an idle
    Python worker that Spark stops after a minute -- keeps what it used before. (Two
    samples with the reaped children's ``cutime`` missed those: PySpark's daemon does
    not wait for its workers, so their whole CPU vanished and the figure came out
    negative.) A process that starts and exits between two samples is not seen.
    """
    first = _tree_ticks(root_pid)
    last = dict(first)
    deadline = time.monotonic() + seconds
    while (now := time.monotonic()) < deadline:
        time.sleep(min(every_s, deadline - now))
        last.update(_tree_ticks(root_pid))
    used = sum(ticks - first.get(key, 0) for key, ticks in last.items())
    return used / os.sysconf("SC_CLK_TCK")


def idle(spark: Any, services: Any, root: str, work: Path) -> list[str]:
    from kazoo.client import KazooClient

    from tidemark.controller.zookeeper.driver import controller_view

    settings = _settings(services, root, work, IDLE_BUCKETS)
    _create_streams(settings, "idle", STREAMS)
    work.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable, "-m", "tidemark.cli.main", "controller", "run", "--instance", "idle",
        "--bootstrap", settings.kafka_bootstrap, "--zk", settings.zk_connect,
        "--marks-topic", settings.cluster.marks_topic, "--bucket-count", str(IDLE_BUCKETS),
        "--delta-root", settings.delta_root, "--checkpoint-root", settings.checkpoint_root,
    ]  # fmt: skip
    log = (work / "driver.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    zk = KazooClient(hosts=settings.zk_connect)
    zk.start(timeout=30)
    try:
        deadline = time.monotonic() + 600
        started = time.monotonic()
        while controller_view(zk, "/tidemark", settings.cluster.marks_topic).progress is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                return [f"idle: the controller never ran its first batch (see {work}/driver.log)"]
            time.sleep(0.5)
        ready_s = time.monotonic() - started
        time.sleep(5)  # the first batch's aftermath (RocksDB background work)
        first = controller_view(zk, "/tidemark", settings.cluster.marks_topic).progress or {}
        t0 = time.monotonic()
        cpu = _tree_cpu_s(proc.pid, IDLE_SECONDS)
        t1 = time.monotonic()
        last = controller_view(zk, "/tidemark", settings.cluster.marks_topic).progress or {}
    finally:
        zk.stop()
        zk.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    cores = cpu / (t1 - t0)
    return [
        f"idle CPU, {IDLE_BUCKETS} buckets, {STREAMS} registered streams, no marks, "
        f"over {t1 - t0:.0f} s: {cores:.3f} core (goal <= 0.05: "
        f"{'met' if cores <= 0.05 else 'NOT met'}); batches while idle: "
        f"{int(last.get('batch_id', -1)) - int(first.get('batch_id', -1))}; "
        f"leader ready after {ready_s:.0f} s"
    ]


# --- capacity -----------------------------------------------------------------------------------


def _encode_marks(settings: Any, rounds: range) -> list[tuple[bytes, bytes, int]]:
    """``rounds`` marks of every writer of every stream, encoded: ``(value, key, partition)``."""
    from tidemark.controller.naming import bucket_of
    from tidemark.schemas.records import WriterMarkRecord

    marks = []
    for rnd in rounds:
        for i in range(STREAMS):
            stream = f"cap/s{i}"
            part, key = bucket_of(stream, settings.cluster.bucket_count), stream.encode()
            for w in range(WRITERS):
                t = 1_000 + rnd * 1_000 + w
                value = WriterMarkRecord(stream, f"w{w}", t, {}, instance=f"w{w}").encode()
                marks.append((value, key, part))
    return marks


def _produce_marks(
    services: Any,
    settings: Any,
    marks: list[tuple[bytes, bytes, int]],
    at_once: bool = False,
) -> int:
    """Already encoded marks onto the marks topic in one burst (a bare producer: some
    hundred thousand records a second, far faster than any controller drains them).

    ``at_once``: in one Kafka transaction, so the controller (``read_committed``) sees
    them all when it commits, once the producer and the broker have done their work.
    Produced plainly, the burst of 160 k marks still took the two cores for 1-2 s after
    the first batch had started: that batch read a third of the backlog, at 65 us a
    mark in its Python workers against 20 us in the next, while the baseline, run
    after the burst, had the cores to itself."""
    from confluent_kafka import Producer

    from tidemark.controller.kafka.admin import ensure_marks_topic

    ensure_marks_topic(settings.kafka_bootstrap, settings.cluster)
    config: dict[str, Any] = {"bootstrap.servers": services.bootstrap, "linger.ms": 20}
    if at_once:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex}"
    producer = Producer(config)
    if at_once:
        producer.init_transactions(60)
        producer.begin_transaction()
    produce_all(producer, settings.cluster.marks_topic, marks)
    if at_once:
        producer.commit_transaction(120)
    assert producer.flush(60) == 0
    return len(marks)


@dataclass(frozen=True)
class Drained:
    """The batches that drained a burst: rows read, batch count, wall time from the
    first batch's start to the last one's end, and the longest batch."""

    rows: int
    batches: int
    wall_s: float
    longest_s: float

    @property
    def rate(self) -> float:
        return self.rows / max(self.wall_s, 1e-9)


def _drain(job: Any, after: int, timeout_s: float = 1800) -> Drained:
    """Wait until the query reached the topic's end; the executed batches with id > ``after``.

    ``recentProgress`` keeps only the last 100 reports, so they are collected while polling.
    """
    from tidemark.jobs.controller_job import end_offsets

    topic = job.settings.cluster.marks_topic
    ends = _topic_ends(job.settings)
    seen: dict[int, tuple[int, float, float]] = {}  # batch -> rows, started (s), ms
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        query = job.query
        for p in query.recentProgress:
            if int(p["batchId"]) > after and "addBatch" in p["durationMs"]:
                started = datetime.fromisoformat(p["timestamp"]).timestamp()
                ms = float(p["durationMs"].get("triggerExecution", 0))
                seen[int(p["batchId"])] = (int(p["numInputRows"]), started, ms)
        reached = end_offsets(query.lastProgress, topic)
        if all(reached.get(p, 0) >= off for p, off in ends.items() if off > 0):
            break
        time.sleep(0.5)
    data = list(seen.values())
    return Drained(
        rows=sum(r for r, _, _ in data),
        batches=len(data),
        wall_s=max((t + ms / 1000 for _, t, ms in data), default=0.0)
        - min((t for _, t, _ in data), default=0.0),
        longest_s=max((ms for _, _, ms in data), default=0.0) / 1000,
    )


def _last_batch(job: Any) -> int:
    progress = job.query.lastProgress
    return -1 if progress is None else int(progress["batchId"])


def _baseline(
    spark: Any,
    services: Any,
    settings: Any,
    ranges: tuple[dict[int, int], dict[int, int]],
    work: Path,
) -> float:
    """A plain Spark batch job appending the marks of ``ranges`` (partition -> first offset,
    partition -> end offset) of the marks topic to a Delta table, no decoding or state."""
    import json

    topic = settings.cluster.marks_topic
    starts, ends = ranges
    total = sum(ends[p] - starts.get(p, 0) for p in ends)
    started = time.perf_counter()
    (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", services.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in starts.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in ends.items()}}))
        .option("kafka.isolation.level", "read_committed")
        .load()
        .selectExpr("CAST(key AS STRING) AS stream", "value", "partition", "offset")
        .write.format("delta")
        .mode("append")
        .save(str(work / "baseline"))
    )
    return total / (time.perf_counter() - started)


def _topic_ends(settings: Any) -> dict[int, int]:
    from tidemark.jobs.lookups import KafkaCommittedOffsets

    parts = list(range(settings.bucket_count))
    topic = settings.cluster.marks_topic
    return KafkaCommittedOffsets(settings.kafka_bootstrap).query(topic, parts)


def _committed_ends(
    settings: Any, before: dict[int, int], marks: list[tuple[bytes, bytes, int]]
) -> dict[int, int]:
    """The marks topic's last stable offsets once a transaction of ``marks`` is visible
    on every partition it wrote: past its records and its commit marker. The producer's
    commit returns before the coordinator has written every marker, so offsets read
    right after it may still end before the transaction (the baseline read none)."""
    counts = collections.Counter(part for _, _, part in marks)
    deadline = time.monotonic() + 60
    while True:
        ends = _topic_ends(settings)
        if all(ends.get(p, 0) >= before.get(p, 0) + n + 1 for p, n in counts.items()):
            return ends
        if time.monotonic() > deadline:
            raise TimeoutError(f"the marks' transaction is not visible: {ends} after {before}")
        time.sleep(0.05)


def _partitions(spark: Any, settings: Any) -> int:
    """The state partitions the job's query runs on (its checkpoint is new)."""
    return int(settings.resolved_state_partitions(int(spark.sparkContext.defaultParallelism)))


def _median_drain(runs: list[Drained]) -> Drained:
    """The burst of median rate (the middle one of an odd count)."""
    return sorted(runs, key=lambda d: d.rate)[len(runs) // 2]


def capacity(spark: Any, services: Any, root: str, work: Path) -> list[str]:
    from tidemark.jobs.controller_job import ControllerJob

    results: dict[int, list[Drained]] = {}
    warm: dict[int, list[Drained]] = {}
    phases: dict[int, str] = {}
    partitions: dict[int, int] = {}
    resumed: Drained | None = None
    baseline = 0.0
    total = 0
    measured: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for buckets in (8, 64):
        settings = _settings(
            services,
            root,
            work / f"b{buckets}",
            buckets,
            interval_ms=1000,
            max_offsets_per_trigger=MAX_PER_TRIGGER,
            warm_up=False,
        )
        _create_streams(settings, "cap", STREAMS, WRITERS)
        partitions[buckets] = _partitions(spark, settings)
        # Each burst (and the restart's backlog) notes later times than the one before.
        backlogs = [
            _encode_marks(settings, range(first, first + ROUNDS))
            for first in range(
                WARMUP_ROUNDS, WARMUP_ROUNDS + (WARMUP_BURSTS + BURSTS + 1) * ROUNDS, ROUNDS
            )
        ]
        job = ControllerJob(spark, settings, f"cap{buckets}").start()
        try:
            job.wait_leading(600)
            _produce_marks(services, settings, _encode_marks(settings, range(WARMUP_ROUNDS)))
            job.process_all_available(1800)
            runs = []
            for backlog in backlogs[: WARMUP_BURSTS + BURSTS]:
                after = _last_batch(job)
                # The running query meets the measured backlog as it lands (pre-encoded marks
                # in one transaction, visible at its commit): its batches measure the controller.
                before = _topic_ends(settings)
                total = _produce_marks(services, settings, backlog, at_once=True)
                measured = (before, _committed_ends(settings, before, backlog))
                runs.append(_drain(job, after))
            warm[buckets] = runs[:WARMUP_BURSTS]
            results[buckets] = runs[WARMUP_BURSTS:]
            phases[buckets] = _phases(job.query)
            after = _last_batch(job)
        finally:
            job.stop()
        if buckets == 8:
            # A backlog produced while the job is stopped; it resumes from its checkpoint
            # in the same session: what a restart adds (state stores loaded from the
            # checkpoint, new Kafka consumers, the first batch's planning).
            _produce_marks(services, settings, backlogs[-1])
            job = ControllerJob(spark, settings, f"cap{buckets}").start()
            try:
                job.wait_leading(600)
                resumed = _drain(job, after)
            finally:
                job.stop()
            baseline = _baseline(spark, services, settings, measured, work)
    medians = {buckets: _median_drain(runs) for buckets, runs in results.items()}
    eight, sixty_four = medians[8], medians[64]
    ratio = eight.rate / max(baseline, 1e-9)
    spread = abs(eight.rate - sixty_four.rate) / max(eight.rate, sixty_four.rate, 1e-9)
    return (
        [
            f"capacity, {STREAMS} streams x {WRITERS} writers, {len(runs)} bursts of {total} "
            f"marks after a warm-up, {buckets} buckets on {partitions[buckets]} state "
            f"partitions: median {medians[buckets].rate:,.0f} marks/s wall clock from first "
            f"to last batch of a burst (bursts: "
            + ", ".join(f"{d.rate:,.0f}" for d in runs)
            + f"; longest batch {max(d.longest_s for d in runs):.1f} s"
            + "".join(f"; after a burst not counted: {d.rate:,.0f}" for d in warm[buckets])
            + ")"
            for buckets, runs in sorted(results.items())
        ]
        + (
            []
            if resumed is None
            else [
                f"  8 buckets, a backlog produced while the job was stopped, then "
                f"resumed from its checkpoint: {resumed.rate:,.0f} marks/s "
                f"({resumed.batches} batches, longest {resumed.longest_s:.1f} s; "
                f"{resumed.rate / max(baseline, 1e-9):.2f} of the baseline; a restart's cost, "
                "not a goal)"
            ]
        )
        + [
            f"  {buckets} buckets, batch phases, median ms: {p}"
            for buckets, p in sorted(phases.items())
        ]
        + [
            f"baseline: Kafka -> Delta append of the last burst's marks, no decoding or state: "
            f"{baseline:,.0f} marks/s; controller (8 buckets, median burst)/baseline = "
            f"{ratio:.2f} (goal >= 0.7: {'met' if ratio >= 0.7 else 'NOT met'})",
            f"8 vs 64 buckets (median bursts): {eight.rate:,.0f} vs {sixty_four.rate:,.0f} "
            f"marks/s, {spread:.0%} apart "
            f"(goal within 15%: {'met' if spread <= 0.15 else 'NOT met'})",
        ]
    )


# --- freshness ----------------------------------------------------------------------------------


def freshness(spark: Any, services: Any, root: str, work: Path) -> list[str]:
    settings = _settings(services, root, work, FRESH_BUCKETS, interval_ms=1000, warm_up=False)
    samples, phases = fresh_marks(spark, services, settings)
    lags = [visible - at for visible, at in samples]
    if not lags:
        return ["freshness: no watermark became visible"]
    p50, p99 = _pct(lags, 50), _pct(lags, 99)
    return [
        f"freshness at a 1 s interval, {FRESH_BUCKETS} buckets on "
        f"{_partitions(spark, settings)} state partitions, {FRESH_STREAMS} streams x 2 "
        f"writers noting every 200 ms: p50 {p50:.0f} ms, p99 {p99:.0f} ms over {len(lags)} "
        f"watermarks (goal p99 <= 1500 ms: {'met' if p99 <= 1500 else 'NOT met'}); "
        f"mean {statistics.mean(lags):.0f} ms",
        f"  batch phases, median ms of the last batches: {phases}",
    ]


def fresh_marks(
    spark: Any,
    services: Any,
    settings: Any,
    during: tuple[float, Callable[[], None]] | None = None,
) -> tuple[list[tuple[float, int]], str]:
    """Freshness's run: ``FRESH_STREAMS`` streams x 2 writers noting every 200 ms under
    a controller job; each watermark (after the warm-up) as ``(wall ms when first
    visible in Delta, its time)``, and the query's batch phases. ``during = (s, act)``:
    ``act()`` once, ``s`` seconds into the measured window (a fault)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from kazoo.client import KazooClient

    from tidemark.controller.config import ScalingPolicy, StreamConfiguration
    from tidemark.controller.streams import StreamManager
    from tidemark.controller.zookeeper.store import ZooKeeperStore
    from tidemark.jobs.controller_job import ControllerJob
    from tidemark.jobs.tables import MARKS, table_path

    client = KazooClient(hosts=settings.zk_connect)
    client.start(timeout=30)
    store = ZooKeeperStore(client, settings.cluster.zk_root)
    manager = StreamManager(store, services.bootstrap, settings.cluster)
    streams = [f"fresh/s{i}" for i in range(FRESH_STREAMS)]
    manager.create_scope("fresh")
    for s in streams:
        manager.create(s, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    job = ControllerJob(spark, settings, "fresh").start()
    seen: dict[tuple[str, int], float] = {}
    samples: list[tuple[float, int]] = []
    noter: subprocess.Popen[str] | None = None
    try:
        job.wait_leading(600)
        job.process_all_available(600)
        noter = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.fresh_writers", services.bootstrap,
             settings.zk_connect, settings.cluster.marks_topic,
             str(settings.cluster.bucket_count), *streams],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert noter.stdout is not None and noter.stdout.readline().strip() == "ready"
        path = table_path(settings.delta_root, MARKS)
        dt = DeltaTable(path)
        # The query's first batches (Python workers, code generation) take tens of
        # seconds on 2 cores: measure from 5 s after every stream has a watermark.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            dt.update_incremental()
            got = {r["stream"] for r in dt.to_pyarrow_table(columns=["stream"]).to_pylist()}
            if got >= set(streams):
                break
            time.sleep(0.2)
        warmup_until = time.monotonic() + 5
        end = warmup_until + FRESH_SECONDS
        version = dt.version()
        read: set[str] = set()  # data files already read: a tailing reader reads new ones
        while time.monotonic() < end:
            if during is not None and time.monotonic() >= warmup_until + during[0]:
                during[1]()
                during = None
            dt.update_incremental()
            if dt.version() != version:
                version = dt.version()
                visible = time.time() * 1000
                new = [uri for uri in dt.file_uris() if uri not in read]
                read.update(new)
                for uri in new:
                    file = uri.removeprefix("file://")
                    for r in pq.read_table(file, columns=["stream", "seq", "time"]).to_pylist():
                        key = (r["stream"], r["seq"])
                        if key not in seen:
                            seen[key] = visible
                            if time.monotonic() > warmup_until:
                                samples.append((visible, r["time"]))
            time.sleep(0.05)
        phases = _phases(job.query)
    finally:
        if noter is not None:
            noter.communicate(timeout=60)  # closes its stdin: the writers close, then it exits
        job.stop()
        client.stop()
        client.close()
    return samples, phases


def _phases(query: Any) -> str:
    """Median of each ``durationMs`` phase over the query's recent batches that ran, and
    the slowest batches."""
    runs = [p["durationMs"] for p in query.recentProgress if "addBatch" in p["durationMs"]]
    if not runs:
        return "no batch"

    def median(name: str) -> float:
        return float(statistics.median([r.get(name, 0) for r in runs]))

    names = sorted({n for r in runs for n in r}, key=lambda n: -median(n))
    slowest = sorted((r.get("triggerExecution", 0) for r in runs), reverse=True)[:5]
    return ", ".join(f"{n} {median(n):.0f}" for n in names) + f"; slowest {slowest}"


PARTS: dict[str, Callable[[Any, Any, str, Path], list[str]]] = {
    "idle": idle,
    "freshness": freshness,
    "capacity": capacity,
}
