"""tidemark.jobs.due's schedule and tidemark.jobs.controller_job's layout check, without
services."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.naming import ClusterSettings
from tidemark.jobs.config import ControllerSettings
from tidemark.jobs.controller_job import check_layout, layout
from tidemark.jobs.due import DueTimes
from tidemark.jobs.exceptions import JobConfigurationError


def test_the_latest_report_per_slot_wins_and_a_taken_slot_is_forgotten() -> None:
    times = DueTimes()
    times.report(1, 500)
    times.report(2, 300)
    times.report(1, 200)  # replaces 500
    times.report(3, 100)
    times.report(3, None)  # withdrawn
    assert times.next_due() == 200
    assert times.take(250) == [1]
    assert times.take(250) == []
    assert times.pending() == {2: 300}
    assert times.take(10_000) == [2] and times.next_due() is None


@given(st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(0, 100)))))
def test_take_answers_exactly_the_latest_reports_due(reports: list[tuple[int, int | None]]) -> None:
    times, latest = DueTimes(), {}
    for slot, due in reports:
        times.report(slot, due)
        latest[slot] = due
    pending = {s: d for s, d in latest.items() if d is not None}
    assert times.pending() == pending
    assert sorted(times.take(50)) == sorted(s for s, d in pending.items() if d <= 50)
    assert times.pending() == {s: d for s, d in pending.items() if d > 50}


def settings(
    buckets: int, root: str = "/ckpt", partitions: int | None = None
) -> ControllerSettings:
    return ControllerSettings(
        kafka_bootstrap="k:1",
        zk_connect="z:1",
        delta_root="/delta",
        checkpoint_root=root,
        cluster=ClusterSettings(bucket_count=buckets),
        state_partitions=partitions,
    )


def test_the_bucket_count_is_fixed_by_the_checkpoint() -> None:
    published = layout(settings(8, partitions=2))
    check_layout(settings(8), None)
    check_layout(settings(8), published)
    check_layout(settings(64, "/other"), published)  # a new checkpoint: free
    with pytest.raises(JobConfigurationError, match="bucket_count 8, not 64"):
        check_layout(settings(64), published)


def test_the_state_partitions_and_slots_are_fixed_by_the_checkpoint() -> None:
    published = layout(settings(8, partitions=4))
    assert (published["state_partitions"], published["slot_count"]) == (4, 16)
    check_layout(settings(8, partitions=4), published)
    check_layout(settings(8), published)  # not given: the checkpoint's
    with pytest.raises(JobConfigurationError, match="state_partitions 4, not 2"):
        check_layout(settings(8, partitions=2), published)


def test_slots_follow_the_state_partitions_not_the_buckets() -> None:
    assert settings(8).resolved_state_partitions(2) == 2
    assert settings(64).resolved_state_partitions(2) == 2
    assert settings(8, partitions=16).resolved_state_partitions(2) == 16
    assert settings(8, partitions=2).slot_count == settings(64, partitions=2).slot_count == 8
    with pytest.raises(JobConfigurationError, match="not resolved"):
        _ = settings(8).slot_count
    with pytest.raises(JobConfigurationError, match="state_partitions must be >= 1"):
        settings(8, partitions=0)


def test_a_started_checkpoint_decides_the_state_partitions() -> None:
    from tidemark.jobs.controller_job import resolve

    published = layout(settings(8, partitions=3))
    assert resolve(None, settings(8), published).state_partitions == 3
    # a checkpoint from before the setting: one state partition per bucket, 4 slots each
    old = {k: v for k, v in published.items() if k != "state_partitions"}
    assert resolve(None, settings(8), old).slot_count == 32


def test_a_started_checkpoint_keeps_its_slot_keys() -> None:
    from tidemark.jobs.controller_job import resolve

    published = layout(settings(8, partitions=2))
    assert published["slot_keys"] == "balanced"
    resolved = resolve(None, settings(8), published)
    assert resolved.balanced_slots and resolved.slot_keys != tuple(range(8))
    # a checkpoint started before balanced keys: its state is keyed 0 .. slot_count - 1
    old = {k: v for k, v in published.items() if k != "slot_keys"}
    assert resolve(None, settings(8), old).slot_keys == tuple(range(8))
