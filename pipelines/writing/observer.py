"""Observing a stream's time for producers that note none (``tidemark stream observe``).

    config = ObserverConfig(lateness_ms=30_000)
    with StreamObserver("shop/orders", config, store=store, bootstrap_servers=bootstrap) as obs:
        obs.run(stop)              # every interval_ms until ``stop`` (a threading.Event) is set
    # close(): a shutdown mark, so the controller stops waiting for the observer

A stream written by producers nobody can change (a JVM service, a connector)
gets no marks, so it never gets a watermark. An observer notes time on its
behalf from what the brokers already know, reading no record: each interval
it asks for every active segment's high-water mark (``read_committed``: the
last stable offset) and its record with the largest timestamp, and notes that
timestamp minus the stated lateness, with the high-water marks as its
position (the rule, idle partitions included: ``tidemark.controller.observed``).
Its marks are ordinary writer marks under one writer id (default
``observer:<stream>``) with an instance token, sent by the writers' mark code
(:class:`~tidemark.pipelines.writing.marks.MarkPublisher`), and say
``observed_lateness_ms``: the controller labels the watermarks they bound.
Observed and noting writers may share a stream; the watermark is their minimum.

The promise is weaker than a writer's: a record whose timestamp is more than
the lateness below the largest one seen can land behind a watermark. The
observer counts the records that may have (``possibly_late``, on its marks
and in ``tidemark_observed_possibly_late_total``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tidemark.controller.closing import Closing
from tidemark.controller.durations import check_durations_ms
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.admin import PartitionOffsets, StreamTopics
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import WriterMark
from tidemark.controller.naming import ClusterSettings, split_stream
from tidemark.controller.observed import ObservedTime, PartitionSeen
from tidemark.controller.store import MetadataStore
from tidemark.controller.timestamps import wall_clock_ms
from tidemark.pipelines.writing.exceptions import (
    DeliveryError,
    FailedRecord,
    WriterClosedError,
    WriterConfigError,
    raise_failures,
)
from tidemark.pipelines.writing.marks import (
    DeliveryCallback,
    MarkMessage,
    MarkPublisher,
    ensure_marks_topic,
)
from tidemark.pipelines.writing.metrics import POSSIBLY_LATE
from tidemark.pipelines.writing.stream_view import StreamView

log = logging.getLogger(__name__)

OBSERVER_PREFIX = "observer:"


def observer_id(stream: str) -> str:
    """The writer id an observer of ``stream`` uses unless given one."""
    return f"{OBSERVER_PREFIX}{stream}"


class ObserverConfigError(WriterConfigError):
    """An observer setting is invalid; the message names it."""


@dataclass(frozen=True)
class ObserverConfig:
    """``lateness_ms``: how far below the largest timestamp seen the noted time stays (the
    delay a record may have and still not land behind a watermark); ``interval_ms``: how
    often to look; ``idle_ms``: how long a partition's high-water mark may stand still
    before it stops holding the time back."""

    lateness_ms: int
    interval_ms: int = 1_000
    idle_ms: int = 10_000
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    create_marks_topic: bool = True
    timeout_s: float = 10.0
    """How long one look (or the closing flush) may wait for Kafka."""

    def __post_init__(self) -> None:
        check_durations_ms(self, ("lateness_ms", "idle_ms"), minimum=0, error=ObserverConfigError)
        check_durations_ms(self, ("interval_ms",), minimum=1, error=ObserverConfigError)


class StreamObserver(Closing):
    """Notes ``stream``'s time from the brokers' offsets (module doc), as ``writer_id``."""

    def __init__(
        self,
        stream: str,
        config: ObserverConfig,
        *,
        store: MetadataStore,
        bootstrap_servers: str,
        writer_id: str | None = None,
        instance: str | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        split_stream(stream)
        if writer_id is not None and (not isinstance(writer_id, str) or not writer_id.strip()):
            raise ObserverConfigError(f"writer_id must be a non-empty string, got {writer_id!r}")
        metadata = store.open_for_writing(stream)
        self.stream = stream
        self.config = config
        self.writer_id = writer_id or observer_id(stream)
        self._clock = clock
        self._closed = False
        self._failures: list[FailedRecord] = []
        self._rule = ObservedTime(config.lateness_ms, config.idle_ms)
        self._counted = 0
        ensure_marks_topic(bootstrap_servers, config.cluster, create=config.create_marks_topic)
        self._topics = StreamTopics(bootstrap_servers, timeout_s=config.timeout_s)
        self._producer = roles.client(
            roles.OBSERVER_PRODUCER,
            bootstrap_servers,
            {"client.id": f"tidemark-{self.writer_id}"},
        )
        self._marks = MarkPublisher(
            config.cluster, self.writer_id, self._produce_mark, self._failures, instance
        )
        self.instance = self._marks.instance
        self._marks.register(store, stream)
        self._view = StreamView(store, metadata)
        self._view.watch()
        self._last: WriterMark | None = None
        self._metadata: StreamMetadata | None = None
        self._segments: dict[int, int] = {}
        self._partitions: list[int] = []
        self._offsets: PartitionOffsets | None = None
        self._seen: dict[int, PartitionSeen] = {}
        """The brokers' last answers per partition, kept between looks."""

    @property
    def last_mark(self) -> WriterMark | None:
        """The last mark sent (``None``: none yet)."""
        return self._last

    def observe_once(self) -> WriterMark | None:
        """Look once and send the mark it makes; the mark (``None``: nothing to note yet)."""
        self._check_open()
        self._check()
        offsets, partitions = self._follow(self._view.latest)
        ends = offsets.last_stable(partitions)
        # A partition's largest timestamp changes only with new records: ask again only
        # where the high-water mark moved (an idle stream costs one request a look).
        seen = self._seen
        moved = [p for p in partitions if p not in seen or ends.get(p, 0) != seen[p].high_water]
        for p, top in offsets.max_records(moved).items():
            seen[p] = PartitionSeen(ends.get(p, 0), top)
        note = self._rule.observe(seen, self._clock())
        self._producer.poll(0)
        if note is None:
            return None
        if note.possibly_late > self._counted:
            POSSIBLY_LATE.labels(self.stream).inc(note.possibly_late - self._counted)
            self._counted = note.possibly_late
        segments = self._segments
        mark = WriterMark(
            note.time,
            {segments[p]: offset for p, offset in note.position.items()},
            True,
            note.max_event_time,
            self.config.lateness_ms,
            note.possibly_late,
        )
        self._marks.last_noted = mark.time
        self._marks.publish(self.stream, mark)
        self._last = mark
        return mark

    def _follow(self, metadata: StreamMetadata) -> tuple[PartitionOffsets, list[int]]:
        """The lookups of ``metadata``'s topic and its active partitions, made again only
        when the stream's metadata changed (a scale); partitions it no longer has are
        forgotten."""
        if metadata is not self._metadata or self._offsets is None:
            self._segments = {s.number: s.id for s in metadata.active_segments()}
            self._partitions = sorted(self._segments)
            if self._offsets is None or self._offsets.topic != metadata.topic:
                self._offsets = self._topics.partition_offsets(metadata.topic)
            self._seen = {p: a for p, a in self._seen.items() if p in self._segments}
            self._metadata = metadata
        return self._offsets, self._partitions

    def flush(self, timeout_s: float | None = None) -> int:
        """Wait until the marks sent are acknowledged; how many are not (after
        ``timeout_s``, default the config's)."""
        self._check_open()
        left = self._producer.flush(self.config.timeout_s if timeout_s is None else timeout_s)
        self._check()
        return left

    def run(self, stop: threading.Event) -> None:
        """Look every ``interval_ms`` until ``stop`` is set. A look that fails (Kafka
        unreachable for a moment) is logged and the next interval tries again; a mark
        Kafka refused is raised (:class:`DeliveryError`)."""
        interval_s = self.config.interval_ms / 1000
        while not stop.is_set():
            try:
                self.observe_once()
            except DeliveryError:
                raise
            except Exception:
                log.exception("observer %s of %s: looking failed", self.writer_id, self.stream)
            stop.wait(interval_s)

    def close(self) -> None:
        """Send the shutdown mark (the last noted time, not alive), flush (at most the
        config's ``timeout_s``) and close the Kafka handles (the marks' producer and the
        offset lookups' admin client)."""
        if self._closed:
            return
        self._closed = True
        self._offsets = None
        self._topics.close()
        last = self._last
        if last is not None:
            self._marks.publish(self.stream, replace(last, alive=False))
        left = roles.release(self._producer, self.config.timeout_s)
        if left:
            log.warning("observer %s: %d marks not acknowledged at close", self.writer_id, left)
        self._check()

    def _produce_mark(self, msg: MarkMessage, on_delivery: DeliveryCallback) -> None:
        self._producer.produce(
            msg.topic, msg.value, msg.key, partition=msg.partition, on_delivery=on_delivery
        )

    def _check_open(self) -> None:
        if self._closed:
            raise WriterClosedError(f"observer {self.writer_id} of {self.stream} is closed")

    def _check(self) -> None:
        if self._failures:
            raise_failures(self._failures)


def observe(
    stream: str,
    lateness_ms: int,
    *,
    store: MetadataStore,
    bootstrap_servers: str,
    stop: threading.Event,
    **options: Any,
) -> None:
    """Observe ``stream`` until ``stop`` is set, then send the shutdown mark
    (``options``: the other :class:`ObserverConfig` fields, and ``writer_id``)."""
    writer_id = options.pop("writer_id", None)
    config = ObserverConfig(lateness_ms, **options)
    with StreamObserver(
        stream, config, store=store, bootstrap_servers=bootstrap_servers, writer_id=writer_id
    ) as observer:
        observer.run(stop)


__all__ = [
    "OBSERVER_PREFIX",
    "ObserverConfig",
    "ObserverConfigError",
    "StreamObserver",
    "observe",
    "observer_id",
]
