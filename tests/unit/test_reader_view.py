"""A reader group's state as values: finished, readable, ownership, positions, windows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.config import StreamConfiguration
from tidemark.controller.delta.tables import append_watermarks
from tidemark.controller.metadata import new_stream_metadata
from tidemark.controller.model import (
    END_OF_SEGMENT,
    Epoch,
    KeyRange,
    Segment,
    Watermark,
    segment_id,
)
from tidemark.controller.states import StreamState
from tidemark.pipelines.reading.view import (
    cut_commits,
    fair_share,
    group_view,
    plan_ownership,
    sizes_pending,
)
from tidemark.pipelines.reading.windows import PositionWindow, WatermarkFeed, reader_position

A = Segment(segment_id(0, 0), KeyRange(0.0, 0.5))
B = Segment(segment_id(0, 1), KeyRange(0.5, 1.0))
C = Segment(segment_id(1, 2), KeyRange(0.0, 1.0))  # merge of A and B


def _merged(sealed_sizes=None):
    meta = new_stream_metadata("s/x", StreamConfiguration(), now_ms=0)
    return meta.with_changes(
        state=StreamState.ACTIVE,
        epochs=(Epoch(0, (A, B)), Epoch(1, (C,))),
        sealed_sizes=sealed_sizes if sealed_sizes is not None else {A.id: 5, B.id: 3},
    )


def test_sizes_pending_between_a_scale_epoch_and_its_sizes():
    # The scale's epoch step done, sizes not measured yet: both sealed segments wait.
    assert sizes_pending(_merged({})) == {A.id, B.id}
    assert sizes_pending(_merged({A.id: 5})) == {B.id}
    assert sizes_pending(_merged()) == frozenset()
    # Current-epoch segments never wait while the stream is writable...
    assert C.id not in sizes_pending(_merged({}))
    # ... and all do while it is being sealed, until the seal records their sizes.
    sealing = _merged().with_changes(state=StreamState.SEALING)
    assert sizes_pending(sealing) == {C.id}
    assert sizes_pending(sealing.with_changes(state=StreamState.SEALED)) == {C.id}
    done = sealing.with_changes(state=StreamState.SEALED, sealed_sizes={A.id: 5, B.id: 3, C.id: 0})
    assert sizes_pending(done) == frozenset()


def test_successor_waits_for_every_predecessor():
    meta = _merged()
    view = group_view(meta, {A.id: 5, B.id: 1}, {})
    assert view.finished == {A.id}
    assert view.readable == {B.id}
    assert view.cut == {B.id: 1}
    view = group_view(meta, {A.id: 5, B.id: 3}, {})
    assert view.readable == {C.id}
    assert view.cut == {C.id: 0}


def test_start_cut_finishes_what_lies_before_it():
    meta = _merged()
    view = group_view(meta, {}, {C.id: 7})
    assert view.finished == {A.id, B.id}
    assert view.cut == {C.id: 7}


def test_sealed_size_unknown_keeps_segment_open():
    view = group_view(_merged({}), {A.id: 9, B.id: 9}, {})
    assert view.readable == {A.id, B.id}


def test_sealed_stream_read_through_has_empty_cut():
    meta = _merged({A.id: 5, B.id: 3, C.id: 2}).with_changes(state=StreamState.SEALED)
    assert group_view(meta, {A.id: 5, B.id: 3, C.id: 2}, {}).cut == {}


def test_cut_commits_reset_later_segments_and_skip_earlier_ones():
    meta = _merged()
    assert cut_commits(meta, {A.id: 2, B.id: 0}) == {A.id: 2, B.id: 0, C.id: 0}
    assert cut_commits(meta, {C.id: 4}) == {C.id: 4}


def test_plan_takes_free_segments_up_to_a_fair_share():
    plan = plan_ownership("r1", ["r1", "r2"], [1, 2, 3, 4], {1: "r2"})
    assert plan.acquire == (2, 3)
    assert plan.release == ()


def test_plan_gives_up_surplus_and_finished_segments():
    plan = plan_ownership("r1", ["r1", "r2"], [1, 2, 3], {1: "r1", 2: "r1", 3: "r1", 9: "r1"})
    assert plan.release == (9, 3)
    assert plan.acquire == ()


@given(
    readers=st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4, unique=True),
    readable=st.lists(st.integers(0, 20), max_size=12, unique=True),
    owner_picks=st.lists(st.integers(0, 4), max_size=12),
)
def test_plan_properties(readers, readable, owner_picks):
    names = [*readers, "gone"]
    owners = {
        seg: names[pick % len(names)] for seg, pick in zip(readable, owner_picks, strict=False)
    }
    me = readers[0]
    plan = plan_ownership(me, readers, readable, owners)
    share = fair_share(len(readable), len(readers))
    assert all(owners.get(seg) is None for seg in plan.acquire)  # never steals
    assert all(owners.get(seg) == me for seg in plan.release)
    mine = {s for s, o in owners.items() if o == me} - set(plan.release) | set(plan.acquire)
    assert len(mine) <= share
    assert mine <= set(readable)


def test_reader_position_marks_finished_until_a_successor_takes_over():
    segs = {s.id: s for s in (A, B, C)}
    assert reader_position({B.id: 2}, {A.id}, segs) == {B.id: 2, A.id: END_OF_SEGMENT}
    assert reader_position({C.id: 1}, {A.id, B.id}, segs) == {C.id: 1}


def test_window_follows_the_position_and_the_feed(tmp_path):
    root = str(tmp_path)
    segs = {A.id: Segment(A.id, KeyRange(0.0, 1.0))}
    feed = WatermarkFeed(root, "s/x", refresh_interval_ms=0)
    window = PositionWindow(feed, lambda: segs)
    assert (window.at({A.id: 0}).lower, window.at({A.id: 0}).upper) == (None, None)
    append_watermarks(root, [Watermark("s/x", 100, 120, {A.id: 5}, 0)])
    assert window.at({A.id: 2}).upper == 120  # the feed was asked again
    append_watermarks(root, [Watermark("s/x", 200, 260, {A.id: 9}, 1)], previous_upper_time_max=120)
    w = window.at({A.id: 6})
    assert (w.lower, w.upper) == (100, 260)
    w = window.at({A.id: 3})  # backwards (a segment re-acquired): rebuilt, still right
    assert (w.lower, w.upper) == (None, 120)
    assert [m.seq for m in feed.since(150)] == [1]


class _ListFeed:
    """A feed holding fixed watermarks (no table behind it)."""

    def __init__(self, marks):
        self.watermarks = marks

    def refresh(self, force=False):
        return len(self.watermarks)

    def iterator(self, start=0):
        return iter(self.watermarks[start:])


@given(
    steps=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=40),
    gaps=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=8),
)
def test_fast_path_agrees_with_a_fresh_tracker(steps, gaps):
    from tidemark.controller.timewindow import WindowTracker

    segs = {A.id: A, B.id: B}
    marks, a, b = [], 0, 0
    for i, (da, db) in enumerate(gaps):
        a, b = a + da, b + db
        marks.append(Watermark("s/x", 10 * (i + 1), 10 * (i + 1) + 7, {A.id: a, B.id: b}, i))
    window = PositionWindow(_ListFeed(marks), lambda: segs)
    pa_, pb = 0, 0
    for da, db in steps:
        pa_, pb = pa_ + da, pb + db
        position = {A.id: pa_, B.id: pb}
        assert window.at(position) == WindowTracker(marks, segs).advance_to(position)


@given(
    gaps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=8),
    order=st.lists(st.booleans(), min_size=1, max_size=60),
    one=st.booleans(),
)
def test_fast_path_equals_the_reference_at_every_offset(gaps, order, one):
    """One offset at a time (so every cut offset is visited exactly, then one past it),
    on one segment or two: ``PositionWindow.at`` equals a fresh ``WindowTracker``."""
    from tidemark.controller.timewindow import WindowTracker

    segs = {A.id: A} if one else {A.id: A, B.id: B}
    marks, a, b = [], 0, 0
    for i, (da, db) in enumerate(gaps):
        a, b = a + da, b + db
        cut = {A.id: a} if one else {A.id: a, B.id: b}
        marks.append(Watermark("s/x", 10 * (i + 1), 10 * (i + 1) + 7, cut, i))
    window = PositionWindow(_ListFeed(marks), lambda: segs)
    position = {seg: 0 for seg in segs}
    for on_a in [None, *order]:
        if on_a is not None:
            seg = A.id if on_a or one else B.id
            position = {**position, seg: position[seg] + 1}
        assert window.at(position) == WindowTracker(marks, segs).advance_to(position), position
