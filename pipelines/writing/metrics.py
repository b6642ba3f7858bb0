"""Prometheus metrics of writers (``prometheus_client``'s default registry).

    from prometheus_client import start_http_server
    start_http_server(9465)     # expose them from the writing application

- ``tidemark_writer_marks_sent_total{stream}`` -- writer marks acknowledged
  by Kafka (``note_time``, ``close``'s shutdown mark);
- ``tidemark_writer_delivery_failures_total{stream,kind}`` -- records Kafka
  did not acknowledge; ``kind`` is ``event`` or ``mark``;
- ``tidemark_observed_possibly_late_total{stream}`` -- records an observer
  (``tidemark stream observe``) counted as possibly late: they arrived while
  their partition's largest timestamp did not move.

Counting costs one dictionary lookup per acknowledged mark or failed record;
acknowledged events are not counted (Kafka's own producer metrics do that).
"""

from __future__ import annotations

from prometheus_client import Counter

MARKS_SENT = Counter(
    "tidemark_writer_marks_sent", "Writer marks acknowledged by Kafka.", ["stream"]
)
DELIVERY_FAILURES = Counter(
    "tidemark_writer_delivery_failures",
    "Records Kafka did not acknowledge (kind: event or mark).",
    ["stream", "kind"],
)

POSSIBLY_LATE = Counter(
    "tidemark_observed_possibly_late",
    "Records an observer counted as possibly late (their partition's largest timestamp "
    "did not move when they arrived).",
    ["stream"],
)

__all__ = ["DELIVERY_FAILURES", "MARKS_SENT", "POSSIBLY_LATE"]
