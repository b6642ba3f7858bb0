"""How long from a stream crossing a policy limit to the policy loop's action.

``run(bootstrap, work_dir)``: real Kafka, the in-memory metadata store,
watermarks computed by ``watermark_cycle`` and appended to Delta (no Spark),
the policy loop running in its thread on the wall clock. Per policy, the
delay from the moment the limit is crossed to the moment the truncate or
scale has completed:

- retention by time: crossed when ``now - limit`` passes the first
  watermark's upper time (from then on ``stream_cut_at(now - limit)`` lies
  beyond the head);
- retention by size: crossed when the write that takes the stream over the
  limit is acknowledged (its watermark appended);
- split by event rate: crossed when the writer starts writing above the
  target (the loop needs a whole ``rate_window_ms`` of it first).

Expected: about half an interval on average, at most ``interval_ms`` plus a
pass (by size: plus counting the new bytes), plus the rate window for
scaling. These are measurements, not tests.

Part ``idle`` (``python -m tests.bench bench_policies:idle``): the cost of a
pass over ``IDLE_STREAMS`` streams without a policy in real ZooKeeper (records
only, no topics), beside reading every record once per pass (what a pass did
before the watches). Parts: ``latency`` (the three above), ``idle``.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
import uuid
from pathlib import Path

from tidemark.controller.config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from tidemark.controller.delta.tables import append_watermarks
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.model import WriterMark
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.policy_loop import PolicyLoop, PolicySettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.watermarks import GenerationState, watermark_cycle
from tidemark.pipelines.reading.seek import SeekIndex, stream_cut_at
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.writer import EventWriter

INTERVAL_MS = 1_000
REPEATS = 3
LIMIT_MS = 2_000
LIMIT_BYTES = 20_000
RATE_WINDOW_MS = 2_000
IDLE_STREAMS = 1_000
IDLE_PASSES = 20


class _Marks:
    def __init__(self, stream: str, store: MemoryStore, root: str) -> None:
        self.stream, self.store, self.root = stream, store, root
        self.state = GenerationState()
        self.upper: int | None = None
        self.first_upper: int | None = None

    def note(self, writer: EventWriter, time_ms: int) -> None:
        writer.note_time(time_ms)
        writer.flush()
        marks = {writer.writer_id: WriterMark(time_ms, writer.position())}
        epochs = self.store.get_stream(self.stream).epochs
        cycle = watermark_cycle(self.stream, marks, self.state, epochs, 0, 60_000)
        self.state = cycle.state
        if cycle.watermark is not None:
            append_watermarks(self.root, [cycle.watermark], previous_upper_time_max=self.upper)
            self.upper = max(self.upper or 0, cycle.watermark.upper_time)
            if self.first_upper is None:
                self.first_upper = cycle.watermark.upper_time


def _now() -> int:
    return time.time_ns() // 1_000_000


def _setup(bootstrap: str, work: Path, config: StreamConfiguration, **policy: int):
    unique = uuid.uuid4().hex[:8]
    cluster = ClusterSettings(marks_topic=f"bench-policy-marks-{unique}", bucket_count=1)
    store = MemoryStore()
    manager = StreamManager(store, bootstrap, cluster, seal_drain_ms=100)
    scope = f"bench{unique}"
    manager.create_scope(scope)
    stream = f"{scope}/s"
    manager.create(stream, config)
    root = str(work / f"delta-{unique}")
    settings = PolicySettings(interval_ms=INTERVAL_MS, **policy)
    index = SeekIndex(root, refresh_interval_ms=0)
    loop = PolicyLoop(manager, settings, cut_at=functools.partial(stream_cut_at, index=index))
    writer = EventWriter(
        "w", stream, store=store, bootstrap_servers=bootstrap,
        config=WriterConfig(cluster=cluster, linger_ms=1),
    )  # fmt: skip
    return stream, store, manager, root, loop, writer


def _wait_for_action(loop: PolicyLoop, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while not loop.actions:
        if time.monotonic() > deadline:
            raise TimeoutError("the policy loop did not act")
        time.sleep(0.005)
    return loop.actions[0].at_ms


def _by_time(bootstrap: str, work: Path) -> int:
    config = StreamConfiguration(retention_policy=RetentionPolicy.by_time(LIMIT_MS))
    stream, store, _, root, loop, writer = _setup(bootstrap, work, config)
    marks = _Marks(stream, store, root)
    handle = loop.start()
    try:
        with writer:
            stop = threading.Event()
            while not loop.actions and not stop.wait(0.1):
                t = _now()
                writer.write(b"x" * 100, routing_key="k", timestamp=t)
                marks.note(writer, t)
            acted = _wait_for_action(loop)
    finally:
        handle.stop()
        loop.close()
    assert marks.first_upper is not None
    return acted - (marks.first_upper + LIMIT_MS + 1)


def _by_size(bootstrap: str, work: Path) -> int:
    config = StreamConfiguration(retention_policy=RetentionPolicy.by_size(LIMIT_BYTES))
    stream, store, _, root, loop, writer = _setup(bootstrap, work, config)
    marks = _Marks(stream, store, root)
    written = 0
    crossed: int | None = None
    handle = loop.start()
    try:
        with writer:
            while not loop.actions:
                t = _now()
                writer.write(b"x" * 999, routing_key="k", timestamp=t)  # 1000 bytes with key
                marks.note(writer, t)
                written += 1000
                if crossed is None and written > LIMIT_BYTES:
                    crossed = _now()
                time.sleep(0.02)
            acted = _wait_for_action(loop)
    finally:
        handle.stop()
        loop.close()
    assert crossed is not None
    return acted - crossed


def _split(bootstrap: str, work: Path) -> int:
    config = StreamConfiguration(ScalingPolicy.by_event_rate(50, 2, 1))
    _, _, _, _, loop, writer = _setup(
        bootstrap, work, config, rate_window_ms=RATE_WINDOW_MS, cooldown_ms=0
    )
    handle = loop.start()
    try:
        with writer:
            started = _now()
            i = 0
            while not loop.actions:
                writer.write(b"x", routing_key=f"k{i % 16}", timestamp=_now())
                i += 1
                if i % 20 == 0:
                    writer.flush()
                    time.sleep(0.1)  # about 200 events/s: four times the target
            acted = _wait_for_action(loop)
    finally:
        handle.stop()
        loop.close()
    return acted - started


def _figure(name: str, delays: list[int]) -> str:
    return (
        f"{name}: crossing -> action median {statistics.median(delays)} ms, "
        f"max {max(delays)} ms over {len(delays)} runs (interval {INTERVAL_MS} ms)"
    )


def _idle(bootstrap: str, zk_connect: str) -> list[str]:
    from dataclasses import replace

    from kazoo.client import KazooClient

    from tidemark.controller.metadata import new_stream_metadata
    from tidemark.controller.states import StreamState
    from tidemark.controller.zookeeper.store import ZooKeeperStore

    chroot = f"/bench-policies-{uuid.uuid4().hex[:8]}"
    setup = KazooClient(hosts=zk_connect)
    setup.start(timeout=15)
    setup.ensure_path(chroot)
    client = KazooClient(hosts=f"{zk_connect}{chroot}")
    client.start(timeout=15)
    try:
        store = ZooKeeperStore(client)
        manager = StreamManager(store, bootstrap)
        for scope in range(10):
            store.create_scope(f"s{scope}")
        for i in range(IDLE_STREAMS):
            meta = new_stream_metadata(f"s{i % 10}/quiet{i}", StreamConfiguration(), now_ms=0)
            store.create_stream(replace(meta, state=StreamState.ACTIVE))
        loop = PolicyLoop(manager, PolicySettings(interval_ms=INTERVAL_MS))
        started = time.perf_counter()
        loop.run_once()
        first_ms = (time.perf_counter() - started) * 1000
        passes, reads = [], []
        for _ in range(IDLE_PASSES):
            started = time.perf_counter()
            loop.run_once()
            passes.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            for stream in manager.list():
                manager.describe(stream)
            reads.append((time.perf_counter() - started) * 1000)
        return [
            f"idle pass, {IDLE_STREAMS} streams without a policy in 10 scopes: first pass "
            f"(watches set) {first_ms:.0f} ms; then median {statistics.median(passes):.1f} ms, "
            f"max {max(passes):.1f} ms over {IDLE_PASSES} passes",
            f"  reading every record once (a pass before the watches): median "
            f"{statistics.median(reads):.0f} ms",
        ]
    finally:
        client.stop()
        client.close()
        setup.delete(chroot, recursive=True)
        setup.stop()
        setup.close()


def run(
    bootstrap: str, zk_connect: str, work_dir: Path, parts: list[str] | None = None
) -> list[str]:
    lines: list[str] = []
    if parts is None or "latency" in parts:
        lines += _latency(bootstrap, work_dir)
    if parts is None or "idle" in parts:
        lines += _idle(bootstrap, zk_connect)
    return lines


def _latency(bootstrap: str, work_dir: Path) -> list[str]:
    lines = [
        _figure("retention by time", [_by_time(bootstrap, work_dir) for _ in range(REPEATS)]),
        _figure("retention by size", [_by_size(bootstrap, work_dir) for _ in range(REPEATS)]),
    ]
    splits = [_split(bootstrap, work_dir) for _ in range(REPEATS)]
    lines.append(_figure(f"split by event rate (window {RATE_WINDOW_MS} ms)", splits))
    return lines
