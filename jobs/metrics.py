"""Prometheus metrics of the watermark controller (``prometheus_client``).

    metrics = ControllerMetrics()                       # the default registry
    sink.observer = metrics.batch_observer("all")    # the hook: after each batch's appends
    metrics.observe_query("all", query)              # from the instance's loop
    start_http_server(9464)      # or `tidemark controller run --metrics-port 9464`

The metrics, with their labels (``stream`` = ``scope/name``, ``reason`` = a
``rejected_marks`` reason). The job runs every bucket in one query, so the
per-query families carry no label; a stream's watermark lag is the time
service's ``tidemark_stream_watermark_lag_seconds`` (it reads every stream's
watermarks from Delta, this process only the ones it wrote since it started):

- ``tidemark_controller_freshness_seconds{stream}`` (histogram) -- from
  the note to the watermark being visible: from the Kafka timestamp of the
  newest writer mark the watermark was made of (the marks topic is
  ``LogAppendTime``: when the note reached the broker; the processor's
  ``noted_at``) to the watermark's commit to Delta, i.e. visible to
  readers. When the mark's timestamp is unknown (a topic not in
  ``LogAppendTime``) it is measured from the cycle that emitted it
  (``emitted_at``) instead;
- ``tidemark_controller_watermarks_total{stream}`` (counter) -- watermarks written;
- ``tidemark_controller_marks_rejected_total{stream,reason}`` (counter);
- ``tidemark_controller_marks_accepted_total`` (counter) -- marks read by the
  query's batches minus the ones rejected (Spark's progress reports input rows
  per query, not per stream);
- ``tidemark_controller_batch_duration_seconds`` (histogram) -- the stateful
  stage and the Delta appends of one micro-batch, as timed by the sink;
- ``tidemark_controller_batches_total`` (counter);
- ``tidemark_controller_leader`` (gauge) -- 1 while this driver leads (runs the
  query), 0 while it stands by: the sum over the drivers is 1 in a healthy cluster;
- ``tidemark_controller_due_records_failed_total`` (counter) -- due records
  Kafka did not acknowledge (:mod:`tidemark.jobs.due`: each is produced again);
- ``tidemark_build_info{version,python}`` (gauge, 1) -- :mod:`tidemark.pipelines.build_info`.

The hook into the job is deliberately small: the query's ``foreachBatch``
(:class:`~tidemark.jobs.controller_job.Batches`) calls its :class:`~tidemark.jobs.sink.DeltaSink`'s
``observer(rows, batch_id, duration_s)`` after a batch is written,
and the instance's loop passes each query to :meth:`ControllerMetrics.observe_query`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from tidemark.pipelines.build_info import register_build_info

PREFIX = "tidemark_controller"

BatchObserver = Callable[[Sequence[Mapping[str, Any]], int, float], None]

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ControllerMetrics:
    """The controller's metrics in ``registry`` (``prometheus_client``'s default one)."""

    def __init__(
        self,
        registry: CollectorRegistry = REGISTRY,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._clock_ms = clock_ms
        register_build_info(registry)

        def counter(name: str, documentation: str, *labels: str) -> Counter:
            return Counter(f"{PREFIX}_{name}", documentation, labels, registry=registry)

        def latency(name: str, documentation: str, *labels: str) -> Histogram:
            return Histogram(
                f"{PREFIX}_{name}",
                documentation,
                labels,
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            )

        self.freshness = latency(
            "freshness_seconds",
            "From the newest note a watermark was made of (its mark's Kafka timestamp) "
            "to the watermark's commit in Delta.",
            "stream",
        )
        self.watermarks = counter("watermarks", "Watermarks written.", "stream")
        self.rejected = counter(
            "marks_rejected", "Writer marks refused, by reason.", "stream", "reason"
        )
        self.accepted = counter(
            "marks_accepted", "Marks read by the query's batches minus the rejected ones."
        )
        self.batch_duration = latency(
            "batch_duration_seconds",
            "One micro-batch: the stateful stage and the Delta appends.",
        )
        self.batches = counter("batches", "Micro-batches run.")
        self.leader = Gauge(
            f"{PREFIX}_leader",
            "1 while this driver leads (runs the query), 0 while it stands by.",
            registry=registry,
        )
        self.leader.set(0)
        self.due_failed = counter(
            "due_records_failed", "Due records Kafka did not acknowledge (each is produced again)."
        )
        self._lock = threading.Lock()
        self._rejected_by_batch: dict[tuple[int | str, int], int] = {}
        self._progressed: dict[int | str, int] = {}

    def lead(self, leading: bool) -> None:
        """A leader task of the controller job: the ``leader`` gauge follows the election."""
        self.leader.set(1 if leading else 0)

    def close(self) -> None:
        self.leader.set(0)

    def batch_observer(self, bucket: int | str) -> BatchObserver:
        """The sink's hook for the query ``bucket`` (the key that pairs its batches with
        their progress reports; no label): ``observer(rows, batch_id, duration_s)``."""

        def observe(rows: Sequence[Mapping[str, Any]], batch_id: int, duration_s: float) -> None:
            self.observe_batch(bucket, rows, batch_id, duration_s)

        return observe

    def observe_batch(
        self, bucket: int | str, rows: Sequence[Mapping[str, Any]], batch_id: int, duration_s: float
    ) -> None:
        """One written batch: its output rows (``tidemark.jobs.processor.OUTPUT_SCHEMA``)."""
        now = self._clock_ms()
        self.batches.inc()
        self.batch_duration.observe(duration_s)
        rejected = 0
        for row in rows:
            kind = str(row.get("kind"))
            fields = row.get(kind) or {}  # the kind's own fields (its struct)
            stream = str(fields.get("stream") or "")
            if kind == "watermark":
                self.watermarks.labels(stream).inc()
                since = fields.get("noted_at") or fields.get("emitted_at")
                if since:
                    self.freshness.labels(stream).observe(max(0, now - int(since)) / 1000)
            elif kind == "rejected":
                rejected += 1
                self.rejected.labels(stream, str(fields.get("reason"))).inc()
        with self._lock:
            self._rejected_by_batch[(bucket, batch_id)] = rejected
            if len(self._rejected_by_batch) > 10_000:  # progress never came for old ones
                self._rejected_by_batch.pop(next(iter(self._rejected_by_batch)))

    def observe_query(self, bucket: int | str, query: Any) -> None:
        """Count the batches ``query`` (a StreamingQuery) completed since the last call:
        its ``lastProgress``, or its ``recentProgress`` when batches were missed."""
        last = query.lastProgress
        if not last:
            return
        with self._lock:
            seen = self._progressed.get(bucket, -1)
        batch_id = int(last.get("batchId", -1))
        if batch_id <= seen:
            return
        progresses = [last] if seen < 0 or batch_id == seen + 1 else list(query.recentProgress)
        for progress in sorted(progresses, key=lambda p: int(p.get("batchId", -1))):
            self.observe_progress(bucket, progress)

    def observe_progress(self, bucket: int | str, progress: Mapping[str, Any] | None) -> None:
        """A query's ``lastProgress``: counts each batch's input once. An idle report (no
        ``addBatch`` phase; Spark numbers it with the *next* batch id) is not a batch."""
        if not progress:
            return
        durations = progress.get("durationMs")
        if durations is not None and "addBatch" not in durations:
            return
        batch_id = int(progress.get("batchId", -1))
        with self._lock:
            if self._progressed.get(bucket, -1) >= batch_id:
                return
            self._progressed[bucket] = batch_id
            rejected = self._rejected_by_batch.pop((bucket, batch_id), 0)
        read = int(progress.get("numInputRows") or 0)
        if read > rejected:
            self.accepted.inc(read - rejected)


_SHARED: ControllerMetrics | None = None
_SHARED_LOCK = threading.Lock()


def shared_metrics() -> ControllerMetrics:
    """One :class:`ControllerMetrics` per process, in the default registry."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ControllerMetrics()
        return _SHARED


def serve_metrics(port: int, addr: str = "0.0.0.0") -> ControllerMetrics:
    """Serve the default registry on ``addr:port`` (a daemon thread); the shared metrics."""
    start_http_server(port, addr)
    return shared_metrics()


__all__ = ["PREFIX", "BatchObserver", "ControllerMetrics", "serve_metrics", "shared_metrics"]
