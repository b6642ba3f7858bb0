"""Writer settings: one frozen object, checked when built.

    >>> cfg = WriterConfig(automatically_note_time=True, note_time_interval_ms=500)
    >>> cfg.producer_settings("127.0.0.1:9092", client_id="w1")["enable.idempotence"]
    True

``producer_overrides`` passes further librdkafka settings through; the ones
tidemark relies on (idempotence, the transactional id, the bootstrap
servers, delivery callbacks) are refused there with the list of them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.controller.durations import check_durations_ms
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.settings import checked_overrides
from tidemark.controller.naming import ClusterSettings
from tidemark.pipelines.writing.exceptions import WriterConfigError

log = logging.getLogger(__name__)

RESERVED_PRODUCER_KEYS = frozenset(
    {
        "bootstrap.servers",
        "enable.idempotence",
        "transactional.id",
        "transaction.timeout.ms",
        "on_delivery",
        "delivery.report.only.error",
        "dr_cb",
        "dr_msg_cb",
        "error_cb",
        "message.timeout.ms",
        "delivery.timeout.ms",
    }
)


@dataclass(frozen=True)
class WriterConfig:
    """How a writer talks to Kafka and notes time.

    - ``cluster``: the marks topic and bucket count (must match the controller's).
    - ``automatically_note_time``: note wall-clock time every
      ``note_time_interval_ms`` from a background thread; ``note_time`` then raises.
    - ``create_marks_topic``: create the marks topic (``cluster.bucket_count``
      partitions, the broker's default replication) when it is missing;
      otherwise a missing marks topic is an error.
    - ``delivery_timeout_ms``: how long Kafka may take to acknowledge a record
      before the writer reports it failed.
    - ``transaction_timeout_ms``: (transactional writers) how long a
      transaction may stay open before Kafka aborts it.
    - ``close_timeout_ms``: how long ``close`` waits for records in flight.
    - ``replay_window_ms``: how long a writer keeps the records it sent, to
      send again those a scale's seal cut off (see :mod:`tidemark.pipelines.writing.sent`);
      must exceed the time a writer takes to learn of a new epoch plus the
      scale's drain time.
    """

    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    automatically_note_time: bool = False
    note_time_interval_ms: int = 1_000
    create_marks_topic: bool = True
    linger_ms: int = 5
    delivery_timeout_ms: int = 30_000
    transaction_timeout_ms: int = 60_000
    close_timeout_ms: int = 30_000
    replay_window_ms: int = 10_000
    producer_overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_durations_ms(
            self,
            (
                "note_time_interval_ms",
                "delivery_timeout_ms",
                "transaction_timeout_ms",
                "close_timeout_ms",
                "replay_window_ms",
            ),
            minimum=1,
            error=WriterConfigError,
        )
        if type(self.linger_ms) is not int or self.linger_ms < 0:
            raise WriterConfigError(f"linger_ms must be an int >= 0, got {self.linger_ms!r}")
        if self.transaction_timeout_ms < 1_000:
            raise WriterConfigError(
                f"transaction_timeout_ms must be >= 1000 (Kafka's minimum), "
                f"got {self.transaction_timeout_ms}"
            )
        overrides = checked_overrides(
            self.producer_overrides,
            RESERVED_PRODUCER_KEYS,
            what="producer_overrides",
            error=WriterConfigError,
            hint=" (use the WriterConfig fields for the timeouts)",
        )
        object.__setattr__(self, "producer_overrides", overrides)

    def producer_settings(
        self, bootstrap_servers: str, client_id: str, transactional_id: str | None = None
    ) -> dict[str, Any]:
        """The librdkafka settings of a writer's producer."""
        settings = roles.writer_role(transactional_id is not None).config(
            bootstrap_servers,
            {
                "client.id": client_id,
                "linger.ms": self.linger_ms,
                "delivery.timeout.ms": self.delivery_timeout_ms,
            },
        )
        if transactional_id is not None:
            settings["transactional.id"] = transactional_id
            settings["transaction.timeout.ms"] = self.transaction_timeout_ms
            # librdkafka: a record may not outlive its transaction.
            settings["delivery.timeout.ms"] = min(
                self.delivery_timeout_ms, self.transaction_timeout_ms
            )
        settings.update(self.producer_overrides)
        return settings


__all__ = ["RESERVED_PRODUCER_KEYS", "WriterConfig"]
