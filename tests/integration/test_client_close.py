"""Writers close their Kafka handles: a bounded close, a closed use refused, and silence
after -- also when the broker is gone before ``close()``.

A broker of the test's own is started, written to by each writer kind, then (in the
second test) stopped: each close must return within its bound, and nothing of the
closed clients may log after it (a handle left open reconnects and logs every second).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.figures import report
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.kafka.roles import KAFKA_LOGGER
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.errors import TidemarkError
from tidemark.infra.kafka import KafkaCluster
from tidemark.pipelines.timeline.exceptions import TimelineClosedError
from tidemark.pipelines.timeline.producer import KafkaTimelineProducer
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.exceptions import WriterClosedError
from tidemark.pipelines.writing.producer import TidemarkProducer
from tidemark.pipelines.writing.transactions import TransactionalWriter
from tidemark.pipelines.writing.writer import EventWriter

pytestmark = pytest.mark.integration

CLOSE_MS = 2_000
"""Each writer's close bound here (its flush and its shutdown mark's)."""
QUIET_S = 3.0
"""How long after the closes nothing may log (librdkafka reconnects within a second)."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaCluster]:
    with KafkaCluster(tmp_path / "kafka", brokers=1) as cluster:
        yield cluster


Writers = dict[str, tuple[Any, Callable[[], None], Callable[[Any], None], type[Exception]]]


def writers(broker: KafkaCluster, unique: str) -> Writers:
    """One of each writer kind (the timeline's Kafka producer too), each written to and
    acknowledged once: name -> (writer, its close, a use of it, what that use raises)."""
    kafka = broker.bootstrap_servers
    cluster = ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=1)
    store = MemoryStore()
    manager = StreamManager(store, kafka, cluster)
    stream = f"c{unique}/s"
    manager.create_scope(f"c{unique}")
    manager.create(stream, StreamConfiguration(ScalingPolicy.fixed(1)))
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


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_broker_gone_before_close_bounds_the_close_and_nothing_logs_after(
    broker: KafkaCluster,
    unique: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    made = writers(broker, unique)
    broker.stop()
    caplog.set_level(logging.DEBUG, logger=KAFKA_LOGGER.name)
    took = close_all(made)
    # a close's flush and its shutdown mark each wait at most the bound, then let go
    bound_s = 2 * CLOSE_MS / 1000 + 1
    report(
        "client-close",
        "broker stopped, close took "
        + ", ".join(f"{name} {s:.2f} s" for name, s in took.items())
        + f" (bound {bound_s:.0f} s)",
    )
    assert all(s < bound_s for s in took.values()), took
    caplog.clear()
    capfd.readouterr()
    time.sleep(QUIET_S)  # what a handle left open would log in this time: its reconnects
    assert [r.getMessage() for r in caplog.records] == []
    assert "rdkafka" not in capfd.readouterr().err  # the drop-in's client logs to stderr
    assert_closed(made)
