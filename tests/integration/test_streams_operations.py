"""Stream operations on a real Kafka broker and a real ZooKeeper."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tidemark.controller.config import ScalingPolicy, StreamConfiguration, TimestampingMode
from tidemark.controller.exceptions import (
    ConcurrentOperationError,
    InvalidCutError,
    InvalidScaleError,
    StreamNotSealedError,
    StreamSealedError,
    UnknownScopeError,
    UnknownStreamError,
)
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import KeyRange, segment_id
from tidemark.controller.navigation import readable_segments
from tidemark.controller.states import StreamState
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore

R = KeyRange
TWO = StreamConfiguration(ScalingPolicy.fixed(2))


class Crash(Exception):
    """Stands for the controller process dying after a step."""


@pytest.fixture
def store(zk_client, unique):
    """The store, with the scope of the ``stream`` fixture created."""
    made = ZooKeeperStore(zk_client)
    made.create_scope(f"t{unique}")
    return made


@pytest.fixture
def manager(store, kafka):
    return StreamManager(store, kafka, seal_drain_ms=0)


@pytest.fixture
def topics(kafka):
    return StreamTopics(kafka)


@pytest.fixture
def stream(unique):
    return f"t{unique}/orders"


def produce(kafka: str, topic: str, counts: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": kafka, "log_level": 0})
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def kafka_state(topics: StreamTopics, meta: StreamMetadata) -> tuple:
    parts = range(topics.partition_count(meta.topic) or 0)
    return (
        len(parts),
        topics.start_offsets(meta.topic, parts),
        topics.end_offsets(meta.topic, parts),
    )


def test_lifecycle(manager, topics, kafka, stream):
    meta = manager.create(stream, TWO)
    assert meta.state is StreamState.ACTIVE and meta.topic == f"tidemark.{stream.replace('/', '.')}"
    assert [s.key_range for s in meta.current_epoch().segments] == [R(0, 0.5), R(0.5, 1)]
    assert topics.partition_count(meta.topic) == 2
    produce(kafka, meta.topic, {0: 3, 1: 2})

    # split segment 0
    meta = manager.scale(stream, [0], [R(0, 0.25), R(0.25, 0.5)])
    c, d = segment_id(1, 2), segment_id(1, 3)
    assert [s.id for s in meta.current_epoch().segments] == [c, d, 1]
    assert meta.sealed_sizes == {0: 3} and meta.state is StreamState.ACTIVE
    assert topics.partition_count(meta.topic) == 4
    assert manager.scale(stream, [0], [R(0, 0.25), R(0.25, 0.5)]) == meta  # repeated: no-op
    produce(kafka, meta.topic, {2: 1, 3: 4})

    # merge d and 1
    meta = manager.scale(stream, [d, 1], [R(0.25, 1.0)])
    e = segment_id(2, 4)
    assert [s.id for s in meta.current_epoch().segments] == [c, e]
    assert meta.sealed_sizes == {0: 3, d: 4, 1: 2}
    assert topics.partition_count(meta.topic) == 5
    assert readable_segments(meta, {0}) == {1, c, d}
    assert manager.describe(stream) == meta

    # truncate: empties 0, d, 1 (wholly before), cuts c at 1
    meta = manager.truncate(stream, {c: 1, e: 0})
    assert meta.truncation == {c: 1, e: 0}
    starts = topics.start_offsets(meta.topic, range(5))
    assert starts == {0: 3, 1: 2, 2: 1, 3: 4, 4: 0}
    assert manager.segment_offsets(stream)[c] == (1, 1)
    with pytest.raises(InvalidCutError, match="behind the truncation point"):
        manager.truncate(stream, {c: 0, e: 0})

    meta = manager.seal(stream)
    assert meta.state is StreamState.SEALED and meta.sealed_sizes[c] == 1
    assert manager.seal(stream) == meta
    with pytest.raises(StreamSealedError, match="sealed to scaling"):
        manager.scale(stream, [c], [R(0, 0.1), R(0.1, 0.25)])
    assert stream in manager.list(stream.split("/")[0])
    manager.delete(stream)
    with pytest.raises(UnknownStreamError):
        manager.describe(stream)
    assert manager.list() == []


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (StreamConfiguration(), ("CreateTime", "3600000")),
        (StreamConfiguration(uncapped=True), ("CreateTime", str(2**63 - 1))),
        (StreamConfiguration(timestamping=TimestampingMode.ARRIVAL), ("LogAppendTime", "3600000")),
    ],
)
def test_create_and_update_set_topic_configs(manager, topics, stream, config, expected):
    keys = ("message.timestamp.type", "message.timestamp.after.max.ms")
    meta = manager.create(stream, config)
    assert tuple(topics.topic_configs(meta.topic)[k] for k in keys) == expected
    # tidemark owns retention (truncation): old event times are never aged out by Kafka
    assert topics.topic_configs(meta.topic)["retention.ms"] == "-1"
    flipped = StreamConfiguration(
        timestamping=(
            TimestampingMode.CLIENT_PREFER
            if config.timestamping is TimestampingMode.ARRIVAL
            else TimestampingMode.ARRIVAL
        ),
        uncapped=not config.uncapped,
    )
    meta = manager.update(stream, flipped)
    assert meta.config == flipped and manager.describe(stream).config == flipped
    got = tuple(topics.topic_configs(meta.topic)[k] for k in keys)
    assert got == (
        "LogAppendTime" if flipped.timestamping is TimestampingMode.ARRIVAL else "CreateTime",
        str(2**63 - 1) if flipped.uncapped else "3600000",
    )


STEPS = [
    ("create", "recorded"),
    ("create", "topic"),
    ("update", "started"),
    ("update", "topic"),
    ("scale", "started"),
    ("scale", "partitions"),
    ("scale", "epoch"),
    ("truncate", "started"),
    ("truncate", "deleted"),
    ("seal", "started"),
    ("delete", "started"),
    ("delete", "topic"),
]

_REQUESTS = {
    "create": lambda m, s: m.create(s, TWO),
    "update": lambda m, s: m.update(s, StreamConfiguration(ScalingPolicy.fixed(2), uncapped=True)),
    "scale": lambda m, s: m.scale(s, [0], [R(0, 0.25), R(0.25, 0.5)]),
    "truncate": lambda m, s: m.truncate(s, {0: 2, 1: 1}),
    "seal": lambda m, s: m.seal(s),
    "delete": lambda m, s: m.delete(s),
}


@pytest.mark.parametrize(("operation", "step"), STEPS, ids=[f"{o}-{s}" for o, s in STEPS])
def test_crash_after_each_step_then_repeat_completes(store, kafka, topics, stream, operation, step):
    def hook(op: str, at: str) -> None:
        if (op, at) == (operation, step):
            raise Crash(f"{op} {at}")

    crashing = StreamManager(store, kafka, seal_drain_ms=0, step_hook=hook)
    healthy = StreamManager(store, kafka, seal_drain_ms=0)
    if operation != "create":
        healthy.create(stream, TWO)
        produce(kafka, healthy.describe(stream).topic, {0: 3, 1: 2})
    if operation == "delete":
        healthy.seal(stream)

    with pytest.raises(Crash):
        _REQUESTS[operation](crashing, stream)
    if operation not in ("create", "delete"):
        busy = healthy.describe(stream).state
        assert busy is not StreamState.ACTIVE
        other = "scale" if operation == "truncate" else "truncate"
        with pytest.raises((ConcurrentOperationError, StreamSealedError)) as info:
            _REQUESTS[other](healthy, stream)
        assert f"stream is {busy}" in str(info.value) or "sealed" in str(info.value)

    _REQUESTS[operation](healthy, stream)  # the same request again completes it

    if operation == "delete":
        assert healthy.list() == []
        with pytest.raises(UnknownStreamError):
            healthy.describe(stream)
        return
    meta = healthy.describe(stream)
    assert meta.pending is None
    assert meta.state is (StreamState.SEALED if operation == "seal" else StreamState.ACTIVE)
    if operation == "scale":
        assert len(meta.epochs) == 2 and meta.sealed_sizes == {0: 3}
        assert topics.partition_count(meta.topic) == 4
    if operation == "truncate":
        assert meta.truncation == {0: 2, 1: 1}
        assert topics.start_offsets(meta.topic, [0, 1]) == {0: 2, 1: 1}
    if operation == "seal":
        assert meta.sealed_sizes == {0: 3, 1: 2}
    if operation == "update":
        assert meta.config.uncapped


def test_resume_completes_whatever_was_pending(store, kafka, stream):
    def hook(op: str, at: str) -> None:
        if at == "partitions":
            raise Crash(at)

    StreamManager(store, kafka, seal_drain_ms=0).create(stream, TWO)
    with pytest.raises(Crash):
        StreamManager(store, kafka, seal_drain_ms=0, step_hook=hook).scale(
            stream, [1], [R(0.5, 0.75), R(0.75, 1.0)]
        )
    meta = StreamManager(store, kafka, seal_drain_ms=0).resume(stream)
    assert meta is not None and meta.state is StreamState.ACTIVE and len(meta.epochs) == 2


def test_writers_watching_see_the_new_epoch_and_sealed_sizes(store, manager, kafka, stream):
    import threading

    manager.create(stream, TWO)
    seen: list[StreamMetadata] = []
    got = threading.Event()

    def on_change(meta: StreamMetadata) -> None:
        seen.append(meta)
        if meta.state is StreamState.ACTIVE and len(meta.epochs) == 2:
            got.set()

    store.watch_stream(stream, on_change)
    manager.scale(stream, [0], [R(0, 0.25), R(0.25, 0.5)])
    assert got.wait(10)
    assert seen[-1].sealed_sizes == {0: 0} and seen[-1].is_sealed(0)


def _bad_requests(stream: str) -> list:
    c = segment_id(1, 2)
    return [
        (
            "overlapping ranges",
            lambda m: m.scale(stream, [c], [R(0, 0.2), R(0.1, 0.25)]),
            InvalidScaleError,
            "overlap",
        ),
        (
            "gapped ranges",
            lambda m: m.scale(stream, [c], [R(0, 0.1), R(0.2, 0.25)]),
            InvalidScaleError,
            "gap",
        ),
        (
            "sealed segment",
            lambda m: m.scale(stream, [0], [R(0, 0.5)]),
            InvalidScaleError,
            "segment 0 ",
        ),
        (
            "unknown segment",
            lambda m: m.scale(stream, [42], [R(0, 0.5)]),
            InvalidScaleError,
            "segment 42",
        ),
        (
            "non-adjacent",
            lambda m: m.scale(stream, [c, 1], [R(0, 1)]),
            InvalidScaleError,
            "not adjacent",
        ),
        (
            "behind the head",
            lambda m: m.truncate(stream, {0: 0, 1: 1}),
            InvalidCutError,
            "segment 0 is behind",
        ),
        (
            "beyond the end",
            lambda m: m.truncate(stream, {c: 99, segment_id(1, 3): 0, 1: 1}),
            InvalidCutError,
            "offset 99",
        ),
        ("delete unsealed", lambda m: m.delete(stream), StreamNotSealedError, "active to deleting"),
        (
            "unknown stream",
            lambda m: m.scale(stream + "x", [0], [R(0, 1)]),
            UnknownStreamError,
            stream + "x",
        ),
        ("unknown scope", lambda m: m.list("nosuchscope"), UnknownScopeError, "nosuchscope"),
        ("bad name", lambda m: m.describe("no-slash"), Exception, "no-slash"),
    ]


def test_bad_input_is_refused_and_changes_nothing(manager, topics, kafka, stream):
    manager.create(stream, TWO)
    topic = manager.describe(stream).topic
    produce(kafka, topic, {0: 2, 1: 2})
    manager.scale(stream, [0], [R(0, 0.25), R(0.25, 0.5)])
    manager.truncate(stream, {segment_id(1, 2): 0, segment_id(1, 3): 0, 1: 1})
    before_meta = manager.store.read_stream(stream)
    before_kafka = kafka_state(topics, before_meta.metadata)
    for name, request, error, fragment in _bad_requests(stream):
        with pytest.raises(error) as info:
            request(manager)
        assert fragment in str(info.value), name
        assert manager.store.read_stream(stream) == before_meta, name
        assert kafka_state(topics, before_meta.metadata) == before_kafka, name
    manager.seal(stream)
    with pytest.raises(StreamSealedError, match="sealed"):
        manager.scale(stream, [1], [R(0.5, 1.0)])
    with pytest.raises(StreamSealedError, match="sealed"):
        manager.truncate(stream, {segment_id(1, 2): 0, segment_id(1, 3): 0, 1: 2})


def test_topic_creation_returns_the_count_it_waited_for(topics, unique):
    """``create`` and ``ensure_partitions`` hand back the count the metadata showed, so a
    caller need not ask again (on a cluster the next request may reach a broker that has
    not heard of the topic yet)."""
    topic = f"counts-{unique}"
    assert topics.create(topic, 2, {}) == 2
    assert topics.create(topic, 3, {}) == 3  # an existing topic is kept and grown
    assert topics.ensure_partitions(topic, 1) == 3  # never shrunk
    assert topics.ensure_partitions(topic, 4) == 4
    assert topics.partition_count(topic) == 4
