"""The retry policy: back-off with jitter inside its bounds, a budget, only its errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_kafka_retry import _Clock
from tidemark.errors import ConfigurationError
from tidemark.retries import RetryPolicy

pytestmark = pytest.mark.unit


def _failing(times: int, error: BaseException) -> tuple[list[int], object]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "ok"

    return calls, call


@given(draws=st.lists(st.floats(0, 1, exclude_max=True), min_size=6, max_size=6))
def test_each_pause_is_within_its_jittered_back_off(draws: list[float]) -> None:
    clock, randoms = _Clock(), iter(draws)
    policy = RetryPolicy(
        first_delay_s=0.1,
        max_delay_s=0.8,
        jitter=0.5,
        max_attempts=7,
        sleep=clock.sleep,
        monotonic=clock.monotonic,
        random=lambda: next(randoms),
    )
    _, call = _failing(6, OSError("refused"))
    assert policy.call(call, retry_on=OSError) == "ok"  # type: ignore[arg-type]
    nominal = [0.1, 0.2, 0.4, 0.8, 0.8, 0.8]
    assert len(clock.slept) == len(nominal)
    for slept, delay in zip(clock.slept, nominal, strict=True):
        assert delay / 2 <= slept <= delay


def test_jitter_spreads_the_pauses_of_clients_that_failed_together() -> None:
    pauses = set()
    for _ in range(20):
        clock = _Clock()
        policy = RetryPolicy(max_attempts=2, sleep=clock.sleep, monotonic=clock.monotonic)
        _, call = _failing(1, OSError("refused"))
        policy.call(call, retry_on=OSError)  # type: ignore[arg-type]
        pauses.update(clock.slept)
    assert len(pauses) > 1


def test_the_attempts_budget_ends_with_the_last_error() -> None:
    clock = _Clock()
    policy = RetryPolicy(max_attempts=3, sleep=clock.sleep, monotonic=clock.monotonic)
    calls, call = _failing(10, OSError("refused"))
    with pytest.raises(OSError, match="refused"):
        policy.call(call, retry_on=OSError)  # type: ignore[arg-type]
    assert len(calls) == 3 and len(clock.slept) == 2


def test_no_pause_ends_past_the_elapsed_budget() -> None:
    clock = _Clock()
    policy = RetryPolicy(
        first_delay_s=0.1, max_elapsed_s=1.0, sleep=clock.sleep, monotonic=clock.monotonic
    )
    calls, call = _failing(1_000, OSError("refused"))
    with pytest.raises(OSError):
        policy.call(call, retry_on=OSError)  # type: ignore[arg-type]
    assert clock.now <= 1.0
    assert len(calls) == len(clock.slept) + 1 > 2


def test_other_errors_propagate_at_once_and_a_test_may_choose() -> None:
    clock = _Clock()
    policy = RetryPolicy(max_elapsed_s=math.inf, sleep=clock.sleep, monotonic=clock.monotonic)
    calls, call = _failing(1, ValueError("bad input"))
    with pytest.raises(ValueError):
        policy.call(call, retry_on=OSError)  # type: ignore[arg-type]
    assert calls == [1] and clock.slept == []
    calls, call = _failing(2, OSError("transient"))
    chosen = policy.call(call, retry_on=lambda e: "transient" in str(e))  # type: ignore[arg-type]
    assert chosen == "ok" and len(calls) == 3


@pytest.mark.parametrize(
    "settings",
    [
        {},  # no budget
        {"max_attempts": 0},
        {"max_attempts": 3, "jitter": 1.5},
        {"max_attempts": 3, "first_delay_s": 2.0, "max_delay_s": 1.0},
        {"max_attempts": 3, "multiplier": 0.5},
    ],
)
def test_a_policy_without_a_budget_or_with_bad_bounds_is_refused(settings: dict) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**settings)
