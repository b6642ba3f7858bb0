"""S2's timestamping rules: modes, cap, monotonic adjustment (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.config import TimestampingMode as Mode
from tidemark.controller.metadata import new_stream_metadata
from tidemark.controller.model import Epoch, KeyRange, Segment, segment_id
from tidemark.errors import TidemarkError
from tidemark.pipelines.writing.exceptions import (
    InvalidTimestampError,
    MissingTimestampError,
    TimestampAdjustmentError,
)
from tidemark.pipelines.writing.timestamping import (
    MAX_TIMESTAMP,
    SegmentClock,
    Stamp,
    TimestampPolicy,
    check_timestamp,
    choose,
    monotonic,
    stamp,
)

UNCAPPED = TimestampPolicy(uncapped=True)


def test_s2_example() -> None:
    clock = SegmentClock(UNCAPPED)
    got = [clock.stamp(0, t, arrival_ms=100).timestamp for t in (42, 44, 42, 50, 50, 48, 55)]
    assert got == [42, 44, 44, 50, 50, 50, 55]
    assert monotonic([42, 44, 42, 50, 50, 48, 55]) == [42, 44, 44, 50, 50, 50, 55]


def test_notes_reference_example() -> None:
    assert monotonic([1000, 900, 1100]) == [1000, 1000, 1100]


def test_adjusted_flags_follow_the_s2_example() -> None:
    clock = SegmentClock(UNCAPPED)
    flags = [clock.stamp(0, t, 100).adjusted for t in (42, 44, 42, 50, 50, 48, 55)]
    assert flags == [False, False, True, False, False, True, False]


# policy, client ts, arrival, floor -> stored, adjusted
CASES = [
    pytest.param(TimestampPolicy(), 500, 1000, None, Stamp(500, False), id="prefer-client"),
    pytest.param(TimestampPolicy(), None, 1000, None, Stamp(1000, False), id="prefer-arrival"),
    pytest.param(TimestampPolicy(), 5000, 1000, None, Stamp(1000, True), id="capped"),
    pytest.param(UNCAPPED, 5000, 1000, None, Stamp(5000, False), id="uncapped"),
    pytest.param(TimestampPolicy(), 500, 1000, 700, Stamp(700, True), id="raised-to-floor"),
    pytest.param(TimestampPolicy(), None, 1000, 1200, Stamp(1200, False), id="arrival-raised"),
    pytest.param(TimestampPolicy(), 1000, 1000, None, Stamp(1000, False), id="equal-arrival"),
    pytest.param(
        TimestampPolicy(Mode.CLIENT_REQUIRE), 500, 1000, None, Stamp(500, False), id="require"
    ),
    pytest.param(TimestampPolicy(Mode.ARRIVAL), 500, 1000, None, Stamp(1000, True), id="arrival"),
    pytest.param(
        TimestampPolicy(Mode.ARRIVAL), None, 1000, None, Stamp(1000, False), id="arrival-none"
    ),
    pytest.param(
        TimestampPolicy(Mode.ARRIVAL, uncapped=True),
        5000,
        1000,
        None,
        Stamp(1000, True),
        id="arrival-ignores-uncapped",
    ),
]


@pytest.mark.parametrize(("policy", "client", "arrival", "floor", "expected"), CASES)
def test_stamp_table(
    policy: TimestampPolicy, client: int | None, arrival: int, floor: int | None, expected: Stamp
) -> None:
    assert stamp(policy, client, arrival, floor) == expected


def test_client_require_without_a_timestamp() -> None:
    with pytest.raises(MissingTimestampError, match="client-require"):
        choose(TimestampPolicy(Mode.CLIENT_REQUIRE), None, 1000)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (-1, "outside 0"),
        (2**63, "outside 0"),
        (1.5, "must be an int"),
        (True, "must be an int"),
        ("1000", "must be an int"),
        (None, "must be an int"),
    ],
)
def test_bad_timestamps(value: object, text: str) -> None:
    with pytest.raises(InvalidTimestampError, match=text) as info:
        check_timestamp(value)
    assert isinstance(info.value, TidemarkError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value", [0, 1, MAX_TIMESTAMP])
def test_good_timestamps(value: int) -> None:
    assert check_timestamp(value) == value


def test_segments_are_independent() -> None:
    clock = SegmentClock(UNCAPPED)
    clock.stamp(0, 100, 1000)
    assert clock.stamp(1, 50, 1000) == Stamp(50, False)


def test_successor_inherits_the_highest_predecessor_floor() -> None:
    clock = SegmentClock(UNCAPPED)
    clock.stamp(0, 100, 1000)
    clock.stamp(1, 300, 1000)
    succ = (1 << 32) | 2
    clock.inherit(succ, [0, 1, 7])  # 7: never written, ignored
    assert clock.stamp(succ, 200, 1000) == Stamp(300, True)
    clock.inherit((1 << 32) | 3, [9])  # no known predecessor: no floor
    assert clock.floor((1 << 32) | 3) is None


def test_peek_does_not_remember_and_advance_does() -> None:
    clock = SegmentClock(UNCAPPED)
    assert clock.peek(0, 100, 1000) == 100
    assert clock.floor(0) is None
    clock.advance(0, 100)
    clock.advance(0, 90)
    assert clock.floor(0) == 100
    assert clock.peek(0, 50, 1000) == 100


policies = st.builds(TimestampPolicy, st.sampled_from(list(Mode)), st.booleans())
stamps = st.integers(0, 10_000)


@given(
    policy=policies,
    records=st.lists(st.tuples(st.none() | stamps, stamps, st.integers(0, 2)), max_size=40),
)
def test_properties(policy: TimestampPolicy, records: list[tuple[int | None, int, int]]) -> None:
    """Per segment never decreasing; capped never above arrival (clock not going back);
    adjusted exactly when the stored value differs from the one given."""
    clock = SegmentClock(policy)
    arrival = 0
    last: dict[int, int] = {}
    for client, step, seg in records:
        arrival += step
        if client is None and policy.mode is Mode.CLIENT_REQUIRE:
            with pytest.raises(MissingTimestampError):
                clock.stamp(seg, client, arrival)
            continue
        got = clock.stamp(seg, client, arrival)
        assert got.timestamp >= last.get(seg, 0)
        last[seg] = got.timestamp
        if not policy.uncapped or policy.mode is Mode.ARRIVAL:
            assert got.timestamp <= arrival
        assert got.adjusted == (client is not None and got.timestamp != client)
        if client is not None and policy.mode is not Mode.ARRIVAL and got.timestamp > client:
            assert got.timestamp == clock.floor(seg)


def test_the_policy_of_a_stream_names_it_in_every_refusal() -> None:
    config = StreamConfiguration(
        ScalingPolicy.fixed(1), timestamping=Mode.CLIENT_REQUIRE, refuse_adjustments=True
    )
    policy = TimestampPolicy.of(new_stream_metadata("shop/orders", config, now_ms=0))
    assert policy == TimestampPolicy(Mode.CLIENT_REQUIRE, False, True, "shop/orders")
    clock = SegmentClock(policy)
    with pytest.raises(
        MissingTimestampError, match="stream shop/orders has timestamping client-require"
    ):
        clock.peek(0, None, 1_000)
    clock.advance(0, 1_000)
    with pytest.raises(TimestampAdjustmentError, match=r"900 would be stored as 1000.*shop/orders"):
        clock.peek(0, 900, 2_000)


def test_after_a_scale_successors_start_from_their_predecessors_floors() -> None:
    epochs = (
        Epoch(0, (Segment(0, KeyRange(0.0, 0.5)), Segment(1, KeyRange(0.5, 1.0)))),
        Epoch(
            1,
            (
                Segment(0, KeyRange(0.0, 0.5)),
                Segment(segment_id(1, 2), KeyRange(0.5, 0.75)),
                Segment(segment_id(1, 3), KeyRange(0.75, 1.0)),
            ),
        ),
    )
    clock = SegmentClock(UNCAPPED)
    assert clock.highest() is None
    clock.advance(0, 500)
    clock.advance(1, 900)
    clock.follow(epochs, applied=0)
    assert clock.floors() == {0: 500, 1: 900, segment_id(1, 2): 900, segment_id(1, 3): 900}
    assert clock.highest() == 900
    clock.follow(epochs, applied=1)  # nothing newer: unchanged
    assert clock.highest() == 900
