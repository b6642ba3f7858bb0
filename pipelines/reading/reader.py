"""A reader of a reader group: events in per-key order, across scaling, with a time window.

    group = ReaderGroup.create("billing", "shop/orders", store=store,
                               bootstrap_servers=bootstrap, delta_root="/data/delta")
    with group.reader("reader-1") as reader:
        event = reader.read_next(timeout_ms=1000)     # EventRead, or None on timeout
        if event is not None:
            print(event.segment, event.offset, event.timestamp, event.body)
        reader.current_time_window()                   # TimeWindow(lower, upper)

Kafka: one consumer per reader, ``isolation.level=read_committed`` (a reader
never sees what lies above the last stable offset: uncommitted or aborted
transactions), partitions **assigned** explicitly at the group's committed
offsets -- never ``subscribe``, since Kafka's rebalancing knows nothing of
segments and their order.

Segments: the reader owns a fair share of the segments the group may read
now (``pipelines.reading.view``), recorded in the group's registry so no two
readers read the same segment. A sealed segment ends at its sealed size;
once read to it, the reader commits the sealed size (the group then counts
it finished) and gives it up, and a successor becomes readable once all its
predecessors are finished -- per-key order across any number of scales.

Committing: the position reached by the events already returned is
committed (to the Kafka consumer group) at most every
``commit_interval_ms`` at the start of ``read_next``, on :meth:`commit`, when
a segment is given up, and on :meth:`close`: at-least-once delivery.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, TopicPartition

from controller.model import Segment, TimeWindow, segment_number
from pipelines.reading.balance import SegmentClocks, TimePolicy
from pipelines.reading.checkpoints import POLL_S, CheckpointParticipation
from pipelines.reading.config import ReaderConfig
from pipelines.reading.exceptions import ReaderClosedError, ReaderError
from pipelines.reading.registry import GroupRegistry
from pipelines.reading.view import GroupView
from pipelines.reading.windows import PositionWindow, WatermarkFeed, reader_position

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EventRead:
    """One event: where it was (segment id, partition, offset), its timestamp and body."""

    stream: str
    segment: int
    offset: int
    timestamp: int
    body: bytes
    routing_key: bytes | None = None

    @property
    def partition(self) -> int:
        return segment_number(self.segment)

    @property
    def event(self) -> bytes:
        """The body (Pravega's ``EventRead.getEvent``)."""
        return self.body


class ReaderHost(Protocol):
    """What a reader needs of its group (:class:`~pipelines.reading.group.ReaderGroup`
    is one): names, the registry of owners, the committed position, segments
    and watermarks. The reader reaches nothing else of the group."""

    name: str
    stream: str
    topic: str
    config: ReaderConfig
    registry: GroupRegistry

    def consumer_settings(self, client_id: str) -> dict[str, Any]: ...
    def view(self) -> GroupView: ...
    def committed_offsets(self, seg_ids: Iterable[int]) -> dict[int, int]: ...
    def commit_offsets(self, offsets: Mapping[int, int], consumer: Any = None) -> None: ...
    def segments(self) -> Mapping[int, Segment]: ...
    def segment_of(self, partition: int) -> int: ...
    def sealed_size(self, seg_id: int) -> int | None: ...
    def watermark_feed(self) -> WatermarkFeed: ...
    def attach(self, reader: EventReader) -> None: ...
    def detach(self, reader: EventReader) -> None: ...


class EventReader:
    """Created by :meth:`ReaderGroup.reader`; not thread-safe (one thread reads)."""

    def __init__(self, group: ReaderHost, name: str) -> None:
        self.group = group
        self.name = name
        self.config = group.config
        self._closed = False
        self._offsets: dict[int, int] = {}
        """Owned segment id -> next offset to return."""
        self._committed: dict[int, int] = {}
        self._eof: set[int] = set()
        self._finish_after: set[int] = set()
        self._view: GroupView | None = None
        self._next_rebalance = 0.0
        self._last_commit = time.monotonic()
        self._window: PositionWindow | None = None
        self._paused: set[int] = set()
        """Owned segments held back by alignment (unassigned; still ours)."""
        self._checkpoints = CheckpointParticipation(
            group.registry, group.name, name, lambda: self._commit(dict(self._offsets))
        )
        self._policy = TimePolicy(
            group.config,
            group.registry,
            group.name,
            name,
            SegmentClocks(group.watermark_feed, group.segments),
        )
        group.registry.join(group.name, name)
        try:
            self._consumer = Consumer(group.consumer_settings(client_id=f"tidemark-{name}"))
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
        self._check_open()
        wait_ms = timeout_ms if timeout_ms is not None else timeout
        deadline = time.monotonic() + (1000 if wait_ms is None else max(0, wait_ms)) / 1000
        self._settle_finished()
        self._auto_commit()
        while True:
            now = time.monotonic()
            if now >= self._next_rebalance and self._checkpoints.holding():
                # A checkpoint is being taken: position committed, hold still.
                time.sleep(max(0.0, min(POLL_S, deadline - now)))
                if time.monotonic() >= deadline:
                    return None
                continue
            if now >= self._next_rebalance:
                self._rebalance()
            remaining = deadline - now
            slice_s = min(max(remaining, 0.0), self.config.rebalance_interval_ms / 1000)
            if not self._offsets:
                time.sleep(slice_s)
                msg = None
            else:
                msg = self._consumer.poll(slice_s)
            if msg is not None:
                event = self._handle(msg)
                if event is not None:
                    return event
            if time.monotonic() >= deadline:
                return None

    def _handle(self, msg: Any) -> EventRead | None:
        seg_id = self.group.segment_of(msg.partition())
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                if seg_id in self._offsets:
                    self._eof.add(seg_id)
                    size = self.group.sealed_size(seg_id)
                    if size is not None and max(msg.offset(), self._offsets[seg_id]) >= size:
                        self._finish(seg_id)
                return None
            if err.fatal():
                raise ReaderError(f"reader {self.name}: Kafka consumer failed: {err}")
            log.warning("reader %s: %s", self.name, err)
            return None
        if seg_id not in self._offsets or seg_id in self._paused:
            return None  # fetched just before the segment was given up or paused
        offset = msg.offset()
        size = self.group.sealed_size(seg_id)
        if size is not None and offset >= size:
            # Beyond the sealed size: a writer re-sent it to a successor.
            self._finish(seg_id)
            return None
        self._eof.discard(seg_id)
        self._offsets[seg_id] = offset + 1
        if size is not None and offset + 1 >= size:
            self._finish_after.add(seg_id)
        _, ts = msg.timestamp()
        return EventRead(self.group.stream, seg_id, offset, int(ts), msg.value() or b"", msg.key())

    def at_tail(self) -> bool:
        """True when every segment this reader owns has been read to its current end."""
        return bool(self._offsets) and self._eof >= set(self._offsets)

    # --- segments ---------------------------------------------------------------------------

    def _rebalance(self) -> None:
        group = self.group
        self._next_rebalance = time.monotonic() + self.config.rebalance_interval_ms / 1000
        view = group.view()
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
            tps = []
            for seg_id in taken:
                start = offsets.get(seg_id, view.offsets[seg_id])
                if start < 0:
                    start = view.offsets[seg_id]
                self._offsets[seg_id] = start
                self._committed[seg_id] = start
                tps.append(TopicPartition(group.topic, segment_number(seg_id), start))
            self._consumer.incremental_assign(tps)
            self._policy.took(taken)
            log.info("reader %s took segments %s", self.name, taken)
            if self._window is not None:
                self._window.reset()
        self._align()

    def _align(self) -> None:
        """Pause (unassign, keeping ownership) segments running too far ahead in time;
        resume them at the next offset to return once the group caught up."""
        hold = self._policy.to_pause() & self._offsets.keys()
        topic = self.group.topic
        pause = sorted(hold - self._paused)
        resume = sorted(self._paused - hold)
        if pause:
            self._consumer.incremental_unassign(
                [TopicPartition(topic, segment_number(s)) for s in pause]
            )
            log.info("reader %s paused segments %s (ahead in time)", self.name, pause)
        if resume:
            self._consumer.incremental_assign(
                [TopicPartition(topic, segment_number(s), self._offsets[s]) for s in resume]
            )
            log.info("reader %s resumed segments %s", self.name, resume)
        self._paused = set(hold)

    def _finish(self, seg_id: int) -> None:
        size = self.group.sealed_size(seg_id)
        if size is not None:
            self._offsets[seg_id] = max(self._offsets[seg_id], size)
        log.info("reader %s finished segment %d", self.name, seg_id)
        self._drop(seg_id, commit=True)
        self._next_rebalance = 0.0

    def _settle_finished(self) -> None:
        for seg_id in list(self._finish_after):
            if seg_id in self._offsets:
                self._finish(seg_id)
        self._finish_after.clear()

    def _drop(self, seg_id: int, *, commit: bool) -> None:
        offset = self._offsets.pop(seg_id)
        if commit:
            self._commit({seg_id: offset})
        self._committed.pop(seg_id, None)
        self._eof.discard(seg_id)
        self._finish_after.discard(seg_id)
        if seg_id in self._paused:
            self._paused.discard(seg_id)  # unassigned already
        else:
            self._consumer.incremental_unassign(
                [TopicPartition(self.group.topic, segment_number(seg_id))]
            )
        self.group.registry.release(self.group.name, seg_id, self.name)
        if self._window is not None:
            self._window.reset()

    # --- committing -----------------------------------------------------------------------

    def commit(self) -> None:
        """Commit the position of the events returned so far (the group's stream cut)."""
        self._check_open()
        self._commit(dict(self._offsets))

    def _auto_commit(self) -> None:
        if not self.config.auto_commit:
            return
        now = time.monotonic()
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
        finished = view.finished if view is not None else frozenset()
        return reader_position(self._offsets, finished, self.group.segments())

    def current_time_window(self) -> TimeWindow:
        """Bounds on the event times at this reader's position (``None``: unknown).

        ``lower``: the time of the latest watermark the position has passed;
        ``upper``: the upper time of the first watermark wholly ahead of it.
        """
        self._check_open()
        if self._window is None:
            self._window = PositionWindow(self.group.watermark_feed(), self.group.segments)
        return self._window.at(self.position())

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
            self.group.registry.leave(self.group.name, self.name)
            self.group.detach(self)
            self._consumer.close()

    def __enter__(self) -> EventReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["EventRead", "EventReader", "ReaderHost"]
