"""Fault: `tidemark up` after `tidemark down`, and after a crash (every service kill -9ed),
restarts the same services on the same data."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.faults.figures import report
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import Environment
from tidemark.infra.process import pid_alive
from tidemark.infra.services import LocalServices

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]


def read_all(kafka: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": kafka, "group.id": f"r{time.time_ns()}", "log_level": 0}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg.value())
        return out
    finally:
        consumer.close()


@contextlib.contextmanager
def zookeeper_store(connect: str) -> Iterator[ZooKeeperStore]:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=connect)
    zk.start(timeout=15)
    try:
        yield ZooKeeperStore(zk)
    finally:
        zk.stop()
        zk.close()


def wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 20
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def test_up_after_down_and_after_a_crash_keeps_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path / "home"))
    for name in ("TIDEMARK_KAFKA_BOOTSTRAP", "TIDEMARK_ZK_CONNECT", "TIDEMARK_POSTGRES_DSN"):
        monkeypatch.delenv(name, raising=False)
    services = LocalServices(Environment.from_env())
    stream = "restart/orders"
    figures: list[str] = []
    try:
        started = time.monotonic()
        state = services.up()
        figures.append(f"first up {time.monotonic() - started:.1f} s")
        assert state.kafka_bootstrap and state.zk_connect
        with zookeeper_store(state.zk_connect) as store:
            manager = StreamManager(store, state.kafka_bootstrap, ClusterSettings())
            manager.create_scope("restart")
            meta = manager.create(stream, StreamConfiguration(ScalingPolicy.fixed(1)))
        producer = Producer(
            {"bootstrap.servers": state.kafka_bootstrap, "acks": "all", "log_level": 0}
        )
        for i in range(100):
            producer.produce(meta.topic, value=f"e{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        expected = [f"e{i}".encode() for i in range(100)]

        for how in ("down", "crash"):
            pids = [s.pid for s in state.services]
            if how == "down":
                services.down()
            else:
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
            wait_gone(pids)
            started = time.monotonic()
            state = services.up()
            figures.append(f"up after {how} {time.monotonic() - started:.1f} s")
            assert state.kafka_bootstrap and state.zk_connect
            with zookeeper_store(state.zk_connect) as store:
                again = store.get_stream(stream)
            assert again == meta
            got = read_all(state.kafka_bootstrap, meta.topic, len(expected))
            figures.append(f"after {how}: {len(got)}/{len(expected)} events read back")
            assert got == expected
    finally:
        services.down()
    report("restart", "; ".join(figures))
