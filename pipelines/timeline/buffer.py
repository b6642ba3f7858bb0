"""The timeline as a time buffer between two Kafka topics, exactly once.

    config = BufferConfig("orders", "orders-delayed", DueRule(delay_ms=7_200_000))
    ingest = BufferIngest(dsn, bootstrap, config)
    with TimelineBuffer(ingest, BufferRelay(dsn, bootstrap, config)) as buffer:
        buffer.run(stop)                      # ingest and relay, until stop is set

Any record of the source topic (key, value, headers, timestamp: kept byte for
byte, :mod:`.record`) is held on the timeline ``config.timeline`` and
produced to the target topic when due (:class:`~.config.DueRule`).

Exactly once, from source offsets to the target topic, whatever is killed when:

- **in** (:class:`BufferIngest`): a batch of records and the next source
  offsets are written in one database transaction; at start the consumer is
  assigned every source partition at its stored offset, so a record is stored
  once or, after a crash before the commit, read again. Partitions added to
  the source later are found within ``partitions_refresh_ms`` and read from
  their start. Ids are ``<partition>:<offset>@<topic>``, so even a second
  reader of the same offsets adds nothing.
- **out** (:class:`BufferRelay`): the relay's cursor (:mod:`.relay_cursor`): due
  records are read past a per-bucket cursor, each batch produced in one Kafka
  transaction (``transactional.id`` = the relay's name) together with an offset
  commit of the relay's own group that names the batch, whose state the database
  recorded once for the whole batch; nothing is written per record. A relay that
  starts (again) fences its predecessor (``init_transactions``) and resumes after
  the batch Kafka committed last: nothing is sent twice, nothing is left behind.
  Delivered rows are removed in bulk by the purge.

Kafka out of reach (at start, or in a transaction of the relay) is
:class:`~tidemark.controller.exceptions.KafkaUnavailableError` naming the bootstrap
servers (the relay's own error caused by it, where it had one): nothing is deleted before
Kafka has it, and what is leased is given back by the next run (above).

Back-pressure: the ingest reads a batch only after the database has
committed the previous one, and the Kafka consumer prefetches little, so a
slow database slows reading, and the backlog stays in the source topic.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from tidemark.controller.closing import Closing
from tidemark.controller.exceptions import KafkaUnavailableError
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.outages import (
    OutageWatch,
    answering,
)
from tidemark.controller.naming import BUFFER_TRANSACTIONAL_PREFIX
from tidemark.pipelines.timeline.buffer_sql import (
    BufferedRows,
    finish_batches,
    load_offsets,
    release_all,
    store_batch,
)
from tidemark.pipelines.timeline.clock import StreamClock
from tidemark.pipelines.timeline.config import BufferConfig, TimelineConfig
from tidemark.pipelines.timeline.exceptions import TimelineClosedError, TimelineError
from tidemark.pipelines.timeline.metrics import CREATED, DriftGauge
from tidemark.pipelines.timeline.model import bucket_of
from tidemark.pipelines.timeline.record import KafkaRecord, decode_record, encode_record
from tidemark.pipelines.timeline.relay_cursor import CursorRelay, CursorSettings, Row
from tidemark.pipelines.timeline.store import TimelineStore

log = logging.getLogger(__name__)

PRODUCER_GROUP = "buffer"
"""The producer group of buffered messages."""
MAX_BUFFER_BODY_BYTES = 64 << 20


def record_id(topic: str, partition: int, offset: int) -> str:
    """The message id of a source record: unique per timeline, at most 200 characters."""
    name = topic if len(topic) <= 150 else hashlib.sha256(topic.encode()).hexdigest()
    return f"{partition}:{offset}@{name}"


def ensure_timeline(store: TimelineStore, config: BufferConfig) -> None:
    """Create the buffer's timeline (bodies up to 64 MiB: a record and its envelope)."""
    store.migrate()
    store.create_timeline(TimelineConfig(config.timeline, config.buckets, MAX_BUFFER_BODY_BYTES))


class BufferIngest:
    """Source topic -> store: records and source offsets in one transaction per batch."""

    def __init__(self, dsn: str, bootstrap: str, config: BufferConfig) -> None:
        self.config = config
        self.store = TimelineStore(dsn)
        ensure_timeline(self.store, config)
        self.buckets = self.store.timeline(config.timeline).buckets
        self.drift = DriftGauge(config.timeline, self.store.clock_drift)
        self._created = CREATED.labels(config.timeline)
        self.stored = 0
        self.read = 0
        self.late_headers = 0
        """Records whose due header was missing or no time: due at once (logged)."""
        self._watch = OutageWatch(bootstrap, config.flush_timeout_ms / 1000)
        self._consumer = roles.client(
            roles.BUFFER_CONSUMER,
            bootstrap,
            {"group.id": f"{BUFFER_TRANSACTIONAL_PREFIX}{config.timeline}", **self._watch.settings},
        )
        self._assigned: set[int] = set()
        self._next_look = 0.0
        self._closed = False
        try:
            self._assign(self._source_partitions(self._watch.timeout_s))
        except BaseException:
            self.close()
            raise

    def _source_partitions(self, timeout_s: float) -> set[int]:
        topic = self.config.source_topic
        found = answering(self._consumer, self._watch.bootstrap, timeout_s, topic).topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise TimelineError(f"buffer {self.config.timeline}: no source topic {topic!r}")
        return set(found.partitions)

    def _assign(self, partitions: set[int]) -> None:
        """Read ``partitions`` of the source (those not read yet) from their stored
        offsets. Assigned, not subscribed: the offsets live in the database, and a
        restart after a kill -9 does not wait for the dead member to leave a
        consumer group."""
        new = sorted(partitions - self._assigned)
        self._next_look = time.monotonic() + self.config.partitions_refresh_ms / 1000
        if not new:
            return
        topic = self.config.source_topic
        stored = self.store.transaction(lambda c: load_offsets(c, self.config.timeline, topic))
        assigned = [TopicPartition(topic, p, stored.get(p, OFFSET_BEGINNING)) for p in new]
        log.info(
            "buffer %s: reading %s from %s",
            self.config.timeline,
            topic,
            {p.partition: p.offset for p in assigned},
        )
        self._consumer.incremental_assign(assigned)
        self._assigned.update(new)

    def _follow_source(self) -> None:
        """Pick up partitions added to the source since the last look (when due)."""
        if time.monotonic() < self._next_look:
            return
        try:
            partitions = self._source_partitions(timeout_s=5)
        except (KafkaException, KafkaUnavailableError, TimelineError) as exc:  # next time
            self._next_look = time.monotonic() + self.config.partitions_refresh_ms / 1000
            log.warning("buffer %s: source partitions not known: %s", self.config.timeline, exc)
            return
        self._assign(partitions)

    def _due(self, record: KafkaRecord) -> tuple[int, bool, str | None]:
        """(time, relative to the database's now, stream) of one record."""
        rule = self.config.due
        if rule.delay_ms is not None:
            return rule.delay_ms, True, None
        if rule.until_stream_time is not None:
            return record.timestamp_ms, False, rule.until_stream_time
        for name, value in record.headers:
            if name == rule.at_header and value is not None and value.strip().isdigit():
                return int(value), False, None
        self.late_headers += 1
        log.warning(
            "buffer %s: a record without a time in header %r is due at once",
            self.config.timeline,
            rule.at_header,
        )
        return 0, True, None

    def run_once(self, timeout_ms: int = 200) -> int:
        """Read one batch (waiting up to ``timeout_ms``) and store it; returns records read."""
        if self._closed:
            raise TimelineClosedError(
                f"the buffer ingest of {self.config.source_topic!r} is closed", self.config.timeline
            )
        self.drift.refresh()
        self._follow_source()
        records: list[Any] = self._consumer.consume(self.config.batch_size, timeout_ms / 1000)
        rows = BufferedRows([], [], [], [], [], [])
        next_offsets: dict[int, int] = {}
        for raw in records:
            error = raw.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("buffer %s: consumer error %s", self.config.timeline, error)
                continue
            _kind, timestamp_ms = raw.timestamp()
            record = KafkaRecord(raw.key(), raw.value(), tuple(raw.headers() or ()), timestamp_ms)
            ts, relative, stream = self._due(record)
            message_id = record_id(raw.topic(), raw.partition(), raw.offset())
            rows.ids.append(message_id)
            rows.buckets.append(bucket_of(message_id, self.buckets))
            rows.ts.append(ts)
            rows.relative.append(relative)
            rows.bodies.append(encode_record(record))
            rows.streams.append(stream)
            next_offsets[raw.partition()] = raw.offset() + 1
        if not next_offsets:
            self._watch.check(self._consumer)
            return 0
        stored = self.store.transaction(
            lambda c: store_batch(
                c,
                self.config.timeline,
                PRODUCER_GROUP,
                rows,
                self.config.source_topic,
                next_offsets,
                self.store.supports_notify,
            )
        )
        self.stored += stored
        self._created.inc(stored)
        self.read += len(rows.ids)
        return len(rows.ids)

    def close(self) -> None:
        """Close the consumer and the database session; a use after raises
        :class:`TimelineClosedError`."""
        if self._closed:
            return
        self._closed = True
        try:
            self._consumer.close()
        finally:
            self.store.close()


def _finish_leased_batches(store: TimelineStore, config: BufferConfig, metadata: str) -> None:
    """An earlier protocol's last commit (lease secrets' hashes): delete the batch it
    names, give the rest of that relay's leases back; the cursor then sends those."""
    hashes = [h for h in metadata.split(",") if h]
    timeline, me = config.timeline, config.consumer_id
    finished = store.transaction(lambda c: finish_batches(c, timeline, me, hashes))
    released = store.transaction(lambda c: release_all(c, timeline, me))
    if finished or released:
        log.info(
            "buffer %s: %d delivered under leases deleted, %d leases given back",
            timeline,
            finished,
            released,
        )


class BufferRelay(CursorRelay):
    """Store -> target topic: each batch in one Kafka transaction with its number
    (:mod:`.relay_cursor`), nothing written per message."""

    def __init__(
        self,
        dsn: str,
        bootstrap: str,
        config: BufferConfig,
        stream_clock: StreamClock | None = None,
    ) -> None:
        self.config = config
        with TimelineStore(dsn) as store:
            ensure_timeline(store, config)

        super().__init__(
            dsn,
            bootstrap,
            config.timeline,
            CursorSettings(
                config.target_topic,
                f"{BUFFER_TRANSACTIONAL_PREFIX}{config.timeline}.{config.consumer_id}",
                batch_size=config.batch_size,
                flush_timeout_ms=config.flush_timeout_ms,
                retry_after_ms=config.lease_ms,
            ),
            stream_clock=stream_clock,
            on_legacy_marker=lambda store, metadata: _finish_leased_batches(
                store, config, metadata
            ),
        )

    def produce_rows(self, rows: Sequence[Row], on_delivery: Callable[[Any, Any], None]) -> None:
        produce, topic = self._producer.produce, self.config.target_topic
        for row in rows:
            r = decode_record(row[3])
            headers, at = list(r.headers), r.timestamp_ms
            try:
                produce(
                    topic, r.value, r.key, on_delivery=on_delivery, timestamp=at, headers=headers
                )
            except BufferError:
                self._send(
                    produce,
                    topic,
                    r.value,
                    r.key,
                    on_delivery=on_delivery,
                    timestamp=at,
                    headers=headers,
                )

    def refused_ids(self, rows: Sequence[Row], refused: Sequence[Any]) -> list[str]:
        """Records are told apart by key and value (a source's key is not unique)."""
        sent = {(m.key(), m.value()) for m in refused}
        out = []
        for row in rows:
            r = decode_record(row[3])
            if (r.key, r.value) in sent:
                out.append(row[2])
        return out

    def run_once(self, timeout_ms: int = 200) -> int:
        """Relay the due messages (waiting up to ``timeout_ms``); returns how many."""
        return super().run_once(timeout_ms)


class TimelineBuffer(Closing):
    """Ingest and relay of one buffer (its two halves, built by the caller), each in its
    own thread with its own connection; closing it closes both."""

    def __init__(self, ingest: BufferIngest, relay: BufferRelay) -> None:
        if ingest.config != relay.config:
            raise TimelineError("a buffer's ingest and relay need the same BufferConfig")
        self.config = relay.config
        self.ingest = ingest
        self.relay = relay
        self.errors: list[BaseException] = []

    def _loop(self, step: Any, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                step()
        except BaseException as exc:  # the other half stops too; run() raises it
            self.errors.append(exc)
            stop.set()

    def run(self, stop: threading.Event) -> None:
        """Ingest and relay until ``stop`` is set; raises the first failure of either."""
        threads = [
            threading.Thread(target=self._loop, args=(step, stop), name=name, daemon=True)
            for name, step in (
                ("tidemark-buffer-in", self.ingest.run_once),
                ("tidemark-buffer-out", self.relay.run_once),
            )
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.errors:
            raise self.errors[0]

    def close(self) -> None:
        try:
            self.ingest.close()
        finally:
            self.relay.close()
