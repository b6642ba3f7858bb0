"""Prometheus metrics of timeline consumers (``prometheus_client``'s default registry).

- ``tidemark_timeline_due_to_delivery_lag_seconds{timeline}`` (histogram) --
  when a lease reaches the caller: this client's clock, corrected by the
  measured drift, minus the message's due time;
- ``tidemark_timeline_delivered_total{timeline}`` (counter) -- leases handed out;
- ``tidemark_timeline_clock_drift_seconds{timeline}`` (gauge) -- the
  database's clock minus this client's (> 0: the database is ahead), set by
  every timeline process: producer, consumer, relay, ingest;
- ``tidemark_timeline_created_total{timeline}`` (counter) -- messages a
  producer or an ingest stored;
- ``tidemark_timeline_relayed_total{timeline}`` (counter) -- messages a relay or
  a buffer delivered to Kafka;
- ``tidemark_timeline_purged_total`` (counter) -- deleted messages purged.

Each CLI host (``relay``, ``ingest``, ``purge``) serves them on ``--metrics-port``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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


def record_drift(timeline: str, drift_ms: float) -> None:
    """Export one measurement of the database's clock minus this process's."""
    CLOCK_DRIFT.labels(timeline).set(drift_ms / 1000)


__all__ = [
    "CLOCK_DRIFT",
    "CREATED",
    "DELIVERED",
    "DUE_TO_DELIVERY_LAG",
    "PURGED",
    "RELAYED",
    "record_drift",
]
