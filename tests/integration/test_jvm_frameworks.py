"""The JVM interceptor under Kafka Streams and Spring for Apache Kafka, as the guide sets it.

A stateless Kafka Streams application (``tests/jvm/OrdersStreams.java``), run with the
guide's ``producer.``-prefixed Streams settings, and a ``KafkaTemplate`` over the guide's
``DefaultKafkaProducerFactory`` (``tests/jvm/SpringOrders.java`` with the guide's snippet put
in) each write a topic adopted as a stream. Their producers' marks, read back from the marks
topic and folded as the controller folds them, make watermarks that cover every record, and
every seek by time is exact against the timestamps the records hold.
"""

# ruff: noqa: F811  (the fixtures imported from test_dropin_producer are redefined as arguments)
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.integration.test_dropin_producer import (  # noqa: F401 (fixtures)
    cluster,
    make_topic,
    manager,
    records,
    store,
)
from tests.integration.test_jvm_interceptor import PARTITIONS, adopted, end_of, full, raw_marks
from tests.integration.test_seek_ahead import fold
from tests.jvm_clients import assert_seeks_exact, compile_java, properties, run_java, snippet
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.schemas.records import WriterMarkRecord

pytestmark = [pytest.mark.integration]

SOURCES = Path(__file__).resolve().parent.parent / "jvm"
SNIPPET_MARKER = "// SNIPPET: "


def source(name: str) -> str:
    """``tests/jvm/<name>``, each ``// SNIPPET: X`` line replaced by the guide's snippet X."""
    lines = (SOURCES / name).read_text().splitlines(keepends=True)
    return "".join(
        snippet(line.split(SNIPPET_MARKER, 1)[1].strip())
        if line.strip().startswith(SNIPPET_MARKER)
        else line
        for line in lines
    )


@dataclass(frozen=True)
class Target:
    """A topic adopted as a stream for one test, and where its writer finds tidemark."""

    kafka: str
    zk_connect: str
    stream: str
    topic: str
    store: Any
    cluster: ClusterSettings

    def tidemark_settings(self, prefix: str = "") -> dict[str, str]:
        """The ``tidemark.*`` producer settings for this installation, each key under
        ``prefix`` (dots spelled ``__``, as :func:`properties` takes them)."""
        settings = {
            "tidemark.stream": self.stream,
            "tidemark.zookeeper.connect": self.zk_connect,
            "tidemark.marks.topic": self.cluster.marks_topic,
            "tidemark.bucket.count": str(self.cluster.bucket_count),
            "tidemark.note.interval.ms": "100",
        }
        return {(prefix + k).replace(".", "__"): v for k, v in settings.items()}

    def check(
        self, root: Path, complete_windows: bool = True
    ) -> tuple[list[Any], list[WriterMarkRecord]]:
        """The topic's records and the stream's marks, checked: one writer and instance, a
        last (shutdown) mark whose position covers every record, and exact seeks by the
        watermarks folded from the marks (Delta under ``root``; ``complete_windows``: no
        record was late, :func:`assert_seeks_exact`)."""
        events = records(self.kafka, self.topic, PARTITIONS)
        marks = [
            WriterMarkRecord.decode(r) for r in raw_marks(self.kafka, self.cluster, self.stream)
        ]
        assert len(marks) >= 3
        assert len({m.writer_id for m in marks}) == 1 and len({m.instance for m in marks}) == 1
        assert [m.alive for m in marks] == [True] * (len(marks) - 1) + [False]
        assert full(marks[-1].position) == end_of(events)
        assert marks[-1].max_event_time == max(ts for *_, ts in events)
        watermarks = fold(self.stream, self.store, str(root), [[m] for m in marks])
        assert len(watermarks) >= 2 and full(watermarks[-1].stream_cut) == end_of(events)
        seen = [(p, off, ts) for p, off, _, _, ts in events]
        assert_seeks_exact(self.stream, seen, watermarks, str(root), self.store, complete_windows)
        return events, marks


@pytest.fixture
def target(
    kafka: str,
    zookeeper: str,
    manager: StreamManager,
    store: Any,
    cluster: ClusterSettings,
    unique: str,
) -> Target:
    stream, topic = adopted(kafka, manager, unique)
    zk_connect = f"{zookeeper}/tidemark-test-{unique}"
    return Target(kafka, zk_connect, stream, topic, store, cluster)


def test_a_kafka_streams_application_writes_a_stream_that_keeps_time(
    target: Target, unique: str, tmp_path: Path
) -> None:
    raw, audit = f"raw-orders-{unique}", f"audit-{unique}"
    make_topic(target.kafka, raw, PARTITIONS)
    make_topic(target.kafka, audit, 1)  # the application's other output: no marks, no position
    count, start = 600, int(time.time() * 1000) - 30_000
    producer = Producer({"bootstrap.servers": target.kafka, "linger.ms": 5})
    for i in range(count):  # event times of their own, which Kafka Streams forwards
        producer.produce(raw, f"order-{i}", f"key-{i % 7}", timestamp=start + 40 * i)
    assert producer.flush(30) == 0
    settings = tmp_path / "streams.properties"
    settings.write_text(
        properties(
            snippet("streams.properties"),
            application__id=f"orders-enricher-{unique}",
            bootstrap__servers=target.kafka,
            state__dir=str(tmp_path / "state"),
            **target.tidemark_settings("producer."),
        )
    )
    classes = compile_java(tmp_path / "java", source("OrdersStreams.java"), ("streams",))
    args = [str(settings), raw, target.topic, str(count), audit]
    run_java(classes, "OrdersStreams", *args, groups=("streams",))

    # Kafka Streams sends each record with its input's time, noted times follow the clock:
    # a record whose time was behind the clock when it was sent is late (its window by time
    # was complete before it), but no seek by time ever skips it
    events, marks = target.check(tmp_path / "delta", complete_windows=False)
    assert sorted(v for *_, v, _ in events) == sorted(f"ORDER-{i}".encode() for i in range(count))
    sent = {f"ORDER-{i}".encode(): start + 40 * i for i in range(count)}
    assert all(ts >= sent[v] for *_, v, ts in events)  # its own times, raised per segment only
    assert sum(ts == sent[v] for *_, v, ts in events) > count // 2
    assert marks[0].writer_id.endswith("-StreamThread-1-producer")  # its producer's client.id
    assert len(records(target.kafka, audit, 1)) == count  # passed through untouched


def test_a_spring_kafka_template_writes_a_stream_that_keeps_time(
    target: Target, tmp_path: Path
) -> None:
    settings = tmp_path / "producer.properties"
    installation = target.tidemark_settings()
    del installation["tidemark__stream"], installation["tidemark__zookeeper__connect"]
    settings.write_text(
        properties(
            "",
            bootstrap__servers=target.kafka,
            key__serializer="org.apache.kafka.common.serialization.StringSerializer",
            value__serializer="org.apache.kafka.common.serialization.StringSerializer",
            client__id="orders-spring-1",
            **installation,
        )
    )
    classes = compile_java(tmp_path / "java", source("SpringOrders.java"), ("spring",))
    count = 500
    args = [str(settings), target.stream, target.zk_connect, target.topic, str(count)]
    run_java(classes, "SpringOrders", *args, groups=("spring",))

    events, marks = target.check(tmp_path / "delta")
    assert sorted(v for *_, v, _ in events) == sorted(f"event-{i}".encode() for i in range(count))
    assert {m.writer_id for m in marks} == {"orders-spring-1-1"}  # the factory's client.id


def test_a_spring_boot_application_writes_a_stream_that_keeps_time(
    target: Target, tmp_path: Path
) -> None:
    """Spring Boot's property binding: the guide's ``spring.kafka.producer.properties.*``
    lines reach the producer that Boot's auto-configuration makes for the KafkaTemplate."""
    settings = tmp_path / "application.properties"
    settings.write_text(
        properties(
            snippet("application.properties"),
            **{"spring__kafka__bootstrap-servers": target.kafka},
            **target.tidemark_settings("spring.kafka.producer.properties."),
        )
    )
    classes = compile_java(tmp_path / "java", source("BootOrders.java"), ("spring",))
    count = 500
    run_java(classes, "BootOrders", str(settings), target.topic, str(count), groups=("spring",))

    events, marks = target.check(tmp_path / "delta")
    assert sorted(v for *_, v, _ in events) == sorted(f"event-{i}".encode() for i in range(count))
    assert {m.writer_id for m in marks} == {"orders-1"}  # the factory's client.id
