"""Conformance: a producer that knows only ``schemas/README.md`` takes part.

The writer side here uses a bare ``confluent_kafka.Producer`` and fastavro,
with the schema, header, partition rule and key copied from the document, and
its registrations made by hand in ZooKeeper as the document says (kazoo) —
no tidemark writer, codec or naming code. The real controller (Spark job)
must emit the watermarks the document promises from v2 marks (with an
``instance`` token and ``max_event_time``), and refuse deliberately wrong marks
(stale, impersonated, unregistered, a v1 mark, future and negative times,
undecodable bytes) with the documented reasons and raw bytes.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import time
import zlib
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer
from kazoo.exceptions import NodeExistsError

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.jobs.config import ControllerSettings, CycleTrigger
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.tables import REJECTED_MARKS, read_table, read_watermarks
from tidemark.jobs.workflow import tick_value

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

# --- copied from schemas/README.md, sections 2 and 3 ---------------------------------------

V2_FIELDS: list[dict[str, Any]] = [
    {"name": "stream", "type": "string"},
    {"name": "writer_id", "type": "string"},
    {"name": "time", "type": "long"},
    {
        "name": "position",
        "type": {
            "type": "array",
            "items": {
                "type": "record",
                "name": "SegmentOffset",
                "fields": [
                    {"name": "segment", "type": "long"},
                    {"name": "offset", "type": "long"},
                ],
            },
        },
    },
    {"name": "alive", "type": "boolean"},
    {"name": "transaction_id", "type": ["null", "string"], "default": None},
    {"name": "instance", "type": ["null", "string"], "default": None},
    {"name": "max_event_time", "type": ["null", "long"], "default": None},
]
# v1 is the same schema without the last two fields, ``instance`` and ``max_event_time``.
SCHEMAS = {
    version: fastavro.parse_schema(
        {"type": "record", "name": "WriterMark", "namespace": "tidemark", "fields": fields}
    )
    for version, fields in ((2, V2_FIELDS), (1, V2_FIELDS[:-2]))
}
HEADERS = {2: bytes.fromhex("c301066b40372471b44f"), 1: bytes.fromhex("c30163358494c87d236e")}


def encode_mark(
    stream: str,
    writer: str,
    time_ms: int,
    position: dict[int, int],
    alive: bool,
    instance: str | None = None,
    version: int = 2,
    max_event_time: int | None = None,
) -> bytes:
    record: dict[str, Any] = {
        "stream": stream,
        "writer_id": writer,
        "time": time_ms,
        "position": [{"segment": s, "offset": o} for s, o in sorted(position.items())],
        "alive": alive,
        "transaction_id": None,
    }
    if version == 2:
        record["instance"] = instance
        record["max_event_time"] = max_event_time
    body = io.BytesIO()
    fastavro.schemaless_writer(body, SCHEMAS[version], record)
    return HEADERS[version] + body.getvalue()


def bucket(stream: str, buckets: int) -> int:
    return zlib.crc32(stream.encode("utf-8")) % buckets


# --- a writer that follows the document ------------------------------------------------------


class BareWriter:
    """Events with explicit partitions; positions from delivery reports; marks by hand."""

    def __init__(
        self, producer: Producer, writer_id: str, stream: str, topic: str, version: int = 2
    ) -> None:
        self.producer, self.writer_id, self.stream, self.topic = producer, writer_id, stream, topic
        self.version = version
        self.instance = secrets.token_hex(16) if version == 2 else None  # section 4
        self.position: dict[int, int] = {}
        self.max_event_time: int | None = None  # section 4: the highest stored timestamp

    def register(self, zk: Any, root: str) -> None:
        """Section 4, ``instance``: this instance's registration znode, before any mark."""
        scope, name = self.stream.split("/")
        writers = f"{root}/streams/{scope}/{name}/writers"
        node = f"{writers}/{self.writer_id}"  # an id of plain letters and digits
        for path, data in ((writers, b""), (node, self.writer_id.encode())):
            with contextlib.suppress(NodeExistsError):
                zk.create(path, data)
        record = {"instance": self.instance, "registered_at": int(time.time() * 1000)}
        zk.create(f"{node}/r-", json.dumps(record).encode(), sequence=True)

    def write(self, value: bytes, partition: int, timestamp: int) -> None:
        def report(err: Any, msg: Any) -> None:
            assert err is None, err
            nxt = msg.offset() + 1  # segment id = partition before any scale (section 1)
            self.position[msg.partition()] = max(self.position.get(msg.partition(), 0), nxt)
            stored = msg.timestamp()[1]
            self.max_event_time = max(stored, self.max_event_time or stored)

        self.producer.produce(
            self.topic, value, partition=partition, timestamp=timestamp, on_delivery=report
        )

    def mark(self, marks_topic: str, buckets: int, time_ms: int, alive: bool = True) -> None:
        assert self.producer.flush(30) == 0  # every event before the mark is acknowledged
        value = encode_mark(
            self.stream,
            self.writer_id,
            time_ms,
            self.position,
            alive,
            self.instance,
            self.version,
            self.max_event_time,
        )
        send(self.producer, marks_topic, buckets, self.stream, value)


def send(producer: Producer, marks_topic: str, buckets: int, stream: str, value: bytes) -> None:
    key = stream.encode("utf-8")
    producer.produce(marks_topic, value, key, partition=bucket(stream, buckets))
    assert producer.flush(30) == 0


def test_a_bare_producer_following_the_document_gets_watermarks(
    spark: Any, kafka: str, zookeeper: str, zk_client: Any, unique: str, tmp_path: Path
) -> None:
    cluster = ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=2)
    store = ZooKeeperStore(zk_client, cluster.zk_root)
    stream = f"p{unique}/orders"
    manager = StreamManager(store, kafka, cluster)
    manager.create_scope(f"p{unique}")
    meta = manager.create(stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    settings = ControllerSettings(
        kafka_bootstrap=kafka,
        zk_connect=f"{zookeeper}/tidemark-test-{unique}",
        delta_root=str(tmp_path / "delta"),
        checkpoint_root=str(tmp_path / "checkpoints"),
        cluster=cluster,
        interval_ms=1000,
        writer_timeout_ms=60_000,
        trigger=CycleTrigger.TICKS,
    )
    producer = Producer({"bootstrap.servers": kafka, "enable.idempotence": True})
    w1 = BareWriter(producer, "w1", stream, meta.topic)  # v2, with an instance token
    w2 = BareWriter(producer, "w2", stream, meta.topic)
    for w in (w1, w2):
        w.register(zk_client, cluster.zk_root)
    part = bucket(stream, cluster.bucket_count)

    def tick(now_ms: int) -> None:
        producer.produce(cluster.marks_topic, tick_value(now_ms), stream.encode(), partition=part)
        assert producer.flush(30) == 0

    instance = ControllerJob(spark, settings, f"c-{unique}").start()
    try:
        instance.wait_leading()  # it made the marks topic
        for i in range(3):
            w1.write(f"a{i}".encode(), partition=0, timestamp=800 + 100 * i)
        w2.write(b"b0", partition=1, timestamp=1_200)
        w1.mark(cluster.marks_topic, cluster.bucket_count, 1_000)
        w2.mark(cluster.marks_topic, cluster.bucket_count, 1_200)
        first_cut = {0: w1.position[0], 1: w2.position[1]}
        assert first_cut == {0: 3, 1: 1}
        tick(10_000)
        instance.process_all_available()
        w1.write(b"a3", partition=1, timestamp=2_500)  # ahead of w1's next noted time
        w1.mark(cluster.marks_topic, cluster.bucket_count, 2_000)
        w2.mark(cluster.marks_topic, cluster.bucket_count, 2_100, alive=False)  # shutdown
        w1.mark(cluster.marks_topic, cluster.bucket_count, 1_500)  # wrong: time went back
        # Wrong marks, one per documented reason (section 7):
        impostor = encode_mark(stream, "w1", 5_000, w1.position, True, secrets.token_hex(16))
        future = encode_mark(stream, "w3", int(time.time() * 1000) + 7_200_000, {}, True, "t3")
        negative = encode_mark(stream, "w4", -1, {}, True, "t4")
        nobody = encode_mark(stream, "w5", 1_000, {}, True, "t5")  # never registered
        v1 = encode_mark(stream, "w2", 2_200, w2.position, True, None, version=1)  # no token
        garbage = HEADERS[2] + b"\x16shop"  # truncated body
        for value in (impostor, future, negative, nobody, v1, garbage):
            send(producer, cluster.marks_topic, cluster.bucket_count, stream, value)
        tick(11_000)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            instance.process_all_available()
            if (
                len(read_watermarks(settings.delta_root, stream)) >= 2
                and len(read_table(settings.delta_root, REJECTED_MARKS)) >= 7
            ):
                break
            time.sleep(0.3)
    finally:
        instance.stop()

    got = [
        (m.seq, m.time, m.upper_time, dict(m.stream_cut))
        for m in read_watermarks(settings.delta_root, stream)
    ]
    # upper_time: the largest noted time, or w1's max_event_time 2 500 once it is above
    assert got == [(0, 1_000, 1_200, first_cut), (1, 2_000, 2_500, {0: 3, 1: 2})]
    rejected = sorted(
        read_table(settings.delta_root, REJECTED_MARKS), key=lambda r: r["kafka_offset"]
    )
    assert [(r["stream"], r["writer"], r["reason"]) for r in rejected] == [
        (stream, "w1", "stale_time"),
        (stream, "w1", "impersonated"),
        (stream, "w3", "future_time"),
        (stream, "w4", "negative_time"),
        (stream, "w5", "unregistered"),
        (stream, "w2", "unregistered"),
        (stream, None, "malformed"),
    ]
    raw = [impostor, future, negative, nobody, v1, garbage]
    assert [bytes(r["raw"]) for r in rejected[1:]] == raw
