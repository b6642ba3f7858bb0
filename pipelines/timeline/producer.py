"""Producers: put scheduled messages on a timeline, directly or through Kafka.

    with TimelineProducer(dsn, "reminders", "signup") as producer:
        producer.put(b"say hello", delay_ms=3 * 86_400_000, id=f"hello-{user}")

    with KafkaTimelineProducer(bootstrap, "timeline-in", "reminders", "signup") as kp:
        kp.put(b"say hello", timestamp_ms=t, id=f"hello-{user}")
        kp.flush()

A ``delay_ms`` counts from the database's clock with :class:`TimelineProducer`
(one clock for every timeline process); :class:`KafkaTimelineProducer` has
no database, so there it counts from this client's clock.

A natural id (``id=``) makes publishing idempotent: a retry with the same id
and body is a no-op. Without one, a time-sortable id is generated **before**
the first attempt, so retries of one call still share it. Through Kafka, the
ingester (:mod:`tidemark.pipelines.timeline.ingest`) writes the messages to the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar

from tidemark.controller.closing import Closing
from tidemark.controller.exceptions import KafkaUnavailableError
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.outages import answering
from tidemark.pipelines.timeline.exceptions import (
    InvalidMessageError,
    TimelineClosedError,
    TimelineError,
)
from tidemark.pipelines.timeline.metrics import CREATED, DriftGauge
from tidemark.pipelines.timeline.model import (
    check_headers,
    check_id,
    check_name,
    check_timestamp,
    new_id,
)
from tidemark.pipelines.timeline.store import Created, NewMessage, TimelineStore
from tidemark.pipelines.timeline.wire import ScheduledMessage, encode_scheduled

log = logging.getLogger(__name__)

R = TypeVar("R")


def _when(
    timestamp_ms: int | None,
    delay_ms: int | None,
    due_at_stream_time: tuple[str, int] | None,
    now_ms: Callable[[], int],
) -> int:
    given = sum(x is not None for x in (timestamp_ms, delay_ms, due_at_stream_time))
    if given != 1:
        raise InvalidMessageError(
            "give exactly one of timestamp_ms, delay_ms and due_at_stream_time"
        )
    if due_at_stream_time is not None:
        if not isinstance(due_at_stream_time, tuple) or len(due_at_stream_time) != 2:
            raise InvalidMessageError(
                f"due_at_stream_time must be (stream, time_ms), got {due_at_stream_time!r}"
            )
        return due_at_stream_time[1]
    if delay_ms is not None:
        return now_ms() + delay_ms
    assert timestamp_ms is not None
    return timestamp_ms


class _Scheduling(Generic[R]):
    """``put`` as both producers offer it: one time, one id, then :meth:`_schedule`."""

    timeline: str
    producer_group: str

    def put(
        self,
        body: bytes,
        *,
        timestamp_ms: int | None = None,
        delay_ms: int | None = None,
        id: str | None = None,
        due_at_stream_time: tuple[str, int] | None = None,
        headers: Any = None,
    ) -> R:
        """Schedule ``body`` at a wall-clock time (``timestamp_ms`` / ``delay_ms``) or
        once a stream's watermark reaches an event time (``due_at_stream_time=(stream,
        t)``: every event of the stream with time <= t has been written). Without
        ``id``, a time-sortable one is made here, before any attempt. ``headers``:
        Kafka headers the relay delivers with it (``model.check_headers``)."""
        when = _when(timestamp_ms, delay_ms, due_at_stream_time, self._now_ms)
        stream = None if due_at_stream_time is None else due_at_stream_time[0]
        message_id = new_id() if id is None else id
        new = NewMessage(
            body, when, self.producer_group, message_id, stream, check_headers(headers)
        )
        return self._schedule(new)

    def _now_ms(self) -> int:
        """What a ``delay_ms`` counts from: this client's clock, unless a database is near."""
        return int(time.time() * 1000)

    def _schedule(self, new: NewMessage) -> R:
        """Send ``new`` (its id, time and headers set and checked by :meth:`put`)."""
        raise NotImplementedError


class TimelineProducer(_Scheduling[Created], Closing):
    """Writes to the store directly (one SQL statement per message or per batch);
    :meth:`put` returns the stored message."""

    def __init__(self, dsn: str, timeline: str, producer_group: str, notify: bool = True) -> None:
        check_name("producer_group", producer_group)
        self.timeline = timeline
        self.producer_group = producer_group
        self.store = TimelineStore(dsn, notify=notify)
        self.store.timeline(timeline)  # fail early on an unknown timeline
        self.drift = DriftGauge(timeline, self.store.clock_drift)
        self._created = CREATED.labels(timeline)

    def _now_ms(self) -> int:
        """One clock: a delay counts from the database's now(), as every condition does."""
        return self.store.now_ms()

    def _schedule(self, new: NewMessage) -> Created:
        self.drift.refresh()
        created = self.store.create_message(self.timeline, new)
        if created.new:
            self._created.inc()
        return created

    def put_many(self, items: Sequence[tuple[bytes, int, str | None]]) -> list[Created]:
        """``(body, timestamp_ms, id or None)`` each, in one round trip."""
        self.drift.refresh()
        created = self.store.create_many(
            self.timeline,
            [
                NewMessage(body, ts, self.producer_group, new_id() if mid is None else mid)
                for body, ts, mid in items
            ],
        )
        self._created.inc(sum(c.new for c in created))
        return created

    def delete(self, message_id: str, version: int | None = None) -> None:
        self.store.delete(
            self.timeline, message_id, producer_group=self.producer_group, version=version
        )

    def move(self, message_id: str, timestamp_ms: int, version: int | None = None) -> None:
        self.store.move(
            self.timeline,
            message_id,
            self.producer_group,
            timestamp_ms=timestamp_ms,
            version=version,
        )

    def close(self) -> None:
        self.store.close()


class KafkaTimelineProducer(_Scheduling[str]):
    """Publishes scheduled messages to a Kafka topic (key = id) for the ingester;
    :meth:`put` queues one and returns its id (:meth:`flush` waits for the acks)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        timeline: str,
        producer_group: str,
        config: dict[str, Any] | None = None,
    ) -> None:

        check_name("timeline", timeline)
        check_name("producer_group", producer_group)
        self.topic = topic
        self.timeline = timeline
        self.producer_group = producer_group
        self.bootstrap = bootstrap
        self._errors: list[str] = []
        self._closed = False
        self._producer = roles.client(roles.TIMELINE_KAFKA_PRODUCER, bootstrap, config)

    def _check_open(self) -> None:
        if self._closed:
            raise TimelineClosedError(f"producer to {self.topic!r} is closed", self.timeline)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"{msg.key()!r}: {err}")

    def _schedule(self, new: NewMessage) -> str:
        """Queue one message; returns its id. :meth:`flush` waits for the broker's acks.
        ``headers`` go as the record's Kafka headers; the ingester stores them and the
        relay delivers them."""
        self._check_open()
        message_id, timestamp_ms = str(new.id), new.timestamp_ms
        if new.due_stream is not None:
            raise InvalidMessageError(
                "a scheduled_message record carries no stream: put event-time messages "
                "(due_at_stream_time) with TimelineProducer",
                self.timeline,
                message_id,
            )
        check_id(message_id)
        check_timestamp("timestamp_ms", timestamp_ms)
        data = encode_scheduled(
            ScheduledMessage(
                message_id, timestamp_ms, bytes(new.body), self.producer_group, self.timeline
            )
        )
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    value=data,
                    key=message_id.encode(),
                    on_delivery=self._on_delivery,
                    headers=list(new.headers) or None,
                )
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)
        return message_id

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued message is acknowledged; raise if any failed (caused by
        :class:`KafkaUnavailableError` when the brokers cannot be reached)."""
        self._check_open()
        left = self._producer.flush(timeout_s)
        if left:
            error = TimelineError(f"{left} messages to {self.topic!r} unacknowledged after flush")
            try:
                answering(self._producer, self.bootstrap, timeout_s)
            except KafkaUnavailableError as down:
                raise error from down
            raise error
        if self._errors:
            errors, self._errors = self._errors, []
            raise TimelineError(f"producing to {self.topic!r} failed: {'; '.join(errors[:5])}")

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush (at most ``timeout_s``), then close the Kafka handle: nothing reconnects
        or logs after, and a use after raises :class:`TimelineClosedError`. Raises as
        :meth:`flush` when messages were not acknowledged. Closing twice is allowed."""
        if self._closed:
            return
        try:
            self.flush(timeout_s)
        finally:
            self._closed = True
            roles.release(self._producer, 0)

    def __enter__(self) -> KafkaTimelineProducer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            self.close()
