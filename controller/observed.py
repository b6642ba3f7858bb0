"""Observed time: a stream's time as the brokers' offsets show it, for producers that note none.

    clock = ObservedTime(lateness_ms=30_000, idle_ms=10_000)
    seen = {0: PartitionSeen(high_water=17, max_record=(12, 1_700_000_040_000))}
    note = clock.observe(seen, now_ms)   # None: nothing to note yet
    note.time                            # 1_700_000_010_000: the largest timestamp - lateness

An observer (``tidemark stream observe``) asks the brokers, per partition, for
the next offset (the high-water mark) and the record with the largest
timestamp (ListOffsets' max-timestamp spec); it reads no record. This module
turns those answers into a mark (pure, no I/O):

- **time**: the minimum over the partitions that hold it of their largest
  timestamp, minus the stated lateness; never below the time noted before;
- **idle partitions**: a partition whose high-water mark has not moved for
  ``idle_ms`` (since the observer first saw it) stops holding the time back
  and counts the clock minus the lateness instead -- the writers' heartbeat
  rule (an idle writer notes the clock), applied to a quiet partition. A
  partition that has no record and is not idle yet holds the time: nothing is
  noted until it gets a record or turns idle;
- **position**: every partition's high-water mark (left out while 0);
  ``max_event_time`` the largest timestamp over all of them;
- **possibly late**: records that arrived while their partition's largest
  timestamp did not move (its record lies before the previous high-water
  mark), counted since the observer started. Each carries a timestamp at or
  below that maximum, so it may lie behind a watermark already made. It is an
  indication, not a bound: a late record that arrives in the same interval as
  a newer one is not counted, and a counted one may be above the watermark.

The weaker promise, stated plainly: the observer cannot know the producers'
timestamps before they write, so a record with a timestamp more than the
lateness below the largest one seen can land behind a watermark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tidemark.controller.exceptions import InvalidConfigurationError


@dataclass(frozen=True)
class PartitionSeen:
    """What the brokers said of one partition: its next offset, and its record with the
    largest timestamp as ``(offset, timestamp)`` (``None``: no record)."""

    high_water: int
    max_record: tuple[int, int] | None = None


@dataclass(frozen=True)
class ObservedNote:
    """A time to note on the stream's behalf: partition -> next offset as the position."""

    time: int
    position: Mapping[int, int]
    max_event_time: int | None
    possibly_late: int


@dataclass(slots=True)
class _Partition:
    high_water: int
    moved_at_ms: int
    max_timestamp: int | None
    answer: PartitionSeen | None = None
    """The answer folded in last: the same object again brings nothing new (an observer
    keeps a partition's answer while its high-water mark stands still)."""


@dataclass
class ObservedTime:
    """The observer's rule (module doc), one stream; keeps what it saw last per partition."""

    lateness_ms: int
    idle_ms: int
    last_time: int | None = None
    possibly_late: int = 0
    _partitions: dict[int, _Partition] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("lateness_ms", "idle_ms"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise InvalidConfigurationError(f"{name} must be an int >= 0 (ms), got {value!r}")

    def observe(self, seen: Mapping[int, PartitionSeen], now_ms: int) -> ObservedNote | None:
        """Fold the brokers' answers for ``seen``'s partitions (the stream's partitions
        now: others are forgotten) in; the note to make, or ``None`` while a partition
        with no record holds the time."""
        states = self._partitions
        for partition in [p for p in states if p not in seen]:
            del states[partition]
        # One pass over the partitions (an observer folds a thousand a second): the
        # smallest bound and the largest timestamp.
        time: int | None = None
        top: int | None = None
        holding_empty = False
        moved_idle = now_ms - self.idle_ms  # moved at or before: idle
        for partition, answer in seen.items():
            state = self._fold(partition, answer, now_ms)
            highest = state.max_timestamp
            if highest is not None and (top is None or highest > top):
                top = highest
            if state.moved_at_ms <= moved_idle:
                bound = max(now_ms, highest or 0) - self.lateness_ms
            elif highest is None:
                holding_empty = True
                continue
            else:
                bound = highest - self.lateness_ms
            if time is None or bound < time:
                time = bound
        if holding_empty or time is None:
            return None
        if self.last_time is not None:
            time = max(time, self.last_time)
        if time < 0:
            return None
        self.last_time = time
        return ObservedNote(
            time,
            {p: states[p].high_water for p in sorted(states) if states[p].high_water > 0},
            top,
            self.possibly_late,
        )

    def _fold(self, partition: int, answer: PartitionSeen, now_ms: int) -> _Partition:
        state = self._partitions.get(partition)
        if state is not None and answer is state.answer:
            return state
        top = None if answer.max_record is None else answer.max_record[1]
        if state is None:
            state = _Partition(answer.high_water, now_ms, top, answer)
            self._partitions[partition] = state
            return state
        state.answer = answer
        if answer.high_water > state.high_water:
            if answer.max_record is None or answer.max_record[0] < state.high_water:
                # the largest timestamp stands among the old records: every new one is at or
                # below it
                self.possibly_late += answer.high_water - state.high_water
            state.high_water = answer.high_water
            state.moved_at_ms = now_ms
        if top is not None and (state.max_timestamp is None or top > state.max_timestamp):
            state.max_timestamp = top
        return state


__all__ = ["ObservedNote", "ObservedTime", "PartitionSeen"]
