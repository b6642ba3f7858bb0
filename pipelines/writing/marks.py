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
partition count is refused, since marks would land in the wrong buckets
(``controller.kafka.admin.ensure_marks_topic``, shared with the controller job).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.kafka.admin import ensure_marks_topic
from controller.model import WriterMark
from controller.naming import ClusterSettings, bucket_of
from schemas.records import WriterMarkRecord


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
    return WriterMark(record.time, dict(record.position), record.alive, record.max_event_time)


__all__ = ["MarkMessage", "ensure_marks_topic", "mark_message", "to_writer_mark"]
