"""Reader throughput against a bare confluent-kafka consumer on the same records.

``run(bootstrap)``: 200 000 records of 256 B on a 4-segment stream, written
once; then, alternating, best of ``ROUNDS``, each reading all of them from
the start with ``isolation.level=read_committed``:

- a bare ``Consumer``, ``poll()`` per record, vs ``EventReader.read_next``
  [goal >= 0.6];
- a bare ``Consumer``, batches from ``consume()``, vs ``EventReader.read_batch``
  taking the bodies (``batch.values()``) [goal >= 0.9], and vs ``read_batch``
  taking each event (``batch.events``, an ``EventRead`` made per record);
- the same pair at ``BIG`` (512) records a batch (what a caller asking for
  larger batches gets: the per-batch work spread over more records).

Like with like: every loop touches each record's body (``msg.value()`` /
``event.body`` / ``batch.values()``), as any consumer does; the bare loops
also check ``msg.error()`` per record, which the reader does too (and more:
the partition's segment, the position per partition, the sealed sizes).
The batch loops take ``FETCH_SIZE`` (128) records a batch; the bare one
fetches the way the reader does: ``consume(128, 0)`` (what has come), else
``poll(1 s)`` for the first record and ``consume(127, 0)`` for the rest --
``consume(n, timeout)`` alone waits for a full batch or the timeout and is
slower than per-record ``poll()``.
The reader is of an ephemeral group (position in memory), default
``ReaderConfig``; the bare consumers fetch with the reader's
``fetch.queue.backoff.ms`` (``FETCH_QUEUE_BACKOFF_MS``). Rates are counted
from the first record to the last (not the consumer's start-up). Beside each
rate: the reading thread's CPU time per event (``time.thread_time``;
librdkafka's own threads not counted), which a busy machine disturbs far
less than the wall clock -- on a shared machine compare those.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.bench.load import EVENTS, PAYLOAD_BYTES, produce_all
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.kafka.roles import FETCH_QUEUE_BACKOFF_MS
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.reading.reader import FETCH_SIZE

SEGMENTS = 4
ROUNDS = 3
BIG = 512
"""The larger batch size also compared (bare ``consume(512)`` vs ``read_batch(512)``)."""


def _write(bootstrap: str, topic: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True}
    )
    payload = b"x" * PAYLOAD_BYTES
    records = ((payload, b"key-%d" % (i % 64), i % SEGMENTS) for i in range(EVENTS))
    produce_all(producer, topic, records)


def _bare(bootstrap: str, topic: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-bare-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,  # as the reader's consumer
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(SEGMENTS)])
    return consumer


Rate = tuple[float, float]
"""Events/s (wall clock), and the reading thread's CPU ns per event."""


def _rate(count: Callable[[], int]) -> Rate:
    """The rate of a loop that reads until EVENTS came; ``count`` reads one step
    (returns how many events it got) and the clocks start at the first event."""
    got = 0
    started = cpu_started = 0.0
    while got < EVENTS:
        n = count()
        if n and not got:
            started, cpu_started = time.perf_counter(), time.thread_time()
        got += n
    wall, cpu = time.perf_counter() - started, time.thread_time() - cpu_started
    return (got - 1) / wall, cpu / (got - 1) * 1e9


def bare_poll(bootstrap: str, topic: str) -> Rate:
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


def bare_consume(bootstrap: str, topic: str, size: int = FETCH_SIZE) -> Rate:
    consumer = _bare(bootstrap, topic)

    def step() -> int:
        msgs = consumer.consume(size, 0)
        if not msgs:
            first = consumer.poll(1.0)
            if first is None:
                return 0
            msgs = [first, *consumer.consume(size - 1, 0)]
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


def reader_next(store: MemoryStore, bootstrap: str, stream: str) -> Rate:
    with _group(store, bootstrap, stream) as group, group.reader("bench") as reader:

        def step() -> int:
            event = reader.read_next(1000)
            if event is None:
                return 0
            event.body  # noqa: B018 -- touched as the bare loop touches value()
            return 1

        return _rate(step)


def reader_batch(store: MemoryStore, bootstrap: str, stream: str, size: int = FETCH_SIZE) -> Rate:
    with _group(store, bootstrap, stream) as group, group.reader("bench") as reader:

        def step() -> int:
            batch = reader.read_batch(size, 1000)
            batch.values()
            return len(batch)

        return _rate(step)


def reader_batch_events(store: MemoryStore, bootstrap: str, stream: str) -> Rate:
    with _group(store, bootstrap, stream) as group, group.reader("bench") as reader:

        def step() -> int:
            batch = reader.read_batch(FETCH_SIZE, 1000)
            for event in batch.events:
                event.body  # noqa: B018
            return len(batch)

        return _rate(step)


def run(bootstrap: str) -> list[str]:
    unique = uuid.uuid4().hex[:8]
    settings = ClusterSettings(marks_topic=f"bench-marks-{unique}", bucket_count=4)
    store = MemoryStore()
    store.create_scope(f"bench{unique}")
    stream = f"bench{unique}/read"
    meta = StreamManager(store, bootstrap, settings).create(
        stream, StreamConfiguration(ScalingPolicy.fixed(SEGMENTS))
    )
    _write(bootstrap, meta.topic)
    loops: dict[str, Callable[[], Rate]] = {
        "bare poll()": lambda: bare_poll(bootstrap, meta.topic),
        "read_next()": lambda: reader_next(store, bootstrap, stream),
        "bare consume()": lambda: bare_consume(bootstrap, meta.topic),
        "read_batch()": lambda: reader_batch(store, bootstrap, stream),
        "batch.events()": lambda: reader_batch_events(store, bootstrap, stream),
        f"bare consume({BIG})": lambda: bare_consume(bootstrap, meta.topic, BIG),
        f"read_batch({BIG})": lambda: reader_batch(store, bootstrap, stream, BIG),
    }
    rates: dict[str, list[Rate]] = {name: [] for name in loops}
    for _ in range(ROUNDS):
        for name, loop in loops.items():
            rates[name].append(loop())
    best = {name: max(wall for wall, _ in runs) for name, runs in rates.items()}
    cpu = {name: min(ns for _, ns in runs) for name, runs in rates.items()}
    lines = [
        f"{EVENTS:,} records of {PAYLOAD_BYTES} B on {SEGMENTS} segments, best of {ROUNDS}"
        " (events/s; reading thread's CPU ns/event)"
    ]
    for name, runs in rates.items():
        lines.append(
            f"  {name:<18} {best[name]:>11,.0f}/s {cpu[name]:>6,.0f} ns  (runs: "
            + ", ".join(f"{wall:,.0f}/s {ns:,.0f} ns" for wall, ns in runs)
            + ")"
        )
    for ours, bare, goal in (
        ("read_next()", "bare poll()", 0.6),
        ("read_batch()", "bare consume()", 0.9),
        ("batch.events()", "bare consume()", None),
        (f"read_batch({BIG})", f"bare consume({BIG})", 0.9),
    ):
        lines.append(
            f"  {ours.removesuffix('()')} / {bare.removesuffix('()'):<18}"
            f" {best[ours] / best[bare]:.2f}"
            f"  (CPU: {cpu[bare] / cpu[ours]:.2f})"
            + (f"  [goal >= {goal}]" if goal is not None else "  [events made]")
        )
    return lines
