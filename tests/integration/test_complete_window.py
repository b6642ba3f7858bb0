"""The complete-window Spark job on real Kafka, ZooKeeper, Spark and Delta."""

from __future__ import annotations

import pytest

from tests.integration import test_reader_group as rg
from tidemark.jobs.complete_window import (
    last_window_start,
    plan_window,
    run_due_windows,
    run_window,
)
from tidemark.jobs.exceptions import WindowNotCompleteError
from tidemark.pipelines.writing.writer import EventWriter

BASE = rg.BASE
Marks = rg.Marks
make_stream = rg.make_stream
write_rounds = rg.write_rounds
# the shared fixtures
manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_complete_windows_aggregate_exactly_their_events(
    spark, manager, store, kafka, wconfig, unique, tmp_path
):
    root = str(tmp_path)
    stream = make_stream(manager, unique)
    marks = Marks(stream, store, root)
    with (
        EventWriter("a", stream, store=store, bootstrap_servers=kafka, config=wconfig) as a,
        EventWriter("b", stream, store=store, bootstrap_servers=kafka, config=wconfig) as b,
    ):
        rounds = write_rounds(
            marks,
            ((a, 0), (b, 150)),
            rounds=6,
            per_round=4,
            event=lambda writer, j, ts: (b"x" * (j + 1), f"k{j}"),
            step_ms=20,
        )
    written = [(ts, j + 1) for ts, j in rounds]  # (time, size)
    # A window past every watermark is not complete: refused, nothing written.
    with pytest.raises(WindowNotCompleteError):
        plan_window(stream, BASE + 500, BASE + 700, store=store, delta_root=root)

    result = run_window(
        spark,
        stream,
        BASE + 100,
        BASE + 300,
        store=store,
        bootstrap_servers=kafka,
        delta_root=root,
    )
    inside = [(t, n) for t, n in written if BASE + 100 <= t < BASE + 300]
    assert result.events == len(inside)
    assert result.bytes == sum(n for _, n in inside)
    assert (result.first_time, result.last_time) == (min(inside)[0], max(inside)[0])
    assert result.keys == 4

    due = run_due_windows(
        spark,
        stream,
        size_ms=200,
        first_start_ms=BASE + 100,
        store=store,
        bootstrap_servers=kafka,
        delta_root=root,
    )
    # [100, 300) is written already (txn version), so the next is [300, 500); [500, 700) waits.
    assert [r.window_start for r in due] == [BASE + 300]
    assert last_window_start(root, stream) == BASE + 300
    from deltalake import DeltaTable

    rows = DeltaTable(f"{root}/window_aggregates").to_pyarrow_table().to_pylist()
    assert sorted(r["window_start"] for r in rows) == [BASE + 100, BASE + 300]


def test_window_run_waits_for_completeness_and_writes_once(
    spark, manager, store, kafka, zookeeper, wconfig, unique, tmp_path
):
    """``tidemark window run``: exit 75 before the window is complete; after, exactly the
    window's events; a second run changes nothing; --sql; --every resumes and stops."""
    import argparse

    from deltalake import DeltaTable

    from tidemark.jobs.complete_window import run_from_args
    from tidemark.jobs.window_args import add_window_arguments
    from tidemark.pipelines.reading.stream_time import EXIT_NOT_YET

    root = str(tmp_path / "delta")
    stream = make_stream(manager, unique)
    marks = Marks(stream, store, root)
    written = []
    with EventWriter("a", stream, store=store, bootstrap_servers=kafka, config=wconfig) as a:
        for rnd in range(4):
            for j in range(5):
                ts = BASE + rnd * 100 + j * 20
                a.write(b"e" * (j + 1), routing_key=f"k{j}", timestamp=ts)
                written.append(ts)
            marks.note(a, BASE + rnd * 100 + 99)
            marks.cycle()
    parser = argparse.ArgumentParser()
    add_window_arguments(parser)
    common = ["--delta-root", root, "--bootstrap", kafka, "--zk"]
    common += [f"{zookeeper}/tidemark-test-{unique}", "--zk-root", "/tidemark"]

    def run(*argv):
        return run_from_args(parser.parse_args([stream, *argv, *common]), spark=spark)

    out = str(tmp_path / "out")
    # Not complete (the last watermark is at BASE + 399): exit 75, nothing written.
    assert run("--from", str(BASE + 300), "--to", str(BASE + 500), "--output", out) == 75
    assert EXIT_NOT_YET == 75
    assert not (tmp_path / "out").exists()

    def rows(path):
        return sorted(
            DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["window_start"]
        )

    window = ["--from", str(BASE + 100), "--to", str(BASE + 300), "--output", out]
    assert run(*window) == 0
    inside = [t for t in written if BASE + 100 <= t < BASE + 300]
    first = rows(out)
    assert [(r["window_start"], r["events"]) for r in first] == [(BASE + 100, len(inside))]
    assert (first[0]["first_time"], first[0]["last_time"]) == (min(inside), max(inside))
    assert run(*window) == 0  # again: one result, the same numbers
    second = rows(out)
    assert [(r["window_start"], r["events"], r["bytes"]) for r in second] == [
        (r["window_start"], r["events"], r["bytes"]) for r in first
    ]

    sql_out = str(tmp_path / "sql")
    query = "SELECT count(*) AS n, min(ts) AS lo, max(ts) AS hi FROM window_events"
    assert run(*window[:4], "--output", sql_out, "--sql", query) == 0
    assert run(*window[:4], "--output", sql_out, "--sql", query) == 0
    got = rows(sql_out)
    assert [(r["window_start"], r["window_end"], r["n"], r["lo"], r["hi"]) for r in got] == [
        (BASE + 100, BASE + 300, len(inside), min(inside), max(inside))
    ]

    # --every: resumes after the last window written (start BASE + 100), runs
    # [200, 300) and [300, 400), stops (75) at [400, 500) whose watermark never comes.
    every = ["--from", str(BASE + 100), "--every", "100ms", "--wait-ms", "300", "--output", out]
    assert run(*every) == EXIT_NOT_YET
    assert [r["window_start"] for r in rows(out)] == [BASE + 100, BASE + 200, BASE + 300]
    assert rows(out)[2]["events"] == len([t for t in written if BASE + 300 <= t < BASE + 400])
