"""The end-to-end demo: Kafka -> Spark -> Delta -> deltalake.

    summary = run_demo(bootstrap, work_dir, spark)

Creates a topic, produces events, has Spark read them back with explicit
per-partition offsets and write a Delta table, then reads that table with
deltalake (no Spark) and summarises it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoSummary:
    topic: str
    table: str
    events_produced: int
    rows_in_delta: int
    rows_per_partition: dict[int, int]
    first_timestamp_ms: int
    last_timestamp_ms: int


def produce_events(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    start = int(time.time() * 1000)
    for i in range(count):
        body = json.dumps({"n": i, "sensor": f"s{i % 7}", "value": i * 0.5})
        producer.produce(topic, key=f"s{i % 7}", value=body, timestamp=start + i)
    left = producer.flush(30)
    if left:
        raise RuntimeError(f"{left} demo events were not delivered")


def run_demo(bootstrap: str, work_dir: Path, spark: Any, count: int = 300) -> DemoSummary:
    from deltalake import DeltaTable

    topic = f"tidemark-demo-{uuid.uuid4().hex[:8]}"
    partitions = 3
    produce_events(bootstrap, topic, count, partitions)
    table = str(work_dir / "delta" / "demo_events")
    offsets = {topic: {str(p): -2 for p in range(partitions)}}  # -2: earliest
    ending = {topic: {str(p): -1 for p in range(partitions)}}  # -1: latest
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps(offsets))
        .option("endingOffsets", json.dumps(ending))
        .option("kafka.isolation.level", "read_committed")
        .load()
        .selectExpr(
            "partition",
            "offset",
            "CAST(timestamp AS TIMESTAMP) AS timestamp",
            "CAST(key AS STRING) AS key",
            "CAST(value AS STRING) AS body",
        )
    )
    frame.write.format("delta").mode("overwrite").save(table)
    data = DeltaTable(table).to_pyarrow_table()
    per_partition: dict[int, int] = {}
    for p in data.column("partition").to_pylist():
        per_partition[p] = per_partition.get(p, 0) + 1
    stamps = [int(t.timestamp() * 1000) for t in data.column("timestamp").to_pylist()]
    return DemoSummary(
        topic=topic,
        table=table,
        events_produced=count,
        rows_in_delta=data.num_rows,
        rows_per_partition=dict(sorted(per_partition.items())),
        first_timestamp_ms=min(stamps),
        last_timestamp_ms=max(stamps),
    )
