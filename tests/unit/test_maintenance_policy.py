"""The maintenance policy (pure): when to compact, checkpoint and vacuum a table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.delta.exceptions import DeltaConfigurationError
from tidemark.controller.delta.maintenance import MIB, MaintenanceSettings, Plan, TableState, plan

SETTINGS = MaintenanceSettings(
    "/d", compact_min_files=10, target_file_bytes=64 * MIB, checkpoint_every=20
)


def state(**changes: object) -> TableState:
    values: dict[str, object] = {
        "version": 100,
        "files": 3,
        "small_files": 3,
        "small_bytes": 3_000,
        "total_bytes": 3_000,
        "checkpoint_version": 95,
        "vacuumed_at": 0.0,
    }
    values.update(changes)
    return TableState(**values)  # type: ignore[arg-type]


def test_a_few_small_files_are_left_alone() -> None:
    assert plan(state(), SETTINGS, now=10.0) == Plan(False, False, False)


def test_many_small_files_are_compacted_and_checkpointed() -> None:
    found = plan(state(files=12, small_files=10), SETTINGS, now=10.0)
    assert found.compact and found.checkpoint


def test_small_files_adding_up_to_a_target_file_are_compacted() -> None:
    found = plan(state(small_files=2, small_bytes=64 * MIB), SETTINGS, now=10.0)
    assert found.compact
    assert not plan(state(small_files=1, small_bytes=64 * MIB), SETTINGS, now=10.0).compact


def test_checkpoint_after_enough_commits() -> None:
    assert not plan(state(version=114, checkpoint_version=95), SETTINGS, 10.0).checkpoint
    assert plan(state(version=115, checkpoint_version=95), SETTINGS, 10.0).checkpoint
    assert plan(state(version=20, checkpoint_version=None), SETTINGS, 10.0).checkpoint


def test_vacuum_on_its_own_clock() -> None:
    assert plan(state(vacuumed_at=None), SETTINGS, now=1.0).vacuum
    assert not plan(state(vacuumed_at=0.0), SETTINGS, now=3_599.0).vacuum
    assert plan(state(vacuumed_at=0.0), SETTINGS, now=3_600.0).vacuum


@given(
    files=st.integers(0, 10_000),
    small=st.integers(0, 10_000),
    version=st.integers(0, 10**6),
    since=st.integers(0, 10**6),
)
def test_files_stay_bounded(files: int, small: int, version: int, since: int) -> None:
    """Whatever the table: fewer than ``compact_min_files`` small files are left after a plan."""
    small = min(small, files)
    found = plan(
        state(files=files, small_files=small, version=version, checkpoint_version=version - since),
        SETTINGS,
        now=0.0,
    )
    assert found.compact == (small >= SETTINGS.compact_min_files)
    if found.compact and version > 0:
        assert found.checkpoint


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"compact_min_files": 1}, "compact_min_files"),
        ({"target_file_bytes": 0}, "target_file_bytes"),
        ({"row_group_rows": 0}, "row_group_rows"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
        ({"time_travel_hours": -1}, "time_travel_hours"),
        ({"check_interval_s": 0}, "check_interval_s"),
        ({"log_retention_s": 0.5}, "log_retention_s"),
        ({"tables": ("marks", "nope")}, "nope"),
        ({"delta_root": " "}, "delta root"),
    ],
)
def test_bad_settings_are_named(changes: dict[str, object], named: str) -> None:
    values: dict[str, object] = {"delta_root": "/d", **changes}
    with pytest.raises(DeltaConfigurationError, match=named):
        MaintenanceSettings(**values)  # type: ignore[arg-type]


def test_bins_are_runs_in_time_order_up_to_the_target() -> None:
    from tidemark.controller.delta.compaction import SmallFile, bins

    files = [SmallFile(f"f{i}", size, i) for i, size in enumerate([4, 4, 4, 9, 1, 1, 10])]
    assert [[f.path for f in b] for b in bins(files, 10)] == [["f0", "f1"], ["f3", "f4"]]
    assert bins(files[:1], 10) == []  # nothing to merge
    assert [len(b) for b in bins(files, 100)] == [7]


def test_the_second_tier_is_compacted_only_when_enough_files_wait() -> None:
    assert not plan(state(small_files=0, small_bytes=0, medium_files=9), SETTINGS, 10.0).compact
    assert plan(state(small_files=0, small_bytes=0, medium_files=10), SETTINGS, 10.0).compact


def test_log_retention_is_short_on_a_local_file_system_only() -> None:
    """Delta-rs lists the whole log on every open and commit on a local file
    system; an object store lists from an offset, so its log follows the time travel."""
    from tidemark.controller.delta.maintenance import LOCAL_LOG_RETENTION_S, retention_properties

    assert MaintenanceSettings("/data/t").log_retention == LOCAL_LOG_RETENTION_S == 900
    assert MaintenanceSettings("file:///data/t").log_retention == 900
    assert MaintenanceSettings("s3://lake/t", time_travel_hours=24).log_retention == 86_400
    assert MaintenanceSettings("/data/t", log_retention_s=60).log_retention == 60
    assert retention_properties(900) == {
        "delta.logRetentionDuration": "interval 900 seconds",
        "delta.deletedFileRetentionDuration": "interval 900 seconds",
    }
