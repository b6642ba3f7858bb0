"""tidemark.jobs.controller_job helpers that need no services."""

from __future__ import annotations

import pytest

from tidemark.jobs.controller_job import first_batch, is_local


@pytest.mark.parametrize(
    ("root", "local"),
    [
        ("/data/checkpoints", True),
        ("relative/checkpoints", True),
        ("file:///data/checkpoints", True),
        ("hdfs://nn:8020/tidemark/checkpoints", False),
        ("s3a://lake/tidemark/_checkpoints", False),
        ("abfss://c@acct.dfs.core.windows.net/ck", False),
    ],
)
def test_only_local_checkpoint_roots_count_as_local(root: str, local: bool) -> None:
    assert is_local(root) is local


class _Query:
    """What :func:`first_batch` reads of a ``StreamingQuery``: its recent progress."""

    def __init__(self, reports: list[dict[str, object]]) -> None:
        self.recentProgress = reports


def test_first_batch_skips_the_idle_reports_without_an_add_batch_phase() -> None:
    idle = {"batchId": 7, "durationMs": {"latestOffset": 3, "triggerExecution": 3}}
    ran = {"batchId": 7, "durationMs": {"addBatch": 900, "triggerExecution": 1200}}
    later = {"batchId": 8, "durationMs": {"addBatch": 100, "triggerExecution": 150}}
    assert first_batch(_Query([idle, ran, later])) == ran
    assert first_batch(_Query([idle])) is None
    assert first_batch(_Query([])) is None


class Task:
    def __init__(self, name: str, calls: list[str], fail: bool = False) -> None:
        self.name, self.calls, self.fail = name, calls, fail

    def lead(self, leading: bool) -> None:
        self.calls.append(f"{self.name} {'leads' if leading else 'stops'}")
        if self.fail and leading:
            raise RuntimeError("cannot start")

    def close(self) -> None:
        self.calls.append(f"{self.name} closed")


def test_leader_tasks_run_around_the_query_and_a_failing_one_stops_nothing() -> None:
    import threading

    from tidemark.jobs.config import ControllerSettings
    from tidemark.jobs.controller_job import ControllerJob

    calls: list[str] = []
    settings = ControllerSettings("k:9092", "z:2181", "/data/delta", "/data/ckpt")
    job = ControllerJob(
        None, settings, "a", leader_tasks=[Task("policies", calls), Task("bad", calls, True)]
    )
    job._run_query = lambda lost: calls.append("query")  # type: ignore[method-assign]
    job._lead(threading.Event())
    assert calls == ["policies leads", "bad leads", "query", "policies stops"]
    calls.clear()
    job.stop()
    assert calls == ["policies closed", "bad closed"]
