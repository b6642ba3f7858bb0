"""The controller's Prometheus metrics from a real run (Kafka, ZooKeeper, Spark, Delta)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from tests.integration.test_controller_job import produce, wait_for
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.metrics import ControllerMetrics
from tidemark.jobs.tables import REJECTED_MARKS, read_table, read_watermarks
from tidemark.schemas.records import WriterMarkRecord

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def test_metrics_match_the_tables(spark, controller_env, unique):
    env = controller_env
    stream = f"m{unique}/s"
    env.create(stream, 1)
    settings = env.settings()
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    w = env.writer("w1", stream)
    instance = ControllerJob(spark, settings, f"c-{unique}", metrics=metrics).start()
    try:
        instance.wait_leading()
        for t in (1_000, 2_000, 3_000):
            w.write(b"x", routing_key="k")
            w.note_time(t)
            w.flush()
            instance.process_all_available()
        stale = WriterMarkRecord(stream, "w1", 500, {0: 1}, instance=w.instance)  # w1's own
        produce(env, stream, stale.encode(), 0)
        wait_for(
            lambda: (
                read_table(settings.delta_root, REJECTED_MARKS)
                and read_watermarks(settings.delta_root, stream)[-1].time >= 3_000
            ),
            instance,
        )
        instance.process_all_available()
    finally:
        w.close()
        instance.stop()

    def value(name, **labels):
        return registry.get_sample_value(name, labels) or 0.0

    marks = read_watermarks(settings.delta_root, stream)
    assert value("tidemark_controller_watermarks_total", stream=stream) == len(marks)
    assert (
        value("tidemark_controller_marks_rejected_total", stream=stream, reason="stale_time") == 1
    )
    assert value("tidemark_controller_freshness_seconds_count", stream=stream) == len(marks)
    batches = value("tidemark_controller_batches_total")
    assert batches >= 3
    assert value("tidemark_controller_batch_duration_seconds_count") == batches
    assert value("tidemark_controller_marks_accepted_total") >= 3
