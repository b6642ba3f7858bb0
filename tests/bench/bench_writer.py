"""EventWriter throughput against a raw confluent-kafka Producer, and the cost of note_time.

``run(bootstrap)``: both write the same payloads (same keys, same partitions,
same producer settings: idempotence, linger) to the same broker in the same
run, alternating, best of each; the writer also routes, stamps, tracks its
position from delivery reports and keeps its replay window. Goal: ratio >= 0.95.
Then both again with the same three Kafka headers on every record (the
writer also checks them and keeps them for a replay). Goal: ratio >= 0.95.

The floor of a writer whose position comes from per-record delivery reports: the raw
producer given a Python delivery callback that only appends each record's offset
(what the writer's sent log does per report), printed beside the writer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Message, Producer

from tests.bench.load import EVENTS, PAYLOAD_BYTES, produce_all
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.navigation import route
from tidemark.controller.streams import StreamManager
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.writer import EventWriter

KEYS = 64
ROUNDS = 3
NOTES = 200
HEADERS = [
    ("trace-id", b"4bf92f3577b34da6a3ce929d0e0e4736"),
    ("content-type", b"application/json"),
    ("schema-id", b"42"),
]


def _raw(
    bootstrap: str,
    topic: str,
    keys: list[bytes],
    parts: list[int],
    payload: bytes,
    headers: list[tuple[str, bytes]] | None = None,
    on_delivery: Callable[[Any, Any], None] | None = None,
) -> tuple[float, float]:
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    if on_delivery is not None:
        conf["on_delivery"] = on_delivery
    producer = Producer(conf)
    records = [(payload, keys[i % KEYS], parts[i % KEYS]) for i in range(EVENTS)]
    started, cpu = time.perf_counter(), time.thread_time()
    produce_all(producer, topic, records, headers=headers)
    return EVENTS / (time.perf_counter() - started), (time.thread_time() - cpu) / EVENTS * 1e6


def _writer(
    writer: EventWriter,
    keys: list[bytes],
    payload: bytes,
    headers: list[tuple[str, bytes]] | None = None,
) -> tuple[float, float]:
    started, cpu = time.perf_counter(), time.thread_time()
    for i in range(EVENTS):
        writer.write(payload, keys[i % KEYS], headers=headers)
    writer.flush()
    return EVENTS / (time.perf_counter() - started), (time.thread_time() - cpu) / EVENTS * 1e6


def run(bootstrap: str) -> list[str]:
    unique = uuid.uuid4().hex[:8]
    settings = ClusterSettings(marks_topic=f"bench-marks-{unique}", bucket_count=4)
    store = MemoryStore()
    stream = f"bench{unique}/writer"
    store.create_scope(f"bench{unique}")
    meta = StreamManager(store, bootstrap, settings).create(
        stream, StreamConfiguration(ScalingPolicy.fixed(4))
    )
    keys = [f"key-{i}".encode() for i in range(KEYS)]
    parts = [route(meta.current_epoch(), k).number for k in keys]
    payload = b"x" * PAYLOAD_BYTES
    writer = EventWriter(
        "bench",
        stream,
        store=store,
        bootstrap_servers=bootstrap,
        config=WriterConfig(cluster=settings),
    )
    offsets: list[int | None] = []
    keep, offset = offsets.append, Message.offset

    def report(err: Any, msg: Any) -> None:  # the sent log's report, alone
        if err is None:
            keep(offset(msg))

    raw_runs, writer_runs, raw_h_runs, writer_h_runs, floor_runs = [], [], [], [], []
    for _ in range(ROUNDS):
        raw_runs.append(_raw(bootstrap, meta.topic, keys, parts, payload))
        floor_runs.append(_raw(bootstrap, meta.topic, keys, parts, payload, on_delivery=report))
        offsets.clear()
        writer_runs.append(_writer(writer, keys, payload))
        raw_h_runs.append(_raw(bootstrap, meta.topic, keys, parts, payload, HEADERS))
        writer_h_runs.append(_writer(writer, keys, payload, HEADERS))
    raw_rates, writer_rates = [r for r, _ in raw_runs], [r for r, _ in writer_runs]
    raw, ours = max(raw_rates), max(writer_rates)

    # note_time: the call itself (it does not block), and until the mark is acknowledged.
    call_s = 0.0
    for i in range(NOTES):
        writer.write(payload, keys[i % KEYS])
        t0 = time.perf_counter()
        writer.note_time(i)
        call_s += time.perf_counter() - t0
    writer.flush()
    round_trip_s = 0.0
    for i in range(NOTES, NOTES + 50):
        writer.write(payload, keys[i % KEYS])
        t0 = time.perf_counter()
        writer.note_time(i)
        writer.flush()
        round_trip_s += time.perf_counter() - t0
    writer.close()
    return [
        f"{EVENTS} events of {PAYLOAD_BYTES} B, {KEYS} keys, 4 segments, best of {ROUNDS}",
        f"raw confluent-kafka Producer: {raw:,.0f} events/s  (runs: "
        + ", ".join(f"{r:,.0f}" for r in raw_rates)
        + ")",
        f"EventWriter (position tracking): {ours:,.0f} events/s  (runs: "
        + ", ".join(f"{r:,.0f}" for r in writer_rates)
        + ")",
        *_compared("without headers", raw_runs, writer_runs, "  (goal >= 0.95; CPU >= 0.8)"),
        *_compared(f"with {len(HEADERS)} headers", raw_h_runs, writer_h_runs, "  (goal >= 0.95)"),
        *_compared("against raw + a Python report per record (the floor)", floor_runs, writer_runs),
        f"note_time call: {call_s / NOTES * 1e6:,.0f} us (non-blocking, one record in flight)",
        f"note_time + flush until the mark is acknowledged: {round_trip_s / 50 * 1e3:,.2f} ms",
    ]


def _compared(
    what: str, raw_runs: list[tuple[float, float]], ours: list[tuple[float, float]], goal: str = ""
) -> list[str]:
    """Best against best (wall), least against least (the calling thread's CPU per event),
    and the range over the rounds (round i against round i)."""
    walls = [o / r for (o, _), (r, _) in zip(ours, raw_runs, strict=True)]
    cpus = [r / o for (_, o), (_, r) in zip(ours, raw_runs, strict=True)]
    best, best_raw = max(r for r, _ in ours), max(r for r, _ in raw_runs)
    cpu, cpu_raw = min(c for _, c in ours), min(c for _, c in raw_runs)
    return [
        f"{what}: raw {best_raw:,.0f} events/s, {cpu_raw:.2f} us/event; EventWriter "
        f"{best:,.0f} events/s, {cpu:.2f} us/event",
        f"ratio writer/raw {what}: wall {best / best_raw:.2f} (rounds {min(walls):.2f}-"
        f"{max(walls):.2f}), CPU {cpu_raw / cpu:.2f} (rounds {min(cpus):.2f}-{max(cpus):.2f})"
        + goal,
    ]
