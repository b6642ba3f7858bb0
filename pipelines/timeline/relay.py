"""Relay mode: due messages are produced to a Kafka topic, then deleted.

    relay = TimelineRelay(dsn, bootstrap, "reminders", RelayConfig("due-reminders"),
                          ConsumerConfig("relay-1"))
    relay.run_once(timeout_ms=1_000)

The "time buffer between two queues". For each batch of due messages:
produce every message to ``target_topic`` (key = message id, value = body,
headers: the message's own, as given when it was scheduled, then
``tidemark-timeline``, ``tidemark-id``, ``tidemark-timestamp``,
``tidemark-producer-group``) with an idempotent producer and ``acks=all``;
wait for the broker's acknowledgements; only then delete the acknowledged
messages.

No lease is written: a batch is held by the row locks of a transaction left
open on a connection of the relay's own (:meth:`TimelineStore.hold_due`,
``FOR UPDATE SKIP LOCKED``), and the delete of the delivered messages is that
transaction's last statement (:meth:`TimelineStore.settle_held`). Consumers'
lease scans skip the held rows, as they skip rows under a live lease. A
lease and a holder's delete are two row writes a message; this is one (the
lease is the relay's costliest statement). A message the broker did not
acknowledge is not deleted: it is leased to the relay's consumer id for
``lease_ms``, with no token (a lease that just lapses), in the same
transaction, so the target refusing it makes it wait that long, not loop.

Batches are pipelined: while the broker acknowledges one, the next is taken
(on the relay's second connection), and it is produced before the first is
settled, so the database and the broker work at the same time.

While it is behind (a batch came back full), the next batch asks for twice as
many, up to :data:`~.consumer.MAX_BATCH_GROWTH` times ``batch_size``: fewer statements and
flushes for the same messages; it falls back to ``batch_size`` once a batch
comes back short.

Guarantee: **at-least-once, duplicates only by id.** No message is deleted
before the target topic has it, so none is lost. A crash after the produce
and before the delete ends the batch's transaction with its connection: the
messages are due again at once and sent again, with the same key and
``tidemark-id``; consumers of the target topic deduplicate by that id.

Kafka out of reach (no broker answers the relay's metadata request at start, or after
a flush that left messages unacknowledged) is :class:`KafkaUnavailableError` naming the
bootstrap servers: the batch is not deleted, its rows are due again at once.

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

from confluent_kafka import KafkaException

from tidemark.controller.closing import Closing
from tidemark.controller.exceptions import KafkaUnavailableError
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.outages import answering, is_outage
from tidemark.pipelines.timeline.clock import DueCondition, StreamClock
from tidemark.pipelines.timeline.config import ConsumerConfig, RelayConfig
from tidemark.pipelines.timeline.consumer import TimelineConsumer, next_batch_limit
from tidemark.pipelines.timeline.metrics import RELAYED
from tidemark.pipelines.timeline.model import Lease
from tidemark.pipelines.timeline.store import TimelineStore

log = logging.getLogger(__name__)


class _Batch:
    """Messages produced to Kafka, the store holding them, and what the broker has
    said of them so far."""

    def __init__(self, leases: Sequence[Lease], holder: TimelineStore) -> None:
        self.leases = leases
        self.holder = holder
        self.acked: set[str] = set()
        self.failed: list[str] = []
        self.unanswered = False
        """A delivery failed for want of a broker's answer (not a refusal)."""

    def on_delivery(self, err: Any, msg: Any) -> None:
        key = msg.key().decode()
        if err is None:
            self.acked.add(key)
        else:
            self.failed.append(f"{key}: {err}")
            self.unanswered = self.unanswered or is_outage(KafkaException(err))


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
        self.config = config
        self.timeline = timeline
        self.bootstrap = bootstrap
        self._timeout_s = config.flush_timeout_ms / 1000
        self.consumer = TimelineConsumer(
            dsn, timeline, consumer, due=due, stream_clock=stream_clock
        )
        # Two connections of its own, each holding one batch in flight (pipelined).
        self._holders: list[TimelineStore] = []
        try:
            for _ in range(2):
                self._holders.append(TimelineStore(dsn, due=self.consumer.store.due, notify=False))
            self._producer = roles.client(roles.RELAY_PRODUCER, bootstrap)
            answering(self._producer, bootstrap, self._timeout_s, config.target_topic)
        except BaseException:
            self._close_stores()
            raise
        self._relayed_counter = RELAYED.labels(timeline)
        self.relayed = 0
        self.failed = 0
        """Messages the broker refused (they are due again ``lease_ms`` later)."""

    def _hold(self, holder: TimelineStore, timeout_ms: int, limit: int) -> list[Lease]:
        """Due messages of this relay's buckets, held by ``holder``'s transaction (waiting
        up to ``timeout_ms`` for some, as a consumer's poll does)."""

        def take(count: int, buckets: Sequence[int]) -> list[Lease]:
            return holder.hold_due(self.timeline, limit=count, buckets=buckets)

        return self.consumer.poll_with(take, timeout_ms=timeout_ms, limit=limit)

    def _send(self, leases: Sequence[Lease], holder: TimelineStore) -> _Batch:
        """Produce every message (acks arrive later, in :meth:`_await`)."""
        batch = _Batch(leases, holder)
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
        whose message the broker has; :class:`KafkaUnavailableError` when the brokers
        cannot be reached (what is still queued is dropped: its rows stay)."""
        left = self._producer.flush(self._timeout_s)
        if left or batch.unanswered:
            try:
                answering(self._producer, self.bootstrap, self._timeout_s)
            except KafkaUnavailableError:
                self._producer.purge(in_queue=True, in_flight=False, blocking=False)
                self._producer.poll(0)
                raise
        self.failed += len(batch.failed) + left
        if batch.failed or left:
            log.warning(
                "relay %s: %d not acknowledged (%s); they are due again in %d ms",
                self.timeline,
                len(batch.failed) + left,
                "; ".join(batch.failed[:3]),
                self.consumer.config.lease_ms,
            )
        return [lease for lease in batch.leases if lease.message.id in batch.acked]

    def _settle(self, batch: _Batch, delivered: Sequence[Lease]) -> int:
        """Delete the delivered messages, park the others for ``lease_ms``, and end the
        batch's transaction; returns how many were deleted."""
        deleted = batch.holder.settle_held(
            self.timeline,
            [lease.message.id for lease in delivered],
            retry=[
                lease.message.id for lease in batch.leases if lease.message.id not in batch.acked
            ],
            consumer=self.consumer.consumer_id,
            retry_after_ms=self.consumer.config.lease_ms,
        )
        if len(deleted) < len(delivered):
            log.warning(
                "relay %s: %d delivered messages not deleted; they will be sent again",
                self.timeline,
                len(delivered) - len(deleted),
            )
        self.relayed += len(deleted)
        self._relayed_counter.inc(len(deleted))
        return len(deleted)

    def run_once(self, timeout_ms: int = 1_000) -> int:
        """Relay the due messages (waiting up to ``timeout_ms`` for a first batch); returns
        how many were relayed.

        Pipelined: while the broker acknowledges one batch, the next is taken, and
        it is produced before the first one is settled. Batches follow one another
        while more are due, until ``timeout_ms`` has passed. Whatever goes wrong,
        no batch stays held past the call.
        """
        base = self.consumer.config.batch_size
        try:
            holder = self._holders[0]
            leases = self._hold(holder, timeout_ms, base)
            if not leases:
                return 0
            until = time.monotonic() + timeout_ms / 1000
            relayed = 0
            limit = next_batch_limit(base, len(leases), base)
            batch: _Batch | None = self._send(leases, holder)
            while batch is not None:
                ahead: list[Lease] = []
                holder = self._holders[1] if batch.holder is self._holders[0] else self._holders[0]
                if time.monotonic() < until:
                    ahead = self._hold(holder, 0, limit)
                    limit = next_batch_limit(limit, len(ahead), base)
                delivered = self._await(batch)
                nxt = self._send(ahead, holder) if ahead else None
                relayed += self._settle(batch, delivered)
                batch = nxt
            return relayed
        finally:
            for store in self._holders:
                store.release_held()  # (nothing to do when settled)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.run_once()

    def _close_stores(self) -> None:
        for store in self._holders:
            store.close()
        self.consumer.close()

    def close(self) -> None:
        try:
            self._producer.flush(self._timeout_s)
        finally:
            self._close_stores()
