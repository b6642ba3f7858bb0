"""Kafka not answering, as one typed error: :class:`KafkaUnavailableError`.

    with outages_named(bootstrap):
        future.result(timeout=30)       # a time-out -> KafkaUnavailableError(bootstrap, ...)
    raise KafkaOperationError(f"{what}: {exc}") from named_cause(bootstrap, exc)

librdkafka says "no broker answered" with a few local error codes (:data:`OUTAGE_CODES`)
and a request's future with a bare :class:`TimeoutError`; every other error is Kafka
answering and refusing, and passes unchanged. Where an adapter already wraps Kafka's
errors in its own (a refused operation, a reader's failure), it keeps raising that one,
caused by the typed error (:func:`named_cause`): callers see the same types as before,
and the command line finds the outage in the chain. A client that learns of an outage
only indirectly (a flush that left records unacknowledged, a consumer that hears
nothing) asks its brokers for metadata (:func:`answering`): no answer is the typed error.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from tidemark.controller.exceptions import KafkaUnavailableError

log = logging.getLogger(__name__)

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


ANSWER_GRACE_S = 1.0
"""How much longer than a request's own time-out its future is waited for: the client
answers a request it gave up on with its reason (an unknown partition, say), which a
wait of the same length would race and lose to a bare time-out."""


def answer(future: Any, request_timeout_s: float, client: Any = None) -> Any:
    """The result of an admin request's ``future`` sent with ``request_timeout_s``. On a
    time-out, ``client``'s error events are served first (an admin client serves them
    only when polled), so the error can say what the client heard (:func:`hear`)."""
    try:
        return future.result(timeout=request_timeout_s + ANSWER_GRACE_S)
    except TimeoutError:
        if client is not None:
            client.poll(0)
        raise


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says no broker answered (not a refusal)."""
    if isinstance(exc, KafkaUnavailableError):
        return True
    if isinstance(exc, KafkaException):
        error = exc.args[0] if exc.args else None
        return isinstance(error, KafkaError) and error.code() in OUTAGE_CODES
    return isinstance(exc, TimeoutError)


GENERIC_CODES = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT})
"""Error events that say only that no broker answered: a reason heard before them is kept."""

HEARD_FOR_S = 60.0
"""How long a client's last connection error is told with a time-out (then it is stale)."""

_heard: dict[str, tuple[float, str]] = {}
_heard_lock = threading.Lock()


def hear(bootstrap: str, error: KafkaError, now: float | None = None) -> None:
    """Keep ``error``, a client's error event about ``bootstrap`` (a failed TLS handshake,
    a refused login, a connection refused): a time-out talking to ``bootstrap`` soon
    after says why (:func:`unavailable`). Events that add nothing (:data:`GENERIC_CODES`)
    are not kept."""
    if error.code() in GENERIC_CODES:
        return
    text = " ".join(str(error.str()).split())
    with _heard_lock:
        _heard[bootstrap] = (time.monotonic() if now is None else now, text)


def last_heard(bootstrap: str | None, now: float | None = None) -> str | None:
    """The error last heard about ``bootstrap`` within :data:`HEARD_FOR_S`, if any."""
    if bootstrap is None:
        return None
    with _heard_lock:
        heard = _heard.get(bootstrap)
    now = time.monotonic() if now is None else now
    if heard is None or now - heard[0] > HEARD_FOR_S:
        return None
    return heard[1]


def hearing(bootstrap: str, then: Callable[[KafkaError], None] | None = None) -> Any:
    """A client's ``error_cb``: :func:`hear` each event, then pass it to ``then``."""

    def on_error(error: KafkaError) -> None:
        hear(bootstrap, error)
        if then is not None:
            then(error)

    return on_error


def unavailable(bootstrap: str | None, exc: BaseException) -> KafkaUnavailableError:
    """The typed error for an outage ``exc`` met while talking to ``bootstrap``; with the
    client's last connection error about it (:func:`hear`), which says why."""
    if isinstance(exc, KafkaUnavailableError):
        return exc
    if isinstance(exc, TimeoutError) and not str(exc):
        said = "gave no answer in time"
    else:
        first = (str(exc.args[0] if exc.args else exc).strip() or type(exc).__name__).splitlines()
        said = f"gave no answer ({first[0].strip()})"
    heard = last_heard(bootstrap)
    return KafkaUnavailableError(
        bootstrap, said if heard is None or heard in said else f"{said}; its last error: {heard}"
    )


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
    """Within the block, a request that got no answer (a bare :class:`TimeoutError`, or a
    :class:`KafkaException` :func:`is_outage` recognises) is raised as
    :class:`KafkaUnavailableError` (a :class:`TimeoutError` too); other errors pass."""
    try:
        yield
    except (TimeoutError, KafkaException) as exc:
        if isinstance(exc, KafkaUnavailableError) or not is_outage(exc):
            raise
        raise unavailable(bootstrap, exc) from exc


def answering(client: Any, bootstrap: str, timeout_s: float, topic: str | None = None) -> Any:
    """``client``'s metadata (of ``topic`` when given), asked of its brokers:
    :class:`KafkaUnavailableError` naming ``bootstrap`` when none answers within
    ``timeout_s``. How a producer or consumer checks that its brokers can be reached."""
    with outages_named(bootstrap):
        return client.list_topics(topic, timeout=timeout_s)


class OutageWatch:
    """A client's error events, for a client that hears of an outage no other way (a
    consumer's poll returns nothing while no broker answers).

        watch = OutageWatch(bootstrap, timeout_s=10.0)
        consumer = roles.client(roles.INGEST_CONSUMER, bootstrap, {**site, **watch.settings})
        records = consumer.consume(500, 0.2)
        watch.check(consumer)       # KafkaUnavailableError when no broker answers

    An event that says a broker did not answer (:func:`is_outage`) makes the next
    :meth:`check` ask for metadata (:func:`answering`): brokers that answer (one of
    several restarting, an idle connection closed) are no outage. Other events are logged.
    """

    def __init__(self, bootstrap: str, timeout_s: float) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.heard: KafkaError | None = None
        """The last outage event not checked yet."""

    @property
    def settings(self) -> dict[str, Any]:
        """The client settings that route its error events here."""
        return {"error_cb": self._on_error}

    def _on_error(self, error: KafkaError) -> None:
        if is_outage(KafkaException(error)):
            log.debug("Kafka %s: %s", self.bootstrap, error)
            self.heard = error
        else:
            log.warning("Kafka %s: %s", self.bootstrap, error)

    def check(self, client: Any) -> None:
        """After a poll: when an outage was heard since the last check, ask ``client``'s
        brokers for metadata (:class:`KafkaUnavailableError` when none answers)."""
        heard, self.heard = self.heard, None
        if heard is not None:
            answering(client, self.bootstrap, self.timeout_s)


T = TypeVar("T")


class HeldCalls:
    """A client's blocking calls, each run on a daemon thread and waited for at most a
    bound: librdkafka can hold a call well past its own time-out while no broker answers
    (a transactional producer's ``send_offsets_to_transaction``: its group-coordinator
    request has no time-out of its own, so it waits for the transaction's).

        calls = HeldCalls("relay-kafka")
        with outages_named(bootstrap):   # a call not answered -> KafkaUnavailableError
            calls.run(lambda: producer.send_offsets_to_transaction(offsets, group, 2.0), 3.0)

    A call not answered within its bound raises a bare :class:`TimeoutError` (an outage,
    :func:`is_outage`) and is left to end on its thread; the next call gets a new thread.
    The client it used must not be asked anything that waits on it again: start over
    with a new one."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._work: queue.SimpleQueue[Any] | None = None

    def run(self, call: Callable[[], T], bound_s: float) -> T:
        """``call()``'s result or exception, or :class:`TimeoutError` after ``bound_s``."""
        if self._work is None:
            self._work = queue.SimpleQueue()
            thread = threading.Thread(target=_serve, args=(self._work,), name=self.name)
            thread.daemon = True  # one left holding a call must not hold the exit
            thread.start()
        done: futures.Future[T] = futures.Future()
        self._work.put((call, done))
        futures.wait([done], bound_s)
        if not done.done():
            log.info("%s: a Kafka call not answered in %.1f s, left to end", self.name, bound_s)
            self.close()  # its thread ends once the call does
            raise TimeoutError()
        return done.result()

    def close(self) -> None:
        """End the thread (once its call, if one is held, ends)."""
        if self._work is not None:
            self._work.put(None)
            self._work = None


def _serve(work: queue.SimpleQueue[Any]) -> None:
    while (item := work.get()) is not None:
        call, done = item
        if done.set_running_or_notify_cancel():
            try:
                done.set_result(call())
            except BaseException as exc:  # given to the caller
                done.set_exception(exc)


__all__ = [
    "OUTAGE_CODES",
    "HeldCalls",
    "OutageWatch",
    "answering",
    "hear",
    "hearing",
    "is_outage",
    "last_heard",
    "named_cause",
    "outages_named",
    "unavailable",
]
