"""The time buffer follows its source, and every timeline process keeps its drift fresh.

Real Kafka, PostgreSQL and (for stream time) a Delta ``marks`` table; the guide's
``--at-header`` and ``--until-stream-time`` examples run as the CLI runs them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from prometheus_client import REGISTRY

from tests.integration.test_timeline_buffer import _Reader
from tidemark.controller.delta.tables import append_watermarks
from tidemark.controller.model import Watermark
from tidemark.environment import DELTA_ROOT, POSTGRES_DSN
from tidemark.pipelines.timeline import metrics
from tidemark.pipelines.timeline.buffer import BufferIngest, BufferRelay, TimelineBuffer
from tidemark.pipelines.timeline.config import (
    BufferConfig,
    ConsumerConfig,
    DueRule,
    IngestConfig,
    TimelineConfig,
)
from tidemark.pipelines.timeline.consumer import TimelineConsumer
from tidemark.pipelines.timeline.ingest import TimelineIngester
from tidemark.pipelines.timeline.producer import TimelineProducer
from tidemark.pipelines.timeline.store import TimelineStore


def _topics(bootstrap: str, partitions: int, *names: str) -> None:
    """Topics that keep every record, as a stream's do: the stream-time test's records
    are stamped years ago, and a broker's time retention deletes such a segment at its
    next check (every few seconds on the test broker), before a slow ingest reads it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    keep = {"retention.ms": "-1"}
    topics = [NewTopic(n, partitions, 1, config=keep) for n in names]
    for future in admin.create_topics(topics).values():
        future.result(30)


def _produce(bootstrap: str, topic: str, records: list[dict]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for record in records:
        producer.produce(topic, **record)
    assert producer.flush(30) == 0


class _Target(_Reader):
    """The buffer test's reader of the target topic, as a block, with when each value
    first arrived (ms)."""

    @property
    def arrived(self) -> dict[bytes, float]:
        first: dict[bytes, float] = {}
        for _key, value, _headers, _ts, at in list(self.got):
            first.setdefault(value, at)
        return first

    def __enter__(self) -> _Target:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(10)


def _wait(until, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_buffer_reads_partitions_added_to_its_source_while_it_runs(kafka, postgres, unique):
    source, target = f"grow-in-{unique}", f"grow-out-{unique}"
    _topics(kafka, 1, source, target)
    config = BufferConfig(source, target, DueRule(delay_ms=1), partitions_refresh_ms=200)
    _produce(kafka, source, [{"value": b"p0-before", "partition": 0}])
    stop = threading.Event()
    with (
        _Target(kafka, target) as seen,
        TimelineBuffer(
            BufferIngest(postgres, kafka, config), BufferRelay(postgres, kafka, config)
        ) as buffer,
    ):
        runner = threading.Thread(target=buffer.run, args=(stop,), daemon=True)
        runner.start()
        try:
            _wait(lambda: b"p0-before" in seen.arrived, 60, "the first record")
            admin = AdminClient({"bootstrap.servers": kafka})
            admin.create_partitions([NewPartitions(source, 3)])[source].result(30)
            added = [{"value": f"p{p}-added".encode(), "partition": p} for p in (0, 1, 2)]
            _produce(kafka, source, added)
            wanted = {r["value"] for r in added}
            _wait(lambda: wanted <= set(seen.arrived), 60, "the added partitions' records")
        finally:
            stop.set()
            runner.join(30)
    assert buffer.ingest.read == 4  # each once


def test_every_timeline_process_measures_its_clock_drift_again(
    kafka, postgres, unique, monkeypatch
):
    monkeypatch.setattr(metrics, "DRIFT_REFRESH_S", 0.05)
    timeline = f"drift-{unique}"
    source = f"drift-in-{unique}"
    _topics(kafka, 1, source)
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(timeline, buckets=2))
    buffer_config = BufferConfig(source, f"{source}-out", DueRule(delay_ms=1))
    producer = TimelineProducer(postgres, timeline, "g")
    ingest = BufferIngest(postgres, kafka, buffer_config)
    ingester = TimelineIngester(postgres, kafka, IngestConfig(source, group_id=f"g-{unique}"))
    consumer = TimelineConsumer(
        postgres, timeline, ConsumerConfig("c", heartbeat_ms=10, member_ttl_ms=1_000)
    )
    steps = [
        (timeline, lambda: producer.put(b"x", timestamp_ms=0)),
        (timeline, lambda: consumer.poll(timeout_ms=10)),  # on its heartbeat
        (buffer_config.timeline, lambda: ingest.run_once(timeout_ms=10)),
        (f"ingest:{source}", lambda: ingester.run_once(timeout_ms=10)),
    ]
    try:
        for label, step in steps:
            gauge = metrics.CLOCK_DRIFT.labels(label)
            gauge.set(999)  # a stale figure: the next due measurement replaces it
            time.sleep(0.1)
            step()
            drift = REGISTRY.get_sample_value(
                "tidemark_timeline_clock_drift_seconds", {"timeline": label}
            )
            assert drift is not None and abs(drift) < 5, (label, drift)
    finally:
        producer.close()
        consumer.close()
        ingest.close()
        ingester.close()


def _ingest(kafka: str, postgres: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    # -v: a failed wait shows how far the ingest got (its INFO log, with times)
    argv = [sys.executable, "-m", "tidemark.cli.main", "-v", "timeline", "ingest", *args]
    argv += ["--bootstrap", kafka]
    return subprocess.Popen(
        argv,
        # PYTHONFAULTHANDLER: SIGABRT prints every thread's stack (a failed wait's)
        env={**os.environ, POSTGRES_DSN: postgres, "PYTHONFAULTHANDLER": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _stopped(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    if proc.stdout is not None and proc.stdout.closed:  # read already, by a failed wait
        proc.wait(60)
        return ""
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode()


@pytest.mark.timeout(180)
def test_at_header_releases_each_record_at_its_header_time(kafka, postgres, unique):
    source, target = f"jobs-{unique}", f"jobs-due-{unique}"
    _topics(kafka, 1, source, target)

    def at(due_ms: int) -> list[tuple[str, bytes]]:
        return [("due-at-ms", str(due_ms).encode())]

    with _Target(kafka, target) as seen:
        proc = _ingest(
            kafka, postgres, {}, "--from", source, "--to", target, "--at-header", "due-at-ms"
        )
        try:
            # a record without the header is due at once (and logged); one due in two
            # minutes waits meanwhile
            far = int(time.time() * 1000) + 120_000
            _produce(kafka, source, [{"value": b"far", "headers": at(far)}, {"value": b"none"}])
            _wait(lambda: b"none" in seen.arrived, 60, "the record without a header")
            now = int(time.time() * 1000)
            due = {b"soon": now + 2_000, b"later": now + 4_000}
            _produce(kafka, source, [{"value": v, "headers": at(t)} for v, t in due.items()])
            _wait(lambda: b"later" in seen.arrived, 60, "the records with header times")
        finally:
            _stopped(proc)
    assert b"far" not in seen.arrived
    for value, due_ms in due.items():
        assert seen.arrived[value] >= due_ms, (value, seen.arrived[value] - due_ms)
    assert seen.arrived[b"soon"] < seen.arrived[b"later"]


@pytest.mark.timeout(300)
def test_until_stream_time_releases_records_as_the_watermark_passes_them(
    kafka, postgres, unique, tmp_path
):
    source, target, stream = f"events-{unique}", f"closed-{unique}", f"s{unique}/orders"
    root = str(tmp_path / "delta")
    _topics(kafka, 1, source, target)
    t = 1_700_000_000_000
    _produce(kafka, source, [{"value": b"a", "timestamp": t}, {"value": b"b", "timestamp": t + 10}])
    seqs = iter(range(10))

    def watermark(time_ms: int) -> None:
        append_watermarks(root, [Watermark(stream, time_ms, time_ms, {0: 1}, next(seqs))])

    watermark(t - 1)  # below both: nothing is due
    with _Target(kafka, target) as seen:
        proc = _ingest(
            kafka,
            postgres,
            {DELTA_ROOT: root},
            "--from",
            source,
            "--to",
            target,
            "--until-stream-time",
            stream,
        )
        try:
            with TimelineStore(postgres) as store:
                store.migrate()  # the test may look before the ingest has made the tables
                timeline = f"buffer.{source}.{target}"
                try:
                    _wait(
                        lambda: (
                            timeline in {t.name for t in store.timelines()}
                            and store.count(timeline).waiting == 2
                        ),
                        120,  # the ingest process starts, then reads: slow on busy cores
                        "both records held",
                    )
                except AssertionError as exc:  # what the store and the ingest said
                    known = timeline in {t.name for t in store.timelines()}
                    counted = store.count(timeline) if known else None
                    proc.send_signal(signal.SIGABRT)  # where each thread stands
                    out, err = proc.communicate(timeout=60)
                    raise AssertionError(
                        f"{exc}: timeline known {known}, count {counted}, ingest exit "
                        f"{proc.returncode}: {out.decode()[-1000:]} {err.decode()[-8000:]}"
                    ) from exc
            time.sleep(1.0)  # the relay's stream-time refreshes pass with nothing due
            assert seen.arrived == {}
            watermark(t)
            _wait(lambda: b"a" in seen.arrived, 60, "the record at the watermark")
            time.sleep(1.0)
            assert set(seen.arrived) == {b"a"}  # the later one still waits
            watermark(t + 10)
            _wait(lambda: b"b" in seen.arrived, 60, "the second record")
        finally:
            _stopped(proc)
