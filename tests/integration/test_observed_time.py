"""Observed time end to end: producers that send no marks, an observer, the controller job.

Real Kafka, ZooKeeper, Spark and Delta. A plain ``confluent_kafka.Producer``
writes an adopted topic; ``StreamObserver`` (and ``tidemark stream observe``)
notes time from the brokers' offsets; the controller job (ticks mode) turns its
marks into watermarks labelled as observed, and the seeks answer from them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.controller_env import Env
from tidemark.controller.naming import ClusterSettings, bucket_of
from tidemark.jobs.config import CycleTrigger
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.tables import read_table
from tidemark.jobs.workflow import tick_value
from tidemark.pipelines.reading.seek import SeekIndex
from tidemark.pipelines.writing.observer import ObserverConfig, StreamObserver, observer_id
from tidemark.schemas.records import WriterMarkRecord
from tidemark.schemas.tables import MARKS

BASE = int(time.time() * 1000) - 600_000
L = 1_000


def adopt(env: Env, unique: str, partitions: int) -> tuple[str, str]:
    """A topic made by hand, adopted as a stream: (stream, topic)."""
    topic = f"legacy-{unique}"
    admin = AdminClient({"bootstrap.servers": env.kafka})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)
    deadline = time.monotonic() + 30
    while topic not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    stream = f"o{unique}/legacy"
    env.manager.create_scope(stream.split("/")[0])
    env.manager.adopt(stream, topic)
    return stream, topic


def write(kafka: str, topic: str, partition: int, timestamps: Sequence[int]) -> None:
    """Records from a producer that knows nothing of tidemark."""
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 1})
    for ts in timestamps:
        producer.produce(topic, b"x", partition=partition, timestamp=ts)
    assert producer.flush(30) == 0


def tick(env: Env, stream: str, at: int) -> None:
    producer = Producer({"bootstrap.servers": env.kafka})
    producer.produce(
        env.cluster.marks_topic,
        tick_value(at),
        stream.encode(),
        partition=bucket_of(stream, env.cluster.bucket_count),
    )
    assert producer.flush(30) == 0


def marks_rows(env: Env, stream: str) -> list[dict[str, Any]]:
    rows = read_table(str(env.work / "delta"), MARKS, stream)
    return sorted(rows, key=lambda r: r["seq"])


def cut(row: dict[str, Any]) -> dict[int, int]:
    return {int(c["segment"]): int(c["offset"]) for c in row["stream_cut"]}


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_an_observed_stream_gets_labelled_watermarks_seeks_and_idle_partitions_let_go(
    spark: Any, controller_env: Env, unique: str
) -> None:
    env = controller_env
    stream, topic = adopt(env, unique, 2)
    write(env.kafka, topic, 0, [BASE - 5_000, BASE - 2_000, BASE - 3_000])
    write(env.kafka, topic, 1, [BASE - 4_000])
    clock = Clock(BASE)
    config = ObserverConfig(lateness_ms=L, idle_ms=5_000, cluster=env.cluster)
    observer = StreamObserver(
        stream, config, store=env.store, bootstrap_servers=env.kafka, clock=clock
    )
    job = ControllerJob(spark, env.settings(trigger=CycleTrigger.TICKS), f"c-{unique}").start()
    try:
        job.wait_leading()
        first = observer.observe_once()
        assert first is not None and first.time == BASE - 4_000 - L
        assert observer.flush() == 0
        tick(env, stream, 10_000)
        job.process_all_available()
        [row] = marks_rows(env, stream)
        assert row["time"] == BASE - 5_000 and row["upper_time"] == BASE - 2_000
        assert cut(row) == {0: 3, 1: 1}, "the high-water marks"
        assert row["observed"] == [observer_id(stream)]
        assert row["observed_lateness_ms"] == L
        assert row["possibly_late"] == 0
        seek = SeekIndex(str(env.work / "delta"))
        found = seek.stop(stream, BASE - 5_000)
        assert found is not None and dict(found.stream_cut) == {0: 3, 1: 1}
        assert seek.stop(stream, BASE - 4_999) is None, "not complete past the watermark"
        start = seek.start(stream, BASE - 1_000)  # above every timestamp before the cut
        assert start is not None and dict(start.stream_cut) == {0: 3, 1: 1}

        # A record far behind lands after the cut: counted as possibly late.
        clock.now_ms = BASE + 1_000
        write(env.kafka, topic, 0, [BASE - 9_000])
        late = observer.observe_once()
        assert late is not None and late.possibly_late == 1 and late.time == BASE - 5_000
        # Partition 1 gets nothing more; partition 0 moves on. Once partition 1 is idle it
        # no longer holds the time at its old maximum.
        clock.now_ms = BASE + 6_000
        write(env.kafka, topic, 0, [BASE - 1_000])
        moved = observer.observe_once()
        assert moved is not None and moved.time == BASE - 1_000 - L
        assert observer.flush() == 0
        tick(env, stream, 11_000)
        job.process_all_available()
        rows = marks_rows(env, stream)
        assert [r["time"] for r in rows] == [BASE - 5_000, BASE - 2_000]
        assert cut(rows[-1]) == {0: 5, 1: 1}
        assert rows[-1]["possibly_late"] == 1
        observer.close()
        sent = [r for r in marks_of(env, stream) if r.writer_id == observer_id(stream)]
        assert sent[-1].alive is False and sent[-1].time == BASE - 2_000, "the shutdown mark"
        assert {r.observed_lateness_ms for r in sent} == {L}
    finally:
        observer.close()
        job.stop()


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_an_observer_beside_a_noting_writer_the_watermark_is_the_minimum(
    spark: Any, controller_env: Env, unique: str
) -> None:
    env = controller_env
    stream = f"m{unique}/shared"
    env.create(stream, 1)
    topic = env.store.get_stream(stream).topic
    writer = env.writer("w1", stream)
    clock = Clock(BASE)
    observer = StreamObserver(
        stream,
        ObserverConfig(lateness_ms=L, idle_ms=60_000, cluster=env.cluster),
        store=env.store,
        bootstrap_servers=env.kafka,
        clock=clock,
    )
    job = ControllerJob(spark, env.settings(trigger=CycleTrigger.TICKS), f"c-{unique}").start()
    try:
        job.wait_leading()
        write(env.kafka, topic, 0, [BASE - 3_000])  # the producer nobody changes
        writer.write(b"w", routing_key="k", timestamp=BASE - 8_000)
        writer.note_time(BASE - 8_000)  # behind the observer's BASE - 4 000
        writer.flush()
        assert observer.observe_once() is not None
        assert observer.flush() == 0
        tick(env, stream, 10_000)
        job.process_all_available()
        [first] = marks_rows(env, stream)
        assert first["time"] == BASE - 8_000, "the noting writer bounds it"
        assert sorted(first["writers"]) == sorted(["w1", observer_id(stream)])
        assert first["observed"] == [observer_id(stream)], "it rests on observation too"
        writer.note_time(BASE)  # now the observer is the slower one
        writer.flush()
        write(env.kafka, topic, 0, [BASE - 2_000])
        clock.now_ms = BASE + 1_000
        assert observer.observe_once() is not None
        assert observer.flush() == 0
        tick(env, stream, 11_000)
        job.process_all_available()
        rows = marks_rows(env, stream)
        assert [r["time"] for r in rows] == [BASE - 8_000, BASE - 3_000]
        assert rows[-1]["observed_lateness_ms"] == L
    finally:
        writer.close()
        observer.close()
        job.stop()


def marks_of(env: Env, stream: str) -> list[WriterMarkRecord]:
    """The writer marks of ``stream`` on the marks topic (ticks left out)."""
    return _marks(env.kafka, env.cluster, stream)


def _marks(kafka: str, cluster: ClusterSettings, stream: str) -> list[WriterMarkRecord]:
    partition = bucket_of(stream, cluster.bucket_count)
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "check", "log_level": 0})
    out = []
    try:
        tp = TopicPartition(cluster.marks_topic, partition)
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
        except KafkaException:  # the marks topic is not there yet (the observer makes it)
            return []
        consumer.assign([TopicPartition(cluster.marks_topic, partition, low)])
        while low < high:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            low = msg.offset() + 1
            if msg.key() == stream.encode() and msg.value()[:2] == b"\xc3\x01":
                out.append(WriterMarkRecord.decode(msg.value()))
    finally:
        consumer.close()
    return out


# --- the command line ------------------------------------------------------------------------


@pytest.fixture
def cli_env(kafka: str, zookeeper: str, zk_client: Any, unique: str) -> Iterator[dict[str, str]]:
    yield {
        **os.environ,
        "TIDEMARK_KAFKA_BOOTSTRAP": kafka,
        "TIDEMARK_ZK_CONNECT": f"{zookeeper}/tidemark-test-{unique}",
    }


def tidemark(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--lateness", "30s"], 1, "unknown stream"),
        # a duration outside the one syntax is a usage error, as for every duration flag
        (["--lateness=-5s"], 2, "--lateness '-5s' is no duration"),
        (["--lateness", "5 parsecs"], 2, "no duration"),
        (["--lateness", "30s", "--interval", "soon"], 2, "--interval 'soon' is no duration"),
    ],
)
def test_bad_input_is_a_clear_error(
    cli_env: dict[str, str], unique: str, args: list[str], code: int, says: str
) -> None:
    done = tidemark(cli_env, "stream", "observe", f"nowhere{unique}/s", *args)
    assert done.returncode == code, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr


@pytest.mark.integration
def test_the_command_observes_until_sigterm_then_sends_its_shutdown_mark(
    cli_env: dict[str, str], kafka: str, zk_client: Any, unique: str
) -> None:
    from tidemark.controller.config import ScalingPolicy, StreamConfiguration
    from tidemark.controller.streams import StreamManager
    from tidemark.controller.zookeeper.store import ZooKeeperStore

    cluster = ClusterSettings()
    manager = StreamManager(ZooKeeperStore(zk_client, cluster.zk_root), kafka, cluster)
    stream = f"c{unique}/legacy"
    manager.create_scope(stream.split("/")[0])
    manager.create(stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    topic = manager.describe(stream).topic
    write(kafka, topic, 0, [BASE])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidemark.cli.main",
            "stream",
            "observe",
            stream,
            "--lateness=2s",
            "--idle=10m",
        ],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _marks(kafka, cluster, stream):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no observed mark"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    sent = _marks(kafka, cluster, stream)
    assert {m.writer_id for m in sent} == {observer_id(stream)}
    assert all(m.time == BASE - 2_000 and m.observed_lateness_ms == 2_000 for m in sent)
    assert sent[-1].alive is False and all(m.alive for m in sent[:-1])
    assert len({m.instance for m in sent}) == 1 and sent[0].instance
