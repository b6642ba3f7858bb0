"""MergedBatch (tidemark.pipelines.reading.merged_batch) and TimeMerge's batch API over Kafka
records
held as fetched: time order, completeness, bodies without events, stream names."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.model import TimeWindow, segment_id
from tidemark.pipelines.reading.exceptions import ReaderConfigError
from tidemark.pipelines.reading.merge import TimeMerge
from tidemark.pipelines.reading.merged_batch import Columns, MergedBatch, Run
from tidemark.pipelines.reading.reader import EventBatch, EventRead

pytestmark = pytest.mark.unit

SEGMENT_OF = {0: segment_id(0, 0), 1: segment_id(1, 1)}


def message(partition: int, offset: int, timestamp: int, value: bytes | None) -> Message:
    return Message(
        topic="t", partition=partition, offset=offset, timestamp=(1, timestamp), value=value
    )


def run_of(stream: str, times: list[int], partition: int = 0) -> Run:
    records = [message(partition, n, t, f"{stream}:{n}".encode()) for n, t in enumerate(times)]
    return Run(stream, Columns.of_records(records, SEGMENT_OF))


def event(stream: str, n: int, t: int, partition: int = 0) -> EventRead:
    return EventRead(stream, SEGMENT_OF[partition], n, t, f"{stream}:{n}".encode())


def test_runs_come_merged_by_time_with_their_streams_and_ties_in_the_readers_order():
    batch = MergedBatch([run_of("a", [10, 20, 20, 40]), run_of("b", [5, 20, 30], partition=1)])
    assert len(batch) == 7
    assert batch.times() == [5, 10, 20, 20, 20, 30, 40]
    assert batch.streams() == ["b", "a", "a", "a", "b", "b", "a"]
    assert batch.values() == [b"b:0", b"a:0", b"a:1", b"a:2", b"b:1", b"b:2", b"a:3"]
    assert batch.events == (
        event("b", 0, 5, 1),
        event("a", 0, 10),
        event("a", 1, 20),
        event("a", 2, 20),
        event("b", 1, 20, 1),
        event("b", 2, 30, 1),
        event("a", 3, 40),
    )
    assert batch.events is batch.events  # made once
    assert list(batch) == list(batch.events) and batch[1] == event("a", 0, 10)
    assert batch.last_time == 40


def test_runs_that_do_not_overlap_come_one_after_the_other():
    batch = MergedBatch([run_of("a", [31, 40]), run_of("b", [10, 30]), run_of("c", [])])
    assert batch.times() == [10, 30, 31, 40]
    assert batch.streams() == ["b", "b", "a", "a"]
    assert batch.values() == [b"b:0", b"b:1", b"a:0", b"a:1"]
    touching = MergedBatch([run_of("a", [30, 40]), run_of("b", [10, 30])])
    assert touching.streams() == ["b", "a", "b", "a"]  # time 30: the readers' order


def test_an_empty_batch_and_a_record_without_a_value():
    empty = MergedBatch([])
    assert len(empty) == 0 and empty.values() == [] and empty.events == ()
    assert empty.last_time is None
    batch = MergedBatch([Run("a", Columns.of_records([message(0, 0, 1, None)], SEGMENT_OF))])
    assert batch.values() == [b""] and batch.events[0].body == b""


def test_columns_of_records_of_several_segments_and_of_events_make_the_same_events():
    records = [message(0, 0, 3, b"a:0"), message(1, 0, 1, b"a:1"), message(0, 1, 2, b"a:2")]
    columns = Columns.of_records(records, SEGMENT_OF)
    events = columns.events("a")
    assert [(e.segment, e.offset, e.timestamp) for e in events] == [
        (SEGMENT_OF[0], 0, 3),
        (SEGMENT_OF[1], 0, 1),
        (SEGMENT_OF[0], 1, 2),
    ]
    assert Columns.of_events(events).events("a") == events
    ordered = columns.in_time_order()
    assert ordered.times == [1, 2, 3] and ordered.bodies == [b"a:1", b"a:2", b"a:0"]
    assert ordered.events("a") == sorted(events, key=lambda e: e.timestamp)
    assert columns.kept([True, False, True]).bodies == [b"a:0", b"a:2"]
    first = columns.take(1)
    assert first.bodies == [b"a:0"] and columns.bodies == [b"a:1", b"a:2"]


def test_keys_and_headers_come_through():
    record = Message(
        topic="t",
        partition=0,
        offset=4,
        timestamp=(1, 9),
        value=b"v",
        key=b"k",
        headers=[("h", b"1"), ("h", None)],
    )
    (made,) = MergedBatch([Run("a", Columns.of_records([record], SEGMENT_OF))]).events
    assert made == EventRead("a", SEGMENT_OF[0], 4, 9, b"v", b"k", (("h", b"1"), ("h", None)))


@given(st.lists(st.lists(st.integers(0, 50), max_size=20).map(sorted), min_size=1, max_size=5))
def test_any_runs_merge_complete_and_in_order(runs_times):
    runs = [run_of(f"s{n}", times) for n, times in enumerate(runs_times)]
    batch = MergedBatch(runs)
    events = batch.events
    assert sorted(events, key=lambda e: (e.stream, e.offset)) == sorted(
        (event(r.stream, n, t) for r in runs for n, t in enumerate(r.times())),
        key=lambda e: (e.stream, e.offset),
    )
    assert batch.times() == sorted(t for times in runs_times for t in times)
    assert batch.times() == [e.timestamp for e in events]
    assert batch.values() == [e.body for e in events]
    assert batch.streams() == [e.stream for e in events]
    # equal times in the readers' order (then each stream's own)
    keys = [(e.timestamp, int(e.stream[1:]), e.offset) for e in events]
    assert keys == sorted(keys)


@dataclass
class RecordReader:
    """Hands out one scripted fetch per call as the reader does: an EventBatch of Kafka
    records (events made when asked): (event times, lower bound after them)."""

    stream: str
    script: list[tuple[list[int], int | None]]
    lower: int | None = None
    offset: int = field(default=0)

    def read_batch(self, max_events: int, timeout_ms: float | None = None) -> EventBatch:
        times, lower = self.script.pop(0) if self.script else ([], self.lower)
        self.lower = lower
        msgs = []
        for t in times:
            msgs.append(message(0, self.offset, t, f"{self.stream}:{self.offset}".encode()))
            self.offset += 1
        window = TimeWindow(lower, None)
        if not msgs:
            return EventBatch((), {}, lambda _: window)
        return EventBatch._of_records(msgs, SEGMENT_OF, self.stream, {}, lambda _: window)

    def current_time_window(self) -> TimeWindow:
        return TimeWindow(self.lower, None)


def test_read_batch_releases_records_in_time_order_without_making_events():
    a = RecordReader("a", [([10, 20, 30], 20), ([40, 50], 50)])
    b = RecordReader("b", [([5, 25], None), ([35], 40)])
    merge = TimeMerge([a, b])  # type: ignore[list-item]
    assert len(merge.read_batch(timeout_ms=0)) == 0 and merge.held == 5
    batch = merge.read_batch(timeout_ms=0)
    assert batch.times() == [5, 10, 20, 25, 30, 35, 40]
    assert batch.streams() == ["b", "a", "a", "b", "a", "b", "a"]
    assert batch.values() == [b"b:0", b"a:0", b"a:1", b"b:1", b"a:2", b"b:2", b"a:3"]
    assert [(e.stream, e.offset, e.timestamp) for e in batch.events] == [
        ("b", 0, 5),
        ("a", 0, 10),
        ("a", 1, 20),
        ("b", 1, 25),
        ("a", 2, 30),
        ("b", 2, 35),
        ("a", 3, 40),
    ]
    rest = merge.flush_batch()
    assert rest.values() == [b"a:4"] and rest.events == (event("a", 4, 50),)
    assert merge.held == 0 and merge.released_time == 50 and merge.late == 0


def test_a_late_record_and_one_before_from_time_over_records():
    a = RecordReader("a", [([10, 20], 20), ([15, 30], 30)])
    b = RecordReader("b", [([12], 40), ([], 40)])
    merge = TimeMerge([a, b], from_time=11)  # type: ignore[list-item]
    assert merge.read_batch(timeout_ms=0).values() == [b"b:0", b"a:1"]  # a:0 before from_time
    late = merge.read_batch(timeout_ms=0)
    assert late.times() == [15, 30] and late.streams() == ["a", "a"]
    assert merge.late == 1


def test_batches_end_with_what_was_held_and_match_events():
    def merge_of():
        a = RecordReader("a", [([1, 3], 3), ([5], 5)])
        b = RecordReader("b", [([2, 4], 4), ([6], 6)])
        return TimeMerge([a, b])  # type: ignore[list-item]

    batches = list(merge_of().batches(idle_ms=50, poll_ms=0))
    assert [batch.times() for batch in batches] == [[1, 2, 3], [4, 5], [6]]  # [6]: held
    bodies = [v for batch in batches for v in batch.values()]
    assert bodies == [e.body for e in merge_of().events(idle_ms=50, poll_ms=0)]


def _scripts(fetches: list[list[list[int]]]) -> list[RecordReader]:
    """A reader a stream, each fetch's lower bound the largest time it read so far."""
    readers = []
    for n, stream_fetches in enumerate(fetches):
        script: list[tuple[list[int], int | None]] = []
        top: int | None = None
        for times in stream_fetches:
            top = max([t for t in times if top is None or t > top] or [top or 0])
            script.append((times, top))
        readers.append(RecordReader(f"s{n}", script))
    return readers


@given(
    st.lists(
        st.lists(st.lists(st.integers(0, 60), max_size=6), max_size=4), min_size=1, max_size=4
    ),
    st.one_of(st.none(), st.integers(0, 30)),
)
def test_a_bodies_only_merge_releases_what_a_full_one_does_and_makes_no_events(fetches, from_time):
    full = TimeMerge(_scripts(fetches), from_time=from_time)  # type: ignore[arg-type]
    lean = TimeMerge(
        _scripts(fetches),  # type: ignore[arg-type]
        from_time=from_time,
        bodies_only=True,
    )
    for merge in (full, lean):
        assert merge.bodies_only is (merge is lean)
    for _ in range(5):
        made, got = full.read_batch(timeout_ms=0), lean.read_batch(timeout_ms=0)
        assert got.values() == made.values() == [e.body for e in made.events]
        assert got.times() == made.times() and got.streams() == made.streams()
        if len(got):
            with pytest.raises(ReaderConfigError, match="bodies_only"):
                got.events  # noqa: B018
    rest, lean_rest = full.flush_batch(), lean.flush_batch()
    assert lean_rest.values() == rest.values() and lean_rest.times() == rest.times()
    assert lean.late == full.late and lean.held == full.held == 0


def test_bodies_only_columns_hold_times_and_bodies_alone():
    records = [message(0, 0, 3, b"a:0"), message(1, 0, 1, None), message(0, 1, 2, b"a:2")]
    lean = Columns.of_records(records, SEGMENT_OF, full=False)
    assert not lean.full and lean.times == [3, 1, 2] and lean.bodies == [b"a:0", b"", b"a:2"]
    assert lean.segments == lean.offsets == lean.keys == lean.headers == []
    ordered = lean.in_time_order()
    assert not ordered.full and ordered.bodies == [b"", b"a:2", b"a:0"]
    first = ordered.take(1)
    assert first.times == [1] and ordered.times == [2, 3] and not first.full
    assert ordered.kept([False, True]).bodies == [b"a:0"]
    events = Columns.of_records(records, SEGMENT_OF).events("a")
    assert Columns.of_events(events, full=False).bodies == lean.bodies
    with pytest.raises(ReaderConfigError):
        lean.events("a")


@pytest.mark.parametrize("bodies_only", [False, True])
def test_a_fetch_starting_before_what_a_stream_holds_is_merged_into_it(bodies_only):
    a = RecordReader("a", [([10, 30], 5), ([15], 30)])
    b = RecordReader("b", [([12], 20), ([], 20)])
    merge = TimeMerge([a, b], bodies_only=bodies_only)  # type: ignore[list-item]
    assert len(merge.read_batch(timeout_ms=0)) == 0 and merge.held == 3
    batch = merge.read_batch(timeout_ms=0)
    assert batch.times() == [10, 12, 15] and batch.values() == [b"a:0", b"b:0", b"a:2"]
    assert batch.streams() == ["a", "b", "a"] and merge.held == 1 and merge.late == 0
    assert merge.flush_batch().values() == [b"a:1"] and merge.held == 0
