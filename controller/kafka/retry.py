"""Retrying a Kafka call while Kafka answers with a transient error (kazoo's ``KazooRetry`` shape).

    retry = KafkaRetry(RETRIABLE_CODES, timeout_s=30.0)
    offsets = retry(lambda: consumer.committed(partitions, timeout=5.0))

One object, one set of retryable error codes, an injectable ``sleep`` and
clock (tests drive it without waiting). A call is repeated while it raises a
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

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class KafkaRetry:
    """``retry(call)``: ``call()``, again after a back-off while the error is retryable.

    ``codes``: the error codes to retry; ``honour_retriable``: also retry any
    error Kafka itself flags ``retriable()``. The delay starts at ``delay_s``
    and is multiplied by ``backoff`` up to ``max_delay_s``.
    """

    codes: Collection[int]
    _: KW_ONLY
    timeout_s: float
    honour_retriable: bool = False
    delay_s: float = 0.05
    max_delay_s: float = 1.0
    backoff: float = 2.0
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic

    def retryable(self, exc: KafkaException) -> bool:
        err = exc.args[0] if exc.args else None
        if not isinstance(err, KafkaError):
            return False
        return err.code() in self.codes or (self.honour_retriable and bool(err.retriable()))

    def __call__(self, call: Callable[[], T], what: str = "Kafka call") -> T:
        deadline = self.monotonic() + self.timeout_s
        delay = self.delay_s
        while True:
            try:
                return call()
            except KafkaException as exc:
                if not self.retryable(exc) or self.monotonic() + delay > deadline:
                    raise
                log.info("%s: %s; retrying in %.2f s", what, exc.args[0], delay)
                self.sleep(delay)
                delay = min(delay * self.backoff, self.max_delay_s)


__all__ = ["KafkaRetry"]
