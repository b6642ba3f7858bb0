"""Acting on stream time, the pure parts: laggards, waiting logic, window lists, CLI alias."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.cli.acting import rewrite_alias
from tidemark.controller.laggards import LAGGING, SLOWEST, Laggard, WriterSeen, changed, laggards
from tidemark.controller.model import Watermark, WriterMark
from tidemark.controller.watermarks import GenerationState, watermark_cycle
from tidemark.jobs.exceptions import JobConfigurationError
from tidemark.jobs.window_args import WindowRun
from tidemark.pipelines.reading.exceptions import (
    ReaderConfigError,
    StreamTimeTimeoutError,
    WaitCancelledError,
)
from tidemark.pipelines.reading.lateness import LateCounter
from tidemark.pipelines.reading.stream_time import wait_for_time
from tidemark.schemas.tables import CLEAR, laggard_rows, latest_laggards

S = "sc/st"


def wm(time, seq=0):
    return Watermark(S, time, time, {0: seq}, seq)


# --- laggards -------------------------------------------------------------------------


def test_a_lagging_writer_is_named_with_since_and_distance():
    marks = {"a": WriterMark(2_000, {0: 9}), "b": WriterMark(1_000, {0: 5})}
    found = laggards(S, marks, GenerationState(wm(1_000), {"b": 77}), now_ms=500)
    assert found == [Laggard(S, "b", LAGGING, 1_000, 1_000, 1_000, 77, 500)]


def test_a_laggard_says_who_it_is_when_the_caller_knows():
    """Instance, first and last seen come from ``seen``; a writer the
    caller knows nothing of is still named, its identity unknown."""
    marks = {"a": WriterMark(2_000, {0: 9}), "b": WriterMark(900, {0: 5}), "c": WriterMark(900, {})}
    seen = {"b": WriterSeen("b-7", 100, 450), "a": WriterSeen("a-1", 1, 2)}
    found = laggards(S, marks, GenerationState(wm(1_000), {"b": 77, "c": 80}), 500, seen=seen)
    assert found == [
        Laggard(S, "b", LAGGING, 900, 1_000, 1_100, 77, 500, "b-7", 100, 450),
        Laggard(S, "c", LAGGING, 900, 1_000, 1_100, 80, 500),
    ]
    assert "b-7" in found[0].describe() and "first seen 100" in found[0].describe()


def test_without_lagging_the_slowest_writers_are_named():
    marks = {
        "a": WriterMark(2_000, {0: 9}),
        "b": WriterMark(1_200, {0: 5}),
        "c": WriterMark(1_200, {0: 1}),
    }
    found = laggards(S, marks, GenerationState(wm(1_000)), now_ms=5)
    assert [(x.writer, x.kind, x.behind_ms, x.since_ms) for x in found] == [
        ("b", SLOWEST, 800, None),
        ("c", SLOWEST, 800, None),
    ]


@pytest.mark.parametrize(
    "marks",
    [{}, {"a": WriterMark(5, {})}, {"a": WriterMark(5, {}), "b": WriterMark(5, {})}],
)
def test_nobody_holds_back_when_all_are_level(marks):
    assert laggards(S, marks, GenerationState(), now_ms=0) == []


@given(st.dictionaries(st.sampled_from("abcde"), st.integers(0, 50), min_size=1))
def test_laggards_follow_the_cycle(times):
    """After any cycle: lagging writers are exactly the cycle's lagging ones; otherwise
    the named writers are at the minimum, strictly below the maximum."""
    from tidemark.controller.model import Epoch, KeyRange, Segment

    epochs = [Epoch(0, (Segment(0, KeyRange(0.0, 1.0)),))]
    state = GenerationState(wm(25))
    marks = {w: WriterMark(t, {0: 1}) for w, t in times.items()}
    cycle = watermark_cycle(S, marks, state, epochs, 10, 1_000)
    found = laggards(S, marks, cycle.state, now_ms=10)
    if cycle.state.lagging_since:
        assert {x.writer for x in found} == set(cycle.state.lagging_since)
        assert all(x.kind == LAGGING and x.noted_time <= 25 for x in found)
    else:
        low, high = min(times.values()), max(times.values())
        expected = {w for w, t in times.items() if t == low} if low < high else set()
        assert {x.writer for x in found} == expected
    assert all(x.behind_ms == max(times.values()) - x.noted_time for x in found)


def test_changed_ignores_distance_but_not_membership():
    a = Laggard(S, "a", LAGGING, 1, 2, 3, 4, 5)
    assert not changed([a], [Laggard(S, "a", LAGGING, 1, 2, 99, 4, 600)])
    assert changed([a], [])
    assert changed([a], [Laggard(S, "a", SLOWEST, 1, 2, 3, None, 5)])
    # a new instance under the same id, lagging since the same cycle: another writer
    restarted = Laggard(S, "a", LAGGING, 1, 2, 3, 4, 5, instance="a-2")
    assert changed([a], [restarted])
    assert not changed([restarted], [Laggard(S, "a", LAGGING, 1, 2, 3, 4, 9, "a-2", 1, 8)])


def test_laggard_rows_round_trip_and_clear():
    a = Laggard(S, "a", LAGGING, 1, 2, 30, 4, 5)
    b = Laggard(S, "b", SLOWEST, 1, 2, 40, None, 5)
    rows = laggard_rows(S, 100, [a, b]) + laggard_rows(S, 50, [a])
    assert [r["writer"] for r in latest_laggards(rows)] == ["b", "a"]  # most behind first
    cleared = rows + laggard_rows(S, 200, [])
    assert cleared[-1]["kind"] == CLEAR and latest_laggards(cleared) == []
    assert latest_laggards([]) == []


# --- waiting, with an in-memory source ------------------------------------------------------


class ListSource:
    """Hands out prepared batches, one per poll; records the waits asked for."""

    def __init__(self, batches, holding=()):
        self.batches = list(batches)
        self.waits = []
        self._holding = list(holding)

    def poll(self):
        return self.batches.pop(0) if self.batches else []

    def wait_for_change(self, timeout_ms, stop):
        self.waits.append(timeout_ms)
        stop.wait(min(timeout_ms, 5) / 1000)

    def holding(self):
        return self._holding


def test_wait_returns_the_first_watermark_at_or_after_t():
    source = ListSource([[wm(5, 0), wm(9, 1)], [], [wm(10, 2), wm(12, 3)]])
    assert wait_for_time(S, 10, 5_000, source=source) == wm(10, 2)
    assert len(source.waits) == 2  # woke twice, no spinning in between


def test_wait_times_out_naming_the_holders():
    source = ListSource([[wm(5, 0)]], holding=["w7 (lagging since 3: noted 4, 9 ms behind)"])
    with pytest.raises(StreamTimeTimeoutError) as err:
        wait_for_time(S, "10", 30, source=source)
    assert err.value.last == wm(5, 0) and err.value.time_ms == 10
    assert "w7" in str(err.value) and "watermark is at 5" in str(err.value)
    assert isinstance(err.value, TimeoutError)


def test_wait_cancelled_by_stop():
    stop = threading.Event()
    stop.set()
    with pytest.raises(WaitCancelledError):
        wait_for_time(S, 10, 60_000, source=ListSource([]), stop=stop)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "5"])
def test_wait_refuses_bad_timeouts(bad):
    with pytest.raises(ReaderConfigError, match="timeout_ms"):
        wait_for_time(S, 10, bad, source=ListSource([]))


def test_wait_refuses_bad_times():
    from tidemark.controller.timestamps import InvalidTimestampError

    with pytest.raises(InvalidTimestampError):
        wait_for_time(S, "ten", 0, source=ListSource([]))


def test_async_form_returns_and_cancels():
    import asyncio

    from tidemark.pipelines.reading.stream_time import wait_for_time_async

    async def main():
        got = await wait_for_time_async(S, 3, 1_000, source=ListSource([[wm(3)]]))
        task = asyncio.create_task(wait_for_time_async(S, 3, 60_000, source=ListSource([])))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return got

    assert asyncio.run(main()) == wm(3)


def test_callback_form():
    from tidemark.pipelines.reading.stream_time import on_stream_time

    seen, errors = [], []
    trigger = on_stream_time(
        S,
        4,
        seen.append,
        timeout_ms=1_000,
        source=ListSource([[], [wm(4)]]),
        on_error=errors.append,
    )
    assert trigger.join(5)
    assert seen == [wm(4)] and errors == []
    late = on_stream_time(
        S, 4, seen.append, timeout_ms=20, source=ListSource([]), on_error=errors.append
    )
    assert late.join(5) and isinstance(errors[0], StreamTimeTimeoutError) and len(seen) == 1


# --- late events, window lists, alias ----------------------------------------------------


def test_late_counter_counts_per_segment():
    counter = LateCounter()
    assert counter.observe(1, 90, 100)
    assert not counter.observe(1, 100, 100)
    assert not counter.observe(2, 5, None)  # no lower bound yet: nothing is late
    assert counter.observe(2, 5, 6)
    assert dict(counter.counts) == {1: 1, 2: 1} and counter.total == 2
    assert dict(counter.seen) == {1: 2, 2: 2}


def test_window_lists():
    one = WindowRun(S, 100, 200, None, "/o", None, 0)
    assert list(one.windows(None)) == [(100, 200)]
    every = WindowRun(S, 100, 400, 100, "/o", None, None)
    assert list(every.windows(None)) == [(100, 200), (200, 300), (300, 400)]
    assert list(every.windows(200)) == [(300, 400)]
    assert list(every.windows(50)) == [(100, 200), (200, 300), (300, 400)]
    endless = WindowRun(S, 0, None, 10, "/o", None, None).windows(None)
    assert [next(endless) for _ in range(3)] == [(0, 10), (10, 20), (20, 30)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((100, None, None), "--to"),
        ((100, 100, None), "--from < --to"),
        ((100, None, 0), "--every"),
    ],
)
def test_window_run_refuses_bad_options(args, message):
    start, end, every = args
    with pytest.raises(JobConfigurationError, match=message):
        WindowRun(S, start, end, every, "/o", None, None)


def test_window_run_alias():
    assert rewrite_alias(["window", "run", "s", "--from", "1"]) == [
        "window-run",
        "s",
        "--from",
        "1",
    ]
    assert rewrite_alias(["-v", "window", "run", "s"]) == ["-v", "window-run", "s"]
    assert rewrite_alias(["window", "billing"]) == ["window", "billing"]
    assert rewrite_alias(["window", "--", "run"]) == ["window", "--", "run"]
    assert rewrite_alias(["read", "window", "run"]) == ["read", "window", "run"]


def test_job_records_laggards_only_on_change():
    from tidemark.jobs.lateness import laggard_update, laggards_of
    from tidemark.jobs.workflow import StoredMark, StreamState

    state = StreamState(
        marks={
            "a": StoredMark(WriterMark(900, {0: 9}), 0, 1),
            "b": StoredMark(WriterMark(400, {0: 3}), 0, 2),
        },
        generation=GenerationState(wm(500), {"b": 60}),
    )
    found = laggards_of(S, state, now_ms=100)
    assert [(x.writer, x.kind, x.behind_ms, x.since_ms) for x in found] == [("b", LAGGING, 500, 60)]
    rows = laggard_update(S, found, None, 100)
    assert [(r["writer"], r["kind"], r["since"]) for r in rows] == [("b", LAGGING, 60)]
    assert laggard_update(S, laggards_of(S, state, now_ms=200), found, 200) is None
    assert laggard_update(S, [], None, 300) is None
    assert [r["kind"] for r in laggard_update(S, [], found, 300)] == [CLEAR]


def test_object_store_source_backs_off_between_reads():
    """No log directory to watch on an object store: each wait is one step, growing."""
    import time

    from tidemark.pipelines.reading.stream_time import DeltaWatermarkSource

    source = DeltaWatermarkSource("s3://bucket/tidemark", S, min_backoff_ms=10, max_backoff_ms=80)
    started = time.monotonic()
    for _ in range(5):
        source.wait_for_change(10_000, threading.Event())
    assert time.monotonic() - started >= (10 + 20 + 40 + 80 + 80) / 1000
    slow = DeltaWatermarkSource("s3://b/t", S, min_backoff_ms=30_000, max_backoff_ms=30_000)
    stop = threading.Event()
    stop.set()
    quick = time.monotonic()
    slow.wait_for_change(60_000, stop)
    assert time.monotonic() - quick < 10  # a stop ends a 30 s step at once
    with pytest.raises(ReaderConfigError):
        DeltaWatermarkSource("s3://b/t", S, min_backoff_ms=0)


def test_late_events_bound_per_segment_from_the_cuts():
    """Segment 1 exists from the start; segment 2 appears after watermark 0 (its cut
    does not name it) and is sealed before watermark 3 (whose cut does not name it)."""
    from types import SimpleNamespace

    from tidemark.pipelines.reading.lateness import LateEvents

    marks = [
        Watermark(S, 100, 100, {1: 5}, 0),
        Watermark(S, 200, 200, {1: 8, 2: 0}, 1),
        Watermark(S, 300, 300, {1: 9, 2: 4}, 2),
        Watermark(S, 400, 400, {1: 12}, 3),
    ]
    feed = SimpleNamespace(watermarks=marks, refresh=lambda force=False: len(marks))
    events = [
        (1, 4, 50),  # before the first cut: no bound
        (1, 5, 90),  # at the first cut, below 100: late
        (1, 8, 150),  # at cut 1 (200): late
        (1, 11, 350),  # past cut 2 (300), before cut 3: not late
        (2, 0, 150),  # segment 2 at its first cut: past watermark 0 and 1 -> 200: late
        (2, 3, 250),  # not past cut 2 (4): bound 200, not late
        (2, 5, 299),  # past cut 2 -> 300: late; watermark 3 does not name it: stays 300
    ]
    reads = iter(
        [
            SimpleNamespace(segment=s, offset=o, timestamp=t, is_checkpoint=False)
            for s, o, t in events
        ]
    )
    reader = SimpleNamespace(
        group=SimpleNamespace(watermark_feed=lambda: feed),
        read_next=lambda timeout_ms=None: next(reads, None),
    )
    late = LateEvents(reader)
    bounds = []
    while (event := late.read_next()) is not None:
        bounds.append(late.lower_bound(event.segment, event.offset))
    assert bounds == [None, 100, 200, 300, 200, 200, 300]
    assert dict(late.counter.counts) == {1: 2, 2: 2}


def test_a_writer_lagging_at_the_watermark_is_named_after_the_threshold_one_below_at_once():
    marks = {"a": WriterMark(500, {0: 9}), "b": WriterMark(500, {0: 8})}
    state = GenerationState(wm(500), {"a": 1_000, "b": 1_000})  # both at the watermark
    assert laggards(S, marks, state, 1_500, threshold_ms=1_000) == []  # between notes
    named = laggards(S, marks, state, 2_000, threshold_ms=1_000)  # stalled for 1 s
    assert [(x.writer, x.kind) for x in named] == [("a", LAGGING), ("b", LAGGING)]
    below = {"a": WriterMark(900, {0: 9}), "b": WriterMark(400, {0: 8})}
    found = laggards(S, below, GenerationState(wm(500), {"b": 1_000}), 1_000, threshold_ms=10**6)
    assert [(x.writer, x.behind_ms) for x in found] == [("b", 500)]
