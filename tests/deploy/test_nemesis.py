"""A Jepsen-style nemesis on the deployed shape.

On its own deployment (3 SASL brokers, a ZooKeeper ensemble, Spark standalone with two
workers, s3proxy, two controller drivers), writers of each kind write numbered events
and note time and a reader group reads, while a seeded schedule kills and restarts
brokers, ZooKeeper nodes, Spark workers, the leading driver and the object store. Then
the checker (tests/deploy/nemesis/checker.py) holds the run's history against what is
in Kafka and Delta. The seed is printed; ``TIDEMARK_NEMESIS_SEED`` replays it and
``TIDEMARK_NEMESIS_SECONDS`` sets how long faults go on (``make nemesis``).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.deploy.deployment import Deployment
from tests.deploy.nemesis.checker import check
from tests.deploy.nemesis.clients import GroupReader, TransactionWriter, Writer, parse
from tests.deploy.nemesis.history import History, Observed, Read, Stored
from tests.deploy.nemesis.schedule import EACH_KIND_ONCE, Nemesis, Step, plan
from tests.faults.figures import report
from tests.waiting import wait_until
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.delta.location import TableLocation
from tidemark.controller.delta.tables import read_watermarks
from tidemark.controller.kafka.settings import client_config
from tidemark.controller.naming import topic_for
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.driver import controller_view
from tidemark.controller.zookeeper.session import zookeeper_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import NEMESIS_SECONDS, NEMESIS_SEED
from tidemark.infra.process import ManagedProcess
from tidemark.pipelines.reading.group import ReaderGroup

STREAM = "nemesis/events"
START_S = 240
SETTLE_S = 120
IN_SUITE_S = 300
"""Seconds of faults in ``make test`` (each kind once, then seeded ones while a next step
fits); ``make nemesis`` runs longer."""


def fault_seconds() -> float:
    """How long faults go on: ``TIDEMARK_NEMESIS_SECONDS``, else the suite's."""
    return float(os.environ.get(NEMESIS_SECONDS) or IN_SUITE_S)


@pytest.fixture(scope="module")
def seed() -> int:
    chosen = int(os.environ.get(NEMESIS_SEED) or random.SystemRandom().randrange(2**31))
    print(f"\nnemesis seed {chosen} (replay: {NEMESIS_SEED}={chosen})", flush=True)
    return chosen


class Watcher:
    """Notes each watermark the first time it is seen in Delta."""

    def __init__(self, d: Deployment, history: History) -> None:
        self.d = d
        self.history = history
        self.seen: set[int] = set()
        self.last_read: int | None = None
        """When the last read that answered began (``Observed.unseen_at``)."""

    def poll(self) -> int:
        begun = self.history.tick()  # what this read lacks was made after this stamp
        try:
            marks = read_watermarks(self.d.delta_root, STREAM, self.d.s3.storage_options())
        except Exception:  # no table yet, or the store is down
            return len(self.seen)
        at = self.history.tick()
        for m in marks:
            if m.seq not in self.seen:
                self.seen.add(m.seq)
                self.history.observed.append(Observed(m, at, self.last_read))
        self.last_read = begun
        return len(self.seen)

    def more(self, count: int, what: str) -> None:
        """Wait for ``count`` watermarks more than seen now."""
        seen = self.poll()
        wait_until(lambda: self.poll() >= seen + count, SETTLE_S, what)

    def reaches(self, time_ms: int, what: str) -> None:
        """Wait for a watermark at ``time_ms`` or later."""

        def reached() -> bool:
            self.poll()
            return max((o.watermark.time for o in self.history.observed), default=-1) >= time_ms

        wait_until(reached, SETTLE_S, what)


def stored(d: Deployment, group: ReaderGroup, history: History) -> None:
    """Everything in the stream's topic, read committed, and each segment's end."""
    with d.as_user("admin"):
        config = client_config(d.bootstrap)
    consumer = Consumer(
        {
            **config,
            "group.id": "nemesis-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    topic = topic_for(STREAM)
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        positions = dict.fromkeys(partitions, 0)
        deadline = time.monotonic() + 120
        while any(positions[p] < ends[p] for p in partitions) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                # past an aborted transaction's last record the position is its end
                for tp in consumer.position([TopicPartition(topic, p) for p in partitions]):
                    positions[tp.partition] = max(positions[tp.partition], tp.offset)
                continue
            assert msg.error() is None, msg.error()
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            assert partition is not None and offset is not None and value is not None
            positions[partition] = offset + 1
            writer, number = parse(value)
            history.stored.append(Stored(writer, number, group.segment_of(partition), offset))
    finally:
        consumer.close()
    history.ends.update({group.segment_of(p): end for p, end in ends.items()})


def expected_s(step: Step) -> float:
    """About how long ``step`` takes here, healed and a watermark after: a step that would
    run past the end is not begun (a driver's take-over alone takes about a minute)."""
    recovery_s = 75.0 if any(f.kind == "leading-driver" for f in step.faults) else 20.0
    return max(f.down_s for f in step.faults) + step.calm_s + recovery_s


def alive(d: Deployment) -> list[ManagedProcess]:
    return [p for p in d.drivers.values() if p.alive()]


def unread(history: History, reader: GroupReader) -> str:
    """What the group has not read, per segment, and the reader's state: for a report."""
    read = {r.id for r in history.reads if isinstance(r, Read)}
    lines = []
    for seg in sorted({s.segment for s in history.stored}):
        stored_here = [s for s in history.stored if s.segment == seg]
        missing = sorted(s.offset for s in stored_here if s.id not in read)
        last_read = max(
            (r.offset for r in history.reads if isinstance(r, Read) and r.segment == seg),
            default=None,
        )
        lines.append(
            f"segment {seg}: stored {len(stored_here)} (end {history.ends.get(seg)}), "
            f"unread {len(missing)} {missing[:3]}..{missing[-3:]}, last offset read {last_read}"
        )
    try:
        view = reader.group.view()
        lines.append(f"group view: {view}")
    except Exception as exc:  # the report must not hide the failure
        lines.append(f"group view: {exc!r}")
    lines.append(f"reader position: {reader.reader.position()}")
    lines.append(f"reader failures: {reader.failures}, last: {reader.errors}")
    lines.append(f"reader thread alive: {reader.thread.is_alive()}")
    return "\n".join(lines)


START_UP_DELAY_MS = 15_000
"""The nemesis stream's start-up delay (``first_watermark_delay_ms``)."""


@pytest.fixture(scope="module")
def history(deployment: Deployment, seed: int) -> Iterator[History]:
    history = History()
    seconds = fault_seconds()
    with deployment.as_user("admin"), zookeeper_session(deployment.zookeeper.connect_string) as zk:
        store = ZooKeeperStore(zk, deployment.cluster.zk_root)
        manager = StreamManager(store, deployment.bootstrap, deployment.cluster)
        manager.create_scope(STREAM.split("/")[0])
        # Its writers start one after the other (seconds apart under load): the start-up
        # delay keeps the first watermark from leaving out one that starts a little later,
        # as a deployment with several writers sets it.
        config = StreamConfiguration(
            scaling_policy=ScalingPolicy.fixed(2), first_watermark_delay_ms=START_UP_DELAY_MS
        )
        manager.create(STREAM, config)

        def leader() -> str | None:
            view = controller_view(zk, deployment.cluster.zk_root, deployment.cluster.marks_topic)
            return view.leader

        # alone (make nemesis) it starts driver a; after test_deployment.py (make test),
        # on the shared deployment, the drivers still alive lead and stand by
        if not alive(deployment):
            deployment.submit_controller("a", "--no-warm-up")
        watcher = Watcher(deployment, history)
        wait_until(lambda: leader() is not None, START_S, "a driver leads", *alive(deployment))
        group = ReaderGroup.create(
            "nemesis",
            STREAM,
            store=store,
            bootstrap_servers=deployment.bootstrap,
            delta_root=TableLocation.of(deployment.delta_root, deployment.s3.storage_options()),
        )
        reader = GroupReader(group, history)
        clients = [
            Writer(deployment, STREAM, "event-writer", history),
            Writer(deployment, STREAM, "drop-in", history, drop_in=True),
            TransactionWriter(deployment, STREAM, "transactional", history),
            reader,
        ]
        for client in clients:
            client.start()
        wait_until(lambda: watcher.poll() >= 3, START_S, "watermarks in Delta", *alive(deployment))
        for name in ("a", "b"):  # a standby
            if name not in deployment.drivers or not deployment.drivers[name].alive():
                deployment.submit_controller(name, "--no-warm-up")
                break
        nemesis = Nemesis(deployment, leader)
        ends = time.monotonic() + seconds
        try:
            for number, step in enumerate(plan(seed, 1000)):
                if number >= len(EACH_KIND_ONCE) and time.monotonic() + expected_s(step) > ends:
                    break
                began = time.monotonic()
                nemesis.run(step)
                faults = ", ".join(map(str, step.faults))
                watcher.more(1, f"step {number} ({faults}) healed")
                took_s = time.monotonic() - began
                print(f"nemesis step {number} ({faults}): a new watermark {took_s:.1f} s after")
                history.steps = number + 1
                if number < len(EACH_KIND_ONCE):
                    (fault,) = step.faults
                    report(
                        f"deploy-{fault.kind}",
                        f"{fault}: a new watermark {took_s:.1f} s after it began",
                    )
        except AssertionError as exc:  # the system did not recover: no history to check
            for client in clients:
                client.stop()
            group.close()
            raise AssertionError(f"seed {seed}: {exc}") from exc
        for client in clients[:3]:
            client.stop()
        try:
            # the last watermarks cover the last notes (once every writer is shut down,
            # the watermark reaches the highest time noted), the reader reaches the end;
            # counting watermarks instead raced with those landing while writers stopped
            last = max((n.time for n in history.noted), default=None)
            if last is None:
                watcher.more(1, "a watermark")
            else:
                watcher.reaches(last, f"a watermark at the last noted time {last}")
            stored(deployment, group, history)
            wanted = len({s.id for s in history.stored})
            try:
                wait_until(
                    lambda: len({r.id for r in history.reads if isinstance(r, Read)}) >= wanted,
                    SETTLE_S,
                    "the group read everything",
                )
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}: {exc}\n{unread(history, reader)}") from exc
        finally:
            clients[3].stop()
            group.close()
        print("nemesis failures survived by clients:", {c.name: c.failures for c in clients})
        yield history


@pytest.mark.timeout(fault_seconds() + 900)  # start, the last step's overrun, the settling
def test_no_invariant_broken_under_the_nemesis(history: History, seed: int) -> None:
    found = check(history)
    report(
        "nemesis",
        f"seed {seed} (replay: make nemesis SEED={seed} SECONDS={fault_seconds():.0f}): "
        f"{history.steps} steps of faults; "
        f"{len(history.written)} events acknowledged or aborted, {len(history.observed)} "
        f"watermarks, {len(history.reads)} reads; {len(found)} invariants broken",
    )
    assert not found, f"seed {seed}:\n" + "\n".join(map(str, found))
