"""A JVM producer with tidemark's interceptor against the same producer without it.

``run(bootstrap, zk_connect, work_dir)``: ``ProducerBench`` (``tests/bench/jvm``) sends
1 M records of 256 B (64 keys, acks=all, idempotent, Kafka's defaults
otherwise) to a 4-partition topic adopted as a stream, timed from the first
send to ``close()`` (every record acknowledged; with the interceptor also its
shutdown mark). Bare and intercepted runs alternate, best of each; goal:
ratio >= 0.95.

Then the note -> mark latency: how long after a note the writer's mark is
stored on the marks topic (its LogAppendTime minus the noted time), for the
interceptor's automatic notes (the producer writing at a steady rate) beside
``EventWriter``'s ``note_time``. The controller's part (mark -> visible
watermark) is the same for both and measured by ``bench_controller``.
"""

from __future__ import annotations

import statistics
import subprocess
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]
from kazoo.client import KazooClient

from tests.integration.test_dropin_producer import make_topic
from tests.jvm_clients import client_classpath, compile_java
from tidemark.controller.naming import ClusterSettings, bucket_of
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.infra.jars import INTERCEPTOR_CLASS
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.writer import EventWriter
from tidemark.schemas.records import WriterMarkRecord

RECORDS = 1_000_000
PAYLOAD_BYTES = 256
PARTITIONS = 4
ROUNDS = 3
NOTES = 20


def _topic(bootstrap: str, name: str) -> None:
    make_topic(bootstrap, name, PARTITIONS)  # and waits until the broker lists it


def _drop(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer comes
    admin.delete_topics([name])[name].result(30)


def _settings(path: Path, bootstrap: str, extra: dict[str, str]) -> Path:
    base = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": "true"}
    path.write_text("".join(f"{k}={v}\n" for k, v in {**base, **extra}.items()))
    return path


def _bench(classes: Path, props: Path, topic: str, records: int, rate: int = 0) -> float:
    """Records per second (``rate``: sent at about that many a second; 0: at full speed)."""
    done = subprocess.run(
        [
            "java",
            "-Xmx512m",
            "-cp",
            ":".join([str(classes), *client_classpath()]),
            "ProducerBench",
            str(props),
            topic,
            str(records),
            str(PAYLOAD_BYTES),
            str(rate),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return float(done.stdout.strip().splitlines()[-1])


def _mark_lags(bootstrap: str, cluster: ClusterSettings, stream: str, writer: str) -> list[int]:
    """Per mark of ``writer``: its LogAppendTime minus its noted time (ms)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "log_level": 0})
    part = bucket_of(stream, cluster.bucket_count)
    tp = TopicPartition(cluster.marks_topic, part, 0)
    _, high = consumer.get_watermark_offsets(tp, timeout=10)
    consumer.assign([tp])
    lags = []
    read = 0
    while read < high:
        msg = consumer.poll(5)
        if msg is None:
            break
        if msg.error():
            continue
        read += 1
        if msg.key() != stream.encode():
            continue
        mark = WriterMarkRecord.decode(msg.value())
        if mark.writer_id == writer and mark.alive:
            lags.append(msg.timestamp()[1] - mark.time)
    consumer.close()
    return lags


def run(bootstrap: str, zk_connect: str, work_dir: Path) -> list[str]:
    unique = uuid.uuid4().hex[:8]
    work = work_dir / f"jvm-{unique}"
    work.mkdir(parents=True)
    classes = compile_java(work, (Path(__file__).parent / "jvm" / "ProducerBench.java").read_text())
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    cluster = ClusterSettings(marks_topic=f"bench-marks-{unique}", bucket_count=1)
    store = ZooKeeperStore(zk, cluster.zk_root)
    manager = StreamManager(store, bootstrap, cluster)
    scope = f"jvm{unique}"
    manager.create_scope(scope)
    out = []
    try:
        bare_rates, tidemark_rates = [], []
        for rnd in range(ROUNDS):
            for with_interceptor in (False, True):
                topic = f"bench-jvm-{unique}-{rnd}-{int(with_interceptor)}"
                _topic(bootstrap, topic)
                stream = f"{scope}/t{rnd}{int(with_interceptor)}"
                manager.adopt(stream, topic)
                extra = (
                    {}
                    if not with_interceptor
                    else {
                        "interceptor.classes": INTERCEPTOR_CLASS,
                        "client.id": f"bench-{rnd}",
                        "tidemark.stream": stream,
                        "tidemark.zookeeper.connect": zk_connect,
                        "tidemark.marks.topic": cluster.marks_topic,
                        "tidemark.bucket.count": "1",
                    }
                )
                props = _settings(
                    work / f"p{rnd}{int(with_interceptor)}.properties", bootstrap, extra
                )
                rate = _bench(classes, props, topic, RECORDS)
                manager.release(stream)
                _drop(bootstrap, topic)  # the broker may keep its log in memory
                (tidemark_rates if with_interceptor else bare_rates).append(rate)
        best_bare, best_tm = max(bare_rates), max(tidemark_rates)
        out.append(
            f"jvm producer, {RECORDS} x {PAYLOAD_BYTES} B, acks=all: bare {best_bare:,.0f}/s, "
            f"with the interceptor {best_tm:,.0f}/s, ratio {best_tm / best_bare:.3f} (goal >= 0.95)"
        )
        # note -> mark stored: the interceptor's automatic notes, the producer at 2 000/s
        topic = f"bench-jvm-lag-{unique}"
        _topic(bootstrap, topic)
        stream = f"{scope}/lag"
        manager.adopt(stream, topic)
        props = _settings(
            work / "lag.properties",
            bootstrap,
            {
                "interceptor.classes": INTERCEPTOR_CLASS,
                "client.id": "lag",
                "linger.ms": "5",
                "tidemark.stream": stream,
                "tidemark.zookeeper.connect": zk_connect,
                "tidemark.marks.topic": cluster.marks_topic,
                "tidemark.bucket.count": "1",
                "tidemark.note.interval.ms": "200",
            },
        )
        jvm_lags = _steady_lags(classes, props, topic, bootstrap, cluster, stream)
        py_lags = _python_lags(bootstrap, store, cluster, f"{scope}/py")
        out.append(
            f"note -> mark stored: interceptor p50 {statistics.median(jvm_lags):.0f} ms "
            f"(max {max(jvm_lags)} ms, {len(jvm_lags)} marks), EventWriter p50 "
            f"{statistics.median(py_lags):.0f} ms (max {max(py_lags)} ms)"
        )
    finally:
        zk.stop()
        zk.close()
    return out


def _steady_lags(classes, props, topic, bootstrap, cluster, stream) -> list[int]:
    """The interceptor's marks while a producer sends 20 000 records at 2 000 a second."""
    _bench(classes, props, topic, 20_000, rate=2_000)
    return _mark_lags(bootstrap, cluster, stream, "lag")


def _python_lags(
    bootstrap: str, store: ZooKeeperStore, cluster: ClusterSettings, stream: str
) -> list[int]:
    """``EventWriter``'s marks, a record and a note every 200 ms."""
    topic = f"bench-py-{uuid.uuid4().hex[:8]}"
    _topic(bootstrap, topic)
    StreamManager(store, bootstrap, cluster).adopt(stream, topic)
    with EventWriter(
        "py", stream, store=store, bootstrap_servers=bootstrap, config=WriterConfig(cluster=cluster)
    ) as writer:
        for _ in range(NOTES):
            now = int(time.time() * 1000)
            writer.write(b"x" * PAYLOAD_BYTES, routing_key="k", timestamp=now)
            writer.note_time(now)
            time.sleep(0.2)
    return _mark_lags(bootstrap, cluster, stream, "py")
