"""Spark reads Kafka with explicit offsets and writes Delta; delta-rs reads it back."""

from __future__ import annotations

import json
import os
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import DeltaTable

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_batch_read_with_explicit_offsets_into_delta(spark, kafka, unique, tmp_path) -> None:
    topic = f"spark-{unique}"
    admin = AdminClient({"bootstrap.servers": kafka})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka})
    # recent timestamps: records older than retention.ms would be aged out by the broker
    base_ms = int(time.time() * 1000)
    for i in range(40):
        producer.produce(topic, partition=i % 2, value=f"e{i}".encode(), timestamp=base_ms + i)
    assert producer.flush(30) == 0

    # partition 0: offsets [5, 15); partition 1: [0, end)
    starting = {topic: {"0": 5, "1": 0}}
    ending = {topic: {"0": 15, "1": -1}}
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS body")
    )
    table = str(tmp_path / "events")
    frame.write.format("delta").save(table)

    from_spark = sorted(
        (r.partition, r.offset, r.body) for r in spark.read.format("delta").load(table).collect()
    )
    arrow = DeltaTable(table).to_pyarrow_table()
    from_delta_rs = sorted(
        zip(
            arrow.column("partition").to_pylist(),
            arrow.column("offset").to_pylist(),
            arrow.column("body").to_pylist(),
            strict=True,
        )
    )
    assert from_spark == from_delta_rs
    assert [o for p, o, _ in from_spark if p == 0] == list(range(5, 15))
    assert [o for p, o, _ in from_spark if p == 1] == list(range(20))
    assert {b for p, o, b in from_spark if p == 0 and o == 5} == {"e10"}


def test_new_controller_tables_keep_log_and_tombstones_for_the_log_retention(
    spark, tmp_path
) -> None:
    from tidemark.controller.delta.appends import ensure_tables
    from tidemark.schemas.tables import TABLES, table_path

    root = str(tmp_path / "delta")
    ensure_tables(root, log_retention_s=600)
    for table in TABLES:
        config = DeltaTable(table_path(root, table)).metadata().configuration
        assert config["delta.logRetentionDuration"] == "interval 600 seconds", table
        assert config["delta.deletedFileRetentionDuration"] == "interval 600 seconds", table
    # an existing table is left as it is (the maintainer sets its properties)
    ensure_tables(root, log_retention_s=60)
    config = DeltaTable(table_path(root, TABLES[0])).metadata().configuration
    assert config["delta.logRetentionDuration"] == "interval 600 seconds"


def test_the_controllers_start_adds_new_columns_to_a_laggards_table_written_before(
    spark, tmp_path
) -> None:
    """A ``laggards`` table from before ``instance``, ``first_seen``, ``last_seen``:
    Spark's create-if-not-exists leaves it, and the start adds the columns."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from tidemark.controller.delta.appends import ensure_tables
    from tidemark.schemas.arrow import ARROW_SCHEMAS
    from tidemark.schemas.tables import LAGGARDS, table_path

    root = str(tmp_path / "delta")
    old = pa.schema(
        [
            f
            for f in ARROW_SCHEMAS[LAGGARDS]
            if f.name not in ("instance", "first_seen", "last_seen")
        ]
    )
    row = {"stream": "s/a", "at": 5, "writer": "w1", "kind": "lagging", "noted_time": 3}
    write_deltalake(table_path(root, LAGGARDS), pa.Table.from_pylist([row], schema=old))
    ensure_tables(root, log_retention_s=600)
    table = DeltaTable(table_path(root, LAGGARDS))
    assert [f.name for f in table.schema().fields] == ARROW_SCHEMAS[LAGGARDS].names
    (back,) = table.to_pyarrow_table().to_pylist()
    assert back["noted_time"] == 3 and back["instance"] is None
    assert spark.read.format("delta").load(table_path(root, LAGGARDS)).count() == 1


def test_slot_keys_land_in_the_partitions_spark_gives_them(spark) -> None:
    """tidemark.jobs.slot_keys.spark_partition is Spark's hash partitioning of an INT key, and the
    controller's balanced keys put the same number of slots in every state partition."""
    from tidemark.jobs.slot_keys import balanced_slot_keys, spark_partition

    rows = spark.range(-1000, 5000).selectExpr(
        "CAST(id AS INT) AS k", *(f"pmod(hash(CAST(id AS INT)), {n}) AS p{n}" for n in (2, 3, 64))
    )
    for row in rows.collect():
        for n in (2, 3, 64):
            assert spark_partition(row.k, n) == row[f"p{n}"], (row.k, n)
    keys = balanced_slot_keys(8, 2)
    # the shuffle that feeds the stateful operator: repartition by the key
    parts = (
        spark.createDataFrame([(k,) for k in keys], "slot INT")
        .repartition(2, "slot")
        .selectExpr("spark_partition_id() AS p")
        .groupBy("p")
        .count()
        .collect()
    )
    assert sorted(r["count"] for r in parts) == [4, 4]


def test_the_local_driver_jvm_runs_with_the_local_options(spark) -> None:
    from tidemark.infra.spark import LOCAL_JVM_OPTIONS

    jvm = spark.sparkContext._jvm
    arguments = list(
        jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    )
    assert set(LOCAL_JVM_OPTIONS) <= set(arguments), arguments
    collector = {
        bean.getName()
        for bean in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    }
    assert collector == {"PS Scavenge", "PS MarkSweep"}, collector


def test_the_log_read_directly_lists_what_delta_rs_lists_on_tables_spark_wrote(
    spark, tmp_path
) -> None:
    """Spark's commits and checkpoints (every 10 commits), an OPTIMIZE (a compaction
    removing the small files) and commits after it: a cold lookup's direct read of the
    log (tidemark.controller.delta.log) gives delta-rs's live files and statistics."""
    from delta.tables import DeltaTable as SparkDeltaTable

    from tidemark.controller.delta.log import live_files
    from tidemark.controller.delta.tables import DeltaSource

    table = str(tmp_path / "index")

    def append(first: int) -> None:
        rows = [("s/a" if i % 2 else "s/b", i, 10 * i) for i in range(first, first + 5)]
        frame = spark.createDataFrame(rows, "stream STRING, seq LONG, time LONG")
        frame.coalesce(1).write.format("delta").mode("append").save(table)

    def same() -> int:
        assert live_files(table) is not None  # Spark's plain tables are read directly
        direct = DeltaSource(table)
        found = {(f.uri, str(f.minimum), str(f.maximum)) for f in direct.latest_files()}
        assert direct.version is None  # (not opened by delta-rs for it)
        opened = DeltaSource(table)
        opened.refresh()
        assert found == {(f.uri, str(f.minimum), str(f.maximum)) for f in opened.files()}
        return len(found)

    for k in range(12):
        append(5 * k)
    assert same() == 12
    assert os.path.exists(f"{table}/_delta_log/{10:020d}.checkpoint.parquet")
    SparkDeltaTable.forPath(spark, table).optimize().executeCompaction()
    for k in range(12, 21):  # to the next checkpoint (version 20), and one commit past it
        append(5 * k)
        if k == 15:
            assert same() == 5  # the compacted file and the four appends after it
    assert os.path.exists(f"{table}/_delta_log/{20:020d}.checkpoint.parquet")
    assert same() == 10
