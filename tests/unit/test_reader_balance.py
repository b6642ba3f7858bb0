"""tidemark.pipelines.reading.balance and .checkpoints: the pure planning, and the checkpoint
protocol over the in-memory registry (no broker)."""

from __future__ import annotations

import time

import pytest

from tidemark.controller.model import KeyRange, Segment
from tidemark.pipelines.reading.balance import (
    ReaderReport,
    drifting,
    group_lower,
    lagging,
    plan_by_time,
    reader_time,
)
from tidemark.pipelines.reading.checkpoints import (
    Checkpoint,
    CheckpointParticipation,
    PendingCheckpoint,
)
from tidemark.pipelines.reading.config import ReaderConfig
from tidemark.pipelines.reading.exceptions import (
    CheckpointExistsError,
    CheckpointInProgressError,
    CheckpointTimeoutError,
    ReaderConfigError,
    WatermarksUnavailableError,
)
from tidemark.pipelines.reading.registry import MemoryGroupRegistry
from tidemark.pipelines.reading.view import GroupView, Plan


def rep(time: int | None, segments: int = 2) -> ReaderReport:
    return ReaderReport(time, segments)


def test_reports_round_trip_and_bad_ones_are_ignored():
    assert ReaderReport.from_bytes(rep(5, 3).to_bytes()) == rep(5, 3)
    full = ReaderReport(5, 1, 2, 3)
    assert ReaderReport.from_bytes(full.to_bytes()) == full
    assert ReaderReport.from_bytes(rep(None, 0).to_bytes()) == rep(None, 0)
    assert ReaderReport.from_bytes(b"") is None
    assert ReaderReport.from_bytes(b'{"time": "x"}') is None


@pytest.mark.parametrize(
    ("times", "expected"),
    [({}, None), ({1: 5, 2: 9}, 5), ({1: 5, 2: None}, None)],
)
def test_reader_time(times, expected):
    assert reader_time(times) == expected


def test_lagging_and_group_lower():
    reports = {"a": rep(1000), "b": rep(5000), "c": rep(4500), "idle": rep(None, 0)}
    assert lagging(reports, 1000) == {"a"}
    assert lagging(reports, 4000) == frozenset()
    assert lagging({**reports, "new": rep(None)}, 1000) == {"a", "new"}
    owned = {"a": ReaderReport(None, 0, 1200, 2), "b": ReaderReport(5000, 2, 900, 2)}
    assert group_lower(owned) == 900
    assert group_lower({**owned, "new": ReaderReport(None, 0, None, 1)}) is None
    assert group_lower({**owned, "new": ReaderReport(None, 0, None, 1)}, floor=100) == 100
    assert group_lower({"idle": rep(None, 0)}) is None


BALANCE_CASES = [
    # name, reader, owners, reports, times of the segments it may shed, expected plan
    (
        "no one lags: the even split",
        "slow",
        {},
        {"slow": rep(100), "fast": rep(150)},
        {},
        Plan((0, 1), ()),
    ),
    (
        "the laggard sheds its segment furthest behind",
        "slow",
        {0: "slow", 1: "slow", 2: "fast", 3: "fast"},
        {"slow": rep(100), "fast": rep(5000)},
        {0: 900, 1: 100},
        Plan((), (1,)),
    ),
    (
        "not the segments it just took (still settling)",
        "slow",
        {0: "slow", 1: "slow", 2: "fast", 3: "fast"},
        {"slow": rep(100), "fast": rep(5000)},
        {},
        Plan((), ()),
    ),
    (
        "the reader ahead takes the shed segment",
        "fast",
        {0: "slow", 2: "fast", 3: "fast"},
        {"slow": rep(100), "fast": rep(5000)},
        {2: 5000, 3: 5200},
        Plan((1,), ()),
    ),
    (
        "the laggard keeps one",
        "slow",
        {0: "slow", 1: "fast", 2: "fast", 3: "fast"},
        {"slow": rep(100, 1), "fast": rep(5000, 3)},
        {0: 100},
        Plan((), ()),
    ),
    (
        "caught up: the reader ahead keeps one extra (no swinging back)",
        "fast",
        {0: "slow", 1: "fast", 2: "fast", 3: "fast"},
        {"slow": rep(4900, 1), "fast": rep(5000, 3)},
        {1: 5000, 2: 5000, 3: 5100},
        Plan((), ()),
    ),
    (
        "a reader with nothing: the reader ahead gives surplus back",
        "fast",
        {0: "fast", 1: "fast", 2: "fast", 3: "fast"},
        {"slow": rep(None, 0), "fast": rep(5000, 4)},
        {},
        Plan((), (3, 2)),
    ),
]


@pytest.mark.parametrize(
    ("reader", "owners", "reports", "times", "expected"),
    [case[1:] for case in BALANCE_CASES],
    ids=[case[0] for case in BALANCE_CASES],
)
def test_plan_by_time(reader, owners, reports, times, expected):
    plan = plan_by_time(
        reader,
        ["fast", "slow"],
        [0, 1, 2, 3],
        owners,
        reports,
        times,
        lag_ms=1000,
    )
    assert plan == expected


def test_drifting():
    times = {1: 1000, 2: 7000, 3: None, 4: 6000}
    assert drifting(times, 1000, 5000) == {2}
    assert drifting(times, None, 5000) == frozenset()
    assert drifting(times, 1000, 0) == {2, 4}


@pytest.mark.parametrize(
    ("kw", "text"),
    [
        ({"balance": "fastest"}, "balance must be"),
        ({"lag_ms": -1}, "lag_ms"),
        ({"max_drift_ms": "5s"}, "max_drift_ms"),
    ],
)
def test_bad_policy_config(kw, text):
    with pytest.raises(ReaderConfigError, match=text):
        ReaderConfig(**kw)


# --- checkpoints ------------------------------------------------------------------


class Host:
    """What a checkpoint needs of a group: here, no watermarks and a fixed view."""

    def __init__(self, registry, cut):
        self.name, self.stream, self.registry = "g", "s/x", registry
        self.cut = cut

    def view(self):
        return GroupView(dict(self.cut), frozenset(), frozenset(self.cut))

    def segments(self):
        return {s: Segment(s, KeyRange(0.0, 1.0)) for s in self.cut}

    def watermark_feed(self):
        raise WatermarksUnavailableError("no delta root")


def test_checkpoint_json_round_trip():
    cp = Checkpoint("c", "g", "s/x", {0: 4, 1 << 32: 2}, 99, 10, 20, 3, ("r1",))
    assert Checkpoint.from_json(cp.to_json()) == cp


def test_checkpoint_waits_for_every_online_reader_then_records_atomically():
    registry = MemoryGroupRegistry()
    registry.join("g", "r1")
    registry.join("g", "r2")
    host = Host(registry, {0: 5})
    committed = []
    r1 = CheckpointParticipation(registry, "g", "r1", lambda: committed.append("r1"))
    r2 = CheckpointParticipation(registry, "g", "r2", lambda: committed.append("r2"))
    assert not r1.holding()
    pending = PendingCheckpoint(host, "c1", timeout_ms=10_000)
    with pytest.raises(CheckpointInProgressError):
        PendingCheckpoint(host, "c2", timeout_ms=10_000)
    assert r1.holding() and r1.holding()  # commits once, holds
    assert not pending.done() and pending.missing() == ["r2"]
    host.cut = {0: 7}  # r2 returned more events before it saw the request
    assert r2.holding()
    assert committed == ["r1", "r2"]
    assert pending.done()
    taken = pending.result()
    assert (taken.stream_cut, taken.readers, taken.lower) == ({0: 7}, ("r1", "r2"), None)
    assert not r1.holding() and not r2.holding()  # request withdrawn: they carry on
    assert Checkpoint.from_json(registry.checkpoint("g", "c1")) == taken
    with pytest.raises(CheckpointExistsError):
        PendingCheckpoint(host, "c1", timeout_ms=10_000)


def _timed_checkpoint(
    *readers: str,
) -> tuple[MemoryGroupRegistry, list[float], PendingCheckpoint]:
    """Checkpoint ``c1`` of group ``g`` (cut ``{0: 1}``, 500 ms to complete) on a clock the
    test moves (``clock[0]``, seconds); ``readers`` join the group first."""
    registry = MemoryGroupRegistry()
    for reader in readers:
        registry.join("g", reader)
    clock = [0.0]
    pending = PendingCheckpoint(
        Host(registry, {0: 1}), "c1", timeout_ms=500, monotonic=lambda: clock[0]
    )
    return registry, clock, pending


def test_a_reader_that_never_acknowledges_times_the_checkpoint_out():
    registry, clock, pending = _timed_checkpoint("stuck")
    assert not pending.done()
    clock[0] = 1.0
    with pytest.raises(CheckpointTimeoutError, match="stuck"):
        pending.done()
    assert registry.checkpoint_request("g") is None
    assert registry.checkpoint_names("g") == []
    # a reader that left needs no acknowledgement
    registry.leave("g", "stuck")
    assert PendingCheckpoint(Host(registry, {0: 1}), "c2", timeout_ms=500).result().readers == ()


def _eventually(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_checkpoint_nobody_waits_for_is_taken_by_itself():
    """The initiator never calls done()/result() (a reader thread that initiates
    cannot: it must read to acknowledge): once every reader has acknowledged, the
    checkpoint is taken and the readers carry on."""
    registry = MemoryGroupRegistry()
    registry.join("g", "r1")
    r1 = CheckpointParticipation(registry, "g", "r1", lambda: None)
    pending = PendingCheckpoint(Host(registry, {0: 3}), "c1", timeout_ms=10_000)
    assert r1.holding()
    assert _eventually(lambda: registry.checkpoint("g", "c1") is not None)
    assert _eventually(lambda: not r1.holding())
    assert pending.done() and pending.result().stream_cut == {0: 3}


def test_a_checkpoint_nobody_waits_for_is_withdrawn_at_its_timeout():
    registry, clock, pending = _timed_checkpoint("stuck")
    time.sleep(0.2)
    assert registry.checkpoint_request("g") == "c1"  # before the timeout it stands
    clock[0] = 1.0
    assert _eventually(lambda: registry.checkpoint_request("g") is None)
    assert registry.checkpoint_names("g") == []
    with pytest.raises(CheckpointTimeoutError, match="stuck"):
        pending.done()


def test_a_cancelled_checkpoint_is_never_taken_and_times_out_for_a_waiter():
    """After cancel() the request is gone and nothing is recorded; done() keeps
    answering False until the timeout, then raises (result() does not wait for ever)."""
    registry, clock, pending = _timed_checkpoint()
    pending.cancel()
    assert registry.checkpoint_request("g") is None
    assert not pending.done()  # no reader online: it would be taken, but it was cancelled
    clock[0] = 1.0
    with pytest.raises(CheckpointTimeoutError):
        pending.result()
    assert registry.checkpoint_names("g") == []


def test_segment_clocks_count_a_segment_at_a_cut_offset_as_not_behind():
    """A segment holding nothing (offset 0 in every cut) or read to the last cut's
    offset is not behind those watermarks: for balancing it must not look behind."""
    from tidemark.controller.model import Watermark
    from tidemark.pipelines.reading.balance import SegmentClocks

    a, b = Segment(0, KeyRange(0.0, 0.5)), Segment(1, KeyRange(0.5, 1.0))
    marks = [
        Watermark("s/x", 100, 110, {0: 3, 1: 0}, 0),
        Watermark("s/x", 200, 210, {0: 6, 1: 0}, 1),
    ]

    class Feed:
        watermarks = marks

        def refresh(self, *, force=False):
            return len(marks)

    clocks = SegmentClocks(lambda: Feed(), lambda: {0: a, 1: b})  # type: ignore[arg-type,return-value]
    assert clocks.times({0: 2, 1: 0}) == {0: None, 1: 200}
    assert clocks.times({0: 3, 1: 0}) == {0: 100, 1: 200}
    assert clocks.times({0: 6}) == {0: 200}
    assert clocks.times({0: 1}) == {0: None}  # moved back (taken again): from scratch
    assert clocks.first_time() == 100


def test_alignment_across_streams_counts_the_readers_of_the_peer_groups():
    """A member group's reader pauses segments running ahead of the slowest reader of
    any stream read with it (peers); a peer behind every watermark counts at its
    own stream's first watermark (its report's floor)."""
    from tidemark.controller.model import Watermark
    from tidemark.pipelines.reading.balance import SegmentClocks, TimePolicy

    seg = Segment(0, KeyRange(0.0, 1.0))
    marks = [Watermark("s/b", t, t + 10, {0: i + 1}, i) for i, t in enumerate((5_000, 9_000))]

    class Feed:
        watermarks = marks

        def refresh(self, *, force=False):
            return len(marks)

    registry = MemoryGroupRegistry()
    registry.join("g.1", "r")
    config = ReaderConfig(max_drift_ms=1_000)
    clocks = SegmentClocks(lambda: Feed(), lambda: {0: seg})  # type: ignore[arg-type,return-value]
    policy = TimePolicy(config, registry, "g.1", "r", clocks, peers=("g.0",))
    policy.observe({0: 2})  # at B's 9 000
    assert ReaderReport.from_bytes(registry.reports("g.1")["r"]).floor == 5_000
    assert policy.to_pause() == frozenset()  # peer group has no reader: own bound only
    registry.join("g.0", "a")
    registry.report("g.0", "a", ReaderReport(None, 0, 7_000, 1).to_bytes())
    assert policy.to_pause() == {0}  # 9 000 runs 2 s ahead of stream A's 7 000
    registry.report("g.0", "a", ReaderReport(None, 0, 8_500, 1).to_bytes())
    assert policy.to_pause() == frozenset()
    registry.report("g.0", "a", ReaderReport(None, 0, None, 1, floor=100).to_bytes())
    assert policy.to_pause() == {0}  # behind A's first watermark (100)
    assert group_lower({"x": ReaderReport(None, 0, None, 1, floor=100)}, floor=50) == 100


def test_a_taken_segment_settles_once_it_caught_up_or_after_the_longest_settling():
    """A segment a reader just took counts in its report only after the settling time
    and once within ``lag_ms`` of the lead: a taker slow to start fetching it must not
    look like a laggard and give it back. One that never catches up counts in the end."""
    from tidemark.pipelines.reading.balance import (
        CATCH_UP_INTERVALS,
        SETTLE_INTERVALS,
        TimePolicy,
    )

    times: dict[int, int | None] = {0: 5_000, 1: 1_000}

    class Clocks:
        def times(self, offsets):
            return {seg: times[seg] for seg in offsets}

        def first_time(self):
            return None

    clock = [0.0]
    registry = MemoryGroupRegistry()
    registry.join("g", "r")
    config = ReaderConfig(balance="time", lag_ms=1_000, rebalance_interval_ms=100)
    policy = TimePolicy(config, registry, "g", "r", Clocks(), monotonic=lambda: clock[0])  # type: ignore[arg-type]
    offsets = {0: 10, 1: 3}
    policy.took([1])
    policy.observe(offsets)
    assert policy.settled_times == {0: 5_000}  # just taken
    clock[0] = SETTLE_INTERVALS * 0.1
    policy.observe(offsets)
    assert policy.settled_times == {0: 5_000}  # settled in time, but 4 s behind the lead
    times[1] = 4_200
    policy.observe(offsets)
    assert policy.settled_times == {0: 5_000, 1: 4_200}  # caught up: counts
    times[1] = 1_000  # and stays counted, however it fares from now on
    policy.observe(offsets)
    assert policy.settled_times == {0: 5_000, 1: 1_000}
    assert ReaderReport.from_bytes(registry.reports("g")["r"]).time == 1_000

    policy.took([1])  # taken again, and never catching up
    clock[0] += (CATCH_UP_INTERVALS - 1) * 0.1
    policy.observe(offsets)
    assert 1 not in policy.settled_times
    clock[0] += 0.1
    policy.observe(offsets)
    assert policy.settled_times == {0: 5_000, 1: 1_000}
