"""Retrying a Kafka call while Kafka answers with a transient error (kazoo's ``KazooRetry`` shape).

    retry = KafkaRetry(RETRIABLE_CODES, timeout_s=30.0)
    offsets = retry(lambda: consumer.committed(partitions, timeout=5.0))

One object, one set of retryable error codes, on the one retry policy
(:mod:`tidemark.retries`: back-off with jitter, the deadline its budget), an
injectable ``sleep`` and clock (tests drive it without waiting). A call is
repeated while it raises a
:class:`confluent_kafka.KafkaException` whose error is retryable and the
next attempt would still start before the deadline; otherwise the last
exception propagates unchanged, for the caller to wrap in its own error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import KW_ONLY, dataclass
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from tidemark.retries import JITTER, RetryPolicy

log = logging.getLogger(__name__)

T = TypeVar("T")

LEADER_MOVING = frozenset(
    {
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
    }
)
"""A partition whose leader is moving, or not yet elected on a topic just made or grown
(the client's leader epoch newer or older than the broker's, for a moment): asked again
a moment later, it answers."""

COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
"""A group's coordinator moving, or not yet loaded on a broker just started: asked again
a moment later, it answers."""


@dataclass(frozen=True)
class KafkaRetry:
    """``retry(call)``: ``call()``, again after a back-off while the error is retryable.

    ``codes``: the error codes to retry; ``honour_retriable``: also retry any
    error Kafka itself flags ``retriable()``. The delay starts at ``delay_s``
    and is multiplied by ``backoff`` up to ``max_delay_s``, each pause drawn with
    ``jitter`` (:class:`tidemark.retries.RetryPolicy`, whose budget is ``timeout_s``).
    """

    codes: Collection[int]
    _: KW_ONLY
    timeout_s: float
    honour_retriable: bool = False
    delay_s: float = 0.05
    max_delay_s: float = 1.0
    backoff: float = 2.0
    jitter: float = JITTER
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic

    def retryable(self, exc: BaseException) -> bool:
        if not isinstance(exc, KafkaException):
            return False
        err = exc.args[0] if exc.args else None
        if not isinstance(err, KafkaError):
            return False
        return err.code() in self.codes or (self.honour_retriable and bool(err.retriable()))

    @property
    def policy(self) -> RetryPolicy:
        return RetryPolicy(
            first_delay_s=self.delay_s,
            max_delay_s=self.max_delay_s,
            multiplier=self.backoff,
            jitter=self.jitter,
            max_elapsed_s=self.timeout_s,
            sleep=self.sleep,
            monotonic=self.monotonic,
        )

    def __call__(self, call: Callable[[], T], what: str = "Kafka call") -> T:
        return self.policy.call(call, retry_on=self.retryable, what=what, logger=log)


__all__ = ["COORDINATOR_MOVING", "LEADER_MOVING", "KafkaRetry"]
