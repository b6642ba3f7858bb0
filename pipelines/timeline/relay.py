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
holder, one statement a batch). A message whose produce failed is left
leased and comes back when its lease lapses.

Batches are pipelined: while the broker acknowledges one, the next is
leased, and it is produced before the first is deleted, so the database and
the broker work at the same time. A batch leased ahead waits for two
flushes, so this needs ``lease_ms > 2 * flush_timeout_ms`` (the defaults:
30 s and 10 s); with shorter leases the relay takes one batch at a time.

While it is behind (a batch came back full), the next batch asks for twice as
many, up to :data:`~.consumer.MAX_BATCH_GROWTH` times ``batch_size``: fewer statements and
flushes for the same messages; it falls back to ``batch_size`` once a batch
comes back short.

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
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Producer

from controller.closing import Closing
from controller.kafka.settings import client_config
from pipelines.timeline.clock import DueCondition, StreamClock
from pipelines.timeline.config import ConsumerConfig, RelayConfig
from pipelines.timeline.consumer import TimelineConsumer, next_batch_limit
from pipelines.timeline.exceptions import ConfigurationError
from pipelines.timeline.metrics import RELAYED
from pipelines.timeline.model import Lease

log = logging.getLogger(__name__)


class _Batch:
    """Leases produced to Kafka, and what the broker has said of them so far."""

    def __init__(self, leases: Sequence[Lease]) -> None:
        self.leases = leases
        self.acked: set[str] = set()
        self.failed: list[str] = []

    def on_delivery(self, err: Any, msg: Any) -> None:
        key = msg.key().decode()
        if err is None:
            self.acked.add(key)
        else:
            self.failed.append(f"{key}: {err}")


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
        # A batch leased ahead waits for the acks of the one before it, then its own:
        # its lease must outlast both flushes, or it is leased one at a time.
        self._pipelined = consumer.lease_ms > 2 * config.flush_timeout_ms
        self._relayed_counter = RELAYED.labels(timeline)
        self.relayed = 0
        self.failed = 0
        """Messages the broker refused (they return when their lease ends)."""

    def _send(self, leases: Sequence[Lease]) -> _Batch:
        """Produce every lease's message (acks arrive later, in :meth:`_await`)."""
        batch = _Batch(leases)
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
                        on_delivery=batch.on_delivery,
                    )
                    break
                except BufferError:
                    self._producer.poll(0.05)
        return batch

    def _await(self, batch: _Batch) -> list[Lease]:
        """Wait for the acks of ``batch`` (the only one in flight); returns the leases
        whose message the broker has."""
        left = self._producer.flush(self.config.flush_timeout_ms / 1000)
        self.failed += len(batch.failed) + left
        if batch.failed or left:
            log.warning(
                "relay %s: %d not acknowledged (%s); they return when their lease ends",
                self.timeline,
                len(batch.failed) + left,
                "; ".join(batch.failed[:3]),
            )
        return [lease for lease in batch.leases if lease.message.id in batch.acked]

    def _produce(self, leases: Sequence[Lease]) -> list[Lease]:
        """Produce and wait for acks; returns the leases whose message the broker has."""
        return self._await(self._send(leases))

    def _settle(self, delivered: Sequence[Lease]) -> int:
        """Delete the delivered messages, in one statement; returns how many."""
        deleted = self.consumer.ack(delivered)
        if len(deleted) < len(delivered):
            log.warning(
                "relay %s: %d leases lapsed before the delete; those messages will be sent again",
                self.timeline,
                len(delivered) - len(deleted),
            )
        self.relayed += len(deleted)
        self._relayed_counter.inc(len(deleted))
        return len(deleted)

    def run_once(self, timeout_ms: int = 1_000) -> int:
        """Relay the due messages (waiting up to ``timeout_ms`` for a first batch); returns
        how many were relayed.

        Pipelined: while the broker acknowledges one batch, the next is leased, and
        it is produced before the first one is deleted. Batches follow one another
        while more are due, until ``timeout_ms`` has passed.
        """
        base = self.consumer.config.batch_size
        leases = self.consumer.poll(timeout_ms=timeout_ms, limit=base)
        if not leases:
            return 0
        until = time.monotonic() + timeout_ms / 1000
        relayed = 0
        limit = next_batch_limit(base, len(leases), base)
        batch: _Batch | None = self._send(leases)
        while batch is not None:
            ahead = []
            if self._pipelined and time.monotonic() < until:
                ahead = self.consumer.poll(timeout_ms=0, limit=limit)
                limit = next_batch_limit(limit, len(ahead), base)
            delivered = self._await(batch)
            nxt = self._send(ahead) if ahead else None
            relayed += self._settle(delivered)
            batch = nxt
        return relayed

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.run_once()

    def close(self) -> None:
        try:
            self._producer.flush(self.config.flush_timeout_ms / 1000)
        finally:
            self.consumer.close()
