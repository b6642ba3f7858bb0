"""tidemark.controller.timewindow: compare and the incremental WindowTracker."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from tidemark.controller.exceptions import InvalidModelError
from tidemark.controller.model import (
    END_OF_SEGMENT,
    KeyRange,
    Segment,
    TimeWindow,
    Watermark,
    segment_id,
)
from tidemark.controller.timewindow import WindowTracker, compare

COMPARE_CASES = [
    # one segment: strictly smaller is before, strictly larger after; exactly at it: passed
    ("exactly at the cut: passed", {A.id: 5}, {A.id: 5}, 1),
    ("offset past", {A.id: 6}, {A.id: 5}, 1),
    ("offset before", {A.id: 4}, {A.id: 5}, -1),
    ("read to end of sealed segment", {A.id: END_OF_SEGMENT}, {A.id: 10**9}, 1),
    ("cut at end, position not", {A.id: 10**9}, {A.id: END_OF_SEGMENT}, -1),
    ("both at end: exactly at the cut", {A.id: END_OF_SEGMENT}, {A.id: END_OF_SEGMENT}, 1),
    # two segments of one epoch
    ("equal everywhere: passed", {B.id: 3, C.id: 9}, {B.id: 3, C.id: 9}, 1),
    ("equal on one, before on the other", {B.id: 3, C.id: 2}, {B.id: 3, C.id: 9}, -1),
    ("equal on one, after on the other", {B.id: 3, C.id: 10}, {B.id: 3, C.id: 9}, 1),
    ("partly before, partly after", {B.id: 5, C.id: 1}, {B.id: 3, C.id: 4}, 0),
    # scaling: overlapping older / newer segments
    ("successor ahead whatever the offsets", {B.id: 0, C.id: 0}, {A.id: 10**9}, 1),
    ("predecessor before whatever the offsets", {A.id: 10**9}, {B.id: 0, C.id: 0}, -1),
    ("predecessor read to its end is still before", {A.id: END_OF_SEGMENT}, {B.id: 0}, -1),
    (
        "equal on one key range, on a successor on the other",
        {B.id: 3, D.id: 0},
        {B.id: 3, C.id: 9},
        1,
    ),
    (
        "equal on one key range, on a predecessor on the other",
        {B.id: 3, C.id: 0},
        {B.id: 3, D.id: 0, E.id: 0},
        -1,
    ),
    ("after on one, on a predecessor on the other", {B.id: 9, C.id: 0}, {B.id: 3, D.id: 0}, 0),
    ("merge successor ahead of both", {F.id: 0}, {B.id: 7, D.id: 7}, 1),
    ("split predecessors before the merge", {B.id: 7, D.id: 7}, {F.id: 0, E.id: 0}, -1),
    ("reader owning part of the key space", {E.id: 1}, {B.id: 0, D.id: 0, E.id: 3}, -1),
    # nothing in common: before nowhere, so time advances (Pravega returns 1)
    ("no shared key range", {B.id: 1}, {E.id: 3}, 1),
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
    ("at the first: passed", {A.id: 5}, TimeWindow(100, 260)),
    ("between", {A.id: 7}, TimeWindow(100, 260)),
    ("at the second: passed", {A.id: 9}, TimeWindow(200, 310)),
    ("end of A", {A.id: END_OF_SEGMENT}, TimeWindow(200, 310)),
    ("on successors, equal on C: the third is ahead", {B.id: 1, C.id: 0}, TimeWindow(200, 310)),
    ("at the third: passed", {B.id: 2, C.id: 0}, TimeWindow(300, 450)),
    ("partly past the last: its upper time", {B.id: 5, C.id: 2}, TimeWindow(300, 450)),
    ("past every watermark, equal on C", {B.id: 5, C.id: 3}, TimeWindow(400, None)),
    ("empty position", {}, TimeWindow(400, None)),
]


def test_issue_example_upper_bound_is_pravegas():
    """Cuts {0: 5, 1: 5} (10-19), {0: 8, 1: 5} (20-29), {0: 9, 1: 9} (30-39); a reader
    at {0: 6, 1: 5} gets (10, 29): the second is wholly ahead (5 = 5 is neither)."""
    marks = [
        wm(10, 19, {B.id: 5, C.id: 5}, 0),
        wm(20, 29, {B.id: 8, C.id: 5}, 1),
        wm(30, 39, {B.id: 9, C.id: 9}, 2),
    ]
    assert WindowTracker(marks, SEGMENTS).advance_to({B.id: 6, C.id: 5}) == TimeWindow(10, 29)


def test_pravega_compare_cases():
    """``WatermarkReaderImplTest.testCompare``: s0, s1 halves of epoch 0, s2, s3 of epoch 1;
    the cut {s1: 1, s2: 2}."""
    s0, s1 = Segment(0, KeyRange(0.0, 0.5)), Segment(1, KeyRange(0.5, 1.0))
    s2, s3 = (
        Segment(segment_id(1, 2), KeyRange(0.0, 0.5)),
        Segment(segment_id(1, 3), KeyRange(0.5, 1.0)),
    )
    segments = {s.id: s for s in (s0, s1, s2, s3)}
    cut = {s1.id: 1, s2.id: 2}
    cases = [
        ({s1.id: 1, s2.id: 2}, 1),  # exactly at the mark: time advances
        ({s0.id: 0, s1.id: 1}, -1),
        ({s1.id: 0, s2.id: 1}, -1),
        ({s1.id: 1, s2.id: 1}, -1),
        ({s2.id: 2, s3.id: 3}, 1),
        ({s1.id: 2, s2.id: 3}, 1),
        ({s1.id: 1, s2.id: 3}, 1),
        ({s0.id: 0, s3.id: 3}, 0),
        ({s1.id: 0, s2.id: 3}, 0),
        ({s1.id: 3, s2.id: 0}, 0),
    ]
    for position, expected in cases:
        assert compare(position, cut, segments) == expected, position


def test_pravega_window_updates():
    """``WatermarkReaderImplTest.testUpdates``: eight marks, a reader advancing through them."""
    s0, s1 = Segment(0, KeyRange(0.0, 0.5)), Segment(1, KeyRange(0.5, 1.0))
    s2, s3 = (
        Segment(segment_id(1, 2), KeyRange(0.0, 0.5)),
        Segment(segment_id(1, 3), KeyRange(0.5, 1.0)),
    )
    segments = {s.id: s for s in (s0, s1, s2, s3)}
    cuts = [
        {s0.id: 0, s1.id: 0},
        {s0.id: 2, s1.id: 0},
        {s0.id: 2, s1.id: 2},
        {s2.id: 0, s1.id: 2},
        {s2.id: 4, s1.id: 2},
        {s2.id: 4, s1.id: 4},
        {s2.id: 4, s3.id: 0},
        {s2.id: 6, s3.id: 4},
    ]
    marks = [wm(10 * (i + 1), 10 * (i + 1) + 9, cut, i) for i, cut in enumerate(cuts)]
    steps = [
        ({s0.id: 1, s1.id: 0}, TimeWindow(10, 29)),
        ({s0.id: 3, s1.id: 0}, TimeWindow(20, 49)),
        ({s0.id: 5, s1.id: 0}, TimeWindow(20, 49)),
        ({s0.id: 6, s1.id: 0}, TimeWindow(20, 49)),
        ({s0.id: 6, s1.id: 1}, TimeWindow(20, 49)),
        ({s0.id: 6, s1.id: 3}, TimeWindow(30, 69)),
        ({s2.id: 0, s1.id: 3}, TimeWindow(40, 69)),
        ({s2.id: 4, s1.id: 3}, TimeWindow(50, 69)),
        ({s2.id: 4, s1.id: 5}, TimeWindow(60, 79)),
        ({s2.id: 4, s3.id: 1}, TimeWindow(70, 89)),
        ({s2.id: 5, s3.id: 1}, TimeWindow(70, 89)),
        ({s2.id: 5, s3.id: 5}, TimeWindow(70, 89)),
        ({s2.id: 6, s3.id: 5}, TimeWindow(80, None)),
        ({s2.id: 7, s3.id: 7}, TimeWindow(80, None)),
    ]
    tracker = WindowTracker(iter(marks), segments)
    for position, expected in steps:
        assert tracker.advance_to(position) == expected, position
        assert WindowTracker(marks, segments).advance_to(position) == expected, position


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
    assert tracker.advance_to({B.id: 1, C.id: 0}) == TimeWindow(200, 310)
    assert source.read == 3


def test_live_source_keeps_feeding():
    source = CountingSource(MARKS[:2])
    tracker = WindowTracker(source, SEGMENTS)
    assert tracker.advance_to({A.id: 10}) == TimeWindow(200, None)
    source.items.append(MARKS[2])
    assert tracker.advance_to({A.id: 10}) == TimeWindow(200, 310)


def test_segments_of_new_epochs_may_be_added_later():
    segments = {A.id: A}
    tracker = WindowTracker(MARKS[:2], segments)
    assert tracker.advance_to({A.id: 10}) == TimeWindow(200, None)
    segments.update({B.id: B, C.id: C})
    tracker = WindowTracker(MARKS, segments)
    assert tracker.advance_to({B.id: 3, C.id: 1}) == TimeWindow(300, 450)


# --- properties --------------------------------------------------------------


def pravega_compare(
    position: Mapping[int, int], cut: Mapping[int, int], segments: Mapping[int, Segment]
) -> int:
    """The definition, written out apart from ``compare``: the set of relations of
    the position to each segment of the cut (Pravega's ``WatermarkReaderImpl``)."""

    def rank(offset: int) -> float:
        return float("inf") if offset == END_OF_SEGMENT else offset

    relations: set[str] = set()
    for seg, offset in cut.items():
        if seg in position:
            diff = rank(position[seg]) - rank(offset)
            relations |= {"before"} if diff < 0 else {"after"} if diff > 0 else set()
        else:
            for mine in position:
                if segments[mine].key_range.overlaps(segments[seg].key_range):
                    relations.add("before" if mine < seg else "after")
    if relations == {"before", "after"}:
        return 0
    return -1 if "before" in relations else 1


def brute_window(
    marks: Sequence[Watermark], position: Mapping[int, int], segments: Mapping[int, Segment]
) -> TimeWindow:
    """lower: time of the latest watermark passed; upper: upper time of the first
    wholly ahead, else of the latest partly passed; an empty position has passed them all."""
    if not position:
        return TimeWindow(marks[-1].time if marks else None, None)
    passed = [m.time for m in marks if pravega_compare(position, m.stream_cut, segments) > 0]
    ahead = [m.upper_time for m in marks if pravega_compare(position, m.stream_cut, segments) < 0]
    partly = [m.upper_time for m in marks if pravega_compare(position, m.stream_cut, segments) == 0]
    upper = ahead[0] if ahead else partly[-1] if partly else None
    return TimeWindow(passed[-1] if passed else None, upper)


def test_compare_cases_agree_with_the_definition():
    for name, position, cut, expected in COMPARE_CASES:
        assert pravega_compare(position, cut, SEGMENTS) == expected, name


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_tracker_agrees_with_brute_force(data):
    epochs, steps = data.draw(scenarios())
    segments = {seg.id: seg for epoch in epochs for seg in epoch.segments}
    marks = emitted_watermarks(epochs, steps)
    # any position a reader can hold, one step: the passed watermarks form a prefix.
    # A reader never holds two segments whose key ranges overlap (a segment and a
    # predecessor or successor of it): it moves to successors once a segment is done.
    # With such a pair -- say segment 0 read to its end beside a segment three epochs
    # later -- a watermark between them is neither passed nor ahead while a later one is
    # passed, which no reachable position gives.
    offsets = st.one_of(st.just(END_OF_SEGMENT), st.integers(0, 60))
    drawn = data.draw(st.dictionaries(st.sampled_from(sorted(segments)), offsets, max_size=4))
    position: dict[int, int] = {}
    for seg, offset in drawn.items():
        if not any(segments[seg].key_range.overlaps(segments[held].key_range) for held in position):
            position[seg] = offset
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


class ListFeed:
    """What ``PositionWindow`` and ``window_at`` need of a ``WatermarkFeed``."""

    def __init__(self, marks: Sequence[Watermark]) -> None:
        self.watermarks = list(marks)

    def refresh(self, *, force: bool = False) -> int:
        return len(self.watermarks)

    def iterator(self, start: int = 0) -> Iterator[Watermark]:
        return iter(self.watermarks[start:])


@st.composite
def forward_path(draw: st.DrawFn, marks: Sequence[Watermark]) -> list[dict[int, int]]:
    """Positions moving forward through the watermarks' cuts, each cut visited one
    offset below, at, and one above (where equal offsets change the answer)."""
    path: list[dict[int, int]] = []
    for mark in marks:
        cut = dict(mark.stream_cut)
        for shift in draw(st.lists(st.sampled_from([-1, 0, 1]), max_size=3).map(sorted)):
            path.append({seg: max(0, off + shift) for seg, off in cut.items()})
    return path


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_tracker_fast_path_and_group_window_agree_with_the_definition(data):
    """The three places the rule is used -- ``WindowTracker`` (incremental),
    ``PositionWindow`` (a reader's fast path) and ``window_at`` (the group's
    window) -- give the brute-force window at every position, equal offsets
    and scaling included."""
    from tidemark.pipelines.reading.windows import PositionWindow, window_at

    epochs, steps = data.draw(scenarios())
    segments = {seg.id: seg for epoch in epochs for seg in epoch.segments}
    marks = emitted_watermarks(epochs, steps)
    path = data.draw(forward_path(marks))
    feed = ListFeed(marks)
    fast = PositionWindow(feed, lambda: segments)  # type: ignore[arg-type]
    tracker = WindowTracker(iter(marks), segments)
    last: dict[int, int] | None = None
    for position in path:
        expected = brute_window(marks, position, segments)
        assert fast.at(position) == expected, position
        assert window_at(feed, position, segments) == expected, position  # type: ignore[arg-type]
        if last is None or all(position.get(s, 0) >= o for s, o in last.items()):
            if last is not None and position.keys() != last.keys():
                tracker = WindowTracker(iter(marks), segments)
            assert tracker.advance_to(position) == expected, position
        else:
            tracker = WindowTracker(iter(marks), segments)
            assert tracker.advance_to(position) == expected, position
        last = position


class GrowingFeed:
    """A feed whose watermarks are revealed a few at a time, with live iterators
    (``FeedIterator``), as a ``WatermarkFeed`` over a table being appended to."""

    def __init__(self, marks: Sequence[Watermark], shown: int) -> None:
        self.all = list(marks)
        self.watermarks = self.all[:shown]

    def refresh(self, *, force: bool = False) -> int:
        return len(self.watermarks)

    def show(self, count: int) -> None:
        self.watermarks.extend(self.all[len(self.watermarks) : len(self.watermarks) + count])

    def iterator(self, start: int = 0) -> Iterator[Watermark]:
        from tidemark.pipelines.reading.windows import FeedIterator

        return FeedIterator(self, start)  # type: ignore[arg-type]


@st.composite
def walk(draw: st.DrawFn, marks: Sequence[Watermark], segments: Mapping[int, Segment]):
    """Positions of mostly one segment: runs of small steps forwards (through several
    cuts), steps back, landings one below, at and one above a cut's offset, jumps, other
    segments, a segment read to its end, now and then two segments; each with a count
    of watermarks revealed before it."""
    ids = sorted(segments)
    named = sorted({seg for mark in marks for seg in mark.stream_cut}) or ids
    seg, offset = draw(st.sampled_from(named)), 0
    positions: list[tuple[int, dict[int, int]]] = []
    reveals = st.sampled_from([0, 0, 0, 1, 2])
    for _ in range(draw(st.integers(1, 30))):
        move = draw(st.sampled_from(["run", "run", "back", "cut", "jump", "seg", "end", "two"]))
        if move == "run":
            for step in draw(st.lists(st.integers(0, 3), min_size=1, max_size=20)):
                offset += step
                positions.append((draw(reveals), {seg: offset}))
            continue
        if move == "back":
            offset = max(0, offset - draw(st.integers(1, 3)))
        elif move == "cut" and marks:
            cut = draw(st.sampled_from(marks)).stream_cut
            seg = draw(st.sampled_from(sorted(cut)))
            offset = max(0, cut[seg] + draw(st.sampled_from([-1, 0, 1])))
        elif move == "jump":
            offset = draw(st.integers(0, 60))
        elif move == "seg":
            seg = draw(st.sampled_from(ids))
        position = {seg: END_OF_SEGMENT if move == "end" else offset}
        if move == "two":
            other = draw(st.sampled_from(ids))
            if not segments[other].overlaps(segments[seg]):
                position[other] = draw(st.integers(0, 60))
        positions.append((draw(reveals), position))
    return positions


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_position_window_steps_agree_with_the_reference(data):
    """``PositionWindow`` (its one-segment steps along plain cuts included) equals a
    fresh ``WindowTracker`` over the watermarks revealed so far, along walks forwards
    and backwards over scaled streams, with cuts as the controller emits them or any
    cuts at all (naming other segments, overlapping ones, ends of segments), exact
    cut offsets, and new watermarks arriving between calls."""
    from tidemark.pipelines.reading.windows import PositionWindow

    epochs, steps = data.draw(scenarios())
    segments = {seg.id: seg for epoch in epochs for seg in epoch.segments}
    marks = emitted_watermarks(epochs, steps)
    kind = data.draw(st.sampled_from(["emitted", "epochs", "any"]))
    if kind != "emitted":  # cuts of one epoch after another, or of any segments; offsets
        marks, epoch = [], 0  # growing roughly 3 a watermark
        for i in range(data.draw(st.integers(0, 20))):
            top = 3 * i + 5  # stands for END_OF_SEGMENT
            offsets = st.integers(max(0, 3 * i - 4), top).map(
                lambda o, top=top: END_OF_SEGMENT if o == top else o
            )
            if kind == "any":
                ids = st.sampled_from(sorted(segments))
                cut = data.draw(st.dictionaries(ids, offsets, min_size=1, max_size=3))
            else:
                epoch = min(len(epochs) - 1, epoch + data.draw(st.sampled_from([0, 0, 0, 1])))
                cut = {seg.id: data.draw(offsets) for seg in epochs[epoch].segments}
            marks.append(wm(10 * i, 10 * i + 5, cut, i))
    shown = data.draw(st.one_of(st.just(len(marks)), st.integers(0, len(marks))))
    feed = GrowingFeed(marks, shown)
    window = PositionWindow(feed, lambda: segments)  # type: ignore[arg-type]
    for reveal, position in data.draw(walk(marks, segments)):
        feed.show(reveal)
        expected = WindowTracker(list(feed.watermarks), segments).advance_to(position)
        assert window.at(position) == expected, (position, len(feed.watermarks))
