"""controller.timewindow: compare and the incremental WindowTracker."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.exceptions import InvalidModelError
from controller.model import END_OF_SEGMENT, Segment, TimeWindow, Watermark, segment_id
from controller.timewindow import WindowTracker, compare
from tests.unit.test_watermarks import (
    SEGMENTS,
    STREAM,
    A,
    B,
    C,
    D,
    E,
    F,
    emitted_watermarks,
    scenarios,
)

COMPARE_CASES = [
    ("same offset reached", {A.id: 5}, {A.id: 5}, 1),
    ("offset past", {A.id: 6}, {A.id: 5}, 1),
    ("offset before", {A.id: 4}, {A.id: 5}, -1),
    ("read to end of sealed segment", {A.id: END_OF_SEGMENT}, {A.id: 10**9}, 1),
    ("cut at end, position not", {A.id: 10**9}, {A.id: END_OF_SEGMENT}, -1),
    ("both at end", {A.id: END_OF_SEGMENT}, {A.id: END_OF_SEGMENT}, 1),
    ("successor ahead whatever the offsets", {B.id: 0, C.id: 0}, {A.id: 10**9}, 1),
    ("predecessor before whatever the offsets", {A.id: 10**9}, {B.id: 0, C.id: 0}, -1),
    ("partly before, partly after", {B.id: 5, C.id: 1}, {B.id: 3, C.id: 4}, 0),
    (
        "ahead on one key range, on a successor on the other",
        {B.id: 3, D.id: 0},
        {B.id: 3, C.id: 9},
        1,
    ),
    ("before on a predecessor", {B.id: 9, C.id: 0}, {B.id: 3, D.id: 0, E.id: 0}, 0),
    ("merge successor ahead of both", {F.id: 0}, {B.id: 7, D.id: 7}, 1),
    ("no shared key range", {B.id: 1}, {E.id: 3}, 1),
    ("reader owning part of the key space", {E.id: 1}, {B.id: 0, D.id: 0, E.id: 3}, -1),
    ("empty position", {}, {A.id: 3}, 1),
    ("empty cut", {A.id: 3}, {}, 1),
]


@pytest.mark.parametrize(
    ("position", "cut", "expected"),
    [case[1:] for case in COMPARE_CASES],
    ids=[case[0] for case in COMPARE_CASES],
)
def test_compare(position, cut, expected):
    assert compare(position, cut, SEGMENTS) == expected


def test_compare_unknown_segment():
    with pytest.raises(InvalidModelError, match="not a known segment"):
        compare({segment_id(7, 7): 1}, {A.id: 1}, SEGMENTS)


def wm(time: int, upper: int, cut: Mapping[int, int], seq: int) -> Watermark:
    return Watermark(STREAM, time, upper, dict(cut), seq)


MARKS = [
    wm(100, 130, {A.id: 5}, 0),
    wm(200, 260, {A.id: 9}, 1),
    wm(300, 310, {B.id: 2, C.id: 0}, 2),
    wm(400, 450, {B.id: 4, C.id: 3}, 3),
]

TRACK_CASES = [
    ("before the first", {A.id: 0}, TimeWindow(None, 130)),
    ("at the first", {A.id: 5}, TimeWindow(100, 260)),
    ("between", {A.id: 7}, TimeWindow(100, 260)),
    ("at the second", {A.id: 9}, TimeWindow(200, 310)),
    ("end of A", {A.id: END_OF_SEGMENT}, TimeWindow(200, 310)),
    ("on successors, mixed with the third", {B.id: 1, C.id: 0}, TimeWindow(200, 450)),
    ("at the third", {B.id: 2, C.id: 0}, TimeWindow(300, 450)),
    ("mixed with the last", {B.id: 5, C.id: 2}, TimeWindow(300, None)),
    ("past every watermark", {B.id: 5, C.id: 3}, TimeWindow(400, None)),
    ("empty position", {}, TimeWindow(400, None)),
]


@pytest.mark.parametrize(
    ("position", "expected"),
    [case[1:] for case in TRACK_CASES],
    ids=[case[0] for case in TRACK_CASES],
)
def test_window_at_one_position(position, expected):
    assert WindowTracker(MARKS, SEGMENTS).advance_to(position) == expected


def test_advancing_step_by_step_agrees_with_fresh_trackers():
    tracker = WindowTracker(iter(MARKS), SEGMENTS)
    for _, position, expected in TRACK_CASES:
        assert tracker.advance_to(position) == expected


class CountingSource:
    """An iterator over a list that can grow; counts what has been read."""

    def __init__(self, items: list[Watermark]) -> None:
        self.items = items
        self.read = 0

    def __iter__(self) -> Iterator[Watermark]:
        return self

    def __next__(self) -> Watermark:
        if self.read == len(self.items):
            raise StopIteration
        self.read += 1
        return self.items[self.read - 1]


def test_watermarks_are_read_lazily():
    source = CountingSource(list(MARKS))
    tracker = WindowTracker(source, SEGMENTS)
    assert tracker.advance_to({A.id: 0}) == TimeWindow(None, 130)
    assert source.read == 1
    assert tracker.advance_to({A.id: 7}) == TimeWindow(100, 260)
    assert source.read == 2
    assert tracker.advance_to({B.id: 1, C.id: 0}) == TimeWindow(200, 450)
    assert source.read == 4


def test_live_source_keeps_feeding():
    source = CountingSource(MARKS[:2])
    tracker = WindowTracker(source, SEGMENTS)
    assert tracker.advance_to({A.id: 9}) == TimeWindow(200, None)
    source.items.append(MARKS[2])
    assert tracker.advance_to({A.id: 9}) == TimeWindow(200, 310)


def test_segments_of_new_epochs_may_be_added_later():
    segments = {A.id: A}
    tracker = WindowTracker(MARKS[:2], segments)
    assert tracker.advance_to({A.id: 9}) == TimeWindow(200, None)
    segments.update({B.id: B, C.id: C})
    tracker = WindowTracker(MARKS, segments)
    assert tracker.advance_to({B.id: 2, C.id: 0}) == TimeWindow(300, 450)


# --- properties --------------------------------------------------------------


def brute_window(
    marks: Sequence[Watermark], position: Mapping[int, int], segments: Mapping[int, Segment]
) -> TimeWindow:
    passed = [m.time for m in marks if compare(position, m.stream_cut, segments) > 0]
    ahead = [m.upper_time for m in marks if compare(position, m.stream_cut, segments) < 0]
    return TimeWindow(passed[-1] if passed else None, ahead[0] if ahead else None)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_tracker_agrees_with_brute_force(data):
    epochs, steps = data.draw(scenarios())
    segments = {seg.id: seg for epoch in epochs for seg in epoch.segments}
    marks = emitted_watermarks(epochs, steps)
    # any position, one step: the passed watermarks form a prefix
    offsets = st.one_of(st.just(END_OF_SEGMENT), st.integers(0, 60))
    position = data.draw(st.dictionaries(st.sampled_from(sorted(segments)), offsets, max_size=4))
    window = WindowTracker(iter(marks), segments).advance_to(position)
    assert window == brute_window(marks, position, segments)
    if window.lower is not None and window.upper is not None:
        assert window.lower <= window.upper
    # positions moving forward: the watermarks' own cuts, in order, then the end
    chosen = sorted(data.draw(st.sets(st.integers(0, max(len(marks) - 1, 0)))))
    path = [marks[i].stream_cut for i in chosen if i < len(marks)] + [{}]
    tracker = WindowTracker(iter(marks), segments)
    for pos in path:
        window = tracker.advance_to(pos)
        assert window == brute_window(marks, pos, segments)
        if window.lower is not None and window.upper is not None:
            assert window.lower <= window.upper
