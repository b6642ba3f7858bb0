"""Spark jobs as writers (``tidemark.jobs.stream_writer``) on the local Spark session, real Kafka +
ZK.

Watermarks are folded from the marks on the marks topic exactly as the
controller folds them (``tests.integration.test_dropin_producer.watermarks_of``),
with cycles repeated until nothing changes, as the controller's timer does.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_dropin_producer import marks_of, records, watermarks_of
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.jobs.exceptions import JobConfigurationError
from tidemark.jobs.stream_writer import StreamTarget, stream_writer, write_to_stream
from tidemark.pipelines.writing.exceptions import MissingTimestampError
from tidemark.schemas.records import WriterMarkRecord

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BASE = 1_700_000_000_000


def make_target(
    kafka: str, zookeeper: str, zk_client: Any, unique: str, name: str = "out", **target: Any
) -> StreamTarget:
    """A new stream ``j<unique>/<name>`` (two segments; ``StreamConfiguration`` fields
    from ``config=``) as a job's target (``StreamTarget`` fields from the rest)."""
    cluster = ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=2)
    stream = f"j{unique}/{name}"
    manager = StreamManager(ZooKeeperStore(zk_client, cluster.zk_root), kafka, cluster)
    manager.create_scope(f"j{unique}")
    config = target.pop("config", {})
    manager.create(stream, StreamConfiguration(ScalingPolicy.fixed(2), **config))
    return StreamTarget(stream, kafka, f"{zookeeper}/tidemark-test-{unique}", cluster, **target)


@pytest.fixture
def target(kafka: str, zookeeper: str, zk_client: Any, unique: str) -> StreamTarget:
    return make_target(kafka, zookeeper, zk_client, unique)


def test_a_batch_job_gets_watermarks_up_to_its_latest_event(
    spark: Any, kafka: str, zk_client: Any, target: StreamTarget
) -> None:
    rows = [(f"k{i % 5}", f"event-{i}", BASE + i * 10) for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string, event_time long").repartition(3)
    reports = write_to_stream(df, target, job_id="nightly", batch_id=7)

    assert sorted(r.writer_id for r in reports) == ["nightly/7/0", "nightly/7/1", "nightly/7/2"]
    assert sum(r.events for r in reports) == 40
    meta = ZooKeeperStore(zk_client, target.cluster.zk_root).get_stream(target.stream)
    stored = records(kafka, meta.topic, 2)
    assert sorted(v.decode() for _, _, _, v, _ in stored) == sorted(v for _, v, _ in rows)

    marks = marks_of(kafka, target.cluster, target.stream)
    by_writer: dict[str, list[WriterMarkRecord]] = {}
    for m in marks:
        by_writer.setdefault(m.writer_id, []).append(m)
    for wid, seq in by_writer.items():
        assert (seq[0].time, seq[0].position) == (0, {}), f"{wid} registered first"
        assert not seq[-1].alive, f"{wid} closed"
        task = next(r for r in reports if r.writer_id == wid)
        assert seq[-1].max_event_time == task.max_time, f"{wid}: EventWriter's mark fields"
    # one run, one instance token: registrations and the tasks' marks carry the same
    assert len({m.instance for m in marks}) == 1 and marks[0].instance is not None
    watermarks = watermarks_of(kafka, target.cluster, target.stream, meta.epochs, settle=True)
    final = watermarks[-1]
    assert final.time == max(t for _, _, t in rows)
    ends = {p: max(o for q, o, *_ in stored if q == p) + 1 for p in {q for q, *_ in stored}}
    assert dict(final.stream_cut) == {**{0: 0, 1: 0}, **ends}
    # No watermark passed before every task had noted: each one's time is 0 or covers all.
    tasks_max = sorted(r.max_time for r in reports if r.max_time is not None)
    assert all(w.time == 0 or w.time >= tasks_max[0] for w in watermarks)


def test_a_streaming_query_writes_each_micro_batch(
    spark: Any, kafka: str, zk_client: Any, target: StreamTarget, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    source.mkdir()
    for n in range(2):
        lines = [
            json.dumps({"key": f"k{i}", "value": f"b{n}-{i}", "event_time": BASE + 100 * n + i})
            for i in range(5)
        ]
        (source / f"part-{n}.json").write_text("\n".join(lines) + "\n")
    query = (
        spark.readStream.schema("key string, value string, event_time long")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.foreachBatch(stream_writer(target, job_id="stream"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    writers = {m.writer_id.split("/")[1] for m in marks_of(kafka, target.cluster, target.stream)}
    assert writers == {"0", "1"}, "one batch per file, each batch's tasks are its writers"
    meta = ZooKeeperStore(zk_client, target.cluster.zk_root).get_stream(target.stream)
    watermarks = watermarks_of(kafka, target.cluster, target.stream, meta.epochs, settle=True)
    assert watermarks[-1].time == BASE + 104


def test_missing_columns_are_named(spark: Any, target: StreamTarget) -> None:
    df = spark.createDataFrame([("k", "v")], "key string, body string")
    with pytest.raises(JobConfigurationError, match=r"no column\(s\) \['value', 'event_time'\]"):
        write_to_stream(df, target, job_id="j")


def test_a_job_keeps_the_streams_timestamping_rules(
    spark: Any, kafka: str, zookeeper: str, zk_client: Any, unique: str
) -> None:
    """A client-require stream refuses a job with a null event time before
    anything is sent (no event, no registration); a refuse-adjust stream fails the task
    at 900 after 1000 (one key, one task), only 1000 is stored; on a client-prefer stream
    a null time is the arrival time."""
    required = make_target(
        kafka, zookeeper, zk_client, unique, "required", config={"timestamping": "client-require"}
    )
    rows = [("k", "timed", BASE), ("k", "untimed", None)]
    df = spark.createDataFrame(rows, "key string, value string, event_time long")
    with pytest.raises(MissingTimestampError, match=f"stream {required.stream} .*client-require"):
        write_to_stream(df, required, job_id="j")
    store = ZooKeeperStore(zk_client, required.cluster.zk_root)
    assert records(kafka, store.get_stream(required.stream).topic, 2) == []

    strict = make_target(
        kafka, zookeeper, zk_client, unique, "strict", config={"refuse_adjustments": True}
    )
    rows = [("k", "first", 1000), ("k", "second", 900)]
    df = spark.createDataFrame(rows, "key string, value string, event_time long").coalesce(1)
    with pytest.raises(Exception, match=f"900 would be stored as 1000.*{strict.stream}"):
        write_to_stream(df, strict, job_id="j")
    stored = records(kafka, store.get_stream(strict.stream).topic, 2)
    assert {(v, t) for _, _, _, v, t in stored} == {(b"first", 1000)}
    assert marks_of(kafka, required.cluster, required.stream) == []  # nor registered

    prefer = make_target(kafka, zookeeper, zk_client, unique, "prefer")
    before = int(time.time() * 1000)
    df = spark.createDataFrame(
        [("k", "untimed", None)], "key string, value string, event_time long"
    )
    (report,) = write_to_stream(df.coalesce(1), prefer, job_id="j")
    assert report.max_time is not None and before <= report.max_time <= time.time() * 1000


def test_tasks_noting_time_automatically_close_at_their_end(
    spark: Any, kafka: str, zookeeper: str, zk_client: Any, unique: str
) -> None:
    """With ``automatically_note_time`` each task's writer notes the clock's time
    while it writes and closes with a shutdown mark at the time of its end (not below its
    largest timestamp), under the run's instance token."""
    auto = make_target(
        kafka, zookeeper, zk_client, unique, automatically_note_time=True, note_time_interval_ms=50
    )
    now = int(time.time() * 1000)
    rows = [(f"k{i}", f"e{i}", now - 1_000 + i) for i in range(20)]
    df = spark.createDataFrame(rows, "key string, value string, event_time long").repartition(2)
    reports = write_to_stream(df, auto, job_id="auto")
    marks = marks_of(kafka, auto.cluster, auto.stream)
    assert len({m.instance for m in marks}) == 1
    for report in reports:
        seq = [m for m in marks if m.writer_id == report.writer_id]
        assert (seq[0].time, seq[0].alive) == (0, True), "registered first"
        assert not seq[-1].alive and seq[-1].time >= now, "closed at the time of its end"
        assert seq[-1].max_event_time == report.max_time
