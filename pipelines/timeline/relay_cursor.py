"""The relay's engine: due messages read past a cursor, produced in one Kafka transaction
a batch with the batch's number, nothing written per message. Exactly once.

    class MyRelay(CursorRelay):
        def produce_rows(self, rows, on_delivery): ...   # one record a row
    MyRelay(dsn, bootstrap, "reminders", CursorSettings("due", "relay.x")).run_once()

A batch (:func:`.relay_sql.take`, the rule is stated there) is read and recorded in
one database transaction; its records are produced in one Kafka transaction
(``transactional.id`` = ``settings.name``) together with an offset commit, of the
group of the same name on partition 0 of the target topic, whose offset is the
batch's number. Kafka's commit is the delivery and the progress at once: a relay
that starts (again) fences its predecessor (``init_transactions``, which also ends
the predecessor's open transaction), reads the number Kafka committed last and
resumes from the state recorded with that batch (:func:`.relay_sql.start`); the
batches recorded after it were aborted, and are read again. Run one relay per
timeline: a second one fences the first (which stops with
:class:`~.relay_sql.RelayFencedError`).

Pipelined: while the broker receives and commits a batch, the next one is read and
recorded (in a thread of the relay's own), and the first is committed before the next
is produced. While it is behind (a batch
came back full) the next asks for twice as many, up to
:data:`~.consumer.MAX_BATCH_GROWTH` times the batch size.

Failures. Kafka out of reach is :class:`KafkaUnavailableError` naming the bootstrap
servers, the database out of reach :class:`~.exceptions.StoreUnavailableError`;
either way the next :meth:`CursorRelay.run_once` starts over (a new producer, a new
connection) from what Kafka committed: nothing lost, nothing sent twice. A record
the broker refuses (too large for the topic, say) aborts its batch; that message
is moved ``retry_after_ms`` later (one row write), so it is tried again then, not in
a loop, and the rest of the batch goes at once.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tidemark.controller.closing import Closing
from tidemark.controller.exceptions import KafkaOperationError
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.outages import (
    ANSWER_GRACE_S,
    HeldCalls,
    is_outage,
    named_cause,
    outages_named,
)
from tidemark.controller.kafka.retry import COORDINATOR_MOVING, KafkaRetry
from tidemark.pipelines.timeline.clock import NOW_MS, DueCondition, StreamClock
from tidemark.pipelines.timeline.consumer import (
    Waker,
    feed_stream_times,
    next_batch_limit,
    wake_delay_ms,
)
from tidemark.pipelines.timeline.exceptions import (
    RelayFencedError,
    TimelineClosedError,
    TimelineError,
)
from tidemark.pipelines.timeline.metrics import (
    DUE_TO_DELIVERY_LAG,
    RELAYED,
    DriftGauge,
    observe_all,
)
from tidemark.pipelines.timeline.relay_sql import (
    CursorState,
    TakenBatch,
    next_due_ms,
    release_stream_due,
    rewind,
    start,
    take,
)
from tidemark.pipelines.timeline.store import TimelineStore
from tidemark.pipelines.timeline.store_sql import WXID_NOW

log = logging.getLogger(__name__)

_COORDINATOR_RETRY = KafkaRetry(COORDINATOR_MOVING, timeout_s=30.0)
"""The group's last commit, asked again while its coordinator moves or loads (a broker
just started answers ``NOT_COORDINATOR`` for a moment)."""

MARKER_PREFIX = "tidemark-cursor"
"""The start of the metadata of the relay's offset commits (then its epoch)."""

Row = tuple[Any, ...]
"""A message as a batch reads it: ``bucket, ts, id, body, headers, producer_group``."""


@dataclass(frozen=True)
class CursorSettings:
    """Where a relay delivers (``target_topic``), under which transactional id and group
    (``name``), how many messages a batch takes, and its waits (ms)."""

    target_topic: str
    name: str
    batch_size: int = 1_000
    flush_timeout_ms: int = 10_000
    max_idle_ms: int = 1_000
    retry_after_ms: int = 30_000
    stream_refresh_ms: int = 200


class CursorRelay(Closing):
    """One timeline's due messages to ``settings.target_topic``, exactly once."""

    def __init__(
        self,
        dsn: str,
        bootstrap: str,
        timeline: str,
        settings: CursorSettings,
        due: DueCondition | None = None,
        stream_clock: StreamClock | None = None,
        on_legacy_marker: Callable[[TimelineStore, str], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.bootstrap = bootstrap
        self.timeline = timeline
        self.settings = settings
        self._due = due
        self._stream_clock = stream_clock
        self._on_legacy = on_legacy_marker
        self._timeout_s = settings.flush_timeout_ms / 1000
        self._marker = (settings.target_topic, 0)
        self._relayed_counter = RELAYED.labels(timeline)
        self._lag_histogram = DUE_TO_DELIVERY_LAG.labels(timeline)
        self.relayed = 0
        self.failed = 0
        """Messages the broker refused (moved ``retry_after_ms`` later)."""
        self.lags: deque[float] = deque(maxlen=100_000)
        """Due-to-committed lag (ms) of the latest messages, on the database's clock."""
        self._producer: Any = None
        self._init_pending = False
        """Whether the producer's ``init_transactions`` has yet to succeed."""
        self._store: TimelineStore | None = None
        self._waker: Waker | None = None
        self._state: CursorState | None = None
        self._confirmed = 0
        self._confirmed_state: CursorState | None = None
        self._committing = False
        self._limit = settings.batch_size
        """The next batch's size: grown while batches come back full, kept from one
        :meth:`run_once` to the next (a backlog outlasts one call)."""
        self._fenced: BaseException | None = None
        self._streams_checked = float("-inf")
        self._drift: DriftGauge | None = None
        self._closed = False
        self._group = roles.client(roles.BUFFER_GROUP, bootstrap, {"group.id": settings.name})
        self._reader = futures.ThreadPoolExecutor(1, thread_name_prefix=f"relay-read-{timeline}")
        """Reads the next batch while Kafka commits the last (the store serialises its calls)."""
        self._held = HeldCalls(f"relay-kafka-{timeline}")
        """The batch's number, waited for within its time-out (see :meth:`_number`)."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # -- start and resume ------------------------------------------------------------

    def _start(self) -> None:
        """(Re)connect, fence any earlier producer and resume from Kafka's last commit."""
        store, buckets = self._connect()
        self._resume(store, buckets)
        self._drift = DriftGauge(self.timeline, store.clock_drift)
        assert self._state is not None
        log.info(
            "relay %s: resuming after batch %d (epoch %d)",
            self.timeline,
            self._state.seq,
            self._state.epoch,
        )

    def _connect(self) -> tuple[TimelineStore, int]:
        """The store (connected again if its session broke) and the timeline's buckets."""
        if self._store is None or self._store._conn.closed or self._store._conn.broken:
            if self._store is not None:
                self._store.close()
            self._store = TimelineStore(self.dsn, due=self._due, notify=False)
            if self._store.is_cockroach:
                raise TimelineError(
                    "the relay's cursor needs PostgreSQL (xid8, pg_snapshot); "
                    "CockroachDB timelines are served by consumers",
                    self.timeline,
                )
        store = self._store
        buckets = store.timeline(self.timeline).buckets
        if self._waker is not None and (self._waker._conn.closed or self._waker._conn.broken):
            self._waker.close()
            self._waker = None
        if self._waker is None and store.supports_notify and self._due is None:
            self._waker = Waker(self.dsn, self.timeline)
        return store, buckets

    def _resume(self, store: TimelineStore, buckets: int, delivery: str | None = None) -> None:
        """A transactional producer fenced in, the state at Kafka's last commit."""
        if self._producer is None:
            self._producer = roles.client(
                roles.BUFFER_PRODUCER,
                self.bootstrap,
                {
                    "transactional.id": self.settings.name,
                    "linger.ms": 2,
                    # A transaction begun right after a commit is told "concurrent
                    # transactions" until the markers of the last are written: retried
                    # after this, not the default 100 ms, which set each batch's pace.
                    "retry.backoff.ms": 2,
                },
            )
            self._init_pending = True
        if self._init_pending:
            self._init_transactions()
        try:
            with outages_named(self.bootstrap):
                (last,) = _COORDINATOR_RETRY(
                    lambda: self._group.committed([TopicPartition(*self._marker)], self._timeout_s),
                    f"relay {self.timeline}: its last commit",
                )
        except KafkaException as exc:  # a refusal (an outage is typed already)
            raise TimelineError(
                f"relay of {self.timeline!r}: its last commit: {exc.args[0]}", self.timeline
            ) from named_cause(self.bootstrap, exc)
        metadata = last.metadata or ""
        committed: int | None = None
        if last.offset >= 0 and metadata.startswith(MARKER_PREFIX):
            committed = int(last.offset)
        elif last.offset >= 0 and self._on_legacy is not None:
            self._on_legacy(store, metadata)  # an earlier protocol's last commit
        self._state = store.transaction(
            lambda c: start(c, self.timeline, buckets, committed, delivery)
        )
        self._confirmed = self._state.seq
        self._confirmed_state = self._state

    def _init_transactions(self) -> None:
        """Fence any earlier producer of this relay's transactional id. One that gets no
        answer in time stays, to be asked again: its request may still reach the
        coordinator, and a new producer's could then get the older epoch and be fenced
        by this one's, as though another relay had taken over. Kafka still completing
        the earlier producer's last transaction (``CONCURRENT_TRANSACTIONS``: a broker
        just restarted writes its markers) is such a wait too, raised as a
        :class:`TimelineError` the next call resumes. A coordinator still loading (a
        cluster just started creates its transaction log) is asked again here."""
        producer = self._producer
        try:
            with outages_named(self.bootstrap):
                _COORDINATOR_RETRY(
                    lambda: producer.init_transactions(self._timeout_s),
                    f"relay {self.timeline}: starting its transactions",
                )
        except (KafkaException, TimeoutError) as exc:
            error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
            retriable = is_outage(exc) or (isinstance(error, KafkaError) and error.retriable())
            if not retriable:
                self._init_pending = False  # a refusal: this producer is done with
            if not isinstance(error, KafkaError):
                raise  # an outage, typed
            if error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                raise KafkaOperationError(
                    f"timeline relay {self.settings.name!r}: Kafka refused its transactional "
                    "id: its principal needs WRITE and DESCRIBE on that transactional id "
                    "(the timeline role's grants)"
                ) from exc
            then = "asked again at the next run" if retriable else "a new producer next run"
            raise TimelineError(
                f"relay of {self.timeline!r}: Kafka did not start its transactions in "
                f"{self._timeout_s:g} s ({error.name()}: {error.str()}); {then}",
                self.timeline,
            ) from named_cause(self.bootstrap, exc)
        self._init_pending = False

    def _drop_producer(self) -> None:
        """Forget the producer (its transaction is ended by the next one's start), but
        one whose fencing is still pending (:meth:`_init_transactions`). Unless Kafka may
        have committed the failed batch (its commit was asked for), the batches recorded
        since the last commit are given back at once."""
        producer, self._state = self._producer, None
        if self._init_pending:
            producer = None  # kept: asked again at the next start
        else:
            self._producer = None
        to, self._confirmed_state = self._confirmed_state, None
        if to is not None and not self._committing and self._store is not None:
            try:
                self._store._run(lambda c: rewind(c, to))
            except TimelineError as exc:  # the database is out of reach: the next start
                log.info("relay %s: state not rewound (%s)", self.timeline, exc)
        self._committing = False
        if producer is not None:
            try:
                producer.purge(in_queue=True, in_flight=True, blocking=False)
                producer.poll(0)
            except KafkaException as exc:  # a producer in a fatal state: nothing to purge
                log.debug("relay %s: purge: %s", self.timeline, exc)

    # -- batches -----------------------------------------------------------------------

    def _take(self, limit: int) -> TakenBatch:
        assert self._store is not None and self._state is not None
        state, horizon, confirmed = self._state, self._store.due.horizon_ms(), self._confirmed
        batch = self._store._run(lambda c: take(c, state, limit, horizon, confirmed))
        self._state = batch.state
        return batch

    def _streams(self) -> None:
        """Event-time messages whose stream has passed their time become clock messages."""
        now = time.monotonic()
        if (now - self._streams_checked) * 1000 < self.settings.stream_refresh_ms:
            return
        self._streams_checked = now
        assert self._store is not None
        if self._stream_clock is not None:
            feed_stream_times(self._store, self.timeline, self._stream_clock, self.settings.name)
        if self._store.waiting_streams(self.timeline):
            self._store.transaction(lambda c: release_stream_due(c, self.timeline))

    def _take_waiting(self, timeout_ms: int, limit: int) -> TakenBatch | None:
        """The next batch, waiting up to ``timeout_ms`` for messages to fall due."""
        assert self._store is not None
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._streams()
            batch = self._take(limit)
            if batch.rows:
                return batch
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                return None
            next_due: int | None = None
            if self._store.due.horizon_ms() is None:
                assert self._state is not None
                next_due, now = self._store._run(self._next_due)
                delay = wake_delay_ms(next_due, now, self.settings.max_idle_ms)
            else:
                delay = self.settings.max_idle_ms
            if self._stream_clock is not None:
                delay = min(delay, self.settings.stream_refresh_ms)
            delay = max(1, min(delay, remaining_ms))
            if self._waker is not None:
                self._waker.wait(delay, next_due)
            else:
                time.sleep(delay / 1000)

    def _next_due(self, conn: Any) -> tuple[int | None, int]:
        assert self._state is not None
        return next_due_ms(conn, self._state)

    def produce_rows(self, rows: Sequence[Row], on_delivery: Callable[[Any, Any], None]) -> None:
        """Produce one record a row to the target topic (each kind of relay its own)."""
        raise NotImplementedError

    def refused_ids(self, rows: Sequence[Row], refused: Sequence[Any]) -> list[str]:
        """The ids of the rows whose records (``refused``, Kafka's messages) the broker
        refused: by default the record key is the id."""
        keys = {m.key() for m in refused}
        return [row[2] for row in rows if row[2].encode() in keys]

    def _produce(self, rows: Sequence[Row], refused: list[Any]) -> None:
        def delivered(err: Any, msg: Any) -> None:
            if err is not None and not is_outage(KafkaException(err)):
                refused.append(msg)

        self.produce_rows(rows, delivered)

    def _send(self, produce: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        """One ``produce``, waiting while the producer's queue is full."""
        while True:
            try:
                produce(*args, **kwargs)
                return
            except BufferError:
                self._producer.poll(0.05)

    def _number(self, batch: TakenBatch) -> None:
        """The batch's number into its transaction, before its records: the coordinator
        refuses a transaction's first request until the last one's markers are written,
        and librdkafka retries that refusal of this request after ``retry.backoff.ms``
        but a partition's registration only after a fixed 20 ms (each batch's pace)."""
        state = batch.state
        marker = TopicPartition(*self._marker, state.seq, metadata=f"{MARKER_PREFIX} {state.epoch}")
        producer, group = self._producer, self._group.consumer_group_metadata()
        # librdkafka holds this call up to the transaction's time-out while no broker
        # answers, whatever its own: an outage is named within the relay's. The producer
        # left holding it is dropped (the next start fences it).
        with outages_named(self.bootstrap):
            self._held.run(
                lambda: producer.send_offsets_to_transaction([marker], group, self._timeout_s),
                self._timeout_s + ANSWER_GRACE_S,
            )

    def _begin(self, batch: TakenBatch) -> None:
        """Before ``batch``'s records: its transaction, its number first."""
        self._producer.begin_transaction()
        self._number(batch)

    def _commit(self, batch: TakenBatch) -> None:
        with outages_named(self.bootstrap):
            self._committing = True
            self._producer.commit_transaction(self._timeout_s)
            self._committing = False

    def _delivered(self, batch: TakenBatch, rows: Sequence[Row] | None = None) -> int:
        """Count ``batch`` delivered (its ``rows``: all, or those not refused); how many."""
        self._confirmed = batch.state.seq
        self._confirmed_state = batch.state
        rows = batch.rows if rows is None else rows
        count = len(rows)
        self.relayed += count
        self._relayed_counter.inc(count)
        drift = None if self._drift is None else self._drift.refresh()
        now = time.time() * 1000 + (0.0 if drift is None else drift.drift_ms)
        lags = [now - row[1] for row in rows]
        self.lags.extend(lags)
        observe_all(self._lag_histogram, [max(0.0, lag) / 1000 for lag in lags])
        return count

    def run_once(self, timeout_ms: int = 1_000) -> int:
        """Relay the due messages (waiting up to ``timeout_ms`` for a first batch, and
        going on while more are due until then); returns how many were delivered."""
        if self._closed:
            raise TimelineClosedError(f"the relay of {self.timeline!r} is closed", self.timeline)
        if self._fenced is not None:
            raise self._fenced
        try:
            if self._state is None or self._producer is None:
                self._start()
            elif self._drift is not None:
                self._drift.refresh()  # (a clock read, but every DRIFT_REFRESH_S)
            base = self.settings.batch_size
            batch = self._take_waiting(timeout_ms, self._limit)
        except BaseException:
            self._drop_producer()
            raise
        if batch is None:
            return 0
        until = time.monotonic() + timeout_ms / 1000
        limit = self._limit = next_batch_limit(self._limit, len(batch.rows), base)
        relayed = 0
        refused: list[Any] = []
        nxt: TakenBatch | None = batch
        try:
            while nxt is not None:
                batch, nxt = nxt, None
                self._begin(batch)
                self._produce(batch.rows, refused)
                # The next batch is read while the broker receives and commits this one.
                ahead = self._reader.submit(self._take, limit) if time.monotonic() < until else None
                self._commit_beside(batch, ahead)
                relayed += self._delivered(batch)  # before the read's outcome: Kafka has it
                if ahead is not None:
                    taken = ahead.result()
                    limit = self._limit = next_batch_limit(limit, len(taken.rows), base)
                    nxt = taken if taken.rows else None
        except KafkaException as exc:
            self._failed(exc, refused, batch.rows)
        except BaseException:
            self._drop_producer()
            raise
        return relayed

    def _commit_beside(self, batch: TakenBatch, ahead: futures.Future[TakenBatch] | None) -> None:
        """Commit ``batch`` while ``ahead`` reads the next; a failed commit waits for that
        read, so what it recorded is given back with the rest."""
        try:
            self._commit(batch)
        except BaseException:
            if ahead is not None:
                futures.wait([ahead])
            raise

    def _failed(self, exc: KafkaException, refused: Sequence[Any], rows: Sequence[Row]) -> None:
        """A batch Kafka did not commit: park what the broker refused, start over next
        time; raise unless the batch failed for those refusals alone."""
        error = exc.args[0] if exc.args else None
        fatal = error is not None and hasattr(error, "fatal") and error.fatal()
        self._drop_producer()
        if fatal and not is_outage(exc):
            self._fenced = RelayFencedError(
                f"relay of {self.timeline!r}: Kafka ended this relay's transactions "
                f"({error}); another relay with the same name took over",
                self.timeline,
            )
            raise self._fenced from exc
        if refused and self._park_refused(rows, refused):
            return
        raise TimelineError(f"relay of {self.timeline!r}: {error}", self.timeline) from named_cause(
            self.bootstrap, exc
        )

    def _park_refused(self, rows: Sequence[Row], refused: Sequence[Any]) -> list[str]:
        """Park the rows whose records the broker refused (``refused``); their ids."""
        ids = self.refused_ids(rows, refused)
        if ids:
            self._park(ids)
            log.warning(
                "relay %s: %d refused by the broker (%s: %s); tried again in %d ms",
                self.timeline,
                len(ids),
                ", ".join(ids[:3]),
                refused[0].error(),
                self.settings.retry_after_ms,
            )
        return ids

    def _park(self, ids: Sequence[str]) -> None:
        """Move refused messages ``retry_after_ms`` past now (a new write: past the cursor)."""
        assert self._store is not None
        self.failed += len(ids)
        self._store.transaction(
            lambda c: c.execute(
                f"""UPDATE timeline_messages AS m
                    SET ts = {NOW_MS} + %(after)s, wxid = {WXID_NOW},
                        version = m.version + 1
                    WHERE m.timeline = %(t)s AND m.id = ANY(%(ids)s)
                      AND m.deleted_at_ms IS NULL""",
                {"t": self.timeline, "ids": list(ids), "after": self.settings.retry_after_ms},
            )
        )

    def close(self) -> None:
        """Close the Kafka handles (the producer without waiting: a batch not committed is
        sent again by the next relay) and the database sessions; a use after raises
        :class:`TimelineClosedError`."""
        if self._closed:
            return
        self._closed = True
        producer, self._producer = self._producer, None
        try:
            self._reader.shutdown(wait=True)
            self._held.close()
            if producer is not None:
                roles.release(producer, 0)
            self._group.close()
        finally:
            if self._waker is not None:
                self._waker.close()
            if self._store is not None:
                self._store.close()
