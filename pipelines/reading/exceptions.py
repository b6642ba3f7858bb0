"""Errors of readers, reader groups and timestamp seek.

Each names the offending input and says what to do. A refused call changes
nothing: a reader group's committed position is only ever moved by a call
that has checked everything first (group, stream, timestamp, cut).

The stream's own refusal comes from the control plane and is re-exported:
:class:`UnknownStreamError` (no such stream, or a malformed name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tidemark.controller.delta.exceptions import DeltaUnavailableError
from tidemark.controller.exceptions import (
    InvalidDurationError,
    InvalidTimestampError,
    UnknownStreamError,
)
from tidemark.errors import ConfigurationError, TidemarkError


class ReaderError(TidemarkError):
    """Root of the readers' errors."""


class ReaderConfigError(ReaderError, ConfigurationError):
    """A reader setting is invalid; the message names it and the valid choices."""


class UnknownReaderGroupError(ReaderError, LookupError):
    """No reader group of that name exists; create it with ``ReaderGroup.create``."""

    def __init__(self, group: str) -> None:
        self.group = group
        super().__init__(f"unknown reader group {group!r}")


class ReaderGroupExistsError(ReaderError):
    """A reader group of that name exists already (for another stream or start)."""

    def __init__(self, group: str, stream: str) -> None:
        self.group = group
        self.stream = stream
        super().__init__(f"reader group {group!r} exists already (on stream {stream!r})")


class StreamDeletedError(ReaderError, UnknownStreamError):
    """The reader group's stream has been deleted (or is being deleted).

    Its data is gone; delete the group, or create a new one on another stream.
    """

    def __init__(self, stream: str, group: str | None = None) -> None:
        self.group = group
        UnknownStreamError.__init__(
            self,
            stream,
            "the stream was deleted" + (f" (reader group {group!r} reads it)" if group else ""),
        )


class ReaderGroupActiveError(ReaderError):
    """The group has online readers; stop them before moving its position (seek)."""

    def __init__(self, group: str, readers: list[str]) -> None:
        self.group = group
        self.readers = readers
        super().__init__(
            f"reader group {group!r} has online readers {readers}; close them before seeking"
        )


class DuplicateReaderError(ReaderError):
    """A reader of that name is already online in the group; pick another name."""

    def __init__(self, group: str, reader: str) -> None:
        self.group = group
        self.reader = reader
        super().__init__(f"reader {reader!r} is already online in group {group!r}")


class ReaderClosedError(ReaderError):
    """The reader (or group) is closed; create a new one."""


class ReaderBehindHeadError(ReaderError):
    """The stream was truncated (retention, or ``tidemark stream truncate``) past what
    the group had read: the events in between are gone, and a reader never skips
    them silently. Move the group on, knowingly: ``group.seek(timestamp)`` or
    ``group.seek(cut=...)`` with no reader online (``tidemark seek GROUP
    --timestamp MS``); a cut behind the head is moved up to it."""

    def __init__(self, group: str, stream: str, lost: dict[int, tuple[int, int]]) -> None:
        self.group = group
        self.stream = stream
        self.lost = lost
        where = ", ".join(
            f"segment {seg} at offset {have} (held from {head})"
            for seg, (have, head) in sorted(lost.items())
        )
        super().__init__(
            f"reader group {group!r} is behind the head of stream {stream!r}, which was "
            f"truncated past its position: {where}; the events in between are gone. "
            "Close the group's readers and move it with seek (a time, or the head) "
            "to go on reading"
        )


class WatermarksUnavailableError(ReaderError, DeltaUnavailableError):
    """The watermark tables cannot be read (missing delta root, unreadable table). The
    Delta adapter raises its :class:`DeltaUnavailableError`; catch that one."""


class StreamNotCompleteError(ReaderError):
    """No watermark of the stream has reached the time yet: the data up to it is not
    complete. Ask again once the controller has emitted a watermark at or after it."""

    def __init__(self, stream: str, time_ms: int) -> None:
        self.stream = stream
        self.time_ms = time_ms
        super().__init__(
            f"stream {stream!r}: no watermark has reached time {time_ms} yet; "
            "the data up to it is not complete"
        )


class InvalidTimeRangeError(ReaderError, ValueError):
    """A time range whose end is not after its start."""

    def __init__(self, start_ms: int, end_ms: int) -> None:
        super().__init__(f"the end time {end_ms} must be after the start time {start_ms}")


# --- waiting for stream time (tidemark.pipelines.reading.stream_time) ----------------------------


class StreamTimeTimeoutError(ReaderError, TimeoutError):
    """No watermark of the stream reached the time before the timeout.

    ``last`` is the latest watermark seen (``None``: none yet); ``holding``
    describes the writers that hold the stream back (laggards, stale marks),
    as far as the watermark source knows them. Wait again, or look at those
    writers: a stopped writer is dropped after the controller's writer timeout.
    """

    def __init__(self, stream: str, time_ms: int, last: Any, holding: Sequence[str]) -> None:
        self.stream = stream
        self.time_ms = time_ms
        self.last = last
        self.holding = list(holding)
        at = "no watermark yet" if last is None else f"the watermark is at {last.time}"
        who = (
            "held back by " + "; ".join(self.holding)
            if self.holding
            else "no writer is known to hold it back"
        )
        super().__init__(f"stream {stream!r} has not reached time {time_ms}: {at}, {who}")


class StreamsTimeTimeoutError(StreamTimeTimeoutError):
    """Not every one of several streams reached the time before the timeout.

    ``behind`` maps each stream still short of the time to its latest watermark
    (``None``: none yet); ``holding`` lists the writers holding them back, each
    prefixed with its stream (``"shop/orders: w1 (lagging ...)"``); ``stream``
    is the first stream behind. Wait again, or look at those writers.
    """

    def __init__(
        self, time_ms: int, behind: Mapping[str, Any], holding: Mapping[str, Sequence[str]]
    ) -> None:
        self.streams = list(behind)
        self.behind = dict(behind)
        self.stream = self.streams[0]
        self.time_ms = time_ms
        self.last = behind[self.stream]
        self.holding = [f"{s}: {who}" for s in self.streams for who in holding.get(s, ())]
        parts = []
        for s, last in behind.items():
            at = "no watermark yet" if last is None else f"at {last.time}"
            who = "; ".join(holding.get(s, ())) or "no writer is known to hold it back"
            parts.append(f"{s!r} ({at}, held back by: {who})")
        ReaderError.__init__(self, f"streams not at time {time_ms}: " + ", ".join(parts))


class WaitCancelledError(ReaderError):
    """A wait for stream time was cancelled before the time was reached."""


class TableCompletenessError(ReaderError):
    """Root of the errors about a tracked table's completeness."""


class TableNotTrackedError(TableCompletenessError, LookupError):
    """The table is not tracked: register it with ``tidemark table track TABLE
    --checkpoint DIR`` (the checkpoint of the streaming query that writes it)."""

    def __init__(self, table: str, detail: str = "") -> None:
        self.table = table
        super().__init__(
            f"table {table} is not tracked{detail}: run tidemark table track {table} "
            "--checkpoint <the writing query's checkpoint>"
        )


class TableCompletenessUnknownError(TableCompletenessError):
    """What the table is complete through cannot be told now (``reason`` says why: the
    writing query's checkpoint is gone, say); what earlier versions were complete
    through still holds. Fix the cause and track the table again."""

    def __init__(self, table: str, reason: str) -> None:
        self.table = table
        self.reason = reason
        super().__init__(f"table {table}: completeness unknown: {reason}")


class TableNotCompleteError(TableCompletenessError):
    """No version of the table is complete through the time yet; ``through`` is the
    latest time it is complete through (``None``: none yet). Ask again later, or wait
    (``tidemark wait --table``)."""

    def __init__(self, table: str, time_ms: int, through: int | None) -> None:
        self.table = table
        self.time_ms = time_ms
        self.through = through
        at = "no time yet" if through is None else f"complete through {through}"
        super().__init__(f"table {table} is not complete through {time_ms} ({at})")


class TableTimeTimeoutError(TableNotCompleteError, TimeoutError):
    """The timeout passed before a version of the table was complete through the time."""


class CheckpointError(ReaderError):
    """A reader-group checkpoint could not be taken or found."""


class UnknownCheckpointError(CheckpointError, LookupError):
    """The group has no checkpoint of that name; ``tidemark group checkpoints`` lists them."""

    def __init__(self, group: str, name: str) -> None:
        self.group, self.name = group, name
        super().__init__(f"reader group {group!r} has no checkpoint {name!r}")


class CheckpointExistsError(CheckpointError):
    """A checkpoint of that name exists already (or is being taken); pick another name."""

    def __init__(self, group: str, name: str) -> None:
        self.group, self.name = group, name
        super().__init__(f"reader group {group!r} has a checkpoint {name!r} already")


class CheckpointInProgressError(CheckpointError):
    """Another checkpoint of the group is being taken; wait for it, then try again."""

    def __init__(self, group: str, pending: str | None) -> None:
        self.group, self.pending = group, pending
        super().__init__(f"reader group {group!r} is taking checkpoint {pending!r}; try later")


class CheckpointTimeoutError(CheckpointError, TimeoutError):
    """Online readers did not acknowledge the checkpoint in time (a reader must be
    calling ``read_next``); nothing was recorded and the readers carry on."""

    def __init__(self, group: str, name: str, missing: list[str]) -> None:
        self.group, self.name, self.missing = group, name, missing
        super().__init__(
            f"checkpoint {name!r} of reader group {group!r}: readers {missing} did not "
            "acknowledge it in time (are they calling read_next?); nothing was recorded"
        )


__all__ = [
    "CheckpointError",
    "CheckpointExistsError",
    "CheckpointInProgressError",
    "CheckpointTimeoutError",
    "DuplicateReaderError",
    "InvalidDurationError",
    "InvalidTimestampError",
    "ReaderBehindHeadError",
    "ReaderClosedError",
    "ReaderConfigError",
    "ReaderError",
    "ReaderGroupActiveError",
    "ReaderGroupExistsError",
    "StreamDeletedError",
    "StreamTimeTimeoutError",
    "StreamsTimeTimeoutError",
    "TableCompletenessError",
    "TableCompletenessUnknownError",
    "TableNotCompleteError",
    "TableNotTrackedError",
    "TableTimeTimeoutError",
    "UnknownCheckpointError",
    "UnknownReaderGroupError",
    "UnknownStreamError",
    "WaitCancelledError",
    "WatermarksUnavailableError",
]
