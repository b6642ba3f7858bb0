"""The controller on a Spark standalone cluster, 1 and 2 workers, beside ``local[2]``.

``python -m tests.bench bench_cluster`` (``make bench``); parts ``capacity``,
``freshness``, ``recovery`` (comma-separated after a colon).

Three placements of the same controller job, one after another in this process:
``local[2]`` (the driver's JVM runs the tasks on two threads), and a standalone
cluster (``tidemark.infra.spark_cluster``: master and workers as JVMs of their own) with
one worker, then two, each worker one core and its executor one core. Every
placement runs 8 buckets on 2 state partitions (the same plan everywhere; only
where the tasks run differs).

- **capacity**: ``bench_controller``'s load (1 000 streams x 20 writers, each
  burst one Kafka transaction of pre-encoded marks), after a warm-up burst;
  the median of ``BURSTS`` bursts' marks/s, wall clock from the first batch
  that reads a burst to the end of the last.
- **freshness**: ``bench_controller.fresh_marks`` (100 streams x 2 writers
  noting every 200 ms, 1 s interval): p50 and p99 of visible-in-Delta minus
  the watermark's time.
- **recovery** (two workers): the same run, and 10 s into it kill -9 of one
  worker with its executor: the seconds from the kill to the first watermark
  visible in Delta whose time is past the kill, beside the p50 lag of the same
  run before the kill (what that wait is with nothing lost).

The ratios 2 workers / 1 worker are printed with the ``local[2]`` figures.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.bench_controller import (
    FRESH_BUCKETS,
    MAX_PER_TRIGGER,
    ROUNDS,
    STREAMS,
    WARMUP_ROUNDS,
    WRITERS,
    Drained,
    _committed_ends,
    _create_streams,
    _drain,
    _encode_marks,
    _last_batch,
    _load,
    _median_drain,
    _pct,
    _produce_marks,
    _settings,
    _topic_ends,
    fresh_marks,
)

QUICK = os.environ.get("TIDEMARK_BENCH_QUICK") == "1"
BURSTS = 1 if QUICK else 3
STATE_PARTITIONS = 2
KILL_AFTER_S = 10.0
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Placement:
    """Where the tasks run: ``local[2]`` or a standalone cluster of ``workers`` workers."""

    name: str
    workers: int  # 0: local[2]
    figures: dict[str, float] = field(default_factory=dict)


@contextmanager
def session(placement: Placement, work: Path) -> Iterator[tuple[Any, Any]]:
    """A Spark session for ``placement`` and its cluster (``None`` for ``local[2]``), both
    stopped afterwards; on a cluster, once every worker's executor has registered."""
    from tidemark.infra.spark import SparkSettings, spark_session, stop_spark
    from tidemark.infra.spark_cluster import SparkCluster

    cluster = None
    if placement.workers:
        cluster = SparkCluster(
            work / "cluster", workers=placement.workers, cores=1, memory="2g"
        ).start()
    try:
        extra = (
            {}
            if cluster is None
            else {
                "spark.executorEnv.PYTHONPATH": str(ROOT),
                "spark.pyspark.python": sys.executable,
                "spark.executor.cores": "1",
                "spark.executor.memory": "1g",
            }
        )
        spark = spark_session(
            SparkSettings(
                work_dir=work / "spark",
                app_name=f"bench-cluster-{placement.name}",
                master="local[2]" if cluster is None else cluster.master_url,
                extra=extra,
            )
        )
        try:
            if cluster is not None:
                _wait_executors(spark, placement.workers)
            yield spark, cluster
        finally:
            for query in spark.streams.active:
                query.stop()
            stop_spark(spark)
    finally:
        if cluster is not None:
            cluster.stop()


def _wait_executors(spark: Any, count: int, timeout_s: float = 120) -> None:
    """Until ``count`` executors have registered (the driver is one more entry)."""
    deadline = time.monotonic() + timeout_s
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    while status.size() < count + 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} executor(s) not registered in {timeout_s:.0f} s")
        time.sleep(0.5)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()


def _zk_root(services: Any, name: str) -> str:
    """A ZooKeeper chroot of its own for each placement's streams."""
    from kazoo.client import KazooClient

    root = f"/bench-cluster-{name}-{uuid.uuid4().hex[:6]}"
    zk = KazooClient(hosts=services.zk_connect)
    zk.start(timeout=30)
    try:
        zk.ensure_path(root)
    finally:
        zk.stop()
        zk.close()
    return root


def capacity(spark: Any, services: Any, root: str, work: Path) -> list[Drained]:
    """The bursts of ``bench_controller.capacity`` (8 buckets), the warm-up's left out."""
    from tidemark.jobs.controller_job import ControllerJob

    settings = _settings(
        services,
        root,
        work,
        8,
        interval_ms=1000,
        max_offsets_per_trigger=MAX_PER_TRIGGER,
        warm_up=False,
        state_partitions=STATE_PARTITIONS,
    )
    _create_streams(settings, "cap", STREAMS)
    backlogs = [
        _encode_marks(settings, range(first, first + ROUNDS))
        for first in range(WARMUP_ROUNDS, WARMUP_ROUNDS + (1 + BURSTS) * ROUNDS, ROUNDS)
    ]
    job = ControllerJob(spark, settings, "cap").start()
    runs = []
    try:
        job.wait_leading(600)
        _produce_marks(services, settings, _encode_marks(settings, range(WARMUP_ROUNDS)))
        job.process_all_available(1800)
        for backlog in backlogs:
            after = _last_batch(job)
            before = _topic_ends(settings)
            _produce_marks(services, settings, backlog, at_once=True)
            _committed_ends(settings, before, backlog)
            runs.append(_drain(job, after))
    finally:
        job.stop()
    return runs[1:]


def freshness(
    spark: Any, services: Any, root: str, work: Path, fault: Callable[[], None] | None = None
) -> tuple[list[float], float | None]:
    """The lags (ms) of ``fresh_marks``; with ``fault``, only those before it and the
    seconds from it to the first watermark visible whose time is past it."""
    settings = _settings(
        services,
        root,
        work,
        FRESH_BUCKETS,
        interval_ms=1000,
        warm_up=False,
        state_partitions=STATE_PARTITIONS,
    )
    struck: list[float] = []

    def strike() -> None:
        struck.append(time.time() * 1000)
        assert fault is not None
        fault()

    during = None if fault is None else (KILL_AFTER_S, strike)
    samples, _ = fresh_marks(spark, services, settings, during)
    if not struck:
        return [visible - at for visible, at in samples], None
    kill_ms = struck[0]
    before = [visible - at for visible, at in samples if visible < kill_ms]
    after = [visible for visible, at in samples if at > kill_ms]
    return before, (min(after) - kill_ms) / 1000 if after else None


PARTS = ("capacity", "freshness", "recovery")


def run(services: Any, parts: list[str] | None = None) -> list[str]:
    wanted = parts or list(PARTS)
    unknown = sorted(set(wanted) - set(PARTS))
    if unknown:
        raise SystemExit(f"bench_cluster has no part {unknown} (have: {', '.join(PARTS)})")
    work = Path(services.work_dir) / f"bench-cluster-{uuid.uuid4().hex[:6]}"
    placements = [Placement("local[2]", 0), Placement("1 worker", 1), Placement("2 workers", 2)]
    lines: list[str] = []
    for placement in placements:
        place_work = work / placement.name.replace(" ", "-").replace("[", "").replace("]", "")
        try:
            with session(placement, place_work) as (spark, cluster):
                lines += _measure(spark, cluster, services, placement, wanted, place_work)
        except Exception as exc:  # report what was measured, and why the rest was not
            lines.append(f"{placement.name}: failed: {exc!r}")
        print(*(f"   {line}" for line in lines), sep="\n", flush=True)
    return lines + _ratios(placements)


def _measure(
    spark: Any,
    cluster: Any,
    services: Any,
    placement: Placement,
    wanted: list[str],
    work: Path,
) -> list[str]:
    lines = []
    name = placement.name
    if "capacity" in wanted:
        runs = capacity(spark, services, _zk_root(services, "cap"), work / "capacity")
        median = _median_drain(runs)
        placement.figures["capacity"] = median.rate
        lines.append(
            f"{name}: capacity, {STREAMS} streams x {WRITERS} writers, 8 buckets on "
            f"{STATE_PARTITIONS} state partitions: median {median.rate:,.0f} marks/s "
            f"(bursts: {', '.join(f'{d.rate:,.0f}' for d in runs)}; longest batch "
            f"{max(d.longest_s for d in runs):.1f} s) [{_load()}]"
        )
    if "freshness" in wanted:
        lags, _ = freshness(spark, services, _zk_root(services, "fresh"), work / "freshness")
        if lags:
            placement.figures["p99"] = _pct(lags, 99)
            lines.append(
                f"{name}: freshness at 1 s, {len(lags)} watermarks: p50 {_pct(lags, 50):.0f} "
                f"ms, p99 {_pct(lags, 99):.0f} ms, mean {statistics.mean(lags):.0f} ms "
                f"[{_load()}]"
            )
        else:
            lines.append(f"{name}: freshness: no watermark became visible")
    if "recovery" in wanted and cluster is not None and placement.workers == 2:
        lags, recovered_s = freshness(
            spark,
            services,
            _zk_root(services, "recovery"),
            work / "recovery",
            fault=lambda: cluster.kill_worker(2),
        )
        before = f"p50 {_pct(lags, 50):.0f} ms" if lags else "none"
        lines.append(
            f"{name}: executor loss (kill -9 of worker 2 and its executor, "
            f"{KILL_AFTER_S:.0f} s into the run): first watermark past the kill visible "
            + ("never within the run" if recovered_s is None else f"{recovered_s:.1f} s after it")
            + f"; baseline, the lag before the kill: {before} [{_load()}]"
        )
    return lines


def _ratios(placements: list[Placement]) -> list[str]:
    local, one, two = placements
    lines = []
    for figure, unit in (("capacity", "marks/s"), ("p99", "ms p99")):
        if figure in one.figures and figure in two.figures:
            ratio = two.figures[figure] / max(one.figures[figure], 1e-9)
            at_local = local.figures.get(figure)
            lines.append(
                f"{figure}: 2 workers / 1 worker = {ratio:.2f} "
                f"({two.figures[figure]:,.0f} vs {one.figures[figure]:,.0f} {unit}); "
                + ("local[2] not measured" if at_local is None else f"local[2] {at_local:,.0f}")
            )
    return lines
