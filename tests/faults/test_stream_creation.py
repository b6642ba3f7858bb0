"""Fault: stream creation is all or nothing, on a real Kafka broker and ZooKeeper."""

from __future__ import annotations

import pytest

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.exceptions import (
    InvalidConfigurationError,
    KafkaOperationError,
    StreamNameCollisionError,
    UnknownStreamError,
)
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.naming import topic_for
from tidemark.controller.states import StreamState
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore

pytestmark = [pytest.mark.integration, pytest.mark.faults]
ONE = StreamConfiguration(ScalingPolicy.fixed(1))


class Crash(Exception):
    """Stands for the process dying after a step."""


def test_colliding_names_are_refused_before_anything_is_written(zk_client, kafka, unique):
    store = ZooKeeperStore(zk_client)
    manager = StreamManager(store, kafka)
    for scope in (f"a_{unique}", "a"):
        manager.create_scope(scope)
    manager.create(f"a_{unique}/c", ONE)
    with pytest.raises(StreamNameCollisionError, match="collide"):
        manager.create(f"a/{unique}_c", ONE)
    assert store.list_streams() == [f"a_{unique}/c"]
    assert StreamTopics(kafka).partition_count(topic_for(f"a/{unique}_c")) is None


def test_a_kafka_failure_rolls_the_metadata_back(zk_client, kafka, unique):
    store = ZooKeeperStore(zk_client)
    manager = StreamManager(store, kafka)
    stream = f"k{unique}/orders"
    manager.create_scope(f"k{unique}")
    StreamTopics(kafka).create(topic_for(stream), 3, {})  # someone else's topic of that name
    with pytest.raises(KafkaOperationError, match="not created"):
        manager.create(stream, ONE)
    with pytest.raises(UnknownStreamError):
        store.read_stream(stream)


def test_a_half_created_stream_can_be_deleted_or_resumed(zk_client, kafka, unique):
    store = ZooKeeperStore(zk_client)

    def crash_after_record(operation: str, step: str) -> None:
        if (operation, step) == ("create", "recorded"):
            raise Crash

    crashing = StreamManager(store, kafka, step_hook=crash_after_record)
    manager = StreamManager(store, kafka)
    manager.create_scope(f"h{unique}")
    for name, recover in (("deleted", manager.delete), ("resumed", manager.resume)):
        stream = f"h{unique}/{name}"
        with pytest.raises(Crash):
            crashing.create(stream, ONE)
        assert store.read_stream(stream).metadata.state is StreamState.CREATING
        recover(stream)
    assert store.list_streams() == [f"h{unique}/resumed"]
    assert store.read_stream(f"h{unique}/resumed").metadata.state is StreamState.ACTIVE


def test_limits_are_checked_before_anything_is_written() -> None:
    with pytest.raises(InvalidConfigurationError, match="<= 1000"):
        StreamConfiguration(ScalingPolicy.fixed(2_147_483_648))
