"""The one way tidemark waits on a service that did not answer: back-off, jitter, a budget.

    policy = RetryPolicy(first_delay_s=0.05, max_delay_s=1.0, max_elapsed_s=30.0)
    offsets = policy.call(lambda: consumer.committed(tps), retry_on=is_transient,
                          what="reading committed offsets")

:meth:`RetryPolicy.call` runs a call and, while it raises an error ``retry_on`` accepts
and the budget allows, pauses and runs it again. The pause starts at ``first_delay_s``
and is multiplied by ``multiplier`` up to ``max_delay_s``; ``jitter`` draws each pause at
random from ``[delay * (1 - jitter), delay]``, so clients that failed together do not
come back together. The budget is ``max_attempts`` calls, ``max_elapsed_s`` seconds
(a pause that would end past it is not taken), or both; one is required (``math.inf``
says "until it works" on purpose). When the budget is spent, or the error is not one to
retry, the last error propagates unchanged, for the caller to translate.

``sleep``, ``monotonic`` and ``random`` are injectable: tests drive a policy without
waiting. A leaf module (standard library only): every package may use it.
"""

from __future__ import annotations

import logging
import math
import random as _random
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TypeVar

from tidemark.errors import ConfigurationError

log = logging.getLogger(__name__)

T = TypeVar("T")

JITTER = 0.5
"""By default a pause is between half the nominal delay and all of it."""

RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
"""The errors to retry: exception types, or a test of the error."""


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait between attempts and when to give up (see the module doc)."""

    _: KW_ONLY
    first_delay_s: float = 0.05
    max_delay_s: float = 1.0
    multiplier: float = 2.0
    jitter: float = JITTER
    max_attempts: int | None = None
    max_elapsed_s: float | None = None
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    monotonic: Callable[[], float] = field(default=time.monotonic, compare=False)
    random: Callable[[], float] = field(default=_random.random, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts is None and self.max_elapsed_s is None:
            raise ConfigurationError(
                "a retry policy needs a budget: max_attempts, max_elapsed_s or both "
                "(math.inf to retry until it works)"
            )
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"jitter must be within [0, 1], got {self.jitter}")
        if not 0 <= self.first_delay_s <= self.max_delay_s or self.multiplier < 1:
            raise ConfigurationError(
                "need 0 <= first_delay_s <= max_delay_s and multiplier >= 1, got "
                f"{self.first_delay_s}, {self.max_delay_s}, {self.multiplier}"
            )

    def delays(self) -> Callable[[], float]:
        """The pauses of one run of attempts, one per call: back-off with jitter."""
        nominal = [self.first_delay_s]

        def pause() -> float:
            delay = nominal[0]
            nominal[0] = min(delay * self.multiplier, self.max_delay_s)
            return delay * (1 - self.jitter * self.random())

        return pause

    def call(
        self,
        fn: Callable[[], T],
        *,
        retry_on: RetryOn,
        what: str = "a call",
        logger: logging.Logger | None = None,
        level: int = logging.INFO,
    ) -> T:
        """``fn()``, again after a pause while it raises an error of ``retry_on`` and the
        budget allows; each retry is logged (``logger``, at ``level``) with ``what``."""
        started = self.monotonic()
        pause = self.delays()
        attempts_left = math.inf if self.max_attempts is None else self.max_attempts
        elapsed_budget = math.inf if self.max_elapsed_s is None else self.max_elapsed_s
        while True:
            attempts_left -= 1
            try:
                return fn()
            except BaseException as exc:
                if not _accepts(retry_on, exc) or attempts_left <= 0:
                    raise
                delay = pause()
                if self.monotonic() + delay - started > elapsed_budget:
                    raise
                (logger or log).log(level, "%s: %s; trying again in %.2f s", what, exc, delay)
                self.sleep(delay)


def _accepts(retry_on: RetryOn, exc: BaseException) -> bool:
    if isinstance(retry_on, type | tuple):
        return isinstance(exc, retry_on)
    return retry_on(exc)


__all__ = ["JITTER", "RetryOn", "RetryPolicy"]
