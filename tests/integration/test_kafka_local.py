"""The local Kafka broker: plain produce/consume and transactions."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from tidemark.controller.exceptions import KafkaOperationError


def _create_topic(bootstrap: str, topic: str, partitions: int = 1, rf: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(timeout=30)


def _consume_all(bootstrap: str, topic: str, isolation: str, expect_at_least: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []
    idle = 0
    try:
        while idle < 4 or len(seen) < expect_at_least:
            msg = consumer.poll(1.0)
            if msg is None:
                idle += 1
                if idle > 20:
                    break
                continue
            if msg.error():
                raise KafkaException(msg.error())
            value = msg.value()
            assert value is not None
            seen.append(value)
    finally:
        consumer.close()
    return seen


def test_produce_and_consume(kafka: str, unique: str) -> None:
    topic = f"plain-{unique}"
    _create_topic(kafka, topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka, "acks": "all"})
    for i in range(50):
        producer.produce(topic, key=str(i % 3), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    got = _consume_all(kafka, topic, "read_uncommitted", expect_at_least=50)
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(50))


def test_committed_transaction_is_seen_and_aborted_is_not(kafka: str, unique: str) -> None:
    topic = f"txn-{unique}"
    _create_topic(kafka, topic)
    producer = Producer({"bootstrap.servers": kafka, "transactional.id": f"tx-{unique}"})
    producer.init_transactions(30)

    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"committed-{i}".encode())
    producer.commit_transaction(30)

    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"aborted-{i}".encode())
    producer.flush(30)
    producer.abort_transaction(30)

    committed_view = _consume_all(kafka, topic, "read_committed", expect_at_least=5)
    assert committed_view == [f"committed-{i}".encode() for i in range(5)]
    raw_view = _consume_all(kafka, topic, "read_uncommitted", expect_at_least=10)
    assert {v for v in raw_view if v.startswith(b"aborted")} == {
        f"aborted-{i}".encode() for i in range(5)
    }


@pytest.mark.slow
def test_three_broker_cluster_survives_one_broker_stopping(services_dir, unique) -> None:
    from tidemark.infra.kafka import KafkaCluster

    with KafkaCluster(services_dir / f"kafka3-{unique}", brokers=3) as cluster:
        bootstrap = cluster.bootstrap_servers
        topic = f"rf3-{unique}"
        _create_topic(bootstrap, topic, partitions=3, rf=3)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        assert len(meta.partitions) == 3
        for part in meta.partitions.values():
            assert len(part.replicas) == 3
            assert sorted(part.isrs) == sorted(part.replicas)

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(30):
            producer.produce(topic, value=f"before-{i}".encode())
        assert producer.flush(30) == 0

        cluster.stop_node(3)
        errors: list[str] = []

        def on_delivery(err, _msg) -> None:
            if err is not None:
                errors.append(str(err))

        for i in range(30):
            producer.produce(topic, value=f"after-{i}".encode(), on_delivery=on_delivery)
        assert producer.flush(60) == 0
        assert errors == []
        got = _consume_all(bootstrap, topic, "read_committed", expect_at_least=60)
        assert len(got) == 60


def _record_requests(lso: Any) -> list[list[tuple[str, int]]]:
    """The keys of each request ``lso`` sends from now on."""
    asked: list[list[tuple[str, int]]] = []
    query_keys = lso.query_keys

    def counted(keys: list[tuple[str, int]], required: object) -> dict[tuple[str, int], int]:
        asked.append(keys)
        return query_keys(keys, required)  # type: ignore[no-any-return]

    lso.query_keys = counted
    return asked


_GONE = frozenset(
    {
        KafkaError._NOENT,  # librdkafka's "no leaders found": the metadata lacks the topic
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
    }
)


def _await_gone(admin: AdminClient, topic: str, timeout_s: float = 30) -> None:
    """Until the broker refuses a ListOffsets for ``topic`` as unknown (deleted); any
    other failure (a time-out on a loaded machine) is asked again."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        asked = {TopicPartition(topic, 0): OffsetSpec.latest()}
        try:
            admin.list_offsets(asked)[TopicPartition(topic, 0)].result(10)
        except KafkaException as exc:
            if exc.args[0].code() in _GONE:
                return
        time.sleep(0.1)
    raise AssertionError(f"{topic} still answers {timeout_s} s after its deletion")


def test_last_stable_offsets_of_recent_topics_come_in_one_request(kafka: str, unique: str) -> None:
    from tidemark.jobs.lookups import KafkaCommittedOffsets

    a, b, gone = f"lso-a-{unique}", f"lso-b-{unique}", f"lso-gone-{unique}"
    for topic in (a, b, gone):
        _create_topic(kafka, topic)
    producer = Producer({"bootstrap.servers": kafka, "acks": "all"})

    def write(topic: str, n: int) -> None:
        for _ in range(n):
            producer.produce(topic, b"x")
        assert producer.flush(30) == 0

    lso = KafkaCommittedOffsets(kafka)
    write(a, 1), write(b, 1), write(gone, 1)
    assert lso.last_stable(a, {0: 1}) == {0: 1}
    assert lso.last_stable(b, {0: 1}) == {0: 1}  # a second request (b was not recent yet)
    assert lso.last_stable(gone, {0: 1}) == {0: 1}
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.delete_topics([gone])[gone].result(30)
    _await_gone(admin, gone)  # the broker answers for a deleted topic for a moment
    write(a, 2), write(b, 3)
    asked = _record_requests(lso)
    assert lso.last_stable(a, {0: 3}) == {0: 3}
    assert lso.last_stable(b, {0: 4}) == {0: 4}  # answered by a's request
    assert asked == [sorted([(a, 0), (b, 0), (gone, 0)])]
    # The deleted topic failed without failing a's answer, and is no longer asked for.
    write(a, 1)
    assert lso.last_stable(a, {0: 4}) == {0: 4}
    assert asked[-1] == sorted([(a, 0), (b, 0)])
    producer.flush(10)


def test_last_stable_offsets_read_after_a_time_answer_for_it(kafka: str, unique: str) -> None:
    """``fresh_since_ms``: a value read after the caller's records were stored is not asked
    again within the same micro-batch -- a cut still beyond it is beyond Kafka's."""
    import time

    from tidemark.jobs.lookups import KafkaCommittedOffsets

    topic = f"lso-fresh-{unique}"
    _create_topic(kafka, topic)
    producer = Producer({"bootstrap.servers": kafka, "acks": "all"})
    producer.produce(topic, b"x")
    assert producer.flush(30) == 0
    lso = KafkaCommittedOffsets(kafka)
    batch_ms = int(time.time() * 1000)
    assert lso.last_stable(topic, {0: 1}, batch_ms) == {0: 1}  # asked: nothing cached
    producer.produce(topic, b"y")
    assert producer.flush(30) == 0
    # Read after batch_ms: it answers for the batch (the new record is not in it).
    assert lso.last_stable(topic, {0: 2}, batch_ms) == {0: 1}
    # A later batch's timestamp: asked again, and the new record is seen.
    later_ms = int(time.time() * 1000) + 1
    time.sleep(0.002)
    assert lso.last_stable(topic, {0: 2}, later_ms) == {0: 2}
    # No time given: asked whenever the cache is short.
    producer.produce(topic, b"z")
    assert producer.flush(30) == 0
    assert lso.last_stable(topic, {0: 3}) == {0: 3}


def test_expected_partitions_are_asked_with_the_first_request(kafka: str, unique: str) -> None:
    """A worker's first batch meets many streams: announced, they cost one request."""
    from tidemark.jobs.lookups import KafkaCommittedOffsets

    topics = [f"lso-new-{i}-{unique}" for i in range(3)]
    producer = Producer({"bootstrap.servers": kafka, "acks": "all"})
    for topic in topics:
        _create_topic(kafka, topic)
        producer.produce(topic, b"x")
    assert producer.flush(30) == 0
    lso = KafkaCommittedOffsets(kafka)
    asked = _record_requests(lso)
    for topic in topics:
        lso.expect(topic, [0])
    assert [lso.last_stable(topic, {0: 1}) for topic in topics] == [{0: 1}] * 3
    assert asked == [sorted((topic, 0) for topic in topics)]


def test_partition_offsets_in_batches_answer_as_one_request_does(kafka: str, unique: str) -> None:
    """The observer's lookups (batches of ``OFFSETS_BATCH`` partitions, one future each)
    answer what ``StreamTopics``' one-request lookups answer, and fail as they do."""
    from tidemark.controller.kafka.admin import OFFSETS_BATCH, StreamTopics

    partitions = 2 * OFFSETS_BATCH + 50
    topic = f"offsets-{unique}"
    _create_topic(kafka, topic, partitions)
    base = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": kafka, "acks": "all"})
    for p in range(0, partitions, 3):  # every third partition; the others stay empty
        for ts in (base + p, base + p + 500, base + p + 100):  # the largest in the middle
            producer.produce(topic, b"x", partition=p, timestamp=ts)
    assert producer.flush(30) == 0
    # a first lookup finds each partition's leader first: slow on a loaded machine
    topics = StreamTopics(kafka, timeout_s=15.0)
    offsets = topics.partition_offsets(topic)
    every = list(range(partitions))
    ends = {p: 3 if p % 3 == 0 else 0 for p in every}
    tops = {p: (1, base + p + 500) if p % 3 == 0 else None for p in every}
    assert offsets.last_stable(every) == topics.last_stable_offsets(topic, every) == ends
    assert offsets.max_records(every) == tops
    assert offsets.max_records([5, 3]) == {5: None, 3: (1, base + 503)}  # asked again
    impatient = StreamTopics(kafka, timeout_s=2.0)  # a refusal is retried until its budget
    with pytest.raises(Exception) as one_request:
        impatient.last_stable_offsets(topic, [0, partitions])  # a partition it does not have
    with pytest.raises(type(one_request.value)):
        impatient.partition_offsets(topic).last_stable([0, partitions])


def test_end_offsets_right_after_partitions_are_added_answer_for_them(
    kafka: str, unique: str
) -> None:
    """A scale adds partitions; the lookups asked at once (the policy loop's, the writers')
    answer for the new ones as well, asked again until the brokers know them."""
    from tidemark.controller.kafka.admin import StreamTopics

    topic = f"grown-{unique}"
    topics = StreamTopics(kafka, timeout_s=30.0)
    try:
        topics.create(topic, 1, {})
        assert topics.end_offsets(topic, [0]) == {0: 0}  # the client knows one partition
        for count in (3, 6):  # grown by another client, asked before any metadata wait
            admin = AdminClient({"bootstrap.servers": kafka, "log_level": 0})
            admin.create_partitions([NewPartitions(topic, count)])[topic].result(30)
            assert topics.end_offsets(topic, range(count)) == dict.fromkeys(range(count), 0)
    finally:
        topics.close()
    with pytest.raises(KafkaOperationError, match="closed"):
        topics.end_offsets(topic, [0])
