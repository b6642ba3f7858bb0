"""A producer's fatal error reaches its caller as the KafkaException it is.

confluent-kafka raises a fatal error (an authorization refused, a fenced id) from inside
``poll``/``flush``; a delivery report served after it then fails, and the call ends in a
``SystemError`` caused by the fatal error. The producers tidemark makes raise the cause
from ``flush``, where every close ends.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tidemark.controller.kafka import roles

pytestmark = pytest.mark.unit


def _system_error_caused_by(cause: BaseException | None) -> SystemError:
    exc = SystemError("<method 'topic'> returned a result with an exception set")
    exc.__cause__ = cause
    return exc


def test_the_fatal_error_behind_a_system_error_is_raised_as_itself() -> None:
    fatal = KafkaException(
        KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed", True)
    )
    with pytest.raises(KafkaException) as raised:
        roles.raise_fatal_cause(_system_error_caused_by(fatal))
    assert raised.value is fatal
    assert raised.value.args[0].fatal()


def test_a_system_error_of_another_cause_is_raised_unchanged() -> None:
    other = _system_error_caused_by(None)
    with pytest.raises(SystemError) as raised:
        roles.raise_fatal_cause(other)
    assert raised.value is other


@pytest.mark.parametrize(
    "role", [roles.EVENT_WRITER_PRODUCER, roles.MARKS_PRODUCER, roles.DROP_IN_PRODUCER]
)
def test_every_producer_tidemark_makes_raises_fatal_errors_as_themselves(role) -> None:
    producer = roles.create(role, {"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    assert isinstance(producer, roles.FatalRaisingProducer) and isinstance(producer, Producer)
    assert isinstance(producer.poll(0), int) and producer.flush(0) == 0  # nothing queued
