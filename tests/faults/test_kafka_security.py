"""Deployment option: SASL/SCRAM and ACLs on the local cluster. Only writers' principals
may produce to the marks topic and only the controller's may read it; the broker refuses
an unauthorised producer's marks."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.faults.figures import report
from tidemark.controller.kafka.admin import StreamTopics, grant_tidemark_acls
from tidemark.controller.kafka.settings import (
    SASL_PASSWORD,
    SASL_USERNAME,
    SECURITY_PROTOCOL,
    client_config,
    security_config,
    spark_kafka_options,
)
from tidemark.controller.model import WriterMark
from tidemark.controller.naming import MARKS_TOPIC_CONFIGS, ClusterSettings
from tidemark.infra.kafka import KafkaCluster, KafkaSecurity
from tidemark.pipelines.writing.marks import mark_message

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

USERS = {"writer": "writer-pw", "controller": "controller-pw", "mallory": "mallory-pw"}


def as_user(monkeypatch: pytest.MonkeyPatch, user: str | None) -> None:
    """What an operator sets for a tidemark process running as ``user``."""
    if user is None:
        for name in (SECURITY_PROTOCOL, SASL_USERNAME, SASL_PASSWORD):
            monkeypatch.delenv(name, raising=False)
        return
    monkeypatch.setenv(SECURITY_PROTOCOL, "SASL_PLAINTEXT")
    monkeypatch.setenv(SASL_USERNAME, user)
    monkeypatch.setenv(SASL_PASSWORD, {"admin": "admin-pw", **USERS}[user])


def wait_described(bootstrap: str, topic: str, timeout_s: float = 30) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**client_config(bootstrap), "log_level": 0})
    deadline = time.monotonic() + timeout_s
    while True:
        found = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        if found is not None and found.error is None:
            return
        assert time.monotonic() < deadline, f"{topic}: {found and found.error}"
        time.sleep(0.2)


def produce_one(bootstrap: str, topic: str, key: bytes, value: bytes) -> Any:
    """The delivery error of one record (``None``: acknowledged)."""
    result: list[Any] = []
    producer = Producer({**client_config(bootstrap), "log_level": 0, "message.timeout.ms": 8_000})
    producer.produce(
        topic, value=value, key=key, partition=0, on_delivery=lambda e, m: result.append(e)
    )
    producer.flush(15)
    return result[0] if result else "no delivery report"


def authorization_refused(error: Any) -> bool:
    """Whether ``error`` (of :func:`produce_one` or :func:`consume_all`) is the broker's
    refusal by ACL, not a transport or TLS failure."""
    return error is not None and error.code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    )


def consume_all(bootstrap: str, topic: str) -> tuple[list[bytes], Any]:
    consumer = Consumer(
        {**client_config(bootstrap), "group.id": f"g{time.time_ns()}", "log_level": 0}
    )
    values: list[bytes] = []
    error = None
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if values:
                    break
                continue
            if msg.error():
                error = msg.error()
                break
            values.append(msg.value())
    finally:
        consumer.close()
    return values, error


def test_only_writers_produce_marks_and_only_the_controller_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    security = KafkaSecurity("admin-pw", USERS)
    cluster = ClusterSettings(marks_topic="secure-marks", bucket_count=1)
    with KafkaCluster(tmp_path / "kafka", security=security) as kafka:
        bootstrap = kafka.bootstrap_servers
        as_user(monkeypatch, "admin")
        StreamTopics(bootstrap).create(cluster.marks_topic, 1, MARKS_TOPIC_CONFIGS)
        grant_tidemark_acls(
            kafka.client_config("admin"), cluster.marks_topic, ["writer"], ["controller"]
        )
        for user in ("writer", "controller"):  # ACLs propagate through the metadata log
            as_user(monkeypatch, user)
            wait_described(bootstrap, cluster.marks_topic)

        honest = mark_message(cluster, "s/x", "w1", WriterMark(1_000, {0: 1}), instance="i1")
        forged = mark_message(cluster, "s/x", "w1", WriterMark(9_999, {0: 1}), instance="x")

        as_user(monkeypatch, "writer")
        assert produce_one(bootstrap, honest.topic, honest.key, honest.value) is None
        as_user(monkeypatch, "mallory")
        refused = produce_one(bootstrap, forged.topic, forged.key, forged.value)
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        as_user(monkeypatch, None)  # no credentials at all: not even a connection
        assert produce_one(bootstrap, forged.topic, forged.key, forged.value) is not None

        as_user(monkeypatch, "writer")
        read, error = consume_all(bootstrap, cluster.marks_topic)
        # the broker refuses the writer's group or the topic, whichever it asks for first
        refusals = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)
        assert read == [] and error is not None and error.code() in refusals
        as_user(monkeypatch, "controller")
        values, error = consume_all(bootstrap, cluster.marks_topic)
        assert error is None and values == [honest.value]
        assert spark_kafka_options()["kafka.sasl.jaas.config"].endswith(
            'username="controller" password="controller-pw";'
        )
    report(
        "kafka-security",
        "writer's mark acknowledged; mallory's refused "
        f"({refused.name()}); unauthenticated refused; controller read {len(values)} mark(s)",
    )


def test_security_settings_are_checked() -> None:
    assert security_config({}) == {}
    with pytest.raises(ValueError, match="needs"):
        security_config({SECURITY_PROTOCOL: "SASL_SSL"})
    with pytest.raises(ValueError, match="not one of"):
        security_config({SECURITY_PROTOCOL: "SASL_TLS"})
