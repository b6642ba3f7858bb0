"""The watermark controller job end to end: real Kafka, ZooKeeper, Spark and Delta.

Writers are ``pipelines.EventWriter``; streams are made and scaled by
``controller.streams.StreamManager``; the tables are read back with
deltalake (``jobs.tables``), as readers will.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from controller.config import ScalingPolicy, StreamConfiguration
from controller.model import KeyRange, Watermark, WriterMark
from controller.naming import ClusterSettings, bucket_of
from controller.streams import StreamManager
from controller.watermarks import GenerationState, Verdict, accept_mark, watermark_cycle
from controller.zk_store import ZooKeeperStore
from jobs.config import ControllerSettings, CycleTrigger
from jobs.controller_job import ControllerInstance
from jobs.tables import INDEX, REJECTED_MARKS, Reason, read_table, read_watermarks
from jobs.workflow import parse_tick, tick_value
from pipelines.writing.config import WriterConfig
from pipelines.writing.writer import EventWriter
from schemas.records import WriterMarkRecord

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


@dataclass
class Env:
    kafka: str
    zk_connect: str  # with the test's chroot
    store: ZooKeeperStore
    manager: StreamManager
    cluster: ClusterSettings
    work: Path
    unique: str

    def settings(self, **overrides: Any) -> ControllerSettings:
        base: dict[str, Any] = {
            "kafka_bootstrap": self.kafka,
            "zk_connect": self.zk_connect,
            "delta_root": str(self.work / "delta"),
            "checkpoint_root": str(self.work / "checkpoints"),
            "cluster": self.cluster,
            "interval_ms": 1000,
            "writer_timeout_ms": 10_000,
        }
        base.update(overrides)
        return ControllerSettings(**base)

    def writer(self, writer_id: str, stream: str) -> EventWriter:
        return EventWriter(
            writer_id,
            stream,
            store=self.store,
            bootstrap_servers=self.kafka,
            config=WriterConfig(cluster=self.cluster, linger_ms=1),
        )

    def create(self, stream: str, segments: int) -> None:
        self.manager.create_scope(stream.split("/")[0])
        self.manager.create(
            stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )


def make_env(kafka: str, zookeeper: str, zk_client: Any, unique: str, work: Path, buckets: int):
    cluster = ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=buckets)
    store = ZooKeeperStore(zk_client, cluster.zk_root)
    return Env(
        kafka=kafka,
        zk_connect=f"{zookeeper}/tidemark-test-{unique}",
        store=store,
        manager=StreamManager(store, kafka, cluster),
        cluster=cluster,
        work=work,
        unique=unique,
    )


def stream_in_bucket(prefix: str, bucket: int, buckets: int) -> str:
    for i in range(1000):
        name = f"{prefix}/s{i}"
        if bucket_of(name, buckets) == bucket:
            return name
    raise AssertionError("no name found")


def marks_partition(env: Env, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every committed record of one marks-topic partition: (offset, key, value)."""
    consumer = Consumer(
        {
            "bootstrap.servers": env.kafka,
            "group.id": f"check-{env.unique}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        topic = env.cluster.marks_topic
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def produce(env: Env, stream: str | None, value: bytes | None, partition: int) -> None:
    producer = Producer({"bootstrap.servers": env.kafka})
    producer.produce(
        env.cluster.marks_topic,
        value=value,
        key=None if stream is None else stream.encode(),
        partition=partition,
    )
    assert producer.flush(10) == 0


def cut_ok(prev: Watermark, new: Watermark) -> bool:
    """A cut never goes backwards on a segment both name."""
    return all(new.stream_cut[s] >= o for s, o in prev.stream_cut.items() if s in new.stream_cut)


def check_sequence(marks: list[Watermark]) -> None:
    assert [m.seq for m in marks] == list(range(len(marks))), "seq must be 0..n-1, no duplicates"
    for prev, new in itertools.pairwise(marks):
        assert new.time > prev.time, (prev, new)
        assert cut_ok(prev, new), (prev, new)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path


# --- 1. deterministic: the table equals watermark_cycle over the same marks --------------------


def test_marks_table_equals_watermark_cycle(
    spark: Any, kafka: str, zookeeper: str, zk_client: Any, unique: str, work: Path
) -> None:
    env = make_env(kafka, zookeeper, zk_client, unique, work, buckets=1)
    stream = f"t{unique}/orders"
    env.create(stream, 2)
    settings = env.settings(trigger=CycleTrigger.TICKS, writer_timeout_ms=2_000)
    writers = {w: env.writer(w, stream) for w in ("w1", "w2", "w3")}
    instance = ControllerInstance(spark, settings, f"c-{unique}").start()
    try:
        instance.wait_running({0})
        for rnd in range(8):
            if rnd == 3:  # scale midway: split segment 0, merge nothing
                meta = env.store.get_stream(stream)
                first = meta.current_epoch().segments[0]
                mid = (first.key_range.low + first.key_range.high) / 2
                env.manager.scale(
                    stream,
                    [first.id],
                    [KeyRange(first.key_range.low, mid), KeyRange(mid, first.key_range.high)],
                )
            for i, (wid, w) in enumerate(sorted(writers.items())):
                if wid == "w3" and rnd == 5:
                    w.close()  # the shutdown mark
                    continue
                if wid == "w3" and rnd > 5:
                    continue
                for k in range(3):
                    w.write(f"{wid}-{rnd}-{k}".encode(), routing_key=f"key-{i}-{k}")
                # w2 repeats its time in round 2: lagging for a cycle, then catches up
                noted = (
                    1_000 + 100 * rnd + 10 * i
                    if not (wid == "w2" and rnd == 2)
                    else 1_000 + 100 + 10 * i
                )
                w.note_time(noted)
                w.flush()
            produce(env, stream, tick_value(10_000 + 1_000 * rnd), 0)
            instance.process_all_available()
        instance.process_all_available()
    finally:
        for wid, w in writers.items():
            if wid != "w3":
                w.close()
        instance.stop()

    # The reference: the same records, in offset order, through the pure core.
    epochs = env.store.get_stream(stream).epochs
    marks: dict[str, WriterMark] = {}
    state = GenerationState()
    expected: list[Watermark] = []
    for _, key, value in marks_partition(env, 0):
        assert key == stream.encode()
        now = parse_tick(value)
        if now is not None:
            cycle = watermark_cycle(stream, marks, state, epochs, now, settings.writer_timeout_ms)
            state = cycle.state
            for w in cycle.removed:
                marks.pop(w, None)
            if cycle.watermark is not None:
                expected.append(cycle.watermark)
            continue
        assert value is not None
        rec = WriterMarkRecord.decode(value)
        mark = WriterMark(rec.time, dict(rec.position), rec.alive, rec.max_event_time)
        if accept_mark(marks.get(rec.writer_id), mark) is Verdict.ACCEPTED:
            marks[rec.writer_id] = mark

    got = read_watermarks(settings.delta_root, stream)
    assert len(expected) >= 5
    assert [(m.seq, m.time, m.upper_time, dict(m.stream_cut)) for m in got] == [
        (m.seq, m.time, m.upper_time, dict(m.stream_cut)) for m in expected
    ]
    assert any(s >> 32 == 1 for s in got[-1].stream_cut), "the last cut is in the new epoch"
    index = sorted(read_table(settings.delta_root, INDEX, stream), key=lambda r: r["seq"])
    running = 0
    for row, m in zip(index, got, strict=True):
        running = max(running, m.upper_time)
        assert (row["seq"], row["time"], row["upper_time_max"]) == (m.seq, m.time, running)
    assert read_table(settings.delta_root, REJECTED_MARKS) == []


# --- 2. garbage and rejected marks -------------------------------------------------------------


def test_rejected_marks_land_with_reasons_and_the_job_keeps_emitting(
    spark: Any, kafka: str, zookeeper: str, zk_client: Any, unique: str, work: Path
) -> None:
    env = make_env(kafka, zookeeper, zk_client, unique, work, buckets=1)
    good, liar = f"g{unique}/good", f"g{unique}/liar"
    env.create(good, 1)
    env.create(liar, 1)
    settings = env.settings(lso_hold_ms=1_000)
    w = env.writer("w1", good)
    w.write(b"x", routing_key="k")
    w.note_time(1_000)
    w.flush()

    def mark(stream: str, writer: str, t: int, pos: dict[int, int]) -> bytes:
        return WriterMarkRecord(stream, writer, t, pos).encode()

    instance = ControllerInstance(spark, settings, f"c-{unique}").start()
    try:
        instance.wait_running({0})
        wait_for(lambda: len(read_watermarks(settings.delta_root, good)) >= 1, instance)
        produce(env, good, b"not avro at all", 0)
        produce(env, None, b"\x00\x01", 0)
        produce(env, good, mark(f"g{unique}/other", "w9", 5, {}), 0)  # key != stream
        produce(env, f"g{unique}/nope", mark(f"g{unique}/nope", "w9", 5, {}), 0)
        produce(env, good, mark(good, "w7", 5, {1 << 32 | 9: 1}), 0)  # unknown segment
        produce(env, good, mark(good, "w1", 500, {0: 1}), 0)  # not w1's writer instance
        produce(env, good, mark(good, "w5", 2_000, {0: 1}), 0)
        produce(env, good, mark(good, "w5", 1_900, {0: 1}), 0)  # stale time
        produce(env, good, mark(good, "w5", 2_100, {0: 0}), 0)  # regressed position
        produce(env, good, mark(good, "w5", 2_200, {0: 1}), 0)
        produce(env, liar, mark(liar, "w6", 3_000, {0: 1_000}), 0)  # past the LSO
        for t in (1_500, 2_500, 3_000):
            w.write(b"y", routing_key="k")
            w.note_time(t)
            w.flush()
            instance.process_all_available()
        wait_for(
            lambda: (
                {r["reason"] for r in read_table(settings.delta_root, REJECTED_MARKS)}
                >= set(Reason.ALL) - HOSTILE  # those are tests/faults/test_hostile_marks.py's
            ),
            instance,
        )
        wait_for(lambda: read_watermarks(settings.delta_root, good)[-1].time >= 2_200, instance)
    finally:
        w.close()
        instance.stop()
    rejected = read_table(settings.delta_root, REJECTED_MARKS)
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for r in rejected:
        by_reason.setdefault(r["reason"], []).append(r)
    assert len(by_reason[Reason.MALFORMED]) == 3
    assert {r["raw"] for r in by_reason[Reason.MALFORMED]} >= {b"not avro at all", b"\x00\x01"}
    assert [r["writer"] for r in by_reason[Reason.STALE_TIME]] == ["w5"]
    assert [r["writer"] for r in by_reason[Reason.IMPERSONATED]] == ["w1"]
    assert [r["writer"] for r in by_reason[Reason.REGRESSED_POSITION]] == ["w5"]
    assert [r["stream"] for r in by_reason[Reason.UNKNOWN_STREAM]] == [f"g{unique}/nope"]
    assert [r["writer"] for r in by_reason[Reason.UNKNOWN_SEGMENT]] == ["w7"]
    assert [(r["stream"], r["writer"]) for r in by_reason[Reason.BEYOND_COMMITTED]] == [
        (liar, "w6")
    ]
    assert all(r["kafka_offset"] is not None and r["at"] for r in rejected)
    marks = read_watermarks(settings.delta_root, good)
    check_sequence(marks)
    assert read_watermarks(settings.delta_root, liar) == []


HOSTILE = {
    Reason.MALFORMED_KEY,
    Reason.UNKNOWN_SCHEMA,
    Reason.NEGATIVE_TIME,
    Reason.FUTURE_TIME,
    Reason.IMPERSONATED,
}


def wait_for(condition: Any, instance: ControllerInstance, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        instance.process_all_available()
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout_s}s; failures {instance.failures}")
        time.sleep(0.3)


# --- 3. two instances, one stops: the other takes its bucket -----------------------------------


class Noter(threading.Thread):
    """Writes and notes time on a stream every ``period_s`` until stopped."""

    def __init__(self, writer: EventWriter, period_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.writer = writer
        self.period_s = period_s
        self.halt = threading.Event()
        self.noted = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            t = 1_000
            while not self.halt.is_set():
                self.writer.write(b"e", routing_key=f"k{t}")
                t += 100
                self.writer.note_time(t)
                self.writer.flush()
                self.noted = t
                self.halt.wait(self.period_s)
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_failover_between_two_instances(
    spark: Any, kafka: str, zookeeper: str, zk_client: Any, unique: str, work: Path
) -> None:
    env = make_env(kafka, zookeeper, zk_client, unique, work, buckets=2)
    streams = [stream_in_bucket(f"f{unique}", b, 2) for b in (0, 1)]
    for s in streams:
        env.create(s, 2)
    settings = env.settings()
    noters = [Noter(env.writer("w1", s)) for s in streams]
    for n in noters:
        n.start()
    a = ControllerInstance(spark, settings, "a").start()
    b = ControllerInstance(spark, settings, "b").start()
    stopped_a = False
    try:
        a.wait_running({0})  # members sorted: a gets bucket 0, b bucket 1
        b.wait_running({1})
        wait_for(lambda: all(len(read_watermarks(settings.delta_root, s)) >= 3 for s in streams), a)
        before = len(read_watermarks(settings.delta_root, streams[0]))
        a.stop()
        stopped_a = True
        b.wait_running({0, 1})
        wait_for(lambda: len(read_watermarks(settings.delta_root, streams[0])) >= before + 3, b)
    finally:
        for n in noters:
            n.halt.set()
        for n in noters:
            n.join(10)
            n.writer.close()
        if not stopped_a:
            a.stop()
        b.stop()
    assert all(n.error is None for n in noters), [n.error for n in noters]
    for s in streams:
        marks = read_watermarks(settings.delta_root, s)
        check_sequence(marks)
        # A query stopped between its `marks` and `index` appends leaves `index` one
        # batch behind until the bucket runs again (the batch is re-run, idempotently).
        rows = sorted(r["seq"] for r in read_table(settings.delta_root, INDEX, s))
        assert rows == [m.seq for m in marks][: len(rows)]
        assert len(rows) >= len(marks) - 2
    assert a.failures == [] and b.failures == []


@pytest.fixture(autouse=True)
def _no_query_left(spark: Any) -> Iterator[None]:
    yield
    for q in spark.streams.active:
        q.stop()
