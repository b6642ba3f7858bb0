"""The kinds of Kafka client tidemark makes, each with its settings and their reasons.

    producer = roles.client(roles.RELAY_PRODUCER, bootstrap)
    consumer = roles.client(roles.READER_CONSUMER, bootstrap, {"group.id": group})
    producer = roles.create(roles.DROP_IN_PRODUCER, users_settings)

A :class:`Role` holds the settings tidemark fixes for one kind of client; every client
is built here (:func:`client` / :func:`create`, the architecture test refuses
``Producer(`` / ``Consumer(`` / ``AdminClient(`` anywhere else), on top of the
connection from :func:`tidemark.controller.kafka.settings.client_config`. What a site
adds (a group id, a transactional id, a user's overrides) comes after a role's settings
and wins over them.

librdkafka's ``log_level`` is a syslog level written to stderr when no ``logger`` is
given: ``0`` keeps a client silent (its errors reach tidemark as exceptions or delivery
reports, and a stopped broker's reconnect lines would drown a command's one-line answer).
Clients that live in a user's process log through the ``logging`` module instead
(:data:`KAFKA_LOGGER`).
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar, cast

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from tidemark.controller.kafka.outages import hearing
from tidemark.controller.kafka.settings import client_config, user_properties

C = TypeVar("C", Producer, Consumer, AdminClient)

log = logging.getLogger(__name__)

KAFKA_LOGGER = logging.getLogger("tidemark.pipelines.kafka")
"""Where the clients of writers and readers log (a user's process: its logging setup)."""

SILENT = 0
"""librdkafka's ``log_level`` for a client whose failures reach tidemark as errors."""

FETCH_QUEUE_BACKOFF_MS = 10
"""librdkafka's ``fetch.queue.backoff.ms`` for readers (its default: 1000). Once a
partition's prefetched queue passes its thresholds, the fetcher waits this long before
fetching it again, even when the reader has emptied the queue meanwhile: with the
default, ``read_next`` over a backlog stalls at every refill (``tests/bench/bench_read.py``
measures it)."""


@dataclass(frozen=True)
class Role(Generic[C]):
    """One kind of client: its class (``kind``) and the ``settings`` tidemark fixes for it."""

    name: str
    kind: type[C]
    settings: Mapping[str, Any] = field(default_factory=dict)

    def config(
        self,
        bootstrap: str,
        extra: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The connection, this role's settings, the user's properties (over the role's
        tuning: tidemark's own are refused there), then ``extra`` (which wins)."""
        return {
            **client_config(bootstrap, environ),
            **self.settings,
            **user_properties(bootstrap, environ),
            **(extra or {}),
        }


def create(role: Role[C], config: Mapping[str, Any]) -> C:
    """The client of ``role``'s kind from a complete ``config`` (one :meth:`Role.config`
    made, or a user's own settings for :data:`DROP_IN_PRODUCER`): the one place a Kafka
    client is constructed. Its error events are heard (:func:`~tidemark.controller.kafka.
    outages.hearing`, before any ``error_cb`` of the config): a time-out then names the
    last connection error (a refused handshake, say)."""
    settings = dict(config)
    bootstrap = settings.get("bootstrap.servers")
    if bootstrap:
        settings["error_cb"] = hearing(str(bootstrap), settings.get("error_cb"))
    if role.kind is Producer:
        return cast(C, FatalRaisingProducer(settings))
    return role.kind(settings)


def raise_fatal_cause(exc: SystemError) -> NoReturn:
    """Raise the client's fatal error behind ``exc`` if there is one, else ``exc``.

    confluent-kafka raises a producer's fatal error (an authorization refused, a fenced
    id) from inside the event loop instead of calling ``error_cb``; a delivery report
    served after it in the same ``poll``/``flush`` then fails on its first call into the
    library, and the loop ends in a ``SystemError`` whose cause is that fatal
    ``KafkaException``. The fatal error is what the caller can act on."""
    cause = exc.__cause__
    if isinstance(cause, KafkaException):
        raise cause from None
    raise exc


class FatalRaisingProducer(Producer):
    """A producer whose ``flush`` raises its fatal error as the ``KafkaException`` it is
    (:func:`raise_fatal_cause`), never as a ``SystemError``. ``poll`` stays the library's
    own: it runs once a record, where a Python frame is a cost the drop-in producer does
    not pay; every close ends in a ``flush``."""

    def flush(self, timeout: float = -1) -> int:
        try:
            return super().flush(timeout)
        except SystemError as exc:
            raise_fatal_cause(exc)


def client(role: Role[C], bootstrap: str, extra: Mapping[str, Any] | None = None) -> C:
    """The client of ``role`` connected to ``bootstrap`` (``extra``: the site's settings)."""
    return create(role, role.config(bootstrap, extra))


_DRAIN_POLLS = 16
"""How many events a closing group member serves before its close (errors among them)."""


def close_consumer(consumer: Consumer, timeout_s: float) -> bool:
    """Close a group member ``consumer`` (subscribed, committing by hand), waiting at
    most ``timeout_s``: whether it closed. Its own error is raised here.

    librdkafka's close serves a rebalance still pending, and the assignment that makes
    can wait forever for a group that is ending (a broker gone mid-join) -- inside
    confluent-kafka's rebalance callback, which holds the interpreter lock, so no
    thread could time it out. A pending rebalance is served first by polling, while
    the group lives and an assignment returns at once; a message that poll returns is
    dropped uncommitted, for the group's next member. The close then runs on a thread
    of its own, and one that does not return is logged and left to end with the
    process."""
    for _ in range(_DRAIN_POLLS):
        event = consumer.poll(0)
        if event is None or event.error() is None:
            break  # nothing pending, or a message: any assignment before it is served
    failed: list[BaseException] = []

    def close() -> None:
        try:
            consumer.close()
        except BaseException as exc:
            failed.append(exc)

    closing = threading.Thread(target=close, name="kafka-consumer-close", daemon=True)
    closing.start()
    closing.join(timeout_s)
    if closing.is_alive():
        log.warning(
            "a Kafka consumer did not close within %.0f s (librdkafka waits on a "
            "rebalance of a group whose broker is gone); left to end with the process",
            timeout_s,
        )
        return False
    if failed:
        raise failed[0]
    return True


def release(producer: Producer, timeout_s: float) -> int:
    """Let go of ``producer`` within about ``timeout_s``: wait that long for what is in
    flight, purge what is left (its delivery reports say so), serve the reports, close
    the handle (its threads and broker connections end now, not when the object is
    collected: nothing reconnects or logs after). The number of records purged. A
    producer in a fatal state (refused its transactional id, fenced) is closed too: its
    flush and purge raise that error, which its owner was told already."""
    try:
        left = producer.flush(max(0.0, timeout_s))
        if left:
            producer.purge(in_queue=True, in_flight=True, blocking=True)
            producer.poll(0)
    except KafkaException as exc:
        left = len(producer)
        log.debug("releasing a producer in a fatal state: %s", exc)
    with warnings.catch_warnings():
        # a transaction a gone broker left open cannot be aborted: the broker's own
        # transaction timeout aborts it, and the caller was told already
        warnings.filterwarnings("ignore", "Producer abort_transaction failed", RuntimeWarning)
        producer.close()
    return left


# --- writers ------------------------------------------------------------------------------

EVENT_WRITER_PRODUCER = Role(
    "event writer",
    Producer,
    {
        # A retried send never duplicates or reorders a record: the marks' positions
        # count records, so a duplicate would move a writer's position past its data.
        "enable.idempotence": True,
        "logger": KAFKA_LOGGER,  # the application's process: its logging, not stderr
    },
)
"""An :class:`~tidemark.pipelines.writing.writer.EventWriter`'s producer (``linger.ms``,
the delivery timeout and the client id come from its ``WriterConfig``)."""

TRANSACTIONAL_PRODUCER = Role(
    "transactional writer",
    Producer,
    # The same as an event writer's; its transactional id and timeouts come with it.
    EVENT_WRITER_PRODUCER.settings,
)
"""A :class:`~tidemark.pipelines.writing.transactions.TransactionalWriter`'s producer."""


def writer_role(transactional: bool) -> Role[Producer]:
    """The role of a writer's producer: transactional or not."""
    return TRANSACTIONAL_PRODUCER if transactional else EVENT_WRITER_PRODUCER


DROP_IN_PRODUCER = Role("drop-in producer", Producer)
""":class:`~tidemark.pipelines.writing.producer.TidemarkProducer`: the application's own
settings as it gave them (a drop-in for its ``Producer``), nothing added here."""

MARKS_PRODUCER = Role(
    "marks registration",
    Producer,
    # Each writer's time-0 mark is sent once and in order, whatever the broker retries.
    {"enable.idempotence": True},
)
"""The controller job's registration of its Spark writers (a time-0 mark each)."""

OBSERVER_PRODUCER = Role(
    "stream observer",
    Producer,
    {
        # The observer's marks, like a writer's, are sent once and in order.
        "enable.idempotence": True,
        # One mark a look: nothing to batch, and a look's mark should leave at once.
        "linger.ms": 0,
        "logger": KAFKA_LOGGER,  # the observing process's logging, not stderr
    },
)
"""The marks producer of :class:`~tidemark.pipelines.writing.observer.StreamObserver`
(its client id names the observer's writer id)."""

# --- readers ------------------------------------------------------------------------------

READER_CONSUMER = Role(
    "reader",
    Consumer,
    {
        # A reader's position is what the group commits (its stream cut), not what the
        # client read ahead: tidemark commits and stores offsets itself.
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # Only committed transactions' records are events; aborted ones never reach a reader.
        "isolation.level": "read_committed",
        # The end of a segment is news: a sealed segment read to its end hands over.
        "enable.partition.eof": True,
        # A fetch below the first offset Kafka holds means a truncation removed unread
        # events: report it (ReaderBehindHeadError), never jump silently.
        "auto.offset.reset": "error",
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        "logger": KAFKA_LOGGER,  # the application's process: its logging, not stderr
    },
)
"""A reader group's consumers (each reader's, and the group's committed offsets);
the group id, client id and the group's ``consumer_overrides`` come with it."""

ADMIN = Role(
    "admin",
    AdminClient,
    # Its failures come back as the requests' errors; reconnect lines would be noise.
    {"log_level": SILENT},
)
"""Topics, consumer groups and ACLs: the control plane's and the CLI's requests."""

# --- the controller -----------------------------------------------------------------------

CONTROLLER_LOOKUPS = Role(
    "controller lookups",
    AdminClient,
    {
        "log_level": SILENT,  # a failed lookup raises, or leaves its key out, as asked
        # A stream's new segments (a scale) are looked up within seconds, not the
        # default five minutes of cached metadata.
        "topic.metadata.refresh.interval.ms": 5_000,
    },
)
"""The controller job's offset lookups (last stable offsets of stream topics)."""

DUE_RECORDS_PRODUCER = Role(
    "due records",
    Producer,
    {
        # A due record is the input of the next micro-batch: send it at once.
        "linger.ms": 0,
        "log_level": SILENT,  # an unacknowledged one is counted, logged and sent again
    },
)
"""The controller's due records (``message.timeout.ms`` is the scheduler's)."""

SEGMENT_SIZES_CONSUMER = Role(
    "segment sizes",
    Consumer,
    {
        "group.id": "tidemark-segment-sizes",  # never commits: assign() only
        "enable.auto.commit": False,
        "enable.partition.eof": True,  # counting stops at a segment's end
        "auto.offset.reset": "earliest",  # a segment is counted from its first record
        "log_level": SILENT,
    },
)
"""The control plane's count of the bytes each segment holds."""

# --- the timeline -------------------------------------------------------------------------

_TIMELINE_DELIVERY = {
    # A message leaves the timeline once: retries neither duplicate nor reorder it, and
    # only an acknowledgement of every in-sync replica marks it sent.
    "enable.idempotence": True,
    "acks": "all",
    # A refusal comes back as a delivery report (logged by the relay), a broker out of
    # reach as KafkaUnavailableError: a stopped broker's reconnect lines add nothing.
    "log_level": SILENT,
}

TIMELINE_KAFKA_PRODUCER = Role(
    "timeline producer",
    Producer,
    # A few ms of batching: scheduling is not latency-bound to the millisecond.
    {**_TIMELINE_DELIVERY, "linger.ms": 5},
)
""":class:`~tidemark.pipelines.timeline.producer.KafkaTimelineProducer` (the
application's ``config`` comes after, and wins)."""

RELAY_PRODUCER = Role(
    "timeline relay",
    Producer,
    # Due messages go out close to their time; 2 ms still batches a due burst.
    {**_TIMELINE_DELIVERY, "linger.ms": 2},
)
"""The timeline relay's producer of due messages to their target topics."""

RELAY_SCAN = Role(
    "timeline relay's look at its target",
    Consumer,
    {
        "enable.auto.commit": False,  # assign() only, never commits
        # The relay's own records are not transactional; others' open transactions
        # must not hold the look back.
        "isolation.level": "read_uncommitted",
        "log_level": SILENT,
    },
)
"""What a relay's last batches already put on its target, read after a crash."""

BUFFER_PRODUCER = Role(
    "timeline buffer relay",
    Producer,
    # Transactional (its id comes with it): a batch and its offsets commit together.
    {**_TIMELINE_DELIVERY, "linger.ms": 5},
)
"""The buffered relay's transactional producer."""

BUFFER_GROUP = Role(
    "timeline buffer group",
    Consumer,
    # Only its group metadata and last commit are used (offsets are sent within the
    # producer's transactions); a broker out of reach is an error of the relay's calls.
    {"enable.auto.commit": False, "log_level": SILENT},
)
"""The consumer group whose metadata the buffered relay's transactions carry."""

_TIMELINE_INPUT = {
    # Offsets are committed once the records are stored in PostgreSQL, not before.
    "enable.auto.commit": False,
    # A new group stores what waits in its topic from the start.
    "auto.offset.reset": "earliest",
    # Only committed transactions' records are stored.
    "isolation.level": "read_committed",
    # A broker out of reach is KafkaUnavailableError (its metadata asked), not stderr lines.
    "log_level": SILENT,
}

INGEST_CONSUMER = Role("timeline ingest", Consumer, _TIMELINE_INPUT)
"""The timeline's ingest of a Kafka topic into PostgreSQL."""

BUFFER_CONSUMER = Role(
    "timeline buffer",
    Consumer,
    {
        **_TIMELINE_INPUT,
        "enable.auto.offset.store": False,  # stored once the rows are in PostgreSQL
        # Little read-ahead: the backlog waits in Kafka, not in this process.
        "queued.max.messages.kbytes": 4_096,
    },
)
"""The timeline buffer's consumer of its input topic."""

DEAD_LETTER_PRODUCER = Role(
    "timeline dead letters",
    Producer,
    # A refused record is parked for a person to read: every replica has it, and a
    # duplicate after a retry is harmless there.
    {"acks": "all", "log_level": SILENT},
)
"""The timeline ingest's producer of the records it refuses."""


__all__ = [
    "ADMIN",
    "BUFFER_CONSUMER",
    "BUFFER_GROUP",
    "BUFFER_PRODUCER",
    "CONTROLLER_LOOKUPS",
    "DEAD_LETTER_PRODUCER",
    "DROP_IN_PRODUCER",
    "DUE_RECORDS_PRODUCER",
    "EVENT_WRITER_PRODUCER",
    "FETCH_QUEUE_BACKOFF_MS",
    "INGEST_CONSUMER",
    "KAFKA_LOGGER",
    "MARKS_PRODUCER",
    "READER_CONSUMER",
    "RELAY_PRODUCER",
    "RELAY_SCAN",
    "SEGMENT_SIZES_CONSUMER",
    "SILENT",
    "TIMELINE_KAFKA_PRODUCER",
    "TRANSACTIONAL_PRODUCER",
    "FatalRaisingProducer",
    "Role",
    "client",
    "create",
    "raise_fatal_cause",
    "release",
    "writer_role",
]
