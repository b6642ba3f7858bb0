"""Writer marks on the marks topic: the message to send, and the topic itself.

    msg = mark_message(settings, "shop/orders", "w1", WriterMark(1000, {0: 5}))
    producer.produce(msg.topic, msg.value, msg.key, partition=msg.partition)

A stream's marks all go to one partition of the marks topic, the stream's
bucket (``bucket_of(stream, bucket_count)``), keyed by the stream name, so
one controller instance sees every mark of a stream in order.

The marks topic has ``ClusterSettings.bucket_count`` partitions. A writer
creates it when it is missing (``WriterConfig.create_marks_topic``, the
default), with the broker's default replication and ``LogAppendTime`` (the
controller bounds a mark's time by its arrival); a topic with another
partition count is refused, since marks would land in the wrong buckets.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from controller.kafka_client import client_config
from controller.model import WriterMark
from controller.naming import MARKS_TOPIC_CONFIGS, ClusterSettings, bucket_of
from pipelines.writing.exceptions import MarksTopicError
from schemas.records import WriterMarkRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MarkMessage:
    """A writer mark as a Kafka message: where it goes and its bytes."""

    topic: str
    partition: int
    key: bytes
    value: bytes


def mark_message(
    settings: ClusterSettings,
    stream: str,
    writer_id: str,
    mark: WriterMark,
    transaction_id: str | None = None,
    instance: str | None = None,
) -> MarkMessage:
    """``instance``: the writer object's token; the controller binds ``writer_id`` to the
    first one it sees and rejects marks of another (``impersonated``) while it lives."""
    record = WriterMarkRecord.from_mark(stream, writer_id, mark, transaction_id, instance)
    return MarkMessage(
        topic=settings.marks_topic,
        partition=bucket_of(stream, settings.bucket_count),
        key=stream.encode("utf-8"),
        value=record.encode(),
    )


def to_writer_mark(record: WriterMarkRecord) -> WriterMark:
    """The model's value of a decoded mark."""
    return WriterMark(record.time, dict(record.position), record.alive)


_checked: set[tuple[str, str, int]] = set()
_checked_lock = threading.Lock()


def _partition_count(admin: AdminClient, topic: str) -> int | None:
    found = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
    if found is None or found.error is not None:
        return None
    return len(found.partitions)


def ensure_marks_topic(bootstrap_servers: str, settings: ClusterSettings, create: bool) -> None:
    """Make sure the marks topic exists with ``bucket_count`` partitions (once per process)."""
    key = (bootstrap_servers, settings.marks_topic, settings.bucket_count)
    with _checked_lock:
        if key in _checked:
            return
    topic = settings.marks_topic
    admin = AdminClient({**client_config(bootstrap_servers), "log_level": 0})
    try:
        count = _partition_count(admin, topic)
        if count is None:
            if not create:
                raise MarksTopicError(
                    f"marks topic {topic!r} does not exist; create it with "
                    f"{settings.bucket_count} partitions, or let writers create it "
                    "(WriterConfig.create_marks_topic=True)"
                )
            log.info("creating marks topic %s with %d partitions", topic, settings.bucket_count)
            new = NewTopic(
                topic, num_partitions=settings.bucket_count, config=dict(MARKS_TOPIC_CONFIGS)
            )
            future = admin.create_topics([new])[topic]
            try:
                future.result(timeout=30)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
            deadline = time.monotonic() + 30
            while (count := _partition_count(admin, topic)) is None:
                if time.monotonic() > deadline:
                    raise MarksTopicError(f"marks topic {topic!r} did not appear after creation")
                time.sleep(0.1)
    except KafkaException as exc:
        raise MarksTopicError(f"marks topic {topic!r}: {exc.args[0]}") from exc
    if count != settings.bucket_count:
        raise MarksTopicError(
            f"marks topic {topic!r} has {count} partitions but bucket_count is "
            f"{settings.bucket_count}; every writer and controller must agree on it"
        )
    with _checked_lock:
        _checked.add(key)


__all__ = ["MarkMessage", "ensure_marks_topic", "mark_message", "to_writer_mark"]
