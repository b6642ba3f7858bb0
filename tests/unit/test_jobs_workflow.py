"""tidemark.jobs.workflow without Spark: admission, cycles, ticks, due times, the
last-stable-offset hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from tidemark.controller.admission import Registration
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.metadata import StreamMetadata, new_stream_metadata
from tidemark.jobs.config import CycleTrigger, WorkflowSettings
from tidemark.jobs.tables import Reason
from tidemark.jobs.workflow import (
    STATE_VERSION,
    Emitted,
    LaggardRows,
    MarkInput,
    Rejected,
    StreamState,
    StreamWorkflow,
    parse_tick,
    tick_value,
)
from tidemark.schemas.records import WriterMarkRecord

S = "shop/orders"


class Streams:
    def __init__(self, *metas: StreamMetadata) -> None:
        self.metas = {m.name: m for m in metas}
        self.refreshes = 0

    def stream(self, stream: str, refresh: bool = False) -> StreamMetadata | None:
        self.refreshes += refresh
        return self.metas.get(stream)

    def prefetch(self, streams: Sequence[str]) -> None:
        pass


class Committed:
    def __init__(self, stable: dict[int, int] | None = None) -> None:
        self.stable = stable if stable is not None else {}
        self.fresh_since: list[int | None] = []

    def expect(self, topic: str, partitions: Sequence[int]) -> None:
        pass

    def last_stable(
        self, topic: str, needed: Mapping[int, int], fresh_since_ms: int | None = None
    ) -> Mapping[int, int]:
        self.fresh_since.append(fresh_since_ms)
        return {p: self.stable.get(p, 10**9) for p in needed}


class Registered:
    """Every writer id registered once, under the token that is its own name (the token
    of the marks :func:`rec` makes), unless ``tokens`` lists its registrations: the
    registrations' own rules are tested in ``test_writer_registrations``."""

    def __init__(
        self, tokens: Mapping[str, Sequence[Registration]] | None = None, others: bool = True
    ) -> None:
        self.tokens = dict(tokens or {})
        self.others = others
        """Whether an id ``tokens`` does not list is registered (else it has none)."""

    def registrations(
        self, stream: str, writer_id: str, claimed: str | None, fresh_since_ms: int | None
    ) -> Sequence[Registration]:
        own = (Registration(writer_id, 0),) if self.others else ()
        return self.tokens.get(writer_id, own)


def meta(segments: int = 2) -> StreamMetadata:
    return new_stream_metadata(S, StreamConfiguration(ScalingPolicy.fixed(segments)), 0)


def rec(writer: str, t: int, pos: dict[int, int], offset: int, alive: bool = True) -> MarkInput:
    return MarkInput(
        WriterMarkRecord(S, writer, t, pos, alive, instance=writer).encode(), 0, offset
    )


def wf(trigger: CycleTrigger = CycleTrigger.TIMERS, **kw: int) -> StreamWorkflow:
    settings = WorkflowSettings(interval_ms=1000, trigger=trigger, **kw)
    return StreamWorkflow(settings, Streams(meta()), Committed(), Registered())


def test_timers_cycle_with_every_batch_of_marks_and_want_nothing_while_in_step() -> None:
    w, state = wf(), StreamState()
    out = w.on_records(S, state, [rec("a", 100, {0: 1}, 0), rec("b", 120, {1: 4}, 1)], 5_000)
    assert [(o.watermark.time, o.watermark.upper_time) for o in out if isinstance(o, Emitted)] == [
        (100, 120)
    ]
    # a is at the watermark's time, b above it: a lags from the next cycle, so a cycle is
    # due a timeout later in case no mark comes
    assert w.wants_due(state) == 5_000 + 60_000
    (emitted,) = w.on_records(S, state, [rec("a", 200, {0: 2}, 2), rec("b", 220, {1: 5}, 3)], 5_100)
    assert isinstance(emitted, Emitted)
    assert (emitted.watermark.seq, emitted.watermark.time, emitted.upper_time_max) == (1, 200, 220)
    assert emitted.writers == ("a", "b")
    assert w.on_due(S, state, 99_000) == []  # a stray due record finds nothing due


def stream_meta(timeout: int | None = None, delay: int = 0) -> StreamMetadata:
    config = StreamConfiguration(
        ScalingPolicy.fixed(2),
        timestamp_aggregation_timeout_ms=timeout,
        first_watermark_delay_ms=delay,
    )
    return new_stream_metadata(S, config, 0)


def test_writers_in_step_want_nothing_until_their_next_mark() -> None:
    w, state = wf(), StreamState()
    w.on_records(S, state, [rec("a", 100, {0: 1}, 0), rec("b", 100, {1: 4}, 1)], 5_000)
    assert w.wants_due(state) is None


def test_writers_gone_quiet_apart_still_move_the_watermark_to_the_one_ahead() -> None:
    """a stops at 100 and b at 120, both in one batch: the watermark is 100 and no mark
    comes again. Due cycles see a lag (a timeout later) and drop it (another timeout
    later), and the watermark reaches b's 120; then nothing is due."""
    w, state = wf(writer_timeout_ms=2_000, laggard_threshold_ms=10**9), StreamState()
    out = w.on_records(S, state, [rec("a", 100, {0: 1}, 0), rec("b", 120, {1: 4}, 1)], 5_000)
    assert [o.watermark.time for o in out if isinstance(o, Emitted)] == [100]
    assert w.on_due(S, state, 6_999) == []  # not due yet
    assert w.on_due(S, state, 7_000) == [] and w.wants_due(state) == 9_000  # a lags
    (emitted,) = w.on_due(S, state, 9_000)
    assert isinstance(emitted, Emitted)
    assert (emitted.watermark.time, emitted.writers) == (120, ("b",))
    assert set(state.marks) == {"b"} and w.wants_due(state) is None


@pytest.mark.parametrize(("timeout", "applied"), [(None, 60_000), (0, 0), (2_000, 2_000)])
def test_a_lagging_writer_is_due_at_its_streams_own_timeout(
    timeout: int | None, applied: int
) -> None:
    settings = WorkflowSettings(interval_ms=1000, writer_timeout_ms=60_000, laggard_threshold_ms=0)
    w, state = (
        StreamWorkflow(settings, Streams(stream_meta(timeout)), Committed(), Registered()),
        StreamState(),
    )
    w.on_records(S, state, [rec("a", 100, {0: 1}, 0), rec("b", 100, {1: 1}, 1)], 1_000)
    # b stops noting: it lags from the next cycle on
    out = w.on_records(S, state, [rec("a", 200, {0: 2}, 2)], 2_000)
    if applied == 0:
        # dropped in the same cycle: the watermark goes on without it
        assert [(o.watermark.time, o.writers) for o in out if isinstance(o, Emitted)] == [
            (200, ("a",))
        ]
        assert set(state.marks) == {"a"} and w.wants_due(state) is None
        return
    # nothing emitted; b is recorded as lagging, once
    (lagging,) = out
    assert isinstance(lagging, LaggardRows)
    assert [(r["writer"], r["kind"], r["since"], r["behind_ms"]) for r in lagging.rows] == [
        ("b", "lagging", 2_000, 100)
    ]
    assert w.wants_due(state) == 2_000 + applied
    assert w.on_records(S, state, [rec("a", 300, {0: 3}, 3)], 2_001) == []  # no change
    assert w.on_due(S, state, 2_000 + applied - 1) == []
    emitted, cleared = w.on_due(S, state, 2_000 + applied)
    assert isinstance(emitted, Emitted) and emitted.watermark.time == 300
    assert isinstance(cleared, LaggardRows) and [r["kind"] for r in cleared.rows] == ["clear"]
    assert set(state.marks) == {"a"} and w.wants_due(state) is None


def test_the_first_watermark_waits_for_the_streams_start_up_delay() -> None:
    w = StreamWorkflow(
        WorkflowSettings(), Streams(stream_meta(delay=3_000)), Committed(), Registered()
    )
    state = StreamState()
    assert w.on_records(S, state, [rec("a", 500, {0: 1}, 0)], 1_000) == []
    assert w.wants_due(state) == 4_000
    # a late writer joins within the delay and is not excluded
    assert w.on_records(S, state, [rec("b", 300, {1: 1}, 1)], 2_500) == []
    (emitted,) = w.on_due(S, state, 4_000)
    assert isinstance(emitted, Emitted)
    assert (emitted.watermark.time, emitted.writers) == (300, ("a", "b"))
    # later marks are not delayed
    (emitted,) = w.on_records(S, state, [rec("a", 600, {0: 2}, 2), rec("b", 650, {1: 2}, 3)], 4_100)
    assert isinstance(emitted, Emitted) and emitted.watermark.time == 600


def test_ticks_run_cycles_exactly_where_they_are_in_offset_order() -> None:
    w, state = wf(CycleTrigger.TICKS), StreamState()
    records = [
        rec("a", 100, {0: 1}, 0),
        MarkInput(tick_value(7), 0, 1),
        rec("a", 150, {0: 2}, 2),
        MarkInput(tick_value(8), 0, 3),
    ]
    out = w.on_records(S, state, list(reversed(records)), 123)  # order is restored by offset
    assert [(o.watermark.time, o.emitted_at) for o in out if isinstance(o, Emitted)] == [
        (100, 7),
        (150, 8),
    ]
    assert w.wants_due(state) is None
    assert parse_tick(b"tidemark-tick:x") is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"garbage", Reason.MALFORMED),
        (WriterMarkRecord("other/s", "a", 1, {}).encode(), Reason.MALFORMED),
        (WriterMarkRecord(S, "a", 1, {1 << 32: 5}).encode(), Reason.UNKNOWN_SEGMENT),
    ],
)
def test_bad_records_are_rejected_with_reasons(value: bytes, reason: str) -> None:
    w, state = wf(), StreamState()
    (out,) = w.on_records(S, state, [MarkInput(value, 0, 9)], 1)
    assert isinstance(out, Rejected)
    assert (out.reason, out.raw, out.offset) == (reason, value, 9)


def test_unknown_stream_stale_and_regressed() -> None:
    w, state = wf(), StreamState()
    unknown = MarkInput(WriterMarkRecord("x/y", "a", 1, {}).encode(), 0, 0)
    (r,) = w.on_records("x/y", StreamState(), [unknown], 1)
    assert isinstance(r, Rejected) and r.reason == Reason.UNKNOWN_STREAM
    out = w.on_records(
        S,
        state,
        [rec("a", 100, {0: 5}, 0), rec("a", 90, {0: 6}, 1), rec("a", 110, {0: 4}, 2)],
        1,
    )
    assert [o.reason for o in out if isinstance(o, Rejected)] == [
        Reason.STALE_TIME,
        Reason.REGRESSED_POSITION,
    ]


def test_a_cut_past_the_last_stable_offset_is_held_then_its_writer_rejected() -> None:
    committed = Committed({0: 3, 1: 100})
    w = StreamWorkflow(
        WorkflowSettings(lso_hold_ms=2_000), Streams(meta()), committed, Registered()
    )
    state = StreamState()
    assert w.on_records(S, state, [rec("a", 100, {0: 5}, 0), rec("b", 90, {1: 1}, 1)], 0) == []
    assert state.held_since_ms == 0 and state.generation.previous is None
    assert w.wants_due(state) == 1_000  # retried every interval while held
    assert w.on_due(S, state, 1_000) == []
    out = w.on_due(S, state, 2_000)
    assert [(o.reason, o.writer) for o in out if isinstance(o, Rejected)] == [
        (Reason.BEYOND_COMMITTED, "a")
    ]
    assert set(state.marks) == {"b"}
    committed.stable[0] = 10
    (emitted,) = w.on_records(S, state, [], 3_000)
    assert isinstance(emitted, Emitted) and emitted.watermark.time == 90


@pytest.mark.parametrize("trigger", list(CycleTrigger))
def test_the_cut_check_may_use_offsets_read_after_the_batch_began_in_timers_mode_only(
    trigger: CycleTrigger,
) -> None:
    """Timers: the batch timestamp is wall-clock time taken before the batch's input was
    read, so an offset read after it is fresh enough; ticks are not wall-clock times."""
    committed = Committed()
    w = StreamWorkflow(WorkflowSettings(trigger=trigger), Streams(meta()), committed, Registered())
    state = StreamState()
    if trigger is CycleTrigger.TICKS:
        w.on_records(S, state, [rec("a", 100, {0: 5}, 0)], 0)
        w.on_records(S, state, [MarkInput(tick_value(7_000), 0, 1)], 0)
    else:
        w.on_records(S, state, [rec("a", 100, {0: 5}, 0)], 7_000)
    assert committed.fresh_since == [None if trigger is CycleTrigger.TICKS else 7_000]


def test_state_round_trips_through_json() -> None:
    w, state = wf(), StreamState()
    w.on_records(S, state, [rec("a", 100, {0: 5}, 0), rec("b", 50, {1: 2}, 1, alive=False)], 1)
    w.on_records(S, state, [rec("a", 100, {0: 5}, 2)], 10_000)
    again = StreamState.from_json(S, state.to_json())
    assert again == state


def test_state_of_version_1_loads_without_a_first_mark_time() -> None:
    """One state version holds instance, max_event_time and ``first``; version 1
    (before ``first``) loads with it unknown, any other version is refused."""
    w, state = wf(), StreamState()
    w.on_records(S, state, [rec("a", 100, {0: 5}, 0)], 1_000)
    raw = state.to_raw()
    assert raw["v"] == STATE_VERSION == 2 and raw["first"] == 1_000
    del raw["first"]
    old = StreamState.from_raw(S, {**raw, "v": 1})
    assert old.first_mark_ms is None and old.marks == state.marks
    with pytest.raises(ValueError, match="unknown state version 3"):
        StreamState.from_raw(S, {**raw, "v": 3})


def test_marks_running_ahead_raise_the_upper_time_and_survive_the_state() -> None:
    """A mark's max_event_time (events written above the noted time) makes the
    watermark's upper time; the state keeps it, and state written before the
    field existed (five items per mark) still loads."""
    w, state = wf(), StreamState()
    ahead = WriterMarkRecord(S, "a", 100, {0: 5}, True, instance="a", max_event_time=150).encode()
    out = w.on_records(S, state, [MarkInput(ahead, 0, 0), rec("b", 120, {1: 4}, 1)], 5_000)
    (emitted,) = [o for o in out if isinstance(o, Emitted)]
    assert (emitted.watermark.time, emitted.watermark.upper_time) == (100, 150)
    assert emitted.upper_time_max == 150
    again = StreamState.from_json(S, state.to_json())
    assert again == state and again.marks["a"].mark.max_event_time == 150
    raw = state.to_raw()
    raw["marks"] = {w_: items[:5] for w_, items in raw["marks"].items()}
    assert StreamState.from_raw(S, raw).marks["a"].mark.max_event_time is None


def test_laggards_and_arrivals_survive_the_state_round_trip_and_feed_noted_at() -> None:
    w, state = wf(laggard_threshold_ms=0), StreamState()
    a = MarkInput(rec("a", 100, {0: 1}, 0).value, 0, 0, arrival_ms=900)
    b = MarkInput(rec("b", 100, {1: 1}, 1).value, 0, 1, arrival_ms=950)
    (first,) = w.on_records(S, state, [a, b], 1_000)
    assert isinstance(first, Emitted) and first.noted_at == 950  # the newest mark's arrival
    out = w.on_records(S, state, [rec("a", 200, {0: 2}, 2)], 2_000)  # no arrival known
    assert [type(o) for o in out] == [LaggardRows]
    back = StreamState.from_json(S, state.to_json())
    assert back.laggards == state.laggards and back.marks == state.marks
    assert back.marks["b"].seen.last_seen_ms == 950
    # state written before laggards and arrivals were kept still loads
    old = state.to_raw()
    del old["lg"]
    old["marks"] = {k: v[:7] for k, v in old["marks"].items()}
    legacy = StreamState.from_raw(S, old)
    assert legacy.laggards is None and legacy.marks["b"].seen.last_seen_ms is None


def test_a_writer_only_slowest_is_recorded_once_far_enough_behind() -> None:
    w, state = wf(laggard_threshold_ms=1_000), StreamState()
    out = w.on_records(S, state, [rec("a", 100, {0: 1}, 0), rec("b", 600, {1: 1}, 1)], 1_000)
    assert not [o for o in out if isinstance(o, LaggardRows)]  # 500 ms apart: in step
    out = w.on_records(S, state, [rec("b", 2_000, {1: 2}, 2), rec("a", 150, {0: 2}, 3)], 2_000)
    (rows,) = [o for o in out if isinstance(o, LaggardRows)]
    assert [(r["writer"], r["kind"], r["behind_ms"]) for r in rows.rows] == [
        ("a", "slowest", 1_850)
    ]
    # a moves on but stays slowest: no new row
    out = w.on_records(S, state, [rec("a", 180, {0: 3}, 4)], 3_000)
    assert not [o for o in out if isinstance(o, LaggardRows)]


def test_a_laggard_is_named_with_its_instance_and_first_and_last_seen() -> None:
    """The row that names a writer holding the stream says who it is --
    the instance token bound to the id, when that instance's first mark arrived, when
    its latest did -- and a restart under the same id is a new row with a new first seen."""

    def mark(
        writer: str, t: int, offset: int, instance: str, arrival: int, alive: bool = True
    ) -> MarkInput:
        record = WriterMarkRecord(
            S, writer, t, {0 if writer == "a" else 1: offset}, alive, instance=instance
        )
        return MarkInput(record.encode(), 0, offset, arrival_ms=arrival)

    tokens = {
        "a": [Registration("a-1", 0)],
        "b": [Registration("b-1", 0), Registration("b-2", 2_300)],
    }
    settings = WorkflowSettings(interval_ms=1000, laggard_threshold_ms=0)
    w, state = (
        StreamWorkflow(settings, Streams(meta()), Committed(), Registered(tokens)),
        StreamState(),
    )
    w.on_records(S, state, [mark("a", 100, 1, "a-1", 900), mark("b", 100, 1, "b-1", 950)], 1_000)
    w.on_records(S, state, [mark("b", 100, 2, "b-1", 1_500)], 1_600)  # b notes the same time
    out = w.on_records(S, state, [mark("a", 200, 3, "a-1", 1_900)], 2_000)
    (rows,) = [o for o in out if isinstance(o, LaggardRows)]
    assert [
        (r["writer"], r["instance"], r["noted_time"], r["first_seen"], r["last_seen"], r["since"])
        for r in rows.rows
    ] == [("b", "b-1", 100, 950, 1_500, 1_600)]
    back = StreamState.from_json(S, state.to_json())
    assert back.marks["b"].seen.first_seen_ms == 950 and back.laggards == state.laggards
    # b shuts down (the watermark moves on to a's 200) and comes back as a new
    # instance below it: named anew, its first seen the new instance's
    w.on_records(S, state, [mark("b", 100, 4, "b-1", 2_100, alive=False)], 2_200)
    out = w.on_records(S, state, [mark("b", 150, 5, "b-2", 2_400)], 2_500)
    (rows,) = [o for o in out if isinstance(o, LaggardRows)]
    assert [(r["writer"], r["instance"], r["first_seen"], r["last_seen"]) for r in rows.rows] == [
        ("b", "b-2", 2_400, 2_400),
        ("a", "a-1", 900, 1_900),  # at the watermark: named too, with a threshold of 0
    ]
    # state from before first_seen was kept loads as unknown
    old = state.to_raw()
    old["marks"] = {k: v[:8] for k, v in old["marks"].items()}
    assert StreamState.from_raw(S, old).marks["b"].seen.first_seen_ms is None


def test_observed_marks_label_the_watermark_and_survive_the_state_round_trip() -> None:
    w = wf()
    state = StreamState()
    observed = WriterMarkRecord(S, "obs", 900, {0: 4}, True, None, "obs", 950, 30_000, 3)
    out = w.on_records(S, state, [MarkInput(observed.encode(), 0, 0), rec("w1", 800, {1: 2}, 1)], 5)
    [emitted] = [o for o in out if isinstance(o, Emitted)]
    assert emitted.watermark.time == 800, "the minimum over observed and noting writers"
    assert emitted.observation is not None
    assert (emitted.observation.writers, emitted.observation.lateness_ms) == (("obs",), 30_000)
    assert emitted.observation.possibly_late == 3
    again = StreamState.from_json(S, state.to_json())
    kept = again.marks["obs"].mark
    assert (kept.observed_lateness_ms, kept.possibly_late) == (30_000, 3)
    assert again.marks["w1"].mark.observed_lateness_ms is None
