"""Errors of the timeline: each names the rule that refused an operation.

Every refusal leaves the message unchanged (the condition is checked in the
same SQL statement that would have changed it). ``rule`` is a short stable
name for scripts; the message says what to do.
"""

from __future__ import annotations

from typing import Any, ClassVar

from tidemark.errors import ConfigurationError, ServiceUnavailableError, TidemarkError


class TimelineError(TidemarkError):
    """Root of the timeline's errors."""

    rule: ClassVar[str] = "timeline"

    def __init_subclass__(cls, rule: str, **kwargs: Any) -> None:
        """Each subclass names its rule in its header: ``class X(TimelineError, rule="x")``."""
        super().__init_subclass__(**kwargs)
        cls.rule = rule

    def __init__(self, message: str, timeline: str | None = None, message_id: str | None = None):
        super().__init__(f"[{self.rule}] {message}")
        self.timeline = timeline
        self.message_id = message_id


class UnknownTimelineError(TimelineError, LookupError, rule="unknown-timeline"):
    """No timeline of that name: create it first (``tidemark timeline create``)."""


class TimelineConflictError(TimelineError, rule="timeline-settings-differ"):
    """A timeline of that name exists with other settings; pick another name."""


class MessageNotFoundError(TimelineError, LookupError, rule="message-not-found"):
    """No such message (never created, or deleted)."""


class DuplicateIdError(TimelineError, rule="duplicate-id"):
    """The id exists with a different body or producer group; ids are never reused."""


class BodyTooLargeError(TimelineError, ValueError, rule="body-too-large"):
    """The body exceeds the timeline's ``max_body_bytes``; store a reference instead."""


class InvalidMessageError(TimelineError, ValueError, rule="invalid-input"):
    """An id, timestamp or argument is malformed; the message says which."""


class TimeInPastError(TimelineError, ValueError, rule="time-in-past"):
    """A lease, extension or release would end at or before the database's now."""


class StaleVersionError(TimelineError, rule="stale-version"):
    """The message changed since the version you hold; read it again and retry."""


class NotOwnerError(TimelineError, PermissionError, rule="not-owner"):
    """Only the producer group that created a message may delete or move it."""


class NotHolderError(TimelineError, PermissionError, rule="not-holder"):
    """The message is not leased to this consumer (another holds it, or nobody)."""


class LeaseTokenError(NotHolderError, rule="lease-token"):
    """The lease token does not match the message's live lease (a newer lease replaced it,
    or it was never yours); only the holder of the current token may act on a lease."""


class LeaseTooLongError(InvalidMessageError, rule="lease-too-long"):
    """A lease or an extension would end more than 366 days after the database's now."""


class LeaseExpiredError(TimelineError, rule="lease-expired"):
    """The lease ended (the database's now passed it); the message is available again."""


class NotAvailableError(TimelineError, rule="not-available"):
    """The message cannot be leased now: it is not due yet, or someone holds a live lease."""


class LeasedError(TimelineError, rule="leased"):
    """The message is being processed under a live lease; its owner cannot change it now."""


class NotWaitingError(TimelineError, rule="not-waiting"):
    """Only a waiting message (future, not leased) can be moved."""


class StreamTimeBackwardsError(TimelineError, ValueError, rule="stream-time-backwards"):
    """A stream's recorded time only moves forward; the time given is behind it."""


class StreamTimeAheadError(TimelineError, ValueError, rule="stream-time-ahead"):
    """A stream time ahead of the database's clock by more than the allowed lead is refused:
    watermarks are times of events already written, not of the future."""


class StreamTimeNotPermittedError(TimelineError, PermissionError, rule="stream-time-not-permitted"):
    """The database role may not record stream times: only the stream clock's roles (the
    relay and the consumers, :func:`~tidemark.pipelines.timeline.grants.grant_timeline_roles`)
    may move a stream's time."""


class StoreUnavailableError(TimelineError, ServiceUnavailableError, rule="store-unavailable"):
    """The database could not be reached or dropped the connection; retry later.
    ``address``: ``host:port/dbname`` of the DSN (never its password)."""

    def __init__(self, message: str, *, address: str | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.describe("PostgreSQL", address, reason or message)


class TimelineDatabaseError(TimelineError, rule="database-error"):
    """The database refused a statement for a reason no other rule names (see the message)."""


class TimelineClosedError(TimelineError, rule="closed"):
    """The client was closed: make a new one."""


class RelayFencedError(TimelineError, rule="relay-fenced"):
    """Another relay of the timeline started since this one (one relay per timeline):
    this one stops; run one at a time."""


class RelayStateError(TimelineError, rule="relay-state"):
    """The relay's state in the database and its last commit in Kafka disagree (a
    database restored from a backup, a batch purged): the message says what to do."""


class ConcurrentChangeError(TimelineError, rule="concurrent-change"):
    """The message changed between the refused statement and its explanation; retry."""


__all__ = [
    "BodyTooLargeError",
    "ConcurrentChangeError",
    "ConfigurationError",
    "DuplicateIdError",
    "InvalidMessageError",
    "LeaseExpiredError",
    "LeaseTokenError",
    "LeaseTooLongError",
    "LeasedError",
    "MessageNotFoundError",
    "NotAvailableError",
    "NotHolderError",
    "NotOwnerError",
    "NotWaitingError",
    "StaleVersionError",
    "StoreUnavailableError",
    "StreamTimeAheadError",
    "StreamTimeBackwardsError",
    "TimeInPastError",
    "TimelineClosedError",
    "TimelineConflictError",
    "TimelineDatabaseError",
    "TimelineError",
    "UnknownTimelineError",
]
