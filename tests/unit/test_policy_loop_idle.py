"""The policy loop's idle cost: streams without a policy are not read on every pass."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from tidemark.controller.config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.metadata import Versioned, new_stream_metadata
from tidemark.controller.policy_loop import PolicyLoop, PolicySettings, has_policy
from tidemark.controller.states import StreamState

STREAMS = 1_000


class CountingStore(MemoryStore):
    """A memory store that counts reads of stream records."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read_stream(self, stream: str) -> Versioned:
        self.reads += 1
        return super().read_stream(stream)


class Topics:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def end_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]:
        self.asked.append(topic)
        return dict.fromkeys(partitions, 0)


def manager_of(store: MemoryStore) -> Any:
    """What the loop asks of a StreamManager, over ``store`` (no Kafka)."""
    return SimpleNamespace(
        store=store,
        list=store.list_streams,
        describe=store.get_stream,
        topics=Topics(),
    )


def add_stream(store: MemoryStore, name: str, config: StreamConfiguration | None = None) -> None:
    meta = new_stream_metadata(name, config or StreamConfiguration(), now_ms=0)
    store.create_stream(replace(meta, state=StreamState.ACTIVE))


def test_a_pass_reads_no_record_of_a_stream_without_a_policy():
    store = CountingStore()
    store.create_scope("s")
    for i in range(STREAMS):
        add_stream(store, f"s/quiet-{i:04d}")
    now = [0]
    loop = PolicyLoop(
        manager_of(store),
        PolicySettings(rate_window_ms=1_000, rescan_ms=60_000),
        clock=lambda: now[0],
    )
    assert loop.run_once() == []
    first = store.reads
    assert first >= STREAMS  # the first pass learns every stream (and watches it)

    started = time.perf_counter()
    for _ in range(5):
        now[0] += 1_000
        assert loop.run_once() == []
    per_pass_ms = (time.perf_counter() - started) * 1000 / 5
    assert store.reads == first, "a pass read records of streams without a policy"
    print(f"\n{STREAMS} streams without a policy: {per_pass_ms:.2f} ms per pass (in memory)")


def test_a_policy_set_later_is_seen_by_the_next_pass_through_the_watch():
    store = CountingStore()
    store.create_scope("s")
    add_stream(store, "s/a")
    add_stream(store, "s/b")
    manager = manager_of(store)
    loop = PolicyLoop(manager, PolicySettings(rate_window_ms=1_000), clock=lambda: 0)
    loop.run_once()
    assert manager.topics.asked == []

    current = store.read_stream("s/b")
    scaling = ScalingPolicy.by_event_rate(100, 2, 1)
    changed = replace(current.metadata.config, scaling_policy=scaling)
    store.replace_stream(replace(current.metadata, config=changed), current.version)
    before = store.reads
    loop.run_once()
    # only s/b: read once to act on it, its rates asked of Kafka; s/a untouched
    assert store.reads == before + 1
    assert manager.topics.asked == [current.metadata.topic]


def test_streams_gone_are_forgotten_and_a_rescan_rereads_the_others():
    store = CountingStore()
    store.create_scope("s")
    add_stream(store, "s/a")
    add_stream(store, "s/b")
    now = [0]
    loop = PolicyLoop(manager_of(store), PolicySettings(rescan_ms=10_000), clock=lambda: now[0])
    loop.run_once()
    gone = store.read_stream("s/b")
    store.delete_stream("s/b", gone.version)
    loop.run_once()
    assert set(loop._known) == {"s/a"}
    reads = store.reads
    now[0] += 10_000
    loop.run_once()
    assert store.reads == reads + 1  # the rescan: s/a's record once


def test_has_policy():
    meta = new_stream_metadata("s/a", StreamConfiguration(), now_ms=0)
    assert not has_policy(meta)
    by_time = StreamConfiguration(retention_policy=RetentionPolicy.by_time(60_000))
    assert has_policy(new_stream_metadata("s/a", by_time, now_ms=0))


def test_controller_run_hands_its_driver_a_policy_switch_unless_turned_off():
    import pytest

    from tidemark.cli.controller import policy_tasks
    from tidemark.cli.main import build_parser
    from tidemark.controller.naming import ClusterSettings
    from tidemark.controller.policy_loop import PolicySwitch
    from tidemark.errors import ConfigurationError
    from tidemark.jobs.config import ControllerSettings

    settings = ControllerSettings(
        kafka_bootstrap="k:9092",
        zk_connect="z:2181",
        delta_root="/data/delta",
        checkpoint_root="/data/ckpt",
        cluster=ClusterSettings(zk_root="/tm"),
    )

    def parse(*extra: str) -> Any:
        return build_parser().parse_args(["controller", "run", "--instance", "a", *extra])

    (switch,) = policy_tasks(parse("--policy-interval-ms", "250"))(settings)
    assert isinstance(switch, PolicySwitch)
    assert switch.settings.interval_ms == 250
    assert switch.cut_at is not None and switch.cut_at.keywords["delta_root"] == "/data/delta"
    assert (switch.kafka_bootstrap, switch.zk_connect) == ("k:9092", "z:2181")
    assert switch.cluster.zk_root == "/tm" and switch.identifier == "controller-a"
    assert policy_tasks(parse())(settings)[0].settings.interval_ms == 10_000  # on by default
    assert policy_tasks(parse("--policy-interval-ms", "0"))(settings) == []
    with pytest.raises(ConfigurationError, match="--policy-interval-ms must be >= 0"):
        policy_tasks(parse("--policy-interval-ms", "-1"))
