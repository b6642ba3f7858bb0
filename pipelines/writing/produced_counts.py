"""Records produced per partition, from librdkafka's statistics reports; no I/O.

    >>> reports = StatisticsReports()
    >>> reports('{"ts": 5000, "topics": {"t": {"partitions": {"-1": {"msgs": 2}, '
    ...         '"0": {"msgs": 2}}}}}')
    >>> reports.since(4_000).produced("t"), reports.since(6_000)
    ({0: 2}, None)

A producer configured with ``statistics.interval.ms`` and ``stats_cb`` gets
a JSON report every interval (served by ``poll``/``flush``). Per topic and
partition, ``msgs`` is the "total number of messages produced (possibly not
yet transmitted)": counted once per record when it is queued for its
partition (librdkafka's ``rd_kafka_toppar_enq_msg``), not again when it is
retried, and including records that later fail. Records queued before the
topic's metadata is known are counted on the unassigned partition ``-1``
too, then on their partition: ``-1`` is left out here. ``ts`` is
librdkafka's clock when the report was made: ``CLOCK_MONOTONIC`` in
microseconds, the clock of ``time.monotonic()`` on Linux.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

StatsCallback = Callable[[str], None]


class StatisticsReport:
    """One parsed report."""

    def __init__(self, report: Mapping[str, Any]) -> None:
        self.ts_us = int(report["ts"])
        self._topics: Mapping[str, Any] = report.get("topics", {})

    def produced(self, topic: str) -> dict[int, int]:
        """Partition -> records produced to it since the producer started (partitions >= 0)."""
        partitions = self._topics.get(topic, {}).get("partitions", {})
        return {int(p): int(v["msgs"]) for p, v in partitions.items() if int(p) >= 0}


class StatisticsReports:
    """A ``stats_cb``: keeps the latest report (parsed only when asked), then calls
    ``forward`` (the application's own ``stats_cb``) with it."""

    def __init__(self, forward: StatsCallback | None = None) -> None:
        self.latest: str | None = None
        self.forward = forward
        self._parsed: tuple[str, StatisticsReport] | None = None

    def __call__(self, raw: str) -> None:
        self.latest = raw
        if self.forward is not None:
            self.forward(raw)

    def since(self, ts_us: float) -> StatisticsReport | None:
        """The latest report if it was made at or after ``ts_us`` (librdkafka's clock)."""
        raw = self.latest
        if raw is None:
            return None
        if self._parsed is None or self._parsed[0] is not raw:
            self._parsed = (raw, StatisticsReport(json.loads(raw)))
        report = self._parsed[1]
        return report if report.ts_us >= ts_us else None


__all__ = ["StatisticsReport", "StatisticsReports", "StatsCallback"]
