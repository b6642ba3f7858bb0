"""``read --until``'s stop rule: a reader has read everything before a cut."""

from __future__ import annotations

import pytest

from tidemark.cli.read import past_cut
from tidemark.controller.model import KeyRange, Segment, segment_id

pytestmark = pytest.mark.unit

HALVES = {0: Segment(0, KeyRange(0.0, 0.5)), 1: Segment(1, KeyRange(0.5, 1.0))}
SPLIT = segment_id(1, 2)
AFTER_SCALE = {**HALVES, SPLIT: Segment(SPLIT, KeyRange(0.0, 0.5))}


@pytest.mark.parametrize(
    ("position", "cut", "segments", "passed"),
    [
        ({}, {0: 3, 1: 4}, HALVES, False),  # no segment given to the reader yet
        ({0: 3}, {0: 3, 1: 4}, HALVES, False),  # half the key space not held yet
        ({0: 3, 1: 2}, {0: 3, 1: 4}, HALVES, False),  # behind on one segment
        ({0: 3, 1: 4}, {0: 3, 1: 4}, HALVES, True),  # exactly at the cut
        ({0: 9, 1: 5}, {0: 3, 1: 4}, HALVES, True),
        ({SPLIT: 0, 1: 4}, {0: 3, 1: 4}, AFTER_SCALE, True),  # on the successor: past
        ({0: -1, 1: 4}, {SPLIT: 2, 1: 4}, AFTER_SCALE, False),  # successor not held yet
        ({0: 3, 1: 4}, {SPLIT: 2, 1: 4}, HALVES, False),  # a segment the group lacks yet
    ],
)
def test_a_reader_is_past_a_cut_once_it_holds_and_passed_all_of_it(position, cut, segments, passed):
    assert past_cut(position, cut, segments) is passed
