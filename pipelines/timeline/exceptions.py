"""Errors of the timeline: each names the rule that refused an operation.

Every refusal leaves the message unchanged (the condition is checked in the
same SQL statement that would have changed it). ``rule`` is a short stable
name for scripts; the message says what to do.
"""

from __future__ import annotations

from tidemark.errors import ConfigurationError, TidemarkError


class TimelineError(TidemarkError):
    """Root of the timeline's errors."""

    rule = "timeline"

    def __init__(self, message: str, timeline: str | None = None, message_id: str | None = None):
        super().__init__(f"[{self.rule}] {message}")
        self.timeline = timeline
        self.message_id = message_id


class UnknownTimelineError(TimelineError, LookupError):
    """No timeline of that name: create it first (``tidemark timeline create``)."""

    rule = "unknown-timeline"


class TimelineConflictError(TimelineError):
    """A timeline of that name exists with other settings; pick another name."""

    rule = "timeline-settings-differ"


class MessageNotFoundError(TimelineError, LookupError):
    """No such message (never created, or deleted)."""

    rule = "message-not-found"


class DuplicateIdError(TimelineError):
    """The id exists with a different body or producer group; ids are never reused."""

    rule = "duplicate-id"


class BodyTooLargeError(TimelineError, ValueError):
    """The body exceeds the timeline's ``max_body_bytes``; store a reference instead."""

    rule = "body-too-large"


class InvalidMessageError(TimelineError, ValueError):
    """An id, timestamp or argument is malformed; the message says which."""

    rule = "invalid-input"


class TimeInPastError(TimelineError, ValueError):
    """A lease, extension or release would end at or before the database's now."""

    rule = "time-in-past"


class StaleVersionError(TimelineError):
    """The message changed since the version you hold; read it again and retry."""

    rule = "stale-version"


class NotOwnerError(TimelineError, PermissionError):
    """Only the producer group that created a message may delete or move it."""

    rule = "not-owner"


class NotHolderError(TimelineError, PermissionError):
    """The message is not leased to this consumer (another holds it, or nobody)."""

    rule = "not-holder"


class LeaseTokenError(NotHolderError):
    """The lease token does not match the message's live lease (a newer lease replaced it,
    or it was never yours); only the holder of the current token may act on a lease."""

    rule = "lease-token"


class LeaseTooLongError(InvalidMessageError):
    """A lease or an extension would end more than 366 days after the database's now."""

    rule = "lease-too-long"


class LeaseExpiredError(TimelineError):
    """The lease ended (the database's now passed it); the message is available again."""

    rule = "lease-expired"


class NotAvailableError(TimelineError):
    """The message cannot be leased now: it is not due yet, or someone holds a live lease."""

    rule = "not-available"


class LeasedError(TimelineError):
    """The message is being processed under a live lease; its owner cannot change it now."""

    rule = "leased"


class NotWaitingError(TimelineError):
    """Only a waiting message (future, not leased) can be moved."""

    rule = "not-waiting"


class StreamTimeBackwardsError(TimelineError, ValueError):
    """A stream's recorded time only moves forward; the time given is behind it."""

    rule = "stream-time-backwards"


class StreamTimeAheadError(TimelineError, ValueError):
    """A stream time ahead of the database's clock by more than the allowed lead is refused:
    watermarks are times of events already written, not of the future."""

    rule = "stream-time-ahead"


class StoreUnavailableError(TimelineError):
    """The database could not be reached or dropped the connection; retry later."""

    rule = "store-unavailable"


class TimelineDatabaseError(TimelineError):
    """The database refused a statement for a reason no other rule names (see the message)."""

    rule = "database-error"


class ConcurrentChangeError(TimelineError):
    """The message changed between the refused statement and its explanation; retry."""

    rule = "concurrent-change"


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
    "TimelineConflictError",
    "TimelineDatabaseError",
    "TimelineError",
    "UnknownTimelineError",
]
