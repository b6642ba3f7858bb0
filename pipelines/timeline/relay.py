"""Relay mode: due messages are produced to a Kafka topic, then deleted.

    relay = TimelineRelay(dsn, bootstrap, "reminders", RelayConfig("due-reminders"),
                          ConsumerConfig("relay-1"))
    relay.run_once(timeout_ms=1_000)

The "time buffer between two queues". For each batch of leases: produce
every message to ``target_topic`` (key = message id, value = body, headers:
the message's own, as given when it was scheduled, then ``tidemark-timeline``,
``tidemark-id``, ``tidemark-timestamp``, ``tidemark-producer-group``) with an
idempotent producer and ``acks=all``; wait for the broker's
acknowledgements; only then delete the acknowledged messages (as lease
holder). A message whose produce failed is left leased and comes back when
its lease lapses.

Guarantee: **at-least-once, duplicates only by id.** No message is deleted
before the target topic has it, so none is lost. A crash after the produce
and before the delete, or a lease lapsing during a slow produce, sends a
message again after its lease ends, with the same key and ``tidemark-id``;
consumers of the target topic deduplicate by that id. The lease must outlast
the flush (checked): ``lease_ms > flush_timeout_ms``.

Event-time messages fall due when their stream's watermark passes their
time: give a ``stream_clock`` (the CLI gives the Delta ``marks`` table's,
``LatestStreamTimes``) and the relay records those times before it leases.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Producer

from controller.closing import Closing
from controller.kafka.settings import client_config
from pipelines.timeline.clock import DueCondition, StreamClock
from pipelines.timeline.config import ConsumerConfig, RelayConfig
from pipelines.timeline.consumer import TimelineConsumer
from pipelines.timeline.exceptions import ConfigurationError
from pipelines.timeline.metrics import RELAYED
from pipelines.timeline.model import Lease

log = logging.getLogger(__name__)


class TimelineRelay(Closing):
    def __init__(
        self,
        dsn: str,
        bootstrap: str,
        timeline: str,
        config: RelayConfig,
        consumer: ConsumerConfig,
        due: DueCondition | None = None,
        stream_clock: StreamClock | None = None,
    ) -> None:

        if consumer.lease_ms <= config.flush_timeout_ms:
            raise ConfigurationError(
                f"lease_ms ({consumer.lease_ms}) must exceed flush_timeout_ms "
                f"({config.flush_timeout_ms}), or leases lapse while the relay waits for acks"
            )
        self.config = config
        self.timeline = timeline
        self.consumer = TimelineConsumer(
            dsn, timeline, consumer, due=due, stream_clock=stream_clock
        )
        self._producer = Producer(
            {
                **client_config(bootstrap),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "log_level": 3,
            }
        )
        self.relayed = 0
        self.failed = 0
        """Messages the broker refused (they return when their lease ends)."""

    def _produce(self, leases: Sequence[Lease]) -> list[Lease]:
        """Produce and wait for acks; returns the leases whose message the broker has."""
        acked: set[str] = set()
        failed: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            key = msg.key().decode()
            if err is None:
                acked.add(key)
            else:
                failed.append(f"{key}: {err}")

        for lease in leases:
            m = lease.message
            while True:
                try:
                    self._producer.produce(
                        self.config.target_topic,
                        key=m.id.encode(),
                        value=m.body,
                        headers=[
                            *m.headers,
                            ("tidemark-timeline", m.timeline.encode()),
                            ("tidemark-id", m.id.encode()),
                            ("tidemark-timestamp", str(lease.due_ms).encode()),
                            ("tidemark-producer-group", m.producer_group.encode()),
                        ],
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    self._producer.poll(0.05)
        left = self._producer.flush(self.config.flush_timeout_ms / 1000)
        self.failed += len(failed) + left
        if failed or left:
            log.warning(
                "relay %s: %d not acknowledged (%s); they return when their lease ends",
                self.timeline,
                len(failed) + left,
                "; ".join(failed[:3]),
            )
        return [lease for lease in leases if lease.message.id in acked]

    def run_once(self, timeout_ms: int = 1_000) -> int:
        """Relay one batch of due messages (waiting up to ``timeout_ms``); returns how many."""
        leases = self.consumer.poll(timeout_ms=timeout_ms)
        if not leases:
            return 0
        delivered = self._produce(leases)
        deleted = self.consumer.ack(delivered)
        if len(deleted) < len(delivered):
            log.warning(
                "relay %s: %d leases lapsed before the delete; those messages will be sent again",
                self.timeline,
                len(delivered) - len(deleted),
            )
        self.relayed += len(deleted)
        RELAYED.labels(self.timeline).inc(len(deleted))
        return len(deleted)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.run_once()

    def close(self) -> None:
        try:
            self._producer.flush(self.config.flush_timeout_ms / 1000)
        finally:
            self.consumer.close()
