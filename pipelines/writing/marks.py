"""Writer marks on the marks topic: the message to send, and the topic itself.

    msg = mark_message(settings, "shop/orders", "w1", WriterMark(1000, {0: 5}))
    producer.produce(msg.topic, msg.value, msg.key, partition=msg.partition)

A stream's marks all go to one partition of the marks topic, the stream's
bucket (``bucket_of(stream, bucket_count)``), keyed by the stream name, so
one controller instance sees every mark of a stream in order.

The marks topic has ``ClusterSettings.bucket_count`` partitions. A writer
creates it when it is missing (``WriterConfig.create_marks_topic``, the
default), with the broker's default replication and ``LogAppendTime`` (the
controller bounds a mark's time by its arrival); a topic with another
partition count is refused, since marks would land in the wrong buckets
(``tidemark.controller.kafka.admin.ensure_marks_topic``, shared with the controller job).

:class:`MarkPublisher` is where every writer (``EventWriter``,
``TransactionalWriter``, ``TidemarkProducer``, the Spark writer's tasks) applies
the protocol's writer-side rules (``schemas/README.md``, sections 4 and 5):
every mark carries the writer instance's token (:func:`instance_token`, one
per writer object), registered in the metadata store under the writer id before
the first mark (:meth:`MarkPublisher.register`), and the highest timestamp
written (``max_event_time``); a
noted time never goes below the previous one (nor, noted automatically, below
an event written); a note is published only when the records before it were
all stored; the shutdown mark repeats the last noted time with
``alive=False``; each mark's delivery is counted or recorded as failed.
:func:`flush_publishing` is the flush that waits for records and the marks
they make ready.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import Producer

from tidemark.controller.kafka.admin import ensure_marks_topic
from tidemark.controller.model import WriterMark
from tidemark.controller.naming import ClusterSettings, bucket_of
from tidemark.controller.store import MetadataStore
from tidemark.pipelines.writing.exceptions import (
    FailedRecord,
    TimeWentBackwardsError,
    WriterConfigError,
    failed_record,
)
from tidemark.pipelines.writing.metrics import DELIVERY_FAILURES, MARKS_SENT
from tidemark.schemas.records import WriterMarkRecord

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[Any, Any], None]
"""A Kafka delivery callback: ``callback(error, message)``."""


def instance_token(given: str | None = None) -> str:
    """The token naming one running writer instance on all its marks: ``given`` (checked),
    else a new random one. The writer registers it under its id before its first mark;
    the controller hears the registered token at once and refuses the instance it
    replaced (``superseded``) and tokens never registered (``impersonated``)
    (``tidemark.controller.admission.check_registered``)."""
    if given is None:
        return secrets.token_hex(16)
    if not isinstance(given, str) or not given.strip():
        raise WriterConfigError(f"instance must be a non-empty string, got {given!r}")
    return given


@dataclass(frozen=True)
class MarkMessage:
    """A writer mark as a Kafka message: where it goes and its bytes."""

    topic: str
    partition: int
    key: bytes
    value: bytes


def mark_message(
    settings: ClusterSettings,
    stream: str,
    writer_id: str,
    mark: WriterMark,
    transaction_id: str | None = None,
    instance: str | None = None,
) -> MarkMessage:
    """``instance``: the writer object's token, registered under ``writer_id``
    (:meth:`MarkPublisher.register`) before the first mark."""
    record = WriterMarkRecord.from_mark(stream, writer_id, mark, transaction_id, instance)
    return MarkMessage(
        topic=settings.marks_topic,
        partition=bucket_of(stream, settings.bucket_count),
        key=stream.encode("utf-8"),
        value=record.encode(),
    )


def to_writer_mark(record: WriterMarkRecord) -> WriterMark:
    """The model's value of a decoded mark."""
    return WriterMark(
        record.time,
        dict(record.position),
        record.alive,
        record.max_event_time,
        record.observed_lateness_ms,
        record.possibly_late,
    )


class ReadyNote(Protocol):
    """A noted time whose records were all reported (``SentNote``, ``GroupNote``);
    ``failed`` is true when one of them was not stored."""

    @property
    def time(self) -> int: ...
    @property
    def alive(self) -> bool: ...
    @property
    def position(self) -> Mapping[int, int]: ...
    @property
    def max_event_time(self) -> int | None: ...
    @property
    def failed(self) -> object: ...


ProduceMark = Callable[[MarkMessage, DeliveryCallback], None]
"""Produces a mark's message with its delivery callback (the writer's own producer:
inside its open transaction, for a transactional writer)."""


class MarkPublisher:
    """One writer's marks: the protocol's writer-side rules, written once (module doc).

    ``failures`` is the writer's list of records not stored (a mark Kafka
    refused is added to it; the writer raises them as ``DeliveryError``);
    ``instance`` is the token the controller binds ``writer_id`` to
    (:func:`instance_token`: a new one unless given).
    """

    def __init__(
        self,
        cluster: ClusterSettings,
        writer_id: str | None,
        produce: ProduceMark,
        failures: list[FailedRecord],
        instance: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.writer_id = writer_id
        self.instance = instance_token(instance)
        self.last_noted: int | None = None
        """The latest time noted (committed, for a transactional writer)."""
        self._produce = produce
        self._failures = failures
        self._callbacks: dict[str, DeliveryCallback] = {}

    def register(self, store: MetadataStore, stream: str) -> None:
        """Register this instance's token under the writer id on ``stream`` (call before
        the first mark; nothing for a writer without an id, which sends none): the
        controller hears it at once, even when an earlier instance under the id crashed."""
        if self.writer_id is None:
            return
        if store.register_writer(stream, self.writer_id, self.instance):
            log.debug("writer %s: instance %s registered", self.writer_id, self.instance)

    def check_not_backwards(self, timestamp: int, what: str = "noted time", note: str = "") -> None:
        """Refuse a noted time below the previous one (an equal one is accepted)."""
        if self.last_noted is not None and timestamp < self.last_noted:
            raise TimeWentBackwardsError(
                f"writer {self.writer_id}: {what} {timestamp} is below the previous noted "
                f"time {self.last_noted}{note}"
            )

    def automatic_time(self, now_ms: int, max_event_time: int | None) -> int:
        """The time a heartbeat notes: the clock's, never below the last noted time nor
        the highest timestamp written (a mark below an event it covers would let a
        watermark pass that event)."""
        return max(now_ms, self.last_noted or 0, max_event_time or 0)

    def closing_time(self, automatic: bool, now_ms: int, max_event_time: int | None) -> int | None:
        """The time of the shutdown mark ``close`` sends: the last noted time (``None``:
        none was, and no mark is sent); a writer noting time automatically notes once more
        (:meth:`automatic_time`), so it ends with a shutdown mark even before its first
        tick -- a registration under its id (the Spark writer's) must not outlive it."""
        if automatic:
            return self.automatic_time(now_ms, max_event_time)
        return self.last_noted

    def publish(self, stream: str, mark: WriterMark, transaction_id: str | None = None) -> None:
        """Produce ``mark`` for ``stream`` (its records must be acknowledged already, or be
        in the same transaction)."""
        assert self.writer_id is not None, "a writer without an id notes no time"
        msg = mark_message(
            self.cluster, stream, self.writer_id, mark, transaction_id, self.instance
        )
        self._produce(msg, self._delivery(stream))

    def publish_ready(
        self,
        stream: str,
        notes: Iterable[ReadyNote],
        segments: Callable[[Mapping[int, int]], Mapping[int, int]] = dict,
    ) -> int:
        """Publish each note whose records were all stored, in order; how many were.

        A note with a record not stored is skipped: its position would hide the
        gap (the writer raises the failure). ``segments`` turns a note's position
        into segment ids (the drop-in producer's are partitions).
        """
        published = 0
        for note in notes:
            if note.failed:
                log.warning(
                    "writer %s: mark for time %d on %s not published: records written "
                    "before it were not delivered",
                    self.writer_id,
                    note.time,
                    stream,
                )
                continue
            position = dict(segments(note.position))
            self.publish(stream, WriterMark(note.time, position, note.alive, note.max_event_time))
            published += 1
        return published

    def shutdown_mark(self, position: Mapping[int, int], max_event_time: int | None) -> WriterMark:
        """The mark ``close`` sends: the last noted time, not alive (call only when time
        was noted: a writer that never noted time was never waited for)."""
        assert self.last_noted is not None
        return WriterMark(self.last_noted, dict(position), False, max_event_time)

    def _delivery(self, stream: str) -> DeliveryCallback:
        """The delivery callback of ``stream``'s marks: counts them, records failures."""
        callback = self._callbacks.get(stream)
        if callback is None:
            sent = MARKS_SENT.labels(stream)
            failed = DELIVERY_FAILURES.labels(stream, "mark")
            failures = self._failures

            def callback(err: Any, msg: Any) -> None:
                if err is None:
                    sent.inc()
                else:
                    failures.append(failed_record(msg, err))
                    failed.inc()

            self._callbacks[stream] = callback
        return callback


def flush_publishing(
    producer: Producer, publish_ready: Callable[[], int], timeout_s: float | None
) -> int:
    """Flush ``producer`` until its records and the marks they made ready are acknowledged;
    how many messages are still in flight when ``timeout_s`` (``None``: no limit) passed.

    A flush lets notes' records be acknowledged, which makes their marks ready; those
    are published (``publish_ready`` says how many) and flushed in turn, until a flush
    leaves nothing in flight and publishes nothing.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        left = producer.flush(-1 if deadline is None else max(0.0, deadline - time.monotonic()))
        published = publish_ready()
        if left == 0 and not published:
            return 0
        if deadline is not None and time.monotonic() >= deadline:
            return left or len(producer)


__all__ = [
    "MarkMessage",
    "MarkPublisher",
    "ProduceMark",
    "ReadyNote",
    "ensure_marks_topic",
    "flush_publishing",
    "instance_token",
    "mark_message",
    "to_writer_mark",
]
