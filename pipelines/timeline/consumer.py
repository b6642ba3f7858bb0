"""Consumers: available messages handed over under a lease, without tight polling.

    with TimelineConsumer(dsn, "reminders", ConsumerConfig("worker-1")) as consumer:
        for lease in consumer.poll(timeout_ms=5_000):
            handle(lease.message.body)
            consumer.ack([lease])            # delete it (holder's delete)

Delivery: a consumer leases due messages of **its buckets**, oldest first.
Buckets are spread over the healthy consumers of the timeline (those whose
heartbeat is younger than ``member_ttl_ms`` on the database's clock): the
consumer ranked ``r`` of ``n`` takes the buckets ``b`` with ``b % n == r``.
While membership changes, two consumers may try the same bucket; that is
harmless, since every lease is one atomic statement that skips rows being
leased (``FOR UPDATE SKIP LOCKED``) and re-checks availability.

When nothing is due, the consumer asks for the earliest timestamp among its
buckets (a lapsing lease counts: its timestamp is the lease end) and sleeps
until then, at most ``max_idle_ms``. On PostgreSQL it also LISTENs: a new
message due before the planned wake-up ends the sleep at once. LISTEN/NOTIFY
is only that optimisation; CockroachDB has none, and there the ``max_idle_ms``
fallback bounds how late a message created during a sleep can be delivered.

Every lease carries its token (:attr:`~tidemark.pipelines.timeline.model.Lease.token`);
``ack``, ``extend`` and ``release`` present it. A consumer that restarts with
the same ``consumer_id`` does not get its earlier leases back (a name is not a
capability, and the tokens died with the process): they are delivered again
when they lapse, as after any crash.

Event-time messages wait for a stream's watermark. A consumer given a
``stream_clock`` (:class:`~tidemark.pipelines.timeline.clock.StreamClock`) records the
times of the streams its timeline's messages wait for in the store before it
leases (at most every ``stream_refresh_ms``), and while such messages wait it
sleeps no longer than that. The lease statement itself compares each
message's time with its stream's recorded time, atomically. A time behind the
recorded one (another consumer read a later watermark first) is refused by
the store and skipped here.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import psycopg

from tidemark.controller.closing import Closing
from tidemark.pipelines.timeline.clock import ClockDrift, DueCondition, StreamClock
from tidemark.pipelines.timeline.config import ConsumerConfig
from tidemark.pipelines.timeline.exceptions import (
    InvalidMessageError,
    StreamTimeAheadError,
    StreamTimeBackwardsError,
)
from tidemark.pipelines.timeline.metrics import DELIVERED, DUE_TO_DELIVERY_LAG, DriftGauge
from tidemark.pipelines.timeline.model import Lease, Message
from tidemark.pipelines.timeline.store import NOTIFY_CHANNEL, TimelineStore, database_error

log = logging.getLogger(__name__)

_MIN_PAUSE_MS = 2


def assigned_buckets(buckets: int, members: Sequence[str], me: str) -> list[int]:
    """The buckets ``me`` serves among ``members`` (all of them when it is not listed)."""
    ranked = sorted(set(members))
    if me not in ranked:
        return list(range(buckets))
    rank = ranked.index(me)
    return [b for b in range(buckets) if b % len(ranked) == rank]


def wake_delay_ms(next_due_ms: int | None, now_ms: int, max_idle_ms: int) -> int:
    """How long to sleep when nothing was due: until the next due time, at most ``max_idle_ms``."""
    if next_due_ms is None:
        return max_idle_ms
    return max(0, min(next_due_ms - now_ms, max_idle_ms))


def feed_stream_times(
    store: TimelineStore, timeline: str, clock: StreamClock, who: str = "timeline"
) -> bool:
    """Record in the store the watermark times of the streams ``timeline``'s event-time
    messages wait for, as ``clock`` knows them; True when any message waits.

    A time behind the recorded one (another process read a later watermark
    first) is refused by the store and skipped here.
    """
    waiting = store.waiting_streams(timeline)
    for stream in waiting:
        found = clock.stream_time_ms(stream)
        if found is None:
            continue
        try:
            store.advance_stream_time(stream, found)
        except StreamTimeBackwardsError as exc:
            log.debug("%s: %s", who, exc)  # a later watermark is recorded
        except StreamTimeAheadError as exc:
            log.warning("%s: %s", who, exc)
    return bool(waiting)


MAX_BATCH_GROWTH = 16
"""A relay that is behind reads batches of up to this many times its ``batch_size``: a
Kafka transaction's fixed cost (its offsets, its commit: round trips to the
coordinator) spread over more records while a backlog drains."""


def next_batch_limit(limit: int, got: int, base: int) -> int:
    """The size of the next batch: twice ``limit`` when the last one came back full
    (more are due), at most ``MAX_BATCH_GROWTH`` x ``base``; ``base`` once one is short."""
    return min(2 * limit, MAX_BATCH_GROWTH * base) if got >= limit else base


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


@dataclass(frozen=True)
class ConsumerMetrics:
    """A snapshot: delivered count, due-to-delivery lag (ms), and the clock drift.

    Lag is measured when a lease reaches the caller: this client's clock,
    corrected by the measured drift, minus the message's due timestamp.
    """

    delivered: int
    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    drift: ClockDrift | None


class _Metrics:
    """The consumer's figures, also exported to Prometheus (:mod:`.metrics`)."""

    def __init__(self, timeline: str, drift: DriftGauge, window: int = 100_000) -> None:
        self.lags: deque[float] = deque(maxlen=window)
        self.delivered = 0
        self._drift_gauge = drift
        """The process's drift gauge (refreshed on the consumer's heartbeat)."""
        self._lock = threading.Lock()
        self._lag_histogram = DUE_TO_DELIVERY_LAG.labels(timeline)
        self._delivered_counter = DELIVERED.labels(timeline)

    @property
    def drift(self) -> ClockDrift | None:
        return self._drift_gauge.last

    def record(self, leases: Sequence[Lease]) -> None:
        offset = self.drift.drift_ms if self.drift else 0.0
        now = time.time() * 1000 + offset
        # An event-time lease's due_ms is a stream's time, not the clock's: no lag.
        lags = [now - lease.due_ms for lease in leases if lease.due_stream is None]
        with self._lock:
            self.delivered += len(leases)
            self.lags.extend(lags)
        self._delivered_counter.inc(len(leases))
        for lag in lags:
            self._lag_histogram.observe(max(0.0, lag) / 1000)

    def snapshot(self) -> ConsumerMetrics:
        with self._lock:
            lags = list(self.lags)
            delivered = self.delivered
        return ConsumerMetrics(
            delivered,
            percentile(lags, 0.50),
            percentile(lags, 0.99),
            max(lags, default=0.0),
            self.drift,
        )


class Waker:
    """LISTEN on PostgreSQL: wait until a message due before a deadline is created.

    A database error leaves as the store's would (:func:`~store.database_error`): a
    :class:`~exceptions.TimelineError` naming the rule, never a driver's own.
    """

    def __init__(self, dsn: str, timeline: str) -> None:
        self.timeline = timeline
        try:
            self._conn = psycopg.connect(dsn, autocommit=True)
            self._conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        except psycopg.Error as exc:
            raise database_error(exc) from exc

    def wait(self, delay_ms: int, wake_at_ms: int | None) -> bool:
        """Sleep up to ``delay_ms``; True when woken early by a message due by ``wake_at_ms``."""
        deadline = time.monotonic() + delay_ms / 1000
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            # Always exhaust the generator: an abandoned one keeps the connection's lock.
            try:
                notes = list(self._conn.notifies(timeout=remaining, stop_after=1))
                notes += self._conn.notifies(timeout=0.001)
            except psycopg.Error as exc:
                raise database_error(exc) from exc
            for note in notes:
                ts_text, _, timeline = note.payload.partition(" ")
                if timeline == self.timeline and (
                    wake_at_ms is None or not ts_text.isdigit() or int(ts_text) < wake_at_ms
                ):
                    return True

    def close(self) -> None:
        self._conn.close()


class TimelineConsumer(Closing):
    def __init__(
        self,
        dsn: str,
        timeline: str,
        config: ConsumerConfig,
        due: DueCondition | None = None,
        stream_clock: StreamClock | None = None,
        stream_refresh_ms: int = 200,
    ) -> None:
        self.timeline = timeline
        self.config = config
        self.stream_clock = stream_clock
        self.stream_refresh_ms = max(1, stream_refresh_ms)
        self._streams_checked = float("-inf")
        self._streams_waiting = False
        self.store = TimelineStore(dsn, due=due)
        self.buckets = self.store.timeline(timeline).buckets
        self.drift = DriftGauge(timeline, self.store.clock_drift)
        self._metrics = _Metrics(timeline, self.drift)
        self._waker: Waker | None = None
        if config.use_notify and self.store.supports_notify and due is None:
            self._waker = Waker(dsn, timeline)
        self._mine: list[int] = []
        self._last_heartbeat = 0.0
        earlier = self.store.leases_of(timeline, config.consumer_id)
        if earlier:
            log.info(
                "%s: %d leases of an earlier run on %r return when they lapse",
                config.consumer_id,
                len(earlier),
                timeline,
            )
        self._heartbeat(force=True)

    @property
    def consumer_id(self) -> str:
        return self.config.consumer_id

    @property
    def my_buckets(self) -> list[int]:
        return list(self._mine)

    def metrics(self) -> ConsumerMetrics:
        return self._metrics.snapshot()

    def _heartbeat(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and (now - self._last_heartbeat) * 1000 < self.config.heartbeat_ms:
            return
        members = self.store.heartbeat(self.timeline, self.consumer_id, self.config.member_ttl_ms)
        mine = assigned_buckets(self.buckets, members, self.consumer_id)
        if mine != self._mine:
            log.info("%s: serving buckets %s of %d", self.consumer_id, mine, self.buckets)
        self._mine = mine
        self._last_heartbeat = now
        self.drift.refresh()  # measured again when due, as every timeline process's

    def _record_stream_times(self) -> None:
        """Feed the store the times of the streams this timeline's messages wait for."""
        if self.stream_clock is None:
            return
        now = time.monotonic()
        if (now - self._streams_checked) * 1000 < self.stream_refresh_ms:
            return
        self._streams_checked = now
        self._streams_waiting = feed_stream_times(
            self.store, self.timeline, self.stream_clock, self.consumer_id
        )

    def poll(self, timeout_ms: int = 1_000, limit: int | None = None) -> list[Lease]:
        """Leases on messages that are due, waiting up to ``timeout_ms`` for some to be due.

        Returns early with what it got; empty after ``timeout_ms`` with nothing due.
        """
        return self.poll_with(self._lease, timeout_ms, limit)

    def _lease(self, limit: int, buckets: Sequence[int]) -> list[Lease]:
        return self.store.lease(
            self.timeline,
            self.consumer_id,
            lease_ms=self.config.lease_ms,
            limit=limit,
            buckets=buckets,
        )

    def poll_with(
        self,
        take: Callable[[int, Sequence[int]], list[Lease]],
        timeout_ms: int = 1_000,
        limit: int | None = None,
    ) -> list[Lease]:
        """As :meth:`poll`, with ``take(limit, buckets)`` taking the due messages of this
        consumer's buckets."""
        batch = limit or self.config.batch_size
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._heartbeat()
            self._record_stream_times()
            leases = take(batch, self._mine)
            if leases:
                self._metrics.record(leases)
                return leases
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                return []
            if self.store.due.horizon_ms() is None:
                next_due, now = self.store.next_due_ms(self.timeline, self._mine)
            else:
                next_due, now = None, 0
            delay = min(wake_delay_ms(next_due, now, self.config.max_idle_ms), remaining_ms)
            if self._streams_waiting:
                delay = min(delay, self.stream_refresh_ms)
            heartbeat_left = self.config.heartbeat_ms - int(
                (time.monotonic() - self._last_heartbeat) * 1000
            )
            # Something due yet not leasable (rows another consumer is leasing right
            # now): a short pause instead of a hot loop.
            delay = max(_MIN_PAUSE_MS, min(delay, max(heartbeat_left, 1)))
            wake_at = None if next_due is None else next_due
            if self._waker is not None:
                self._waker.wait(delay, wake_at)
            else:
                time.sleep(delay / 1000)

    def run(self, handler: Callable[[Lease], None], stop: threading.Event) -> None:
        """Hand every lease to ``handler`` until ``stop`` is set (checked at least each 1 s)."""
        while not stop.is_set():
            for lease in self.poll(timeout_ms=min(self.config.max_idle_ms, 1_000)):
                handler(lease)

    def ack(self, leases: Sequence[Lease]) -> list[str]:
        """Delete messages this consumer holds (done with them); returns the ids deleted."""
        return self.store.delete_leased(self.timeline, self.consumer_id, leases)

    def extend(self, lease: Lease, until_ms: int) -> Lease:
        message = self.store.extend(
            self.timeline,
            lease.message.id,
            self.consumer_id,
            until_ms=until_ms,
            token=_token(lease),
        )
        return replace(lease, message=message)

    def release(self, lease: Lease, at_ms: int | None = None) -> Message:
        return self.store.release(
            self.timeline, lease.message.id, self.consumer_id, token=_token(lease), at_ms=at_ms
        )

    def close(self, leave: bool = True) -> None:
        """Stop; ``leave`` removes it from the members at once (else its heartbeat expires)."""
        try:
            if leave:
                self.store.leave(self.timeline, self.consumer_id)
        finally:
            if self._waker is not None:
                self._waker.close()
            self.store.close()


def _token(lease: Lease) -> str:
    if lease.token is None:
        raise InvalidMessageError(
            "a lease without its token cannot be acted on", lease.message.timeline, lease.message.id
        )
    return lease.token
