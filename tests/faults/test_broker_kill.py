"""Fault: one of three brokers killed (SIGKILL) under load. Every acknowledged event is
read back exactly once, and the writer's marks keep flowing."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.faults.figures import report
from tests.integration.test_kafka_local import _consume_all
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.infra.kafka import KafkaCluster
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.writer import EventWriter

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

EVENTS = 20_000
KILL_AFTER = 5_000


def test_a_broker_killed_under_load_loses_and_duplicates_nothing(
    tmp_path: Path, zk_client: Any, unique: str
) -> None:
    with KafkaCluster(tmp_path / "kafka3", brokers=3) as kafka:
        bootstrap = kafka.bootstrap_servers
        cluster = ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=1)
        store = ZooKeeperStore(zk_client, cluster.zk_root)
        stream = f"b{unique}/orders"
        manager = StreamManager(store, bootstrap, cluster)
        manager.create_scope(stream.split("/")[0])
        meta = manager.create(stream, StreamConfiguration(ScalingPolicy.fixed(2)))
        writer = EventWriter(
            "w1",
            stream,
            store=store,
            bootstrap_servers=bootstrap,
            config=WriterConfig(cluster=cluster, linger_ms=5),
        )
        leader = (
            AdminClient({"bootstrap.servers": bootstrap})
            .list_topics(meta.topic, timeout=10)
            .topics[meta.topic]
            .partitions[0]
            .leader
        )
        killed_at: list[float] = []
        noted: list[int] = []

        def load() -> None:
            for i in range(EVENTS):
                writer.write(f"e{i}".encode(), routing_key=f"k{i % 97}")
                if i % 1_000 == 999:
                    writer.note_time(i)
                    noted.append(i)
                if i == KILL_AFTER:
                    writer.flush()
                    kafka.nodes[leader - 1].process.kill()
                    killed_at.append(time.monotonic())

        started = time.monotonic()
        thread = threading.Thread(target=load)
        thread.start()
        thread.join(300)
        writer.flush()  # raises on any record Kafka refused: none may be lost silently
        acked_s = time.monotonic() - started
        position = writer.position()
        writer.close()
        acknowledged = sum(position.values())
        got = _consume_all(bootstrap, meta.topic, "read_committed", acknowledged)
        marks = _consume_all(bootstrap, cluster.marks_topic, "read_committed", len(noted) + 1)
    duplicates = len(got) - len(set(got))
    report(
        "broker-kill",
        f"3 brokers, leader {leader} SIGKILLed after {KILL_AFTER} events; "
        f"{acknowledged} acknowledged in {acked_s:.1f} s, {len(got)} read back, "
        f"{duplicates} duplicates, {EVENTS - len(set(got))} missing; "
        f"marks noted {len(noted)}, on the marks topic {len(marks)} (+1 shutdown)",
    )
    assert killed_at
    assert acknowledged == EVENTS
    assert duplicates == 0
    assert set(got) == {f"e{i}".encode() for i in range(EVENTS)}
    assert len(marks) == len(noted) + 1  # every noted time and the shutdown mark
