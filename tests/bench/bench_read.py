"""Reader throughput against a bare confluent-kafka consumer on the same records.

``run(bootstrap)``: 200 000 records of 256 B on a 4-segment stream, written
once; then, alternating, best of ``ROUNDS``, each reading all of them from
the start with ``isolation.level=read_committed``:

- a bare ``Consumer``, ``poll()`` per record, vs ``EventReader.read_next``
  [goal >= 0.6];
- a bare ``Consumer``, batches from ``consume()``, vs ``EventReader.read_batch``
  [goal >= 0.9].

Every loop touches each record's body (``msg.value()`` / ``event.body``),
as any consumer does. The bare batch loop fetches the way the reader does:
``consume(500, 0)`` (what has come), else ``poll(1 s)`` for the first record
and ``consume(499, 0)`` for the rest -- ``consume(500, timeout)`` alone waits
for a full batch or the timeout and is slower than per-record ``poll()``.
The reader is of an ephemeral group (position in memory), default
``ReaderConfig``. Rates are counted from the first record to the last (not
the consumer's start-up).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from controller.config import ScalingPolicy, StreamConfiguration
from controller.memory_store import MemoryStore
from controller.naming import ClusterSettings
from controller.streams import StreamManager
from pipelines.reading.group import ReaderGroup

EVENTS = 200_000
PAYLOAD_BYTES = 256
SEGMENTS = 4
ROUNDS = 3
BATCH = 500


def _write(bootstrap: str, topic: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True}
    )
    payload = b"x" * PAYLOAD_BYTES
    for i in range(EVENTS):
        while True:
            try:
                producer.produce(topic, payload, b"key-%d" % (i % 64), partition=i % SEGMENTS)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)


def _bare(bootstrap: str, topic: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-bare-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(SEGMENTS)])
    return consumer


def _rate(count: Callable[[], int]) -> float:
    """Events/s of a loop that reads until EVENTS came; ``count`` reads one step
    (returns how many events it got) and the clock starts at the first event."""
    got = 0
    started = 0.0
    while got < EVENTS:
        n = count()
        if n and not got:
            started = time.perf_counter()
        got += n
    return (got - 1) / (time.perf_counter() - started)


def bare_poll(bootstrap: str, topic: str) -> float:
    consumer = _bare(bootstrap, topic)

    def step() -> int:
        msg = consumer.poll(1.0)
        if msg is None or msg.error() is not None:
            return 0
        msg.value()
        return 1

    try:
        return _rate(step)
    finally:
        consumer.close()


def bare_consume(bootstrap: str, topic: str) -> float:
    consumer = _bare(bootstrap, topic)

    def step() -> int:
        msgs = consumer.consume(BATCH, 0)
        if not msgs:
            first = consumer.poll(1.0)
            if first is None:
                return 0
            msgs = [first, *consumer.consume(BATCH - 1, 0)]
        n = 0
        for msg in msgs:
            if msg.error() is None:
                msg.value()
                n += 1
        return n

    try:
        return _rate(step)
    finally:
        consumer.close()


def _group(store: MemoryStore, bootstrap: str, stream: str) -> ReaderGroup:
    return ReaderGroup.ephemeral_group(stream, None, store=store, bootstrap_servers=bootstrap)


def reader_next(store: MemoryStore, bootstrap: str, stream: str) -> float:
    with _group(store, bootstrap, stream) as group, group.reader("bench") as reader:

        def step() -> int:
            event = reader.read_next(1000)
            if event is None:
                return 0
            event.body  # noqa: B018 -- touched as the bare loop touches value()
            return 1

        return _rate(step)


def reader_batch(store: MemoryStore, bootstrap: str, stream: str) -> float:
    with _group(store, bootstrap, stream) as group, group.reader("bench") as reader:

        def step() -> int:
            batch = reader.read_batch(BATCH, 1000, window=False)
            for event in batch.events:
                event.body  # noqa: B018
            return len(batch.events)

        return _rate(step)


def run(bootstrap: str) -> list[str]:
    unique = uuid.uuid4().hex[:8]
    settings = ClusterSettings(marks_topic=f"bench-marks-{unique}", bucket_count=4)
    store = MemoryStore()
    stream = f"bench{unique}/read"
    meta = StreamManager(store, bootstrap, settings).create(
        stream, StreamConfiguration(ScalingPolicy.fixed(SEGMENTS))
    )
    _write(bootstrap, meta.topic)
    loops: dict[str, Callable[[], float]] = {
        "bare poll()": lambda: bare_poll(bootstrap, meta.topic),
        "read_next()": lambda: reader_next(store, bootstrap, stream),
        "bare consume()": lambda: bare_consume(bootstrap, meta.topic),
        "read_batch()": lambda: reader_batch(store, bootstrap, stream),
    }
    rates: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(ROUNDS):
        for name, loop in loops.items():
            rates[name].append(loop())
    best: dict[str, Any] = {name: max(r) for name, r in rates.items()}
    lines = [f"{EVENTS:,} records of {PAYLOAD_BYTES} B on {SEGMENTS} segments, best of {ROUNDS}"]
    for name, runs in rates.items():
        lines.append(
            f"  {name:<15} {best[name]:>11,.0f} events/s  (runs: "
            + ", ".join(f"{r:,.0f}" for r in runs)
            + ")"
        )
    lines.append(
        f"  read_next / bare poll       {best['read_next()'] / best['bare poll()']:.2f}"
        "  [goal >= 0.6]"
    )
    lines.append(
        f"  read_batch / bare consume   {best['read_batch()'] / best['bare consume()']:.2f}"
        "  [goal >= 0.9]"
    )
    return lines
