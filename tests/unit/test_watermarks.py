"""tidemark.controller.watermarks: tables of cases and properties of the periodic workflow."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.controller.exceptions import InvalidModelError
from tidemark.controller.model import Epoch, KeyRange, Segment, Watermark, WriterMark, segment_id
from tidemark.controller.watermarks import (
    Cycle,
    GenerationState,
    Verdict,
    accept_mark,
    complete_cut,
    upper_bound,
    watermark_cycle,
)

# A stream that scales four times:
#   epoch 0: A [0, 1)
#   epoch 1: A split into B [0, .5), C [.5, 1)
#   epoch 2: C split into D [.5, .75), E [.75, 1)     -> B, D, E
#   epoch 3: B and D merged into F [0, .75)           -> F, E
#   epoch 4: F split into G [0, .25), H [.25, .75)    -> G, H, E
A = Segment(segment_id(0, 0), KeyRange(0.0, 1.0))
B = Segment(segment_id(1, 1), KeyRange(0.0, 0.5))
C = Segment(segment_id(1, 2), KeyRange(0.5, 1.0))
D = Segment(segment_id(2, 3), KeyRange(0.5, 0.75))
E = Segment(segment_id(2, 4), KeyRange(0.75, 1.0))
F = Segment(segment_id(3, 5), KeyRange(0.0, 0.75))
G = Segment(segment_id(4, 6), KeyRange(0.0, 0.25))
H = Segment(segment_id(4, 7), KeyRange(0.25, 0.75))
EPOCHS = (
    Epoch(0, (A,)),
    Epoch(1, (B, C)),
    Epoch(2, (B, D, E)),
    Epoch(3, (F, E)),
    Epoch(4, (G, H, E)),
)
SEGMENTS = {seg.id: seg for seg in (A, B, C, D, E, F, G, H)}
STREAM = "shop/orders"


def mark(time: int, position: Mapping[int, int] | None = None, alive: bool = True) -> WriterMark:
    return WriterMark(time, dict(position or {}), alive)


def wm(time: int, upper: int, cut: Mapping[int, int], seq: int) -> Watermark:
    return Watermark(STREAM, time, upper, dict(cut), seq)


def cycle(
    marks: Mapping[str, WriterMark],
    state: GenerationState | None = None,
    now_ms: int = 0,
    timeout_ms: int = 1000,
    epochs: Sequence[Epoch] = EPOCHS,
) -> Cycle:
    return watermark_cycle(STREAM, marks, state or GenerationState(), epochs, now_ms, timeout_ms)


# --- accept_mark -------------------------------------------------------------

ACCEPT_CASES = [
    ("first mark", None, mark(5, {A.id: 3}), Verdict.ACCEPTED),
    ("equal time accepted", mark(5, {A.id: 3}), mark(5, {A.id: 3}), Verdict.ACCEPTED),
    ("time and offset advance", mark(5, {A.id: 3}), mark(9, {A.id: 4}), Verdict.ACCEPTED),
    ("time went backwards", mark(5, {A.id: 3}), mark(4, {A.id: 9}), Verdict.STALE_TIME),
    ("time checked first", mark(5, {A.id: 3}), mark(4, {A.id: 1}), Verdict.STALE_TIME),
    ("offset went backwards", mark(5, {A.id: 3}), mark(6, {A.id: 2}), Verdict.REGRESSED_POSITION),
    (
        "one of two offsets went backwards",
        mark(5, {B.id: 3, C.id: 7}),
        mark(6, {B.id: 4, C.id: 6}),
        Verdict.REGRESSED_POSITION,
    ),
    ("moved to successor", mark(5, {A.id: 30}), mark(6, {B.id: 1}), Verdict.ACCEPTED),
    ("back to predecessor", mark(5, {B.id: 1}), mark(6, {A.id: 31}), Verdict.REGRESSED_POSITION),
    (
        "newest segment dropped",
        mark(5, {B.id: 3, E.id: 2}),
        mark(6, {B.id: 4}),
        Verdict.REGRESSED_POSITION,
    ),
    ("older segment dropped", mark(5, {B.id: 3, E.id: 2}), mark(6, {E.id: 2}), Verdict.ACCEPTED),
    ("segment added", mark(5, {B.id: 3}), mark(6, {B.id: 3, E.id: 0}), Verdict.ACCEPTED),
    ("empty new position", mark(5, {B.id: 3}), mark(6), Verdict.ACCEPTED),
    ("empty old position", mark(5), mark(6, {A.id: 1}), Verdict.ACCEPTED),
    ("shutdown mark", mark(5, {A.id: 3}), mark(7, {A.id: 3}, alive=False), Verdict.ACCEPTED),
]


@pytest.mark.parametrize(
    ("previous", "new", "verdict"),
    [case[1:] for case in ACCEPT_CASES],
    ids=[case[0] for case in ACCEPT_CASES],
)
def test_accept_mark(previous, new, verdict):
    assert accept_mark(previous, new) is verdict


# --- upper_bound -------------------------------------------------------------

UPPER_CASES = [
    ("one writer", [{A.id: 4}], {A.id: 4}),
    ("same segment keeps larger offset", [{A.id: 4}, {A.id: 9}, {A.id: 2}], {A.id: 9}),
    ("writer on successor pushes predecessor out", [{A.id: 40}, {B.id: 1}], {B.id: 1}),
    ("predecessor skipped when successor present", [{B.id: 1}, {A.id: 40}], {B.id: 1}),
    ("disjoint segments kept", [{B.id: 3}, {E.id: 5}], {B.id: 3, E.id: 5}),
    ("merge successor replaces both", [{B.id: 3, D.id: 4}, {F.id: 1}], {F.id: 1}),
    ("mixed epochs", [{B.id: 3}, {D.id: 2, E.id: 8}, {C.id: 9}], {B.id: 3, D.id: 2, E.id: 8}),
    ("empty positions", [{}, {}], {}),
    # D < F < G: F overlaps both, D and G do not overlap. Pravega's fold would
    # keep D (a predecessor of F) when G comes first and skips F.
    (
        "skipped segment still pushes out its predecessors",
        [{G.id: 1}, {D.id: 5}, {F.id: 2}],
        {G.id: 1},
    ),
]


@pytest.mark.parametrize(
    ("positions", "expected"),
    [case[1:] for case in UPPER_CASES],
    ids=[case[0] for case in UPPER_CASES],
)
def test_upper_bound(positions, expected):
    for order in itertools.permutations(positions):
        assert upper_bound(order, SEGMENTS) == expected


def test_upper_bound_unknown_segment():
    with pytest.raises(InvalidModelError, match="not a known segment"):
        upper_bound([{segment_id(9, 9): 1}], SEGMENTS)


# --- complete_cut ------------------------------------------------------------

COMPLETE_CASES = [
    ("already complete", {A.id: 4}, None, {A.id: 4}),
    ("missing range filled from highest epoch", {B.id: 3}, None, {B.id: 3, C.id: 0}),
    ("filled from the epoch of the newest segment", {E.id: 3}, None, {B.id: 0, D.id: 0, E.id: 3}),
    ("previous cut folded in", {A.id: 5}, {A.id: 8}, {A.id: 8}),
    ("previous cut behind", {A.id: 9}, {A.id: 8}, {A.id: 9}),
    ("previous successors win", {A.id: 50}, {B.id: 2, C.id: 4}, {B.id: 2, C.id: 4}),
    ("previous predecessor replaced", {B.id: 1}, {A.id: 50}, {B.id: 1, C.id: 0}),
    ("previous covers the gap", {B.id: 1}, {C.id: 6}, {B.id: 1, C.id: 6}),
    ("previous partly superseded", {D.id: 2}, {B.id: 3, C.id: 6}, {B.id: 3, D.id: 2, E.id: 0}),
    # D is sealed before epoch 4; filling [.25, .5) with H ([.25, .75)) pushes D out.
    (
        "partial coverage pushes predecessor out",
        {D.id: 7, G.id: 1},
        None,
        {G.id: 1, H.id: 0, E.id: 0},
    ),
    ("empty cut: head of the lowest epoch", {}, None, {A.id: 0}),
    ("empty upper, previous cut", {}, {B.id: 1, C.id: 2}, {B.id: 1, C.id: 2}),
]


@pytest.mark.parametrize(
    ("upper", "previous", "expected"),
    [case[1:] for case in COMPLETE_CASES],
    ids=[case[0] for case in COMPLETE_CASES],
)
def test_complete_cut(upper, previous, expected):
    cut = complete_cut(upper, previous, EPOCHS)
    assert cut == expected
    assert covers_unit_range(cut, SEGMENTS)


def test_complete_cut_needs_the_epoch_it_fills_from():
    # B (created in epoch 1) is known from epoch 2's record, but epoch 1 is not given
    with pytest.raises(InvalidModelError, match="epoch 1 is not among"):
        complete_cut({B.id: 3}, None, [EPOCHS[2]])
    with pytest.raises(InvalidModelError, match="not a known segment"):
        complete_cut({B.id: 3}, None, [EPOCHS[0]])
    with pytest.raises(InvalidModelError, match="got none"):
        complete_cut({}, None, [])


# --- watermark_cycle: tables -------------------------------------------------


def test_no_writers_nothing_emitted():
    out = cycle({})
    assert out == Cycle(GenerationState(None, {}), None, frozenset())


def test_first_cycle_emits_min_and_max():
    out = cycle({"w1": mark(100, {A.id: 5}), "w2": mark(130, {A.id: 9})})
    expected = wm(100, 130, {A.id: 9}, 0)
    assert out.watermark == expected
    assert out.state == GenerationState(expected, {})
    assert out.removed == frozenset()


def test_seq_counts_and_times_increase():
    state = GenerationState()
    emitted = []
    for step, (t1, t2) in enumerate([(100, 110), (120, 150), (121, 200)]):
        marks = {"w1": mark(t1, {A.id: step}), "w2": mark(t2, {A.id: step + 1})}
        out = cycle(marks, state)
        state = out.state
        assert out.watermark is not None
        emitted.append(out.watermark)
    assert [(w.seq, w.time, w.upper_time) for w in emitted] == [
        (0, 100, 110),
        (1, 120, 150),
        (2, 121, 200),
    ]


def test_equal_time_is_lagging_not_emitted():
    previous = wm(100, 100, {A.id: 5}, 0)
    out = cycle({"w1": mark(100, {A.id: 5}), "w2": mark(150, {A.id: 9})}, GenerationState(previous))
    assert out.watermark is None
    assert out.state == GenerationState(previous, {"w1": 0})


def test_lagging_since_is_kept_from_the_first_cycle_and_times_out():
    previous = wm(100, 100, {A.id: 5}, 0)
    marks = {"w1": mark(90, {A.id: 4}), "w2": mark(150, {A.id: 9})}
    first = cycle(marks, GenerationState(previous), now_ms=1000, timeout_ms=500)
    assert (first.watermark, first.state.lagging_since, first.removed) == (
        None,
        {"w1": 1000},
        frozenset(),
    )
    second = cycle(marks, first.state, now_ms=1499, timeout_ms=500)
    assert (second.watermark, second.state.lagging_since, second.removed) == (
        None,
        {"w1": 1000},
        frozenset(),
    )
    third = cycle(marks, second.state, now_ms=1500, timeout_ms=500)
    assert third.removed == {"w1"}
    assert third.watermark == wm(150, 150, {A.id: 9}, 1)
    assert third.state == GenerationState(third.watermark, {})


def test_timeout_zero_drops_a_lagging_writer_at_once():
    previous = wm(100, 100, {A.id: 5}, 0)
    marks = {"w1": mark(90, {A.id: 4}), "w2": mark(150, {A.id: 9})}
    out = cycle(marks, GenerationState(previous), now_ms=7, timeout_ms=0)
    assert out.removed == {"w1"}
    assert out.watermark == wm(150, 150, {A.id: 9}, 1)


def test_writer_catching_up_leaves_lagging_since():
    previous = wm(100, 100, {A.id: 5}, 0)
    state = GenerationState(previous, {"w1": 10})
    out = cycle({"w1": mark(120, {A.id: 6}), "w2": mark(150, {A.id: 9})}, state, now_ms=20)
    assert out.watermark == wm(120, 150, {A.id: 9}, 1)
    assert out.state.lagging_since == {}


def test_lagging_writer_no_longer_marked_is_forgotten():
    previous = wm(100, 100, {A.id: 5}, 0)
    out = cycle({"w2": mark(150, {A.id: 9})}, GenerationState(previous, {"gone": 3}))
    assert out.watermark == wm(150, 150, {A.id: 9}, 1)
    assert out.state.lagging_since == {}


def test_only_lagging_writers_nothing_emitted():
    previous = wm(100, 100, {A.id: 5}, 0)
    out = cycle({"w1": mark(90, {A.id: 4})}, GenerationState(previous), now_ms=5)
    assert (out.watermark, out.state, out.removed) == (
        None,
        GenerationState(previous, {"w1": 5}),
        frozenset(),
    )


def test_shutdown_lagging_writer_removed_at_once():
    previous = wm(100, 100, {A.id: 5}, 0)
    marks = {"w1": mark(100, {A.id: 5}, alive=False), "w2": mark(150, {A.id: 9})}
    out = cycle(marks, GenerationState(previous), timeout_ms=10_000)
    assert out.removed == {"w1"}
    assert out.watermark == wm(150, 150, {A.id: 9}, 1)
    assert "w1" not in out.state.lagging_since


def test_shutdown_writer_takes_part_once_then_is_removed_without_timeout():
    marks = {"w1": mark(300, {B.id: 5}), "w2": mark(200, {C.id: 7}, alive=False)}
    first = cycle(marks, now_ms=0, timeout_ms=10_000)
    # its last mark still bounds the watermark: nothing it wrote is left behind
    assert first.watermark == wm(200, 300, {B.id: 5, C.id: 7}, 0)
    assert first.removed == frozenset()
    # the watermark reached its time: it lags, and being shut down it goes at once
    second = cycle(marks, first.state, now_ms=1, timeout_ms=10_000)
    assert second.removed == {"w2"}
    assert second.watermark == wm(300, 300, {B.id: 5, C.id: 7}, 1)


def test_shutdown_writer_behind_the_watermark_is_removed_at_once():
    previous = wm(100, 100, {A.id: 5}, 0)
    marks = {
        "w1": mark(90, {A.id: 4}),
        "w2": mark(100, {A.id: 7}, alive=False),
        "w3": mark(300, {A.id: 6}),
    }
    blocked = cycle(marks, GenerationState(previous), now_ms=0, timeout_ms=50)
    # w2 is shut down and lagging: removed now; w1 lags and is kept until its timeout
    assert (blocked.watermark, blocked.removed) == (None, frozenset({"w2"}))
    assert dict(blocked.state.lagging_since) == {"w1": 0}
    live = {k: v for k, v in marks.items() if k != "w2"}
    out = cycle(live, blocked.state, now_ms=50, timeout_ms=50)
    assert out.removed == {"w1"}
    assert out.watermark == wm(300, 300, {A.id: 6}, 1)


def test_only_shutdown_writers_emit_their_final_watermark():
    out = cycle({"w1": mark(250, {A.id: 7}, alive=False), "w2": mark(260, {A.id: 3}, alive=False)})
    assert out.watermark == wm(250, 260, {A.id: 7}, 0)
    assert out.removed == frozenset()
    after = cycle({"w1": mark(250, {A.id: 7}, alive=False)}, out.state)
    assert (after.watermark, after.removed) == (None, {"w1"})


def test_scaling_in_the_middle_of_a_stream():
    # Two writers on A; A is split into B and C; one writer moves on first.
    first = cycle({"w1": mark(100, {A.id: 10}), "w2": mark(105, {A.id: 12})})
    assert first.watermark == wm(100, 105, {A.id: 12}, 0)
    # w1 now writes to the successor B only, w2 is still on A
    second = cycle({"w1": mark(200, {B.id: 3}), "w2": mark(150, {A.id: 20})}, first.state)
    assert second.watermark == wm(150, 200, {B.id: 3, C.id: 0}, 1)
    # w2 moves to C; the cut follows both successors
    third = cycle({"w1": mark(210, {B.id: 4}), "w2": mark(220, {C.id: 2})}, second.state)
    assert third.watermark == wm(210, 220, {B.id: 4, C.id: 2}, 2)
    # a later merge of B and D: a writer on F pushes B and D out; E filled from epoch 3
    fourth = cycle({"w1": mark(300, {F.id: 1}), "w2": mark(310, {C.id: 9})}, third.state)
    assert fourth.watermark == wm(300, 310, {F.id: 1, E.id: 0}, 3)


def test_previous_cut_is_folded_in():
    previous = wm(100, 120, {B.id: 9, C.id: 4}, 0)
    out = cycle({"w1": mark(150, {B.id: 2}), "w2": mark(160, {C.id: 3})}, GenerationState(previous))
    assert out.watermark == wm(150, 160, {B.id: 9, C.id: 4}, 1)


def test_writer_without_acknowledged_data():
    out = cycle({"w1": mark(100), "w2": mark(130, {B.id: 2})})
    assert out.watermark == wm(100, 130, {B.id: 2, C.id: 0}, 0)


# --- properties --------------------------------------------------------------
# stream_epochs, scenarios and emitted_watermarks are shared with test_timewindow.

GRID = 16  # key-range boundaries on multiples of 1/16: exact floats


@st.composite
def stream_epochs(draw: st.DrawFn, max_scales: int = 4) -> tuple[Epoch, ...]:
    """A stream's epochs: an initial split of [0, 1), then scales that replace a
    run of adjacent segments by new ones over the same range."""
    inner = sorted(draw(st.sets(st.integers(1, GRID - 1), max_size=3)))
    bounds = [0, *inner, GRID]
    number = itertools.count()
    current = [
        Segment(segment_id(0, next(number)), KeyRange(lo / GRID, hi / GRID))
        for lo, hi in itertools.pairwise(bounds)
    ]
    epochs = [Epoch(0, tuple(current))]
    for epoch in range(1, draw(st.integers(0, max_scales)) + 1):
        i = draw(st.integers(0, len(current) - 1))
        j = draw(st.integers(i + 1, len(current)))
        lo, hi = round(current[i].key_range.low * GRID), round(current[j - 1].key_range.high * GRID)
        cuts = sorted(draw(st.sets(st.integers(lo + 1, hi - 1), max_size=3))) if hi - lo > 1 else []
        new = [
            Segment(segment_id(epoch, next(number)), KeyRange(a / GRID, b / GRID))
            for a, b in itertools.pairwise([lo, *cuts, hi])
        ]
        current = current[:i] + new + current[j:]
        epochs.append(Epoch(epoch, tuple(current)))
    return tuple(epochs)


def covers_unit_range(cut: Mapping[int, int], segments: Mapping[int, Segment]) -> bool:
    """The cut's key ranges tile [0, 1): no gap, no overlap."""
    ranges = sorted(segments[seg].key_range for seg in cut)
    if not ranges or ranges[0].low != 0.0 or ranges[-1].high != 1.0:
        return False
    return all(a.high == b.low for a, b in itertools.pairwise(ranges))


def not_behind(cut: Mapping[int, int], position: Mapping[int, int], segments) -> bool:
    """Wherever they share keys, the cut's segment is later, or the same at an offset >=."""
    for seg_id, offset in position.items():
        seg = segments[seg_id]
        for other_id, cut_offset in cut.items():
            other = segments[other_id]
            if not seg.overlaps(other):
                continue
            if other_id == seg_id:
                if cut_offset < offset:
                    return False
            elif other.epoch <= seg.epoch:
                return False
    return True


@st.composite
def scenarios(draw: st.DrawFn):
    """Epochs, then a run of steps: a writer notes a mark, or a cycle runs."""
    epochs = draw(stream_epochs())
    writers = ["w1", "w2", "w3"]
    steps: list[tuple[str, str, WriterMark] | tuple[str, int, int]] = []
    for _ in range(draw(st.integers(1, 30))):
        if draw(st.booleans()):
            writer = draw(st.sampled_from(writers))
            epoch = draw(st.sampled_from(epochs))
            segs = draw(st.lists(st.sampled_from(epoch.segments), max_size=3, unique=True))
            position = {seg.id: draw(st.integers(0, 50)) for seg in segs}
            time = draw(st.integers(0, 400))
            alive = draw(st.integers(0, 9)) > 0
            steps.append(("note", writer, WriterMark(time, position, alive)))
        else:
            steps.append(("cycle", draw(st.integers(0, 100)), draw(st.sampled_from([0, 50, 200]))))
    return epochs, steps


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_properties_of_emitted_watermarks(scenario):
    epochs, steps = scenario
    segments = {seg.id: seg for epoch in epochs for seg in epoch.segments}
    for marks, state, out in scenario_cycles(epochs, steps):
        previous = state.previous
        taking_part = {w: m for w, m in marks.items() if previous is None or m.time > previous.time}
        mark_ = out.watermark
        if mark_ is not None:
            assert mark_.seq == (0 if previous is None else previous.seq + 1)
            if previous is not None:
                assert mark_.time > previous.time
                assert not_behind(mark_.stream_cut, previous.stream_cut, segments)
            assert covers_unit_range(mark_.stream_cut, segments)
            for m in taking_part.values():
                assert not_behind(mark_.stream_cut, m.position, segments)
                assert m.time <= mark_.upper_time
                if m.alive:
                    assert mark_.time <= m.time
            assert out.state.previous == mark_
            assert not out.state.lagging_since
        else:
            assert out.state.previous == previous
        assert out.removed <= marks.keys()
        assert not out.removed & out.state.lagging_since.keys()
        assert out.state.lagging_since.keys() <= marks.keys() - taking_part.keys()


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_upper_bound_is_order_free_and_never_behind(data):
    epochs = data.draw(stream_epochs())
    segments = {seg.id: seg for epoch in epochs for seg in epoch.segments}
    position = st.dictionaries(st.sampled_from(sorted(segments)), st.integers(0, 20), max_size=3)
    positions = data.draw(st.lists(position, max_size=4))
    upper = upper_bound(positions, segments)
    assert upper == upper_bound(list(reversed(positions)), segments)
    previous = data.draw(st.one_of(st.none(), position))
    cut = complete_cut(upper, previous, epochs)
    assert covers_unit_range(cut, segments)
    for pos in [*positions, previous or {}]:
        assert not_behind(cut, pos, segments)


def scenario_cycles(
    epochs: Sequence[Epoch], steps
) -> Iterator[tuple[Mapping[str, WriterMark], GenerationState, Cycle]]:
    """Run a scenario's steps the way the controller job does: per cycle, the marks and
    state it ran on and its result (the writers it removed are dropped after the yield)."""
    marks: dict[str, WriterMark] = {}
    state = GenerationState()
    now_ms = 0
    for step in steps:
        if step[0] == "note":
            _, writer, new = step
            if accept_mark(marks.get(writer), new) is Verdict.ACCEPTED:
                marks[writer] = new
            continue
        now_ms += step[1]
        result = watermark_cycle(STREAM, marks, state, epochs, now_ms, step[2])
        yield marks, state, result
        for writer in result.removed:
            del marks[writer]
        state = result.state


def emitted_watermarks(epochs: Sequence[Epoch], steps) -> list[Watermark]:
    """Run a scenario's steps the way the controller job does; the watermarks, in order."""
    return [
        result.watermark
        for _, _, result in scenario_cycles(epochs, steps)
        if result.watermark is not None
    ]


def test_upper_time_covers_events_that_ran_ahead_of_the_noted_time():
    """upper_time = max over writers of max(noted time, max_event_time)."""
    marks = {
        "w1": WriterMark(100, {A.id: 5}, max_event_time=170),
        "w2": WriterMark(120, {A.id: 9}, max_event_time=110),
        "w3": WriterMark(130, {A.id: 9}),
    }
    out = cycle(marks)
    assert out.watermark is not None
    assert (out.watermark.time, out.watermark.upper_time) == (100, 170)
    assert WriterMark(5, max_event_time=3).upper_time == 5
    assert WriterMark(5).upper_time == 5
