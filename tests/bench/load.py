"""The throughput benchmarks' load, and writing it with a bare ``confluent_kafka`` producer.

produce_all(producer, topic, [(b"event", b"key-0", 0), (b"event", b"key-1", 1)])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

EVENTS = 200_000
PAYLOAD_BYTES = 256
"""Each throughput run writes or reads ``EVENTS`` records of ``PAYLOAD_BYTES`` bytes."""


def produce_all(
    producer: Any,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, int]],
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    """Produce each ``(value, key, partition)`` of ``records`` to ``topic`` (each with
    ``headers``) and flush; while the producer's local queue is full, serve its
    callbacks and try again (nothing dropped)."""
    for value, key, partition in records:
        while True:
            try:
                producer.produce(topic, value, key, partition=partition, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)
