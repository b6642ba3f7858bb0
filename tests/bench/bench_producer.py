"""The drop-in TidemarkProducer against the bare confluent-kafka Producer it wraps.

``run(bootstrap, zk_connect)``: both produce the same payloads and keys to
the same 4-partition topic (adopted as a stream, Kafka's partitioner: the
bare producer picks partitions itself, the drop-in computes the same ones)
with the same settings (idempotence, linger 5 ms), calling ``produce`` then
``poll(0)``, alternating, best of each; the drop-in also folds every
delivery report into its position. Goal: ratio >= 0.95.

A third contender, the drop-in with ``positions_from="end_offsets"``
(failed records' reports only; ``note_time`` flushes and reads end offsets),
is measured the same way, and so is its ``note_time`` (it blocks).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Producer

from controller.memory_store import MemoryStore
from controller.naming import ClusterSettings
from controller.streams import StreamManager
from pipelines.writing.producer import TidemarkProducer

EVENTS = 200_000
PAYLOAD_BYTES = 256
KEYS = 64
ROUNDS = 3
PARTITIONS = 4
NOTES = 50


def _produce(producer: Any, topic: str, keys: list[bytes], payload: bytes) -> tuple[float, float]:
    """(events/s, the calling thread's CPU µs per event)."""
    started, cpu = time.perf_counter(), time.thread_time()
    for i in range(EVENTS):
        key = keys[i % KEYS]
        while True:
            try:
                producer.produce(topic, payload, key)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)
    return EVENTS / (time.perf_counter() - started), (time.thread_time() - cpu) / EVENTS * 1e6


def run(bootstrap: str) -> list[str]:
    unique = uuid.uuid4().hex[:8]
    settings = ClusterSettings(marks_topic=f"bench-marks-{unique}", bucket_count=4)
    store = MemoryStore()
    manager = StreamManager(store, bootstrap, settings)
    topic = f"bench-legacy-{unique}"
    manager.topics.create(topic, PARTITIONS, {})
    stream = f"bench{unique}/legacy"
    manager.create_scope(f"bench{unique}")
    manager.adopt(stream, topic)
    # positions_from="end_offsets" must be its partitions' only producer (else note_time
    # refuses): it writes a topic of its own, made and adopted the same way
    sole_topic, sole_stream = f"{topic}-sole", f"bench{unique}/sole"
    manager.topics.create(sole_topic, PARTITIONS, {})
    manager.adopt(sole_stream, sole_topic)
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    keys = [f"key-{i}".encode() for i in range(KEYS)]
    payload = b"x" * PAYLOAD_BYTES
    bare = Producer(conf)
    wrapped = TidemarkProducer(
        conf, stream=stream, writer_id="bench", store=store, cluster=settings
    )
    by_ends = TidemarkProducer(
        conf,
        stream=sole_stream,
        writer_id="bench-ends",
        store=store,
        cluster=settings,
        positions_from="end_offsets",
    )
    bare_runs, wrapped_runs, ends_runs = [], [], []
    for _ in range(ROUNDS):
        bare_runs.append(_produce(bare, topic, keys, payload))
        wrapped_runs.append(_produce(wrapped, topic, keys, payload))
        ends_runs.append(_produce(by_ends, sole_topic, keys, payload))
    bare_rates, wrapped_rates = [r for r, _ in bare_runs], [r for r, _ in wrapped_runs]
    ends_rates = [r for r, _ in ends_runs]
    bare_cpu, our_cpu = min(c for _, c in bare_runs), min(c for _, c in wrapped_runs)
    ends_cpu = min(c for _, c in ends_runs)
    wrapped.note_time(1)
    wrapped.close()
    note_s = 0.0
    for i in range(NOTES):
        by_ends.produce(sole_topic, payload, keys[i % KEYS])
        t0 = time.perf_counter()
        by_ends.note_time(i)
        note_s += time.perf_counter() - t0
    by_ends.close()
    raw, ours, ends = max(bare_rates), max(wrapped_rates), max(ends_rates)
    return [
        f"{EVENTS} events of {PAYLOAD_BYTES} B, {KEYS} keys, {PARTITIONS} partitions, "
        f"best of {ROUNDS}",
        "bare Producer: "
        + f"{raw:,.0f} events/s  (runs: "
        + ", ".join(f"{r:,.0f}" for r in bare_rates)
        + ")",
        "TidemarkProducer: "
        + f"{ours:,.0f} events/s  (runs: "
        + ", ".join(f"{r:,.0f}" for r in wrapped_rates)
        + ")",
        f"ratio drop-in/bare: {ours / raw:.2f}  (goal >= 0.95)",
        f"calling thread's CPU per event: bare {bare_cpu:.2f} us, drop-in {our_cpu:.2f} us "
        f"(ratio bare/drop-in {bare_cpu / our_cpu:.2f})",
        "TidemarkProducer(positions_from='end_offsets'): "
        + f"{ends:,.0f} events/s  (runs: "
        + ", ".join(f"{r:,.0f}" for r in ends_rates)
        + f"); ratio to bare {ends / raw:.2f}  (goal >= 0.95)",
        f"  its calling thread's CPU per event {ends_cpu:.2f} us "
        f"(ratio bare/it {bare_cpu / ends_cpu:.2f}); note_time (flush + end offsets, "
        f"one record in flight): {note_s / NOTES * 1e3:,.2f} ms",
    ]
