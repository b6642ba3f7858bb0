"""Prometheus metrics of timeline consumers (``prometheus_client``'s default registry).

- ``tidemark_timeline_due_to_delivery_lag_seconds{timeline}`` (histogram) --
  when a lease reaches the caller: this client's clock, corrected by the
  measured drift, minus the message's due time;
- ``tidemark_timeline_delivered_total{timeline}`` (counter) -- leases handed out;
- ``tidemark_timeline_clock_drift_seconds{timeline}`` (gauge) -- the
  database's clock minus this client's (> 0: the database is ahead), measured
  again every ``DRIFT_REFRESH_S`` by every timeline process: producer,
  consumer, relay, buffer, ingest (:class:`DriftGauge`);
- ``tidemark_timeline_created_total{timeline}`` (counter) -- messages a
  producer or an ingest stored;
- ``tidemark_timeline_relayed_total{timeline}`` (counter) -- messages a relay or
  a buffer delivered to Kafka;
- ``tidemark_timeline_purged_total`` (counter) -- deleted messages purged.

Each CLI host (``relay``, ``ingest``, ``purge``) serves them on ``--metrics-port``.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from tidemark.pipelines.timeline.clock import ClockDrift

DUE_TO_DELIVERY_LAG = Histogram(
    "tidemark_timeline_due_to_delivery_lag_seconds",
    "Delivery time (client clock corrected by drift) minus the message's due time.",
    ["timeline"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
DELIVERED = Counter("tidemark_timeline_delivered", "Leases handed to callers.", ["timeline"])
CLOCK_DRIFT = Gauge(
    "tidemark_timeline_clock_drift_seconds",
    "The database's clock minus this client's (> 0: the database is ahead).",
    ["timeline"],
)

CREATED = Counter(
    "tidemark_timeline_created", "Messages stored by a producer or ingest.", ["timeline"]
)
RELAYED = Counter(
    "tidemark_timeline_relayed", "Messages delivered to Kafka by a relay.", ["timeline"]
)
PURGED = Counter("tidemark_timeline_purged", "Deleted messages purged.")


DRIFT_REFRESH_S = 30.0
"""How often a timeline process measures its clock drift again: clocks move (NTP
steps, a suspended VM), and a gauge measured once would hide it."""


class DriftGauge:
    """The drift gauge of one timeline process: measured at once, then again by
    :meth:`refresh` whenever ``refresh_s`` (default :data:`DRIFT_REFRESH_S`) have
    passed (a clock read otherwise)."""

    def __init__(
        self,
        timeline: str,
        measure: Callable[[], ClockDrift],
        refresh_s: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gauge = CLOCK_DRIFT.labels(timeline)
        self._measure = measure
        self._refresh_s = DRIFT_REFRESH_S if refresh_s is None else refresh_s
        self._monotonic = monotonic
        self._due = 0.0
        self.last: ClockDrift | None = None
        self.refresh()

    def refresh(self) -> ClockDrift | None:
        """Measure again if due; the latest measurement."""
        now = self._monotonic()
        if now >= self._due:
            self._due = now + self._refresh_s
            self.last = self._measure()
            self._gauge.set(self.last.drift_ms / 1000)
        return self.last


def observe_all(histogram: Any, amounts: Sequence[float]) -> None:
    """``histogram.observe(a)`` for each of ``amounts`` (a labelled child), in one pass:
    each bucket's count and the sum are added to once, not once a value (a relay
    observes a lag per record it sends). It reads the client's layout of a child (its
    upper bounds, bucket counts and sum); a unit test holds it equal to ``observe``."""
    if not amounts:
        return
    bounds, buckets = histogram._upper_bounds, histogram._buckets
    for i, n in Tally(bisect_left(bounds, a) for a in amounts).items():
        buckets[i].inc(n)
    histogram._sum.inc(sum(amounts))


__all__ = [
    "CLOCK_DRIFT",
    "CREATED",
    "DELIVERED",
    "DRIFT_REFRESH_S",
    "DUE_TO_DELIVERY_LAG",
    "PURGED",
    "RELAYED",
    "DriftGauge",
    "observe_all",
]
