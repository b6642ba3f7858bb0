"""Fault: poison and hostile records on the marks topic, through real Kafka and Spark.

Each record below is something anybody who may produce to the marks topic can
send. None may fail a batch; each must land in ``rejected_marks`` with its
reason and raw bytes; the honest writer's watermarks must keep coming, in
order, with no gap.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.controller_env import Env
from tests.faults.figures import report
from tests.integration.test_controller_job import check_sequence, wait_for
from tidemark.controller.naming import TIMESTAMP_TYPE
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.tables import REJECTED_MARKS, Reason, read_table, read_watermarks
from tidemark.pipelines.writing.producer import TidemarkProducer
from tidemark.schemas.codec import MAGIC
from tidemark.schemas.records import WriterMarkRecord

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow, pytest.mark.faults]

YEAR_MS = 365 * 86_400_000


def test_poison_and_hostile_marks_are_rejected_rows_and_the_stream_goes_on(
    spark: Any, controller_env: Env, kafka: str, unique: str
) -> None:
    env = controller_env
    stream = f"h{unique}/orders"
    env.create(stream, 1)
    settings = env.settings()
    writer = env.writer("w1", stream)
    now = int(time.time() * 1000)
    writer.write(b"e0", routing_key="k")
    writer.note_time(now)
    writer.flush()

    def mark(writer_id: str, t: int, position: dict[int, int]) -> bytes:
        return WriterMarkRecord(stream, writer_id, t, position).encode()

    def forged(writer_id: str, t: int, position: dict[int, int]) -> bytes:
        return WriterMarkRecord(stream, writer_id, t, position, instance="forger").encode()

    poison: list[tuple[bytes | None, bytes | None, str]] = [
        (b"\xff\xfe" + stream.encode(), mark("w9", now, {}), Reason.MALFORMED_KEY),
        (stream.encode(), None, Reason.MALFORMED),
        (stream.encode(), b"\x00" * 3, Reason.MALFORMED),
        (stream.encode(), MAGIC + b"\x07" * 8 + b"later", Reason.UNKNOWN_SCHEMA),
        (stream.encode(), mark("w1", now + 10 * YEAR_MS, {0: 1}), Reason.FUTURE_TIME),
        (stream.encode(), mark("w8", 2**62, {}), Reason.FUTURE_TIME),
        (stream.encode(), mark("w7", -5, {}), Reason.NEGATIVE_TIME),
        (stream.encode(), mark("", now, {}), Reason.MALFORMED),
        (stream.encode(), forged("w1", now + 3, {0: 1}), Reason.IMPERSONATED),
    ]
    instance = ControllerJob(spark, settings, f"c-{unique}").start()
    try:
        instance.wait_leading()
        assert env.store is not None
        from tidemark.controller.kafka.admin import StreamTopics

        topic_config = StreamTopics(kafka).topic_configs(env.cluster.marks_topic)
        assert topic_config[TIMESTAMP_TYPE] == "LogAppendTime"
        wait_for(lambda: len(read_watermarks(settings.delta_root, stream)) >= 1, instance)
        producer = Producer({"bootstrap.servers": kafka})
        for key, value, _ in poison:
            producer.produce(env.cluster.marks_topic, value=value, key=key, partition=0)
        assert producer.flush(10) == 0
        for i in range(1, 6):
            writer.write(f"e{i}".encode(), routing_key="k")
            writer.note_time(now + i)
            writer.flush()
            instance.process_all_available()
        wait_for(lambda: read_watermarks(settings.delta_root, stream)[-1].time >= now + 5, instance)
        wait_for(
            lambda: len(read_table(settings.delta_root, REJECTED_MARKS)) >= len(poison), instance
        )
    finally:
        writer.close()
        instance.stop()
    rejected = read_table(settings.delta_root, REJECTED_MARKS)
    by_reason = Counter(r["reason"] for r in rejected)
    marks = read_watermarks(settings.delta_root, stream)
    report(
        "hostile-marks",
        f"{len(poison)} hostile records -> rejected by reason "
        f"{dict(sorted(by_reason.items()))}; watermarks {len(marks)} "
        f"(last time now+{marks[-1].time - now}); query failures {len(instance.failures)}",
    )
    assert by_reason == Counter(reason for _, _, reason in poison)
    raw = {r["raw"] for r in rejected}
    assert all(v in raw for _, v, _ in poison if v is not None)
    (bad_key,) = [r for r in rejected if r["reason"] == Reason.MALFORMED_KEY]
    assert bad_key["stream"] == "\\xff\\xfe" + stream
    check_sequence(marks)
    assert marks[-1].time == now + 5  # the forged future mark did not move w1
    assert instance.failures == []


def test_forged_marks_cannot_take_over_a_dropin_writers_id(
    spark: Any, controller_env: Env, kafka: str, unique: str
) -> None:
    """The drop-in producer's marks carry its instance token, so a mark under its
    writer id with another token is ``impersonated``, one with none ``unregistered``; the
    watermark never follows the forger."""
    env = controller_env
    stream = f"d{unique}/orders"
    env.create(stream, 1)
    settings = env.settings()
    assert env.store is not None
    topic = env.store.get_stream(stream).topic
    app = TidemarkProducer(
        {"bootstrap.servers": kafka, "linger.ms": 1},
        stream=stream,
        writer_id="app",
        store=env.store,
        cluster=env.cluster,
    )
    now = int(time.time() * 1000)
    app.produce(topic, b"e0", "k", timestamp=now)
    app.note_time(now)
    assert app.flush(10) == 0
    forged = [
        WriterMarkRecord(stream, "app", now + 60_000, {0: 1}, instance="forger").encode(),
        WriterMarkRecord(stream, "app", now + 60_000, {0: 1}).encode(),  # no token (v1 alike)
    ]
    instance = ControllerJob(spark, settings, f"c-{unique}").start()
    try:
        instance.wait_leading()
        wait_for(lambda: len(read_watermarks(settings.delta_root, stream)) >= 1, instance)
        producer = Producer({"bootstrap.servers": kafka})
        for value in forged:
            producer.produce(env.cluster.marks_topic, value=value, key=stream.encode(), partition=0)
        assert producer.flush(10) == 0
        for i in range(1, 4):
            app.produce(topic, f"e{i}".encode(), "k", timestamp=now + i)
            app.note_time(now + i)
            assert app.flush(10) == 0
            instance.process_all_available()
        wait_for(lambda: len(read_table(settings.delta_root, REJECTED_MARKS)) >= 2, instance)
        wait_for(lambda: read_watermarks(settings.delta_root, stream)[-1].time >= now + 3, instance)
    finally:
        app.close()
        instance.stop()
    rejected = read_table(settings.delta_root, REJECTED_MARKS)
    assert sorted((r["writer"], r["reason"]) for r in rejected) == [
        ("app", Reason.IMPERSONATED),
        ("app", Reason.UNREGISTERED),
    ]
    assert {r["raw"] for r in rejected} == set(forged)
    marks = read_watermarks(settings.delta_root, stream)
    check_sequence(marks)
    assert [m.time for m in marks][-1] == now + 3  # never the forged now + 60 s
    assert max(m.time for m in marks) == now + 3
    assert instance.failures == []
