"""A drop-in ``confluent_kafka.Producer`` that takes part in tidemark's watermarks.

    # before:  producer = Producer(conf)
    producer = TidemarkProducer(conf, stream="shop/orders", writer_id="orders-1", store=store)
    producer.produce("tidemark.shop.orders", value, key)     # unchanged calls
    producer.poll(0); producer.flush()
    producer.note_time(event_ms)    # new: "everything up to event_ms is written"
    producer.close()                # new: flush, then the shutdown mark

Only the construction changes: ``produce``, ``poll``, ``flush`` and
``len()`` behave as the wrapped producer's (every other attribute is passed
through), and per-message or configured ``on_delivery`` callbacks are still
called. In addition the producer folds its delivery reports into a
position per stream (:mod:`tidemark.pipelines.writing.positions`), and ``note_time``
publishes a writer mark per stream, following ``schemas/README.md``, once
every record produced before it is acknowledged: with this producer object's
instance token and the highest timestamp it sent (``max_event_time``), as
``EventWriter``'s marks. ``automatically_note_time=True`` notes the time
every ``note_time_interval_ms`` from a background thread instead (the
heartbeat, :mod:`tidemark.pipelines.writing.heartbeat`), so an idle producer keeps its
streams' watermarks moving.

Timestamps: a record of a stream is stamped by the stream's timestamping
rules (:mod:`tidemark.pipelines.writing.timestamping`, as ``EventWriter``'s records):
``timestamp=0`` means "none given", as for ``Producer``; ``client-require``
refuses such a record (:class:`MissingTimestampError`, nothing sent);
``arrival`` lets the broker stamp it; a capped stream lowers a timestamp
later than the producer's clock to it; a timestamp below the segment's
previous one is raised to it, or refused under ``refuse_adjustments``
(:class:`TimestampAdjustmentError`). ``produce`` returns the timestamp sent,
and the delivery report's ``msg.timestamp()`` is the one stored.

Which records count: those produced to the topic of one of the producer's
``stream`` (or ``streams``); records to other topics pass through untouched.

Routing: on a stream tidemark routes (created by tidemark, or adopted with
``tidemark_routing``), a record without an explicit partition goes to the
current epoch's segment owning its key (``tidemark.controller.navigation.route``; a
``None`` key to any current segment), and an explicit partition must be a
current segment. On a topic adopted without tidemark routing the record
goes where the wrapped producer's ``partitioner`` setting would put it, as
before the change (by default :mod:`tidemark.pipelines.writing.partitioners` computes
it, so the producer can give each record its partition's report bucket;
with positions from end offsets librdkafka places it).

Scaling (tidemark-routed streams): when a new epoch appears the producer
waits for the records in flight before routing by it. It keeps no replay
buffer, so records a seal cut off (acknowledged at or beyond a sealed
segment's recorded size) are reported as :class:`DeliveryError` by the
next call, for the application to produce again; ``EventWriter`` re-sends
them by itself.

Per record, in the default mode: while nothing waits to be checked (a failure,
a close, a metadata change: ``_slow``/``_fast``), ``produce`` routes, stamps and
sends a record to a stream's topic with its group's report in one positional
call; anything else goes through ``_checked`` first. ``poll`` calls the wrapped
one and publishes only while a note waits. A record with the application's
delivery callback gets one Python report (the group's store, then that
callback), made once per group and callback (``DeliveryGroups.reporting_to``).
Headers are checked as ``Producer`` takes them (:mod:`tidemark.pipelines.writing.headers`;
a name that is not text is refused). The class has no ``__getattr__`` (it would
cost every attribute read in ``produce`` CPython's specialized loads): the
wrapped producer's other public attributes are passed through by properties.

Positions from end offsets (opt-in, ``positions_from="end_offsets"``; one
argument more: ``TidemarkProducer(conf, ..., positions_from="end_offsets")``):
the per-record delivery reports cost about 1 µs a record in confluent-kafka
even when the callback is C code (a ``Message`` object per report), and the
wrapper's Python frame more. In this mode no delivery report is made per
record, and on streams whose timestamping is ``arrival`` (the broker stamps:
nothing to do per record) the producer's ``produce`` and ``poll`` *are* the
wrapped producer's own methods (set on the instance): no Python runs per
record, Kafka's ``partitioner`` places the records, as the bare producer
would, and ``produce`` returns ``None``. On other streams ``produce`` stays
the Python method that stamps each record (and computes its partition as
the ``partitioner`` would). Kafka reports failed records only
(``delivery.report.only.error``: a Python call per *failure*); the records
produced per partition come from librdkafka's statistics
(:mod:`tidemark.pipelines.writing.produced_counts`; ``statistics.interval.ms`` is
:data:`STATS_INTERVAL_MS` unless the application sets its own, and an
application's ``stats_cb`` given with its interval is still called with
every report). ``note_time`` flushes (it blocks until every record produced
before it is acknowledged), waits for the first statistics report made after
the flush (so a note takes a flush plus up to one interval, half on average),
then takes the position from the written partitions' end offsets (high
watermarks). That position is never earlier than any record of this producer
written before the note, and exact when it is the only producer of those
partitions -- checked by counting: the end offset must have moved by exactly
this producer's stored records (produced minus reported failed) since it was
last read; call ``produce`` and ``note_time`` from one thread. When it moved by
more, the end offset would also cover other producers' records stored
meanwhile, and a cut holding other writers' later events breaks the
``upper_time`` promise (a read starting from a time could start past such an
event); so ``note_time`` raises :class:`SharedPartitionError` and publishes
nothing (shared partitions need ``positions_from="reports"``). The same
happens, erring on the safe side, when a retry without idempotence stored a
record twice or a record reported as failed (e.g. timed out) was stored after
all: enable idempotence. When it moved by less, records are missing that the
producer was not told of (a per-message delivery callback takes its record's
failure report in this mode, and is called for failures only): ``note_time``
raises :class:`DeliveryError` and publishes nothing. A failed record, a
``close`` or a change of the stream's metadata makes the *next* ``produce``
the checking Python method, which raises :class:`DeliveryError` /
:class:`WriterClosedError` as in the default mode (the record is then not
produced) and, all being well, hands ``produce`` back to the wrapped
producer. A configured delivery callback cannot be honoured (successes are
not reported) and is refused, and so are streams tidemark routes (they can
scale, and re-sending what a seal cut off needs each record's offset): the
mode is for topics adopted without tidemark routing.

Transactions are not wrapped: use ``TransactionalWriter``.

Why one module: :class:`TidemarkProducer` is one drop-in ``Producer`` whose methods
all wrap the same producer and the same stream view, and much of the module is this
docstring, which states the promises it keeps.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from confluent_kafka import KafkaError, Message, Producer

from tidemark.controller.closing import Closing
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.admin import StreamTopics, ensure_marks_topic
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import Epoch, WriterMark
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.navigation import key_hash
from tidemark.controller.states import require_writable
from tidemark.controller.store import MetadataStore
from tidemark.controller.timestamps import wall_clock_ms
from tidemark.pipelines.writing.exceptions import (
    AutomaticTimeError,
    DeliveryError,
    FailedRecord,
    MissingWriterIdError,
    SharedPartitionError,
    UnacknowledgedError,
    WriterClosedError,
    WriterConfigError,
    WriterError,
    WriterTimeoutError,
    failed_record,
    raise_failures,
)
from tidemark.pipelines.writing.headers import checked_headers
from tidemark.pipelines.writing.heartbeat import Heartbeat
from tidemark.pipelines.writing.marks import MarkMessage, MarkPublisher, flush_publishing
from tidemark.pipelines.writing.partitioners import (
    DEFAULT_PARTITIONER,
    check_partitioner,
    kafka_partition,
)
from tidemark.pipelines.writing.positions import DeliveryGroups
from tidemark.pipelines.writing.produced_counts import StatisticsReport, StatisticsReports
from tidemark.pipelines.writing.stream_view import StreamView, sealed_by
from tidemark.pipelines.writing.timestamping import SegmentClock, TimestampPolicy, check_timestamp

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, Message], None]

_DELIVERY_KEYS = ("on_delivery", "dr_msg_cb", "dr_cb")
_REFUSED_KEYS = ("transactional.id",)

PositionSource = Literal["reports", "end_offsets"]

_SCALE_TIMEOUT_S = 30.0
"""How long a scale may take to record its sealed sizes, and the records in flight to be
acknowledged, before the producer routes by the new epoch."""

STATS_INTERVAL_MS = 100
"""``statistics.interval.ms`` of a producer with positions from end offsets (unless the
application sets its own): ``note_time`` waits for the next report after its flush."""


class _Stream(StreamView):
    """One stream the producer writes: its metadata (``applied``, ``latest``), routing,
    timestamps (``clock``: the stream's rules, floors per segment) and position."""

    def __init__(
        self,
        store: MetadataStore,
        metadata: StreamMetadata,
        partitioner: str,
        on_change: Callable[[], None],
    ) -> None:
        super().__init__(store, metadata, on_change)
        self.partitioner = partitioner
        self.topic = metadata.topic
        self.groups = DeliveryGroups(())
        self.routed = metadata.adoption is None or metadata.adoption.tidemark_routing
        self.clock = SegmentClock(TimestampPolicy.of(metadata))
        self.floors = self.clock.live_floors
        self.epoch: Epoch = metadata.current_epoch()
        # Positions from end offsets:
        self.failed: dict[int, int] = {}
        """Partition -> this producer's records Kafka reported as not stored."""
        self.end_position: dict[int, int] = {}
        """Partition -> end offset read after the last note's flush."""
        self.checked: dict[int, tuple[int, int]] = {}
        """Partition -> (end offset, records stored) when last read: whether the
        records appended since are exactly this producer's (it writes alone)."""
        self.apply(metadata)

    def apply(self, metadata: StreamMetadata) -> None:
        """Route and stamp by ``metadata`` from now on."""
        self.applied = metadata
        self.segment_of = {s.number: s.id for s in metadata.segments().values()}
        self.clock.policy = TimestampPolicy.of(metadata)
        self.clock.follow(metadata.epochs, self.epoch.number)
        self.epoch = metadata.current_epoch()
        self.current = {s.number for s in self.epoch.segments}
        self.routes: dict[Any, int] = {}
        self.groups.add_partitions(self.segment_of)

    def segment_position(self, by_partition: Mapping[int, int]) -> dict[int, int]:
        return {self.segment_of[p]: off for p, off in by_partition.items()}

    def partition_for(self, key: Any) -> int:
        """The partition of ``key``, remembered in ``routes`` unless chosen at random."""
        if not self.routed:
            number = kafka_partition(self.partitioner, key, len(self.epoch.segments))
            if not key or self.partitioner == "random":
                return number
        elif key is None:
            return random.choice(self.epoch.segments).number
        else:
            number = self.epoch.segment_for(key_hash(key)).number
        if len(self.routes) >= 65_536:
            self.routes.clear()
        self.routes[key] = number
        return number


class TidemarkProducer(Closing):
    """``confluent_kafka.Producer`` plus ``note_time`` and ``close`` (see the module doc).

    ``config`` is the producer's librdkafka settings, as given to ``Producer``
    (``bootstrap.servers`` is required; ``transactional.id`` is refused).
    ``writer_id`` names this writer to the controller: reuse it when the
    process restarts, never share it between live producers.
    ``positions_from``: ``"reports"`` (per-record delivery reports, the
    default) or ``"end_offsets"`` (see the module doc: as fast as the bare
    producer, ``note_time`` flushes and waits for a statistics report, for
    partitions this producer writes alone).
    ``automatically_note_time``: note the time every ``note_time_interval_ms``
    from a background thread, as ``EventWriter`` does (``note_time`` then
    raises); ``produce``, ``poll`` and ``flush`` then take the producer's lock.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        writer_id: str,
        store: MetadataStore,
        stream: str | None = None,
        streams: Sequence[str] = (),
        cluster: ClusterSettings | None = None,
        create_marks_topic: bool = True,
        positions_from: PositionSource = "reports",
        automatically_note_time: bool = False,
        note_time_interval_ms: int = 1_000,
    ) -> None:
        if positions_from not in ("reports", "end_offsets"):
            raise WriterConfigError(
                f"positions_from must be 'reports' or 'end_offsets', got {positions_from!r}"
            )
        if type(note_time_interval_ms) is not int or note_time_interval_ms < 1:
            raise WriterConfigError(
                f"note_time_interval_ms must be an int >= 1, got {note_time_interval_ms!r}"
            )
        if automatically_note_time and positions_from == "end_offsets":
            raise WriterConfigError(
                "automatically_note_time needs positions_from='reports': with end offsets a "
                "note counts the records produced before it, so it must run on the thread "
                "that produces, not on a timer's"
            )
        if not isinstance(writer_id, str) or not writer_id.strip():
            raise MissingWriterIdError(f"writer_id must be a non-empty string, got {writer_id!r}")
        names = [*([stream] if stream is not None else []), *streams]
        if not names:
            raise WriterConfigError("TidemarkProducer needs stream='scope/name' (or streams=[...])")
        settings = dict(config)
        bootstrap = settings.get("bootstrap.servers")
        if not bootstrap:
            raise WriterConfigError("the producer config needs bootstrap.servers")
        refused = [k for k in _REFUSED_KEYS if k in settings]
        if refused:
            raise WriterConfigError(
                f"TidemarkProducer does not wrap transactions ({refused}); "
                "use tidemark.pipelines.writing.transactions.TransactionalWriter"
            )
        partitioner = check_partitioner(str(settings.get("partitioner", DEFAULT_PARTITIONER)))
        self.writer_id = writer_id
        self.cluster = cluster or ClusterSettings()
        self._lock = threading.RLock()
        self._closed = False
        self._released = False
        """True once ``close`` let go of the wrapped client (nothing was left in flight)."""
        self._failures: list[FailedRecord] = []
        self._marks = MarkPublisher(self.cluster, writer_id, self._produce_mark, self._failures)
        self.instance = self._marks.instance
        """This producer object's token on its marks (``marks.instance_token``)."""
        self._noting = False
        """Some note waits for its records: poll publishes the ready ones."""
        self._checking = True
        """``produce`` takes the checking path (``_slow``/``_fast``)."""
        self._streams: dict[str, _Stream] = {}
        for name in names:
            metadata = store.open_for_writing(name)
            self._streams[metadata.topic] = _Stream(store, metadata, partitioner, self._slow)
            self._marks.register(store, name)
        self._broker_stamps = self._all_broker_stamped()
        ensure_marks_topic(str(bootstrap), self.cluster, create=create_marks_topic)
        # A stream's records carry their own delivery callback (their group's bucket),
        # which replaces the configured one: that one is called from a chain instead.
        self._user_delivery: DeliveryCallback | None = None
        for key in _DELIVERY_KEYS:
            if key in settings:
                self._user_delivery = settings[key]
        self._end_offsets: StreamTopics | None = None
        self._stats = StatisticsReports()
        if positions_from == "end_offsets":
            self._by_end_offsets(settings, str(bootstrap))
        self._producer = roles.create(roles.DROP_IN_PRODUCER, settings)
        for st in self._streams.values():
            st.watch()  # a change makes the next produce the checking one (_slow)
        if self._end_offsets is not None:
            vars(self)["poll"] = self._producer.poll  # publishes nothing in this mode
        self._heartbeat: Heartbeat | None = None
        if automatically_note_time:
            # The timer's notes close delivery groups that produce, poll and flush fill:
            # those take the lock too, so a note sees every record on one side of it.
            for name in ("produce", "poll", "flush"):
                vars(self)[name] = self._locked(getattr(self, name))
            self._heartbeat = Heartbeat(writer_id, note_time_interval_ms, self._note_now)
            self._heartbeat.start()
        self._fast()

    def _locked(self, method: Callable[..., Any]) -> Callable[..., Any]:
        lock = self._lock

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return method(*args, **kwargs)

        return call

    def _by_end_offsets(self, settings: dict[str, Any], bootstrap: str) -> None:
        """Set up positions from end offsets: failed records' reports only (module doc)."""
        given = [k for k in (*_DELIVERY_KEYS, "delivery.report.only.error") if k in settings]
        if given:
            raise WriterConfigError(
                f"positions_from='end_offsets' reports failed records only, so it cannot "
                f"honour {given}; leave them out or use positions_from='reports'"
            )
        routed = sorted(st.name for st in self._streams.values() if st.routed)
        if routed:
            raise WriterConfigError(
                f"positions_from='end_offsets' is for topics adopted without tidemark routing; "
                f"{routed} can scale, and re-sending what a seal cut off needs each record's "
                "offset: use positions_from='reports'"
            )
        settings["delivery.report.only.error"] = True
        settings["on_delivery"] = self._on_failed
        # Records produced per partition: librdkafka's statistics (produced_counts).
        interval = int(settings.get("statistics.interval.ms", 0) or 0)
        if interval > 0 and "stats_cb" in settings:
            self._stats.forward = settings["stats_cb"]  # the application's, at its interval
        settings["statistics.interval.ms"] = interval if interval > 0 else STATS_INTERVAL_MS
        settings["stats_cb"] = self._stats
        self._end_offsets = StreamTopics(bootstrap)
        for st in self._streams.values():
            ends = self._end_offsets.end_offsets(st.topic, sorted(st.segment_of))
            st.checked = {p: (end, 0) for p, end in ends.items()}

    def _fast(self) -> None:
        """``produce`` takes its fast path (positions from reports: the class's method routes
        and reports the record at once; from end offsets: the wrapped producer's own C method,
        set on the instance, only when every stream takes the broker's append time), unless a
        failure, a close or a metadata change waits for the checking one."""
        if self._end_offsets is None:
            self._checking = False
        elif self._broker_stamps and type(self).produce is TidemarkProducer.produce:
            vars(self)["produce"] = self._producer.produce
        else:
            return  # the streams' timestamping rules run in Python, record by record
        if (
            self._closed
            or self._failures
            or any(st.latest is not st.applied for st in self._streams.values())
        ):
            self._slow()  # raced with _on_failed/close/a watcher: check first

    def _all_broker_stamped(self) -> bool:
        """Every stream takes the broker's append time: no record needs stamping here."""
        return all(st.clock.policy.uses_broker_time for st in self._streams.values())

    def _slow(self) -> None:
        """The next ``produce`` checks (and raises) first. (With automatic note time the
        ``produce`` set on the instance is the locking one, which stays.)"""
        self._checking = True
        if self._end_offsets is not None:
            vars(self).pop("produce", None)

    def _on_failed(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed = failed_record(msg)
            self._failures.append(failed)
            self._slow()
            st = self._streams.get(failed.topic)
            if st is not None and failed.partition >= 0:  # not in the end offsets either
                st.failed[failed.partition] = st.failed.get(failed.partition, 0) + 1

    # --- what Producer offers -------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
        callback: DeliveryCallback | None = None,
    ) -> int | None:
        """``Producer.produce``; on a stream's topic the record is stamped by the stream's
        timestamping rules (``timestamp=0``: none given, as for ``Producer``) and counts for
        its position. Returns the timestamp the record is sent with (``None`` for another
        topic); the delivery report's ``msg.timestamp()`` is the stored one.

        Raises :class:`MissingTimestampError` (``client-require``) or
        :class:`TimestampAdjustmentError` (``refuse_adjustments``) instead of sending.
        """
        st = self._streams.get(topic)
        if st is None or partition >= 0 or headers is not None or self._checking or self._failures:
            # Not the usual record, or something waits to be checked (a mark's failure
            # comes without _slow).
            if st is None:  # another topic: untouched (a configured callback runs as configured)
                cb = on_delivery or callback
                self._producer.produce(topic, value, key, partition, cb, None, timestamp, headers)
                return None
            headers = self._checked(st, partition, headers)
        # The usual record takes no lock and runs no Python per report (the group's C-level
        # bucket setter, see DeliveryGroups).
        if partition < 0:  # a key's partition is computed once (random ones never cached)
            partition = st.routes.get(key, -1) if key is not None else -1
            if partition < 0:
                partition = st.partition_for(key)
        seg = st.segment_of[partition]
        clock = st.clock
        if not timestamp and clock.arrival_stamps:
            # the clock's peek for a record given no timestamp, and wall_clock_ms, inlined
            ts = time.time_ns() // 1_000_000
            floor = st.floors.get(seg)
            if floor is not None and floor > ts:
                ts = floor
        else:
            if timestamp:
                check_timestamp(timestamp)
            ts = clock.peek(seg, timestamp or None, wall_clock_ms())
        cb = on_delivery or callback
        # Positional (keywords cost a dict per call): ..., on_delivery, callback, timestamp,
        # headers.
        if self._end_offsets is None:
            groups = st.groups
            cb = cb or self._user_delivery  # after the group's report (made once, looked up)
            report = groups.reports[partition].get(cb) or groups.reporting_to(partition, cb)
            self._producer.produce(topic, value, key, partition, report, None, ts, headers)
            groups.used[partition] = True
        else:  # positions from end offsets: failed records' reports only
            self._producer.produce(topic, value, key, partition, cb, None, ts, headers)
        st.floors[seg] = ts  # the clock's advance (peek gave ts >= the floor)
        if self._checking:
            self._fast()  # checked: the fast path takes the next records again
        return ts

    def _checked(self, st: _Stream, partition: int, headers: Any) -> Any:
        """Raise what waits (a failure, a close), follow a metadata change, check the
        record's explicit partition and its headers (as ``Producer`` takes them, a bad one
        named: :mod:`tidemark.pipelines.writing.headers`); the headers to send."""
        if self._closed or self._failures or st.latest is not st.applied:
            with self._lock:
                self._before_produce(st)
        if partition >= 0:
            if st.routed and partition not in st.current:
                raise WriterError(
                    f"partition {partition} of {st.topic} is not a current segment of stream "
                    f"{st.name} (current: {sorted(st.current)}); leave partition unset"
                )
            if partition not in st.segment_of:
                raise WriterError(
                    f"partition {partition} of {st.topic} is not a segment of stream "
                    f"{st.name} (segments: partitions {sorted(st.segment_of)})"
                )
        return None if headers is None else checked_headers(headers, as_producer=True)

    def _before_produce(self, st: _Stream) -> None:
        self._check()
        if st.latest is not st.applied:
            self._refresh(st)
            self._broker_stamps = self._all_broker_stamped()

    def poll(self, timeout: float = -1) -> int:
        """``Producer.poll``; also publishes the marks whose records are all acknowledged.

        (With positions from end offsets ``poll`` is the wrapped producer's own method.)"""
        if self._released:
            return 0
        served = self._producer.poll(timeout)
        if self._noting:
            with self._lock:
                self._publish_ready()
        return served

    def flush(self, timeout: float = -1) -> int:
        """``Producer.flush``: records and marks; the number still in flight."""
        if self._released:
            return 0
        timeout_s = None if timeout is None or timeout < 0 else timeout
        return flush_publishing(self._producer, self._publish_ready_locked, timeout_s)

    def _publish_ready_locked(self) -> int:
        with self._lock:
            return self._publish_ready()

    def __len__(self) -> int:
        return len(self._producer)

    if TYPE_CHECKING:  # at run time, _pass_through's properties (see there)

        def __getattr__(self, name: str) -> Any: ...

    # --- what tidemark adds ---------------------------------------------------------------

    def note_time(self, timestamp: int, stream: str | None = None) -> None:
        """Every record produced before this call has an event time up to ``timestamp``.

        Queues a writer mark per stream (or for ``stream`` alone), published
        once those records are acknowledged; it does not block (with
        ``positions_from="end_offsets"`` it flushes first, then publishes).
        ``timestamp`` may repeat the previous noted time, never go below it.
        """
        if self._heartbeat is not None:
            raise AutomaticTimeError(
                f"producer of writer {self.writer_id} notes time automatically "
                "(automatically_note_time=True); note_time is not available"
            )
        check_timestamp(timestamp, "noted time")
        with self._lock:
            self._check()
            self._marks.check_not_backwards(timestamp)
            self._note(timestamp, alive=True, only=stream)

    def _note_now(self) -> bool:
        """The heartbeat's tick: note the time automatically; ``False`` once closed."""
        with self._lock:
            if self._closed:
                return False
            self._note(self._marks.automatic_time(wall_clock_ms(), self._max_event_time()))
            return True

    def _max_event_time(self) -> int | None:
        """The highest timestamp this producer sent a record of its streams with, or None."""
        return max(
            (t for st in self._streams.values() if (t := st.clock.highest()) is not None),
            default=None,
        )

    def close(self, timeout: float = 30.0) -> None:
        """Flush, publish the shutdown mark (when time was ever noted, or is noted
        automatically: then at the automatic time of the close), flush again, and let
        go of the Kafka client, purging what is still in flight after ``timeout``
        (``poll`` and ``flush`` then answer 0; the client's own methods raise
        ``RuntimeError``, as after ``Producer.close``).

        Raises :class:`DeliveryError` for records Kafka did not store, after
        closing. Closing twice is allowed.
        """
        if self._heartbeat is not None:
            self._heartbeat.stop()
        with self._lock:
            if self._closed:
                return
            try:
                if self.flush(timeout):
                    raise UnacknowledgedError(
                        f"writer {self.writer_id}: records still in flight after {timeout} s"
                    )
                last = self._marks.closing_time(
                    self._heartbeat is not None, wall_clock_ms(), self._max_event_time()
                )
                if last is not None:
                    self._note(last, alive=False)
                    if self.flush(timeout):
                        raise UnacknowledgedError(
                            f"writer {self.writer_id}: no ack of the shutdown mark in {timeout} s"
                        )
            finally:
                self._closed = True
                self._slow()
                self._release()
            self._raise_failures()

    def _release(self) -> None:
        """Stop the wrapped client's threads and broker connections at the close, not when
        the object is collected: what is still in flight after the close's flush is
        purged, its delivery reports (served here) saying so. Nothing reconnects after."""
        vars(self).pop("poll", None)  # the wrapped producer's own, with end offsets
        self._released = True
        roles.release(self._producer, 0)

    def position(self, stream: str) -> dict[int, int]:
        """Segment id -> next offset acknowledged on ``stream``'s segments."""
        for st in self._streams.values():
            if st.name == stream:
                with self._lock:
                    if self._end_offsets is not None:
                        return st.segment_position(st.end_position)  # as of the last note
                    return st.segment_position(st.groups.position(_offset))
        raise WriterError(f"this producer does not write stream {stream!r}")

    @property
    def last_noted_time(self) -> int | None:
        return self._marks.last_noted

    # --- internals ------------------------------------------------------------------------

    def _refresh(self, st: _Stream) -> None:
        latest = st.latest
        require_writable(st.name, latest.state)
        if latest.current_epoch().number != st.epoch.number:
            # Per-key order: nothing of a sealed segment may be in flight when its keys move.
            flush_publishing(self._producer, self._publish_ready, _SCALE_TIMEOUT_S)
            self._check_cut_off(st, latest)
        st.apply(latest)

    def _check_cut_off(self, st: _Stream, latest: StreamMetadata) -> None:
        """Records acknowledged at or beyond a sealed size are not in the stream: report them."""
        position = st.segment_position(st.groups.position(_offset))
        written = [s for s in sealed_by(st.epoch, latest) if s in position]
        if written:
            latest = st.await_sealed_sizes(written, _SCALE_TIMEOUT_S)
        for seg_id in written:
            size = latest.sealed_sizes[seg_id]
            if position[seg_id] > size:
                self._failures.append(
                    FailedRecord(
                        st.topic,
                        seg_id & 0xFFFFFFFF,
                        None,
                        f"{position[seg_id] - size} record(s) acknowledged at or beyond the "
                        f"sealed size {size} of segment {seg_id} are not in the stream; "
                        "produce them again",
                    )
                )

    def _note(self, timestamp: int, alive: bool = True, only: str | None = None) -> None:
        if self._end_offsets is not None:
            self._note_at_end_offsets(self._end_offsets, timestamp, alive, only)
            return
        self._marks.last_noted = timestamp
        for st in self._streams.values():
            if only is None or st.name == only:
                st.groups.note(timestamp, alive, st.clock.highest())
        self._publish_ready()
        self._producer.poll(0)

    def _publish_ready(self) -> int:
        published = 0
        waiting = False
        idle = len(self._producer) == 0
        for st in self._streams.values():
            notes = st.groups.ready(idle, _offset)
            for note in notes:
                self._failures.extend(failed_record(msg) for msg in note.failed)
            published += self._marks.publish_ready(st.name, notes, st.segment_position)
            waiting = waiting or st.groups.waiting
        self._noting = waiting  # poll publishes the notes as their records are acknowledged
        return published

    def _produce_mark(self, msg: MarkMessage, on_delivery: DeliveryCallback) -> None:
        self._producer.produce(
            msg.topic, msg.value, msg.key, msg.partition, on_delivery=on_delivery
        )

    def _note_at_end_offsets(
        self, topics: StreamTopics, timestamp: int, alive: bool, only: str | None
    ) -> None:
        """Flush, then publish marks whose positions are the written partitions' end offsets
        (never earlier than any record of this producer; see the module doc)."""
        if self._producer.flush(topics.timeout_s):
            raise UnacknowledgedError(
                f"writer {self.writer_id}: records still in flight after {topics.timeout_s} s; "
                f"time {timestamp} not noted"
            )
        self._raise_failures()  # a record before the note was not stored: no mark
        flushed_ms = wall_clock_ms()  # every record before the note is stored by now
        report = self._report_after(time.monotonic(), topics.timeout_s, timestamp)
        for st in self._streams.values():
            if only is not None and st.name != only:
                continue
            produced = report.produced(st.topic)
            outside = sorted(p for p, n in produced.items() if n and p not in st.segment_of)
            if outside:
                raise WriterError(
                    f"writer {self.writer_id}: records went to partition(s) {outside} of "
                    f"{st.topic}, which are not segments of stream {st.name} (partitions added "
                    f"to the topic outside tidemark?); time {timestamp} not noted"
                )
            stored = {p: n - st.failed.get(p, 0) for p, n in produced.items() if n}
            ends = topics.end_offsets(st.topic, sorted(stored))
            moved = {p: self._moved(st, p, end, stored[p]) for p, end in sorted(ends.items())}
            lost = [  # one per record (DeliveryError.failed)
                FailedRecord(
                    st.topic,
                    p,
                    None,
                    f"{-extra} record(s) produced since the last note are not in the partition "
                    "and their failure was not reported to the producer (a per-message "
                    "delivery callback took it)",
                )
                for p, extra in moved.items()
                for _ in range(-extra)
            ]
            if lost:  # no mark over records that are not there
                raise DeliveryError(lost)
            shared = [p for p, extra in moved.items() if extra > 0]
            if shared:  # no mark: its cut could hold another producer's later records
                raise SharedPartitionError(self.writer_id, st.topic, shared)
            for p, end in ends.items():
                if end > st.end_position.get(p, 0):
                    st.end_position[p] = end
            top = st.clock.highest()
            if st.clock.policy.uses_broker_time and stored:
                # Sent unstamped (the broker's append time): none later than the flush's end.
                top = max(top or 0, flushed_ms)
            mark = WriterMark(timestamp, st.segment_position(st.end_position), alive, top)
            self._marks.publish(st.name, mark)
        self._marks.last_noted = timestamp
        self._producer.poll(0)

    def _report_after(self, since: float, timeout_s: float, timestamp: int) -> StatisticsReport:
        """The first statistics report librdkafka made at or after ``since``
        (``time.monotonic()``; its ``ts`` is the same clock in microseconds)."""
        deadline = since + timeout_s
        while (report := self._stats.since(since * 1e6)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WriterTimeoutError(
                    f"writer {self.writer_id}: no statistics report from librdkafka in "
                    f"{timeout_s} s (is poll() blocked elsewhere?); time {timestamp} not noted"
                )
            self._producer.poll(min(left, 1.0))
        return report

    @staticmethod
    def _moved(st: _Stream, p: int, end: int, stored: int) -> int:
        """How many records more than this producer stored in ``p`` its end offset moved by
        since it was last read: 0 when it writes ``p`` alone (the end offset is then its
        exact position), more when another producer wrote there too (or a retry without
        idempotence stored a record twice, or a record reported failed was stored after
        all), less when records are missing."""
        was_end, was_stored = st.checked.get(p, (end, stored))
        st.checked[p] = (end, stored)
        return (end - was_end) - (stored - was_stored)

    def _check(self) -> None:
        if self._closed:
            raise WriterClosedError(f"producer of writer {self.writer_id} is closed")
        self._raise_failures()

    def _raise_failures(self) -> None:
        raise_failures(self._failures)


def _pass_through(name: str) -> property:
    return property(lambda self: getattr(self._producer, name), doc=f"``Producer.{name}``.")


# Every other public attribute of Producer is the wrapped producer's: one property each, not
# a __getattr__, which would cost every attribute read of the producer (in produce, record by
# record) CPython's specialized loads.
for _name in dir(Producer):
    if not _name.startswith("_") and not hasattr(TidemarkProducer, _name):
        setattr(TidemarkProducer, _name, _pass_through(_name))


def _offset(msg: Message) -> int:
    return msg.offset() or 0


__all__ = ["DeliveryCallback", "TidemarkProducer"]
