"""Kafka not answering, as one typed error: :class:`KafkaUnavailableError`.

    with outages_named(bootstrap):
        future.result(timeout=30)       # a time-out -> KafkaUnavailableError(bootstrap, ...)
    raise KafkaOperationError(f"{what}: {exc}") from named_cause(bootstrap, exc)

librdkafka says "no broker answered" with a few local error codes (:data:`OUTAGE_CODES`)
and a request's future with a bare :class:`TimeoutError`; every other error is Kafka
answering and refusing, and passes unchanged. Where an adapter already wraps Kafka's
errors in its own (a refused operation, a reader's failure), it keeps raising that one,
caused by the typed error (:func:`named_cause`): callers see the same types as before,
and the command line finds the outage in the chain.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from confluent_kafka import KafkaError, KafkaException

from tidemark.controller.exceptions import KafkaUnavailableError

OUTAGE_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError._MSG_TIMED_OUT,
    }
)
"""librdkafka's codes for "no broker answered" (the rest are Kafka refusing a request)."""


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says no broker answered (not a refusal)."""
    if isinstance(exc, KafkaUnavailableError):
        return True
    if isinstance(exc, KafkaException):
        error = exc.args[0] if exc.args else None
        return isinstance(error, KafkaError) and error.code() in OUTAGE_CODES
    return isinstance(exc, TimeoutError)


def unavailable(bootstrap: str | None, exc: BaseException) -> KafkaUnavailableError:
    """The typed error for an outage ``exc`` met while talking to ``bootstrap``."""
    if isinstance(exc, KafkaUnavailableError):
        return exc
    if isinstance(exc, TimeoutError) and not str(exc):
        return KafkaUnavailableError(bootstrap, "gave no answer in time")
    first = (str(exc.args[0] if exc.args else exc).strip() or type(exc).__name__).splitlines()
    return KafkaUnavailableError(bootstrap, f"gave no answer ({first[0].strip()})")


def named_cause(bootstrap: str | None, exc: BaseException) -> BaseException:
    """The cause to raise an adapter's own error from: for an outage the typed error
    (itself caused by ``exc``), else ``exc``."""
    if not is_outage(exc):
        return exc
    typed = unavailable(bootstrap, exc)
    if typed is not exc:
        typed.__cause__ = exc
    return typed


@contextlib.contextmanager
def outages_named(bootstrap: str | None) -> Iterator[None]:
    """Within the block, a request that got no answer in time (a bare
    :class:`TimeoutError`) is raised as :class:`KafkaUnavailableError` (a
    :class:`TimeoutError` too)."""
    try:
        yield
    except TimeoutError as exc:
        if isinstance(exc, KafkaUnavailableError):
            raise
        raise unavailable(bootstrap, exc) from exc


__all__ = ["OUTAGE_CODES", "is_outage", "named_cause", "outages_named", "unavailable"]
