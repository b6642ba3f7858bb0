"""The Prometheus metrics: controller (tidemark.jobs.metrics), timeline consumer, exposition."""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, generate_latest

import tidemark
from tidemark.jobs.config import ControllerSettings
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.metrics import ControllerMetrics
from tidemark.pipelines.build_info import register_build_info


def _value(registry, name, labels=None):
    value = registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


def watermark_row(stream, seq, time_ms, emitted_at, noted_at=None):
    fields = {"stream": stream, "seq": seq, "time": time_ms, "emitted_at": emitted_at}
    return {"kind": "watermark", "watermark": {**fields, "noted_at": noted_at}}


def rejected_row(stream, reason):
    return {"kind": "rejected", "rejected": {"stream": stream, "reason": reason}}


def test_controller_metrics_from_batches_and_progress():
    registry = CollectorRegistry()
    now = [100_000]
    metrics = ControllerMetrics(registry, clock_ms=lambda: now[0])
    observe = metrics.batch_observer(3)
    observe(
        [
            watermark_row("a/s", 0, 90_000, 99_500),
            watermark_row("a/s", 1, 95_000, 99_800),
            watermark_row("b/s", 0, 60_000, 99_000),
            rejected_row("a/s", "stale_time"),
            rejected_row("a/s", "stale_time"),
            rejected_row("b/s", "malformed"),
        ],
        7,
        0.25,
    )
    # the stream's lag is the time service's (tidemark_stream_watermark_lag_seconds) only
    assert (
        registry.get_sample_value("tidemark_controller_watermark_lag_seconds", {"stream": "a/s"})
        is None
    )
    assert _value(registry, "tidemark_controller_watermarks_total", {"stream": "a/s"}) == 2
    assert (
        _value(
            registry,
            "tidemark_controller_marks_rejected_total",
            {"stream": "a/s", "reason": "stale_time"},
        )
        == 2
    )
    # freshness: committed at 100 000, emitted at 99 500 / 99 800 / 99 000
    assert _value(registry, "tidemark_controller_freshness_seconds_sum", {"stream": "a/s"}) == (
        0.5 + 0.2
    )
    # one query runs every bucket: the per-query families carry no (constant) label
    assert _value(registry, "tidemark_controller_batches_total") == 1
    assert _value(registry, "tidemark_controller_batch_duration_seconds_sum") == 0.25
    # progress of batch 7 read 10 marks, 3 of them rejected: 7 accepted, counted once
    metrics.observe_progress(3, {"batchId": 7, "numInputRows": 10})
    metrics.observe_progress(3, {"batchId": 7, "numInputRows": 10})
    metrics.observe_progress(3, None)
    assert _value(registry, "tidemark_controller_marks_accepted_total", {}) == 7
    metrics.observe_progress(3, {"batchId": 8, "numInputRows": 4})  # no rejects seen for 8
    assert _value(registry, "tidemark_controller_marks_accepted_total", {}) == 11


def test_an_idle_progress_report_does_not_hide_the_batch_that_takes_its_id():
    """Without no-data batches Spark reports idleness with the *next* batch id and no
    ``addBatch`` phase; the batch that then runs under that id is still counted."""
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    metrics.observe_progress("all", {"batchId": 5, "numInputRows": 0, "durationMs": {}})
    metrics.observe_progress(
        "all", {"batchId": 5, "numInputRows": 6, "durationMs": {"addBatch": 120}}
    )
    assert _value(registry, "tidemark_controller_marks_accepted_total", {}) == 6


def test_build_info_names_the_version_once_per_registry():
    registry = CollectorRegistry()
    ControllerMetrics(registry)
    register_build_info(registry)  # a second exporter in the same process: no duplicate
    text = generate_latest(registry).decode()
    assert text.count("# TYPE tidemark_build_info gauge") == 1
    labels = {"version": tidemark.__version__, "python": platform.python_version()}
    assert registry.get_sample_value("tidemark_build_info", labels) == 1


def test_timeline_consumer_metrics_are_exported():
    from prometheus_client import REGISTRY

    from tidemark.pipelines.timeline.clock import ClockDrift
    from tidemark.pipelines.timeline.consumer import _Metrics
    from tidemark.pipelines.timeline.metrics import DriftGauge
    from tidemark.pipelines.timeline.model import Lease

    drift = DriftGauge("unit-metrics", lambda: ClockDrift(drift_ms=250.0, rtt_ms=1.0))
    metrics = _Metrics("unit-metrics", drift)
    before = _value(REGISTRY, "tidemark_timeline_delivered_total", {"timeline": "unit-metrics"})
    lease = Lease(message=None, due_ms=0, leased_at_ms=0)  # only due_ms is read
    metrics.record([lease, lease])
    labels = {"timeline": "unit-metrics"}
    assert _value(REGISTRY, "tidemark_timeline_delivered_total", labels) == before + 2
    assert _value(REGISTRY, "tidemark_timeline_clock_drift_seconds", labels) == 0.25
    assert _value(REGISTRY, "tidemark_timeline_due_to_delivery_lag_seconds_count", labels) == 2


class FakeQuery:
    """A StreamingQuery's progress, as Spark reports it (the last one and recent ones)."""

    def __init__(self):
        self.recentProgress = []

    @property
    def lastProgress(self):
        return self.recentProgress[-1] if self.recentProgress else None

    def finish(self, batch_id, rows):
        self.recentProgress.append({"batchId": batch_id, "numInputRows": rows})


def test_batches_missed_between_two_looks_are_counted_from_recent_progress():
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    query = FakeQuery()
    metrics.observe_query(0, query)  # nothing yet
    query.finish(0, 5)
    metrics.observe_query(0, query)
    query.finish(1, 2)
    query.finish(2, 3)  # two batches since the last look
    metrics.observe_query(0, query)
    metrics.observe_query(0, query)  # nothing new
    assert _value(registry, "tidemark_controller_marks_accepted_total", {}) == 10


def test_freshness_is_measured_from_the_note_when_the_mark_time_is_known():
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry, clock_ms=lambda: 100_000)
    noted = watermark_row("a/s", 0, 90_000, 99_500, noted_at=98_000)
    metrics.batch_observer("all")([noted, watermark_row("b/s", 0, 90_000, 99_500)], 1, 0.1)
    # note at 98 000 -> committed at 100 000: 2 s (not the 0.5 s since the cycle)
    assert _value(registry, "tidemark_controller_freshness_seconds_sum", {"stream": "a/s"}) == 2.0
    # no mark timestamp (a topic not in LogAppendTime): from the cycle
    assert _value(registry, "tidemark_controller_freshness_seconds_sum", {"stream": "b/s"}) == 0.5


def test_the_leader_gauge_follows_the_election_as_a_leader_task():
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    job = ControllerJob(None, ControllerSettings("k:1", "z:2", "/d", "/c"), "c1", metrics=metrics)
    assert metrics in job._tasks()  # told of every change of leadership
    assert registry.get_sample_value("tidemark_controller_leader") == 0
    metrics.lead(True)
    assert registry.get_sample_value("tidemark_controller_leader") == 1
    metrics.lead(False)
    assert registry.get_sample_value("tidemark_controller_leader") == 0
    metrics.lead(True)
    metrics.close()
    assert registry.get_sample_value("tidemark_controller_leader") == 0


def test_observing_a_batch_of_lags_is_observing_each():
    """The relay's one pass over a batch leaves the histogram as one observe a value does,
    bucket edges, zero and values past the last bound included."""
    from prometheus_client import Histogram

    from tidemark.pipelines.timeline.metrics import observe_all

    registry = CollectorRegistry()
    lag = Histogram("lag_seconds", "lags", ["t"], buckets=(0.01, 0.1, 1.0), registry=registry)
    amounts = [0.0, 0.005, 0.01, 0.0100001, 0.1, 0.5, 1.0, 7.5, 0.01]
    for amount in amounts:
        lag.labels("each").observe(amount)
    observe_all(lag.labels("all"), amounts)
    observe_all(lag.labels("all"), [])
    for le in ("0.01", "0.1", "1.0", "+Inf"):
        each = _value(registry, "lag_seconds_bucket", {"t": "each", "le": le})
        assert _value(registry, "lag_seconds_bucket", {"t": "all", "le": le}) == each > 0
    for sample in ("lag_seconds_count", "lag_seconds_sum"):
        each = _value(registry, sample, {"t": "each"})
        assert _value(registry, sample, {"t": "all"}) == each > 0
