"""A reader of a reader group: events in per-key order, across scaling, with a time window.

    group = ReaderGroup.create("billing", "shop/orders", store=store,
                               bootstrap_servers=bootstrap, delta_root="/data/delta")
    with group.reader("reader-1") as reader:
        event = reader.read_next(timeout_ms=1000)     # EventRead, or None on timeout
        if event is not None:
            print(event.segment, event.offset, event.timestamp, event.body)
        reader.current_time_window()                   # TimeWindow(lower, upper)
        batch = reader.read_batch(500, timeout_ms=1000)  # EventBatch: the events of one fetch,
        batch.events, batch.position, batch.window       # position and window at its end
        batch.values()                                   # the bodies alone (no EventRead made)

Kafka: one consumer per reader, ``isolation.level=read_committed`` (a reader
never sees what lies above the last stable offset: uncommitted or aborted
transactions), partitions **assigned** explicitly at the group's committed
offsets -- never ``subscribe``, since Kafka's rebalancing knows nothing of
segments and their order.

Segments: the reader owns a fair share of the segments the group may read
now (``tidemark.pipelines.reading.view``), recorded in the group's registry so no two
readers read the same segment. A sealed segment ends at its sealed size;
once read to it, the reader commits the sealed size (the group then counts
it finished) and gives it up, and a successor becomes readable once all its
predecessors are finished -- per-key order across any number of scales. A
segment sealed whose size is not recorded yet (a scale between its epoch and
its sizes) is held: not fetched, nothing of it returned, until the size is
there (``_hold``).

Fetching: records come from the consumer in batches (``consume``), kept in
a buffer the reader hands out one by one (``read_next``) or a fetch at a
time (``read_batch``). Per event the reader only checks the segment's
sealed-size limit and notes the offset; what can be decided per segment
(which segments it owns, their sealed sizes) is looked up when it takes a
segment and on each rebalance, and a batch's time window is resolved once,
at its end.

Committing: the position reached by the events already returned is
committed (to the Kafka consumer group) at most every
``commit_interval_ms`` at the start of ``read_next``, on :meth:`commit`, when
a segment is given up, and on :meth:`close`: at-least-once delivery.

At each rebalance tick the reader also takes part in the group's
checkpoints (``tidemark.pipelines.reading.checkpoints``: commit, acknowledge, hold
still while one is taken) and, when ``ReaderConfig`` asks for it, in the
time policies (``tidemark.pipelines.reading.balance``: ownership by time, pausing
segments that run more than ``max_drift_ms`` ahead).

Why one module: it is the one :class:`EventReader`, a single-threaded state machine
over one Kafka consumer (its fetch buffer, its owned, held and finished segments, its
committed position), with the events and batches it makes of that consumer's records
(a batch's events, position and window are worked out lazily from what the reader
hands it).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from tidemark.controller.closing import Closing
from tidemark.controller.kafka import roles
from tidemark.controller.model import Segment, TimeWindow, segment_number
from tidemark.pipelines.reading.balance import SegmentClocks, TimePolicy
from tidemark.pipelines.reading.checkpoints import POLL_S, CheckpointParticipation
from tidemark.pipelines.reading.config import ReaderConfig
from tidemark.pipelines.reading.exceptions import (
    ReaderBehindHeadError,
    ReaderClosedError,
    ReaderConfigError,
    ReaderError,
)
from tidemark.pipelines.reading.registry import GroupRegistry
from tidemark.pipelines.reading.view import GroupView
from tidemark.pipelines.reading.windows import PositionWindow, WatermarkFeed, reader_position

log = logging.getLogger(__name__)


Headers = tuple[tuple[str, bytes | None], ...]
"""A record's Kafka headers, ``(name, value)`` in the order written (a name may repeat)."""


@dataclass(frozen=True)
class EventRead:
    """One event: where it was (segment id, partition, offset), its timestamp and body,
    its routing key and Kafka headers as written (byte for byte; ``()`` for none).

    Or, as Pravega's ``EventRead.isCheckpoint``, the place of a checkpoint in this
    reader's events: ``checkpoint_name`` set, no event (``segment``, ``offset`` and
    ``timestamp`` are -1, the body empty). Every event returned before it lies
    before the checkpoint's cut, every one after it at or after the cut."""

    stream: str
    segment: int
    offset: int
    timestamp: int
    body: bytes
    routing_key: bytes | None = None
    headers: Headers = ()
    checkpoint_name: str | None = None

    @property
    def partition(self) -> int:
        return segment_number(self.segment)

    @property
    def event(self) -> bytes:
        """The body (Pravega's ``EventRead.getEvent``)."""
        return self.body

    @property
    def is_checkpoint(self) -> bool:
        """Whether this is a checkpoint's place rather than an event."""
        return self.checkpoint_name is not None

    @classmethod
    def checkpoint(cls, stream: str, name: str) -> EventRead:
        """The place of checkpoint ``name`` in a reader's events of ``stream``."""
        return cls(stream, -1, -1, -1, b"", checkpoint_name=name)


_object_new = object.__new__
_event_segment = attrgetter("segment")
_event_offset = attrgetter("offset")
_event_body = attrgetter("body")
_record_partition = Message.partition
_record_value = Message.value
_record_error = Message.error


def _events_of(
    msgs: Iterable[Any], segment_of: Mapping[int, int], stream: str
) -> tuple[list[Any], list[int]]:
    """Each record of a segment in ``segment_of`` (partition -> segment id) made its
    :class:`EventRead`, the others (errors, end-of-partition notices, records of
    other partitions) left as they are; and the indexes of those left."""
    new = _object_new
    records_at = []
    items: list[Any] = []
    append = items.append
    for msg in msgs:
        seg_id = segment_of.get(msg.partition())
        if seg_id is None or msg.error() is not None:
            records_at.append(len(items))
            append(msg)
        else:
            # EventRead(...) without its generated __init__ (which goes through
            # object.__setattr__ per field): the same frozen object, at half the cost.
            event = new(EventRead)
            fields = event.__dict__
            fields["stream"] = stream
            fields["segment"] = seg_id
            fields["offset"] = msg.offset()
            fields["timestamp"] = msg.timestamp()[1]
            fields["body"] = msg.value() or b""
            fields["routing_key"] = msg.key()
            headers = msg.headers()
            fields["headers"] = () if headers is None else tuple(headers)
            append(event)
    return items, records_at


def _notices_last(msgs: list[Any]) -> tuple[list[Any], list[Any]] | None:
    """A fetch's records and its end-of-partition notices apart, when every error in
    it is such a notice and comes after the last record of its partition
    (handling the notices after the records then changes nothing); else None."""
    records: list[Any] = []
    notices: list[Any] = []
    noticed: set[int] = set()
    for msg in msgs:
        err = msg.error()
        if err is None:
            if msg.partition() in noticed:
                return None
            records.append(msg)
        elif err.code() == KafkaError._PARTITION_EOF:
            notices.append(msg)
            noticed.add(msg.partition())
        else:
            return None
    return records, notices


class _WithFinished(NamedTuple):
    """A position to be made the reader position (``reader_position``) when asked for."""

    offsets: Mapping[int, int]
    finished: Set[int]
    segments: Mapping[int, Segment]


class EventBatch:
    """The events of one fetch (in the order read: per segment, by offset), with the
    reader's position after the last of them and the time window at that position.

    Immutable. A batch read straight from the consumer holds its records and
    makes their :class:`EventRead`\\ s when :attr:`events` (or iteration,
    indexing) first asks; :meth:`values` gives the bodies alone without making
    any event. ``len(batch)`` costs nothing either way."""

    __slots__ = (
        "_checkpoint",
        "_events",
        "_made_of",
        "_position",
        "_records",
        "_window",
        "window_at",
    )

    _events: tuple[EventRead, ...]
    _made_of: tuple[Mapping[int, int], str]
    _position: Mapping[int, int] | _WithFinished
    _records: Sequence[Any]
    _window: TimeWindow
    window_at: Callable[[Mapping[int, int]], TimeWindow]

    def __init__(
        self,
        events: tuple[EventRead, ...],
        position: Mapping[int, int],
        window_at: Callable[[Mapping[int, int]], TimeWindow],
    ) -> None:
        _set_events(self, events)
        _set_records(self, events)
        _set_position(self, position)
        _set_window_at(self, window_at)

    @classmethod
    def _of_records(
        cls,
        records: list[Any],
        segment_of: Mapping[int, int],
        stream: str,
        position: Mapping[int, int],
        window_at: Callable[[Mapping[int, int]], TimeWindow],
    ) -> EventBatch:
        """A batch of Kafka records, each of a segment in ``segment_of`` (partition ->
        segment id) and none an error: events made when first asked for."""
        batch = _object_new(cls)
        _set_records(batch, records)
        _set_made_of(batch, (segment_of, stream))
        _set_position(batch, position)
        _set_window_at(batch, window_at)
        return batch

    def _with_finished(
        self, offsets: Mapping[int, int], finished: Set[int], segments: Mapping[int, Segment]
    ) -> EventBatch:
        """This batch, its :attr:`position` the reader position of ``offsets`` (the owned
        segments' next offsets) with ``finished`` segments
        (``windows.reader_position``), worked out when first asked for."""
        _set_position(self, _WithFinished(offsets, finished, segments))
        return self

    @property
    def position(self) -> Mapping[int, int]:
        """The reader's position after the batch (as :meth:`EventReader.position`)."""
        position = self._position
        if isinstance(position, _WithFinished):
            position = reader_position(*position)
            _set_position(self, position)
        return position

    @property
    def events(self) -> tuple[EventRead, ...]:
        """The events, made once, when first asked for."""
        try:
            return self._events
        except AttributeError:
            segment_of, stream = self._made_of
            made, _ = _events_of(self._records, segment_of, stream)
            events = tuple(made)
            _set_events(self, events)
            return events

    def values(self) -> list[bytes]:
        """The events' bodies, in order (``[e.body for e in batch.events]``), without
        making the events."""
        records = self._records
        if type(records) is tuple:  # (events)
            return list(map(_event_body, records))
        values: list[bytes | None] = list(map(_record_value, records))
        if not all(values):  # a record without a value: an empty body, as EventRead's
            return [v or b"" for v in values]
        return values  # type: ignore[return-value]

    @property
    def window(self) -> TimeWindow:
        """The time window at :attr:`position`, resolved once, when first asked for
        (a batch nobody asks costs no window; a failure to read the watermarks
        is raised here, with the events already in hand)."""
        try:
            return self._window
        except AttributeError:
            window = self.window_at(self.position)
            object.__setattr__(self, "_window", window)
            return window

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"EventBatch is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"EventBatch is immutable: cannot delete {name!r}")

    @property
    def checkpoint_name(self) -> str | None:
        """Set on the (empty) batch where the reader acknowledged a checkpoint: every
        event of earlier batches lies before its cut, every one of later ones after."""
        return getattr(self, "_checkpoint", None)

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[EventRead]:
        return iter(self.events)

    def __getitem__(self, index: int) -> EventRead:
        return self.events[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EventBatch):
            return NotImplemented
        return self.events == other.events and self.position == other.position

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EventBatch(events={self.events!r}, position={self.position!r})"


_slot = EventBatch.__dict__
_set_events: Callable[[EventBatch, tuple[EventRead, ...]], None] = _slot["_events"].__set__
_set_made_of: Callable[[EventBatch, Any], None] = _slot["_made_of"].__set__
_set_position: Callable[[EventBatch, Mapping[int, int] | _WithFinished], None] = _slot[
    "_position"
].__set__
_set_records: Callable[[EventBatch, Sequence[Any]], None] = _slot["_records"].__set__
_set_window_at: Callable[[EventBatch, Any], None] = _slot["window_at"].__set__
_set_checkpoint: Callable[[EventBatch, str], None] = _slot["_checkpoint"].__set__
"""Slot setters (EventBatch's own ``__setattr__`` refuses): a batch is built per fetch."""


def records_of(batch: EventBatch) -> tuple[Sequence[Any], Mapping[int, int], str] | None:
    """The Kafka records ``batch`` was made of, with its partition -> segment id map and
    stream; None for a batch made of events. For code that takes what it needs of a
    reader's records without making events (the event-time merge,
    ``tidemark.pipelines.reading.merged_batch``)."""
    try:
        segment_of, stream = batch._made_of
    except AttributeError:
        return None
    return batch._records, segment_of, stream


FETCH_SIZE = 128
"""Records ``read_next`` takes from the consumer per fetch, and ``read_batch``'s
default ``max_events``. Kept small: events alive across Python's youngest
garbage collections get promoted and make later collections cost more per
event (on the development machine, reading-thread CPU per event: 1.3 us at
64-256 records per fetch, 2.1 us at 500)."""

_NO_LIMIT = 2**63

TOPIC_LOOKUP_MS = 1_000
"""The longest a reader waits for its topic's metadata at its first assignment:
librdkafka's own topic scan (every second) would find the leader by then."""

SIZE_WAIT_WARN_S = 10.0
"""A segment held this long for its sealed size is logged as a warning (and again
each time as long again passes): a scale or seal that stopped before recording it."""


class ReaderHost(Protocol):
    """What a reader needs of its group (:class:`~tidemark.pipelines.reading.group.ReaderGroup`
    is one): names, the registry of owners, the committed position, segments
    and watermarks. The reader reaches nothing else of the group."""

    name: str
    stream: str
    topic: str
    config: ReaderConfig
    registry: GroupRegistry
    peers: tuple[str, ...]
    """Groups of the other streams read together with this one (alignment counts them)."""

    def consumer_settings(self, client_id: str) -> dict[str, Any]: ...
    def view(self) -> GroupView: ...
    def committed_offsets(self, seg_ids: Iterable[int]) -> dict[int, int]: ...
    def commit_offsets(self, offsets: Mapping[int, int], consumer: Any = None) -> None: ...
    def segments(self) -> Mapping[int, Segment]: ...
    def segment_of(self, partition: int) -> int: ...
    def sealed_size(self, seg_id: int) -> int | None: ...
    def sealing(self) -> tuple[Mapping[int, int], Set[int]]: ...
    def refresh(self) -> None: ...
    def watermark_feed(self) -> WatermarkFeed: ...
    def attach(self, reader: EventReader) -> None: ...
    def detach(self, reader: EventReader) -> None: ...


class EventReader(Closing):
    """Created by :meth:`ReaderGroup.reader`; not thread-safe (one thread reads)."""

    def __init__(self, group: ReaderHost, name: str) -> None:
        self.group = group
        self.name = name
        self.config = group.config
        self._stream = group.stream
        self._closed = False
        self._offsets: dict[int, int] = {}
        """Owned segment id -> next offset to return."""
        self._committed: dict[int, int] = {}
        self._eof: set[int] = set()
        self._finish_after: set[int] = set()
        self._by_partition: dict[int, int] = {}
        """Partition -> owned segment id (a record of any other partition is dropped)."""
        self._last_offset: dict[int, int] = {}
        """Owned segment id -> its last offset to return (sealed size - 1), or _NO_LIMIT."""
        self._unsealed: dict[int, int] = {}
        """Partition -> owned segment id, for the segments not sealed (no size limit)."""
        self._buffer: list[Any] = []
        """What the last fetch brought, handed out from ``self._next`` on: events
        (records of unsealed owned segments, made events when fetched) and the
        records left to be looked at one by one (end-of-partition notices,
        errors, records of sealed segments or of segments given up)."""
        self._records_at: list[int] = []
        """Indexes of those records in the buffer (ascending)."""
        self._next = 0
        self._view: GroupView | None = None
        self._next_rebalance = 0.0
        self._next_metadata = 0.0
        """When to look at the stream's metadata again between rebalances (monotonic s)."""
        self._last_commit = time.monotonic()
        self._due = 0.0
        """No housekeeping (auto-commit, rebalance, metadata look) is due before this
        (monotonic s)."""
        self._window: PositionWindow | None = None
        self._paused: set[int] = set()
        """Owned segments held back by alignment (unassigned; still ours)."""
        self._held: dict[int, float] = {}
        """Owned segments held back until their sealed sizes are recorded (unassigned;
        still ours; where such a segment ends is unknown) -> since when (monotonic s)."""
        self._warned: dict[int, float] = {}
        """Held segment -> when its hold was last logged (monotonic s)."""
        self._topic_asked = False
        """Whether the topic's metadata was asked for (``_ask_topic``)."""
        self._checkpoints = CheckpointParticipation(
            group.registry, group.name, name, lambda: self._commit(dict(self._offsets))
        )
        self._policy = TimePolicy(
            group.config,
            group.registry,
            group.name,
            name,
            SegmentClocks(group.watermark_feed, group.segments),
            peers=group.peers,
        )
        group.registry.join(group.name, name)
        try:
            self._consumer = roles.create(
                roles.READER_CONSUMER, group.consumer_settings(client_id=f"tidemark-{name}")
            )
        except Exception:
            group.registry.leave(group.name, name)
            raise
        group.attach(self)

    # --- reading --------------------------------------------------------------------------

    def read_next(
        self, timeout_ms: float | None = None, *, timeout: float | None = None
    ) -> EventRead | None:
        """The next event, or ``None`` when none came within ``timeout_ms``
        (milliseconds; ``timeout`` is the same in Pravega's spelling; default 1000)."""
        if self._closed:
            self._check_open()
        wait_ms = timeout_ms if timeout_ms is not None else timeout
        if (self._finish_after or time.monotonic() >= self._due) and not self._start_call(wait_ms):
            return self._checkpoint_read()  # or None: held still for the whole wait
        buffer = self._buffer
        while self._next < len(buffer):
            item = buffer[self._next]
            self._next += 1
            if type(item) is EventRead:
                self._offsets[item.segment] = item.offset + 1
                if self._eof:
                    self._eof.discard(item.segment)
                return item
            event = self._accept(item)
            if event is not None:
                return event
            buffer = self._buffer  # (a segment given up leaves a new buffer)
        events: list[EventRead] = []
        self._wait_for(events, 1, wait_ms)
        return events[0] if events else self._checkpoint_read()

    def _checkpoint_read(self) -> EventRead | None:
        """The place of the checkpoint this reader has just acknowledged, once."""
        name = self._checkpoints.take_acknowledged()
        return None if name is None else EventRead.checkpoint(self.group.stream, name)

    def read_batch(
        self, max_events: int = FETCH_SIZE, timeout_ms: float | None = None
    ) -> EventBatch:
        """The events of one fetch (at most ``max_events``; empty when none came within
        ``timeout_ms``, default 1000), with the position after them and the time
        window there (``batch.window``, resolved once for the batch, on first use).

        Same guarantees as :meth:`read_next` (committed data only, sealed sizes,
        per-key order across scales); the position counts the whole batch as
        returned, so the next call (or :meth:`commit`) may commit it.

        A fetch whose records are all ready events (owned, unsealed segments; no
        error among them, end-of-partition notices only after their partition's
        last record -- the usual case) becomes the batch as it is: its
        :class:`EventRead`\\ s are made when ``batch.events`` is first asked for,
        and ``batch.values()`` gives the bodies without making any. Any other
        fetch goes through the buffer.
        """
        if self._closed:
            self._check_open()
        if type(max_events) is not int or max_events < 1:
            raise ReaderConfigError(f"max_events must be an int >= 1, got {max_events!r}")
        if (self._finish_after or time.monotonic() >= self._due) and not self._start_call(
            timeout_ms
        ):
            return self._batch_at_end(EventBatch((), {}, self._window_at))
        events: list[EventRead] = []
        none_held = False
        if self._next < len(self._buffer):
            if self._take(events, max_events):
                return self._batch_at_end(EventBatch(tuple(events), {}, self._window_at))
        elif self._offsets:  # what the consumer holds already, without the waiting loop
            msgs = self._consumer.consume(max_events, 0)
            if msgs:
                batch = self._whole(msgs)
                if batch is not None:
                    return batch
                self._fill(msgs)
                if self._take(events, max_events):
                    return self._batch_at_end(EventBatch(tuple(events), {}, self._window_at))
            else:
                none_held = True
        batch = self._wait_for(events, max_events, timeout_ms, whole=True, none_held=none_held)
        if batch is not None:
            return batch
        return self._batch_at_end(EventBatch(tuple(events), {}, self._window_at))

    def _batch_at_end(self, batch: EventBatch) -> EventBatch:
        """The batch (see :meth:`_positioned`), marked with the checkpoint this reader
        acknowledged meanwhile when it is empty."""
        batch = self._positioned(batch)
        if len(batch) == 0:
            name = self._checkpoints.take_acknowledged()
            if name is not None:
                _set_checkpoint(batch, name)
        return batch

    def _positioned(self, batch: EventBatch) -> EventBatch:
        """``batch`` with the reader's position now as its position (as :meth:`position`
        gives it; with finished segments, ``reader_position`` is worked out when
        the batch's position is first asked for)."""
        offsets = dict(self._offsets)
        view = self._view
        if view is not None and view.finished:
            return batch._with_finished(offsets, view.finished, self.group.segments())
        _set_position(batch, offsets)
        return batch

    def _start_call(self, wait_ms: float | None) -> bool:
        """What is due at the start of a read: finishing segments read to their sealed
        size (their last event was returned), auto-commit, rebalance. False when
        a checkpoint kept the reader still for all of ``wait_ms``."""
        if self._finish_after:
            self._settle_finished()
        now = time.monotonic()
        if now >= self._due:
            self._auto_commit(now)
            if now >= self._next_rebalance:
                if not self._hold_for_checkpoint(now, wait_ms):
                    return False
                self._rebalance()
            elif now >= self._next_metadata:
                self._look_at_metadata()
            self._due = min(
                self._next_rebalance,
                self._next_metadata,
                self._last_commit + self.config.commit_interval_ms / 1000
                if self.config.auto_commit
                else float("inf"),
            )
        return True

    def _hold_for_checkpoint(self, now: float, wait_ms: float | None) -> bool:
        """While a checkpoint is being taken (``tidemark.pipelines.reading.checkpoints``): commit,
        acknowledge, and return nothing, take or give up nothing. True once it is
        over (or there is none), False when ``wait_ms`` (default 1000) ran out first."""
        if not self._checkpoints.holding():
            return True
        if self._checkpoints.acknowledged is not None:
            return False  # the checkpoint's place is returned before holding still
        deadline = now + (1000 if wait_ms is None else max(0.0, wait_ms)) / 1000
        while self._checkpoints.holding():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(POLL_S, left))
        return True

    def _take(self, events: list[EventRead], limit: int) -> bool:
        """Move buffered events into ``events`` (up to ``limit``); True when any came.

        Runs of ready events move as slices, the position noted once per run;
        records in between go through :meth:`_accept`. A consumer error after
        some events stays buffered (raised by the next read), so no event is
        counted read without being returned."""
        taken = len(events)
        while len(events) < limit and self._next < len(self._buffer):
            start = self._next
            found = bisect.bisect_left(self._records_at, start)
            record = self._records_at[found] if found < len(self._records_at) else _NO_LIMIT
            end = min(record, len(self._buffer), start + limit - len(events))
            if end > start:
                run = self._buffer[start:end]
                self._next = end
                events.extend(run)
                self._passed(run)
                continue
            self._next += 1
            try:
                event = self._accept(self._buffer[start])
            except ReaderError:
                if events:
                    self._next -= 1
                    break
                raise
            if event is not None:
                events.append(event)
        return len(events) > taken

    def _passed(self, run: list[EventRead]) -> None:
        """Note a run of returned events in the position (the last offset per segment)."""
        last = dict(zip(map(_event_segment, run), map(_event_offset, run), strict=True))
        offsets = self._offsets
        for seg_id, offset in last.items():
            offsets[seg_id] = offset + 1
        if self._eof:
            self._eof.difference_update(last)

    def _wait_for(
        self,
        events: list[EventRead],
        limit: int,
        wait_ms: float | None,
        *,
        whole: bool = False,
        none_held: bool = False,
    ) -> EventBatch | None:
        """Fetch until some event comes (up to ``limit``) or ``wait_ms`` passed,
        rebalancing every ``rebalance_interval_ms`` meanwhile.

        ``whole``: fetch ``limit`` records, and when all are ready events
        (:meth:`_whole`) return them as a batch instead of making events; else
        events go to ``events``. ``none_held``: the consumer was just found to
        hold nothing (the first fetch goes straight to waiting)."""
        deadline = time.monotonic() + (1000 if wait_ms is None else max(0, wait_ms)) / 1000
        while True:
            now = time.monotonic()
            if now >= self._next_rebalance:
                if not self._hold_for_checkpoint(now, (deadline - now) * 1000):
                    return None
                self._rebalance()
            elif now >= self._next_metadata:
                self._look_at_metadata()
            remaining = deadline - now
            until = min(self._next_rebalance, self._next_metadata) - time.monotonic()
            slice_s = min(max(remaining, 0.0), max(0.0, until))
            if not self._offsets:
                time.sleep(slice_s)
            else:
                msgs = self._fetch(
                    slice_s,
                    limit if whole else max(limit - len(events), FETCH_SIZE),
                    held=not none_held,
                )
                none_held = False
                if whole and msgs:
                    batch = self._whole(msgs)
                    if batch is not None:
                        return batch
                self._fill(msgs)
                if self._take(events, limit):
                    return None
            if time.monotonic() >= deadline:
                return None

    def _whole(self, msgs: list[Any]) -> EventBatch | None:
        """A fetch as a batch when every record in it is an event ready to return
        (every partition an owned unsealed segment's; no error, and an
        end-of-partition notice only after the last record of its partition):
        the records noted returned -- the position from the last record of each
        partition -- then the notices handled; else None, nothing noted (the
        fetch goes through the buffer, record by record where needed, e.g. for
        sealed sizes)."""
        notices = None
        if any(map(_record_error, msgs)):
            split = _notices_last(msgs)
            if split is None:
                return None
            msgs, notices = split
            if not msgs:
                return None
        partitions: list[Any] = list(map(_record_partition, msgs))
        first = partitions[0]
        unsealed = self._unsealed
        if partitions.count(first) == len(partitions):  # (fetches come in runs per partition)
            seg_id = unsealed.get(first)
            if seg_id is None:
                return None
            segment_of = {first: seg_id}
            self._offsets[seg_id] = msgs[-1].offset() + 1
        else:
            last = dict(zip(partitions, msgs, strict=True))  # each partition's last record
            segment_of = {}
            for partition in last:
                seg_id = unsealed.get(partition)
                if seg_id is None:
                    return None
                segment_of[partition] = seg_id
            offsets = self._offsets
            for partition, seg_id in segment_of.items():
                offsets[seg_id] = last[partition].offset() + 1
        if self._eof:
            self._eof.difference_update(segment_of.values())
        if notices:
            for i, notice in enumerate(notices):
                try:
                    self._on_error(notice)
                except ReaderError:  # raised by the next read (as _take keeps it)
                    self._buffer = notices[i:]
                    self._records_at = list(range(len(self._buffer)))
                    self._next = 0
                    break
        return self._batch_at_end(
            EventBatch._of_records(msgs, segment_of, self._stream, {}, self._window_at)
        )

    def _fetch(self, wait_s: float, size: int, *, held: bool = True) -> list[Any]:
        """Up to ``size`` records: what the consumer holds already (``held``: it may
        hold some), else wait up to ``wait_s`` for one record and take the rest
        that came with it.

        (``consume(n, timeout)`` alone would wait for all ``n`` records or the
        timeout, however many had come.)"""
        consumer = self._consumer
        msgs = consumer.consume(size, 0) if held else []
        if not msgs:
            first = consumer.poll(wait_s)
            if first is not None:
                msgs = [first]
                if size > 1:
                    msgs.extend(consumer.consume(size - 1, 0))
        return msgs

    def _fill(self, msgs: list[Any]) -> None:
        """Buffer a fetch: each record of an unsealed owned segment becomes its event
        now (what is per event is only this), the others stay records."""
        self._buffer, self._records_at = _events_of(msgs, self._unsealed, self._stream)
        self._next = 0

    def _purge(self, partition: int) -> bool:
        """Drop what is buffered of ``partition``; True when there was any."""
        rest = self._buffer[self._next :]
        kept = [
            item
            for item in rest
            if (item.partition if type(item) is EventRead else item.partition()) != partition
        ]
        self._buffer = kept
        self._records_at = [i for i, item in enumerate(kept) if type(item) is not EventRead]
        self._next = 0
        return len(kept) < len(rest)

    def _accept(self, msg: Any) -> EventRead | None:
        """The event of a record looked at on its own, or ``None`` (an end-of-partition
        notice, an error, a record of a segment given up or beyond its sealed
        size); a record up to a sealed size notes when its segment is done."""
        if msg.error() is not None:
            self._on_error(msg)
            return None
        seg_id = self._by_partition.get(msg.partition())
        if seg_id is None:
            return None  # fetched just before the segment was given up or paused
        offset = msg.offset()
        if offset >= self._last_offset[seg_id]:
            size = self._last_offset[seg_id] + 1
            if offset >= size:
                # Beyond the sealed size: a writer re-sent it to a successor.
                self._finish(seg_id)
                return None
            self._finish_after.add(seg_id)
        if self._eof:
            self._eof.discard(seg_id)
        self._offsets[seg_id] = offset + 1
        _, timestamp = msg.timestamp()
        headers = msg.headers()
        return EventRead(
            self._stream,
            seg_id,
            offset,
            timestamp,
            msg.value() or b"",
            msg.key(),
            () if headers is None else tuple(headers),
        )

    def _on_error(self, msg: Any) -> None:
        err = msg.error()
        if err.code() == KafkaError._PARTITION_EOF:
            seg_id = self._by_partition.get(msg.partition())
            if seg_id is not None:
                self._eof.add(seg_id)
                size = self.group.sealed_size(seg_id)
                if size is not None and max(msg.offset(), self._offsets[seg_id]) >= size:
                    self._finish(seg_id)
            return
        if err.code() == KafkaError._AUTO_OFFSET_RESET:
            # Kafka deleted records at our offset (a truncation): say so, never jump.
            self._check_head(self.group.view())
            seg_id = self._by_partition.get(msg.partition())
            if seg_id is not None:  # not recorded yet: fetch again, look again
                self._purge(msg.partition())
                tp = TopicPartition(self.group.topic, msg.partition(), self._offsets[seg_id])
                self._consumer.seek(tp)
                self._next_rebalance = self._due = 0.0
            return
        if err.fatal():
            raise ReaderError(f"reader {self.name}: Kafka consumer failed: {err}")
        log.warning("reader %s: %s", self.name, err)

    def at_tail(self) -> bool:
        """True when every segment this reader owns has been read to its current end."""
        return bool(self._offsets) and self._eof >= set(self._offsets)

    # --- segments ---------------------------------------------------------------------------

    def _rebalance(self) -> None:
        group = self.group
        now = time.monotonic()
        self._next_rebalance = now + self.config.rebalance_interval_ms / 1000
        self._next_metadata = now + self.config.metadata_interval_ms / 1000
        view = group.view()
        self._check_head(view)
        self._view = view
        for seg_id in [s for s in self._offsets if s in view.finished]:
            self._drop(seg_id, commit=False)
        self._policy.observe(self._offsets)
        plan = self._policy.plan(
            group.registry.readers(group.name),
            sorted(view.readable),
            group.registry.owners(group.name),
        )
        for seg_id in plan.release:
            self._drop(seg_id, commit=True)
        taken = [s for s in plan.acquire if group.registry.acquire(group.name, s, self.name)]
        if taken:
            # Read the committed offsets again now that the segments are ours:
            # a previous owner may have committed just before letting go.
            offsets = group.committed_offsets(taken)
            for seg_id in taken:
                start = offsets.get(seg_id, view.offsets[seg_id])
                if start < 0:
                    start = view.offsets[seg_id]
                self._offsets[seg_id] = start
                self._committed[seg_id] = start
            self._start_fetching(taken)
            self._policy.took(taken)
            log.info("reader %s took segments %s", self.name, taken)
            if self._window is not None:
                self._window.reset()
        self._note_sealed_sizes()
        self._align()

    def _align(self) -> None:
        """Pause segments running too far ahead in time (stop fetching, keep them
        owned); resume them at the next offset to return once the group caught up."""
        hold = self._policy.to_pause() & self._offsets.keys()
        pause = sorted(hold - self._paused)
        resume = sorted(self._paused - hold)
        for seg_id in pause:
            self._stop_fetching(seg_id)
        if pause:
            log.info("reader %s paused segments %s (ahead in time)", self.name, pause)
        if resume:
            self._start_fetching(resume)
            log.info("reader %s resumed segments %s", self.name, resume)
        self._paused = set(hold)

    def _start_fetching(self, seg_ids: Iterable[int]) -> None:
        """Assign owned segments' partitions at their positions (``self._offsets``)."""
        tps = []
        for seg_id in seg_ids:
            partition = segment_number(seg_id)
            self._by_partition[partition] = seg_id
            tps.append(TopicPartition(self.group.topic, partition, self._offsets[seg_id]))
        self._consumer.incremental_assign(tps)
        if not self._topic_asked:
            self._ask_topic()
        self._note_sealed_sizes()

    def _ask_topic(self) -> None:
        """Ask Kafka for the topic's metadata once, just after its first assignment.

        A consumer whose first metadata came before the topic was assigned leaves
        the partitions' leader unknown until librdkafka's topic scan, once a second:
        nothing is fetched meanwhile. Waits at most 1 s (the scan would have answered
        by then)."""
        self._topic_asked = True
        timeout_s = min(self.config.kafka_timeout_ms, TOPIC_LOOKUP_MS) / 1000
        try:
            self._consumer.list_topics(self.group.topic, timeout=timeout_s)
        except KafkaException as exc:
            log.debug("reader %s: no metadata for %s yet (%s)", self.name, self.group.topic, exc)

    def _stop_fetching(self, seg_id: int) -> None:
        """Unassign a segment's partition and forget what is buffered of it (it must
        not come back out of order if the segment is read again); a no-op when
        the segment is not being fetched."""
        partition = segment_number(seg_id)
        if self._by_partition.pop(partition, None) is None:
            return
        self._unsealed.pop(partition, None)
        self._purge(partition)
        self._consumer.incremental_unassign([TopicPartition(self.group.topic, partition)])

    def _look_at_metadata(self) -> None:
        """Between rebalances: read the stream's metadata again and apply what it says
        of the owned segments (sealed, sizes recorded) -- every
        ``metadata_interval_ms``, so a reader sees a scale's new epoch well within
        the scale's drain (``_hold``)."""
        self._next_metadata = time.monotonic() + self.config.metadata_interval_ms / 1000
        self.group.refresh()
        self._note_sealed_sizes()

    def _note_sealed_sizes(self) -> None:
        """Each fetched segment's last offset to return, from the metadata just read
        (a segment sealed meanwhile gets its limit here, once per rebalance or
        metadata look); a segment sealed without a recorded size yet is held
        (:meth:`_hold`)."""
        sizes, pending = self.group.sealing()
        for partition, seg_id in list(self._by_partition.items()):
            size = sizes.get(seg_id)
            if size is None and seg_id in pending:
                self._hold(seg_id)
                continue
            self._last_offset[seg_id] = _NO_LIMIT if size is None else size - 1
            if size is None:
                self._unsealed[partition] = seg_id
                continue
            if self._offsets.get(seg_id, 0) >= size:
                # Read to its sealed size already (its end came before the size was
                # recorded, so no later record or end notice will finish it): finish
                # it at the next call instead of waiting for a commit to show it.
                self._finish_after.add(seg_id)
            if self._unsealed.pop(partition, None) is not None and self._purge(partition):
                # Sealed since its records were fetched: fetch them again from the
                # position, to be checked against the sealed size one by one.
                offset = self._offsets[seg_id]
                log.info(
                    "reader %s: segment %d sealed, reading on from %d", self.name, seg_id, offset
                )
                self._consumer.seek(TopicPartition(self.group.topic, partition, offset))
        if self._held:
            self._release_held(sizes, pending)

    def _hold(self, seg_id: int) -> None:
        """Stop fetching a segment that left the current epoch (or whose stream is being
        sealed) while its sealed size is not recorded: a record there may lie
        beyond the size to come, re-sent to a successor by a writer slower than
        the scale's drain, and returning it would return that event twice.
        Nothing of it is returned meanwhile (what was fetched of it and not
        returned is dropped, fetched again from the position later) until a
        look at the metadata (every ``metadata_interval_ms``) finds the size.

        This closes the race once the reader has seen the new epoch: a record
        lands past the size only after the scale's whole drain, by when a
        reader looking at the metadata more often than that has seen the
        epoch. :meth:`_drop` warns when a reader slower than that went past a
        size all the same."""
        self._stop_fetching(seg_id)
        self._eof.discard(seg_id)
        if seg_id not in self._held:
            self._held[seg_id] = self._warned[seg_id] = time.monotonic()
            log.info(
                "reader %s: segment %d is sealed, its sealed size not recorded yet: "
                "holding its events (from offset %d) until it is",
                self.name,
                seg_id,
                self._offsets[seg_id],
            )

    def _release_held(self, sizes: Mapping[int, int], pending: Set[int]) -> None:
        """Fetch held segments again once their sealed sizes are recorded (from the
        position, checked against the size); warn of those held too long."""
        now = time.monotonic()
        ready = []
        for seg_id, since in list(self._held.items()):
            if seg_id not in sizes and seg_id in pending:
                if now - self._warned[seg_id] >= SIZE_WAIT_WARN_S:
                    self._warned[seg_id] = now
                    log.warning(
                        "reader %s: segment %d of stream %s is sealed but its sealed size is "
                        "not recorded (held %.1f s): its events are held back until it is. A "
                        "scale or seal stopped half-way? Repeat it (the same `tidemark stream "
                        "scale`/`seal`, or StreamManager.resume) to record the size",
                        self.name,
                        seg_id,
                        self._stream,
                        now - since,
                    )
                continue
            del self._held[seg_id]
            del self._warned[seg_id]
            if seg_id not in self._paused:
                ready.append(seg_id)
        if ready:
            log.info("reader %s: sealed sizes recorded, reading on %s", self.name, ready)
            self._start_fetching(ready)

    def _check_head(self, view: GroupView) -> None:
        """:class:`ReaderBehindHeadError` when a truncation removed events the group
        had still to read (by its commits, unless this reader has read past them)."""
        lost = {
            seg: (self._offsets.get(seg, have), head)
            for seg, (have, head) in view.behind.items()
            if self._offsets.get(seg, have) < head
        }
        if lost:
            raise ReaderBehindHeadError(self.group.name, self.group.stream, lost)

    def _finish(self, seg_id: int) -> None:
        size = self.group.sealed_size(seg_id)
        if size is not None:
            self._offsets[seg_id] = max(self._offsets[seg_id], size)
        log.info("reader %s finished segment %d", self.name, seg_id)
        self._drop(seg_id, commit=True)
        self._next_rebalance = self._due = 0.0

    def _settle_finished(self) -> None:
        for seg_id in list(self._finish_after):
            if seg_id in self._offsets:
                self._finish(seg_id)
        self._finish_after.clear()

    def _drop(self, seg_id: int, *, commit: bool) -> None:
        offset = self._offsets.pop(seg_id)
        size = self.group.sealed_size(seg_id)
        if size is not None and offset > size:
            # Returned as unsealed past where the segment ends: this reader's
            # metadata was older than the scale's whole drain (see ``_hold``).
            log.warning(
                "reader %s: segment %d was read to offset %d, past its sealed size %d, "
                "before this reader saw it sealed: what a writer re-sent of those "
                "records will be returned again from a successor. Keep the readers' "
                "metadata_interval_ms below the scales' seal_drain_ms",
                self.name,
                seg_id,
                offset,
                size,
            )
        if commit:
            self._commit({seg_id: offset})
        self._committed.pop(seg_id, None)
        self._eof.discard(seg_id)
        self._finish_after.discard(seg_id)
        self._last_offset.pop(seg_id, None)
        self._held.pop(seg_id, None)
        self._warned.pop(seg_id, None)
        self._stop_fetching(seg_id)
        self._paused.discard(seg_id)
        self.group.registry.release(self.group.name, seg_id, self.name)
        if self._window is not None:
            self._window.reset()

    # --- committing -----------------------------------------------------------------------

    def commit(self) -> None:
        """Commit the position of the events returned so far (the group's stream cut)."""
        self._check_open()
        self._commit(dict(self._offsets))

    def _auto_commit(self, now: float) -> None:
        if not self.config.auto_commit:
            return
        if now - self._last_commit >= self.config.commit_interval_ms / 1000:
            self._commit(dict(self._offsets))

    def _commit(self, offsets: Mapping[int, int]) -> None:
        self._last_commit = time.monotonic()
        changed = {s: o for s, o in offsets.items() if self._committed.get(s) != o}
        if not changed:
            return
        self.group.commit_offsets(changed, consumer=self._consumer)
        self._committed.update(changed)

    # --- time -------------------------------------------------------------------------------

    def position(self) -> dict[int, int]:
        """This reader's position: owned segments' next offsets, finished ones as -1."""
        view = self._view
        if view is None or not view.finished:
            return dict(self._offsets)  # (once per batch: the usual case made short)
        return reader_position(self._offsets, view.finished, self.group.segments())

    def current_time_window(self) -> TimeWindow:
        """Bounds on the event times at this reader's position (``None``: unknown).

        ``lower``: the time of the latest watermark the position has passed;
        ``upper``: the upper time of the first watermark wholly ahead of it.
        """
        self._check_open()
        return self._window_at(self.position())

    def _window_at(self, position: Mapping[int, int]) -> TimeWindow:
        if self._window is None:
            self._window = PositionWindow(self.group.watermark_feed(), self.group.segments)
        return self._window.at(position)

    # --- lifecycle --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ReaderClosedError(f"reader {self.name!r} of group {self.group.name!r} is closed")

    def close(self) -> None:
        """Commit the position, give up every segment, leave the group."""
        if self._closed:
            return
        self._closed = True
        try:
            self._commit(dict(self._offsets))
        finally:
            self._offsets.clear()
            self._buffer = []
            self._records_at = []
            self.group.registry.leave(self.group.name, self.name)
            self.group.detach(self)
            self._consumer.close()


__all__ = [
    "FETCH_SIZE",
    "EventBatch",
    "EventRead",
    "EventReader",
    "Headers",
    "ReaderHost",
    "records_of",
]
