"""CLI wall time: ``tidemark read | watermarks | window | stream describe`` on 1 000 records.

Each command runs as a fresh process (``python -m tidemark.cli.main``, as a
user types it), ``RUNS`` times; the baseline is a bare confluent-kafka
consumer script, also a fresh process, reading the same 1 000 records
(assign every partition from the beginning, stop at end of partition) --
what ``kafka-console-consumer`` does without the JVM. Printed: p50 and max
wall time per command and the ratio to the baseline's p50
[goal: each <= 0.5 s on a quiet machine].

Every command (and the baseline) runs once untimed first, with
``PYTHONPYCACHEPREFIX`` set to a directory of the bench's and
``PYTHONDONTWRITEBYTECODE`` removed: an installed tidemark has its bytecode
compiled (pip does it at install); run from a source tree with bytecode
writing off, every command compiled ~60 modules first (0.05-0.08 s).

The baseline is what a user writes; the bench does not tune it. It stops at
end-of-partition notices, and librdkafka sends those only with the answer
to the fetch *after* the last record -- a fetch Kafka holds for
``fetch.wait.max.ms`` (500 ms by default) because nothing new comes. The
script notes (on stderr, costing nothing) how long it waited between its
last record and the last notice; the bench prints that share. ``tidemark
read`` stops at the last stable offsets it asked for at the start, so it
has no such wait.

Also printed: which heavy modules ``read`` loads (pandas must not be one).

``python -m tests.bench.bench_cli [--profile]`` starts only ZooKeeper and
Kafka and runs this bench, or prints a wall-clock profile (cProfile) of each
command instead (to find where the time goes).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORDS = 1_000
RUNS = 5

BASELINE = r"""
import sys, time
from confluent_kafka import Consumer, KafkaError, TopicPartition
bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-baseline",
              "enable.partition.eof": True, "isolation.level": "read_committed",
              "enable.auto.commit": False})
c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
done, n, last = set(), 0, None
while len(done) < partitions:
    m = c.poll(1.0)
    if m is None:
        continue
    if m.error():
        if m.error().code() == KafkaError._PARTITION_EOF:
            done.add(m.partition())
        continue
    n += 1
    last = time.perf_counter()
    sys.stdout.write(m.value().decode() + "\n")
tail = time.perf_counter() - last if last is not None else 0.0
c.close()
sys.stderr.write(f"TAIL {tail:.4f}\n")
"""

HEAVY = ("pandas", "pyspark", "pyarrow", "deltalake", "kazoo", "numpy", "starlette", "rich")


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, str, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed: {done.stderr[-2000:]}")
    return elapsed, done.stdout, done.stderr


@dataclass(frozen=True)
class Prepared:
    """A stream of ``RECORDS`` records with watermarks and a group, and the commands."""

    env: dict[str, str]
    stream: str
    commands: dict[str, list[str]]
    baseline: list[str]


def prepare(services: Any) -> Prepared:
    from kazoo.client import KazooClient

    from tidemark.controller.config import ScalingPolicy, StreamConfiguration
    from tidemark.controller.delta.tables import append_watermarks
    from tidemark.controller.model import Watermark
    from tidemark.controller.naming import ClusterSettings
    from tidemark.controller.streams import StreamManager
    from tidemark.controller.zookeeper.store import ZooKeeperStore
    from tidemark.pipelines.reading.group import ReaderGroup
    from tidemark.pipelines.writing.config import WriterConfig
    from tidemark.pipelines.writing.writer import EventWriter

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
        # Bytecode as an installed package has it (pip compiles it at install), kept
        # out of the source tree; written by the untimed first run of each command.
        PYTHONPYCACHEPREFIX=str(work / "pycache"),
    )
    env.pop("TIDEMARK_TIME_SERVICE", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cli = [sys.executable, "-m", "tidemark.cli.main"]
    commands = {
        "read --ago 60m": [*cli, "read", stream, "--ago", "60m", "--format", "json"],
        "read (head)": [*cli, "read", stream, "--format", "json"],
        "watermarks": [*cli, "watermarks", stream, "--format", "json"],
        "window": [*cli, "window", group, "--format", "json"],
        "stream describe": [*cli, "stream", "describe", stream, "--format", "json"],
    }
    baseline = [sys.executable, "-c", BASELINE, services.bootstrap, topic, "4"]
    return Prepared(env, stream, commands, baseline)


def run(services: Any) -> list[str]:
    prepared = prepare(services)
    env, stream, commands = prepared.env, prepared.stream, prepared.commands
    times: dict[str, list[float]] = {name: [] for name in ["baseline", *commands]}
    tails: list[float] = []
    for argv in [prepared.baseline, *commands.values()]:  # untimed: bytecode, file cache
        _timed(argv, env)
    for _ in range(RUNS):
        elapsed, out, err = _timed(prepared.baseline, env)
        assert len(out.splitlines()) == RECORDS, len(out.splitlines())
        times["baseline"].append(elapsed)
        tails += [float(ln.split()[1]) for ln in err.splitlines() if ln.startswith("TAIL ")]
        for name, argv in commands.items():
            elapsed, out, _ = _timed(argv, env)
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
    lines = [
        f"{RECORDS} records on 4 segments, {RUNS} runs each, fresh processes, after one "
        "untimed run of each (bytecode compiled once, as an installed package has it: "
        "without it, compiling tidemark's modules cost ~0.05-0.08 s per command)"
    ]
    for name, samples in times.items():
        p50 = statistics.median(samples)
        lines.append(
            f"  {name:<18} p50 {p50:.2f} s  max {max(samples):.2f} s"
            + ("" if name == "baseline" else f"  ({p50 / base_p50:.1f}x baseline)")
        )
    if tails:
        lines.append(
            f"  baseline: p50 {statistics.median(tails):.2f} s of it from its last record to "
            "the last end-of-partition notice (Kafka holds that fetch fetch.wait.max.ms, "
            "500 ms by default; the script is left as a user writes it)"
        )
    lines.append(f"  heavy modules loaded by read: {loaded.removeprefix('LOADED ')}")
    lines.append("  [goal: each <= 0.5 s wall on a quiet machine]")
    return lines


def profile(services: Any, top: int = 25) -> None:
    """Print a wall-clock profile (cProfile, sorted by cumulative time) of each command."""
    prepared = prepare(services)
    work = Path(services.work_dir) / "bench-cli"
    for name, argv in prepared.commands.items():
        out = work / (name.replace(" ", "_").replace("-", "") + ".prof")
        cmd = [argv[0], "-m", "cProfile", "-o", str(out), *argv[1:]]
        elapsed, _, _ = _timed(cmd, prepared.env)
        print(f"== {name}: {elapsed:.2f} s wall (profiled)", flush=True)
        import pstats

        pstats.Stats(str(out)).sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    import tempfile
    from contextlib import ExitStack

    from tests.bench.__main__ import BenchServices
    from tidemark.environment import Environment
    from tidemark.infra.kafka import KafkaCluster
    from tidemark.infra.zookeeper import ZooKeeperServer

    if sys.argv[1:] not in ([], ["--profile"]):
        raise SystemExit("usage: python -m tests.bench.bench_cli [--profile]")
    with tempfile.TemporaryDirectory(prefix="tidemark-prof-") as tmp, ExitStack() as stack:
        base = Path(tmp)
        environment = Environment.from_env()
        kafka = stack.enter_context(KafkaCluster(base / "kafka", env=environment, heap_mb=1024))
        zk = stack.enter_context(ZooKeeperServer(base / "zk", env=environment))
        services = BenchServices(base, kafka.bootstrap_servers, zk.connect_string)
        if sys.argv[1:]:
            profile(services)
        else:
            print("\n".join(run(services)))
