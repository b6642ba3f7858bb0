"""Due records: how a cycle that falls due without new marks gets its micro-batch.

    times = DueTimes()
    times.report(slot=3, due_ms=1_700_000_001_000)    # from a batch's ``due`` rows
    times.take(now_ms)                                 # -> [3] once due
    scheduler = DueScheduler(settings).start()         # the leader's thread: produces them
    scheduler.report(rows); scheduler.sweep(); scheduler.stop()

The controller's query has no timers and runs no micro-batch without input
(``noDataMicroBatches`` off), so a stream whose lagging writer's timeout
falls due needs something to read. Every batch reports, per slot it touched,
the slot's earliest due time (:class:`jobs.processor.SlotDue`); the active
driver keeps the latest report per slot and, when one comes, produces a
*due record* (key :func:`jobs.slot_keys.due_key`, value the due time) to the marks
topic. That record is the input of the next micro-batch, which runs the due
cycles of its slot. Only slots with something pending get records: a
controller whose writers are in step, or that has no marks, produces none
and runs nothing.

Due records are hints, not state: one too many runs a check that finds
nothing due; one lost (the driver died before producing it) is made up by
:meth:`DueScheduler.sweep`, which a new leader runs once on start: a due
record for every slot, so the first batch reports every pending due time
again.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Producer

from controller.kafka.settings import client_config
from jobs.config import ControllerSettings
from jobs.slot_keys import due_key

log = logging.getLogger(__name__)


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

    def __init__(self, settings: ControllerSettings) -> None:
        self.settings = settings
        self.times = DueTimes()
        self.produced = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._producer: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> DueScheduler:
        self._producer = Producer(
            {**client_config(self.settings.kafka_bootstrap), "linger.ms": 0, "log_level": 0}
        )
        self._thread = threading.Thread(target=self._run, name="due-records", daemon=True)
        self._thread.start()
        return self

    def report(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """A batch's output rows; its ``due`` rows replace the slots' due times."""
        from jobs.processor import DUE  # pandas and pyspark: only on the driver that leads

        with self._cond:
            for row in rows:
                if row["kind"] == DUE:
                    self.times.report(int(row["slot"]), row["at"])
            self._cond.notify()

    def sweep(self) -> None:
        """A due record for every slot now (a new leader: re-learn what is pending)."""
        self._produce(self.settings.slot_keys, _now_ms())

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._producer is not None:
            self._producer.flush(10)

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
            try:
                self._produce(slots, now)
            except Exception:  # Kafka down: the next leader's sweep makes up for it
                log.exception("due records for slots %s", slots)

    def _produce(self, slots: Iterable[int], now_ms: int) -> None:
        topic, partitions = self.settings.cluster.marks_topic, self.settings.bucket_count
        value = str(now_ms).encode()
        for slot in slots:
            self._producer.produce(
                topic, value, due_key(slot).encode(), partition=slot % partitions
            )
            self.produced += 1
        self._producer.flush(30)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = ["DueScheduler", "DueTimes"]
