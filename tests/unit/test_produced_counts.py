"""Records produced per partition from librdkafka statistics reports (pure)."""

from __future__ import annotations

import json

from tidemark.pipelines.writing.produced_counts import StatisticsReports


def report(ts: int, **topics: dict[str, int]) -> str:
    return json.dumps(
        {
            "type": "producer",
            "ts": ts,
            "topics": {
                t: {"partitions": {p: {"msgs": n, "txmsgs": 0} for p, n in parts.items()}}
                for t, parts in topics.items()
            },
        }
    )


def test_no_report_yet_and_reports_older_than_asked_are_not_returned() -> None:
    reports = StatisticsReports()
    assert reports.since(0) is None
    reports(report(1_000, t={"0": 1}))
    assert reports.since(1_001) is None
    got = reports.since(1_000)
    assert got is not None and got.ts_us == 1_000


def test_produced_leaves_out_the_unassigned_partition_and_other_topics() -> None:
    reports = StatisticsReports()
    reports(report(5, t={"-1": 9, "0": 4, "2": 5}, other={"0": 7}))
    got = reports.since(0)
    assert got is not None
    assert got.produced("t") == {0: 4, 2: 5}
    assert got.produced("missing") == {}


def test_the_latest_report_wins_and_the_application_callback_gets_each() -> None:
    seen: list[str] = []
    reports = StatisticsReports(forward=seen.append)
    first, second = report(1, t={"0": 1}), report(2, t={"0": 3})
    reports(first)
    reports(second)
    assert seen == [first, second]
    got = reports.since(0)
    assert got is not None and got.produced("t") == {0: 3}
