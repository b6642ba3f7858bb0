"""The pure core of the streams control plane, from tables of cases."""

from __future__ import annotations

import itertools

import pytest

from tidemark.controller.config import (
    UNCAPPED_AFTER_MAX_MS,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    TimestampingMode,
    topic_configs,
)
from tidemark.controller.exceptions import (
    ConcurrentOperationError,
    IllegalTransitionError,
    InvalidConfigurationError,
    InvalidCutError,
    InvalidScaleError,
    StreamNotSealedError,
    StreamSealedError,
)
from tidemark.controller.metadata import (
    PendingScale,
    PendingSeal,
    PendingTruncate,
    PendingUpdate,
    StreamMetadata,
    decode_metadata,
    encode_metadata,
    even_ranges,
    new_stream_metadata,
)
from tidemark.controller.model import KeyRange, segment_id
from tidemark.controller.navigation import (
    covers_exactly,
    epoch_at,
    head_segments,
    key_hash,
    predecessors,
    readable_segments,
    route,
    sealed_in,
    successors,
)
from tidemark.controller.planning import is_done_scale, plan_scale, segments_before, validate_cut
from tidemark.controller.states import (
    TRANSITIONS,
    StreamState,
    require_transition,
    require_writable,
)

S = StreamState
R = KeyRange


def scaled(meta: StreamMetadata, sealed: list[int], ranges: list[KeyRange], at_ms: int = 0):
    epoch = plan_scale(meta, sealed, ranges, at_ms)
    return meta.with_changes(epochs=(*meta.epochs, epoch), state=S.ACTIVE)


@pytest.fixture
def history() -> StreamMetadata:
    """epoch 0: A=0 [0,.5) B=1 [.5,1); epoch 1: A -> C [0,.25) D [.25,.5);
    epoch 2: D+B -> E [.25,1)."""
    meta = new_stream_metadata("s/x", StreamConfiguration(ScalingPolicy.fixed(2)), now_ms=100)
    meta = meta.with_changes(state=S.ACTIVE)
    meta = scaled(meta, [0], [R(0, 0.25), R(0.25, 0.5)], at_ms=200)
    return scaled(meta, [segment_id(1, 3), 1], [R(0.25, 1.0)], at_ms=300)


A, B, C, D, E = 0, 1, segment_id(1, 2), segment_id(1, 3), segment_id(2, 4)

# --- configuration ------------------------------------------------------------------------


def test_configuration_defaults_and_round_trip():
    cfg = StreamConfiguration()
    assert cfg.timestamping is TimestampingMode.CLIENT_PREFER
    assert cfg.uncapped is False
    assert cfg.initial_segments == 1
    assert (cfg.timestamp_aggregation_timeout_ms, cfg.first_watermark_delay_ms) == (None, 0)
    assert StreamConfiguration.from_dict(cfg.to_dict()) == cfg
    assert StreamConfiguration.from_dict({}) == cfg  # stored before these settings existed
    rich = StreamConfiguration(
        ScalingPolicy.by_byte_rate(1000, 2, 3),
        RetentionPolicy.by_time(60_000),
        timestamp_aggregation_timeout_ms=5,
        timestamping=TimestampingMode.ARRIVAL,
        uncapped=True,
        first_watermark_delay_ms=7,
    )
    assert StreamConfiguration.from_dict(rich.to_dict()) == rich
    assert [m.value for m in TimestampingMode] == ["client-prefer", "client-require", "arrival"]


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: ScalingPolicy.fixed(0), "min_segments must be >= 1, got 0"),
        (lambda: ScalingPolicy.fixed(2**31), "min_segments must be <= 1000, got 2147483648"),
        (lambda: ScalingPolicy.by_event_rate(0, 2, 1), "target_rate"),
        (lambda: ScalingPolicy.by_event_rate(10, 1, 1), "scale_factor"),
        (lambda: ScalingPolicy(type="sideways"), "'sideways' is not one of: fixed"),  # type: ignore[arg-type]
        (lambda: RetentionPolicy.by_size(0), "got 0"),
        (lambda: RetentionPolicy(limit=5), "takes no limit, got 5"),
        (lambda: StreamConfiguration(timestamping="wall"), "'wall' is not one of: client-prefer"),  # type: ignore[arg-type]
        (lambda: StreamConfiguration(timestamp_aggregation_timeout_ms=-1), "got -1"),
        (
            lambda: StreamConfiguration(first_watermark_delay_ms=-2),
            "first_watermark_delay_ms must be >= 0, got -2",
        ),
        (
            lambda: StreamConfiguration.from_dict({"colour": 1}),
            "unknown stream configuration keys ['colour']",
        ),
        (lambda: StreamConfiguration.from_dict({"scaling_policy": {"n": 1}}), "['n']"),
    ],
)
def test_bad_configurations_name_the_value(make, fragment):
    with pytest.raises(
        InvalidConfigurationError, match=fragment.replace("[", r"\[").replace("(", r"\(")
    ):
        make()


NO_KAFKA_RETENTION = {"retention.ms": "-1", "retention.bytes": "-1"}


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        (
            StreamConfiguration(),
            {
                **NO_KAFKA_RETENTION,
                "message.timestamp.type": "CreateTime",
                "message.timestamp.after.max.ms": None,
            },
        ),
        (
            StreamConfiguration(uncapped=True),
            {
                **NO_KAFKA_RETENTION,
                "message.timestamp.type": "CreateTime",
                "message.timestamp.after.max.ms": UNCAPPED_AFTER_MAX_MS,
            },
        ),
        (
            StreamConfiguration(timestamping=TimestampingMode.ARRIVAL),
            {
                **NO_KAFKA_RETENTION,
                "message.timestamp.type": "LogAppendTime",
                "message.timestamp.after.max.ms": None,
            },
        ),
        (
            StreamConfiguration(timestamping=TimestampingMode.CLIENT_REQUIRE),
            {
                **NO_KAFKA_RETENTION,
                "message.timestamp.type": "CreateTime",
                "message.timestamp.after.max.ms": None,
            },
        ),
    ],
)
def test_topic_configs(cfg, expected):
    assert topic_configs(cfg) == expected


# --- state machine ------------------------------------------------------------------------

LEGAL = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}


@pytest.mark.parametrize("current", list(S))
@pytest.mark.parametrize("target", list(S))
def test_every_transition(current, target):
    if (current, target) in LEGAL:
        require_transition("s/x", current, target)
        return
    with pytest.raises(IllegalTransitionError) as info:
        require_transition("s/x", current, target)
    assert str(current) in str(info.value) and str(target) in str(info.value)


@pytest.mark.parametrize(
    ("current", "target", "error"),
    [
        (S.SEALED, S.SCALING, StreamSealedError),
        (S.SEALING, S.TRUNCATING, StreamSealedError),
        (S.ACTIVE, S.DELETING, StreamNotSealedError),
        (S.SCALING, S.TRUNCATING, ConcurrentOperationError),
        (S.TRUNCATING, S.SCALING, ConcurrentOperationError),
        (S.UPDATING, S.SEALING, ConcurrentOperationError),
    ],
)
def test_transition_errors_are_telling(current, target, error):
    with pytest.raises(error, match=f"from {current} to {target}"):
        require_transition("s/x", current, target)


def test_stream_is_scaling_message():
    with pytest.raises(ConcurrentOperationError, match="stream is scaling"):
        require_transition("s/x", S.SCALING, S.SEALING)


@pytest.mark.parametrize("state", list(S))
def test_writable_states(state):
    if state in (S.ACTIVE, S.UPDATING, S.SCALING, S.TRUNCATING):
        require_writable("s/x", state)
    else:
        with pytest.raises(IllegalTransitionError):
            require_writable("s/x", state)


# --- metadata -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pending",
    [
        None,
        PendingScale((0,), (R(0, 0.5), R(0.5, 1)), 5, 1),
        PendingTruncate({0: 3}),
        PendingUpdate(StreamConfiguration(uncapped=True)),
        PendingSeal(),
    ],
)
def test_metadata_round_trip(history, pending):
    meta = history.with_changes(
        pending=pending, truncation={C: 1, E: 2}, sealed_sizes={A: 4, B: 7, D: 0}
    )
    assert decode_metadata(encode_metadata(meta)) == meta


def test_metadata_queries(history):
    assert history.current_epoch().number == 2
    assert set(history.segments()) == {A, B, C, D, E}
    assert history.segment(E).key_range == R(0.25, 1.0)
    assert [s.id for s in history.active_segments()] == [C, E]
    assert [history.is_sealed(s) for s in (A, B, C, D, E, 99)] == [
        True,
        True,
        False,
        True,
        False,
        False,
    ]
    assert history.partition_count() == 5
    assert history.with_changes(state=S.SEALED).is_sealed(C)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 10])
def test_even_ranges_cover(count):
    ranges = even_ranges(count)
    assert len(ranges) == count and ranges[0].low == 0.0 and ranges[-1].high == 1.0
    assert all(a.high == b.low for a, b in itertools.pairwise(ranges))


# --- navigation ---------------------------------------------------------------------------


def test_key_hash_is_stable_and_in_range():
    assert key_hash("customer-42") == key_hash(b"customer-42")
    assert key_hash("customer-42") == 0.20265168573428766  # b2sum -l 64
    assert all(0.0 <= key_hash(str(i)) < 1.0 for i in range(1000))


def test_route(history):
    for key in ("a", "b", "customer-42", ""):
        seg = route(history.current_epoch(), key)
        assert seg.key_range.contains(key_hash(key))


@pytest.mark.parametrize(
    ("seg", "succ", "pred", "sealed_at"),
    [
        (A, [C, D], [], 1),
        (B, [E], [], 2),
        (C, [], [A], None),
        (D, [E], [A], 2),
        (E, [], [B, D], None),
    ],
)
def test_successors_and_predecessors(history, seg, succ, pred, sealed_at):
    assert sorted(s.id for s in successors(history.epochs, seg)) == succ
    assert sorted(s.id for s in predecessors(history.epochs, seg)) == pred
    assert sealed_in(history.epochs, seg) == sealed_at


@pytest.mark.parametrize(
    ("time_ms", "epoch"), [(0, 0), (100, 0), (199, 0), (200, 1), (299, 1), (300, 2), (10**12, 2)]
)
def test_epoch_at(history, time_ms, epoch):
    assert epoch_at(history.epochs, time_ms).number == epoch


@pytest.mark.parametrize(
    ("finished", "truncation", "readable"),
    [
        (set(), {}, {A, B}),
        ({A}, {}, {B, C, D}),
        ({B}, {}, {A}),
        ({A, D}, {}, {B, C}),
        ({A, B, D}, {}, {C, E}),
        ({A, B, C, D}, {}, {E}),
        ({A, B, C, D, E}, {}, set()),
        (set(), {C: 0, D: 5, B: 2}, {B, C, D}),
        ({D}, {C: 0, D: 5, B: 2}, {B, C}),
        ({D, B}, {C: 0, D: 5, B: 2}, {C, E}),
        (set(), {C: 3, E: 0}, {C, E}),
    ],
)
def test_readable_segments(history, finished, truncation, readable):
    meta = history.with_changes(truncation=truncation)
    assert readable_segments(meta, finished) == readable


def test_head_segments(history):
    assert [s.id for s in head_segments(history)] == [A, B]
    cut = history.with_changes(truncation={C: 0, D: 5, B: 2})
    assert [s.id for s in head_segments(cut)] == [C, D, B]


# --- planning -----------------------------------------------------------------------------


def test_plan_split_and_merge(history):
    split = plan_scale(history, [E], [R(0.25, 0.5), R(0.5, 1.0)], at_ms=9)
    assert split.number == 3 and split.created_at_ms == 9
    assert [(s.id, s.key_range) for s in split.segments] == [
        (C, R(0, 0.25)),
        (segment_id(3, 5), R(0.25, 0.5)),
        (segment_id(3, 6), R(0.5, 1.0)),
    ]
    merge = plan_scale(history, [C, E], [R(0, 1)], at_ms=9)
    assert [s.id for s in merge.segments] == [segment_id(3, 5)]
    assert covers_exactly(merge.segments) and covers_exactly(split.segments)


@pytest.mark.parametrize(
    ("sealed", "ranges", "fragment"),
    [
        ([], [R(0, 1)], "at least one segment"),
        ([C], [], "at least one range"),
        ([C, C], [R(0, 0.25)], "segments [" + str(C) + "] named twice"),
        ([77], [R(0, 1)], "has no segment 77"),
        ([A], [R(0, 0.5)], f"segment {A} of stream 's/x' is already sealed"),
        ([C], [R(0, 0.1), R(0.05, 0.25)], "new ranges [0, 0.1) and [0.05, 0.25) overlap"),
        ([C], [R(0, 0.1), R(0.15, 0.25)], "gap between [0, 0.1) and [0.15, 0.25)"),
        ([C], [R(0, 0.3)], "cover [0, 0.3) but the sealed segments cover [0, 0.25)"),
        ([C], [R(0.1, 0.25)], "cover [0.1, 0.25)"),
    ],
)
def test_bad_scale_requests(history, sealed, ranges, fragment):
    with pytest.raises(InvalidScaleError) as info:
        plan_scale(history, sealed, ranges, at_ms=0)
    assert fragment in str(info.value)


def test_non_adjacent_sealed_segments():
    meta = new_stream_metadata("s/x", StreamConfiguration(ScalingPolicy.fixed(3)), 0)
    with pytest.raises(InvalidScaleError, match=r"not adjacent: gap between \[0, 0.333333\)"):
        plan_scale(meta, [0, 2], [R(0, 1)], at_ms=0)


def test_is_done_scale(history):
    assert is_done_scale(history, [D, B], [R(0.25, 1.0)])
    assert not is_done_scale(history, [A], [R(0, 0.25), R(0.25, 0.5)])
    assert not is_done_scale(history.with_changes(epochs=history.epochs[:1]), [A], [])


@pytest.mark.parametrize(
    ("truncation", "cut", "fragment"),
    [
        ({}, {}, "names at least one segment"),
        ({}, {99: 0, B: 0}, "has no segment 99"),
        ({}, {A: -1, B: 0}, "offset -1 of segment 0 is negative"),
        ({}, {A: 0}, "covers [0, 0.5), not [0, 1)"),
        ({}, {A: 0, B: 0, E: 0}, "overlap"),
        ({}, {C: 0, B: 0}, f"gap between segment {C}"),
        ({}, {A: 11, B: 0}, "offset 11 of segment 0 lies beyond its sealed size 10"),
        ({C: 0, E: 0}, {C: 0, D: 0, B: 0}, f"segment {D} is behind the truncation point"),
        (
            {C: 5, E: 0},
            {C: 4, E: 0},
            f"segment {C} at offset 4 is behind the truncation point (offset 5)",
        ),
    ],
)
def test_bad_cuts(history, truncation, cut, fragment):
    meta = history.with_changes(truncation=truncation, sealed_sizes={A: 10, B: 3, D: 2})
    with pytest.raises(InvalidCutError) as info:
        validate_cut(meta, cut)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("cut", "before"),
    [
        ({A: 0, B: 0}, []),
        ({C: 0, D: 1, B: 0}, [A]),
        ({C: 0, E: 0}, [A, B, D]),
        ({A: 3, B: 1}, []),
    ],
)
def test_valid_cuts_and_what_they_empty(history, cut, before):
    meta = history.with_changes(sealed_sizes={A: 10, B: 3, D: 2})
    assert validate_cut(meta, cut) == cut
    assert segments_before(meta, cut) == before


def test_the_pure_core_imports_no_io_library():
    import subprocess
    import sys

    pure = "config states metadata navigation planning store memory_store"
    code = (
        "import sys\n"
        + "".join(f"import controller.{m}\n" for m in pure.split())
        + "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('kazoo', 'confluent_kafka', 'pyspark', 'deltalake')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
