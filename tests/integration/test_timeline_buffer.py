"""``tidemark timeline ingest``: a time buffer between two topics, exactly once through kill -9.

Real Kafka and PostgreSQL; the buffer runs as its own process, killed twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidemark.environment import POSTGRES_DSN

RECORDS = 100_000
DELAY_MS = 5_000


def _topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 2, 1) for n in names]).values():
        future.result(30)


class _Reader(threading.Thread):
    """Reads the target topic (committed records only), noting when each arrived."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.got: list[tuple[bytes, bytes, list, int, float]] = []
        self.stop = threading.Event()
        self.errors: list[str] = []
        """The consumer's errors (a broker away, ...), to explain a failed wait."""
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"check-{topic}",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])

    def run(self) -> None:
        while not self.stop.is_set():
            for m in self.consumer.consume(1_000, 0.2):
                if m.error() is None:
                    arrived_ms = time.time() * 1000
                    self.got.append((m.key(), m.value(), m.headers(), m.timestamp()[1], arrived_ms))
                else:
                    self.errors.append(str(m.error()))
        self.consumer.close()


def _start(bootstrap: str, source: str, target: str, env: dict[str, str]) -> subprocess.Popen:
    argv = [sys.executable, "-c", "from tidemark.cli.main import main; main()"]
    argv += ["timeline", "ingest", "--from", source, "--to", target, "--delay", "5s"]
    argv += ["--bootstrap", bootstrap, "--batch-size", "2000"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait(until, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.timeout(300)
def test_buffer_holds_every_record_once_byte_for_byte_through_two_kills(kafka, postgres, unique):
    source, target = f"buf-in-{unique}", f"buf-out-{unique}"
    _topics(kafka, source, target)
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 20, "acks": "all"})
    sent = {}
    for i in range(RECORDS):
        key = f"k{i}".encode()
        value = None if i % 10_000 == 7 else (b"v%d-" % i) * 8  # tombstones too
        headers = [("trace", b"t%d" % i), ("empty", None), ("trace", b"again")]
        ts = int(time.time() * 1000) - i % 1_000  # not the produce time: must be kept
        while True:
            try:
                producer.produce(source, key=key, value=value, headers=headers, timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
        sent[key] = (value, headers, ts)
    assert producer.flush(30) == 0
    reader = _Reader(kafka, target)
    reader.start()
    env = {**os.environ, POSTGRES_DSN: postgres}
    started = time.monotonic()
    try:
        # Kill 1 while it ingests, kill 2 while it relays.
        proc = _start(kafka, source, target, env)
        time.sleep(3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc = _start(kafka, source, target, env)
        _wait(lambda: len(reader.got) > RECORDS // 5, 60)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc = _start(kafka, source, target, env)
        _wait(lambda: len(reader.got) >= RECORDS, 90)
        time.sleep(1.0)  # anything more would be a duplicate
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err.decode()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.stop.set()
        reader.join(10)
    print(f"buffer: {RECORDS} records through two kills in {time.monotonic() - started:.1f} s")
    keys = [g[0] for g in reader.got]
    assert len(keys) == RECORDS, f"{len(keys)} delivered, {len(set(keys))} distinct"
    assert set(keys) == set(sent)
    for key, value, headers, timestamp_ms, arrived_ms in reader.got:
        assert (value, headers, timestamp_ms) == sent[key]
        assert arrived_ms >= timestamp_ms + DELAY_MS, (key, arrived_ms - timestamp_ms)


def test_buffer_ingest_exports_its_clock_drift(kafka, postgres, unique):
    from prometheus_client import REGISTRY

    from tidemark.pipelines.timeline.buffer import BufferIngest
    from tidemark.pipelines.timeline.config import BufferConfig, DueRule

    source = f"drift-{unique}"
    _topics(kafka, source)
    config = BufferConfig(source, f"{source}-out", DueRule(delay_ms=1))
    ingest = BufferIngest(postgres, kafka, config)
    ingest.close()
    drift = REGISTRY.get_sample_value(
        "tidemark_timeline_clock_drift_seconds", {"timeline": config.timeline}
    )
    assert drift is not None and abs(drift) < 5
