"""The event-time merge's release rule, over in-memory readers
(tidemark.pipelines.reading.merge)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tidemark.controller.model import TimeWindow
from tidemark.pipelines.reading.exceptions import ReaderConfigError
from tidemark.pipelines.reading.merge import TimeMerge
from tidemark.pipelines.reading.reader import EventRead

pytestmark = pytest.mark.unit


@dataclass
class Batch:
    events: tuple[EventRead, ...]
    window: TimeWindow

    def __len__(self) -> int:
        return len(self.events)


@dataclass
class ScriptedReader:
    """Hands out one scripted batch per call: (event times, lower bound after them)."""

    stream: str
    script: list[tuple[list[int], int | None]]
    lower: int | None = None
    offset: int = field(default=0)

    def read_batch(self, max_events: int, timeout_ms: float | None = None) -> Batch:
        if not self.script:
            return Batch((), TimeWindow(self.lower, None))
        times, self.lower = self.script.pop(0)
        events = []
        for t in times:
            events.append(EventRead(self.stream, 0, self.offset, t, b""))
            self.offset += 1
        return Batch(tuple(events), TimeWindow(self.lower, None))

    def current_time_window(self) -> TimeWindow:
        return TimeWindow(self.lower, None)


def times(events):
    return [(e.stream, e.timestamp) for e in events]


def test_records_wait_for_every_stream_then_come_in_time_order():
    a = ScriptedReader("a", [([10, 20, 30], 20), ([40, 50], 50)])
    b = ScriptedReader("b", [([5, 25], None), ([35], 40)])
    merge = TimeMerge([a, b])  # type: ignore[list-item]
    assert merge.poll(0) == []  # b has no watermark yet: everything held
    assert merge.held == 5
    assert times(merge.poll(0)) == [
        ("b", 5),
        ("a", 10),
        ("a", 20),
        ("b", 25),
        ("a", 30),
        ("b", 35),
        ("a", 40),
    ]
    assert times(merge.flush()) == [("a", 50)]
    assert merge.late == 0 and merge.held == 0 and merge.released_time == 50


def test_late_records_are_released_counted_and_never_dropped():
    a = ScriptedReader("a", [([10, 20], 20), ([15, 30], 30)])
    b = ScriptedReader("b", [([12], 40), ([], 40)])
    merge = TimeMerge([a, b], from_time=11)  # type: ignore[list-item]
    assert times(merge.poll(0)) == [("b", 12), ("a", 20)]  # 10 is before from_time
    assert times(merge.poll(0)) == [("a", 15), ("a", 30)]
    assert merge.late == 1


def test_a_merge_needs_readers_and_a_sane_batch_size():
    with pytest.raises(ReaderConfigError, match="at least one reader"):
        TimeMerge([])
    with pytest.raises(ReaderConfigError, match="batch_size"):
        TimeMerge([ScriptedReader("a", [])], batch_size=0)  # type: ignore[list-item]


@dataclass
class TailedReader(ScriptedReader):
    """A scripted reader that says whether it is at its tail, and counts its reads."""

    tail: bool = False
    reads: int = 0

    def read_batch(self, max_events: int, timeout_ms: float | None = None) -> Batch:
        self.reads += 1
        return super().read_batch(max_events, timeout_ms)

    def at_tail(self) -> bool:
        return self.tail


def test_a_stream_holding_max_held_waits_while_a_stream_behind_brings_records():
    ahead = TailedReader("a", [([100, 101], 101), ([102, 103], 103), ([104], 104)])
    behind = TailedReader("b", [([], None), ([1], 1), ([2], 50), ([], 50)])
    merge = TimeMerge([ahead, behind], max_held=2)  # type: ignore[list-item]
    assert merge.poll(0) == [] and merge.held == 2  # b: nothing yet, no watermark
    reads = ahead.reads
    assert times(merge.poll(0)) == [("b", 1)]  # b brought one: a (holding 2) not read
    assert times(merge.poll(0)) == [("b", 2)] and ahead.reads == reads
    behind.tail = True  # b has nothing more to bring: a is read again
    assert merge.poll(0) == [] and ahead.reads == reads + 1 and merge.held == 4
    assert times(merge.flush()) == [("a", t) for t in (100, 101, 102, 103)]


def test_max_held_must_be_a_positive_int():
    with pytest.raises(ReaderConfigError, match="max_held"):
        TimeMerge([ScriptedReader("a", [])], max_held=0)  # type: ignore[list-item]


@dataclass
class WaitRecordingReader(ScriptedReader):
    """A scripted reader noting, in a list shared by the readers, each wait it was given."""

    waits: list[tuple[str, float]] = field(default_factory=list)

    def read_batch(self, max_events: int, timeout_ms: float | None = None) -> Batch:
        if timeout_ms:
            self.waits.append((self.stream, timeout_ms))
        return super().read_batch(max_events, timeout_ms)


def test_when_nothing_is_at_hand_the_stream_holding_the_release_back_is_waited_on_first():
    waits: list[tuple[str, float]] = []
    ahead = WaitRecordingReader("a", [([30], 100)], waits=waits)
    behind = WaitRecordingReader("b", [([5], 20)], waits=waits)
    merge = TimeMerge([ahead, behind])  # type: ignore[list-item]
    assert times(merge.poll(10)) == [("b", 5)]  # both brought records: no wait
    assert waits == []
    assert merge.poll(10) == []  # nothing at hand: each waits its share, b (lower bound 20) first
    assert waits == [("b", 5.0), ("a", 5.0)]
