"""The local Kafka broker: plain produce/consume and transactions."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


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
    from infra.kafka import KafkaCluster

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
