"""Stream policy decisions (tidemark.controller.policies): tables of cases and hypothesis
properties."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.controller.config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from tidemark.controller.exceptions import InvalidConfigurationError
from tidemark.controller.metadata import StreamMetadata, new_stream_metadata
from tidemark.controller.model import KeyRange, segment_id
from tidemark.controller.navigation import covers_exactly
from tidemark.controller.planning import plan_scale, validate_cut
from tidemark.controller.policies import (
    Merge,
    Sample,
    SegmentBytes,
    Split,
    beyond_head,
    bytes_after,
    earliest,
    latest,
    plan_autoscale,
    scale_request,
    segment_rates,
    size_retention_time,
    split_ranges,
    time_bounds,
    time_retention_cut,
)
from tidemark.controller.states import StreamState


def stream(segments: int = 2, scaling: ScalingPolicy | None = None, **kw: object) -> StreamMetadata:
    config = StreamConfiguration(scaling_policy=scaling or ScalingPolicy.fixed(segments))
    meta = new_stream_metadata("p/q", config, now_ms=0)
    return meta.with_changes(state=StreamState.ACTIVE, **kw)


# --- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("by-time", 100, 101), "min_limit"),
        (("by-size", 100, -1), "min_limit"),
        (("none", 0, 5), "takes no limit"),
    ],
)
def test_bad_retention_limits_are_refused(args, message):
    with pytest.raises(InvalidConfigurationError, match=message):
        RetentionPolicy(*args)


def test_min_limit_round_trips_and_old_records_read():
    cfg = StreamConfiguration(retention_policy=RetentionPolicy.by_size(1000, 400))
    assert StreamConfiguration.from_dict(cfg.to_dict()) == cfg
    old = {"retention_policy": {"type": "by-time", "limit": 5}}
    assert StreamConfiguration.from_dict(old).retention_policy == RetentionPolicy.by_time(5)


# --- retention by time ----------------------------------------------------------------------


def test_beyond_head_table():
    meta = stream(2)
    assert beyond_head(meta, None) is None
    assert beyond_head(meta, {}) is None
    assert beyond_head(meta, {0: 0, 1: 0}) is None
    assert beyond_head(meta, {0: 3, 1: 0}) == {0: 3, 1: 0}
    truncated = meta.with_changes(truncation={0: 5, 1: 5})
    assert beyond_head(truncated, {0: 3, 1: 4}) is None  # behind the head: moved up, no change
    assert beyond_head(truncated, {0: 3, 1: 9}) == {0: 5, 1: 9}  # behind on one key only


def test_time_bounds_with_and_without_a_minimum():
    assert time_bounds(RetentionPolicy.by_time(1000), 5000) == (4000, 4000)
    assert time_bounds(RetentionPolicy.by_time(1000, 200), 5000) == (4000, 4800)
    with pytest.raises(ValueError):
        time_bounds(RetentionPolicy.by_size(10), 0)


def test_time_retention_acts_only_when_the_limit_is_crossed():
    meta = stream(1)
    # nothing older than the limit: the trigger cut is the head
    assert time_retention_cut(meta, {}, {0: 9}) is None
    assert time_retention_cut(meta, {0: 0}, {0: 9}) is None
    # older data exists: truncate at the target (the minimum's cut)
    assert time_retention_cut(meta, {0: 4}, {0: 9}) == {0: 9}
    assert time_retention_cut(meta, {0: 4}, {0: 4}) == {0: 4}


# --- retention by size ----------------------------------------------------------------------


def test_segment_bytes_counts_up_to_the_mark_below():
    seg = SegmentBytes(marks=((10, 0), (20, 100), (30, 250)), end=35, total=300)
    assert [seg.before(o) for o in (0, 10, 15, 20, 29, 30, 34, 35, 99)] == [
        0,
        0,
        0,
        100,
        100,
        250,
        250,
        300,
        300,
    ]
    assert seg.from_offset(25) == 200  # an upper bound of the bytes from offset 25 on
    truncated = SegmentBytes(marks=((20, 100), (30, 250)), end=35, total=300)
    assert [truncated.from_offset(o) for o in (0, 20, 30, 35)] == [200, 200, 50, 0]
    assert SegmentBytes(marks=(), end=0, total=0).from_offset(0) == 0


def test_bytes_after_counts_successors_wholly_and_skips_predecessors():
    meta = stream(1)
    epoch = plan_scale(meta, [0], [KeyRange(0, 0.5), KeyRange(0.5, 1)], at_ms=1)
    meta = meta.with_changes(epochs=(*meta.epochs, epoch), sealed_sizes={0: 10})
    a, b = segment_id(1, 1), segment_id(1, 2)
    sizes = {
        0: SegmentBytes(((0, 0), (5, 50)), 10, 100),
        a: SegmentBytes(((0, 0),), 4, 40),
        b: SegmentBytes(((0, 0),), 2, 20),
    }
    assert bytes_after(meta, {0: 0}, sizes) == 160
    assert bytes_after(meta, {0: 5}, sizes) == 110
    assert bytes_after(meta, {a: 0, b: 0}, sizes) == 60


@pytest.mark.parametrize(
    ("policy", "size_now", "expected"),
    [
        (RetentionPolicy.by_size(500), 400, None),  # under the limit: nothing
        (RetentionPolicy.by_size(500), 900, 40),  # earliest time leaving <= 500
        (RetentionPolicy.by_size(500, 200), 900, 79),  # latest time leaving >= 200
        (RetentionPolicy.by_size(50), 900, 100),  # no cut gets under: the furthest one
    ],
)
def test_size_retention_time_table(policy, size_now, expected):
    # bytes kept at the start cut for time t: 900 down to 100 in steps of 100 per 10 ms
    def kept(t: int) -> int:
        return max(100, 900 - (t // 10) * 100)

    assert size_retention_time(policy, size_now, kept, 0, 100) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), st.integers(0, 60))
def test_earliest_and_latest_agree_with_a_scan(values, threshold):
    ordered = sorted(values)
    n = len(ordered) - 1
    scan_e = next((i for i in range(n + 1) if ordered[i] >= threshold), None)
    scan_l = max((i for i in range(n + 1) if ordered[i] < threshold), default=None)
    assert earliest(0, n, lambda i: ordered[i] >= threshold) == scan_e
    assert latest(0, n, lambda i: ordered[i] < threshold) == scan_l


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 1000), min_size=2, max_size=30),
    st.integers(1, 5000),
    st.integers(0, 5000),
)
def test_size_retention_keeps_under_the_limit_or_at_least_the_minimum(steps, limit, minimum):
    minimum = min(minimum, limit)
    kept_by_t = list(itertools.accumulate(sorted(steps, reverse=True)))[::-1]
    policy = RetentionPolicy.by_size(limit, minimum)
    t = size_retention_time(policy, kept_by_t[0], lambda i: kept_by_t[i], 0, len(kept_by_t) - 1)
    if kept_by_t[0] <= limit:
        assert t is None
    elif minimum:
        # keep at least the minimum, removing as much as that allows
        if t is not None:
            assert kept_by_t[t] >= minimum
            assert t == len(kept_by_t) - 1 or kept_by_t[t + 1] < minimum
    else:
        assert t is not None
        if kept_by_t[-1] <= limit:
            assert kept_by_t[t] <= limit
            assert t == 0 or kept_by_t[t - 1] > limit  # removes no more than needed


# --- auto-scaling ---------------------------------------------------------------------------


def test_segment_rates():
    before = Sample(1000, {0: 10, 1: 50, 2: 7})
    after = Sample(3000, {0: 30, 1: 50, 3: 4, 2: 0})
    assert segment_rates(before, after) == {0: 10.0, 1: 0.0}
    assert segment_rates(after, after) == {}


def test_split_ranges_cover_exactly():
    assert split_ranges(KeyRange(0.5, 1.0), 2) == (KeyRange(0.5, 0.75), KeyRange(0.75, 1.0))
    parts = split_ranges(KeyRange(0.1, 0.7), 3)
    assert parts[0].low == 0.1 and parts[-1].high == 0.7
    assert all(a.high == b.low for a, b in itertools.pairwise(parts))


RATE = ScalingPolicy.by_event_rate(100, 2, 2)


@pytest.mark.parametrize(
    ("rates", "now_ms", "expected"),
    [
        ({0: 150.0, 1: 10.0}, 60_000, Split(0, (KeyRange(0, 0.25), KeyRange(0.25, 0.5)))),
        ({0: 150.0, 1: 300.0}, 60_000, Split(1, (KeyRange(0.5, 0.75), KeyRange(0.75, 1.0)))),
        ({0: 150.0, 1: 10.0}, 5_000, None),  # within the cooldown
        ({0: 150.0}, 60_000, None),  # a segment not measured yet
        ({0: 100.0, 1: 1.0}, 60_000, None),  # at the target is not hot
        ({0: 1.0, 1: 1.0}, 60_000, None),  # min_segments = 2: no merge
    ],
)
def test_plan_autoscale_table(rates, now_ms, expected):
    meta = stream(scaling=RATE)
    assert plan_autoscale(meta, rates, now_ms, cooldown_ms=10_000) == expected


def test_two_cold_neighbours_merge_the_coldest_pair_first():
    meta = stream(2).with_changes(config=StreamConfiguration(ScalingPolicy.by_byte_rate(100, 2, 1)))
    meta = meta.with_changes(
        epochs=(
            *meta.epochs,
            plan_scale(meta, [1], [KeyRange(0.5, 0.75), KeyRange(0.75, 1.0)], at_ms=0),
        )
    )
    a, b, c = (s.id for s in meta.active_segments())
    assert plan_autoscale(meta, {a: 10.0, b: 40.0, c: 45.0}, 60_000, 0) == Merge(
        (a, b), KeyRange(0.0, 0.75)
    )
    assert plan_autoscale(meta, {a: 10.0, b: 60.0, c: 10.0}, 60_000, 0) is None  # b is not cold
    assert plan_autoscale(meta, {a: 10.0, b: 10.0, c: 10.0}, 60_000, 0) == Merge(
        (a, b), KeyRange(0.0, 0.75)
    )


def test_fixed_streams_never_scale():
    assert plan_autoscale(stream(2), {0: 1e9, 1: 1e9}, 10**9, 0) is None


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_autoscale_keeps_the_key_space_and_min_segments(data):
    minimum = data.draw(st.integers(1, 3))
    meta = stream(scaling=ScalingPolicy.by_event_rate(100, data.draw(st.integers(2, 4)), minimum))
    meta = meta.with_changes(epochs=new_stream_metadata("p/q", meta.config, 0).epochs)
    for step in range(data.draw(st.integers(1, 12))):
        now = (step + 1) * 1000
        active = meta.active_segments()
        rates = {s.id: float(data.draw(st.integers(0, 300))) for s in active}
        action = plan_autoscale(meta, rates, now, cooldown_ms=1000)
        if action is None:
            continue
        sealed, ranges = scale_request(action)
        if isinstance(action, Split):
            assert rates[action.segment] > 100
        else:
            assert all(rates[s] < 50 for s in action.segments)
        epoch = plan_scale(meta, sealed, ranges, at_ms=now)
        meta = meta.with_changes(epochs=(*meta.epochs, epoch))
        assert covers_exactly(meta.active_segments())
        assert len(meta.active_segments()) >= minimum
        assert plan_autoscale(meta, rates, now, cooldown_ms=1000) is None  # cooling down


def test_a_retention_cut_is_a_valid_truncation_point():
    meta = stream(2).with_changes(truncation={0: 2, 1: 2})
    cut = time_retention_cut(meta, {0: 1, 1: 6}, {0: 3, 1: 6})
    assert cut == {0: 3, 1: 6}
    assert validate_cut(meta, cut) == cut


# --- readers behind the head ----------------------------------------------------------------


def test_behind_head_table():
    from tidemark.controller.navigation import behind_head

    meta = stream(1)
    epoch = plan_scale(meta, [0], [KeyRange(0, 0.5), KeyRange(0.5, 1)], at_ms=1)
    a, b = segment_id(1, 1), segment_id(1, 2)
    meta = meta.with_changes(epochs=(*meta.epochs, epoch), sealed_sizes={0: 10})
    assert behind_head(meta, {0: 3}, {0: 0}) == {}  # nothing truncated
    cut = meta.with_changes(truncation={a: 5, b: 0})
    # seg 0 emptied while unread from 3; a truncated to 5 while the group had nothing of it
    assert behind_head(cut, {0: 3}, {0: 0}) == {0: (3, 10), a: (0, 5)}
    assert behind_head(cut, {0: 10, a: 5, b: 0}, {0: 0}) == {}  # read up to the head
    assert behind_head(cut, {0: 10, a: 7}, {0: 0}) == {}
    assert behind_head(cut, {0: 10, a: 4, b: 2}, {0: 0}) == {a: (4, 5)}
    # a group started at the head never had the truncated part to read
    assert behind_head(cut, {}, {a: 5, b: 0}) == {}
    assert behind_head(cut, {}, {a: 2, b: 0}) == {a: (2, 5)}


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"interval_ms": 0}, "interval_ms must be >= 1"),
        ({"rate_window_ms": -1}, "rate_window_ms must be >= 0"),
        ({"cooldown_ms": -5}, "cooldown_ms must be >= 0"),
    ],
)
def test_bad_policy_settings_are_refused(kw, message):
    from tidemark.controller.policy_loop import PolicySettings
    from tidemark.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=message):
        PolicySettings(**kw)
