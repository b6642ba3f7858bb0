"""Writing a benchmark's records with a bare ``confluent_kafka`` producer.

produce_all(producer, topic, b"x" * 256, [(b"key-0", 0), (b"key-1", 1)])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def produce_all(
    producer: Any, topic: str, payload: bytes, routes: Iterable[tuple[bytes, int]]
) -> None:
    """Produce ``payload`` once per ``(key, partition)`` of ``routes`` and flush; while the
    producer's local queue is full, serve its callbacks and try again (nothing dropped)."""
    for key, partition in routes:
        while True:
            try:
                producer.produce(topic, payload, key, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)
