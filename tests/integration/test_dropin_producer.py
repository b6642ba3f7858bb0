"""The drop-in producer and adopted topics, on real Kafka + ZooKeeper (+ Delta for reads).

Watermarks are computed the way the controller computes them — the marks
read back from the marks topic, through ``accept_mark`` and
``watermark_cycle`` (``test_controller_job`` checks the Spark job gives the
same) — and appended to Delta with deltalake where a reader needs them.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tidemark.cli.main import main
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.delta.tables import append_watermarks
from tidemark.controller.exceptions import AdoptionError
from tidemark.controller.model import KeyRange, Watermark, WriterMark
from tidemark.controller.naming import ClusterSettings, bucket_of
from tidemark.controller.navigation import route
from tidemark.controller.streams import StreamManager
from tidemark.controller.watermarks import GenerationState, Verdict, accept_mark, watermark_cycle
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.exceptions import (
    AutomaticTimeError,
    DeliveryError,
    SharedPartitionError,
    WriterClosedError,
    WriterConfigError,
)
from tidemark.pipelines.writing.partitioners import kafka_partition
from tidemark.pipelines.writing.producer import TidemarkProducer
from tidemark.pipelines.writing.writer import EventWriter
from tidemark.schemas.records import WriterMarkRecord

BASE = int(time.time() * 1000) - 3_600_000  # an hour ago: inside any `--ago 2h`


@pytest.fixture
def cluster(unique: str) -> ClusterSettings:
    return ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=2)


@pytest.fixture
def store(zk_client: Any) -> ZooKeeperStore:
    return ZooKeeperStore(zk_client, "/tidemark")


@pytest.fixture
def manager(store: ZooKeeperStore, kafka: str, cluster: ClusterSettings) -> StreamManager:
    return StreamManager(store, kafka, cluster, seal_drain_ms=100)


def make_topic(
    kafka: str, name: str, partitions: int, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(name, partitions, config=config or {})])[name].result(30)
    deadline = time.monotonic() + 30
    while name not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def records(
    kafka: str | dict[str, str], topic: str, partitions: int
) -> list[tuple[int, int, Any, Any, int]]:
    """Every record of ``topic``: (partition, offset, key, value, timestamp), sorted
    (``kafka``: the bootstrap servers, or a client's whole config, security included)."""
    config = {"bootstrap.servers": kafka} if isinstance(kafka, str) else kafka
    consumer = Consumer({**config, "group.id": "check", "log_level": 0})
    out = []
    try:
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high == low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            while not out or out[-1][:2] < (p, high - 1):
                msg = consumer.poll(5)
                assert msg is not None, f"{topic}[{p}] ended early"
                if msg.error():
                    continue
                out.append((p, msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return sorted(out)


def marks_of(kafka: str, cluster: ClusterSettings, stream: str) -> list[WriterMarkRecord]:
    """The stream's writer marks on the marks topic, in offset order."""
    part = bucket_of(stream, cluster.bucket_count)
    return [
        WriterMarkRecord.decode(value)
        for p, _, key, value, _ in records(kafka, cluster.marks_topic, cluster.bucket_count)
        if p == part and key == stream.encode()
    ]


def watermarks_of(
    kafka: str, cluster: ClusterSettings, stream: str, epochs: Any, settle: bool = False
) -> list[Watermark]:
    """The controller's fold over the stream's marks, one cycle after each mark
    (``settle``: then more cycles until nothing changes, as the controller's timer runs)."""
    marks: dict[str, WriterMark] = {}
    state = GenerationState()
    out: list[Watermark] = []

    def cycle() -> bool:
        nonlocal state
        result = watermark_cycle(stream, marks, state, epochs, 0, 60_000)
        state = result.state
        for writer in result.removed:
            marks.pop(writer, None)
        if result.watermark is not None:
            out.append(result.watermark)
        return result.watermark is not None or bool(result.removed)

    for rec in marks_of(kafka, cluster, stream):
        mark = WriterMark(rec.time, dict(rec.position), rec.alive)
        if accept_mark(marks.get(rec.writer_id), mark) is Verdict.ACCEPTED:
            marks[rec.writer_id] = mark
        cycle()
    while settle and marks and cycle():
        pass
    return out


EVENTS = [(f"key-{i % 7}", f"event-{i}".encode()) for i in range(60)]


def test_the_partitioners_agree_with_librdkafka(kafka: str, unique: str) -> None:
    topic = f"part-{unique}"
    make_topic(kafka, topic, 3)
    for partitioner in ("consistent_random", "murmur2_random", "consistent", "murmur2"):
        producer = Producer({"bootstrap.servers": kafka, "partitioner": partitioner})
        landed: dict[bytes, int] = {}

        def report(err: Any, msg: Any, landed: dict[bytes, int] = landed) -> None:
            landed[msg.key()] = msg.partition()

        keys = [f"k{i}".encode() for i in range(200)] + ["ключ".encode()]
        for key in keys:
            producer.produce(topic, b"v", key, on_delivery=report)
        assert producer.flush(30) == 0
        assert landed == {k: kafka_partition(partitioner, k, 3) for k in keys}, partitioner


@pytest.mark.parametrize("tidemark_routing", [True, False])
def test_dropin_on_an_adopted_topic_gives_the_watermarks_of_event_writer(
    kafka: str,
    manager: StreamManager,
    store: Any,
    cluster: ClusterSettings,
    unique: str,
    tidemark_routing: bool,
) -> None:
    a_topic, b_topic = f"legacy-a-{unique}", f"legacy-b-{unique}"
    make_topic(kafka, a_topic, 3)
    make_topic(kafka, b_topic, 3)
    a, b = f"a{unique}/orders", f"b{unique}/orders"
    manager.create_scope(f"a{unique}")
    manager.create_scope(f"b{unique}")
    manager.adopt(a, a_topic, tidemark_routing=tidemark_routing)
    manager.adopt(b, b_topic, tidemark_routing=True)

    conf = {"bootstrap.servers": kafka, "linger.ms": 1}
    producer = TidemarkProducer(conf, stream=a, writer_id="w1", store=store, cluster=cluster)
    writer = EventWriter(
        "w1",
        b,
        store=store,
        bootstrap_servers=kafka,
        config=WriterConfig(cluster=cluster, linger_ms=1),
    )
    delivered: list[tuple[int, int]] = []
    for rnd in range(3):
        for j, (key, value) in enumerate(EVENTS[rnd * 20 : rnd * 20 + 20]):
            ts = BASE + rnd * 100 + j
            producer.produce(
                a_topic,
                value,
                key,
                timestamp=ts,
                on_delivery=lambda err, msg: delivered.append((msg.partition(), msg.offset())),
            )
            producer.poll(0)
            writer.write(value, routing_key=key, timestamp=ts)
        producer.note_time(BASE + rnd * 100 + 50)
        writer.note_time(BASE + rnd * 100 + 50)
    producer.close()
    writer.close()
    assert len(delivered) == 60, "per-message callbacks still run"
    assert (producer.poll(0), producer.flush(1)) == (0, 0)  # its client is let go

    wa = watermarks_of(kafka, cluster, a, store.get_stream(a).epochs)
    wb = watermarks_of(kafka, cluster, b, store.get_stream(b).epochs)
    assert [m.time for m in wa] == [BASE + 50, BASE + 150, BASE + 250]
    assert [(m.time, m.upper_time) for m in wa] == [(m.time, m.upper_time) for m in wb]
    if tidemark_routing:  # same routing: the same cuts
        assert [dict(m.stream_cut) for m in wa] == [dict(m.stream_cut) for m in wb]
    # Either way the last cut is exactly the topic's end: every event lies before it.
    ends = {p: max((o for q, o in delivered if q == p), default=-1) + 1 for p in range(3)}
    assert dict(wa[-1].stream_cut) == ends
    epoch = store.get_stream(a).current_epoch()
    for p, _, key, _, _ in records(kafka, a_topic, 3):
        expected = (
            route(epoch, key).number
            if tidemark_routing
            else kafka_partition("consistent_random", key, 3)  # as the bare producer would
        )
        assert p == expected, key


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_adopt_read_ago_release_leaves_the_topic_as_it_was(
    kafka: str,
    zookeeper: str,
    store: Any,
    cluster: ClusterSettings,
    unique: str,
    tmp_path: Any,
    monkeypatch: Any,
    capsys: Any,
) -> None:
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", kafka)
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", f"{zookeeper}/tidemark-test-{unique}")
    monkeypatch.setenv("TIDEMARK_DELTA_ROOT", str(tmp_path))
    topic = f"legacy-{unique}"
    make_topic(kafka, topic, 3, {"retention.ms": "86400000", "cleanup.policy": "delete"})
    bare = Producer({"bootstrap.servers": kafka})
    for i, (key, value) in enumerate(EVENTS):
        bare.produce(topic, value, key, timestamp=BASE + i)
    assert bare.flush(30) == 0
    admin_topics = StreamManager(store, kafka, cluster).topics
    configs_before = admin_topics.topic_configs(topic)
    data_before = records(kafka, topic, 3)
    stream = f"l{unique}/legacy"
    assert run(capsys, "scope", "create", f"l{unique}")[0] == 0

    code, out, err = run(capsys, "stream", "adopt", stream, "--topic", topic, "--format", "json")
    assert code == 0, err
    meta = json.loads(out)
    assert meta["topic"] == topic and len(meta["epochs"][0]["segments"]) == 3
    assert meta["adoption"]["tidemark_routing"] is False
    assert admin_topics.topic_configs(topic) == configs_before
    assert records(kafka, topic, 3) == data_before

    # Without tidemark routing a scale would break per-key order: refused, saying why.
    code, _, err = run(
        capsys, "stream", "scale", stream, "--seal", "0", "--ranges", "0:0.1,0.1:0.3333333333333333"
    )
    assert code == 1 and "partitioner" in err and "tidemark routing" in err
    code, _, err = run(capsys, "stream", "delete", stream)
    assert code == 1 and "release" in err

    # The existing producer, changed in one line, notes time; a watermark follows.
    producer = TidemarkProducer(
        {"bootstrap.servers": kafka}, stream=stream, writer_id="app", store=store, cluster=cluster
    )
    producer.produce(topic, b"late", "key-1", timestamp=BASE + 100)
    producer.note_time(BASE + 100)
    producer.close()
    marks = watermarks_of(kafka, cluster, stream, store.get_stream(stream).epochs)
    append_watermarks(str(tmp_path), marks)
    data_written = records(kafka, topic, 3)
    assert len(data_written) == len(data_before) + 1

    code, out, err = run(
        capsys, "read", stream, "--ago", "2h", "--format", "json", "--wait-ms", "1500"
    )
    assert code == 0, err
    read = sorted(json.loads(line)["body"] for line in out.splitlines())
    assert read == sorted([v.decode() for _, v in EVENTS] + ["late"])

    code, out, err = run(capsys, "stream", "release", stream)
    assert code == 0, err
    assert admin_topics.topic_configs(topic) == configs_before
    assert records(kafka, topic, 3) == data_written
    code, _, err = run(capsys, "stream", "describe", stream)
    assert code == 1 and "unknown stream" in err.lower()


def test_adopt_refuses_what_it_cannot_honour(
    kafka: str, manager: StreamManager, cluster: ClusterSettings, unique: str
) -> None:
    manager.create_scope(f"x{unique}")
    with pytest.raises(AdoptionError, match="does not exist"):
        manager.adopt(f"x{unique}/s", f"missing-{unique}")
    topic = f"t-{unique}"
    make_topic(kafka, topic, 2)
    manager.adopt(f"x{unique}/s", topic, tidemark_routing=True)
    assert manager.adopt(f"x{unique}/s", topic).adoption is not None  # again: unchanged
    with pytest.raises(AdoptionError, match="already the topic of stream"):
        manager.adopt(f"x{unique}/t", topic)
    with pytest.raises(AdoptionError, match="marks topic"):
        manager.adopt(f"x{unique}/m", cluster.marks_topic)
    created = f"x{unique}/created"
    manager.create(created, StreamConfiguration())
    with pytest.raises(AdoptionError, match="not adopted"):
        manager.release(created)
    # With tidemark routing a scale is allowed.
    meta = manager.describe(f"x{unique}/s")
    first = meta.current_epoch().segments[0]
    mid = (first.key_range.low + first.key_range.high) / 2
    scaled = manager.scale(
        f"x{unique}/s",
        [first.id],
        [KeyRange(first.key_range.low, mid), KeyRange(mid, first.key_range.high)],
    )
    assert scaled.current_epoch().number == 1


def by_end_offsets(
    kafka: str,
    manager: StreamManager,
    cluster: ClusterSettings,
    stream: str,
    partitions: int,
    conf: dict[str, Any],
    topic_config: dict[str, str] | None = None,
) -> tuple[str, TidemarkProducer]:
    """A new topic adopted as ``stream`` (its scope created), and a producer with positions
    from end offsets writing it: (topic, producer)."""
    topic = "legacy-" + stream.replace("/", "-")
    make_topic(kafka, topic, partitions, topic_config)
    manager.create_scope(stream.partition("/")[0])
    manager.adopt(stream, topic)
    producer = TidemarkProducer(
        conf,
        stream=stream,
        writer_id="w1",
        store=manager.store,
        cluster=cluster,
        positions_from="end_offsets",
    )
    return topic, producer


def test_positions_from_end_offsets_are_exact_alone_and_refused_when_shared(
    kafka: str,
    manager: StreamManager,
    store: Any,
    cluster: ClusterSettings,
    unique: str,
    caplog: Any,
) -> None:
    """positions_from="end_offsets": no report per stored record; note_time flushes and
    takes the end offsets -- exact for a sole producer; refused (no mark) when another
    producer wrote the same partitions meanwhile, and no mark over a record Kafka refused."""
    stream = f"e{unique}/orders"
    conf = {"bootstrap.servers": kafka, "linger.ms": 1}
    topic, producer = by_end_offsets(
        kafka, manager, cluster, stream, 3, conf, {"max.message.bytes": "2000"}
    )
    other = Producer(conf)
    counts = [0, 0, 0]
    # round 0: alone -- the position is exactly this producer's records
    for key, value in EVENTS[:20]:
        producer.produce(topic, value, key, timestamp=BASE + 1)
        producer.poll(0)
        counts[kafka_partition("consistent_random", key.encode(), 3)] += 1
    producer.note_time(BASE + 50)
    segs = {s.number: s.id for s in store.get_stream(stream).current_epoch().segments}
    exact = {segs[p]: n for p, n in enumerate(counts) if n}
    assert producer.position(stream) == exact
    # round 1: another producer writes the same partitions meanwhile
    for i, (key, value) in enumerate(EVENTS[20:40]):
        producer.produce(topic, value, key, timestamp=BASE + 101)
        producer.poll(0)
        other.produce(topic, b"other-%d" % i, key)
        other.poll(0)
    other.flush(10)
    with pytest.raises(SharedPartitionError, match="another producer") as refused:
        producer.note_time(BASE + 150)
    assert refused.value.topic == topic and refused.value.partitions
    assert producer.position(stream) == exact  # nothing published past this producer's own
    # alone again: the next note is exact once more (other's records lie before ours)
    for key, value in EVENTS[40:45]:
        producer.produce(topic, value, key, timestamp=BASE + 301)
        producer.poll(0)
    producer.note_time(BASE + 350)
    after = producer.position(stream)
    assert all(after[s] >= n for s, n in exact.items()) and after != exact
    # a record Kafka refuses (larger than the topic allows): note_time raises, no mark
    producer.produce(topic, b"x" * 5_000, "big", timestamp=BASE + 401)
    with pytest.raises(DeliveryError):
        producer.note_time(BASE + 450)
    producer.close()
    # refused: configured delivery callbacks, streams tidemark routes
    with pytest.raises(WriterConfigError, match="on_delivery"):
        TidemarkProducer(
            {**conf, "on_delivery": lambda err, msg: None},
            stream=stream,
            writer_id="w3",
            store=store,
            cluster=cluster,
            positions_from="end_offsets",
        )
    routed_topic = f"legacy-r-{unique}"
    make_topic(kafka, routed_topic, 2)
    manager.adopt(f"e{unique}/routed", routed_topic, tidemark_routing=True)
    with pytest.raises(WriterConfigError, match="can scale"):
        TidemarkProducer(
            conf,
            stream=f"e{unique}/routed",
            writer_id="w4",
            store=store,
            cluster=cluster,
            positions_from="end_offsets",
        )

    marks = [m for m in marks_of(kafka, cluster, stream) if m.writer_id == "w1"]
    assert [(m.time, m.alive) for m in marks] == [  # the shared note was never published
        (BASE + 50, True),
        (BASE + 350, True),
        (BASE + 350, False),
    ]
    assert dict(marks[0].position) == exact
    # the later marks cover every stored record (this producer's and, before them, the other's)
    held = records(kafka, topic, 3)
    assert len([v for *_, v, _ in held if v.startswith(b"event-")]) == 45
    for mark in marks[1:]:
        position = dict(mark.position)
        assert position == {segs[p]: max(o for q, o, *_ in held if q == p) + 1 for p in range(3)}


def end_offsets(kafka: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "ends", "log_level": 0})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def test_positions_from_end_offsets_run_no_python_per_record(
    kafka: str, manager: StreamManager, store: Any, cluster: ClusterSettings, unique: str
) -> None:
    """positions_from="end_offsets" on an ``arrival`` stream (the broker stamps; on
    every other stream the drop-in stamps records in Python): ``produce`` and
    ``poll`` are the wrapped producer's own methods (no Python frame per record); the
    records per partition come from librdkafka's statistics; a failed record makes the
    next ``produce`` raise, a closed producer too; the application's own ``stats_cb``
    still runs."""
    stream = f"f{unique}/orders"
    stats: list[str] = []
    conf = {
        "bootstrap.servers": kafka,
        "linger.ms": 1,
        "enable.idempotence": True,
        "statistics.interval.ms": 50,
        "stats_cb": stats.append,
    }
    topic, producer = by_end_offsets(
        kafka,
        manager,
        cluster,
        stream,
        3,
        conf,
        {"max.message.bytes": "2000", "message.timestamp.type": "LogAppendTime"},
    )
    segs = {s.number: s.id for s in store.get_stream(stream).current_epoch().segments}
    called: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            called.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        for key, value in EVENTS:
            producer.produce(topic, value, key, timestamp=BASE + 1)
            producer.poll(0)
    finally:
        sys.setprofile(None)
    # only the statistics callback (once an interval) may have run Python
    python = [c.rpartition("/")[2] for c in called if not c.endswith("counts.py:__call__")]
    assert not python, Counter(python)

    def position_is_the_end() -> None:
        ends = end_offsets(kafka, topic, 3)
        assert producer.position(stream) == {segs[p]: end for p, end in ends.items() if end}

    producer.note_time(BASE + 50)
    position_is_the_end()
    assert sum(end_offsets(kafka, topic, 3).values()) == len(EVENTS)
    assert stats and json.loads(stats[-1])["type"] == "producer"  # the application's stats_cb
    # librdkafka's report time is time.monotonic()'s clock (CLOCK_MONOTONIC), in µs
    assert 0 <= time.monotonic() * 1e6 - json.loads(stats[-1])["ts"] < 5e6

    # a record the topic refuses (too large): the next produce raises, then all goes on
    producer.produce(topic, b"x" * 5_000, "big", timestamp=BASE + 60)
    assert producer.flush(10) == 0
    with pytest.raises(DeliveryError, match=r"(?i)too large"):
        producer.produce(topic, b"again", "key-1", timestamp=BASE + 61)
    producer.produce(topic, b"again", "key-1", timestamp=BASE + 61)
    assert "produce" in vars(producer)  # the wrapped producer's own produce again
    producer.note_time(BASE + 70)
    position_is_the_end()

    # a per-message callback takes its record's failure: still no mark over the lost record
    reports: list[Any] = []
    producer.produce(topic, b"x" * 5_000, "big", on_delivery=lambda e, m: reports.append(e))
    with pytest.raises(DeliveryError, match="not reported to the producer"):
        producer.note_time(BASE + 80)
    assert len(reports) == 1 and reports[0] is not None

    producer.close()
    with pytest.raises(WriterClosedError):
        producer.produce(topic, b"late", "key-1")
    # closed with nothing in flight, it let go of its Kafka client (as Producer.close does)
    assert (producer.poll(0), producer.flush(1), len(producer)) == (0, 0, 0)
    with pytest.raises(RuntimeError, match="closed"):
        producer.list_topics(timeout=1)
    producer.close()  # twice is allowed
    marks = [m for m in marks_of(kafka, cluster, stream) if m.writer_id == "w1"]
    assert [(m.time, m.alive) for m in marks] == [
        (BASE + 50, True),
        (BASE + 70, True),
        (BASE + 70, False),
    ]
    ends = end_offsets(kafka, topic, 3)
    assert dict(marks[-1].position) == {segs[p]: end for p, end in ends.items() if end}
    assert len(records(kafka, topic, 3)) == len(EVENTS) + 1  # and neither large record


def test_positions_from_end_offsets_shared_partition_by_statistics(
    kafka: str, manager: StreamManager, store: Any, cluster: ClusterSettings, unique: str
) -> None:
    """The sole-producer check counts this producer's records from librdkafka's
    statistics: another producer's record in one partition refuses the note, for that
    partition only; alone again, the next note is exact."""
    stream = f"g{unique}/orders"
    conf = {"bootstrap.servers": kafka, "linger.ms": 1, "enable.idempotence": True}
    topic, producer = by_end_offsets(kafka, manager, cluster, stream, 2, conf)
    for i in range(10):
        producer.produce(topic, b"v%d" % i, partition=i % 2)
    other = Producer(conf)
    other.produce(topic, b"other", partition=1)
    assert other.flush(10) == 0
    with pytest.raises(SharedPartitionError) as refused:
        producer.note_time(BASE)
    assert refused.value.partitions == (1,)
    producer.produce(topic, b"mine", partition=1)
    producer.note_time(BASE + 1)
    segs = {s.number: s.id for s in store.get_stream(stream).current_epoch().segments}
    assert producer.position(stream) == {segs[0]: 5, segs[1]: 7}
    producer.close()


def test_an_idle_dropin_noting_time_automatically_keeps_the_watermark_moving(
    kafka: str, manager: StreamManager, store: Any, cluster: ClusterSettings, unique: str
) -> None:
    """A drop-in producer with ``automatically_note_time`` writes once, then idles
    while an ``EventWriter`` writes on: its heartbeat marks (one instance token, the one
    record's time as ``max_event_time``) keep following the clock, so the stream's
    watermark follows the busy writer instead of stopping at the idle one's last note."""
    stream = f"i{unique}/orders"
    manager.create_scope(f"i{unique}")
    manager.create(stream, StreamConfiguration(ScalingPolicy.fixed(1)))
    topic = store.get_stream(stream).topic
    idle = TidemarkProducer(
        {"bootstrap.servers": kafka, "linger.ms": 1},
        stream=stream,
        writer_id="idle",
        store=store,
        cluster=cluster,
        automatically_note_time=True,
        note_time_interval_ms=100,
    )
    with pytest.raises(AutomaticTimeError):
        idle.note_time(1)
    once = idle.produce(topic, b"once", "k")
    assert idle.flush(10) == 0
    # a metadata change (seen by the store's watch) keeps produce the locking one
    manager.update(stream, StreamConfiguration(ScalingPolicy.fixed(1), first_watermark_delay_ms=1))
    time.sleep(0.5)
    assert "produce" in vars(idle)  # the heartbeat's lock (set on the instance)
    idle_since = int(time.time() * 1000)
    noted = []
    with EventWriter(
        "busy",
        stream,
        store=store,
        bootstrap_servers=kafka,
        config=WriterConfig(cluster=cluster, linger_ms=1),
    ) as busy:
        for i in range(12):
            t = int(time.time() * 1000)
            busy.write(b"e%d" % i, routing_key="k", timestamp=t)
            busy.note_time(t)
            busy.flush()
            noted.append(t)
            time.sleep(0.1)
        idle.close()
    marks = [m for m in marks_of(kafka, cluster, stream) if m.writer_id == "idle"]
    assert len(marks) >= 5, [(m.time, m.alive) for m in marks]
    assert {m.instance for m in marks} == {idle.instance}
    assert [m.time for m in marks] == sorted(m.time for m in marks)
    # (a tick before the one record, on a slow machine, knew of no timestamp yet)
    assert {m.max_event_time for m in marks} <= {None, once} and marks[-1].max_event_time == once
    assert marks[-1].alive is False and all(m.alive for m in marks[:-1])
    watermarks = watermarks_of(kafka, cluster, stream, store.get_stream(stream).epochs)
    moved = [w.time for w in watermarks if w.time > idle_since]
    assert len(moved) >= 3 and moved[-1] >= noted[-3], (idle_since, moved, noted)
