"""Delta tables that know how complete they are, on real Kafka, ZooKeeper, Spark and Delta.

Spark Structured Streaming queries read tidemark streams (the Kafka source) and write
Delta tables (the Delta sink, or a ``foreachBatch`` MERGE with ``txnAppId``); the
tracking maps every table version to the time it is complete through, and the checks
read the table at each version: every event with a time at or below that is in it.
Watermarks are computed from the writers' own positions and appended with deltalake
(``test_reader_group.Marks``), so the controller job is not needed.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from tests.integration import test_reader_group as rg
from tests.jvm_clients import snippet
from tests.waiting import wait_until
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.delta.tracked import table_id
from tidemark.controller.delta.writer_log import table_commits
from tidemark.pipelines import complete_through, kafka_source_options, version_complete_at
from tidemark.pipelines.reading.exceptions import (
    TableCompletenessUnknownError,
    TableNotCompleteError,
)
from tidemark.pipelines.reading.seek import SeekIndex
from tidemark.pipelines.reading.table_time import read_complete, table_status
from tidemark.pipelines.reading.tracking import Tracker
from tidemark.pipelines.writing.writer import EventWriter

BASE = rg.BASE
Marks = rg.Marks
manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig

pytestmark = [pytest.mark.spark, pytest.mark.slow]


class Source:
    """Writers of one stream whose events' bodies name their time; the watermarks."""

    def __init__(self, manager, store, kafka, wconfig, unique, root, name="s", writers=2):
        self.stream = f"c{unique}/{name}"
        manager.create_scope(f"c{unique}")  # (False when it exists already)
        manager.create(self.stream, StreamConfiguration(ScalingPolicy.fixed(2)))
        self.marks = Marks(self.stream, store, root)
        self.writers = [
            EventWriter(
                f"{name}{i}", self.stream, store=store, bootstrap_servers=kafka, config=wconfig
            )
            for i in range(writers)
        ]
        self.events: list[tuple[int, str]] = []

    def write(self, start_ms, skews=(0, 35), count=4):
        """Each writer writes ``count`` events from ``start_ms`` + its skew (out of order
        across writers), keys spread over the segments."""
        for writer, skew in zip(self.writers, skews, strict=False):
            for j in range(count):
                ts = start_ms + skew + j * 7
                body = f"{self.stream}|{writer.writer_id}|{ts}|{j}"
                writer.write(body.encode(), routing_key=f"k{j}", timestamp=ts)
                self.events.append((ts, body))
            writer.flush()

    def note(self, time_ms):
        """Every writer notes ``time_ms`` (past all it wrote); a watermark cycle runs."""
        for writer in self.writers:
            self.marks.note(writer, time_ms)
        return self.marks.cycle()

    def close(self):
        for writer in self.writers:
            writer.close()


def _frame(spark, kafka, root, stream):
    options = kafka_source_options(stream, bootstrap_servers=kafka, delta_root=root)
    return (
        spark.readStream.format("kafka")
        .options(**options)
        .load()
        .select(F.col("value").cast("string").alias("body"))
    )


def _run(frame, table, checkpoint):
    """One run of the query over what is there (a restart each time: same checkpoint)."""
    query = (
        frame.writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(table)
    )
    query.awaitTermination(120)
    assert query.exception() is None


def _bodies(table, version):
    return set(
        DeltaTable(table, version=version).to_pyarrow_table(columns=["body"])["body"].to_pylist()
    )


def _assert_complete_at_every_version(table, sources, root):
    """At every version: the version's tracked time T, and every event of every source
    with time <= T is in the table read at that version. Returns {version: T}."""
    best = _through_by_version(root)
    latest = DeltaTable(table).version()
    assert sorted(best) == list(range(latest + 1))
    for version, through in best.items():
        if through is None:
            continue
        held = _bodies(table, version)
        for source in sources:
            missing = [b for ts, b in source.events if ts <= through and b not in held]
            assert not missing, (version, through, missing[:3])
    return best


def test_versions_know_their_time_through_replays_optimize_stop_and_a_dropped_checkpoint(
    spark, manager, store, kafka, wconfig, unique, tmp_path
):
    root, table, chk = str(tmp_path / "delta"), str(tmp_path / "orders"), str(tmp_path / "chk")
    source = Source(manager, store, kafka, wconfig, unique, root)
    frame = _frame(spark, kafka, root, source.stream)
    index = SeekIndex(root, refresh_interval_ms=0, warm_after=0)
    tracker = Tracker(root, index)
    try:
        # Round 0: events, a watermark past them, a batch: version 0 complete through it.
        source.write(BASE)
        w0 = source.note(BASE + 99)
        _run(frame, table, chk)
        tracker.add(table, chk)
        tracker.poll()
        assert complete_through(table, delta_root=root) == w0.time
        assert version_complete_at(table, w0.time, delta_root=root) == 0

        # Round 1: the batch runs before the writers note the time; version 1 is not
        # complete through round 1 yet, and is raised once the watermark comes.
        source.write(BASE + 100)
        _run(frame, table, chk)
        tracker.poll()
        assert version_complete_at(table, BASE + 199, delta_root=root) is None
        with pytest.raises(TableNotCompleteError):
            read_complete(spark, table, BASE + 199, delta_root=root)
        w1 = source.note(BASE + 199)
        tracker.poll()
        assert version_complete_at(table, w1.time, delta_root=root) == 1
        assert read_complete(spark, table, w1.time, delta_root=root).count() == len(source.events)

        # Round 2's events are written and noted but not consumed: nothing claimed.
        source.write(BASE + 200)
        source.note(BASE + 299)
        tracker.poll()
        assert complete_through(table, delta_root=root) == w1.time

        # An OPTIMIZE adds no data: its version keeps its predecessor's time.
        spark.sql(f"OPTIMIZE delta.`{table}`")
        optimized = DeltaTable(table).version()
        tracker.poll()
        assert version_complete_at(table, w1.time, delta_root=root) == 1
        assert table_status(table, index=index, delta_root=root).version == optimized

        # A batch whose commit was lost (killed after Delta committed it, before the
        # checkpoint did): the restart replays it, the sink skips its txn, nothing lowers.
        _run(frame, table, chk)
        tracker.poll()
        before = DeltaTable(table).version()
        last = max(int(n) for n in os.listdir(f"{chk}/commits") if n.isdigit())
        for lost in (f"{chk}/commits/{last}", f"{chk}/commits/.{last}.crc"):
            if os.path.exists(lost):
                os.remove(lost)
        _run(frame, table, chk)
        assert DeltaTable(table).version() == before  # the replayed batch was skipped
        tracker.poll()
        through = complete_through(table, delta_root=root)
        assert through == BASE + 299
        times = _assert_complete_at_every_version(table, [source], root)
        in_order = [times[v] for v in sorted(times)]
        assert in_order == sorted(in_order, key=lambda t: -1 if t is None else t)  # never lowered

        # The query stops while the stream goes on: completeness stays, the lag grows.
        source.write(BASE + 300)
        source.note(BASE + 399)
        assert tracker.poll() == []
        status = table_status(table, index=index, delta_root=root)
        assert (status.complete_through, status.behind_ms) == (through, 100)
        source.write(BASE + 400)
        source.note(BASE + 499)
        assert table_status(table, index=index, delta_root=root).behind_ms == 200

        # The checkpoint is dropped: unknown, with the reason; earlier answers stand.
        shutil.rmtree(chk)
        tracker.poll()
        with pytest.raises(TableCompletenessUnknownError, match=r"checkpoint .* is gone"):
            complete_through(table, delta_root=root)
        assert table_status(table, index=index, delta_root=root).reason is not None
        assert version_complete_at(table, w1.time, delta_root=root) == 1
    finally:
        source.close()


def test_a_union_of_two_streams_is_complete_through_the_slower_one(
    spark, manager, store, kafka, wconfig, unique, tmp_path
):
    root, table, chk = str(tmp_path / "delta"), str(tmp_path / "both"), str(tmp_path / "chk")
    fast = Source(manager, store, kafka, wconfig, unique, root, name="fast", writers=1)
    slow = Source(manager, store, kafka, wconfig, unique, root, name="slow", writers=1)
    frame = _frame(spark, kafka, root, fast.stream).unionByName(
        _frame(spark, kafka, root, slow.stream)
    )
    index = SeekIndex(root, refresh_interval_ms=0, warm_after=0)
    tracker = Tracker(root, index)
    try:
        fast.write(BASE)
        slow.write(BASE)
        fast.note(BASE + 199)
        w_slow = slow.note(BASE + 99)
        _run(frame, table, chk)
        tracker.add(table, chk)
        assert {"c" + unique + "/fast", "c" + unique + "/slow"} == tracker.tables[
            next(iter(tracker.tables))
        ].streams
        tracker.poll()
        assert complete_through(table, delta_root=root) == w_slow.time
        fast.write(BASE + 200)
        slow.write(BASE + 200)
        fast.note(BASE + 299)
        slow.note(BASE + 399)
        _run(frame, table, chk)
        tracker.poll()
        assert complete_through(table, delta_root=root) == BASE + 299
        _assert_complete_at_every_version(table, [fast, slow], root)
    finally:
        fast.close()
        slow.close()


def test_an_inner_join_of_two_streams_holds_every_pair_through_its_time(
    spark, manager, store, kafka, wconfig, unique, tmp_path
):
    """Each event of one stream meets the event of the other with the same time and
    number: at every version, every pair whose events are at or below its time is in it."""
    root, table, chk = str(tmp_path / "delta"), str(tmp_path / "pairs"), str(tmp_path / "chk")
    left = Source(manager, store, kafka, wconfig, unique, root, name="left", writers=1)
    right = Source(manager, store, kafka, wconfig, unique, root, name="right", writers=1)

    def side(source, name):
        key = F.concat_ws("|", *[F.split("body", "[|]").getItem(i) for i in (2, 3)])
        return _frame(spark, kafka, root, source.stream).select(
            key.alias("key"), F.col("body").alias(name)
        )

    frame = (
        side(left, "l")
        .join(side(right, "r"), "key")
        .select(F.concat_ws("+", "l", "r").alias("body"))
    )
    tracker = Tracker(root, SeekIndex(root, refresh_interval_ms=0, warm_after=0))
    try:
        for rnd in range(2):
            for source, noted in ((left, 99), (right, 49 if rnd == 0 else 99)):
                source.write(BASE + 100 * rnd)
                source.note(BASE + 100 * rnd + noted)
            _run(frame, table, chk)
            if rnd == 0:
                tracker.add(table, chk)
            tracker.poll()
        assert complete_through(table, delta_root=root) == BASE + 199
        times = {v: t for v, t in _through_by_version(root).items() if t is not None}
        assert times and min(times.values()) == BASE + 49  # the slower stream, at first
        pairs = {
            f"{lb}+{rb}"
            for lt, lb in left.events
            for rt, rb in right.events
            if lb.split("|")[2:] == rb.split("|")[2:]
        }
        for version, through in times.items():
            held = _bodies(table, version)
            wanted = {p for p in pairs if int(p.split("|")[2]) <= through}
            assert wanted <= held, (version, through, sorted(wanted - held)[:3])
    finally:
        left.close()
        right.close()


def _through_by_version(root):
    from tidemark.controller.delta.tracked import read_answers

    best = {}
    for row in read_answers(root):
        t, kept = row["complete_through"], best.get(row["version"])
        best[row["version"]] = t if kept is None else kept if t is None else max(t, kept)
    return best


def test_a_foreach_batch_merge_with_txn_app_id_and_wait_for_the_table(
    spark, manager, store, kafka, wconfig, unique, tmp_path
):
    from delta.tables import DeltaTable as SparkDeltaTable

    root, table, chk = str(tmp_path / "delta"), str(tmp_path / "merged"), str(tmp_path / "chk")
    source = Source(manager, store, kafka, wconfig, unique, root)
    spark.createDataFrame([], "body string").write.format("delta").save(table)
    app_id = f"merge-{unique}"

    def upsert(batch, batch_id):
        # Delta's idempotent DML: the SQL confs stand for txnAppId/txnVersion of a MERGE.
        session = batch.sparkSession
        session.conf.set("spark.databricks.delta.write.txnAppId", app_id)
        session.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            target = SparkDeltaTable.forPath(session, table)
            (
                target.alias("t")
                .merge(batch.alias("s"), "t.body = s.body")
                .whenNotMatchedInsertAll()
                .execute()
            )
        finally:
            session.conf.unset("spark.databricks.delta.write.txnAppId")
            session.conf.unset("spark.databricks.delta.write.txnVersion")

    frame = _frame(spark, kafka, root, source.stream)

    def run():
        query = (
            frame.writeStream.foreachBatch(upsert)
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    tidemark = [sys.executable, "-m", "tidemark.cli.main"]
    try:
        source.write(BASE)
        run()
        cli = subprocess.run(
            [
                *tidemark,
                "table",
                "track",
                table,
                "--checkpoint",
                chk,
                "--app-id",
                app_id,
                "--delta-root",
                root,
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        # Nothing is noted yet: not complete, and wait says so (exit 75) when it times out.
        wait = [
            *tidemark,
            "wait",
            "--table",
            table,
            "--time",
            str(BASE + 99),
            "--delta-root",
            root,
            "--format",
            "json",
        ]
        early = subprocess.run(
            [*wait, "--timeout", "1s"], capture_output=True, text=True, timeout=120
        )
        assert early.returncode == 75, early.stderr
        waiting = subprocess.Popen([*wait, "--timeout", "120s"], stdout=subprocess.PIPE, text=True)
        # Tracking as a job of its own: every tracked table under the root.
        follow = [
            *tidemark,
            "table",
            "track",
            "--follow",
            "--interval",
            "200ms",
            "--delta-root",
            root,
        ]
        follower = subprocess.Popen(follow, stderr=subprocess.PIPE, text=True)
        try:
            assert waiting.poll() is None  # still waiting: nothing is complete through T
            w0 = source.note(BASE + 99)
            out, _ = waiting.communicate(timeout=120)
        finally:
            for process in (waiting, follower):
                if process.poll() is None:
                    process.terminate()
                    process.wait(timeout=30)
        assert follower.returncode == 0, follower.stderr.read()
        assert waiting.returncode == 0
        assert '"reached": true' in out
        assert complete_through(table, delta_root=root) == w0.time
        merges = [c for c in table_commits(table, None) if app_id in c.txns]
        assert merges and all(c.operation == "MERGE" for c in merges)
        version_at = subprocess.run(
            [*tidemark, "table", "version-at", table, "--time", str(w0.time), "--delta-root", root],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert version_at.returncode == 0 and f"version {merges[0].version}" in version_at.stdout
        _assert_complete_at_every_version(table, [source], root)
    finally:
        source.close()


def test_a_foreach_batch_writer_with_neither_sink_nor_txn_records_its_cut(
    spark, manager, store, kafka, wconfig, unique, tmp_path
):
    """A plain ``foreachBatch`` append (no Delta sink, no ``txnAppId``), the guide's
    writer as it is: the helper puts the batch and what it consumed in each commit, and
    tracking reads it from there -- the answers stand even once the checkpoint has
    purged the batches' offsets."""
    root, table, chk = str(tmp_path / "delta"), str(tmp_path / "plain"), str(tmp_path / "chk")
    source = Source(manager, store, kafka, wconfig, unique, root)
    frame = _frame(spark, kafka, root, source.stream)
    guide = {"CHECKPOINT": chk, "TABLE": table}
    exec(_guide("neither.py"), guide)

    def run():
        query = (
            frame.writeStream.foreachBatch(guide["write"])
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    tracker = Tracker(root, SeekIndex(root, refresh_interval_ms=0, warm_after=0))
    try:
        source.write(BASE)
        w0 = source.note(BASE + 99)
        run()
        tracker.add(table, chk)
        query_id = tracker.tables[table_id(table)].writer.app_id
        tracker.poll()
        assert complete_through(table, delta_root=root) == w0.time

        source.write(BASE + 100)
        run()
        tracker.poll()
        assert version_complete_at(table, BASE + 199, delta_root=root) is None
        w1 = source.note(BASE + 199)
        tracker.poll()
        commits = table_commits(table, None)
        assert [c.operation for c in commits] == ["WRITE", "WRITE"]
        assert all(set(c.recorded) == {query_id} for c in commits)
        log_text = "".join(p.read_text() for p in Path(table, "_delta_log").glob("*.json"))
        assert '"txn"' not in log_text  # no transaction id: the record alone tells the batch
        assert version_complete_at(table, w1.time, delta_root=root) == 1
        _assert_complete_at_every_version(table, [source], root)

        # The checkpoint purges batch 0's offsets: tracked afresh (answers kept elsewhere),
        # version 0 is still answered, from its commit alone.
        os.remove(f"{chk}/offsets/0")
        elsewhere = str(tmp_path / "elsewhere")
        afresh = Tracker(elsewhere, SeekIndex(root, refresh_interval_ms=0, warm_after=0))
        afresh.add(table, chk)
        afresh.poll()
        assert version_complete_at(table, w0.time, delta_root=elsewhere) == 0
        assert version_complete_at(table, w1.time, delta_root=elsewhere) == 1
    finally:
        source.close()


def test_the_time_service_and_the_dashboard_show_tracked_tables(
    spark, manager, store, kafka, wconfig, unique, tmp_path, zk_client, settings
):
    from tests.integration.test_time_service import get, get_json, serving

    root, table, chk = str(tmp_path / "delta"), str(tmp_path / "shown"), str(tmp_path / "chk")
    source = Source(manager, store, kafka, wconfig, unique, root)
    tracker = Tracker(root, SeekIndex(root, refresh_interval_ms=0, warm_after=0))
    name = table_id(table)

    def shown(url):
        status, rows = get_json(url, "/api/tables")
        assert status == 200
        return {r["table"]: r for r in rows}

    try:
        source.write(BASE)
        w0 = source.note(BASE + 99)
        _run(_frame(spark, kafka, root, source.stream), table, chk)
        tracker.add(table, chk)
        tracker.poll()
        with serving(store, zk_client, root, kafka, settings) as running:
            row = shown(running.url)[name]
            assert (row["version"], row["complete_through"], row["status"]) == (0, w0.time, "known")
            assert (row["streams"], row["behind_ms"]) == ({source.stream: w0.time}, 0)

            # The stream goes on, the query does not: the table falls behind.
            source.write(BASE + 100)
            source.note(BASE + 199)
            wait_until(lambda: shown(running.url)[name]["behind_ms"] == 100, 30, "behind 100 ms")
            status, page = get(running.url, "/")
            html = page.decode()
            assert status == 200 and f'data-table="{name}"' in html
            iso = datetime.datetime.fromtimestamp(w0.time / 1000, datetime.UTC)
            assert iso.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] in html
            assert '<td class="behind">100 ms</td>' in html

            # The checkpoint is dropped: unknown, with the reason, on both.
            shutil.rmtree(chk)
            tracker.poll()
            row = shown(running.url)[name]
            assert row["status"] == "unknown" and "is gone" in row["reason"]
            assert row["complete_through"] is None
            assert "unknown: the checkpoint" in get(running.url, "/")[1].decode()
    finally:
        source.close()


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "complete-tables.md"


def _guide(name):
    return snippet(name, GUIDE)


def test_the_complete_tables_guide_end_to_end(
    spark, manager, store, kafka, wconfig, unique, tmp_path, monkeypatch, capsys
):
    """The guide's snippets, run as they are: the query (in this process's Spark
    session), tracking, the scheduled report's wait (``spark-submit`` stands in as a
    shell function that notes it ran: the report itself runs here, in-process), and the
    Python lookups."""
    root = str(tmp_path / "delta")
    source = Source(manager, store, kafka, wconfig, unique, root)
    env = {
        "STREAM": source.stream,
        "KAFKA": kafka,
        "TIDEMARK_DELTA_ROOT": root,
        "TABLE": str(tmp_path / "orders"),
        "CHECKPOINT": str(tmp_path / "chk"),
        "REPORT": str(tmp_path / "report"),
        "HOUR_END": str(BASE + 199),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    ran = tmp_path / "spark-submit-ran"
    shim = f'spark-submit() {{ echo "$@" > {ran}; }}\n'
    follower = None
    try:
        source.write(BASE)
        source.note(BASE + 99)
        exec(_guide("query.py"), {"__name__": "__main__"})
        track = subprocess.run(
            ["bash", "-c", _guide("track.sh")], capture_output=True, text=True, timeout=120
        )
        assert track.returncode == 0, track.stderr
        assert '"complete_through": ' + str(BASE + 99) in track.stdout
        report = subprocess.Popen(["bash", "-c", shim + _guide("report.sh")], text=True)
        follower = subprocess.Popen(["bash", "-c", "exec " + _guide("follow.sh")], text=True)
        source.write(BASE + 100)
        source.note(BASE + 199)
        assert report.poll() is None and not ran.exists()  # the hour is not consumed yet
        exec(_guide("query.py"), {"__name__": "__main__"})
        assert report.wait(timeout=120) == 0
        assert ran.read_text().strip() == "report.py"
        exec(_guide("report.py"), {"__name__": "__main__"})
        reported = set(
            DeltaTable(env["REPORT"]).to_pyarrow_table(columns=["body"])["body"].to_pylist()
        )
        assert reported == {b for ts, b in source.events if ts <= BASE + 199}
        exec(_guide("lookups.py"), {"__name__": "__main__"})
        printed = capsys.readouterr().out
        assert f"complete through {BASE + 199}" in printed
        assert "first version complete through the hour 1" in printed
    finally:
        if follower is not None:
            follower.terminate()
            assert follower.wait(timeout=30) == 0
        source.close()
