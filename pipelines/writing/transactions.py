"""Transactional writers: events and their writer mark become visible together.

    writer = TransactionalWriter("w1", "shop/orders", store=store, bootstrap_servers=bs)
    txn = writer.begin()
    txn.write(b"order 1", routing_key="customer-7", timestamp=1_700_000_000_000)
    txn.commit(timestamp=1_700_000_000_000)   # the mark is part of the transaction
    writer.close()

Built on Kafka transactions. The producer's ``transactional.id`` is derived
from the stream and the writer id (:func:`transactional_id_for`), so a
restarted writer with the same id fences its previous instance and Kafka
aborts whatever that one left open.

``commit(timestamp)`` waits for the transaction's records, then produces the
writer mark -- with the position those records reached, on top of what the
writer's earlier transactions committed -- **inside the same Kafka
transaction**, and commits. A ``read_committed`` consumer (the controller)
therefore sees the mark exactly when it sees the data, and never sees the
mark of an aborted transaction.

With ``WriterConfig(automatically_note_time=True)`` the writer notes time by
the clock, as ``EventWriter`` does: every ``commit()`` notes the automatic
time (``commit(timestamp=...)`` then raises ``AutomaticTimeError``), and
a heartbeat thread commits a transaction holding only a mark (the committed
position, the automatic time) every ``note_time_interval_ms`` while no
transaction is open, so an idle writer keeps its stream's watermark moving.

A writer registers its instance in the metadata store once
``init_transactions`` has fenced any earlier one under its
``transactional.id``: a writer restarted after a crash is heard at once.

A transaction open longer than ``WriterConfig.transaction_timeout_ms`` is
aborted by Kafka; ``commit`` then raises :class:`TransactionTimedOutError`
and the writer is ready for a new transaction. A transaction that wrote to a
segment a scale sealed while it was open is aborted and written again, in
order, to the successors before it commits (``tidemark.controller.streams``).
"""

from __future__ import annotations

import enum
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from tidemark.controller.kafka import roles
from tidemark.controller.kafka.retry import COORDINATOR_MOVING, KafkaRetry
from tidemark.controller.model import WriterMark
from tidemark.controller.naming import WRITER_TRANSACTIONAL_PREFIX
from tidemark.controller.store import MetadataStore
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.exceptions import (
    AutomaticTimeError,
    MissingWriterIdError,
    StreamSealedError,
    TransactionError,
    TransactionStateError,
    TransactionTimedOutError,
)
from tidemark.pipelines.writing.headers import Headers, KafkaHeaders
from tidemark.pipelines.writing.heartbeat import Heartbeat
from tidemark.pipelines.writing.positions import merge
from tidemark.pipelines.writing.timestamping import check_timestamp
from tidemark.pipelines.writing.writer import (
    RoutingKey,
    Serializer,
    _Opening,
    _routing_key_bytes,
    _StreamWriter,
)

log = logging.getLogger(__name__)


def transactional_id_for(stream: str, writer_id: str) -> str:
    """The Kafka ``transactional.id`` of writer ``writer_id`` on ``stream``."""
    return f"{WRITER_TRANSACTIONAL_PREFIX}{stream}:{writer_id}"


class TransactionState(enum.StrEnum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"
    TIMED_OUT = "timed-out"


@dataclass
class _Pending:
    key: bytes | None
    value: bytes
    timestamp: int | None
    headers: KafkaHeaders | None


class Transaction:
    """One open Kafka transaction of a :class:`TransactionalWriter`."""

    def __init__(self, writer: TransactionalWriter, started: float) -> None:
        self.id = uuid.uuid4().hex
        self.state = TransactionState.OPEN
        self._writer = writer
        self._started = started
        self._records: list[_Pending] = []
        self._touched: set[int] = set()

    def write(
        self,
        event: Any,
        routing_key: RoutingKey,
        timestamp: int | None = None,
        headers: Headers | None = None,
    ) -> None:
        """Write ``event`` in this transaction (invisible to readers until commit), with
        Kafka ``headers`` as ``EventWriter.write`` takes them."""
        self._writer._txn_write(self, event, routing_key, timestamp, headers)

    def commit(self, timestamp: int | None = None) -> None:
        """Commit; with ``timestamp``, the writer mark is committed with the records."""
        self._writer._txn_commit(self, timestamp)

    def abort(self) -> None:
        """Drop everything written in this transaction."""
        self._writer._txn_abort(self)

    @property
    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    def __repr__(self) -> str:
        return f"Transaction({self.id}, {self.state}, {len(self._records)} records)"


class TransactionalWriter(_StreamWriter):
    """Writes events to one stream in Kafka transactions; one open transaction at a time."""

    def __init__(
        self,
        writer_id: str,
        stream: str,
        *,
        store: MetadataStore,
        bootstrap_servers: str,
        config: WriterConfig | None = None,
        serializer: Serializer | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        config = config or WriterConfig()
        if not isinstance(writer_id, str) or not writer_id.strip():
            raise MissingWriterIdError(
                f"a transactional writer needs a writer_id (its transactional.id derives from "
                f"it), got {writer_id!r}"
            )
        self.transactional_id = transactional_id_for(stream, writer_id)
        opening = _Opening(writer_id, stream, store, bootstrap_servers, config, serializer, clock)
        super().__init__(opening, transactional_id=self.transactional_id)
        self._committed: dict[int, int] = {}
        self._open: Transaction | None = None
        self._init_transactions()
        self._marks.register(store, stream)
        self._heartbeat: Heartbeat | None = None
        if config.automatically_note_time:
            self._heartbeat = Heartbeat(writer_id, config.note_time_interval_ms, self._note_now)
            self._heartbeat.start()

    def _init_transactions(self) -> None:
        """Fence this writer's earlier producer; asked again while the transaction
        coordinator moves or loads (a cluster just started answers ``NOT_COORDINATOR``
        for a moment), within the delivery time-out."""
        timeout_s = self.config.delivery_timeout_ms / 1000
        retry = KafkaRetry(COORDINATOR_MOVING, timeout_s=timeout_s)
        try:
            retry(
                lambda: self._producer.init_transactions(timeout_s),
                f"writer {self.writer_id}: starting its transactions",
            )
        except KafkaException as exc:
            raise TransactionError(
                f"writer {self.writer_id}: Kafka refused to start transactions "
                f"({self.transactional_id}): {exc.args[0]}"
            ) from exc

    def _new_producer(self) -> None:
        """After Kafka fenced the producer (a timed-out transaction): start a fresh one."""
        self._producer.purge()
        self._producer = roles.create(roles.TRANSACTIONAL_PRODUCER, self._producer_settings)
        self._fatal = None
        self._init_transactions()

    @property
    def committed_position(self) -> dict[int, int]:
        """Next offset per segment, over the records of committed transactions."""
        with self._lock:
            return dict(self._committed)

    def begin(self) -> Transaction:
        """Open a transaction; :class:`TransactionStateError` while another is open."""
        with self._lock:
            self._check_usable()
            if self._open is not None:
                raise TransactionStateError(
                    f"writer {self.writer_id}: transaction {self._open.id} is still open; "
                    "commit or abort it first"
                )
            try:
                self._producer.begin_transaction()
            except KafkaException as exc:
                raise TransactionError(f"cannot begin a transaction: {exc.args[0]}") from exc
            self._log = self._new_log()
            self._failures.clear()
            txn = Transaction(self, time.monotonic())
            self._open = txn
            return txn

    def _require_open(self, txn: Transaction) -> None:
        self._check_usable()
        if txn.state is not TransactionState.OPEN or self._open is not txn:
            raise TransactionStateError(f"transaction {txn.id} is {txn.state}, not open")
        if txn.elapsed_ms >= self.config.transaction_timeout_ms:
            self._timed_out(txn)

    def _timed_out(self, txn: Transaction) -> None:
        elapsed = txn.elapsed_ms
        self._end(txn, TransactionState.TIMED_OUT)
        try:
            self._producer.abort_transaction(self.config.delivery_timeout_ms / 1000)
        except KafkaException:
            self._new_producer()
        raise TransactionTimedOutError(
            f"transaction {txn.id} of writer {self.writer_id} was open {elapsed} ms, longer "
            f"than transaction_timeout_ms={self.config.transaction_timeout_ms}; Kafka aborted "
            "it and nothing of it is visible. Begin a new transaction and write again."
        )

    def _end(self, txn: Transaction, state: TransactionState) -> None:
        txn.state = state
        self._open = None
        self._failures.clear()

    def _txn_write(
        self,
        txn: Transaction,
        event: Any,
        routing_key: RoutingKey,
        timestamp: int | None,
        headers: Headers | None,
    ) -> None:
        value = self._value(event)
        key = _routing_key_bytes(routing_key)
        if timestamp is not None:
            check_timestamp(timestamp)
        kafka_headers = self._checked_headers(headers)
        with self._lock:
            self._require_open(txn)
            view = self._view
            if view.latest is not view.applied or not self._writable:
                self._refresh()
            seg = self._segment_for(key)
            self._send(seg, key, value, timestamp, self._now_ms(), kafka_headers)
            txn._records.append(_Pending(key, value, timestamp, kafka_headers))
            txn._touched.add(seg.id)
            self._producer.poll(0)

    def _replay_if_sealed(self, txn: Transaction) -> None:
        """Write the transaction again when a scale sealed a segment it wrote to."""
        try:
            view = self._view
            if view.read_now() is not view.applied or not self._writable:
                self._refresh()
        except StreamSealedError:
            self._txn_abort(txn)
            raise
        current = {s.id for s in self._epoch.segments}
        if txn._touched <= current:
            return
        log.info(
            "writer %s: transaction %s wrote to sealed segments %s; writing it again",
            self.writer_id,
            txn.id,
            sorted(txn._touched - current),
        )
        self._producer.abort_transaction(self.config.delivery_timeout_ms / 1000)
        self._producer.begin_transaction()
        self._log = self._new_log()
        self._failures.clear()
        txn._touched = set()
        now = self._now_ms()
        for rec in txn._records:
            seg = self._segment_for(rec.key)
            self._send(seg, rec.key, rec.value, rec.timestamp, now, rec.headers, replay=True)
            txn._touched.add(seg.id)

    def _note_now(self) -> bool:
        """The heartbeat's tick: while no transaction is open, commit one holding only a
        mark at the automatic time; ``False`` once closed (or fenced)."""
        with self._lock:
            if self._closed or self._fatal is not None:
                return False
            if self._open is None:
                self._mark_only(self._automatic_time(), alive=True)
            return True

    def _automatic_time(self) -> int:
        return self._marks.automatic_time(self._now_ms(), self._max_event_time())

    def _mark_only(self, time_ms: int, alive: bool) -> None:
        """A transaction holding only a mark at ``time_ms`` with the committed position."""
        mark = WriterMark(time_ms, dict(self._committed), alive, self._max_event_time())
        try:
            self._producer.begin_transaction()
            self._marks.publish(self.stream, mark)
            self._producer.commit_transaction(self.config.transaction_timeout_ms / 1000)
        except KafkaException as exc:
            try:
                self._producer.abort_transaction(self.config.delivery_timeout_ms / 1000)
            except KafkaException:
                # Fenced, most likely: a newer instance under this id took over. No new
                # producer (it would fence that one in turn): this writer is done.
                self._fatal = exc.args[0]
            raise TransactionError(
                f"writer {self.writer_id}: the heartbeat's mark did not commit: {exc.args[0]}"
            ) from exc
        self._marks.last_noted = time_ms

    def _txn_commit(self, txn: Transaction, timestamp: int | None) -> None:
        if timestamp is not None:
            check_timestamp(timestamp, "commit timestamp")
            if self._heartbeat is not None:
                raise AutomaticTimeError(
                    f"writer {self.writer_id} notes time automatically "
                    "(automatically_note_time=True): commit() without a timestamp"
                )
        with self._lock:
            self._require_open(txn)
            if self._heartbeat is not None:
                timestamp = self._automatic_time()
            if timestamp is not None:
                self._marks.check_not_backwards(
                    timestamp, "commit timestamp", " (the transaction stays open)"
                )
            try:
                self._replay_if_sealed(txn)
                self._drain(self.config.transaction_timeout_ms)
                self._raise_failures()
                if txn.elapsed_ms >= self.config.transaction_timeout_ms:
                    self._timed_out(txn)
                position = merge(self._committed, self._log.position())
                if timestamp is not None:
                    mark = WriterMark(timestamp, position, max_event_time=self._max_event_time())
                    self._marks.publish(self.stream, mark, transaction_id=txn.id)
                self._commit_kafka(txn)
            except TransactionTimedOutError:
                raise
            except Exception:
                if txn.state is TransactionState.OPEN:
                    self._abort_after_error(txn)
                raise
            self._committed = position
            if timestamp is not None:
                self._marks.last_noted = timestamp
            self._end(txn, TransactionState.COMMITTED)

    def _commit_kafka(self, txn: Transaction) -> None:
        deadline = time.monotonic() + self.config.transaction_timeout_ms / 1000
        while True:
            try:
                self._producer.commit_transaction(max(0.1, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    continue
                timed_out = txn.elapsed_ms >= self.config.transaction_timeout_ms
                if err.code() in (KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH) and (
                    timed_out
                ):
                    self._timed_out(txn)
                raise TransactionError(
                    f"transaction {txn.id} of writer {self.writer_id} did not commit: {err}"
                ) from exc

    def _abort_after_error(self, txn: Transaction) -> None:
        self._end(txn, TransactionState.ABORTED)
        try:
            self._producer.abort_transaction(self.config.delivery_timeout_ms / 1000)
        except KafkaException as exc:
            log.warning("writer %s: abort failed (%s); new producer", self.writer_id, exc)
            self._new_producer()

    def _txn_abort(self, txn: Transaction) -> None:
        with self._lock:
            if txn.state is not TransactionState.OPEN or self._open is not txn:
                raise TransactionStateError(f"transaction {txn.id} is {txn.state}, not open")
            self._abort_after_error(txn)

    def close(self) -> None:
        """Abort an open transaction, commit a shutdown mark (when time was noted, or is
        noted automatically: then at the automatic time of the close), close the Kafka
        handle (as :meth:`EventWriter.close`: any use after raises
        :class:`WriterClosedError`)."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
        with self._lock:
            if self._closed:
                return
            try:
                if self._open is not None:
                    self._txn_abort(self._open)
                last = self._marks.closing_time(
                    self._heartbeat is not None, self._now_ms(), self._max_event_time()
                )
                if last is not None and self._fatal is None:
                    mark = WriterMark(last, dict(self._committed), False, self._max_event_time())
                    try:
                        self._producer.begin_transaction()
                        self._marks.publish(self.stream, mark)
                        self._producer.commit_transaction(self.config.close_timeout_ms / 1000)
                    except KafkaException as exc:
                        raise TransactionError(
                            f"writer {self.writer_id}: its shutdown mark was not committed "
                            f"({exc.args[0]}); the controller drops the writer after its "
                            "timeout instead"
                        ) from exc
            finally:
                self._closed = True
                self._release(self.config.close_timeout_ms)


__all__ = ["Transaction", "TransactionState", "TransactionalWriter", "transactional_id_for"]
