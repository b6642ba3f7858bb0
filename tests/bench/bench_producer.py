"""The drop-in TidemarkProducer against the bare confluent-kafka Producer it wraps.

``run(bootstrap, zk_connect)``: both produce the same payloads and keys to
the same 4-partition topic (adopted as a stream, Kafka's partitioner: the
bare producer picks partitions itself, the drop-in computes the same ones)
with the same settings (idempotence, linger 5 ms), calling ``produce`` then
``poll(0)``, alternating, best of each; the drop-in also folds every
delivery report into its position. Goal: ratio >= 0.95.

A third contender, the drop-in with ``positions_from="end_offsets"``
(its ``produce``/``poll`` are the bare producer's own methods; failed
records' reports only; ``note_time`` flushes, waits for librdkafka's next
statistics report and reads end offsets), is measured the same way, and so
is its ``note_time`` (it blocks), and the idle CPU of its statistics reports.

The default mode (a delivery report per record) is also set against a bare
producer given a per-record delivery callback, as most applications do, both
given the same callback (goal >= 0.9), and against its floor: the bare
producer given the drop-in's report shape (a Python function storing the
report, then calling the application's callback), what per-record positions
cost with no Python on the produce side. Wall rates swing with the shared
machine; the calling thread's CPU per record (``thread_time``: produce, and
the reports ``poll`` serves) is the steadier figure, and both are printed,
best against best and the median of the per-round ratios.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
import uuid
from typing import Any

from confluent_kafka import Producer

from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.pipelines.writing.producer import STATS_INTERVAL_MS, TidemarkProducer

EVENTS = 200_000
PAYLOAD_BYTES = 256
KEYS = 64
ROUNDS = 7
PARTITIONS = 4
NOTES = 50
IDLE_S = 5.0


def _on_delivery(err: Any, msg: Any) -> None:
    """An application's per-record delivery callback (does nothing on success)."""
    if err is not None:
        raise RuntimeError(err)


def _produce(
    producer: Any, topic: str, keys: list[bytes], payload: bytes, callback: Any = None
) -> tuple[float, float]:
    """(events/s, the calling thread's CPU µs per event)."""
    started, cpu = time.perf_counter(), time.thread_time()
    for i in range(EVENTS):
        key = keys[i % KEYS]
        while True:
            try:
                if callback is None:
                    producer.produce(topic, payload, key)
                else:
                    producer.produce(topic, payload, key, on_delivery=callback)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)
    return EVENTS / (time.perf_counter() - started), (time.thread_time() - cpu) / EVENTS * 1e6


def _idle_cpu(producer: Any) -> float:
    """The process's CPU (all threads) per second while ``producer`` idles, polled."""
    started, cpu = time.monotonic(), time.process_time()
    while time.monotonic() - started < IDLE_S:
        producer.poll(0.5)
    return (time.process_time() - cpu) / (time.monotonic() - started)


def _line(name: str, runs: list[tuple[float, float]]) -> str:
    return (
        f"{name}: {max(r for r, _ in runs):,.0f} events/s  (runs: "
        + ", ".join(f"{r:,.0f}" for r, _ in runs)
        + f"); calling thread's CPU {min(c for _, c in runs):.2f} us/event"
    )


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
    # an arrival stream: the broker stamps, so its produce runs no Python per record
    manager.topics.create(sole_topic, PARTITIONS, {"message.timestamp.type": "LogAppendTime"})
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
    bucket: dict[Any, Any] = {}

    def report_then_callback(err: Any, msg: Any) -> None:
        """The drop-in's report of a record with the application's callback."""
        bucket[err] = msg
        _on_delivery(err, msg)

    runs: dict[str, list[tuple[float, float]]] = {
        "bare": [],
        "bare+cb": [],
        "floor": [],
        "reports": [],
        "reports+cb": [],
        "end_offsets": [],
    }
    for _ in range(ROUNDS):
        runs["bare"].append(_produce(bare, topic, keys, payload))
        runs["bare+cb"].append(_produce(bare, topic, keys, payload, _on_delivery))
        runs["floor"].append(_produce(bare, topic, keys, payload, report_then_callback))
        runs["reports"].append(_produce(wrapped, topic, keys, payload))
        runs["reports+cb"].append(_produce(wrapped, topic, keys, payload, _on_delivery))
        runs["end_offsets"].append(_produce(by_ends, sole_topic, keys, payload))
    rate = {k: max(r for r, _ in v) for k, v in runs.items()}
    cpu = {k: min(c for _, c in v) for k, v in runs.items()}
    wrapped.note_time(1)
    wrapped.close()
    note_s = []
    phase = random.Random(7)
    for i in range(NOTES):
        by_ends.produce(sole_topic, payload, keys[i % KEYS])
        time.sleep(phase.random() * STATS_INTERVAL_MS / 1000)  # notes at any phase of the timer
        t0 = time.perf_counter()
        by_ends.note_time(i)
        note_s.append(time.perf_counter() - t0)
    by_ends.close()
    note_s.sort()
    del wrapped, by_ends
    gc.collect()
    idle_bare = _idle_cpu(bare)
    quiet = TidemarkProducer(
        conf,
        stream=sole_stream,
        writer_id="bench-idle",
        store=store,
        cluster=settings,
        positions_from="end_offsets",
    )
    idle_stats = _idle_cpu(quiet)
    quiet.close()

    def ratio(a: str, b: str) -> str:
        """Best against best, and the median and range over the rounds (round i against
        round i)."""
        walls = [x / y for (x, _), (y, _) in zip(runs[a], runs[b], strict=True)]
        cpus = [y / x for (_, x), (_, y) in zip(runs[a], runs[b], strict=True)]
        return (
            f"wall {rate[a] / rate[b]:.2f} (median {statistics.median(walls):.2f}, rounds "
            f"{min(walls):.2f}-{max(walls):.2f}), CPU {cpu[b] / cpu[a]:.2f} (median "
            f"{statistics.median(cpus):.2f}, rounds {min(cpus):.2f}-{max(cpus):.2f})"
        )

    return [
        f"{EVENTS} events of {PAYLOAD_BYTES} B, {KEYS} keys, {PARTITIONS} partitions, "
        f"best of {ROUNDS}",
        _line("bare Producer", runs["bare"]),
        _line("bare Producer, per-record on_delivery (Python)", runs["bare+cb"]),
        _line("bare Producer, the drop-in's report then that on_delivery", runs["floor"]),
        _line("TidemarkProducer (positions from reports)", runs["reports"]),
        _line("TidemarkProducer, the same per-record on_delivery", runs["reports+cb"]),
        _line("TidemarkProducer(positions_from='end_offsets')", runs["end_offsets"]),
        f"ratio end_offsets/bare: {ratio('end_offsets', 'bare')}  (goal >= 0.95)",
        f"ratio reports/bare, no callback: {ratio('reports', 'bare')}",
        f"ratio reports/bare, both with the same per-record callback: "
        f"{ratio('reports+cb', 'bare+cb')}  (goal >= 0.9)",
        f"ratio floor (bare, the drop-in's report shape)/bare, both with the callback: "
        f"{ratio('floor', 'bare+cb')}",
        f"ratio reports/floor, both with the callback: {ratio('reports+cb', 'floor')}",
        f"end_offsets note_time (flush, next statistics report, end offsets; one record in "
        f"flight; statistics every {STATS_INTERVAL_MS} ms, notes at random phases): "
        f"p50 {note_s[NOTES // 2] * 1e3:,.1f} ms, max {note_s[-1] * 1e3:,.1f} ms",
        f"idle process CPU, polled: bare producer {idle_bare * 100:.2f} % of a core, "
        f"end_offsets producer (statistics every {STATS_INTERVAL_MS} ms) "
        f"{idle_stats * 100:.2f} %",
    ]
