"""KafkaRetry: retries only its codes, backs off, gives up at the deadline (no broker)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidemark.controller.kafka.retry import KafkaRetry
from tidemark.pipelines.reading.offsets import MemoryOffsets


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


def _failing(code: int, times: int) -> tuple[list[int], object]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise KafkaException(KafkaError(code))
        return "ok"

    return calls, call


def test_retries_listed_code_with_backoff() -> None:
    clock = _Clock()
    retry = KafkaRetry(
        [KafkaError.NOT_COORDINATOR],
        timeout_s=10.0,
        max_delay_s=0.2,
        jitter=0.0,
        sleep=clock.sleep,
        monotonic=clock.monotonic,
    )
    calls, call = _failing(KafkaError.NOT_COORDINATOR, 4)
    assert retry(call) == "ok"  # type: ignore[arg-type]
    assert len(calls) == 5
    assert clock.slept == [0.05, 0.1, 0.2, 0.2]


def test_other_codes_propagate_at_once() -> None:
    clock = _Clock()
    retry = KafkaRetry([KafkaError.NOT_COORDINATOR], timeout_s=10.0, sleep=clock.sleep)
    calls, call = _failing(KafkaError.TOPIC_AUTHORIZATION_FAILED, 1)
    with pytest.raises(KafkaException):
        retry(call)  # type: ignore[arg-type]
    assert len(calls) == 1 and clock.slept == []


def test_gives_up_at_the_deadline() -> None:
    clock = _Clock()
    retry = KafkaRetry(
        [KafkaError.NOT_COORDINATOR],
        timeout_s=0.3,
        sleep=clock.sleep,
        monotonic=clock.monotonic,
    )
    calls, call = _failing(KafkaError.NOT_COORDINATOR, 100)
    with pytest.raises(KafkaException):
        retry(call)  # type: ignore[arg-type]
    assert clock.now <= 0.3
    assert len(calls) == len(clock.slept) + 1


def test_memory_offsets_keep_the_latest_commit() -> None:
    offsets = MemoryOffsets()
    offsets.commit({1: 5, 2: 7})
    offsets.commit({1: 9})
    assert offsets.committed([1, 2, 3]) == {1: 9, 2: 7}
    offsets.forget()
    assert offsets.committed([1, 2]) == {}


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_LEADER_EPOCH,
    ],
    ids=["unknown-partition", "unknown-topic-or-partition", "leader-not-available", "leader-epoch"],
)
def test_offset_lookups_ask_again_while_a_scaled_topic_propagates(code: int) -> None:
    """Right after a scale, a broker's metadata may lack the new partitions: the topic
    operations' lookups (``StreamTopics.end_offsets`` and the others) ask again."""
    from tidemark.controller.kafka.admin import OFFSET_LOOKUP_RETRIABLE

    clock = _Clock()
    retry = KafkaRetry(
        OFFSET_LOOKUP_RETRIABLE, timeout_s=30.0, sleep=clock.sleep, monotonic=clock.monotonic
    )
    calls, call = _failing(code, 3)
    assert retry(call) == "ok"  # type: ignore[arg-type]
    assert len(calls) == 4
