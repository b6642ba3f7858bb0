"""Where a reader group's position is kept: Kafka's committed offsets, or memory.

    offsets = KafkaOffsets("tidemark.shop.orders", settings, timeout_s=30.0)
    offsets.commit({segment_id(0, 0): 42})
    offsets.committed([segment_id(0, 0)])     # {0: 42}

A named group keeps its position as the Kafka consumer group's committed
offsets (group id = the group's name), so it outlives the process; a
one-off read (``ReaderGroup.ephemeral_group``) keeps it in memory. Both
speak segment ids; the Kafka one maps them to partitions of the stream's
topic. A transient coordinator error (the group coordinator loading or
moving) is retried by one :class:`tidemark.controller.kafka.retry.KafkaRetry`.
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tidemark.controller.kafka import roles
from tidemark.controller.kafka.outages import named_cause
from tidemark.controller.kafka.retry import COORDINATOR_MOVING, KafkaRetry
from tidemark.controller.model import segment_number
from tidemark.pipelines.reading.exceptions import ReaderError

log = logging.getLogger(__name__)

T = TypeVar("T")

COORDINATOR_ERRORS = COORDINATOR_MOVING | {
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}
"""Errors a group coordinator answers with while it loads or moves, and a request
that timed out on the way (besides those Kafka flags retriable itself)."""


class OffsetStore(abc.ABC):
    """A reader group's committed position: segment id -> next offset. Thread-safe."""

    durable: bool
    """True when the position outlives the process (a named group)."""

    @abc.abstractmethod
    def committed(self, seg_ids: Iterable[int]) -> dict[int, int]:
        """Segment id -> committed offset, for those of ``seg_ids`` that have one."""

    @abc.abstractmethod
    def commit(self, offsets: Mapping[int, int], consumer: Any = None) -> None:
        """Commit ``offsets`` (through a reader's ``consumer`` when given)."""

    @abc.abstractmethod
    def forget(self) -> None:
        """Drop the stored position (the group is being deleted)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the store holds open."""


class MemoryOffsets(OffsetStore):
    """The position in this process's memory (one-off reads)."""

    durable = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: dict[int, int] = {}

    def committed(self, seg_ids: Iterable[int]) -> dict[int, int]:
        with self._lock:
            return {s: self._offsets[s] for s in seg_ids if s in self._offsets}

    def commit(self, offsets: Mapping[int, int], consumer: Any = None) -> None:
        with self._lock:
            self._offsets.update(offsets)

    def forget(self) -> None:
        with self._lock:
            self._offsets.clear()

    def close(self) -> None:
        """Nothing is held open."""


class KafkaOffsets(OffsetStore):
    """The position as the Kafka consumer group's committed offsets on ``topic``.

    ``settings``: the consumer settings of the group (``group.id`` = the
    group's name); a consumer is made from them on first use.
    """

    durable = True

    def __init__(
        self,
        topic: str,
        settings: Mapping[str, Any],
        *,
        timeout_s: float,
        retry: KafkaRetry | None = None,
    ) -> None:
        self.topic = topic
        self.settings = dict(settings)
        self.group_id = str(self.settings["group.id"])
        self.timeout_s = timeout_s
        self.retry = retry or KafkaRetry(
            COORDINATOR_ERRORS, timeout_s=timeout_s, honour_retriable=True
        )
        self._lock = threading.RLock()
        self._consumer: Any = None

    def committed(self, seg_ids: Iterable[int]) -> dict[int, int]:
        by_number = {segment_number(s): s for s in seg_ids}
        if not by_number:
            return {}
        tps = [TopicPartition(self.topic, n) for n in sorted(by_number)]
        with self._lock:
            found = self._retrying(
                "reading committed offsets",
                lambda: self._group_consumer().committed(tps, timeout=self.timeout_s),
            )
        return {by_number[tp.partition]: tp.offset for tp in found if tp.offset >= 0}

    def commit(self, offsets: Mapping[int, int], consumer: Any = None) -> None:
        if not offsets:
            return
        tps = [TopicPartition(self.topic, segment_number(s), o) for s, o in sorted(offsets.items())]
        if consumer is not None:
            self._retrying("committing", lambda: consumer.commit(offsets=tps, asynchronous=False))
            return
        with self._lock:
            self._retrying(
                "committing",
                lambda: self._group_consumer().commit(offsets=tps, asynchronous=False),
            )

    def forget(self) -> None:
        """Delete the Kafka consumer group (a failure is logged: nothing is lost)."""
        admin = roles.client(roles.ADMIN, str(self.settings["bootstrap.servers"]))
        for future in admin.delete_consumer_groups([self.group_id]).values():
            try:
                future.result(timeout=self.timeout_s)
            except KafkaException as exc:
                log.info("deleting consumer group %s: %s", self.group_id, exc)

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        try:
            return self.retry(call, f"reader group {self.group_id}: {what}")
        except KafkaException as exc:
            raise ReaderError(
                f"reader group {self.group_id}: {what} failed: {exc}"
            ) from named_cause(str(self.settings["bootstrap.servers"]), exc)

    def _group_consumer(self) -> Any:
        if self._consumer is None:
            self._consumer = roles.create(roles.READER_CONSUMER, self.settings)
        return self._consumer


__all__ = ["COORDINATOR_ERRORS", "KafkaOffsets", "MemoryOffsets", "OffsetStore"]
