"""The complete-window Spark job on real Kafka, ZooKeeper, Spark and Delta."""

from __future__ import annotations

import pytest

from jobs.complete_window import last_window_start, plan_window, run_due_windows, run_window
from jobs.exceptions import WindowNotCompleteError
from pipelines.writing.writer import EventWriter
from tests.integration import test_reader_group as rg

BASE = rg.BASE
Marks = rg.Marks
make_stream = rg.make_stream
# the shared fixtures
manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_complete_windows_aggregate_exactly_their_events(
    spark, manager, store, kafka, wconfig, unique, tmp_path
):
    root = str(tmp_path)
    stream = make_stream(manager, unique)
    marks = Marks(stream, store, root)
    written = []
    with (
        EventWriter("a", stream, store=store, bootstrap_servers=kafka, config=wconfig) as a,
        EventWriter("b", stream, store=store, bootstrap_servers=kafka, config=wconfig) as b,
    ):
        for rnd in range(6):
            for writer, skew in ((a, 0), (b, 150)):
                for j in range(4):
                    ts = BASE + rnd * 100 + skew + j * 20
                    writer.write(b"x" * (j + 1), routing_key=f"k{j}", timestamp=ts)
                    written.append((ts, j + 1))
            for writer, skew in ((a, 0), (b, 150)):
                marks.note(writer, BASE + rnd * 100 + skew + 99)
            marks.cycle()
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
