"""tidemark.controller.completeness: consumed offsets -> the time a table is complete through."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller import completeness
from tidemark.controller.completeness import (
    Answer,
    Series,
    answer,
    could_rise,
    cut_within,
    first_complete,
    latest_within,
    merged,
    raised,
    stream_through,
    through_of,
    unknown,
)
from tidemark.controller.model import segment_id

pytestmark = pytest.mark.unit

S0, S1 = segment_id(0, 0), segment_id(0, 1)
SPLIT = segment_id(1, 2)  # created by a scale in epoch 1: partition 2


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(completeness).failed == 0


@pytest.mark.parametrize(
    ("cut", "consumed", "within"),
    [
        ({}, {}, True),
        ({S0: 0}, {}, True),  # nothing written there: nothing to consume
        ({S0: 1}, {}, False),
        ({S0: 5, S1: 3}, {0: 5, 1: 3}, True),  # next offsets: equal is within
        ({S0: 5, S1: 3}, {0: 5, 1: 2}, False),
        ({SPLIT: 4}, {2: 4}, True),  # a segment of a later epoch is its partition
        ({SPLIT: 4}, {0: 9, 1: 9}, False),
    ],
)
def test_a_cut_lies_within_what_was_consumed_partition_by_partition(cut, consumed, within) -> None:
    assert cut_within(cut, consumed) is within


SERIES = Series([100, 200, 300], [{S0: 2}, {S0: 5, S1: 1}, {S0: 9, S1: 4}])


@pytest.mark.parametrize(
    ("consumed", "through"),
    [({}, None), ({0: 1}, None), ({0: 2}, 100), ({0: 8, 1: 3}, 200), ({0: 9, 1: 4}, 300)],
)
def test_a_stream_is_complete_through_the_latest_watermark_within(consumed, through) -> None:
    assert stream_through(SERIES, consumed) == through


def test_several_streams_give_the_minimum_and_one_without_any_gives_none() -> None:
    other = Series([150], [{S0: 1}])
    both = {"s/a": SERIES, "s/b": other}
    assert through_of({"s/a": {0: 9, 1: 4}, "s/b": {0: 1}}, both) == 150
    assert through_of({"s/a": {0: 2}, "s/b": {0: 1}}, both) == 100
    assert through_of({"s/a": {0: 9, 1: 4}, "s/b": {}}, both) is None
    assert through_of({}, both) is None


def test_a_version_adding_no_data_keeps_its_predecessors_time() -> None:
    first = answer(None, 0, {"s/a": {0: 5, 1: 1}}, 200, batch=0)
    optimized = answer(first, 1, None, None)
    assert (optimized.complete_through, optimized.consumed, optimized.batch) == (
        200,
        first.consumed,
        None,
    )
    assert answer(None, 0, None, None).complete_through is None


def test_a_later_batch_never_lowers_and_holds_what_both_consumed() -> None:
    first = answer(None, 3, {"s/a": {0: 9, 1: 4}}, 300, batch=7)
    # a batch whose own offsets say less (a second source caught up later, say)
    second = answer(first, 4, {"s/a": {0: 5, 1: 6}}, 200, batch=8)
    assert second.complete_through == 300 and second.consumed == {"s/a": {0: 9, 1: 6}}


def test_an_unknown_version_claims_nothing_and_the_next_batch_starts_afresh() -> None:
    gone = unknown(5, "the checkpoint is gone")
    assert not gone.known and gone.complete_through is None
    kept = answer(gone, 6, None, None)
    assert kept.reason == "the checkpoint is gone" and kept.complete_through is None
    assert answer(gone, 7, {"s/a": {0: 2}}, 100, batch=1).complete_through == 100


def test_a_newer_watermark_raises_a_version_and_nothing_lowers_one() -> None:
    found = answer(None, 0, {"s/a": {0: 9, 1: 4}}, 200, batch=0)
    assert raised(found, {"s/a": SERIES}).complete_through == 300
    higher = Answer(0, 400, {"s/a": {0: 9, 1: 4}}, 0)
    assert raised(higher, {"s/a": SERIES}) is higher
    assert raised(unknown(1, "why"), {"s/a": SERIES}).complete_through is None


def test_the_first_version_complete_through_a_time() -> None:
    answers = [Answer(0, None), Answer(1, 100), Answer(2, 100), Answer(3, 300)]
    assert [first_complete(answers, t) for t in (50, 100, 101, 300, 301)] == [1, 1, 3, 3, None]


# -- properties ------------------------------------------------------------------------------


@st.composite
def series_and_consumed(draw):
    """A stream's watermarks (cuts never go backwards, times strictly increase) over
    ``partitions`` partitions, and some consumed offsets."""
    partitions = draw(st.integers(1, 3))
    count = draw(st.integers(0, 8))
    cut = {segment_id(0, p): 0 for p in range(partitions)}
    cuts, times, t = [], [], 0
    for _ in range(count):
        cut = {s: o + draw(st.integers(0, 3)) for s, o in cut.items()}
        t += draw(st.integers(1, 50))
        cuts.append(dict(cut))
        times.append(t)
    consumed = {p: draw(st.integers(0, 3 * count + 1)) for p in range(partitions)}
    return Series(times, cuts), consumed


@given(series_and_consumed())
def test_the_search_finds_what_a_scan_finds(drawn) -> None:
    series, consumed = drawn
    scan = [i for i in range(len(series.times)) if cut_within(series.cut(i), consumed)]
    assert latest_within(series, consumed) == (scan[-1] if scan else None)
    # a prefix: every earlier watermark lies within too
    assert scan == list(range(len(scan)))


@given(series_and_consumed(), st.dictionaries(st.integers(0, 2), st.integers(0, 5)))
def test_consuming_more_never_lowers_the_time(drawn, more) -> None:
    series, consumed = drawn
    bigger = merged({"s": consumed}, {"s": more})["s"]
    before, after = stream_through(series, consumed), stream_through(series, bigger)
    assert before is None or (after is not None and after >= before)


@given(
    series_and_consumed(),
    st.lists(st.one_of(st.none(), st.dictionaries(st.integers(0, 2), st.integers(0, 25)))),
)
def test_versions_never_lower_and_claim_only_what_was_consumed(drawn, batches) -> None:
    """Along any run of versions (batches, and versions adding no data), the time never
    goes down, and a watermark with that time lies within what the versions consumed."""
    series, _ = drawn
    streams = {"s": series}
    previous, held = None, {}
    for version, consumed in enumerate(batches):
        offered = None if consumed is None else {"s": consumed}
        through = None if offered is None else through_of(offered, streams)
        found = answer(previous, version, offered, through, batch=version)
        if consumed is not None:
            held = merged({"s": held}, {"s": consumed})["s"]
        if previous is not None and previous.complete_through is not None:
            assert found.complete_through is not None
            assert found.complete_through >= previous.complete_through
        if found.complete_through is not None:
            at = series.times.index(found.complete_through)
            assert cut_within(series.cut(at), held)
        previous = found


def test_a_version_could_rise_only_while_its_slowest_stream_could() -> None:
    found = answer(None, 0, {"s/a": {0: 8, 1: 3}}, 200, batch=0)
    assert not could_rise(found, {"s/a": SERIES})  # the next watermark lies outside
    at_end = answer(None, 0, {"s/a": {0: 9, 1: 4}}, 300, batch=0)
    assert could_rise(at_end, {"s/a": SERIES})  # a newer one may lie within
    other = Series([150], [{S0: 5}])
    both = {"s/a": SERIES, "s/b": other}
    slow = answer(None, 0, {"s/a": {0: 9, 1: 4}, "s/b": {0: 1}}, None, batch=0)
    assert not could_rise(slow, both)  # s/b's only watermark lies outside
    assert not could_rise(unknown(1, "why"), both)


@given(series_and_consumed(), st.integers(1, 4))
def test_what_cannot_rise_does_not_rise_with_newer_watermarks(drawn, more) -> None:
    series, consumed = drawn
    found = answer(None, 0, {"s": consumed}, through_of({"s": consumed}, {"s": series}))
    grown_cut = dict(series.cut(len(series.times) - 1)) if series.times else {S0: 0}
    times, cuts = list(series.times), [series.cut(i) for i in range(len(series.times))]
    for _ in range(more):
        grown_cut = {s: o + 1 for s, o in grown_cut.items()}
        times.append((times[-1] if times else 0) + 10)
        cuts.append(dict(grown_cut))
    if not could_rise(found, {"s": series}):
        assert raised(found, {"s": Series(times, cuts)}) == found
