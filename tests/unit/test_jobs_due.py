"""jobs.due's schedule and jobs.controller_job's layout check, without services."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.naming import ClusterSettings
from jobs.config import ControllerSettings
from jobs.controller_job import check_layout, layout
from jobs.due import DueTimes
from jobs.exceptions import JobConfigurationError


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


def settings(buckets: int, root: str = "/ckpt") -> ControllerSettings:
    return ControllerSettings(
        kafka_bootstrap="k:1",
        zk_connect="z:1",
        delta_root="/delta",
        checkpoint_root=root,
        cluster=ClusterSettings(bucket_count=buckets),
    )


def test_the_bucket_count_is_fixed_by_the_checkpoint() -> None:
    check_layout(settings(8), None)
    check_layout(settings(8), layout(settings(8)))
    check_layout(settings(64, "/other"), layout(settings(8)))  # a new checkpoint: free
    with pytest.raises(JobConfigurationError, match="bucket_count 8, not 64"):
        check_layout(settings(64), layout(settings(8)))
    assert layout(settings(8))["slot_count"] == 32
