"""The timeline store: scheduled messages in SQL, every condition checked atomically.

    with TimelineStore(dsn) as store:
        store.migrate()
        store.create_timeline(TimelineConfig("reminders"))
        store.create("reminders", b"hi", timestamp_ms=t, producer_group="app")
        for lease in store.lease("reminders", "worker-1", lease_ms=30_000):
            ...
            store.delete("reminders", lease.message.id, consumer="worker-1", token=lease.token)

Each operation is **one** SQL statement whose ``WHERE`` holds the whole
condition, evaluated with the database's ``now()``; when it changes nothing,
a read of the message explains why (:func:`model.explain_refusal`) and the
typed error names the rule. The SQL is what PostgreSQL and CockroachDB both
run (``FOR UPDATE SKIP LOCKED``, ``ON CONFLICT``, ``UPDATE ... FROM``,
partial indexes); serialization failures (SQLSTATE 40001, CockroachDB's
retry error) are retried. ``LISTEN/NOTIFY`` is used only to wake consumers
early on PostgreSQL; CockroachDB has none, and nothing depends on it.

Leases are capabilities, as SQS receipt handles are: each lease carries an
unguessable token (:attr:`model.Lease.token`) of which the table keeps only
the hash; extend, release and delete by the holder must present it, checked
in the same statement, and a new lease of the message replaces it. A
consumer's name alone no longer acts on its leases. An extension reaches at
most :data:`model.MAX_LEASE_MS` past the database's now, as a lease does.
While a lease is live the message is the holder's, as an SQS message in
flight is its receipt handle's: the producer group's delete is refused with
:class:`~exceptions.LeasedError` naming the holder and the lease's end (its
move with ``NotWaitingError``); once the lease is given back or has ended the
message is the group's again, and the old token opens nothing.

Stream times (:meth:`TimelineStore.advance_stream_time`) only move forward,
and never further than :data:`model.MAX_STREAM_TIME_LEAD_MS` past the
database's clock: a watermark is the time of events already written, so a
time beyond that is a bug or an attack that would make every event-time
message due for good. Either refusal is an error, not a silent no-op.
Recording them is the consumers' job (from their ``stream_clock``, fed by the
controller's watermarks), and the database enforces it:
:func:`~.grants.grant_timeline_roles` lets only the clock's roles (relay,
consumers) write ``timeline_stream_times``; any other role's
:meth:`~TimelineStore.advance_stream_time` is
:class:`~exceptions.StreamTimeNotPermittedError`.

Every failure reaches the caller as a :class:`~exceptions.TimelineError`
naming its rule: inputs PostgreSQL text cannot hold (NUL, lone surrogates)
are refused before the database is asked, and any database error left is
mapped (:meth:`TimelineStore._run`).

A store holds one connection and serialises its calls; give each thread or
consumer its own store.

The store is made of one part per protocol, each in its module over one shared
session (:mod:`.store_session`: the connection, its retries, the guarded update) and
the SQL they share (:mod:`.store_sql`):

- :mod:`.store_messages`: the producer's create, get, count, move and delete;
- :mod:`.store_leases`: the consumers' leases, their tokens, and membership;
- :mod:`.store_housekeeping`: migrations, stream times and purge.

:class:`TimelineStore` is all three, over one connection.
"""

from __future__ import annotations

from tidemark.pipelines.timeline.exceptions import InvalidMessageError
from tidemark.pipelines.timeline.model import Message
from tidemark.pipelines.timeline.store_housekeeping import Housekeeping
from tidemark.pipelines.timeline.store_leases import Leases
from tidemark.pipelines.timeline.store_messages import Created, Messages, NewMessage
from tidemark.pipelines.timeline.store_session import (
    StoreSession,
    database_error,
    postgres_address,
    unavailable,
)
from tidemark.pipelines.timeline.store_sql import LEASED_TS_BOUND, NOTIFY_CHANNEL
from tidemark.pipelines.timeline.store_sql import _lease as _lease  # (re-exported)
from tidemark.pipelines.timeline.store_sql import _message as _message  # (re-exported)


class TimelineStore(Messages, Leases, Housekeeping):
    """The timeline store: every protocol's statements over one connection."""

    def delete(
        self,
        timeline: str,
        message_id: str,
        *,
        producer_group: str | None = None,
        consumer: str | None = None,
        token: str | None = None,
        version: int | None = None,
    ) -> Message:
        """Mark deleted, by its owner (refused while a lease is live: ``LeasedError``) or
        by the holder of a live lease.

        Give exactly one of ``producer_group`` and ``consumer``; the holder also
        gives the lease's ``token``. The row is removed later by :meth:`purge`.
        """
        if (producer_group is None) == (consumer is None):
            raise InvalidMessageError(
                "delete needs exactly one of producer_group (owner) or consumer (holder)",
                timeline,
                message_id,
            )
        if consumer is not None:
            if token is None:
                raise InvalidMessageError(
                    "delete by the lease holder needs the lease's token", timeline, message_id
                )
            return self._delete_by_holder(timeline, message_id, consumer, token, version)
        assert producer_group is not None
        return self._delete_by_owner(timeline, message_id, producer_group, version)


__all__ = [
    "LEASED_TS_BOUND",
    "NOTIFY_CHANNEL",
    "Created",
    "NewMessage",
    "StoreSession",
    "TimelineStore",
    "database_error",
    "postgres_address",
    "unavailable",
]
