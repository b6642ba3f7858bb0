"""The end-to-end demo: writers -> marks -> the Spark controller -> Delta -> readers.

    report = run_demo(services, work_dir, spark)

1. creates a stream with two segments (ZooKeeper metadata, a Kafka topic);
2. starts the watermark controller (one Spark streaming query per bucket);
3. three writers write events with event times and note the time they
   reached; midway the stream is scaled (segment 0 split in two) and one
   writer shuts down;
4. waits until the controller's watermarks in the Delta table ``marks``
   reach the last noted time;
5. reads the tables back with deltalake, seeks a reader group to a
   timestamp (binary search over ``index``) and reads from there, with the
   reader's time window.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.delta.location import TableLocation
from tidemark.controller.model import KeyRange, TimeWindow, Watermark
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.session import close_session, open_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.jobs.config import ControllerSettings
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.reading.seek import complete_cut_at, stream_cut_at
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.writer import EventWriter

log = logging.getLogger(__name__)

STEP_MS = 1_000
STEPS = 8
EVENTS_PER_STEP = 10
WRITERS = ("north", "south", "east")


@dataclass
class DemoReport:
    stream: str
    delta_root: str
    events_written: int
    noted_until: int
    watermarks: list[Watermark] = field(default_factory=list)
    seek_time: int = 0
    start_cut: dict[int, int] = field(default_factory=dict)
    stop_cut: dict[int, int] | None = None
    events_read_from_seek: int = 0
    events_at_or_after_seek: int = 0
    missed_at_or_after_seek: int = 0
    reader_window: TimeWindow | None = None
    segments_after_scale: list[int] = field(default_factory=list)
    events: list[tuple[int, int]] = field(default_factory=list)
    """(wall clock when written, event time) of every event, for the chart."""
    emitted_at: dict[int, int] = field(default_factory=dict)
    """Watermark seq -> wall clock when the controller emitted it."""


Progress = Callable[[str], None]
"""Told the name of each step as it starts (the CLI shows them)."""

STEPS_SHOWN = (
    "starting the controller (Spark streaming job)",
    "writing events: 3 writers, a scale midway, one writer shut down",
    "waiting for the watermarks to reach the last noted time",
    "seeking a reader group to a timestamp and reading",
)


def _write_history(
    env: Any, stream: str, base_ms: int
) -> tuple[int, int, list[int], list[tuple[int, int]]]:
    """Three writers, a scale at half time, one writer shutting down; (events, last time)."""
    writers = {
        name: EventWriter(
            name,
            stream,
            store=env.store,
            bootstrap_servers=env.bootstrap,
            config=WriterConfig(cluster=env.cluster, linger_ms=1),
        )
        for name in WRITERS
    }
    written, noted = 0, base_ms
    times: list[int] = []
    events: list[tuple[int, int]] = []
    for step in range(STEPS):
        if step == STEPS // 2:
            meta = env.manager.scale(stream, [0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
            log.info("scaled %s to epoch %d", stream, meta.current_epoch().number)
        for skew, (name, writer) in enumerate(writers.items()):
            if name == "east" and step >= STEPS - 2:
                continue
            for i in range(EVENTS_PER_STEP):
                event_ms = base_ms + step * STEP_MS + i * (STEP_MS // EVENTS_PER_STEP) + skew
                writer.write(f"{name}:{event_ms}".encode(), f"key-{i % 5}", timestamp=event_ms)
                times.append(event_ms)
                events.append((time.time_ns() // 1_000_000, event_ms))
                written += 1
            noted = base_ms + (step + 1) * STEP_MS - 1
            writer.note_time(noted)
        if step == STEPS - 3:
            writers.pop("east").close()  # a shutdown mark: the controller stops waiting for it
        time.sleep(1.0)  # one step per controller interval: a watermark per step
    for writer in writers.values():
        writer.close()
    return written, noted, times, events


def _wait_for_a_batch(controller: Any, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while controller.last_batch is None and time.monotonic() < deadline:
        time.sleep(0.2)


def new_unique() -> str:
    return uuid.uuid4().hex[:6]


def demo_cluster(unique: str) -> ClusterSettings:
    """The demo's own marks topic and buckets (its controller and dashboard agree on them)."""
    return ClusterSettings(marks_topic=f"tidemark-demo-marks-{unique}", bucket_count=2)


@dataclass
class _Env:
    bootstrap: str
    store: Any
    manager: Any
    cluster: ClusterSettings


def run_demo(
    bootstrap: str,
    zk_connect: str,
    work_dir: Path,
    spark: Any,
    progress: Progress = lambda step: None,
    unique: str | None = None,
) -> DemoReport:
    """The demo under ``work_dir`` (tables in ``work_dir/delta``); ``progress`` is told
    each of :data:`STEPS_SHOWN` as it starts."""
    # pyspark and pandas: the chart imports this module for DemoReport and needs neither
    from tidemark.jobs.controller_job import ControllerJob
    from tidemark.jobs.tables import read_watermarks  # pyarrow: as above

    unique = unique or new_unique()
    cluster = demo_cluster(unique)
    stream = f"demo{unique}/sensors"
    delta_root = str(work_dir / "delta")
    client = open_session(zk_connect, start_timeout_s=15)
    try:
        store = ZooKeeperStore(client, cluster.zk_root)
        env = _Env(bootstrap, store, StreamManager(store, bootstrap, cluster), cluster)
        env.manager.create_scope(stream.split("/")[0])
        env.manager.create(stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
        settings = ControllerSettings(
            kafka_bootstrap=bootstrap,
            zk_connect=zk_connect,
            delta_root=delta_root,
            checkpoint_root=str(work_dir / "checkpoints"),
            cluster=cluster,
            interval_ms=1000,
            writer_timeout_ms=10_000,
        )
        lake = settings.lake
        base_ms = (int(time.time() * 1000) // 1000 - 600) * 1000  # ten minutes ago
        progress(STEPS_SHOWN[0])
        with ControllerJob(spark, settings, f"demo-{unique}") as controller:
            # The first micro-batch (the new leader's due sweep) starts the Python
            # workers and the state store: many seconds; later ones take about one.
            # Wait for it to complete, so the history's steps land in batches of
            # their own (the sweep may not be visible yet to process_all_available).
            controller.process_all_available()
            _wait_for_a_batch(controller)
            progress(STEPS_SHOWN[1])
            written, noted, times, events = _write_history(env, stream, base_ms)
            progress(STEPS_SHOWN[2])
            deadline = time.monotonic() + 120
            marks: list[Watermark] = []
            while time.monotonic() < deadline:
                marks = read_watermarks(lake, stream)
                if marks and marks[-1].time >= noted:
                    break
                time.sleep(1.0)
        report = DemoReport(stream, delta_root, written, noted, marks, events=events)
        report.emitted_at = _emitted_at(lake, stream)
        progress(STEPS_SHOWN[3])
        report.segments_after_scale = [
            s.id for s in store.get_stream(stream).current_epoch().segments
        ]
        report.seek_time = base_ms + (STEPS // 2) * STEP_MS + STEP_MS // 2
        report.start_cut = stream_cut_at(stream, report.seek_time, delta_root=lake, store=store)
        report.stop_cut = complete_cut_at(stream, report.seek_time, delta_root=lake)
        wanted = sorted(t for t in times if t >= report.seek_time)
        group = ReaderGroup.create(
            f"demo-readers-{unique}",
            stream,
            store=store,
            bootstrap_servers=bootstrap,
            delta_root=lake,
            from_time=report.seek_time,
        )
        try:
            reader = group.reader("reader-1")
            seen: list[int] = []
            idle = 0
            while idle < 3:
                event = reader.read_next(1000)
                if event is None:
                    idle += 1
                    continue
                if not event.is_checkpoint:
                    seen.append(event.timestamp)
            report.reader_window = reader.current_time_window()
            reader.close()
        finally:
            group.close()
        report.events_read_from_seek = len(seen)
        report.events_at_or_after_seek = sum(1 for t in seen if t >= report.seek_time)
        report.missed_at_or_after_seek = len(wanted) - report.events_at_or_after_seek
        return report
    finally:
        close_session(client)


def _emitted_at(lake: TableLocation, stream: str) -> dict[int, int]:
    # pyarrow: as in run_demo
    from tidemark.jobs.tables import MARKS, read_table

    return {int(r["seq"]): int(r["emitted_at"]) for r in read_table(lake, MARKS, stream)}


def describe(report: DemoReport) -> list[str]:
    """The report as lines for people."""
    lines = [
        f"stream {report.stream}: {report.events_written} events from {len(WRITERS)} writers, "
        f"scaled midway (current segments {report.segments_after_scale}), "
        "writer 'east' shut down",
        f"writers noted time up to {report.noted_until}",
        f"watermarks in Delta ({report.delta_root}/marks): {len(report.watermarks)}",
        "  seq  time           upper_time     stream cut",
    ]
    for mark in report.watermarks[-8:]:
        cut = ", ".join(f"{seg}:{off}" for seg, off in sorted(mark.stream_cut.items()))
        lines.append(f"  {mark.seq:<4} {mark.time:<14} {mark.upper_time:<14} {{{cut}}}")
    lines += [
        f"seek to t={report.seek_time}: start cut {report.start_cut}, "
        f"complete (stop) cut {report.stop_cut}",
        f"reader group from t={report.seek_time}: read {report.events_read_from_seek} events, "
        f"{report.events_at_or_after_seek} with time >= t, "
        f"missed {report.missed_at_or_after_seek}",
        f"reader time window at the end: {report.reader_window}",
    ]
    return lines
