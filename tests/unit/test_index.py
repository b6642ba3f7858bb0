"""tidemark.controller.index: binary search, and where to start and stop reading."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.index import (
    IndexRow,
    find,
    index_rows,
    running_max,
    start_cut,
    start_index,
    stop_cut,
    stop_index,
)
from tidemark.controller.model import StreamCut, Watermark

FIND_CASES = [
    ([], 5, None),
    ([10], 9, None),
    ([10], 10, 0),
    ([10], 11, 0),
    ([10, 20, 30], 25, 1),
    ([10, 20, 30], 30, 2),
    ([10, 20, 30], 99, 2),
    ([10, 20, 20, 30], 20, 2),
]


@pytest.mark.parametrize(("times", "t", "expected"), FIND_CASES)
def test_find(times, t, expected):
    assert find(times, t) == expected


@given(st.lists(st.integers(-1000, 1000)).map(sorted), st.integers(-1100, 1100))
def test_find_agrees_with_bisect(times, t):
    index = find(times, t)
    expected = bisect.bisect_right(times, t) - 1
    assert index == (expected if expected >= 0 else None)
    if index is not None:
        assert times[index] <= t
    following = 0 if index is None else index + 1
    if following < len(times):
        assert times[following] > t


def marks(*times: tuple[int, int]) -> list[Watermark]:
    return [Watermark("s/t", time, upper, {0: seq}, seq) for seq, (time, upper) in enumerate(times)]


ROWS = index_rows(marks((100, 180), (200, 150), (300, 320), (400, 410)))


def test_index_rows_carry_the_running_max():
    assert [(r.seq, r.time, r.upper_time_max) for r in ROWS] == [
        (0, 100, 180),
        (1, 200, 180),
        (2, 300, 320),
        (3, 400, 410),
    ]
    assert running_max([5, 3, 7, 7, 6]) == [5, 5, 7, 7, 7]
    assert running_max([]) == []


START_CASES = [
    ("before any data: the head", 50, None),
    ("equal to the first upper time: the head", 180, None),
    ("above the running max", 181, {0: 1}),
    ("a smaller upper time does not end the run", 319, {0: 1}),
    ("between", 321, {0: 2}),
    ("after every watermark", 10_000, {0: 3}),
]


@pytest.mark.parametrize(
    ("t", "expected"), [c[1:] for c in START_CASES], ids=[c[0] for c in START_CASES]
)
def test_start_cut(t, expected):
    assert start_cut(ROWS, t) == expected


STOP_CASES = [
    ("before the first", 50, {0: 0}),
    ("equal to a time", 200, {0: 1}),
    ("between", 201, {0: 2}),
    ("equal to the last", 400, {0: 3}),
    ("after the last: not complete yet", 401, None),
]


@pytest.mark.parametrize(
    ("t", "expected"), [c[1:] for c in STOP_CASES], ids=[c[0] for c in STOP_CASES]
)
def test_stop_cut(t, expected):
    assert stop_cut(ROWS, t) == expected


def test_no_watermarks_yet():
    assert (start_cut([], 5), stop_cut([], 5)) == (None, None)
    assert (start_index([], 5), stop_index([], 5)) == (None, None)


@dataclass(frozen=True)
class JoinedRow:
    """An application's own row type (say, index joined with marks)."""

    time: int
    upper_time_max: int
    stream_cut: StreamCut


def test_any_row_type_with_the_three_fields():
    rows = [JoinedRow(10, 15, {1: 1}), JoinedRow(20, 25, {1: 2})]
    assert (start_cut(rows, 20), stop_cut(rows, 11)) == ({1: 1}, {1: 2})


def test_index_row_without_its_cut():
    assert IndexRow("s/t", 0, 10, 12).stream_cut == {}


@st.composite
def watermark_times(draw: st.DrawFn) -> list[tuple[int, int]]:
    """(time, upper_time) pairs: times strictly increase, upper_time >= time."""
    steps = draw(st.lists(st.integers(1, 50), max_size=30))
    out, time = [], 0
    for step in steps:
        time += step
        out.append((time, time + draw(st.integers(0, 120))))
    return out


@given(watermark_times(), st.integers(-10, 2000))
def test_start_and_stop_agree_with_a_scan(times, t):
    rows = index_rows(marks(*times))
    maxima = [r.upper_time_max for r in rows]
    below = [i for i, m in enumerate(maxima) if m < t]
    expected_start = below[-1] if below else None
    at_or_after = [i for i, r in enumerate(rows) if r.time >= t]
    expected_stop = at_or_after[0] if at_or_after else None
    assert start_index(maxima, t) == expected_start
    assert stop_index([r.time for r in rows], t) == expected_stop
    assert start_cut(rows, t) == (None if expected_start is None else {0: expected_start})
    assert stop_cut(rows, t) == (None if expected_stop is None else {0: expected_stop})
    # where to start: nothing before it carries a time >= t
    if expected_start is not None:
        assert all(upper < t for _, upper in times[: expected_start + 1])
    # where to stop comes after where to start
    if expected_start is not None and expected_stop is not None:
        assert expected_start < expected_stop
