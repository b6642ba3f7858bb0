"""Maintenance on real Delta tables: compaction beside the sink's appends, readers, vacuum.

No broker: the tables are local Delta tables written by the controller's own
sink (:class:`tidemark.controller.delta.appends.DeltaTables`, delta-rs) and read by the
readers' code (:mod:`tidemark.pipelines.reading`).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from tidemark.controller.delta.appends import ensure_tables
from tidemark.controller.delta.location import TableLocation
from tidemark.controller.delta.maintenance import Maintainer, MaintenanceSettings
from tidemark.controller.delta.tables import read_watermarks
from tidemark.controller.model import Watermark
from tidemark.jobs.processor import output_row
from tidemark.jobs.sink import DeltaSink
from tidemark.jobs.workflow import Emitted, Rejected
from tidemark.pipelines.reading.seek import SeekIndex
from tidemark.schemas.arrow import ARROW_SCHEMAS
from tidemark.schemas.tables import INDEX, MARKS, REJECTED_MARKS, TABLES, table_path

STREAMS = [f"soak/s{i}" for i in range(5)]


def create_tables(root: str) -> None:
    from deltalake import DeltaTable

    for table in TABLES:
        DeltaTable.create(table_path(root, table), schema=ARROW_SCHEMAS[table])


def batch_rows(batch: int, streams: list[str] = STREAMS) -> list[dict[str, object]]:
    """One batch of the processor's output: a watermark per stream, one rejected mark."""
    rows = [
        output_row(
            Emitted(
                Watermark(
                    s, 1_000 + batch * 100, 1_050 + batch * 100, {0: batch * 3, 1: batch * 5}, batch
                ),
                ("w1",),
                1_050 + batch * 100,
                batch,
            )
        )
        for s in streams
    ]
    rows.append(output_row(Rejected(streams[0], "w9", "stale_time", b"x", 0, batch, batch)))
    return rows


def sink_for(root: str) -> DeltaSink:
    sink = DeltaSink(root, "test-maintenance")
    sink.bind("q1")
    return sink


def written(tmp_path: Path, batches: int) -> str:
    """A delta root whose tables the sink wrote ``batches`` batches to (one file each)."""
    root = str(tmp_path)
    create_tables(root)
    sink = sink_for(root)
    for b in range(batches):
        sink.write(batch_rows(b), b)
    return root


def settings(root: str, **overrides: object) -> MaintenanceSettings:
    values: dict[str, object] = {
        "compact_min_files": 4,
        "checkpoint_every": 5,
        "check_interval_s": 0.05,
        "vacuum_every_s": 3600.0,
    }
    values.update(overrides)
    return MaintenanceSettings(root, **values)  # type: ignore[arg-type]


def expected_marks(stream: str, batches: int) -> list[Watermark]:
    return [
        Watermark(stream, 1_000 + b * 100, 1_050 + b * 100, {0: b * 3, 1: b * 5}, b)
        for b in range(batches)
    ]


def test_compaction_runs_beside_appends_and_loses_nothing(tmp_path: Path) -> None:
    root = str(tmp_path)
    create_tables(root)
    sink = sink_for(root)
    batches = 120
    maintainer = Maintainer(settings(root)).start()
    try:
        for b in range(batches):  # every append must succeed while compactions commit
            sink.write(batch_rows(b), b)
    finally:
        maintainer.stop()
    assert maintainer.passes >= 2
    reports = Maintainer(settings(root)).run_once(force=True)
    assert all(r.error is None for r in reports), reports
    for stream in STREAMS:
        assert read_watermarks(root, stream) == expected_marks(stream, batches)
    index = Maintainer(settings(root))
    for table in TABLES:
        state = index.state(table)
        assert state.files <= 2, (table, state)  # compacted, not one per batch
    from deltalake import DeltaTable

    rejected = DeltaTable(table_path(root, REJECTED_MARKS)).to_pyarrow_table()
    assert sorted(rejected.column("kafka_offset").to_pylist()) == list(range(batches))
    assert_time_ordered(table_path(root, INDEX))


def assert_time_ordered(path: str) -> None:
    """Every file's row groups cover ascending, non-overlapping spans of time, and the
    last commit (a compaction) changed no data."""
    import json

    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    for uri in DeltaTable(path).file_uris():
        metadata = pq.ParquetFile(uri.removeprefix("file://")).metadata
        column = [metadata.schema.column(i).path for i in range(metadata.num_columns)].index("time")
        spans = [
            (g.column(column).statistics.min, g.column(column).statistics.max)
            for g in (metadata.row_group(i) for i in range(metadata.num_row_groups))
        ]
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    last = sorted(Path(path, "_delta_log").glob("*.json"))[-1]
    actions = [json.loads(line) for line in last.read_text().splitlines()]
    changes = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert changes and all(c["dataChange"] is False for c in changes)


def appends_beside_forced_passes(
    sink: DeltaSink, maint: Maintainer, streams: list[str], batches: int, vacuum: bool = True
) -> None:
    """``batches`` appends while another thread runs forced maintenance passes back to
    back; every append and every pass must succeed, and more than three passes run."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def hammer() -> None:
        while not stop.is_set():
            try:
                maint.run_once(force=True, vacuum=vacuum)
            except BaseException as exc:
                errors.append(exc)

    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        for b in range(batches):
            sink.write(batch_rows(b, streams), b)
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert maint.passes > 3


def test_sink_appends_never_fail_under_back_to_back_compactions(tmp_path: Path) -> None:
    """A compaction racing every append: appends win, compactions retry or wait."""
    root = str(tmp_path)
    create_tables(root)
    maint = Maintainer(settings(root, compact_min_files=2, check_interval_s=0.001))
    appends_beside_forced_passes(sink_for(root), maint, STREAMS[:2], 60)
    for stream in STREAMS[:2]:
        assert read_watermarks(root, stream) == expected_marks(stream, 60)


def test_appends_and_compactions_on_an_object_store_lose_no_commit(tmp_path: Path) -> None:
    """On S3 a commit is a check then a write (no atomic put-if-absent without a lock
    service): the sink's appends and the maintainer's commits in one driver must take
    turns, or two of them both take a version and one is lost (CI, 2026-11-27: the
    deployed controller's watermarks 99 and 198 were gone)."""
    from deltalake import DeltaTable

    from tidemark.infra.s3proxy import S3Proxy

    s3 = S3Proxy(tmp_path / "s3").start()
    try:
        options = s3.storage_options()
        root = "s3://lake/tidemark"
        for table in TABLES:
            DeltaTable.create(
                table_path(root, table), schema=ARROW_SCHEMAS[table], storage_options=options
            )
        sink = DeltaSink(TableLocation.of(root, options), "test-maintenance")
        sink.bind("q1")
        maint = Maintainer(
            settings(root, tables=(MARKS,), compact_min_files=2, storage_options=options)
        )
        appends_beside_forced_passes(sink, maint, STREAMS[:1], 60, vacuum=False)
        assert read_watermarks(root, STREAMS[0], options) == expected_marks(STREAMS[0], 60)
    finally:
        s3.stop()


def test_a_driver_starting_while_its_object_store_restarts_waits_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``ensure_tables`` (a controller driver's start) on an object store that is down:
    it waits for the store and creates every table once it answers, instead of exiting
    (CI's nemesis, 2026-11-27: a driver restarted during a 10 s store outage exited)."""
    from deltalake import DeltaTable

    from tidemark.infra.s3proxy import S3Proxy

    s3 = S3Proxy(tmp_path / "s3").start()
    s3.stop()
    root = "s3://lake/tidemark"
    options = s3.storage_options()
    failures: list[BaseException] = []

    def start_driver() -> None:
        try:
            ensure_tables(root, options)
        except BaseException as exc:
            failures.append(exc)

    driver = threading.Thread(target=start_driver)
    driver.start()
    try:
        deadline = time.monotonic() + 30
        while not (waits := [m for r in caplog.records if "not answer" in (m := r.getMessage())]):
            assert driver.is_alive() and not failures, failures  # it meets the store down
            assert time.monotonic() < deadline, "the driver never said it waits for the store"
            time.sleep(0.1)
        assert waits[0].startswith("creating table marks: the store did not answer")
        s3.start()
        driver.join(60)
        assert not driver.is_alive() and not failures, failures
        for table in TABLES:
            assert DeltaTable(table_path(root, table), storage_options=options).version() == 0
    finally:
        s3.stop()
        driver.join(5)


def test_readers_see_every_row_during_compaction(tmp_path: Path) -> None:
    root = written(tmp_path, 40)
    stop = threading.Event()
    seen: list[int] = []
    failures: list[BaseException] = []

    def read() -> None:
        while not stop.is_set():
            try:
                index = SeekIndex(root, refresh_interval_ms=0)
                found = index.start(STREAMS[1], 1_050 + 20 * 100 + 1)
                assert found is not None and found.seq == 20, found
                seen.append(len(read_watermarks(root, STREAMS[1])))
            except BaseException as exc:
                failures.append(exc)
                return

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(5):
            for r in Maintainer(settings(root)).run_once(force=True):
                assert r.error is None, r
    finally:
        stop.set()
        reader.join()
    assert not failures, failures[0]
    assert seen and set(seen) == {40}


def test_open_reader_survives_compaction_within_time_travel(tmp_path: Path) -> None:
    """A reader holding an old version reads its files after compaction and vacuum."""
    from deltalake import DeltaTable

    root = written(tmp_path, 10)
    old = DeltaTable(table_path(root, INDEX))
    Maintainer(settings(root)).run_once(force=True)  # vacuum keeps 168 h
    assert old.to_pyarrow_table().num_rows == 10 * len(STREAMS)


def test_vacuum_deletes_only_files_removed_before_the_time_travel_span(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    root = written(tmp_path, 8)
    index_dir = Path(table_path(root, INDEX))

    def parquet_files() -> set[str]:
        return {p.name for p in index_dir.glob("*.parquet")}

    before = parquet_files()
    assert len(before) == 8
    kept = Maintainer(settings(root, tables=(INDEX,)))
    kept.run_once(force=True)
    after_compaction = parquet_files()
    assert before <= after_compaction  # removed files stay: within 168 h of time travel
    live = {os.path.basename(u) for u in DeltaTable(str(index_dir)).file_uris()}
    assert len(live) == 1
    assert DeltaTable(str(index_dir), version=8).to_pyarrow_table().num_rows == 8 * len(STREAMS)

    time.sleep(1.1)
    gone = Maintainer(settings(root, tables=(INDEX,), time_travel_hours=0))
    report = gone.run_once(force=True)[0]
    assert report.vacuumed == 8
    assert parquet_files() == live
    assert DeltaTable(str(index_dir)).to_pyarrow_table().num_rows == 8 * len(STREAMS)


def test_missing_tables_are_skipped(tmp_path: Path) -> None:
    reports = Maintainer(settings(str(tmp_path))).run_once(force=True)
    assert [r.table for r in reports] == list(TABLES)
    assert all(r.version == -1 and r.error is None for r in reports)


def test_policy_keeps_small_tables_alone(tmp_path: Path) -> None:
    root = written(tmp_path, 3)
    report = Maintainer(settings(root, compact_min_files=10)).run_once()
    assert not any(r.compacted for r in report)
    assert (
        pa.table(
            __import__("deltalake")
            .DeltaTable(table_path(root, MARKS))
            .get_add_actions(flatten=True)
        ).num_rows
        == 3
    )


@pytest.mark.parametrize("table", [MARKS, INDEX])
def test_compacted_files_are_plain_delta(tmp_path: Path, table: str) -> None:
    """No table feature a plain reader lacks (deletion vectors, column mapping)."""
    from deltalake import DeltaTable

    root = written(tmp_path, 6)
    Maintainer(settings(root)).run_once(force=True)
    protocol = DeltaTable(table_path(root, table)).protocol()
    assert protocol.min_reader_version == 1
    assert not (protocol.reader_features or [])


def test_lookups_on_compacted_tables_match_the_pure_search(tmp_path: Path) -> None:
    """Streams of different ages and rates, compacted into files of tiny row groups:
    cold (statistics) and warm (in memory) lookups give the pure search's answers."""
    from tidemark.controller.index import index_rows, start_cut, stop_cut

    root = str(tmp_path)
    create_tables(root)
    sink = sink_for(root)
    marks: dict[str, list[Watermark]] = {"a/old": [], "a/new": [], "a/rare": []}
    top: dict[str, int] = {}
    for b in range(60):
        rows = []
        for name, every, start in (("a/old", 1, 0), ("a/new", 1, 30), ("a/rare", 7, 0)):
            if b < start or b % every:
                continue
            seq = len(marks[name])
            upper = 1_000 + b * 100 + (250 if b % 5 == 0 else 0)
            top[name] = max(upper, top.get(name, upper))
            mark = Watermark(name, 1_000 + b * 100, upper, {0: b}, seq)
            marks[name].append(mark)
            rows.append(output_row(Emitted(mark, (), top[name], b)))
        sink.write(rows, b)
        if b % 20 == 19:
            Maintainer(settings(root, row_group_rows=3, marks_row_group_rows=3)).run_once(
                force=True
            )
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    uris = DeltaTable(table_path(root, INDEX)).file_uris()
    groups = [pq.ParquetFile(u.removeprefix("file://")).metadata.num_row_groups for u in uris]
    assert max(groups) > 10, groups  # the walk over row groups is exercised
    uris = DeltaTable(table_path(root, MARKS)).file_uris()
    groups = [pq.ParquetFile(u.removeprefix("file://")).metadata.num_row_groups for u in uris]
    assert max(groups) > 10, groups  # and the cut's row group picked among many
    assert_time_ordered(table_path(root, INDEX))
    for name, written in marks.items():
        expected = index_rows(written)
        probes = range(900, 1_000 + 61 * 100, 37)
        cold = SeekIndex(root, refresh_interval_ms=0, warm_after=10_000)
        warm = SeekIndex(root, refresh_interval_ms=0, warm_after=0)
        for t in probes:
            for index in (cold, warm):
                found = index.start(name, t)
                assert (None if found is None else found.stream_cut) == start_cut(expected, t)
                stop = index.stop(name, t)
                assert (None if stop is None else stop.stream_cut) == stop_cut(expected, t)
        assert not cold.warm(name)
        assert warm.warm(name)


@pytest.mark.parametrize("compacted", [False, True])
def test_cold_start_finds_the_last_row_of_a_plateau(tmp_path: Path, compacted: bool) -> None:
    """Equal ``upper_time_max`` over several rows split across files / row groups: the
    cold walk must not stop at the first of them."""
    from tidemark.controller.delta.tables import append_watermarks

    root = str(tmp_path)
    uppers = [100, 200, 150, 180, 190, 300]  # running max: 100, 200, 200, 200, 200, 300
    previous = None
    for seq, upper in enumerate(uppers):
        mark = Watermark("p/s", 50 + seq * 10, upper, {0: seq}, seq)
        append_watermarks(root, [mark], previous_upper_time_max=previous)
        previous = upper if previous is None else max(previous, upper)
    if compacted:
        Maintainer(settings(root, tables=(INDEX,), row_group_rows=1)).run_once(force=True)
    index = SeekIndex(root, refresh_interval_ms=0, warm_after=10_000)
    assert index.cold_start_seq("p/s", 250) == 4
    assert index.cold_start_seq("p/s", 200) == 0
    assert index.cold_start_seq("p/s", 301) == 5
    assert index.cold_stop_seq("p/s", 75) == 3


def test_compact_index_tool_runs_the_same_pass(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from tidemark.jobs import compact_index

    root = written(tmp_path, 6)
    assert compact_index.main(["--delta-root", root, "--table", "index", "--no-vacuum"]) == 0
    assert "index: 6 -> 1 files (compacted 6 into 1, vacuumed 0)" in capsys.readouterr().out
    maint = Maintainer(settings(root))
    assert maint.state(INDEX).files == 1
    assert maint.state(MARKS).files == 6  # not asked for
    with pytest.raises(SystemExit):
        compact_index.main(["--delta-root", root, "--table", "nope"])


def test_switch_runs_maintenance_only_while_leading(tmp_path: Path) -> None:
    from tidemark.controller.delta.maintenance import MaintenanceSwitch

    root = str(tmp_path)
    create_tables(root)
    sink = sink_for(root)
    switch = MaintenanceSwitch(settings(root))
    switch.lead(False)
    assert not switch.leading
    for b in range(6):
        sink.write(batch_rows(b), b)
    switch.lead(True)
    switch.lead(True)  # idempotent: one loop
    try:
        deadline = time.monotonic() + 30
        while Maintainer(settings(root)).state(INDEX).files > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Maintainer(settings(root)).state(INDEX).files == 1
    finally:
        switch.close()
    assert not switch.leading
    for b in range(6, 12):
        sink.write(batch_rows(b), b)
    time.sleep(0.3)
    assert Maintainer(settings(root)).state(INDEX).files == 7  # nobody compacts now


def test_watermarks_since_reads_the_tail_of_compacted_tables(tmp_path: Path) -> None:
    from tidemark.pipelines.reading.windows import WatermarkFeed

    root = written(tmp_path, 30)
    Maintainer(settings(root, row_group_rows=5)).run_once(force=True)
    sink = sink_for(root)
    for b in range(30, 40):
        sink.write(batch_rows(b), b)
    expected = expected_marks(STREAMS[2], 40)
    for since in (0, 1_000, 2_250, 3_900, 4_000, 10_000):
        want = [m for m in expected if m.time >= since]
        assert read_watermarks(root, STREAMS[2], since=since) == want
        assert WatermarkFeed(root, STREAMS[2]).since(since) == want
    feed = WatermarkFeed(root, STREAMS[2])
    feed.refresh()
    assert feed.since(3_000) == [m for m in expected if m.time >= 3_000]  # loaded path


def test_a_file_past_the_first_tier_is_not_rewritten_again(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    from tidemark.controller.delta.compaction import TIER

    root = written(tmp_path, 60)
    index = table_path(root, INDEX)
    Maintainer(settings(root, tables=(INDEX,))).run_once(force=True)
    (first,) = DeltaTable(index).file_uris()
    merged = Path(first.removeprefix("file://")).stat().st_size
    # the merged file now lies between target / TIER and the target: the second tier
    tiered = settings(root, tables=(INDEX,), target_file_bytes=merged * TIER // 2)
    sink = sink_for(root)
    for b in range(60, 64):
        sink.write(batch_rows(b), b)
    small = max(p.stat().st_size for p in Path(index).glob("*.parquet") if str(p) != first)
    assert small < merged // 2
    Maintainer(tiered).run_once(force=True)
    files = DeltaTable(index).file_uris()
    assert first in files and len(files) == 2  # only the four new files were merged
    assert read_watermarks(root, STREAMS[0]) == expected_marks(STREAMS[0], 64)


def test_log_is_trimmed_to_its_retention_and_old_tables_get_it(tmp_path: Path) -> None:
    """Delta-rs lists the whole ``_delta_log`` on every open and commit, so
    the maintainer gives a table made without them the retention properties (the open
    sink's next append survives that commit) and trims the log after checkpoints;
    checkpoints stop carrying the tombstones of files removed before the retention."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from tidemark.controller.delta.maintenance import retention_properties

    root = str(tmp_path)
    create_tables(root)  # Delta's defaults: 30 days of log, 7 days of tombstones
    sink = sink_for(root)
    sink.write(batch_rows(0), 0)
    maintainer = Maintainer(settings(root, tables=(INDEX,), log_retention_s=1))
    maintainer.run_once(force=True, vacuum=False)
    index = DeltaTable(table_path(root, INDEX))  # a reader left at an old version
    assert index.metadata().configuration == retention_properties(1)
    for b in range(1, 12):
        sink.write(batch_rows(b), b)  # the open sink, after the property commit
    maintainer.run_once(force=True, vacuum=False)  # compacts: 12 tombstones
    time.sleep(1.5)
    for b in range(12, 15):
        sink.write(batch_rows(b), b)
    maintainer.run_once(force=True, vacuum=False)
    log_dir = Path(table_path(root, INDEX)) / "_delta_log"
    commits = sorted(int(p.name[:20]) for p in log_dir.glob("*.json"))
    latest = DeltaTable(table_path(root, INDEX))
    assert commits[-1] == latest.version()
    assert len(commits) <= 5, commits  # trimmed to the last checkpoint before 1 s ago
    checkpoint = sorted(log_dir.glob("*.checkpoint.parquet"))[-1]
    removes = pq.read_table(checkpoint, columns=["remove"]).column("remove").drop_null()
    assert len(removes) <= 4  # the last compaction's (1 + 3 files), not the 12 before
    assert latest.to_pyarrow_table().num_rows == 15 * len(STREAMS)
    index.update_incremental()  # its next commits are gone: it goes through the checkpoint
    assert index.version() == latest.version()
    assert index.to_pyarrow_table().num_rows == 15 * len(STREAMS)
    assert read_watermarks(root, STREAMS[1]) == expected_marks(STREAMS[1], 15)
    with pytest.raises(Exception, match=r"(?i)log segment|not found|version"):
        DeltaTable(table_path(root, INDEX), version=1)  # before the log's reach
