"""Due records: how a cycle that falls due without new marks gets its micro-batch.

    times = DueTimes()
    times.report(slot=3, due_ms=1_700_000_001_000)    # from a batch's ``due`` rows
    times.take(now_ms)                                 # -> [3] once due
    scheduler = DueScheduler(settings).start()         # the leader's thread: produces them
    scheduler.report(rows); scheduler.sweep(); scheduler.stop()

The controller's query has no timers and runs no micro-batch without input
(``noDataMicroBatches`` off), so a stream whose lagging writer's timeout
falls due needs something to read. Every batch reports, per slot it touched,
the slot's earliest due time (:class:`tidemark.jobs.processor.SlotDue`); the active
driver keeps the latest report per slot and, when one comes, produces a
*due record* (key :func:`tidemark.jobs.slot_keys.due_key`, value the due time) to the marks
topic. That record is the input of the next micro-batch, which runs the due
cycles of its slot. Only slots with something pending get records: a
controller whose writers are in step, or that has no marks, produces none
and runs nothing.

Due records are hints, not state: one too many runs a check that finds
nothing due; one lost (the driver died before producing it) is made up by
:meth:`DueScheduler.sweep`, which a new leader runs once on start: a due
record for every slot, so the first batch reports every pending due time
again. Its records say so (:data:`tidemark.jobs.slot_keys.REEVALUATE`): they run a cycle
of every stream with a due time at once, since each was computed under the stream's
configuration of then -- a new leader, or a stream's record that changed
(:mod:`tidemark.jobs.config_changes`), must not wait out a timeout since lowered.
One Kafka does not acknowledge (a broker down, an ACL missing: the
controller's principal needs WRITE on the marks topic) is logged, counted
(``on_failed``: the ``tidemark_controller_due_records_failed`` metric) and
produced again after a back-off, never dropped.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tidemark.controller.kafka import roles
from tidemark.jobs.config import ControllerSettings
from tidemark.jobs.slot_keys import REEVALUATE, due_key

log = logging.getLogger(__name__)

RETRY_MS = (500, 30_000)
"""A failed due record is produced again after the first, doubled per failure in a row
up to the second."""
DELIVERY_TIMEOUT_MS = 10_000
"""How long Kafka has to acknowledge a due record before it counts as failed."""


class DueTimes:
    """The latest reported due time per slot, and which are due (pure, not thread-safe)."""

    def __init__(self) -> None:
        self._due: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []

    def report(self, slot: int, due_ms: int | None) -> None:
        """The slot's earliest due time after a batch; ``None``: nothing pending."""
        if due_ms is None:
            self._due.pop(slot, None)
            return
        self._due[slot] = due_ms
        heapq.heappush(self._heap, (due_ms, slot))

    def next_due(self) -> int | None:
        while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)  # replaced or withdrawn
        return self._heap[0][0] if self._heap else None

    def take(self, now_ms: int) -> list[int]:
        """The slots due at ``now_ms``, forgotten until reported again."""
        slots = []
        while (due := self.next_due()) is not None and due <= now_ms:
            _, slot = heapq.heappop(self._heap)
            del self._due[slot]
            slots.append(slot)
        return slots

    def pending(self) -> Mapping[int, int]:
        return dict(self._due)


class DueScheduler:
    """The active driver's thread producing due records at their time."""

    def __init__(
        self, settings: ControllerSettings, on_failed: Callable[[int], None] | None = None
    ) -> None:
        self.settings = settings
        self.on_failed = on_failed
        """Told how many due records of a round failed (the metric)."""
        self.times = DueTimes()
        self.produced = 0
        """Due records Kafka acknowledged."""
        self.failed = 0
        """Due records Kafka did not acknowledge (each produced again later)."""
        self._failures_in_row = 0
        self._reevaluate: set[int] = set()
        """Slots whose sweep record failed: their retry re-evaluates too."""
        self._cond = threading.Condition()
        self._stopping = False
        self._producer: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> DueScheduler:
        self._producer = roles.client(
            roles.DUE_RECORDS_PRODUCER,
            self.settings.kafka_bootstrap,
            {"message.timeout.ms": DELIVERY_TIMEOUT_MS},
        )
        self._thread = threading.Thread(target=self._run, name="due-records", daemon=True)
        self._thread.start()
        return self

    def report(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """A batch's output rows; its ``due`` rows replace the slots' due times."""
        from tidemark.jobs.processor import DUE  # pandas and pyspark: only on the driver that leads

        with self._cond:
            for row in rows:
                if row["kind"] == DUE:
                    self.times.report(int(row[DUE]["slot"]), row[DUE]["at"])
            self._cond.notify()

    def sweep(self) -> None:
        """A re-evaluating due record for every slot now (a new leader, a changed
        configuration: re-learn what is pending, under the configuration of now)."""
        with self._cond:
            self._reevaluate.update(self.settings.slot_keys)
        self._produce(self.settings.slot_keys, _now_ms())

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._producer is not None and self._producer.flush(10):
            log.warning("due records unacknowledged at stop: the next leader's sweep redoes them")

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                now = _now_ms()
                slots = self.times.take(now)
                if not slots:
                    nxt = self.times.next_due()
                    self._cond.wait(None if nxt is None else max(0.001, (nxt - now) / 1000))
                    continue
            self._produce(slots, now)

    def _produce(self, slots: Iterable[int], now_ms: int) -> None:
        """Produce a due record per slot and wait for Kafka's answers; the slots whose
        record failed are due again after the back-off."""
        topic, partitions = self.settings.cluster.marks_topic, self.settings.bucket_count
        with self._cond:
            reevaluate = set(self._reevaluate)
        failed: dict[int, str] = {}

        def delivered(slot: int) -> Callable[[Any, Any], None]:
            def on_delivery(error: Any, message: Any) -> None:
                if error is not None:
                    failed[slot] = str(error)

            return on_delivery

        sent: list[int] = []
        for slot in slots:
            try:
                self._producer.produce(
                    topic,
                    REEVALUATE if slot in reevaluate else str(now_ms).encode(),
                    due_key(slot).encode(),
                    partition=slot % partitions,
                    on_delivery=delivered(slot),
                )
                sent.append(slot)
            except Exception as exc:  # the local queue is full, the client is closed, ...
                failed[slot] = str(exc)
        if self._producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 5):
            failed.update({slot: "no answer from Kafka" for slot in sent if slot not in failed})
        self.produced += len(sent) - len(set(sent) & set(failed))
        with self._cond:
            self._reevaluate -= set(sent) - set(failed)
        if failed:
            self._retry_later(failed)
        else:
            self._failures_in_row = 0

    def _retry_later(self, failed: Mapping[int, str]) -> None:
        self.failed += len(failed)
        self._failures_in_row += 1
        first, most = RETRY_MS
        delay = min(most, first * 2 ** min(self._failures_in_row - 1, 16))
        reasons = sorted(set(failed.values()))
        log.warning(
            "%d due record(s) of slots %s not acknowledged (%s); producing them again in %d ms",
            len(failed),
            sorted(failed),
            "; ".join(reasons),
            delay,
        )
        if self.on_failed is not None:
            self.on_failed(len(failed))
        with self._cond:
            retry_at = _now_ms() + delay
            for slot in failed:
                pending = self.times.pending().get(slot)
                self.times.report(slot, retry_at if pending is None else min(pending, retry_at))
            self._cond.notify()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = ["DueScheduler", "DueTimes"]
