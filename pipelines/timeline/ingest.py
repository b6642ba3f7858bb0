"""The ingester: scheduled messages from a Kafka topic into the timeline store.

    ingester = TimelineIngester(dsn, bootstrap, IngestConfig("timeline-in", "ingest"))
    stats = ingester.run_once(timeout_ms=1_000)
    ingester.close()

Each batch is written with idempotent creates (by id), then the consumer
offsets are committed. A crash between the two replays the batch, and the
replay changes nothing: at-least-once reading, exactly-once effect per id.
A replayed message whose id was delivered and deleted meanwhile stays
deleted as long as the deleted row is kept (see ``TimelineStore.purge``).

A record that cannot be stored is data, not a crash: undecodable bytes, an
unknown timeline, an id reused with another body, a body too large. Each is
counted, logged, and produced with the reason to ``dead_letter_topic`` when
one is given; the batch goes on.

Kafka out of reach (at start, or heard of while reading: :class:`OutageWatch`) is
:class:`~tidemark.controller.exceptions.KafkaUnavailableError` naming the bootstrap
servers; the offsets of a batch are committed only after it is stored.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from tidemark.controller.closing import Closing
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.outages import OutageWatch, answering, outages_named
from tidemark.pipelines.timeline.config import IngestConfig
from tidemark.pipelines.timeline.exceptions import TimelineClosedError, TimelineError
from tidemark.pipelines.timeline.metrics import CREATED, DriftGauge
from tidemark.pipelines.timeline.store import NewMessage, TimelineStore
from tidemark.pipelines.timeline.wire import decode_scheduled
from tidemark.schemas.exceptions import DecodeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestStats:
    """One batch: records read, messages created, idempotent repeats (ids the store
    already held) and records refused (logged; sent to the dead-letter topic if any)."""

    read: int
    created: int
    repeated: int
    rejected: int


class TimelineIngester(Closing):
    def __init__(
        self,
        dsn: str,
        bootstrap: str,
        config: IngestConfig,
        dead_letter_topic: str | None = None,
    ) -> None:

        self.config = config
        self.store = TimelineStore(dsn)
        self.drift = DriftGauge(f"ingest:{config.topic}", self.store.clock_drift)
        self.dead_letter_topic = dead_letter_topic
        self.bootstrap = bootstrap
        self._watch = OutageWatch(bootstrap, config.kafka_timeout_ms / 1000)
        self._closed = False
        self._dead_letters: Any = None
        self._consumer = roles.client(
            roles.INGEST_CONSUMER, bootstrap, {"group.id": config.group_id, **self._watch.settings}
        )
        try:
            answering(self._consumer, bootstrap, self._watch.timeout_s, config.topic)
        except BaseException:
            self.close()
            raise
        self._consumer.subscribe([config.topic])
        self._dead_letters = (
            roles.client(roles.DEAD_LETTER_PRODUCER, bootstrap) if dead_letter_topic else None
        )

    def _reject(self, raw: Any, reason: str) -> None:
        log.warning(
            "ingest %s[%s]@%s refused: %s", raw.topic(), raw.partition(), raw.offset(), reason
        )
        if self._dead_letters is not None:
            self._dead_letters.produce(
                self.dead_letter_topic,
                value=raw.value(),
                key=raw.key(),
                headers=[("tidemark-reason", reason.encode())],
            )

    def run_once(self, timeout_ms: int | None = None) -> IngestStats:
        """Read one batch (waiting up to ``timeout_ms``), store it, commit its offsets."""
        if self._closed:
            raise TimelineClosedError(f"the ingest of {self.config.topic!r} is closed")
        self.drift.refresh()
        timeout_s = (timeout_ms or self.config.poll_timeout_ms) / 1000
        records = self._consumer.consume(self.config.batch_size, timeout_s)
        if not records:
            self._watch.check(self._consumer)
            return IngestStats(0, 0, 0, 0)
        by_timeline: dict[str, list[tuple[Any, NewMessage]]] = defaultdict(list)
        rejected = created = repeated = 0
        for raw in records:
            if raw.error() is not None:
                log.warning("ingest: consumer error %s", raw.error())
                continue
            try:
                message = decode_scheduled(raw.value() or b"")
            except DecodeError as exc:
                self._reject(raw, f"undecodable: {exc}")
                rejected += 1
                continue
            by_timeline[message.timeline].append(
                (
                    raw,
                    NewMessage(
                        message.body,
                        message.timestamp_ms,
                        message.producer_group,
                        message.id,
                        headers=raw.headers(),  # the record's, kept for the relay
                    ),
                )
            )
        for timeline, items in by_timeline.items():
            try:
                results = self.store.try_create_many(timeline, [m for _, m in items])
            except TimelineError as exc:  # e.g. unknown timeline: every item is refused
                results = [exc] * len(items)
            for (raw, _), result in zip(items, results, strict=True):
                if isinstance(result, TimelineError):
                    self._reject(raw, str(result))
                    rejected += 1
                elif result.new:
                    created += 1
                    CREATED.labels(timeline).inc()
                else:
                    repeated += 1
        if self._dead_letters is not None:
            self._dead_letters.flush(30)
        with outages_named(self.bootstrap):
            self._consumer.commit(asynchronous=False)
        return IngestStats(len(records), created, repeated, rejected)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.run_once()

    def close(self) -> None:
        """Close the Kafka handles (the dead letters' producer within a bounded flush) and
        the database session; a use after raises :class:`TimelineClosedError`."""
        if self._closed:
            return
        self._closed = True
        try:
            # a group member: its close may wait on a rebalance of a gone broker's group
            roles.close_consumer(self._consumer, self.config.kafka_timeout_ms / 1000)
            if self._dead_letters is not None:
                left = roles.release(self._dead_letters, self.config.kafka_timeout_ms / 1000)
                if left:
                    log.warning("ingest %s: %d dead letters not sent", self.config.topic, left)
        finally:
            self.store.close()
