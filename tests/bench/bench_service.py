"""A seek through ``tidemark serve`` beside Kafka's ``offsets_for_times``, in the same run.

The service runs the way users run it: ``tidemark serve`` in a process of its
own (started here against the same Kafka, ZooKeeper -- a chroot of its own --
and Delta root, waited for until it answers, stopped at the end), over a
stream of ``PARTITIONS`` segments and ``WATERMARKS`` watermarks. The client
is :class:`~tidemark.pipelines.reading.time_service.ServiceIndex` (what
``ReaderGroup.create(from_time=...)`` and ``tidemark read`` use when
``TIDEMARK_TIME_SERVICE`` is set): one HTTP GET on a kept-alive connection,
answered from the service's warm index. The baseline is
``Consumer.offsets_for_times`` over all partitions of a topic with the same
number of partitions, against the same broker. Lookups alternate, at
random times; the first answers are checked against the local index, and the
service's own request count (``/metrics``) shows every timed lookup reached it
(a ``ServiceIndex`` falls back to Delta quietly when the service is down).

Printed: p50 and p99 of both, side by side, and the ratio [goal <= 1x].

Then waits for stream time (``wait_for_time``) on the same stream, through
the service (``ServiceWatermarkSource``: a long poll the service answers
as soon as its tail thread sees the commit of the watermark) and, as the
baseline, on the Delta table (``DeltaWatermarkSource``: the ``_delta_log``
watched with a 10 -> 250 ms backoff): a waiter waits for the next time, a
watermark reaching it is appended ~0.3 s later, and the time from the
start of the append (``marks``, then ``index``) to the wait's return is
printed (p50, max) with the ratio of the p50s [goal <= 3x].
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.bench.percentile import percentile

PARTITIONS = 16
WATERMARKS = 20_000
LOOKUPS = 2_000
WAITS = 10


def run(services: Any) -> list[str]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kazoo.client import KazooClient

    from tidemark.controller.config import ScalingPolicy, StreamConfiguration
    from tidemark.controller.delta.tables import append_watermarks
    from tidemark.controller.model import Watermark
    from tidemark.controller.naming import ClusterSettings
    from tidemark.controller.streams import StreamManager
    from tidemark.controller.zookeeper.store import ZooKeeperStore
    from tidemark.pipelines.reading.seek import SeekIndex
    from tidemark.pipelines.reading.time_service import ServiceIndex

    work = Path(services.work_dir) / "bench-service"
    work.mkdir(parents=True, exist_ok=True)
    root = str(work / "delta")
    unique = str(int(time.time()))
    stream = f"bench{unique}/seek"
    chroot = f"/bench-service-{unique}"  # `tidemark serve` sees this run's stream only
    cluster = ClusterSettings(
        marks_topic=f"bench-seek-marks-{unique}", bucket_count=1, zk_root=f"{chroot}/tidemark"
    )
    base = int(time.time() * 1000) - 3_600_000
    marks = [
        Watermark(
            stream,
            base + i * 100,
            base + i * 100 + 250,
            {p: i * 3 + p for p in range(PARTITIONS)},
            i,
        )
        for i in range(WATERMARKS)
    ]
    for lo in range(0, WATERMARKS, 5_000):
        top = None if lo == 0 else marks[lo - 1].upper_time
        append_watermarks(root, marks[lo : lo + 5_000], previous_upper_time_max=top)

    topic = f"bench-seek-{unique}"
    admin = AdminClient({"bootstrap.servers": services.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(30)
    producer = Producer({"bootstrap.servers": services.bootstrap, "linger.ms": 5})
    for i in range(1_000):
        for p in range(PARTITIONS):
            producer.produce(topic, b"x", partition=p, timestamp=base + i * 100)
        producer.poll(0)
    producer.flush(60)
    consumer = Consumer(
        {"bootstrap.servers": services.bootstrap, "group.id": "bench-seek", "log_level": 0}
    )

    client = KazooClient(hosts=services.zk_connect)
    client.start(timeout=15)
    lines: list[str] = []
    try:
        store = ZooKeeperStore(client, cluster.zk_root)
        manager = StreamManager(store, services.bootstrap, cluster)
        manager.create_scope(stream.split("/")[0])
        manager.create(stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(PARTITIONS)))
        zk = f"{services.zk_connect}{chroot}"
        with _serve(work, services.bootstrap, zk, root, stream) as url:
            remote = ServiceIndex(url, root)
            local = SeekIndex(root)
            rng = random.Random(11)
            for _ in range(50):  # agree before timing
                t = rng.randrange(base, base + WATERMARKS * 100)
                assert remote.start(stream, t) == local.start(stream, t)
            tps = [TopicPartition(topic, p, base) for p in range(PARTITIONS)]
            consumer.offsets_for_times(tps, 10)
            ours: list[float] = []
            kafka: list[float] = []
            before = _served_lookups(url)
            for _ in range(LOOKUPS):
                t = rng.randrange(base, base + WATERMARKS * 100)
                a = time.perf_counter()
                found = remote.start(stream, t)
                b = time.perf_counter()
                kt = base + rng.randrange(0, 100_000)
                consumer.offsets_for_times(
                    [TopicPartition(topic, p, kt) for p in range(PARTITIONS)], 10
                )
                c = time.perf_counter()
                assert found is not None or t <= base + 250
                ours.append((b - a) * 1000)
                kafka.append((c - b) * 1000)
            remote.client.close()
            after = _served_lookups(url)
            answered = after[0] - before[0]
            assert answered >= LOOKUPS, f"the service answered {answered} of {LOOKUPS} lookups"
            handler_ms = (after[1] - before[1]) / answered * 1000
            waits = _waits(url, root, stream, marks[-1])
    finally:
        consumer.close()
        admin.delete_topics([topic])
        client.stop()
        client.close()
    ratio = percentile(ours, 0.5) / percentile(kafka, 0.5)
    ratio_p99 = percentile(ours, 0.99) / percentile(kafka, 0.99)
    lines += [
        f"seek, {WATERMARKS:,} watermarks of a {PARTITIONS}-segment stream, {LOOKUPS:,} lookups",
        f"  tidemark serve (own process, HTTP)    p50 {percentile(ours, 0.5):.2f} ms"
        f"  p99 {percentile(ours, 0.99):.2f} ms",
        f"    of which in the service's handler (lookup, JSON)  mean {handler_ms:.3f} ms",
        f"  Kafka offsets_for_times, {PARTITIONS} partitions  p50 {percentile(kafka, 0.5):.2f} ms"
        f"  p99 {percentile(kafka, 0.99):.2f} ms",
        f"  ratio p50 {ratio:.2f}x, p99 {ratio_p99:.2f}x  [goal <= 1x]",
        f"wait_for_time, {WAITS} waits each: from the start of a watermark's append to the "
        "wait's return",
    ]
    for name, samples in waits.items():
        lines.append(
            f"  {name:<36}  p50 {percentile(samples, 0.5):.0f} ms  max {max(samples):.0f} ms"
        )
    served, watched = (percentile(samples, 0.5) for samples in waits.values())
    lines.append(f"  ratio p50 {served / watched:.2f}x  [goal <= 3x]")
    return lines


@contextmanager
def _serve(work: Path, bootstrap: str, zk_connect: str, root: str, stream: str) -> Iterator[str]:
    """``tidemark serve`` in a process of its own; its URL once it lists ``stream``."""
    from tidemark.environment import DELTA_ROOT, KAFKA_BOOTSTRAP, ZK_CONNECT
    from tidemark.infra.ports import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, **{KAFKA_BOOTSTRAP: bootstrap, ZK_CONNECT: zk_connect, DELTA_ROOT: root})
    log_path = work / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidemark.cli.main", "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while stream.encode() not in _get(url, "/api/streams"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tidemark serve did not answer; see {log_path}")
            time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _get(url: str, path: str) -> bytes:
    try:
        with urllib.request.urlopen(url + path, timeout=10) as response:
            body: bytes = response.read()
            return body
    except OSError:
        return b""


def _served_lookups(url: str) -> tuple[int, float]:
    """How many ``start`` lookups the service has answered, and the seconds its handler
    spent on them (its latency histogram: from the request's arrival in the app to
    the answer's bytes; HTTP parsing and the network are outside)."""
    text = _get(url, "/metrics").decode()
    found = [
        re.search(
            rf'^tidemark_serve_request_duration_seconds_{part}\{{route="start"\}} (\S+)$',
            text,
            re.M,
        )
        for part in ("count", "sum")
    ]
    count, spent = (0.0 if f is None else float(f.group(1)) for f in found)
    return int(count), spent


def _timed_wait(stream: str, target: int, source: Any, returned: list[float]) -> None:
    from tidemark.pipelines.reading.stream_time import wait_for_time

    wait_for_time(stream, target, 30_000, source=source)
    returned.append(time.perf_counter())


def _waits(url: str, root: str, stream: str, last: Any) -> dict[str, list[float]]:
    """Wake-up latencies (ms) of waits through the service and on Delta, alternating."""
    import threading

    from tidemark.controller.delta.tables import append_watermarks
    from tidemark.controller.model import Watermark
    from tidemark.pipelines.reading.stream_time import DeltaWatermarkSource, ServiceWatermarkSource

    delta = DeltaWatermarkSource(root, stream)
    delta.poll()  # the table read once (20 000 rows); each wait then reads what is new
    sources = {
        "tidemark serve (long poll)": lambda t: ServiceWatermarkSource(url, stream, t),
        "Delta _delta_log watch (baseline)": lambda t: delta,
    }
    out: dict[str, list[float]] = {name: [] for name in sources}
    for _ in range(WAITS):
        for name, make in sources.items():
            target = last.time + 100
            returned: list[float] = []
            waiter = threading.Thread(
                target=_timed_wait, args=(stream, target, make(target), returned)
            )
            waiter.start()
            time.sleep(0.3)
            mark = Watermark(stream, target, target + 250, dict(last.stream_cut), last.seq + 1)
            appended = time.perf_counter()
            append_watermarks(root, [mark], previous_upper_time_max=last.upper_time)
            waiter.join(60)
            assert returned, f"{name}: the wait did not return"
            out[name].append((returned[0] - appended) * 1000)
            last = mark
    return out
