"""S2's rules for record timestamps, as pure functions over plain values.

    >>> clock = SegmentClock(TimestampPolicy(uncapped=True))
    >>> [clock.stamp(0, t, arrival_ms=100).timestamp for t in (42, 44, 42, 50, 50, 48, 55)]
    [42, 44, 44, 50, 50, 50, 55]

For one record, in this order:

1. **Mode** (the stream's ``timestamping``): ``client-prefer`` takes the
   writer's timestamp, or the arrival time when there is none;
   ``client-require`` refuses a record without one; ``arrival`` ignores it
   and takes the arrival time (the topic then uses the broker's append time).
2. **Cap** (unless the stream is ``uncapped``): a timestamp later than the
   arrival time is lowered to the arrival time.
3. **Monotonic**: within one writer and one segment, a timestamp below the
   previous one is raised to it. A successor segment starts from the highest
   timestamp this writer stored in its predecessors, so along one routing key
   a writer's timestamps never go down, across scaling too.

A stream with ``refuse_adjustments`` (S2's opt-out) refuses, with
:class:`TimestampAdjustmentError`, a record whose timestamp steps 2 or 3
would change, instead of changing it; nothing of that write is sent.

"Arrival time" is the writer's clock when ``write`` (or ``produce``) is called
(milliseconds). A stamp is *adjusted* when the writer gave a timestamp and the
stored one differs from it. Nothing here is monotonic across writers: see the
README. Every tidemark producer stamps through here: ``EventWriter``,
``TransactionalWriter``, ``TidemarkProducer`` and the Spark writer's tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidemark.controller.config import TimestampingMode
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import Epoch
from tidemark.controller.navigation import predecessors
from tidemark.controller.timestamps import MAX_TIMESTAMP, check_timestamp
from tidemark.pipelines.writing.exceptions import MissingTimestampError, TimestampAdjustmentError


@dataclass(frozen=True)
class TimestampPolicy:
    """A stream's timestamping mode and whether client timestamps are capped; ``stream``
    names the stream in the errors of a refused record."""

    mode: TimestampingMode = TimestampingMode.CLIENT_PREFER
    uncapped: bool = False
    refuse_adjustments: bool = False
    stream: str | None = None

    @classmethod
    def of(cls, metadata: StreamMetadata) -> TimestampPolicy:
        """The policy ``metadata``'s configuration sets for its stream."""
        cfg = metadata.config
        return cls(cfg.timestamping, cfg.uncapped, cfg.refuse_adjustments, metadata.name)

    @property
    def uses_broker_time(self) -> bool:
        return self.mode is TimestampingMode.ARRIVAL


@dataclass(frozen=True)
class Stamp:
    """The timestamp to store, and whether it differs from the writer's."""

    timestamp: int
    adjusted: bool


def choose(policy: TimestampPolicy, client_ts: int | None, arrival_ms: int) -> int:
    """Steps 1 and 2: mode, then cap. ``client_ts`` must be checked already."""
    if policy.mode is TimestampingMode.ARRIVAL:
        return arrival_ms
    if client_ts is None:
        if policy.mode is TimestampingMode.CLIENT_REQUIRE:
            raise MissingTimestampError(policy.stream)
        return arrival_ms
    if not policy.uncapped and client_ts > arrival_ms:
        return arrival_ms
    return client_ts


def stamp(
    policy: TimestampPolicy, client_ts: int | None, arrival_ms: int, floor: int | None
) -> Stamp:
    """All three steps for one record; ``floor`` is the segment's previous timestamp."""
    ts = choose(policy, client_ts, arrival_ms)
    if floor is not None and ts < floor:
        ts = floor
    return Stamp(ts, client_ts is not None and ts != client_ts)


def refuse_adjusted(
    policy: TimestampPolicy, given: Iterable[int | None], stored: Iterable[int]
) -> None:
    """Under ``refuse_adjustments``: :class:`TimestampAdjustmentError` for the first record
    whose stored timestamp would differ from the one given."""
    if not policy.refuse_adjustments:
        return
    for i, (client_ts, ts) in enumerate(zip(given, stored, strict=True)):
        if client_ts is not None and ts != client_ts:
            raise TimestampAdjustmentError(client_ts, ts, i, policy.stream)


def monotonic(timestamps: Iterable[int], floor: int | None = None) -> list[int]:
    """Step 3 alone over a sequence: each value raised to the running maximum."""
    out = []
    for ts in timestamps:
        if floor is None or ts > floor:
            floor = ts
        out.append(floor)
    return out


class SegmentClock:
    """One writer's timestamp floors, per segment; applies :func:`stamp` and remembers."""

    def __init__(self, policy: TimestampPolicy) -> None:
        self.arrival_stamps = False
        """Whether a record given no timestamp takes its arrival time (every mode but
        ``client-require``): the writers' hot path then stamps inline, without :meth:`peek`."""
        self.policy = policy
        self._floors: dict[int, int] = {}
        self.live_floors = self._floors
        """The floors themselves (not a copy): a writer's hot path stores a stamp it just
        sent, as returned by :meth:`peek` (never below the floor), in it directly."""

    @property
    def policy(self) -> TimestampPolicy:
        return self._policy

    @policy.setter
    def policy(self, policy: TimestampPolicy) -> None:
        self._policy = policy
        self.arrival_stamps = policy.mode is not TimestampingMode.CLIENT_REQUIRE

    def floor(self, segment: int) -> int | None:
        return self._floors.get(segment)

    def floors(self) -> Mapping[int, int]:
        return dict(self._floors)

    def peek(
        self, segment: int, client_ts: int | None, arrival_ms: int, refuse: bool = True
    ) -> int:
        """The timestamp a record would get now, without remembering it.

        Under ``refuse_adjustments`` (and ``refuse``) an adjusted one raises
        :class:`TimestampAdjustmentError` instead.

        The writers' hot path: :func:`stamp`'s rules, inlined.
        """
        if client_ts is None or self.policy.mode is TimestampingMode.ARRIVAL:
            if client_ts is None and self.policy.mode is TimestampingMode.CLIENT_REQUIRE:
                choose(self.policy, client_ts, arrival_ms)  # raises
            ts = arrival_ms
        elif client_ts > arrival_ms and not self.policy.uncapped:
            ts = arrival_ms
        else:
            ts = client_ts
        floor = self._floors.get(segment)
        if floor is not None and ts < floor:
            ts = floor
        if ts != client_ts and client_ts is not None and refuse and self.policy.refuse_adjustments:
            raise TimestampAdjustmentError(client_ts, ts, stream=self.policy.stream)
        return ts

    def advance(self, segment: int, timestamp: int) -> None:
        """Remember that ``timestamp`` was sent on ``segment``."""
        floor = self._floors.get(segment)
        if floor is None or timestamp > floor:
            self._floors[segment] = timestamp

    def stamp(self, segment: int, client_ts: int | None, arrival_ms: int) -> Stamp:
        """:func:`stamp` with the segment's floor, remembered."""
        result = stamp(self.policy, client_ts, arrival_ms, self._floors.get(segment))
        self._floors[segment] = result.timestamp
        return result

    def highest(self) -> int | None:
        """The highest timestamp sent on any segment (a mark's ``max_event_time``), or None."""
        return max(self._floors.values()) if self._floors else None

    def inherit(self, successor: int, predecessors: Iterable[int]) -> None:
        """Start ``successor`` from the highest floor among ``predecessors``."""
        known = [self._floors[p] for p in predecessors if p in self._floors]
        if known:
            self._floors[successor] = max([*known, self._floors.get(successor, 0)])

    def follow(self, epochs: Sequence[Epoch], applied: int) -> None:
        """A scale: every segment new in an epoch after ``applied`` starts from the highest
        floor of its predecessors, so a key's timestamps never go down across it."""
        for epoch in epochs[applied + 1 :]:
            for seg in epoch.segments:
                if seg.epoch == epoch.number:
                    self.inherit(seg.id, (p.id for p in predecessors(epochs, seg.id)))


__all__ = [
    "MAX_TIMESTAMP",
    "SegmentClock",
    "Stamp",
    "TimestampPolicy",
    "TimestampingMode",
    "check_timestamp",
    "choose",
    "monotonic",
    "refuse_adjusted",
    "stamp",
]
