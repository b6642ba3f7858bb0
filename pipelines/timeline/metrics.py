"""Prometheus metrics of timeline consumers (``prometheus_client``'s default registry).

- ``tidemark_timeline_due_to_delivery_lag_seconds{timeline}`` (histogram) --
  when a lease reaches the caller: this client's clock, corrected by the
  measured drift, minus the message's due time;
- ``tidemark_timeline_delivered_total{timeline}`` (counter) -- leases handed out;
- ``tidemark_timeline_clock_drift_seconds{timeline}`` (gauge) -- the
  database's clock minus this client's (> 0: the database is ahead).
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

__all__ = ["CLOCK_DRIFT", "DELIVERED", "DUE_TO_DELIVERY_LAG"]
