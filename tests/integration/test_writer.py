"""EventWriter and TransactionalWriter against a real Kafka broker (no mocks)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tidemark.controller.config import ScalingPolicy, StreamConfiguration, TimestampingMode
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.model import KeyRange, segment_id
from tidemark.controller.naming import ClusterSettings, bucket_of
from tidemark.controller.navigation import key_hash
from tidemark.controller.streams import StreamManager
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.exceptions import (
    AutomaticTimeError,
    DeliveryError,
    InvalidTimestampError,
    MissingTimestampError,
    MissingWriterIdError,
    SerializationError,
    StreamSealedError,
    TimeWentBackwardsError,
    TransactionStateError,
    TransactionTimedOutError,
    UnknownStreamError,
    WriterClosedError,
)
from tidemark.pipelines.writing.transactions import TransactionalWriter
from tidemark.pipelines.writing.writer import EventWriter
from tidemark.schemas.records import WriterMarkRecord


@pytest.fixture
def settings(unique: str) -> ClusterSettings:
    return ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=3)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def manager(store: MemoryStore, kafka: str, settings: ClusterSettings) -> StreamManager:
    return StreamManager(store, kafka, settings, seal_drain_ms=100)


@pytest.fixture
def config(settings: ClusterSettings) -> WriterConfig:
    return WriterConfig(cluster=settings, linger_ms=1, delivery_timeout_ms=15_000)


def make_stream(manager: StreamManager, unique: str, name: str = "s", **kw: object) -> str:
    stream = f"w{unique}/{name}"
    segments = int(kw.pop("segments", 2))  # type: ignore[call-overload]
    manager.create_scope(f"w{unique}")
    manager.create(stream, StreamConfiguration(ScalingPolicy.fixed(segments), **kw))  # type: ignore[arg-type]
    return stream


def read(
    kafka: str, topic: str, partitions: list[int], committed: bool = False, at_least: int = 0
) -> list:
    """Every record of ``partitions`` up to their end (the last stable offset if committed).

    ``at_least``: keep reading past an end until that many arrived; a commit
    returns before the coordinator has written the commit markers, so the
    last stable offset may still move just after it.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "log_level": 0,
        }
    )
    out = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        at_end: set[int] = set()
        deadline = time.monotonic() + 15
        while (len(at_end) < len(partitions) or len(out) < at_least) and (
            time.monotonic() < deadline
        ):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            out.append(msg)
    finally:
        consumer.close()
    return out


def marks(
    kafka: str, settings: ClusterSettings, stream: str, committed: bool = False, at_least: int = 0
) -> list:
    part = bucket_of(stream, settings.bucket_count)
    msgs = read(kafka, settings.marks_topic, [part], committed, at_least)
    return [WriterMarkRecord.decode(m.value()) for m in msgs if m.key() == stream.encode()]


def made_writers(
    cls: type, store: MemoryStore, kafka: str, config: WriterConfig, default_id: str, **close: int
) -> Iterator:
    """Yields ``make(stream, writer_id=default_id, **kw)``, which builds a ``cls`` writer
    (with ``config`` unless given); every one made is closed after the test, whatever
    state the test left it in."""
    made: list = []

    def make(stream: str, writer_id: str | None = default_id, **kw: object) -> Any:
        kw.setdefault("config", config)
        w = cls(writer_id, stream, store=store, bootstrap_servers=kafka, **kw)
        made.append(w)
        return w

    yield make
    for w in made:
        with contextlib.suppress(Exception):
            w.close(**close)


@pytest.fixture
def writer_factory(store: MemoryStore, kafka: str, config: WriterConfig) -> Iterator:
    yield from made_writers(EventWriter, store, kafka, config, "w1", timeout_ms=5_000)


# --- positions and marks ------------------------------------------------------------------------


def test_position_is_next_offset_per_written_segment(kafka, manager, unique, writer_factory):
    stream = make_stream(manager, unique, segments=3)
    meta = manager.describe(stream)
    w = writer_factory(stream)
    key = "only-key"
    seg = meta.current_epoch().segment_for(key_hash(key))
    for i in range(20):
        w.write(b"e%d" % i, key)
    w.flush()
    assert w.position() == {seg.id: 20}  # segments never written are left out
    assert StreamTopics(kafka).end_offsets(meta.topic, [seg.number]) == {seg.number: 20}


def test_note_time_mark_covers_everything_written_before_it(
    kafka, manager, unique, writer_factory, settings
):
    stream = make_stream(manager, unique)
    w = writer_factory(stream)
    for i in range(200):
        w.write(b"e", f"k{i}", timestamp=1_000 + i)
    w.note_time(1_199)  # no flush before: the mark waits for the acknowledgements
    w.write(b"after", "k1", timestamp=1_300)
    w.flush()
    [mark] = marks(kafka, settings, stream)
    assert (mark.stream, mark.writer_id, mark.time, mark.alive) == (stream, "w1", 1_199, True)
    assert sum(mark.position.values()) == 200  # not the record written after the call
    assert sum(w.position().values()) == 201


def test_close_sends_a_shutdown_mark_and_write_after_close_raises(
    kafka, manager, unique, writer_factory, settings
):
    stream = make_stream(manager, unique)
    w = writer_factory(stream)
    w.write(b"e", "k")
    w.note_time(10)
    w.close()
    w.close()  # twice is fine
    with pytest.raises(WriterClosedError):
        w.write(b"e", "k")
    with pytest.raises(WriterClosedError):
        w.note_time(11)
    got = marks(kafka, settings, stream)
    assert [(m.time, m.alive) for m in got] == [(10, True), (10, False)]
    assert got[-1].position == w.position()


def test_automatic_note_time(kafka, manager, unique, writer_factory, settings, config):
    from dataclasses import replace

    stream = make_stream(manager, unique)
    w = writer_factory(
        stream, config=replace(config, note_time_interval_ms=100), automatically_note_time=True
    )
    w.write(b"e", "k")
    with pytest.raises(AutomaticTimeError):
        w.note_time(5)
    time.sleep(0.5)
    w.close()
    got = marks(kafka, settings, stream)
    assert len(got) >= 3
    times = [m.time for m in got]
    assert times == sorted(times) and got[-1].alive is False
    assert abs(times[0] - time.time() * 1000) < 10_000


# --- bad input ---------------------------------------------------------------------------------


def test_bad_input_raises_typed_errors_and_loses_nothing(kafka, manager, unique, writer_factory):
    stream = make_stream(manager, unique, timestamping=TimestampingMode.CLIENT_REQUIRE)
    anon = writer_factory(stream, writer_id=None)
    with pytest.raises(MissingWriterIdError, match="writer id"):
        anon.note_time(5)
    w = writer_factory(stream)
    w.write(b"good", "k", timestamp=5)
    w.note_time(100)
    bad = [
        (lambda: w.write(b"e", "k", timestamp=-1), InvalidTimestampError, "outside"),
        (lambda: w.write(b"e", "k", timestamp=2**63), InvalidTimestampError, "outside"),
        (lambda: w.write(b"e", "k", timestamp=1.5), InvalidTimestampError, "int"),
        (lambda: w.note_time(2**63), InvalidTimestampError, "noted time"),
        (lambda: w.write({"a": 1}, "k", timestamp=5), SerializationError, "serializer"),
        (lambda: w.write("text", "k", timestamp=5), SerializationError, "not bytes"),
        (lambda: w.write(b"e", "k"), MissingTimestampError, "client-require"),
        (lambda: w.write_batch([b"e", b"f"], "k", [5, None]), MissingTimestampError, "require"),
        (lambda: w.note_time(99), TimeWentBackwardsError, "below"),
    ]
    for call, error, text in bad:
        with pytest.raises(error, match=text):
            call()
    w.write(b"good2", "k", timestamp=6)
    w.flush()
    assert sum(w.position().values()) == 2
    meta = manager.describe(stream)
    got = read(kafka, meta.topic, [s.number for s in meta.current_epoch().segments])
    assert sorted(m.value() for m in got) == [b"good", b"good2"]


def test_unknown_and_sealed_streams(manager, unique, writer_factory):
    with pytest.raises(UnknownStreamError, match=f"w{unique}/nope"):
        writer_factory(f"w{unique}/nope")
    stream = make_stream(manager, unique)
    w = writer_factory(stream)
    w.write(b"e", "k")
    w.flush()
    manager.seal(stream)
    with pytest.raises(StreamSealedError):
        w.write(b"e", "k")
    assert sum(w.position().values()) == 1
    with pytest.raises(StreamSealedError):
        writer_factory(stream, writer_id="w2")


def test_delivery_failure_is_raised(kafka, manager, unique, writer_factory):
    stream = make_stream(manager, unique, segments=1)
    StreamTopics(kafka).alter_configs(manager.describe(stream).topic, {"max.message.bytes": "500"})
    w = writer_factory(stream)
    w.write(b"small", "k")
    w.flush()
    w.write(b"x" * 5_000, "k")  # the broker refuses it
    with pytest.raises(DeliveryError, match="not delivered") as info:
        w.flush()
    assert info.value.failed[0].partition == 0
    assert w.position() == {0: 1}  # what was acknowledged stays
    w.write(b"small again", "k")
    w.flush()
    assert w.position() == {0: 2}


# --- timestamping -------------------------------------------------------------------------------


def test_write_batch_s2_example_uncapped(kafka, manager, unique, writer_factory):
    stream = make_stream(manager, unique, uncapped=True)
    w = writer_factory(stream)
    ack = w.write_batch([b"%d" % i for i in range(7)], "k", [42, 44, 42, 50, 50, 48, 55])
    assert [r.timestamp for r in ack.records] == [42, 44, 44, 50, 50, 50, 55]
    assert ack.adjusted == (False, False, True, False, False, True, False)
    assert (ack.first_timestamp, ack.last_timestamp) == (42, 55)
    assert ack.last_offset - ack.first_offset == 6
    seg = manager.describe(stream).segment(ack.segment_id)
    stored = read(kafka, manager.describe(stream).topic, [seg.number])
    assert [m.timestamp()[1] for m in stored] == [42, 44, 44, 50, 50, 50, 55]
    # the per-segment floor carries on to later writes
    assert w.write_batch([b"x"], "k", [1]).records[0].timestamp == 55
    far = 2**62
    assert w.write_batch([b"far"], "k", [far]).last_timestamp == far  # uncapped


def test_capped_timestamps_are_lowered_to_arrival(manager, unique, writer_factory):
    stream = make_stream(manager, unique)
    w = writer_factory(stream)
    before = int(time.time() * 1000)
    ack = w.write_batch([b"a", b"b"], "k", [before - 5_000, before + 3_600_000 * 5])
    after = int(time.time() * 1000)
    assert ack.records[0].timestamp == before - 5_000 and not ack.records[0].adjusted
    assert before <= ack.records[1].timestamp <= after and ack.records[1].adjusted


def test_arrival_mode_uses_broker_time(manager, unique, writer_factory):
    stream = make_stream(manager, unique, timestamping=TimestampingMode.ARRIVAL)
    w = writer_factory(stream)
    before = int(time.time() * 1000)
    ack = w.write_batch([b"a", b"b"], "k", [5, None])
    assert all(before - 1_000 <= r.timestamp <= time.time() * 1000 + 1_000 for r in ack.records)
    assert ack.adjusted == (True, False)


# --- scaling -----------------------------------------------------------------------------------


def test_scale_keeps_per_key_order_and_timestamps(kafka, manager, unique, writer_factory):
    stream = make_stream(manager, unique, segments=1)
    w = writer_factory(stream)
    keys = [f"key-{i}" for i in range(8)]
    for n in range(30):
        for k in keys:
            w.write(f"{k}:{n}".encode(), k, timestamp=1_000 + n)
    manager.scale(stream, [0], [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)])
    for n in range(30, 60):
        for k in keys:
            w.write(f"{k}:{n}".encode(), k, timestamp=1_000 + n - 20)  # goes back in time
    w.note_time(2_000)
    w.flush()
    meta = manager.describe(stream)
    new_ids = {segment_id(1, 1), segment_id(1, 2)}
    assert {s.id for s in meta.current_epoch().segments} == new_ids
    assert set(w.position()) == {0} | new_ids
    # read the sealed segment up to its sealed size, then the successors
    size = meta.sealed_sizes[0]
    old = [m for m in read(kafka, meta.topic, [0]) if m.offset() < size]
    new = read(kafka, meta.topic, [1, 2])
    for k in keys:
        seq = [m for m in old + new if m.key() == k.encode()]
        assert [int(m.value().split(b":")[1]) for m in seq] == list(range(60))
        stamps = [m.timestamp()[1] for m in seq]
        assert stamps == sorted(stamps)  # monotonic along a key, across the scale
        seg = meta.current_epoch().segment_for(key_hash(k))
        assert all(m.partition() == seg.number for m in seq[30:])


# --- transactions --------------------------------------------------------------------------------


@pytest.fixture
def txn_writer(store, kafka, config) -> Iterator:
    yield from made_writers(TransactionalWriter, store, kafka, config, "t1")


def test_commit_mark_is_visible_exactly_with_the_data(kafka, manager, unique, txn_writer, settings):
    stream = make_stream(manager, unique, segments=1)
    topic = manager.describe(stream).topic
    w = txn_writer(stream)
    txn = w.begin()
    with pytest.raises(TransactionStateError):
        w.begin()
    for i in range(10):
        txn.write(b"e%d" % i, f"k{i}", timestamp=100 + i)
    w._producer.flush(10)  # the records are in the log, uncommitted
    assert read(kafka, topic, [0], committed=True) == []
    assert marks(kafka, settings, stream, committed=True) == []
    txn.commit(timestamp=109)
    data = read(kafka, topic, [0], committed=True, at_least=10)
    [mark] = marks(kafka, settings, stream, committed=True, at_least=1)
    assert len(data) == 10
    assert (mark.time, mark.position, mark.transaction_id) == (109, {0: 10}, txn.id)
    assert w.committed_position == {0: 10}
    with pytest.raises(TransactionStateError):
        txn.write(b"late", "k")


def test_aborted_transaction_mark_and_data_are_never_seen(
    kafka, manager, unique, txn_writer, settings
):
    stream = make_stream(manager, unique, segments=1)
    topic = manager.describe(stream).topic
    w = txn_writer(stream)
    txn = w.begin()
    txn.write(b"dropped", "k", timestamp=5)
    txn.abort()
    txn2 = w.begin()
    txn2.write(b"kept", "k", timestamp=6)
    txn2.commit(timestamp=6)
    data = read(kafka, topic, [0], committed=True, at_least=1)
    assert [m.value() for m in data] == [b"kept"]
    got = marks(kafka, settings, stream, committed=True, at_least=1)
    assert [(m.time, m.transaction_id) for m in got] == [(6, txn2.id)]
    # the position counts Kafka's offsets: the aborted record and its marker take two
    assert got[0].position == {0: data[0].offset() + 1}
    w.close()
    last = marks(kafka, settings, stream, committed=True, at_least=2)[-1]
    assert (last.time, last.alive) == (6, False)


def test_timed_out_transaction_raises_a_clear_error(manager, unique, txn_writer, config):
    from dataclasses import replace

    stream = make_stream(manager, unique, segments=1)
    w = txn_writer(stream, config=replace(config, transaction_timeout_ms=1_000))
    txn = w.begin()
    txn.write(b"slow", "k", timestamp=5)
    time.sleep(1.2)
    with pytest.raises(TransactionTimedOutError, match="transaction_timeout_ms=1000"):
        txn.commit(timestamp=5)
    txn2 = w.begin()  # the writer goes on
    txn2.write(b"fast", "k", timestamp=6)
    txn2.commit(timestamp=6)
    assert w.committed_position[0] >= 1


def test_transaction_touching_a_sealed_segment_is_written_again(kafka, manager, unique, txn_writer):
    stream = make_stream(manager, unique, segments=1)
    w = txn_writer(stream)
    txn = w.begin()
    for i in range(5):
        txn.write(b"e%d" % i, f"k{i}", timestamp=10)
    manager.scale(stream, [0], [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)])
    txn.commit(timestamp=10)
    meta = manager.describe(stream)
    assert read(kafka, meta.topic, [0], committed=True) == []
    data = read(kafka, meta.topic, [1, 2], committed=True, at_least=5)
    assert sorted(m.value() for m in data) == [b"e%d" % i for i in range(5)]
    assert set(w.committed_position) <= {segment_id(1, 1), segment_id(1, 2)}
