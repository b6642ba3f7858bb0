"""The CPU an observer costs: ``tidemark stream observe`` on 1 000 partitions at a 1 s interval.

A stream of ``PARTITIONS`` partitions, a record written to each of them every
second by the bench (so every high-water mark moves between two looks: the
observer's dearer case), is observed by the command as a user runs it (a fresh
``python -m tidemark.cli.main stream observe S --lateness 30s`` process). Its
CPU time (user + system, from ``/proc`` via psutil) is measured over
``WINDOW_S`` seconds after a warm-up, beside three baselines running at the same
time against the same broker:

- a **bare loop**: two ListOffsets requests each interval (high-water marks and
  max timestamps of every partition, confluent-kafka's
  ``AdminClient.list_offsets``), no tidemark -- what looking at everything
  costs (the observer asks max timestamps only where high-water marks moved:
  with no new records, it sends the first request alone);
- a **bare batched loop**: the same two requests the way the observer sends them
  (batches of ``OFFSETS_BATCH`` partitions, one future a batch, through the client's C-level
  ``list_offsets``), no tidemark -- the floor of the observer's own way of asking;
- an **idle Python process** (``time.sleep``): what a process costs doing nothing.

Printed: each process's cores (CPU seconds / wall seconds), the observer's
ratios to the bare loops, the observer's CPU by thread (librdkafka's ``rdk:*``
threads, and Python's: the main thread and the ZooKeeper client's), and the
records written during the window (the work looked at) [goal: observer <= 0.02
core]. These are measurements, not tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import psutil

PARTITIONS = 1_000
WINDOW_S = 30.0
WARM_UP_S = 8.0

BARE_LOOP = r"""
import sys, time
from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
admin = AdminClient({"bootstrap.servers": bootstrap})
latest, top = OffsetSpec.latest(), OffsetSpec.max_timestamp()
while True:
    try:
        ends = admin.list_offsets({TopicPartition(topic, p): latest for p in range(partitions)},
                                  isolation_level=IsolationLevel.READ_COMMITTED)
        ends = {tp.partition: f.result().offset for tp, f in ends.items()}
        tops = admin.list_offsets({TopicPartition(topic, p): top for p in range(partitions)})
        tops = {tp.partition: f.result().timestamp for tp, f in tops.items()}
    except KafkaException:  # a new topic's leaders not settled yet: the next look
        pass
    time.sleep(1.0)
"""

BATCHED_LOOP = r"""
import concurrent.futures, sys, time
from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import _AdminClientImpl
bootstrap, topic, partitions, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
admin = AdminClient({"bootstrap.servers": bootstrap})
def ask(spec, **options):
    futures = []
    for first in range(0, partitions, batch):
        future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        tps = [TopicPartition(topic, p, spec) for p in range(first, min(first + batch, partitions))]
        _AdminClientImpl.list_offsets(admin, tps, future, **options)
        futures.append(future)
    return {tp.partition: r for f in futures for tp, r in f.result().items()}
while True:
    try:
        ends = ask(-1, isolation_level_value=IsolationLevel.READ_COMMITTED.value)
        tops = ask(-3)
    except KafkaException:
        pass
    time.sleep(1.0)
"""

IDLE = "import time; time.sleep(3600)"


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _threads_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds by thread name (librdkafka names its threads ``rdk:*``; Python's all
    share the process's name), from ``/proc``."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        if not name.startswith("rdk:"):
            name = "python threads"
        elif name.startswith("rdk:broker"):
            name = "rdk:broker*"
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def run(services: Any) -> list[str]:
    from confluent_kafka import Producer

    from tidemark.controller.config import ScalingPolicy, StreamConfiguration
    from tidemark.controller.naming import ClusterSettings
    from tidemark.controller.streams import StreamManager
    from tidemark.controller.zookeeper.session import open_session
    from tidemark.controller.zookeeper.store import ZooKeeperStore

    cluster = ClusterSettings()
    client = open_session(services.zk_connect, start_timeout_s=15)
    try:
        manager = StreamManager(
            ZooKeeperStore(client, cluster.zk_root), services.bootstrap, cluster
        )
        stream = f"bench{uuid.uuid4().hex[:8]}/observed"
        manager.create_scope(stream.split("/")[0])
        manager.create(stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(PARTITIONS)))
        topic = manager.describe(stream).topic
    finally:
        client.stop()
        client.close()
    from tidemark.controller.kafka.admin import OFFSETS_BATCH, StreamTopics

    topics = StreamTopics(services.bootstrap)

    def written() -> int:  # records in the topic: the sum of its high-water marks
        return sum(topics.end_offsets(topic, range(PARTITIONS)).values())

    producer = Producer({"bootstrap.servers": services.bootstrap, "linger.ms": 5})
    stop, fed = threading.Event(), threading.Event()

    def feed() -> None:  # a record to every partition each second, on a fixed schedule
        due = time.monotonic()
        while True:
            now = int(time.time() * 1000)
            for p in range(PARTITIONS):
                producer.produce(topic, b"x" * 256, partition=p, timestamp=now - p)
            producer.flush(30)
            fed.set()
            due += 1.0  # a slow flush does not stretch the second (the printed rate shows)
            if stop.wait(max(0.0, due - time.monotonic())):
                return

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    assert fed.wait(120), "the first records were not written"

    env = {
        **os.environ,
        "TIDEMARK_KAFKA_BOOTSTRAP": services.bootstrap,
        "TIDEMARK_ZK_CONNECT": services.zk_connect,
    }
    cli = [sys.executable, "-m", "tidemark.cli.main", "stream", "observe", stream]
    procs = {
        "observer": subprocess.Popen([*cli, "--lateness", "30s"], env=env),
        "bare list_offsets loop": subprocess.Popen(
            [sys.executable, "-c", BARE_LOOP, services.bootstrap, topic, str(PARTITIONS)]
        ),
        "bare batched loop": subprocess.Popen(
            [
                sys.executable,
                "-c",
                BATCHED_LOOP,
                *(services.bootstrap, topic, str(PARTITIONS), str(OFFSETS_BATCH)),
            ]
        ),
        "idle Python process": subprocess.Popen([sys.executable, "-c", IDLE]),
    }
    try:
        time.sleep(WARM_UP_S)
        handles = {name: psutil.Process(p.pid) for name, p in procs.items()}
        for name, p in procs.items():
            assert p.poll() is None, f"{name} ended early"
        records = written()
        by_thread = _threads_cpu_s(procs["observer"].pid)
        start = {name: _cpu_s(h) for name, h in handles.items()}
        t0 = time.monotonic()
        time.sleep(WINDOW_S)
        wall = time.monotonic() - t0
        cores = {name: (_cpu_s(h) - start[name]) / wall for name, h in handles.items()}
        threads = {
            name: (cpu - by_thread.get(name, 0.0)) / wall
            for name, cpu in _threads_cpu_s(procs["observer"].pid).items()
        }
        records = written() - records
    finally:
        stop.set()
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(30)
        feeder.join(30)
    assert procs["observer"].returncode == 0, "the observer did not stop cleanly on SIGTERM"
    load = os.getloadavg()[0]
    bare = cores["bare list_offsets loop"]
    lines = [
        f"observe, {PARTITIONS} partitions each getting a record a second, 1 s interval, "
        f"{wall:.0f} s window "
        f"(load average {load:.1f}):"
    ]
    lines += [f"  {name:<24} {c:.4f} core" for name, c in cores.items()]
    lines.append(
        "  observer by thread: "
        + ", ".join(f"{name} {c:.4f}" for name, c in sorted(threads.items(), key=lambda t: -t[1]))
    )
    lines.append(f"  records written in the window: {records} ({records / wall:.0f}/s)")
    lines.append(
        f"  observer / bare loop: {cores['observer'] / bare:.2f}x" if bare > 0 else "  (bare 0)"
    )
    batched = cores["bare batched loop"]
    if batched > 0:
        lines.append(f"  observer / bare batched loop: {cores['observer'] / batched:.2f}x")
    lines.append(f"  [goal: observer <= 0.02 core] -> {cores['observer']:.4f}")
    return lines
