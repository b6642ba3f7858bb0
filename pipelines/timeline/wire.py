"""Scheduled messages on a Kafka topic: the ``scheduled_message`` Avro record.

    data = encode_scheduled(ScheduledMessage("m1", 5_000, b"hi", "billing", "reminders"))
    decode_scheduled(data).id == "m1"

Framing and schema evolution belong to :mod:`tidemark.schemas.codec` (single-object
encoding; the schema is ``schemas/versions/scheduled_message.v<N>.avsc``).
On the topic, the Kafka key is the message id, so every copy of one message
lands in one partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.pipelines.timeline.exceptions import InvalidMessageError
from tidemark.schemas import codec
from tidemark.schemas.exceptions import SchemaError

SCHEMA = "scheduled_message"


@dataclass(frozen=True)
class ScheduledMessage:
    """A message to put on ``timeline`` at ``timestamp_ms``, as produced to Kafka."""

    id: str
    timestamp_ms: int
    body: bytes
    producer_group: str
    timeline: str


def encode_scheduled(message: ScheduledMessage) -> bytes:
    try:
        return codec.encode(
            SCHEMA,
            {
                "id": message.id,
                "timestamp": message.timestamp_ms,
                "body": message.body,
                "producer_group": message.producer_group,
                "timeline": message.timeline,
            },
        )
    except SchemaError as exc:
        raise InvalidMessageError(
            f"cannot encode {message.id!r}: {exc}", message.timeline, message.id
        ) from exc


def decode_scheduled(data: bytes) -> ScheduledMessage:
    """Decode; raises :class:`tidemark.schemas.exceptions.DecodeError` for bytes that are not
    one."""
    _name, record = codec.decode(data, SCHEMA)
    return ScheduledMessage(
        id=str(record["id"]),
        timestamp_ms=int(record["timestamp"]),
        body=bytes(record["body"]),
        producer_group=str(record["producer_group"]),
        timeline=str(record["timeline"]),
    )
