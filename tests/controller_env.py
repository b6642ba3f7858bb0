"""A controller's surroundings for tests: settings, store, stream manager and writers
under the test's own names (marks topic, ZooKeeper chroot, Delta root).

    def test_x(spark, controller_env):          # one bucket, in tmp_path
        controller_env.create("s/orders", 2)
        job = ControllerJob(spark, controller_env.settings(), "a").start()

``make_env`` builds one with other buckets or another working directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.jobs.config import ControllerSettings
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.writer import EventWriter


@dataclass
class Env:
    kafka: str
    zk_connect: str  # with the test's chroot
    store: ZooKeeperStore
    manager: StreamManager
    cluster: ClusterSettings
    work: Path
    unique: str

    def settings(self, **overrides: Any) -> ControllerSettings:
        base: dict[str, Any] = {
            "kafka_bootstrap": self.kafka,
            "zk_connect": self.zk_connect,
            "delta_root": str(self.work / "delta"),
            "checkpoint_root": str(self.work / "checkpoints"),
            "cluster": self.cluster,
            "interval_ms": 1000,
            "writer_timeout_ms": 10_000,
            "warm_up": False,
        }
        base.update(overrides)
        return ControllerSettings(**base)

    def writer(self, writer_id: str, stream: str) -> EventWriter:
        return EventWriter(
            writer_id,
            stream,
            store=self.store,
            bootstrap_servers=self.kafka,
            config=WriterConfig(cluster=self.cluster, linger_ms=1),
        )

    def create(self, stream: str, segments: int) -> None:
        self.manager.create_scope(stream.split("/")[0])
        self.manager.create(
            stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )


def make_env(kafka: str, zookeeper: str, zk_client: Any, unique: str, work: Path, buckets: int):
    cluster = ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=buckets)
    store = ZooKeeperStore(zk_client, cluster.zk_root)
    return Env(
        kafka=kafka,
        zk_connect=f"{zookeeper}/tidemark-test-{unique}",
        store=store,
        manager=StreamManager(store, kafka, cluster),
        cluster=cluster,
        work=work,
        unique=unique,
    )


__all__ = ["Env", "make_env"]
