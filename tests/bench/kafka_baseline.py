"""Kafka's own time lookup, the baseline printed beside tidemark's: ``offsets_for_times``."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

PARTITIONS = 16


@dataclass
class TimedTopic:
    """A topic of ``PARTITIONS`` partitions holding records stamped ``base_ts + i * 10``."""

    consumer: Any
    topic: str
    base_ts: int
    records: int

    def lookup(self, t: int) -> float:
        """One ``offsets_for_times`` over every partition; its wall time in ms."""
        from confluent_kafka import TopicPartition

        started = time.perf_counter()
        self.consumer.offsets_for_times(
            [TopicPartition(self.topic, p, t) for p in range(PARTITIONS)], 10
        )
        return (time.perf_counter() - started) * 1000

    def lookups(self, count: int, seed: int = 5) -> list[float]:
        rng = random.Random(seed)
        return [
            self.lookup(self.base_ts + rng.randrange(0, self.records * 10)) for _ in range(count)
        ]


@contextmanager
def timed_topic(bootstrap: str, records: int = 2_000) -> Iterator[TimedTopic]:
    """Create, fill and (afterwards) delete a topic to time ``offsets_for_times`` on."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-times-{int(time.time() * 1000)}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    base_ts = int(time.time() * 1000) - 3_600_000
    for i in range(records):
        for p in range(PARTITIONS):
            producer.produce(topic, b"x", partition=p, timestamp=base_ts + i * 10)
        producer.poll(0)
    producer.flush(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "log_level": 0})
    consumer.offsets_for_times([TopicPartition(topic, p, base_ts) for p in range(PARTITIONS)], 10)
    try:
        yield TimedTopic(consumer, topic, base_ts, records)
    finally:
        consumer.close()
        admin.delete_topics([topic])
