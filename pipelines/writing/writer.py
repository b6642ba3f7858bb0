"""Event writers: route events to segments, track the position, note time.

    store = ZooKeeperStore(kazoo_client)            # or MemoryStore()
    with EventWriter("w1", "shop/orders", store=store, bootstrap_servers=bootstrap) as w:
        w.write(b"order 1", routing_key="customer-7", timestamp=1_700_000_000_000)
        w.note_time(1_700_000_000_000)   # "I have written everything up to this time"
    # close(): flush, then a shutdown mark so the controller stops waiting for w1

Writing: ``write`` routes the routing key into [0, 1) and sends the event to
the current epoch's segment owning it (the Kafka partition numbered like the
segment), with the timestamp the stream's timestamping rules give
(:mod:`tidemark.pipelines.writing.timestamping`). Sending is asynchronous: Kafka acknowledges
in the background; ``flush`` waits; a record Kafka refused is raised as
:class:`DeliveryError` by the next call. ``write_batch`` waits for its
records and returns their acknowledgement.

Position: the next offset of every segment this writer has had records
acknowledged on, from Kafka's delivery reports: each segment's report
callback only appends the record's offset to the records the writer keeps
(its replay window); positions, notes and failures are worked out from
them when reports arrived (:mod:`tidemark.pipelines.writing.sent`).

Noting time: ``note_time(t)`` queues a writer mark (``t`` and the position
reached by every record written **before** the call) and publishes it, to the
stream's bucket of the marks topic, as soon as those records are
acknowledged; it does not block. With ``automatically_note_time`` a
background thread notes the wall-clock time (never less than the highest
timestamp written) every ``note_time_interval_ms``.

Scaling: the writer watches the stream's metadata. When a new epoch appears
it first waits for every record in flight (so no key's new records overtake
its old ones), then routes to the new epoch's segments. Each successor
segment's timestamps start from the highest its predecessors got from this
writer.

Why one module: :class:`EventWriter` and the base it shares with the transactional
writer are one produce path over one Kafka producer (routing, scaling, delivery
reports, positions and marks); each method reads and changes the same writer state.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Message

from tidemark.controller.closing import Closing
from tidemark.controller.kafka import roles
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import Epoch, Segment, segment_number
from tidemark.controller.naming import split_stream
from tidemark.controller.navigation import key_hash
from tidemark.controller.states import WRITABLE, require_writable
from tidemark.controller.store import MetadataStore
from tidemark.controller.timestamps import wall_clock_ms
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.exceptions import (
    AutomaticTimeError,
    FailedRecord,
    InvalidRoutingKeyError,
    MissingWriterIdError,
    SerializationError,
    StreamSealedError,
    UnacknowledgedError,
    WriterClosedError,
    WriterError,
    WriterTimeoutError,
    failed_record,
    raise_failures,
)
from tidemark.pipelines.writing.headers import Headers, KafkaHeaders, checked_headers
from tidemark.pipelines.writing.heartbeat import Heartbeat
from tidemark.pipelines.writing.marks import (
    DeliveryCallback,
    MarkMessage,
    MarkPublisher,
    ensure_marks_topic,
    flush_publishing,
    instance_token,
)
from tidemark.pipelines.writing.metrics import DELIVERY_FAILURES
from tidemark.pipelines.writing.sent import KeptHeaders, Record, Report, Retained, SentRecords
from tidemark.pipelines.writing.stream_view import StreamView, sealed_by
from tidemark.pipelines.writing.timestamping import (
    SegmentClock,
    TimestampPolicy,
    check_timestamp,
    choose,
    monotonic,
    refuse_adjusted,
)

log = logging.getLogger(__name__)

Serializer = Callable[[Any], bytes]
RoutingKey = str | bytes | None

_ROUTE_CACHE_SIZE = 65_536

_Offset = Callable[[Message], int]

_Lane = tuple[int, int, Callable[[Record], None], Report]
"""Where ``write`` sends a key's records: segment id, partition, and the segment's
sent-log appenders (append a record, the report callback)."""


@dataclass(frozen=True)
class RecordAck:
    """One stored record: its offset and stored timestamp, and whether it was adjusted."""

    offset: int
    timestamp: int
    adjusted: bool


class _EndField:
    """A field of a batch's first or last record (``BatchAck.first_offset`` and the like)."""

    def __init__(self, index: int, field: str) -> None:
        self.index, self.field = index, field

    def __get__(self, ack: BatchAck | None, owner: type | None = None) -> int:
        if ack is None:
            raise AttributeError(f"{self.field} of a BatchAck's record {self.index}")
        value: int = getattr(ack.records[self.index], self.field)
        return value


@dataclass(frozen=True)
class BatchAck:
    """What ``write_batch`` stored, in order, all on ``segment_id``."""

    segment_id: int
    records: tuple[RecordAck, ...]

    first_offset = _EndField(0, "offset")
    last_offset = _EndField(-1, "offset")
    first_timestamp = _EndField(0, "timestamp")
    last_timestamp = _EndField(-1, "timestamp")

    @property
    def adjusted(self) -> tuple[bool, ...]:
        return tuple(r.adjusted for r in self.records)


def _routing_key_bytes(routing_key: RoutingKey) -> bytes | None:
    if routing_key is None:
        return None
    if isinstance(routing_key, str):
        return routing_key.encode("utf-8")
    if isinstance(routing_key, bytes):
        return routing_key
    raise InvalidRoutingKeyError(
        f"routing_key must be str, bytes or None, got {type(routing_key).__name__}"
    )


@dataclass(frozen=True)
class _Opening:
    """What a public writer constructor was given, handed on to :class:`_StreamWriter`."""

    writer_id: str | None
    stream: str
    store: MetadataStore
    bootstrap_servers: str
    config: WriterConfig
    serializer: Serializer | None
    clock: Callable[[], int] | None


class _StreamWriter(Closing):
    """What both stream writers share: routing, stamping, the producer, the records sent
    and their position (``sent``), the stream's metadata (``stream_view``) and the marks
    (``marks.MarkPublisher``, which the drop-in producer uses too)."""

    def __init__(
        self, opening: _Opening, transactional_id: str | None = None, instance: str | None = None
    ) -> None:
        writer_id, stream, store = opening.writer_id, opening.stream, opening.store
        config, serializer, clock = opening.config, opening.serializer, opening.clock
        if writer_id is not None and (not isinstance(writer_id, str) or not writer_id.strip()):
            raise MissingWriterIdError(f"writer_id must be a non-empty string, got {writer_id!r}")
        split_stream(stream)
        self.writer_id = writer_id
        self.instance = instance_token(instance)
        """This writer object's token on its marks (see ``marks.instance_token``)."""
        self.stream = stream
        self.config = config
        self._serializer = serializer
        self._now_ms = clock or wall_clock_ms
        self._wall_clock = clock is None
        """The default clock: the hot path reads ``time_ns`` itself (no call)."""
        self._lock = threading.RLock()
        self._closed = False
        self._failures: list[FailedRecord] = []
        self._fatal: KafkaError | None = None
        self._marks = MarkPublisher(
            config.cluster, writer_id, self._produce_mark, self._failures, self.instance
        )

        metadata = store.open_for_writing(stream)
        ensure_marks_topic(
            opening.bootstrap_servers, config.cluster, create=config.create_marks_topic
        )
        if transactional_id is None:  # a transactional one, once Kafka fenced its predecessor
            self._marks.register(store, stream)

        self._clock = SegmentClock(TimestampPolicy.of(metadata))
        self._floors = self._clock.live_floors
        # The records sent, their offsets appended by one report callback per segment: the
        # position, the notes, and what a seal cut off (a transactional writer keeps those of
        # its open transaction, and writes the whole transaction again instead).
        self._log = self._new_log()
        self._replays = transactional_id is None
        self._view = StreamView(store, metadata)
        self._epoch: Epoch = metadata.current_epoch()
        self._topic = metadata.topic
        self._routes: dict[bytes, Segment] = {}
        self._lanes: dict[bytes, _Lane] = {}
        """Routing key -> its lane in the current epoch (``write``'s route cache)."""
        self._writable = True
        # The headers last given to ``write``, their checked copy and the log's tuple of
        # it, reused while equal.
        self._headers_given: object = None
        self._headers_kept: KafkaHeaders | None = None
        self._headers_tuple: KeptHeaders | None = None

        settings = config.producer_settings(
            opening.bootstrap_servers,
            client_id=f"tidemark-{writer_id or 'anonymous'}",
            transactional_id=transactional_id,
        )
        settings["error_cb"] = self._on_error
        self._producer_settings = settings
        self._producer = roles.create(roles.writer_role(transactional_id is not None), settings)
        self._view.watch()

    # --- metadata -------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Apply metadata that changed since the last write (caller holds the lock).

        See ``tidemark.controller.streams`` for how a scale fences writers: a sealed
        segment's content ends at its recorded sealed size, so records this
        writer had acknowledged at or beyond it are sent again, in order, to
        the successors (or reported failed when the whole stream was sealed).
        """
        view = self._view
        latest = view.latest
        if latest is view.applied:
            if not self._writable:
                require_writable(self.stream, latest.state)
            return
        self._writable = False
        closing = latest.state not in WRITABLE
        gone = sealed_by(self._epoch, latest)
        if gone:
            # Per-key order: nothing may be in flight to a sealed segment when
            # its keys start going to a successor.
            self._drain(self.config.delivery_timeout_ms)
            written = [s for s in gone if self._replays and self._log.retained(s)]
            if written:
                latest = view.await_sealed_sizes(written, self.config.delivery_timeout_ms / 1000)
        else:
            written = []
        view.applied = latest
        self._clock.policy = TimestampPolicy.of(latest)
        if closing:
            for seg_id in written:
                for rec in self._cut_off(seg_id, latest):
                    self._failures.append(
                        FailedRecord(
                            self._topic,
                            segment_number(seg_id),
                            rec.key,
                            f"stored at offset {rec.offset}, beyond the sealed size "
                            f"{latest.sealed_sizes[seg_id]}: the stream was sealed",
                        )
                    )
            require_writable(self.stream, latest.state)
        new_epoch = latest.current_epoch()
        if new_epoch.number != self._epoch.number:
            log.info(
                "writer %s: stream %s moved from epoch %d to %d",
                self.writer_id,
                self.stream,
                self._epoch.number,
                new_epoch.number,
            )
            self._clock.follow(latest.epochs, self._epoch.number)
            self._await_partitions(latest.partition_count())
            self._epoch = new_epoch
            self._routes.clear()
            self._lanes.clear()
            for seg_id in written:
                resend = self._cut_off(seg_id, latest)
                if resend:
                    log.info(
                        "writer %s: re-sending %d record(s) cut off by the seal of segment %d",
                        self.writer_id,
                        len(resend),
                        seg_id,
                    )
                now = self._now_ms()
                for rec in resend:
                    self._send(
                        self._segment_for(rec.key),
                        rec.key,
                        rec.value,
                        rec.timestamp,
                        now,
                        rec.headers,
                        replay=True,
                    )
        self._writable = True

    def _cut_off(self, seg_id: int, metadata: StreamMetadata) -> list[Retained]:
        size = metadata.sealed_sizes[seg_id]
        if self._log.lost(seg_id, size):
            self._failures.append(
                FailedRecord(
                    self._topic,
                    segment_number(seg_id),
                    None,
                    f"records beyond the sealed size {size} are no longer retained; "
                    "raise WriterConfig.replay_window_ms",
                )
            )
        records = self._log.cut_off(seg_id, size)
        self._log.forget(seg_id)
        return records

    def _checked_headers(self, headers: Headers | None) -> KafkaHeaders | None:
        """``checked_headers(headers)``; headers equal to the last ones given (the same
        object, as a caller passing one constant list does) reuse their checked copy: it is
        shared by the records kept for a replay, which nothing changes."""
        if headers is None:
            return None
        if headers is self._headers_given and headers == self._headers_kept:
            return self._headers_kept
        kept = self._headers_kept = checked_headers(headers)
        self._headers_tuple = tuple(kept) if kept else None
        self._headers_given = headers
        return kept

    def _send(
        self,
        seg: Segment,
        key: bytes | None,
        value: bytes,
        client_ts: int | None,
        now_ms: int,
        headers: KafkaHeaders | None = None,
        *,
        replay: bool = False,
    ) -> None:
        """Stamp and send one record (``headers`` checked already); a ``replay`` (a
        re-send of an accepted write) is never refused for needing an adjustment."""
        ts = self._clock.peek(seg.id, client_ts, now_ms, refuse=not replay)
        add, report = self._log.appenders(seg.id)
        self._produce(self._topic, value, key, seg.number, ts, report, headers)
        add((key, value, ts, now_ms, tuple(headers) if headers else None))
        self._clock.advance(seg.id, ts)

    def _await_partitions(self, count: int) -> None:
        deadline = time.monotonic() + self.config.delivery_timeout_ms / 1000
        while True:
            meta = self._producer.list_topics(self._topic, timeout=5)
            found = meta.topics.get(self._topic)
            if found is not None and found.error is None and len(found.partitions) >= count:
                return
            if time.monotonic() > deadline:
                raise WriterTimeoutError(
                    f"topic {self._topic!r} did not show {count} partitions after a scale"
                )
            time.sleep(0.1)

    def _lane(self, key: bytes | None) -> _Lane:
        """``key``'s lane in the current epoch, cached (a ``None`` key's is picked anew)."""
        seg = self._segment_for(key)
        lane = (seg.id, segment_number(seg.id), *self._log.appenders(seg.id))
        if key is not None:
            if len(self._lanes) >= _ROUTE_CACHE_SIZE:
                self._lanes.clear()
            self._lanes[key] = lane
        return lane

    def _segment_for(self, key: bytes | None) -> Segment:
        if key is None:
            return self._epoch.segment_for(random.random())
        seg = self._routes.get(key)
        if seg is None:
            if len(self._routes) >= _ROUTE_CACHE_SIZE:
                self._routes.clear()
            seg = self._routes[key] = self._epoch.segment_for(key_hash(key))
        return seg

    # --- values -------------------------------------------------------------------------

    def _value(self, event: Any) -> bytes:
        if self._serializer is not None:
            try:
                value = self._serializer(event)
            except Exception as exc:
                raise SerializationError(f"the serializer failed on {event!r}: {exc}") from exc
            if not isinstance(value, bytes):
                raise SerializationError(
                    f"the serializer returned {type(value).__name__}, not bytes"
                )
            return value
        if isinstance(event, bytes):
            return event
        if isinstance(event, bytearray | memoryview):
            return bytes(event)
        raise SerializationError(
            f"event is {type(event).__name__}, not bytes; pass serializer=... to the writer "
            "(for example lambda e: json.dumps(e).encode())"
        )

    # --- Kafka ---------------------------------------------------------------------------

    def _record_failure(self, err: KafkaError, msg: Message) -> None:
        self._failures.append(failed_record(msg, err))
        DELIVERY_FAILURES.labels(self.stream, "event").inc()

    def _produce_mark(self, msg: MarkMessage, on_delivery: DeliveryCallback) -> None:
        """Produce a writer mark (inside the open transaction, for a transactional writer)."""
        self._produce(msg.topic, msg.value, msg.key, msg.partition, self._now_ms(), on_delivery)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = err
            log.error("writer %s: fatal Kafka error: %s", self.writer_id, err)
        else:
            log.warning("writer %s: Kafka: %s", self.writer_id, err)

    def _produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        partition: int,
        timestamp: int,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
        headers: KafkaHeaders | None = None,
    ) -> None:
        while True:
            try:
                # Positional: topic, value, key, partition, on_delivery, callback,
                # timestamp, headers (None: no callback, no headers).
                self._producer.produce(
                    topic, value, key, partition, on_delivery, None, timestamp, headers
                )
                return
            except BufferError:
                # The local queue is full: serve delivery reports, then retry.
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise WriterError(
                    f"Kafka refused a record for {topic}[{partition}]: {exc.args[0]}"
                ) from exc

    def _drain(self, timeout_ms: int) -> None:
        """Wait until nothing is in flight (records and marks); failures are not raised
        here, a timeout is."""
        left = flush_publishing(self._producer, self._publish_ready, timeout_ms / 1000)
        if left:
            raise UnacknowledgedError(
                f"writer {self.writer_id}: {left} record(s) still in flight after {timeout_ms} ms"
            )

    def _new_log(self) -> SentRecords:
        return SentRecords(self.config.replay_window_ms, cast(_Offset, Message.offset))

    def _harvest(self) -> None:
        """Read the delivery reports that arrived; failures are raised by the next call."""
        for err, msg in self._log.harvest(self._now_ms()):
            self._record_failure(err, msg)

    def _publish_ready(self) -> int:
        """Publish the notes whose records are all acknowledged; how many were published."""
        self._harvest()
        return self._marks.publish_ready(self.stream, self._log.ready())

    def _check_usable(self) -> None:
        if self._closed:
            raise WriterClosedError(f"writer {self.writer_id} of {self.stream} is closed")
        if self._fatal is not None:
            raise WriterError(
                f"writer {self.writer_id}: Kafka reported a fatal error, create a new writer: "
                f"{self._fatal}"
            )

    def _raise_failures(self) -> None:
        raise_failures(self._failures)

    def _release(self, timeout_ms: int) -> None:
        """Close the Kafka handle (caller holds the lock, the writer is closed): records
        still unacknowledged after ``timeout_ms`` are purged and reported failed."""
        roles.release(self._producer, timeout_ms / 1000)
        self._harvest()

    def position(self) -> dict[int, int]:
        """Segment id -> next offset, for every segment with records acknowledged."""
        with self._lock:
            self._harvest()
            return self._log.position()

    def _max_event_time(self) -> int | None:
        """The highest timestamp this writer has given a record (its clock's floors), or None."""
        return self._clock.highest()


class EventWriter(_StreamWriter):
    """Writes events to one stream and notes the time it has reached.

    ``writer_id`` names this writer to the controller (one noted time per
    id; reuse the id when a writer restarts). A writer without one may write
    but not note time. ``instance``: the token on its marks (default: a new
    one; given only to carry on a registration made under it, as the Spark
    writer job does). Not safe to share between processes; safe between
    threads.
    """

    def __init__(
        self,
        writer_id: str | None,
        stream: str,
        *,
        store: MetadataStore,
        bootstrap_servers: str,
        config: WriterConfig | None = None,
        serializer: Serializer | None = None,
        automatically_note_time: bool | None = None,
        clock: Callable[[], int] | None = None,
        instance: str | None = None,
    ) -> None:
        config = config or WriterConfig()
        if automatically_note_time is not None:
            config = replace(config, automatically_note_time=automatically_note_time)
        if config.automatically_note_time and writer_id is None:
            raise MissingWriterIdError("automatically_note_time needs a writer_id")
        opening = _Opening(writer_id, stream, store, bootstrap_servers, config, serializer, clock)
        super().__init__(opening, instance=instance)
        self._heartbeat: Heartbeat | None = None
        if config.automatically_note_time:
            self._heartbeat = Heartbeat(writer_id, config.note_time_interval_ms, self._note_now)
            self._heartbeat.start()

    # --- writing -------------------------------------------------------------------------

    def write(
        self,
        event: Any,
        routing_key: RoutingKey,
        timestamp: int | None = None,
        on_ack: Callable[[RecordAck], None] | None = None,
        headers: Headers | None = None,
    ) -> int:
        """Send ``event`` to the segment owning ``routing_key`` (``None``: any segment).

        ``event`` is bytes, or anything the writer's serializer takes;
        ``timestamp`` is milliseconds, used as the stream's timestamping rules say;
        ``headers``, Kafka headers: ``(name, value)`` pairs or a mapping, names
        ``str``, values ``bytes`` (:mod:`tidemark.pipelines.writing.headers`).
        Returns the timestamp the record is stored with (in ``arrival`` mode the
        broker's append time replaces it), once Kafka has the record queued;
        ``flush`` waits for it. ``on_ack(RecordAck)`` is called when Kafka has
        stored it, with its offset, stored timestamp and whether it was adjusted
        (from a later ``write``, ``flush`` or ``close``, on the calling thread).
        """
        # The hot path (tests/bench/bench_writer): _send and the checks inlined, the key's
        # segment, partition and sent-log appenders cached together (its lane).
        if type(event) is not bytes:
            event = self._value(event)
        key: bytes | None
        if type(routing_key) is bytes:
            key = routing_key
        elif isinstance(routing_key, str):
            key = routing_key.encode()
        else:
            key = _routing_key_bytes(routing_key)
        if timestamp is not None:
            check_timestamp(timestamp)
        if headers is None:
            kafka_headers = kept = None
        else:  # self._checked_headers; the log keeps its tuple
            if headers is not self._headers_given or headers != self._headers_kept:
                self._checked_headers(headers)
            kafka_headers, kept = self._headers_kept, self._headers_tuple
        with self._lock:
            if self._closed or self._fatal is not None or self._failures:
                self._check_usable()
                self._raise_failures()
            view = self._view
            if view.latest is not view.applied or not self._writable:
                self._refresh()
            lane = self._lanes.get(key) if key is not None else None
            if lane is None:
                lane = self._lane(key)
            seg_id, number, append, report = lane
            now = time.time_ns() // 1_000_000 if self._wall_clock else self._now_ms()
            if timestamp is None and self._clock.arrival_stamps:
                ts = now  # self._clock.peek's rule for a record given no timestamp, inlined
                floor = self._floors.get(seg_id)
                if floor is not None and floor > ts:
                    ts = floor
            else:
                ts = self._clock.peek(seg_id, timestamp, now)
            if on_ack is not None:
                report = self._acking(on_ack, timestamp, report)
            try:
                self._producer.produce(
                    self._topic, event, key, number, report, None, ts, kafka_headers
                )
            except (BufferError, KafkaException):
                self._produce(self._topic, event, key, number, ts, report, kafka_headers)
            self._floors[seg_id] = ts  # self._clock.advance, inlined (peek gave ts >= floor)
            # Kept for replay, its offset comes with the report.
            append((key, event, ts, now, kept))
            # Reports are taken in when some arrived (poll served them) or a note waits.
            if self._producer.poll(0) or self._log.waiting:
                self._publish_ready()
        return ts

    def _acking(
        self, on_ack: Callable[[RecordAck], None], given: int | None, into: Report
    ) -> Callable[[KafkaError | None, Message], None]:
        def report(err: KafkaError | None, msg: Message) -> None:
            into(err, msg)
            if err is None:
                stored = msg.timestamp()[1]
                on_ack(RecordAck(msg.offset() or 0, stored, given is not None and stored != given))

        return report

    def write_batch(
        self,
        events: Sequence[Any],
        routing_key: RoutingKey,
        timestamps: Sequence[int | None] | None = None,
    ) -> BatchAck:
        """Write ``events`` in order to one segment and wait until Kafka stored them.

        Every event and timestamp is checked before anything is sent, so a
        bad one refuses the whole batch. The acknowledgement gives the first
        and last stored offsets and timestamps and, per record, whether its
        timestamp was adjusted (differs from the one given).
        """
        if not events:
            raise WriterError("write_batch needs at least one event")
        if timestamps is not None and len(timestamps) != len(events):
            raise WriterError(
                f"write_batch got {len(events)} events but {len(timestamps)} timestamps"
            )
        values = [self._value(e) for e in events]
        key = _routing_key_bytes(routing_key)
        given: list[int | None] = (
            list(timestamps) if timestamps is not None else [None] * len(values)
        )
        for i, ts in enumerate(given):
            if ts is not None:
                check_timestamp(ts, f"timestamps[{i}]")
        results: list[tuple[int, int] | None] = [None] * len(values)
        reported = [0]

        def on_delivery(index: int, into: Report) -> Callable[[KafkaError | None, Message], None]:
            def report(err: KafkaError | None, msg: Message) -> None:
                into(err, msg)
                reported[0] += 1
                if err is None:
                    results[index] = (msg.offset() or 0, msg.timestamp()[1])

            return report

        with self._lock:
            self._check_usable()
            self._raise_failures()
            view = self._view
            if view.latest is not view.applied or not self._writable:
                self._refresh()
            seg = self._segment_for(key)
            arrival = self._now_ms()
            # Every timestamp first (client-require may refuse one), then send.
            stamps = monotonic(
                (choose(self._clock.policy, ts, arrival) for ts in given),
                self._clock.floor(seg.id),
            )
            refuse_adjusted(self._clock.policy, given, stamps)
            for i, (value, ts) in enumerate(zip(values, stamps, strict=True)):
                add, into = self._log.appenders(seg.id)
                self._produce(self._topic, value, key, seg.number, ts, on_delivery(i, into))
                self._clock.advance(seg.id, ts)
                add((key, value, ts, arrival, None))
            deadline = time.monotonic() + self.config.delivery_timeout_ms / 1000 + 5
            while reported[0] < len(values):
                if time.monotonic() > deadline:
                    raise UnacknowledgedError("write_batch: Kafka did not acknowledge in time")
                self._producer.poll(0.05)
            self._publish_ready()
            # The batch's failures are in self._failures too; report them now.
            self._raise_failures()
        stored = [r for r in results if r is not None]
        return BatchAck(
            segment_id=seg.id,
            records=tuple(
                RecordAck(off, ts, given[i] is not None and ts != given[i])
                for i, (off, ts) in enumerate(stored)
            ),
        )

    def flush(self, timeout_ms: int | None = None) -> None:
        """Wait until Kafka acknowledged every record written and every mark noted.

        Raises :class:`DeliveryError` for records Kafka refused, and
        :class:`WriterTimeoutError` when ``timeout_ms`` (default: the delivery
        timeout) passes first.
        """
        with self._lock:
            self._check_usable()
            self._drain(timeout_ms or self.config.delivery_timeout_ms)
            self._raise_failures()

    # --- time ----------------------------------------------------------------------------

    def note_time(self, timestamp: int) -> None:
        """Tell the controller this writer has reached ``timestamp``.

        The mark's position includes every event written before this call; it
        is published once they are acknowledged (``flush`` waits for it).
        ``timestamp`` may equal the previous noted time, never go below it.
        """
        if self.config.automatically_note_time:
            raise AutomaticTimeError(
                f"writer {self.writer_id} notes time automatically "
                "(automatically_note_time=True); note_time is not available"
            )
        if self.writer_id is None:
            raise MissingWriterIdError(
                "note_time needs a writer id: create the EventWriter with writer_id='...'"
            )
        check_timestamp(timestamp, "noted time")
        with self._lock:
            self._check_usable()
            self._raise_failures()
            self._marks.check_not_backwards(timestamp)
            self._note(timestamp, alive=True)

    def _note(self, timestamp: int, alive: bool) -> None:
        self._marks.last_noted = timestamp
        self._harvest()  # the note's position starts from every report that arrived
        self._log.note(timestamp, alive, self._max_event_time())
        self._publish_ready()
        self._producer.poll(0)

    def _note_now(self) -> bool:
        """The heartbeat's tick: note the time automatically; ``False`` once closed."""
        with self._lock:
            if self._closed:
                return False
            self._note(self._marks.automatic_time(self._now_ms(), self._max_event_time()), True)
            return True

    @property
    def last_noted_time(self) -> int | None:
        return self._marks.last_noted

    # --- closing -------------------------------------------------------------------------

    def close(self, timeout_ms: int | None = None) -> None:
        """Flush, publish the shutdown mark (when time was ever noted, or is noted
        automatically: then at the automatic time of the close), and stop.

        Before the mark, a scale the store records but the writer has not applied
        yet is applied (records its seal cut off are sent again to the successors),
        so every record acknowledged is in the stream when ``close`` returns. The
        shutdown mark (``alive=False``) lets the controller stop waiting
        for this writer at once. Then the Kafka handle is closed (a broker that is
        gone costs at most ``timeout_ms``; nothing reconnects or logs after). Records
        Kafka refused, or did not acknowledge in time, are raised as
        :class:`DeliveryError` after the writer is closed; any use after raises
        :class:`WriterClosedError`. Closing twice is allowed.
        """
        if self._heartbeat is not None:
            self._heartbeat.stop()
        timeout = timeout_ms or self.config.close_timeout_ms
        with self._lock:
            if self._closed:
                return
            try:
                if self._fatal is None:
                    self._drain(timeout)
                    self._apply_scales(timeout)
                    last_noted = self._marks.closing_time(
                        self._heartbeat is not None, self._now_ms(), self._max_event_time()
                    )
                    if self.writer_id is not None and last_noted is not None:
                        self._note(last_noted, alive=False)
                        self._drain(timeout)
            finally:
                self._closed = True
                self._release(timeout)
            self._raise_failures()

    def _apply_scales(self, timeout_ms: int) -> None:
        """Before closing: apply every scale the store records, whether or not the watch
        brought it yet, and wait for the records it makes the writer send again.

        A record acknowledged at or beyond a sealed size is invisible to readers
        until the writer sends it again to the successor, which it does when it
        applies the new epoch -- otherwise at its next write, which a closing
        writer never makes. Once a read of the store after every record was
        acknowledged shows no new epoch, any later scale measures its sealed
        sizes after those records.
        """
        while True:
            self._view.read_now()
            applied = self._epoch.number
            try:
                self._refresh()
            except StreamSealedError:
                return  # what the seal cut off is recorded as failed; close raises it
            if self._epoch.number == applied:
                return
            self._drain(timeout_ms)


__all__ = ["BatchAck", "EventWriter", "RecordAck", "Serializer", "wall_clock_ms"]
