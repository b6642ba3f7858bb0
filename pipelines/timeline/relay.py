"""Relay mode: due messages are produced to a Kafka topic, exactly once, nothing written
per message.

    relay = TimelineRelay(dsn, bootstrap, "reminders", RelayConfig("due-reminders"),
                          ConsumerConfig("relay-1"))
    relay.run_once(timeout_ms=1_000)

The "time buffer between two queues". Every message is produced to
``target_topic`` once it is due (key = message id, value = body, headers: the
message's own, as given when it was scheduled, then ``tidemark-timeline``,
``tidemark-id``, ``tidemark-timestamp`` (its due time), ``tidemark-producer-group``),
by an idempotent producer, a batch delivered once Kafka acknowledged all its
records: each message is on the target exactly once, whatever is killed when, read
with either isolation level (the terms, a relay replaced while it still runs:
:mod:`.relay_acked`). :class:`TransactionalTimelineRelay` produces each batch in a
Kafka transaction instead (read the target ``read_committed``): a replaced relay is
fenced whatever its pauses, at a transaction's cost a batch.

No lease, no delete, no lock: the relay reads due messages past a per-bucket cursor
over ``(due time, id)`` and records its progress once a batch (the rule, and why a
message created "now", moved behind the cursor or committed late is still sent once:
:mod:`.relay_sql`; the engine, its pipelining and its failures:
:mod:`.relay_cursor`). Delivered rows are removed in bulk by the purge
(:meth:`TimelineStore.purge`), behind the cursor, after ``keep_deleted_ms``; until
then their ids stay taken, a replayed create creates nothing, and
:meth:`TimelineStore.get` shows them deleted.

The producer's rights: a message deleted or moved before a batch takes it is not
sent (or sent at its new time); once taken, its move and delete are refused, as
for a message under a live lease. One relay per timeline (its name, the
transactional id and group of the transactional one, is
``tidemark-relay.<timeline>``): a second one takes over from the first. The
consumer's name
(``ConsumerConfig.consumer_id``) only names it in logs; ``batch_size`` and
``max_idle_ms`` are the batch's and the idle wait's, and ``lease_ms`` how long a
message the broker refuses waits before it is tried again.

Event-time messages fall due when their stream's watermark passes their
time: give a ``stream_clock`` (the CLI gives the Delta ``marks`` table's,
``LatestStreamTimes``) and the relay records those times before it reads.
PostgreSQL only; on CockroachDB, serve a timeline with consumers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tidemark.controller.naming import RELAY_TRANSACTIONAL_PREFIX
from tidemark.pipelines.timeline.clock import DueCondition, StreamClock
from tidemark.pipelines.timeline.config import ConsumerConfig, RelayConfig
from tidemark.pipelines.timeline.model import decode_headers
from tidemark.pipelines.timeline.relay_acked import AckedCursorRelay
from tidemark.pipelines.timeline.relay_cursor import CursorRelay, CursorSettings, Row

log = logging.getLogger(__name__)


def relay_name(timeline: str) -> str:
    """The transactional id and group of the relay of ``timeline``."""
    return f"{RELAY_TRANSACTIONAL_PREFIX}{timeline}"


class _TimelineRecords(CursorRelay):
    """A timeline message as its record on the target (the module's layout)."""

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
        self.consumer_id = consumer.consumer_id
        self._name = timeline.encode()
        super().__init__(
            dsn,
            bootstrap,
            timeline,
            CursorSettings(
                config.target_topic,
                relay_name(timeline),
                batch_size=consumer.batch_size,
                flush_timeout_ms=config.flush_timeout_ms,
                max_idle_ms=consumer.max_idle_ms,
                retry_after_ms=consumer.lease_ms,
            ),
            due=due,
            stream_clock=stream_clock,
        )

    def produce_rows(self, rows: Sequence[Row], on_delivery: Callable[[Any, Any], None]) -> None:
        produce, topic = self._producer.produce, self.config.target_topic
        name = ("tidemark-timeline", self._name)
        groups: dict[str, tuple[str, bytes]] = {}  # a batch has few producer groups
        for _bucket, ts, message_id, body, headers, group in rows:
            key = message_id.encode()
            of_group = groups.get(group)
            if of_group is None:
                of_group = groups[group] = ("tidemark-producer-group", group.encode())
            own = [name, ("tidemark-id", key), ("tidemark-timestamp", b"%d" % ts), of_group]
            if headers is not None:
                own = [*decode_headers(headers), *own]
            try:
                produce(topic, body, key, headers=own, on_delivery=on_delivery)
            except BufferError:
                self._send(produce, topic, body, key, headers=own, on_delivery=on_delivery)

    def record_id(self, message: Any) -> str | None:
        """The message id of a record this timeline's relay produced (None: another's)."""
        key = message.key()
        if key is None:
            return None
        for header, value in message.headers() or ():
            if header == "tidemark-timeline":
                return key.decode(errors="replace") if value == self._name else None
        return None

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.run_once()


class TimelineRelay(_TimelineRecords, AckedCursorRelay):
    """Due messages to Kafka by acknowledgement (:mod:`.relay_acked`)."""


class TransactionalTimelineRelay(_TimelineRecords):
    """Due messages to Kafka in one transaction a batch (:mod:`.relay_cursor`)."""


def timeline_relay(
    dsn: str, bootstrap: str, timeline: str, config: RelayConfig, *args: Any, **kwargs: Any
) -> CursorRelay:
    """The relay ``config.delivery`` names (the arguments: :class:`TimelineRelay`'s)."""
    kind = TimelineRelay if config.delivery == "acked" else TransactionalTimelineRelay
    return kind(dsn, bootstrap, timeline, config, *args, **kwargs)
