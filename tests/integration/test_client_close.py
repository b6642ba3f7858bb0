"""Clients close their Kafka handles: a bounded close, a closed use refused, and silence
after -- also when the broker is gone before ``close()``.

A broker of the test's own is started, used by each writer kind (then, in the last
test, by the readers and the timeline's Kafka clients), then stopped: each close must
return within its bound, nothing of the closed clients may log after it (a handle left
open reconnects and logs every second), and no librdkafka thread of theirs is left (a
handle that is only dropped, not closed, lives on while its owner is referenced).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from tests.faults.figures import report
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.roles import KAFKA_LOGGER
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.errors import TidemarkError
from tidemark.infra.kafka import KafkaCluster
from tidemark.pipelines.reading.config import ReaderConfig
from tidemark.pipelines.reading.exceptions import ReaderClosedError
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.timeline.buffer import BufferIngest, BufferRelay, TimelineBuffer
from tidemark.pipelines.timeline.config import (
    BufferConfig,
    ConsumerConfig,
    DueRule,
    IngestConfig,
    RelayConfig,
    TimelineConfig,
)
from tidemark.pipelines.timeline.exceptions import TimelineClosedError
from tidemark.pipelines.timeline.ingest import TimelineIngester
from tidemark.pipelines.timeline.producer import KafkaTimelineProducer
from tidemark.pipelines.timeline.relay import TimelineRelay
from tidemark.pipelines.timeline.store import TimelineStore
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.exceptions import WriterClosedError
from tidemark.pipelines.writing.observer import ObserverConfig, StreamObserver
from tidemark.pipelines.writing.producer import TidemarkProducer
from tidemark.pipelines.writing.transactions import TransactionalWriter
from tidemark.pipelines.writing.writer import EventWriter
from tidemark.retries import RetryPolicy

pytestmark = pytest.mark.integration

CLOSE_MS = 2_000
"""Each writer's close bound here (its flush and its shutdown mark's)."""
WARM_UP = RetryPolicy(max_elapsed_s=30.0)
"""How long a client made with the close's time-outs may take to first answer."""
QUIET_S = 3.0
"""How long after the closes nothing may log (librdkafka reconnects within a second)."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaCluster]:
    with KafkaCluster(tmp_path / "kafka", brokers=1) as cluster:
        transactions_ready(cluster.bootstrap_servers)
        yield cluster


def transactions_ready(bootstrap: str) -> None:
    """Wait until the new cluster's transaction coordinator answers (its log is made on
    first use): the writers here start with the close's short time-outs."""
    producer = roles.client(
        roles.TRANSACTIONAL_PRODUCER, bootstrap, {"transactional.id": "warm-up"}
    )
    try:
        WARM_UP.call(
            lambda: producer.init_transactions(5.0),
            retry_on=KafkaException,
            what="the transaction coordinator",
        )
    finally:
        roles.release(producer, 0)


Writers = dict[str, tuple[Any, Callable[[], None], Callable[[Any], None], type[Exception]]]


def kafka_threads() -> set[int]:
    """The ids of this process's librdkafka threads (every client handle runs some,
    named ``rdk:...``, until it is destroyed)."""
    found = set()
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/comm") as comm:
            if comm.read().startswith("rdk:"):
                found.add(int(tid))
    return found


def a_stream(broker: KafkaCluster, scope: str) -> tuple[StreamManager, str]:
    """A one-segment stream in ``scope`` (its metadata in memory): its manager (the
    caller closes its admin client once set up) and its name."""
    cluster = ClusterSettings(marks_topic=f"marks-{scope}", bucket_count=1)
    manager = StreamManager(MemoryStore(), broker.bootstrap_servers, cluster)
    manager.create_scope(scope)
    manager.create(f"{scope}/s", StreamConfiguration(ScalingPolicy.fixed(1)))
    return manager, f"{scope}/s"


def writers(broker: KafkaCluster, unique: str) -> Writers:
    """One of each writer kind (the timeline's Kafka producer too), each written to and
    acknowledged once: name -> (writer, its close, a use of it, what that use raises)."""
    kafka = broker.bootstrap_servers
    manager, stream = a_stream(broker, f"c{unique}")
    store, cluster = manager.store, manager.settings
    config = WriterConfig(
        cluster=cluster, linger_ms=1, delivery_timeout_ms=CLOSE_MS, close_timeout_ms=CLOSE_MS
    )
    event = EventWriter("e", stream, store=store, bootstrap_servers=kafka, config=config)
    event.write(b"x", "k")
    event.note_time(10)
    event.flush()
    txn = TransactionalWriter("t", stream, store=store, bootstrap_servers=kafka, config=config)
    t = txn.begin()
    t.write(b"x", "k")
    t.commit(timestamp=10)
    conf = {"bootstrap.servers": kafka, "linger.ms": 1, "message.timeout.ms": CLOSE_MS}
    producer = TidemarkProducer(conf, stream=stream, writer_id="p", store=store, cluster=cluster)
    producer.produce(manager.describe(stream).topic, b"x", b"k")
    producer.note_time(10)
    assert producer.flush(10) == 0
    manager.topics.create(f"timeline-in-{unique}", 1, {})
    timeline = KafkaTimelineProducer(kafka, f"timeline-in-{unique}", "tl", "app")
    timeline.put(b"x", timestamp_ms=10)
    timeline.flush(10)
    manager.topics.close()
    closed = WriterClosedError
    return {
        "EventWriter": (event, lambda: event.close(CLOSE_MS), lambda w: w.write(b"y", "k"), closed),
        "TransactionalWriter": (txn, txn.close, lambda w: w.begin(), closed),
        "TidemarkProducer": (
            producer,
            lambda: producer.close(CLOSE_MS / 1000),
            lambda w: w.note_time(11),
            closed,
        ),
        "KafkaTimelineProducer": (
            timeline,
            lambda: timeline.close(CLOSE_MS / 1000),
            lambda w: w.put(b"y", timestamp_ms=11),
            TimelineClosedError,
        ),
    }


def readers_and_timeline(
    broker: KafkaCluster, postgres: str, unique: str, delta_root: Path
) -> Writers:
    """A reader (one event read) and its group, the timeline relay (started), a buffer
    (``timeline ingest``; both halves run once), the timeline ingest (with dead letters)
    and a stream observer (one look): name -> as :func:`writers`."""
    kafka = broker.bootstrap_servers
    manager, stream = a_stream(broker, f"r{unique}")
    store, cluster = manager.store, manager.settings
    wconfig = WriterConfig(cluster=cluster, linger_ms=1)
    with EventWriter("e", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        w.write(b"x", "k")
        w.note_time(10)
    rconfig = ReaderConfig(
        rebalance_interval_ms=50,
        commit_interval_ms=0,
        window_refresh_interval_ms=0,
        kafka_timeout_ms=CLOSE_MS,
    )
    group = ReaderGroup(
        f"g{unique}",
        stream,
        store=store,
        bootstrap_servers=kafka,
        delta_root=str(delta_root),
        config=rconfig,
    )
    reader = group.reader("r1")
    read = reader.read_next(timeout_ms=30_000)
    assert read is not None and read.body == b"x"

    source, target, relayed, scheduled = (f"{t}-{unique}" for t in ("in", "out", "rl", "sch"))
    for topic in (source, target, relayed, scheduled, f"dead-{unique}"):
        manager.topics.create(topic, 1, {})
    timeline = f"tl{unique}"
    with TimelineStore(postgres) as timelines:
        timelines.migrate()
        timelines.create_timeline(TimelineConfig(timeline, buckets=1))
    relay = TimelineRelay(
        postgres,
        kafka,
        timeline,
        RelayConfig(relayed, flush_timeout_ms=CLOSE_MS),
        ConsumerConfig("relay", max_idle_ms=50),
    )
    relay.run_once(timeout_ms=50)  # its transactional producer is made and fenced in
    config = BufferConfig(source, target, DueRule(delay_ms=1), flush_timeout_ms=CLOSE_MS)
    buffer = TimelineBuffer(
        BufferIngest(postgres, kafka, config), BufferRelay(postgres, kafka, config)
    )
    buffer.ingest.run_once(50)
    buffer.relay.run_once(50)
    ingest = TimelineIngester(
        postgres,
        kafka,
        IngestConfig(scheduled, f"ingest-{unique}", kafka_timeout_ms=CLOSE_MS),
        dead_letter_topic=f"dead-{unique}",
    )
    ingest.run_once(50)
    observer = StreamObserver(
        stream,
        ObserverConfig(0, cluster=cluster, timeout_s=CLOSE_MS / 1000),
        store=store,
        bootstrap_servers=kafka,
    )
    # its offset lookups asked once; bound by the close's short time-out, the first
    # on a broker just started (and a busy machine) may time out, so ask until answered
    WARM_UP.call(observer.observe_once, retry_on=TidemarkError, what="the observer's lookups")
    manager.topics.close()
    closed, gone = ReaderClosedError, TimelineClosedError
    made: Writers = {
        "EventReader": (reader, reader.close, lambda r: r.read_next(timeout_ms=0), closed),
        "ReaderGroup": (group, group.close, lambda g: g.reader("r2"), closed),
        "TimelineRelay": (relay, relay.close, lambda r: r.run_once(timeout_ms=0), gone),
        "TimelineBuffer": (buffer, buffer.close, lambda b: b.ingest.run_once(0), gone),
        "TimelineBuffer relay": (buffer, buffer.close, lambda b: b.relay.run_once(0), gone),
        "TimelineIngester": (ingest, ingest.close, lambda i: i.run_once(0), gone),
        "StreamObserver": (observer, observer.close, lambda o: o.observe_once(), WriterClosedError),
    }
    return made


def close_all(made: Writers) -> dict[str, float]:
    """Close each; the seconds each close took (an error of the one hierarchy, such as
    the records a gone broker never acknowledged, is the close's honest answer)."""
    took = {}
    for name, (_, close, _, _) in made.items():
        started = time.monotonic()
        with contextlib.suppress(TidemarkError):
            close()
        took[name] = time.monotonic() - started
    return took


def assert_closed(made: Writers) -> None:
    for name, (writer, close, use, closed_error) in made.items():
        with pytest.raises(closed_error):
            use(writer)
        close()  # twice is allowed
        assert name


def test_closed_writers_refuse_use_and_say_nothing_more(
    broker: KafkaCluster, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    made = writers(broker, unique)
    took = close_all(made)
    assert all(s < CLOSE_MS / 1000 for s in took.values()), took
    assert_closed(made)


def close_quietly(
    made: Writers,
    before: set[int],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    theirs = kafka_threads() - before
    """Close each of ``made`` (the broker stopped): each close within its bound, none of
    the librdkafka threads born with them (those not in ``before``) left, nothing of
    Kafka's logged after, every use after refused. Reports the closes' times.

    Only the clients' own threads count: a worker process runs other modules' services
    and fixtures beside this test, whose clients may start threads meanwhile."""
    took = close_all(made)
    # a close's flush and its shutdown mark (a reader's: its position's commit, asked
    # again) each wait at most the bound, then let go
    bound_s = 2 * CLOSE_MS / 1000 + 1
    report(
        "client-close",
        "broker stopped, close took "
        + ", ".join(f"{name} {s:.2f} s" for name, s in took.items())
        + f" (bound {bound_s:.0f} s)",
    )
    assert all(s < bound_s for s in took.values()), took
    gc.collect()  # a handle let go of (an admin client has no close) is gone with its object
    assert theirs & kafka_threads() == set()  # every handle destroyed, none left to reconnect
    caplog.clear()
    capfd.readouterr()
    time.sleep(QUIET_S)  # what a handle left open would log in this time: its reconnects
    assert [r.getMessage() for r in caplog.records if "kafka" in r.name] == []
    assert "rdkafka" not in capfd.readouterr().err  # the drop-in's client logs to stderr
    assert_closed(made)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_broker_gone_before_close_bounds_the_close_and_nothing_logs_after(
    broker: KafkaCluster,
    unique: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    before = kafka_threads()
    made = writers(broker, unique)
    broker.stop()
    caplog.set_level(logging.DEBUG, logger=KAFKA_LOGGER.name)
    close_quietly(made, before, caplog, capfd)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_readers_and_timeline_clients_close_bounded_with_the_broker_gone(
    broker: KafkaCluster,
    postgres: str,
    unique: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    before = kafka_threads()
    made = readers_and_timeline(broker, postgres, unique, tmp_path / "delta")
    broker.stop()
    caplog.set_level(logging.DEBUG)
    close_quietly(made, before, caplog, capfd)
