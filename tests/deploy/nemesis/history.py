"""What the nemesis's clients and the final inspection record: the checker's input.

Every entry carries ``at``, a stamp from one process-wide counter (``History.tick``),
so "acknowledged before noted before observed" is an order across threads, not a
comparison of wall clocks.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from tidemark.controller.model import Watermark

EventId = tuple[str, int]  # (writer, number)


@dataclass(frozen=True)
class Event:
    """One of the events the nemesis's writers write: ``writer:number``."""

    writer: str
    number: int

    @property
    def id(self) -> EventId:
        return (self.writer, self.number)


@dataclass(frozen=True)
class Written(Event):
    """An event its writer had acknowledged (``committed``) or deliberately aborted."""

    time: int
    at: int
    committed: bool = True


@dataclass(frozen=True)
class Noted:
    """``note_time(time)`` returned for ``writer``."""

    writer: str
    time: int
    at: int


@dataclass(frozen=True)
class Observed:
    """A watermark first seen in Delta (after ``at``, it existed). ``unseen_at``: when a
    read began that did not hold it yet, so it was made after then (``None``: the first
    read that answered held it already)."""

    watermark: Watermark
    at: int
    unseen_at: int | None = None


@dataclass(frozen=True)
class Stored(Event):
    """An event found in Kafka afterwards, read committed, at (segment, offset)."""

    segment: int
    offset: int


@dataclass(frozen=True)
class Read(Event):
    """The reader group handed out this event."""

    segment: int
    offset: int
    at: int


@dataclass(frozen=True)
class Reset:
    """The group went back to a checkpoint's cut: reads at or past it count again."""

    cut: dict[int, int]
    at: int


@dataclass
class History:
    """Everything recorded in one run; clients append from their threads."""

    written: list[Written] = field(default_factory=list)
    noted: list[Noted] = field(default_factory=list)
    observed: list[Observed] = field(default_factory=list)
    reads: list[Read | Reset] = field(default_factory=list)
    stored: list[Stored] = field(default_factory=list)
    ends: dict[int, int] = field(default_factory=dict)  # segment -> end offset afterwards
    steps: int = 0  # the nemesis's steps run (each heals before the next)
    _counter: itertools.count[int] = field(default_factory=itertools.count, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def tick(self) -> int:
        """The next stamp of the run's one order."""
        with self._lock:
            return next(self._counter)
