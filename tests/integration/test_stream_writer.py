"""Spark jobs as writers (``jobs.stream_writer``) on the local Spark session, real Kafka + ZK.

Watermarks are folded from the marks on the marks topic exactly as the
controller folds them (``tests.integration.test_dropin_producer.watermarks_of``),
with cycles repeated until nothing changes, as the controller's timer does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controller.config import ScalingPolicy, StreamConfiguration
from controller.naming import ClusterSettings
from controller.streams import StreamManager
from controller.zookeeper.store import ZooKeeperStore
from jobs.exceptions import JobConfigurationError
from jobs.stream_writer import StreamTarget, stream_writer, write_to_stream
from schemas.records import WriterMarkRecord
from tests.integration.test_dropin_producer import marks_of, records, watermarks_of

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BASE = 1_700_000_000_000


@pytest.fixture
def target(kafka: str, zookeeper: str, zk_client: Any, unique: str) -> StreamTarget:
    cluster = ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=2)
    stream = f"j{unique}/out"
    manager = StreamManager(ZooKeeperStore(zk_client, cluster.zk_root), kafka, cluster)
    manager.create_scope(f"j{unique}")
    manager.create(stream, StreamConfiguration(ScalingPolicy.fixed(2)))
    return StreamTarget(stream, kafka, f"{zookeeper}/tidemark-test-{unique}", cluster)


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
