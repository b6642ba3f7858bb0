"""Errors of the writers: each names the problem and what the caller can do.

A refused call changes nothing: what the writer had written and what was
acknowledged before it stays written, and the writer stays usable (except
after a :class:`DeliveryError`, whose records are not in the stream; the
caller decides whether to write them again).

The stream's own refusals come from the control plane and are re-exported
here: :class:`UnknownStreamError` and :class:`StreamSealedError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.controller.exceptions import (
    InvalidTimestampError,
    KafkaUnavailableError,
    MarksTopicError,
    StreamSealedError,
    UnknownStreamError,
)
from tidemark.errors import ConfigurationError, TidemarkError


class WriterError(TidemarkError):
    """Root of the writers' errors."""


class WriterConfigError(WriterError, ConfigurationError):
    """A writer setting is invalid; the message names it and the valid choices."""


class MissingWriterIdError(WriterConfigError):
    """Noting time needs a writer id: create the writer with ``writer_id="..."``.

    The controller keeps one noted time per writer id; without one it cannot
    tell this writer's marks from another's.
    """


class WriterClosedError(WriterError):
    """The writer (or transaction) is closed; create a new one."""


class MissingTimestampError(InvalidTimestampError, WriterError):
    """The stream's timestamping is ``client-require`` and a record came without one.
    Nothing of the write was sent; write it again with a timestamp."""

    def __init__(self, stream: str | None = None, which: str = "this one") -> None:
        self.stream = stream
        named = f"stream {stream}" if stream else "the stream"
        super().__init__(
            f"{named} has timestamping client-require: every record needs a timestamp, "
            f"and {which} has none; nothing was sent"
        )


class TimestampAdjustmentError(InvalidTimestampError, WriterError):
    """The stream refuses adjusted timestamps (``refuse_adjustments``) and this record's
    would be adjusted: below the segment's previous timestamp, or (capped streams) after
    the arrival time. Nothing of the write was sent; write it with a timestamp at or
    above ``stored``, or turn the setting off to have it adjusted."""

    def __init__(
        self, given: int, stored: int, index: int | None = None, stream: str | None = None
    ) -> None:
        self.given, self.stored, self.index, self.stream = given, stored, index, stream
        where = "" if index is None else f"timestamps[{index}]: "
        why = "the segment's previous timestamp" if stored > given else "the arrival time (cap)"
        which = f"stream {stream}" if stream else "the stream"
        super().__init__(
            f"{where}timestamp {given} would be stored as {stored} ({why}); {which} "
            "refuses adjusted timestamps (refuse_adjustments), so nothing was written"
        )


class TimeWentBackwardsError(WriterError, ValueError):
    """``note_time`` got a time below the writer's previous noted time.

    The controller would refuse the mark (Pravega: a smaller time is stale);
    an equal time is accepted.
    """


class AutomaticTimeError(WriterError):
    """``note_time`` on a writer that notes time automatically (``automatically_note_time``)."""


class SerializationError(WriterError, TypeError):
    """An event is not bytes and the writer has no serializer (or the serializer failed)."""


class InvalidHeaderError(WriterError, TypeError):
    """A Kafka header is not a ``(str name, bytes value)`` pair; the message names it.

    Nothing of the write was sent. A text value goes as ``value.encode()``.
    """


@dataclass(frozen=True)
class FailedRecord:
    """One record Kafka did not store: where it was going, its key, and Kafka's error."""

    topic: str
    partition: int
    key: bytes | None
    error: str


class DeliveryError(WriterError):
    """Kafka did not store some records (their ``failed`` list says which and why).

    Records acknowledged earlier are stored. A mark noted while these records
    were in flight is not published (its position would hide the gap); note
    the time again after writing them again.
    """

    def __init__(self, failed: Sequence[FailedRecord]) -> None:
        self.failed = tuple(failed)
        first = self.failed[0] if self.failed else None
        detail = f"; first: {first.topic}[{first.partition}]: {first.error}" if first else ""
        super().__init__(f"{len(self.failed)} record(s) were not delivered{detail}")

    def outage(self) -> KafkaUnavailableError | None:
        """Kafka not answering, when every record timed out in the producer's queue (no
        broker took them); ``None`` when Kafka answered (and refused some)."""
        if not self.failed or not all("_MSG_TIMED_OUT" in f.error for f in self.failed):
            return None
        return KafkaUnavailableError(None, f"gave no answer ({str(self).splitlines()[0]})")


def failed_record(msg: Any, err: Any = None) -> FailedRecord:
    """The :class:`FailedRecord` of a delivery report (``confluent_kafka.Message``);
    ``err``: the report's error when given apart from the message."""
    return FailedRecord(
        msg.topic() or "", msg.partition() or 0, msg.key(), str(msg.error() if err is None else err)
    )


def raise_failures(failures: list[FailedRecord]) -> None:
    """Raise :class:`DeliveryError` for ``failures`` (emptied in place: a writer's list
    is shared with its mark publisher) when there are any."""
    if failures:
        failed = failures[:]
        failures.clear()
        raise DeliveryError(failed)


class SharedPartitionError(WriterError):
    """``positions_from="end_offsets"`` found another producer's records in a partition.

    End offsets are this producer's exact position only while it is the
    partition's sole writer; with others they may cover their later records,
    which breaks the cut's ``upper_time`` promise. The mark is not published.
    Use ``positions_from="reports"`` (the default) for shared partitions.
    """

    def __init__(self, writer_id: str, topic: str, partitions: Sequence[int]) -> None:
        self.topic = topic
        self.partitions = tuple(partitions)
        super().__init__(
            f"writer {writer_id}: partition(s) {list(self.partitions)} of {topic} have another "
            f"producer's records since the last note (or records this producer stored twice "
            f"or was told had failed), so end offsets are not this producer's position; the "
            f"time was not noted. positions_from='end_offsets' needs to be the only producer "
            f"of its partitions (with idempotence); use positions_from='reports' (the default)"
        )


class WriterTimeoutError(WriterError, TimeoutError):
    """Kafka did not acknowledge in time (flush, close, write_batch, a scale)."""


class UnacknowledgedError(WriterTimeoutError, KafkaUnavailableError):
    """Records (or marks) still in flight when the writer's time ran out: no broker
    acknowledged them, so Kafka is named as not answering."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.describe("Kafka", None, f"gave no answer ({message})")


class InvalidRoutingKeyError(WriterError, TypeError):
    """A routing key is not str, bytes or None."""


class TransactionError(WriterError):
    """A Kafka transaction failed; the transaction is aborted, nothing of it is visible."""


class TransactionStateError(TransactionError):
    """The call does not fit the transaction's state (write after commit, two open at once)."""


class TransactionTimedOutError(TransactionError):
    """The transaction stayed open longer than its timeout, so Kafka aborted it.

    Nothing written in it is visible. Begin a new transaction and write again,
    or raise ``WriterConfig.transaction_timeout_ms``.
    """


__all__ = [
    "AutomaticTimeError",
    "DeliveryError",
    "FailedRecord",
    "InvalidHeaderError",
    "InvalidRoutingKeyError",
    "InvalidTimestampError",
    "MarksTopicError",
    "MissingTimestampError",
    "MissingWriterIdError",
    "SerializationError",
    "StreamSealedError",
    "TimeWentBackwardsError",
    "TimestampAdjustmentError",
    "TransactionError",
    "TransactionStateError",
    "TransactionTimedOutError",
    "UnacknowledgedError",
    "UnknownStreamError",
    "WriterClosedError",
    "WriterConfigError",
    "WriterError",
    "WriterTimeoutError",
    "failed_record",
    "raise_failures",
]
