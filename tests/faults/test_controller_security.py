"""The controller on a secured cluster (SASL/SCRAM, ACLs): `tidemark controller run` as its
own principal with the controller role's ACLs (``tidemark.controller.kafka.acls``) makes watermarks,
its due records included; its principal may scale and truncate, a writer's may not; a
principal with no ACL cannot write marks or read the marks topic; a due record Kafka
refuses is counted and produced again, never dropped."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry

from tests.faults.figures import report
from tests.faults.test_kafka_security import as_user, consume_all, produce_one
from tests.integration.test_controller_job import Env, Noter, driver, stop_drivers
from tests.waiting import wait_until
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.exceptions import KafkaOperationError
from tidemark.controller.kafka.acls import grant_tidemark_acls
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.model import KeyRange
from tidemark.controller.naming import MARKS_TOPIC_CONFIGS, ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.infra.kafka import KafkaCluster, KafkaSecurity
from tidemark.jobs.config import ControllerSettings
from tidemark.jobs.due import DueScheduler
from tidemark.jobs.metrics import ControllerMetrics
from tidemark.jobs.tables import read_table, read_watermarks
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.writer import EventWriter

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults, pytest.mark.spark]

USERS = {"writer": "writer-pw", "controller": "controller-pw", "mallory": "mallory-pw"}

DRIVER_S = 240
"""How long a driver of its own may take to start and act (a loaded machine)."""


def test_the_controller_runs_with_its_own_principal_and_the_controller_acls(
    tmp_path: Path, zookeeper: str, zk_client: Any, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    security = KafkaSecurity("admin-pw", USERS)
    cluster = ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=1)
    stream = f"t{unique}/orders"
    with KafkaCluster(tmp_path / "kafka", security=security) as kafka:
        bootstrap = kafka.bootstrap_servers
        grant_tidemark_acls(
            kafka.client_config("admin"), cluster.marks_topic, ["writer"], ["controller"]
        )
        as_user(monkeypatch, "controller")  # the control plane's operations: its role
        store = ZooKeeperStore(zk_client, cluster.zk_root)
        manager = StreamManager(store, bootstrap, cluster)
        manager.create_scope(f"t{unique}")
        config = StreamConfiguration(
            scaling_policy=ScalingPolicy.fixed(2), timestamp_aggregation_timeout_ms=2_000
        )
        manager.create(stream, config)
        env = Env(
            bootstrap,
            f"{zookeeper}/tidemark-test-{unique}",
            store,
            manager,
            cluster,
            tmp_path,
            unique,
        )
        settings = env.settings()
        process = driver(env, "c1", settings)  # inherits the controller's credentials
        noters: list[Noter] = []
        try:
            wait_until(  # the controller job creates it (the controller role's CREATE)
                lambda: StreamTopics(bootstrap).partition_count(cluster.marks_topic) == 1,
                DRIVER_S,
                "the controller did not create the marks topic",
                process,
            )
            as_user(monkeypatch, "writer")
            noters = [
                Noter(
                    EventWriter(
                        w,
                        stream,
                        store=store,
                        bootstrap_servers=bootstrap,
                        config=WriterConfig(cluster=cluster, linger_ms=1),
                    )
                )
                for w in ("w1", "w2")
            ]
            for noter in noters:
                noter.start()
            wait_until(
                lambda: len(read_watermarks(settings.delta_root, stream)) >= 3,
                DRIVER_S,
                "no watermarks from the controller",
                process,
            )
            # w2 falls silent, then w1 notes once more and stops too: only a due record
            # (w2's 2 s timeout) can run the cycle that drops w2 and emits w1's time.
            noters[1].halt.set()
            noters[1].join(10)
            time.sleep(0.5)
            noters[0].halt.set()
            noters[0].join(10)
            last_w1 = noters[0].noted
            wait_until(
                lambda: any(
                    row["writers"] == ["w1"] and row["time"] == last_w1
                    for row in read_table(settings.delta_root, "marks", stream)
                ),
                150,  # a loaded machine: the batches behind the due record run late
                "no watermark after w2's timeout: due records refused?",
                process,
            )
            marks = read_watermarks(settings.delta_root, stream)

            topic = store.get_stream(stream).topic
            # a writer's principal may neither scale (add partitions) nor truncate
            with pytest.raises(KafkaOperationError, match="AUTHORIZATION"):
                StreamTopics(bootstrap, timeout_s=10).ensure_partitions(topic, 3)
            with pytest.raises(KafkaOperationError, match="AUTHORIZATION"):
                StreamTopics(bootstrap, timeout_s=10).delete_records(topic, {0: 1})
            # the controller's may
            as_user(monkeypatch, "controller")
            scaled = manager.scale(stream, [0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
            assert len(scaled.active_segments()) == 3
            cut = {s.id: 1 for s in store.get_stream(stream).epochs[0].segments}
            truncated = manager.truncate(stream, cut)
            assert truncated.truncation is not None
            assert StreamTopics(bootstrap).start_offsets(topic, [1]) == {1: 1}

            # no ACL: no marks written, none read
            as_user(monkeypatch, "mallory")
            refused = produce_one(bootstrap, cluster.marks_topic, stream.encode(), b"forged")
            assert refused is not None
            assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
            read, error = consume_all(bootstrap, cluster.marks_topic)
            assert read == [] and error is not None
        finally:
            for noter in noters:  # most stopped already
                noter.halt.set()
                noter.join(10)
                noter.writer.close()
            stop_drivers([process])
            log = (tmp_path / "driver-c1.log").read_text(errors="replace").splitlines()
            print("--- driver", *log[-30:], sep="\n")
    assert all(noter.error is None for noter in noters), [n.error for n in noters]
    assert [m.seq for m in marks] == list(range(len(marks)))
    report(
        "controller-sasl",
        f"controller as its own principal: {len(marks)} watermarks (a due record's "
        "included); it scaled and truncated, a writer could not; no-ACL principal refused",
    )


def test_a_due_record_kafka_refuses_is_counted_and_produced_again(
    tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver whose principal lacks WRITE on the marks topic: each due record fails,
    is logged and counted (the metric), and stays due; once the ACL exists, the
    retry is acknowledged."""
    security = KafkaSecurity("admin-pw", USERS)
    cluster = ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=2)
    with KafkaCluster(tmp_path / "kafka", security=security) as kafka:
        as_user(monkeypatch, "admin")
        StreamTopics(kafka.bootstrap_servers).create(cluster.marks_topic, 2, MARKS_TOPIC_CONFIGS)
        as_user(monkeypatch, "mallory")
        registry = CollectorRegistry()
        metrics = ControllerMetrics(registry=registry)
        settings = ControllerSettings(
            kafka_bootstrap=kafka.bootstrap_servers,
            zk_connect="unused:2181",
            delta_root=str(tmp_path / "delta"),
            checkpoint_root=str(tmp_path / "checkpoints"),
            cluster=cluster,
            state_partitions=1,
        )
        scheduler = DueScheduler(settings, on_failed=metrics.due_failed.inc).start()
        try:
            scheduler.sweep()  # one due record per slot, all refused
            slots = len(settings.slot_keys)
            assert scheduler.failed == slots and scheduler.produced == 0
            failed = registry.get_sample_value("tidemark_controller_due_records_failed_total")
            assert failed == slots
            assert sorted(scheduler.times.pending()) == sorted(settings.slot_keys)  # still due
            grant_tidemark_acls(kafka.client_config("admin"), cluster.marks_topic, [], ["mallory"])
            wait_until(lambda: scheduler.produced == slots, 60, "the retries never succeeded")
            assert scheduler.times.pending() == {}
        finally:
            scheduler.stop()
    report(
        "due-record-refused",
        f"{scheduler.failed} due record(s) refused, counted and produced again once allowed",
    )
