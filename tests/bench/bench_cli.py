"""CLI wall time: ``tidemark read | watermarks | window | stream describe`` on 1 000 records.

Each command runs as a fresh process (``python -m tidemark.cli.main``, as a
user types it), ``RUNS`` times; the baseline is a bare confluent-kafka
consumer script, also a fresh process, reading the same 1 000 records
(assign every partition from the beginning, stop at end of partition) --
what ``kafka-console-consumer`` does without the JVM. Printed: p50 and max
wall time per command and the ratio to the baseline's p50
[goal: each <= 0.5 s on a quiet machine].

Also printed: which heavy modules ``read`` loads (pandas must not be one).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RECORDS = 1_000
RUNS = 5

BASELINE = r"""
import sys
from confluent_kafka import Consumer, KafkaError, TopicPartition
bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-baseline",
              "enable.partition.eof": True, "isolation.level": "read_committed",
              "enable.auto.commit": False})
c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
done, n = set(), 0
while len(done) < partitions:
    m = c.poll(1.0)
    if m is None:
        continue
    if m.error():
        if m.error().code() == KafkaError._PARTITION_EOF:
            done.add(m.partition())
        continue
    n += 1
    sys.stdout.write(m.value().decode() + "\n")
c.close()
"""

HEAVY = ("pandas", "pyspark", "pyarrow", "deltalake", "kazoo", "numpy", "starlette", "rich")


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed: {done.stderr[-2000:]}")
    return elapsed, done.stdout


def run(services: Any) -> list[str]:
    from kazoo.client import KazooClient

    from controller.config import ScalingPolicy, StreamConfiguration
    from controller.model import Watermark
    from controller.naming import ClusterSettings
    from controller.streams import StreamManager
    from controller.zk_store import ZooKeeperStore
    from pipelines.reading.group import ReaderGroup
    from pipelines.reading.watermark_tables import append_watermarks
    from pipelines.writing.config import WriterConfig
    from pipelines.writing.writer import EventWriter

    work = Path(services.work_dir) / "bench-cli"
    work.mkdir(parents=True, exist_ok=True)
    root = str(work / "delta")
    unique = str(int(time.time()))
    stream = f"bench{unique}/cli"
    cluster = ClusterSettings(marks_topic=f"bench-cli-marks-{unique}", bucket_count=1)
    client = KazooClient(hosts=services.zk_connect)
    client.start(timeout=15)
    try:
        store = ZooKeeperStore(client, cluster.zk_root)
        manager = StreamManager(store, services.bootstrap, cluster)
        manager.create_scope(stream.split("/")[0])
        manager.create(stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4)))
        base = int(time.time() * 1000) - 30 * 60_000
        with EventWriter(
            "bench",
            stream,
            store=store,
            bootstrap_servers=services.bootstrap,
            config=WriterConfig(cluster=cluster, linger_ms=5),
        ) as writer:
            for i in range(RECORDS):
                writer.write(f"event-{i}".encode(), f"k{i % 16}", timestamp=base + i * 1_000)
            writer.flush()
            position = writer.position()
        append_watermarks(
            root,
            [
                Watermark(stream, base + s * 100_000, base + s * 100_000 + 500, position, s)
                for s in range(10)
            ],
        )
        group = f"bench-cli-{unique}"
        ReaderGroup.create(
            group, stream, store=store, bootstrap_servers=services.bootstrap, delta_root=root
        ).close()
        topic = store.get_stream(stream).topic
    finally:
        client.stop()
        client.close()

    env = dict(os.environ)
    env.update(
        TIDEMARK_KAFKA_BOOTSTRAP=services.bootstrap,
        TIDEMARK_ZK_CONNECT=services.zk_connect,
        TIDEMARK_DELTA_ROOT=root,
        PYTHONPATH=os.getcwd(),
    )
    env.pop("TIDEMARK_TIME_SERVICE", None)
    cli = [sys.executable, "-m", "tidemark.cli.main"]
    commands = {
        "read --ago 60m": [*cli, "read", stream, "--ago", "60m", "--format", "json"],
        "read (head)": [*cli, "read", stream, "--format", "json"],
        "watermarks": [*cli, "watermarks", stream, "--format", "json"],
        "window": [*cli, "window", group, "--format", "json"],
        "stream describe": [*cli, "stream", "describe", stream, "--format", "json"],
    }
    baseline = [sys.executable, "-c", BASELINE, services.bootstrap, topic, "4"]
    times: dict[str, list[float]] = {name: [] for name in ["baseline", *commands]}
    for _ in range(RUNS):
        elapsed, out = _timed(baseline, env)
        assert len(out.splitlines()) == RECORDS, len(out.splitlines())
        times["baseline"].append(elapsed)
        for name, argv in commands.items():
            elapsed, out = _timed(argv, env)
            if name.startswith("read"):
                assert len(out.splitlines()) == RECORDS, (name, len(out.splitlines()))
            times[name].append(elapsed)
    probe = (
        f"import runpy, sys; sys.argv = ['tidemark', 'read', {stream!r}, '--ago', '60m'];"
        "import tidemark.cli.main as m\n"
        "try:\n    m.main(sys.argv[1:])\nfinally:\n"
        f"    print('LOADED', sorted(k for k in sys.modules if k in {HEAVY!r}), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    loaded = next((ln for ln in done.stderr.splitlines() if ln.startswith("LOADED")), "?")
    base_p50 = statistics.median(times["baseline"])
    lines = [f"{RECORDS} records on 4 segments, {RUNS} runs each, fresh processes"]
    for name, samples in times.items():
        p50 = statistics.median(samples)
        lines.append(
            f"  {name:<18} p50 {p50:.2f} s  max {max(samples):.2f} s"
            + ("" if name == "baseline" else f"  ({p50 / base_p50:.1f}x baseline)")
        )
    lines.append(f"  heavy modules loaded by read: {loaded.removeprefix('LOADED ')}")
    lines.append("  [goal: each <= 0.5 s wall on a quiet machine]")
    return lines
