"""Acknowledged delivery: the relay's cursor (:mod:`.relay_sql`) with an idempotent
producer and no Kafka transaction, a batch delivered once every broker acknowledgement
is in. Nothing is written per message, and a batch costs Kafka one produce round trip,
not a transaction's three.

    class MyRelay(AckedCursorRelay):
        def produce_rows(self, rows, on_delivery): ...   # one record a row
        def record_id(self, message): ...                # a record's message id, or None

The batch is read and recorded (the cursor moved, so the owner's moves and deletes of
its messages are refused) before its records are produced; once all are acknowledged
it is delivered, recorded with the next batch's read (``confirmed``, and
``positions``, the target's ends as read before it was produced, about once a second:
still nothing more a batch).

**After a crash** the batches after the last one known delivered may have reached
Kafka in part. The next relay takes over (a new epoch: the earlier one's next read is
refused), waits until the last of those batches is a lease (below) old,
reads their messages again (:func:`.relay_sql.owed_rows`: exactly what they took),
reads the target from ``positions`` to its end and produces those whose record it
does not find; then it goes on. A relay that resumes its own work (its database
session broke, say) with nothing in flight and no record produced past the last batch
it knows delivered skips both: it sends the batches it recorded after that one at
once. Read the target with either isolation level: its records are not transactional.

**The lease** (twice ``flush_timeout_ms``). An earlier relay that is still running
(paused, cut off from the database) must not send after that look: a relay produces
a batch only within half ``flush_timeout_ms`` of starting its read, and each record
fails unless acknowledged within ``flush_timeout_ms`` (``message.timeout.ms``; a
request in flight within half that), so every record of a replaced relay is in the
log, or never will be, before its successor reads the target. A process frozen for
longer than the lease between that check and its sends could still send a batch
twice; the transactional delivery of
:class:`~.relay_cursor.CursorRelay` (one Kafka transaction a batch, its number
committed with it) fences such a zombie whatever its pauses, at a transaction's cost
a batch.

A timeline a transactional relay delivered is settled as that relay would resume
(Kafka's last commit names the last real batch) and then delivered by
acknowledgement; a transactional relay refuses to take over while acknowledged
batches are not settled.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from tidemark.controller.exceptions import KafkaOperationError
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.outages import is_outage, named_cause, outages_named
from tidemark.pipelines.timeline.exceptions import TimelineError
from tidemark.pipelines.timeline.relay_cursor import CursorRelay, Row
from tidemark.pipelines.timeline.relay_sql import (
    ACKED,
    AckedResume,
    CursorState,
    TakenBatch,
    owed_rows,
    resume_acked,
    settle,
    take,
)
from tidemark.pipelines.timeline.store import TimelineStore

log = logging.getLogger(__name__)

PRODUCE_WINDOW_SHARE = 2
"""A batch is produced within ``flush_timeout_ms / PRODUCE_WINDOW_SHARE`` of the start of
its read; each record is acknowledged within ``flush_timeout_ms`` of its produce, or
fails (``message.timeout.ms``); a request in flight is answered within half that."""

LEASE_SHARES = 2
"""The lease, in ``flush_timeout_ms``: the produce window, a record's time-out and half
a time-out to spare."""

MARK_EVERY_S = 1.0
"""How often the relay reads the target's ends (a look after a crash starts there)."""

MARK_WAIT_S = 1.0
"""How long a broker has to answer on the target's ends (a partition)."""

LEASE_GRACE_MS = 500
"""Waited past a lease on top: the broker's own handling of a last request."""


class AckedCursorRelay(CursorRelay):
    """One timeline's due messages to ``settings.target_topic`` by acknowledgement,
    exactly once (the lease's terms above)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._positions: dict[int, int] = {}
        """Per partition of the target, its end as last read (every record this relay
        produced before that read lies before it)."""
        self._acked: tuple[int, tuple[int, ...]] = (0, ())
        """The last batch delivered and the target's positions then (read together)."""
        self._read_at: dict[int, float] = {}
        self._failures: list[Any] = []
        """Errors of the current batch's records other than refusals (no broker answered)."""
        self._refused: list[Any] = []
        self._parked: set[str] = set()
        """The ids of the current batch the broker refused (moved later)."""
        self._watch: Any = None
        """A consumer that reads the target's ends and, after a crash, its last records."""
        self._partitions_known: list[int] = []
        self._marks: deque[tuple[int, tuple[int, ...]]] = deque(maxlen=16)
        """(first batch, positions): the target's ends read before that batch was produced."""
        self._marked_at = 0.0
        self._sent_since_mark = False
        self._sent_seq = 0
        """The last batch handed to the producer."""
        self._clean: CursorState | None = None
        """After a failure with nothing in flight and no batch produced past the last
        delivered: that batch (under the epoch then), where the next resume goes on
        without waiting out a lease."""
        super().__init__(*args, **kwargs)

    @property
    def _lease_ms(self) -> int:
        return LEASE_SHARES * self.settings.flush_timeout_ms

    def record_id(self, message: Any) -> str | None:
        """The id of the timeline message a target record (Kafka's message) carries, None
        for a record of another origin."""
        raise NotImplementedError

    # -- start and resume ------------------------------------------------------------

    def _resume(self, store: TimelineStore, buckets: int, delivery: str | None = None) -> None:
        got = store.transaction(lambda c: resume_acked(c, self.timeline, buckets))
        if got is None:  # a transactional relay's batches: settled as it resumes them
            super()._resume(store, buckets, ACKED)
            producer, self._producer = self._producer, None
            roles.release(producer, 0)
            got = store.transaction(lambda c: resume_acked(c, self.timeline, buckets))
            assert got is not None
        if self._producer is None:
            timeout_ms = self.settings.flush_timeout_ms
            self._producer = roles.client(
                roles.RELAY_PRODUCER,
                self.bootstrap,
                {
                    "message.timeout.ms": timeout_ms,
                    "request.timeout.ms": max(1, timeout_ms // 2),
                    "linger.ms": 1,
                    # Delivery is a batch's flush; its records' offsets are not needed
                    # (the target's ends are looked at instead, see _mark).
                    "delivery.report.only.error": True,
                },
            )
        self._positions = dict(enumerate(got.positions))
        if self._watch is None:
            self._watch = roles.client(
                roles.RELAY_SCAN, self.bootstrap, {"group.id": self.settings.name}
            )
        clean, self._clean = self._clean, None
        if clean is not None and clean.epoch != got.previous_epoch:
            clean = None  # another relay ran meanwhile: what this one knew is stale
        if clean is not None and clean.seq < got.state.seq:
            self._deliver_owed(store, self._watch, got, clean)
        elif clean is None and got.owed_from is not None:
            self._deliver_owed(store, self._watch, got)
        self._partitions_known = self._partitions(self._watch)
        self._positions = self._ends(self._watch)
        positions = self._position_list()
        store.transaction(lambda c: settle(c, got.state, positions))
        self._state = got.state
        self._confirmed = got.state.seq
        self._confirmed_state = got.state
        self._acked = (got.state.seq, positions)
        self._marks.clear()
        self._marks.append((got.state.seq + 1, positions))
        self._marked_at = time.monotonic()

    def _deliver_owed(
        self, store: TimelineStore, scan: Any, got: AckedResume, sent: CursorState | None = None
    ) -> None:
        """The messages of the batches after the last known delivered whose records the
        target does not hold, produced and acknowledged; ``sent``: this relay's own last
        delivered batch, when it knows that none after it reached its producer (then
        there is no lease to wait out and nothing to look for)."""
        if sent is not None:
            owed_from, to = sent, got.state
            rows = store._run(lambda c: owed_rows(c, owed_from, to))
            log.info(
                "relay %s: batches %d-%d were recorded, never sent; sending their %d messages",
                self.timeline,
                sent.seq + 1,
                to.seq,
                len(rows),
            )
            self._send_owed(to.seq, rows)
            return
        assert got.owed_from is not None and got.written_at_ms is not None
        wait_ms = got.written_at_ms + self._lease_ms + LEASE_GRACE_MS - got.now_ms
        if wait_ms > 0:
            log.info(
                "relay %s: batches %d-%d may be in Kafka in part; waiting %d ms for the "
                "lease of the relay that read them",
                self.timeline,
                got.owed_from.seq + 1,
                got.state.seq,
                wait_ms,
            )
            time.sleep(wait_ms / 1000)
        owed_from, to = got.owed_from, got.state
        rows = store._run(lambda c: owed_rows(c, owed_from, to))
        found = self._scan(scan)
        todo = [row for row in rows if row[2] not in found]
        log.info(
            "relay %s: batches %d-%d took %d messages, %d already in Kafka; sending %d",
            self.timeline,
            owed_from.seq + 1,
            to.seq,
            len(rows),
            len(rows) - len(todo),
            len(todo),
        )
        self._send_owed(to.seq, todo)

    def _send_owed(self, seq: int, rows: Sequence[Row]) -> None:
        if not rows:
            return
        refused: list[Any] = []
        self._failures = []
        self._produce(rows, refused)
        parked = self._acknowledged(seq, rows, refused)
        self.relayed += len(rows) - len(parked)
        self._relayed_counter.inc(len(rows) - len(parked))

    def _partitions(self, scan: Any) -> list[int]:
        topic = self.settings.target_topic
        with outages_named(self.bootstrap):
            metadata = scan.list_topics(topic, self._timeout_s).topics.get(topic)
        error = None if metadata is None else metadata.error
        if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise KafkaOperationError(
                f"timeline relay {self.settings.name!r}: Kafka refused its target topic "
                f"{topic!r}: its principal needs READ, WRITE and DESCRIBE on that topic (the "
                "timeline role's grants)"
            )
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise TimelineError(
                f"relay of {self.timeline!r}: its target topic {topic!r} is not there "
                f"({None if metadata is None else metadata.error}); create it",
                self.timeline,
            )
        return sorted(metadata.partitions)

    def _watermarks(
        self, scan: Any, partition: int, timeout_s: float | None = None
    ) -> tuple[int, int]:
        tp = TopicPartition(self.settings.target_topic, partition)
        wait_s = self._timeout_s if timeout_s is None else timeout_s
        with outages_named(self.bootstrap):
            got = scan.get_watermark_offsets(tp, wait_s, cached=False)
        if got is None:
            raise TimeoutError(f"no answer on the ends of {tp.topic} [{partition}]")
        return int(got[0]), int(got[1])

    def _scan(self, scan: Any) -> set[str]:
        """The message ids of this timeline's records on the target from ``positions`` on."""
        topic, ends = self.settings.target_topic, {}
        assign = []
        for partition in self._partitions(scan):
            low, high = self._watermarks(scan, partition)
            begin = max(low, self._positions.get(partition, OFFSET_BEGINNING))
            if begin < high:
                ends[partition] = high
                assign.append(TopicPartition(topic, partition, begin))
        found: set[str] = set()
        if not assign:
            return found
        scan.assign(assign)
        try:
            return self._read_ids(scan, ends, found)
        finally:
            scan.unassign()  # (no fetching in the background after)

    def _read_ids(self, scan: Any, ends: dict[int, int], found: set[str]) -> set[str]:
        topic = self.settings.target_topic
        deadline = time.monotonic() + 4 * self._timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise TimelineError(
                    f"relay of {self.timeline!r}: the target {topic!r} was not read to its "
                    f"end in {4 * self._timeout_s:g} s (partitions {sorted(ends)} left); "
                    "tried again at the next run",
                    self.timeline,
                )
            with outages_named(self.bootstrap):
                records = scan.consume(10_000, 0.5)
            for record in records:
                if record.error() is not None:
                    continue
                partition = record.partition()
                if partition in ends:
                    message_id = self.record_id(record)
                    if message_id is not None:
                        found.add(message_id)
                    if record.offset() + 1 >= ends[partition]:
                        del ends[partition]
        return found

    def _ends(
        self, scan: Any, partitions: Sequence[int] | None = None, timeout_s: float | None = None
    ) -> dict[int, int]:
        """The positions past the target's last records (every one sent so far is before)."""
        ends = dict(self._positions)
        for partition in self._partitions(scan) if partitions is None else partitions:
            end = self._watermarks(scan, partition, timeout_s)[1]
            ends[partition] = max(ends.get(partition, 0), end)
        return ends

    def _mark(self, next_seq: int) -> None:
        """At most every :data:`MARK_EVERY_S`, the target's ends now: every record of
        batch ``next_seq`` and after (produced once this read returns) lies past them,
        so they are where a look for those batches' records starts."""
        now = time.monotonic()
        if not self._sent_since_mark or now - self._marked_at < MARK_EVERY_S:
            return  # (an idle relay asks nothing: the ends it read last still hold)
        if self._watch is None:
            return
        self._marked_at = now
        try:
            # Briefly: the next batch's read waits for this (the last mark holds).
            self._positions = self._ends(self._watch, self._partitions_known, MARK_WAIT_S)
        except (KafkaException, TimeoutError, TimelineError) as exc:  # the last mark holds
            log.debug("relay %s: the target's ends not read (%s)", self.timeline, exc)
            return
        self._marks.append((next_seq, self._position_list()))
        self._sent_since_mark = False

    def _position_list(self) -> tuple[int, ...]:
        if not self._positions:
            return ()
        return tuple(self._positions.get(p, -1) for p in range(max(self._positions) + 1))

    # -- batches -----------------------------------------------------------------------

    def _take(self, limit: int) -> TakenBatch:
        assert self._store is not None and self._state is not None
        state, horizon = self._state, self._store.due.horizon_ms()
        confirmed, positions = self._acked
        self._mark(state.seq + 1)
        started = time.monotonic()
        batch = self._store._run(lambda c: take(c, state, limit, horizon, confirmed, positions))
        if batch.rows:
            self._read_at[batch.state.seq] = started
        self._state = batch.state
        return batch

    def _begin(self, batch: TakenBatch) -> None:
        """A batch read too long ago is left to the next relay's look (the lease)."""
        started = self._read_at.pop(batch.state.seq, 0.0)
        window_s = self.settings.flush_timeout_ms / PRODUCE_WINDOW_SHARE / 1000
        if time.monotonic() - started > window_s:
            raise TimelineError(
                f"relay of {self.timeline!r}: batch {batch.state.seq} was read more than "
                f"{window_s:g} s ago (half flush_timeout_ms); it is sent by the next run, "
                "once the lease has passed",
                self.timeline,
            )
        self._failures = []
        self._sent_since_mark = True
        self._sent_seq = batch.state.seq

    def _produce(self, rows: Sequence[Row], refused: list[Any]) -> None:
        failures = self._failures
        self._refused = refused  # (the list of the run: emptied as each batch is done)

        def delivered(err: Any, msg: Any) -> None:  # (only failures are reported)
            if err is None:
                return
            if is_outage(KafkaException(err)):
                failures.append(err)
            else:
                refused.append(msg)

        self.produce_rows(rows, delivered)

    def _commit(self, batch: TakenBatch) -> None:
        self._parked = self._acknowledged(batch.state.seq, batch.rows, self._refused)

    def _acknowledged(self, seq: int, rows: Sequence[Row], refused: list[Any]) -> set[str]:
        """Wait for the acknowledgements of ``rows`` (batch ``seq``): the refused ones
        (``refused``, emptied) parked and their ids returned, any other failure raised
        (no broker answered: :class:`KafkaUnavailableError`)."""
        remaining = self._producer.flush(self._timeout_s * 1.5)  # past the records' own
        if self._failures:
            log.info(
                "relay %s: %d records of batch %d not acknowledged; sent once the lease has "
                "passed, if Kafka does not have them",
                self.timeline,
                remaining + len(self._failures),
                seq,
            )
            raise named_cause(self.bootstrap, KafkaException(self._failures[0]))
        if remaining:  # no answer within the records' own time-out: an outage
            raise named_cause(
                self.bootstrap,
                TimeoutError(
                    f"relay of {self.timeline!r}: {remaining} records of batch {seq} not "
                    "acknowledged in time; sent once the lease has passed, if Kafka does "
                    "not have them"
                ),
            )
        if not refused:
            return set()
        ids = self._park_refused(rows, refused)
        refused.clear()
        return set(ids)

    def _delivered(self, batch: TakenBatch, rows: Sequence[Row] | None = None) -> int:
        parked, self._parked = self._parked, set()
        sent = [row for row in batch.rows if row[2] not in parked] if parked else batch.rows
        count = super()._delivered(batch, sent)
        seq = batch.state.seq
        earlier = self._acked[1]  # (valid too: the ends only grow)
        positions = next((p for first, p in reversed(self._marks) if first <= seq + 1), earlier)
        self._acked = (seq, positions)
        return count

    def _failed(self, exc: KafkaException, refused: Sequence[Any], rows: Sequence[Row]) -> None:
        self._drop_producer()
        raise TimelineError(f"relay of {self.timeline!r}: {exc}", self.timeline) from named_cause(
            self.bootstrap, exc
        )

    def _drop_producer(self) -> None:
        """Forget the producer and the state: the next run resumes (and, for batches
        perhaps in Kafka in part, waits out their lease)."""
        producer, self._producer, state, self._state = self._producer, None, self._state, None
        watch, self._watch = self._watch, None
        self._read_at.clear()
        self._clean = None
        if producer is not None:
            outstanding = -1
            try:
                outstanding = producer.flush(0)  # (serves what was reported since)
            except KafkaException as exc:  # a producer in a fatal state
                log.debug("relay %s: flush: %s", self.timeline, exc)
            known = self._confirmed_state
            # Nothing in flight, no record past the last delivered batch:
            if (
                outstanding == 0
                and state is not None
                and known is not None
                and self._sent_seq <= known.seq
            ):
                self._clean = CursorState(
                    known.timeline,
                    state.epoch,
                    known.seq,
                    known.cursor_ts,
                    known.cursor_id,
                    known.snapshot,
                )
            roles.release(producer, 0)
        if watch is not None:
            watch.close()

    def close(self) -> None:
        """Record the last batch delivered (a restart then waits for no lease) and close."""
        state, store = self._state, self._store
        if (
            not self._closed
            and state is not None
            and store is not None
            and self._acked[0] == state.seq
        ):
            positions = self._acked[1]
            try:
                store.transaction(lambda c: settle(c, state, positions))
            except TimelineError as exc:  # out of reach or taken over: the next one looks
                log.info("relay %s: last batch not recorded delivered (%s)", self.timeline, exc)
        watch, self._watch = self._watch, None
        try:
            super().close()
        finally:
            if watch is not None:
                watch.close()
