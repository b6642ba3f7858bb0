"""Each tidemark role on a secured cluster (SASL/SCRAM over TLS with a CA made for the
run, ACLs from ``grant_tidemark_acls``), used as itself: a principal per role runs that
role's verbs, and a neighbouring verb it has no grant for is refused by the broker with
an authorization error.

One broker, one principal per role (plus the admin that grants), in a module fixture:
writer, controller, policies, reader, service and timeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicPartition
from kazoo.client import KazooClient

from tests.faults.test_kafka_security import authorization_refused, consume_all, produce_one
from tidemark.controller.config import StreamConfiguration
from tidemark.controller.exceptions import KafkaOperationError
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.acls import grant_tidemark_acls
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.kafka.segment_sizes import SegmentSizes
from tidemark.controller.kafka.settings import SASL_PASSWORD, SASL_USERNAME, SECURITY_PROTOCOL
from tidemark.controller.model import KeyRange
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import (
    KAFKA_BOOTSTRAP,
    KAFKA_PROPERTIES,
    POSTGRES_DSN,
    ZK_CONNECT,
    overridden,
)
from tidemark.infra.kafka import KafkaCluster, KafkaSecurity
from tidemark.infra.tls import PrivateCA
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.timeline.buffer import BufferRelay
from tidemark.pipelines.timeline.config import (
    BufferConfig,
    ConsumerConfig,
    DueRule,
    RelayConfig,
    TimelineConfig,
)
from tidemark.pipelines.timeline.relay import timeline_relay
from tidemark.pipelines.timeline.store import NewMessage, TimelineStore
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.transactions import transactional_id_for
from tidemark.pipelines.writing.writer import EventWriter

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

ROLES = ("writer", "controller", "policies", "reader", "service", "timeline")
PASSWORDS = {role: f"{role}-pw" for role in ROLES}
ADMIN_PASSWORD = "admin-pw"
STREAM = "roles/orders"
EVENTS = 20


@dataclass
class Secured:
    bootstrap: str
    zk_connect: str
    store: ZooKeeperStore
    cluster: ClusterSettings
    source: str
    target: str
    tmp: Path

    def as_role(self, role: str) -> Any:
        """Clients built inside the block connect as ``role``'s principal."""
        return overridden(principal(role))

    def topic(self) -> str:
        return self.store.get_stream(STREAM).topic


TRUST: dict[str, str] = {}
"""What makes a client trust the module's broker (its CA), set by the ``secured`` fixture."""


def principal(role: str) -> dict[str, str]:
    """The environment of a process running as ``role``: SASL over TLS, the run's CA."""
    passwords = {"admin": ADMIN_PASSWORD, **PASSWORDS}
    return {
        SECURITY_PROTOCOL: "SASL_SSL",
        SASL_USERNAME: role,
        SASL_PASSWORD: passwords[role],
        **TRUST,
    }


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, zookeeper: str) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("roles")
    unique = str(time.time_ns())
    cluster = ClusterSettings(
        marks_topic=f"marks-{unique}", zk_root=f"/roles-{unique}", bucket_count=1
    )
    zk = KazooClient(hosts=zookeeper)
    zk.start(30)
    ca = PrivateCA.create(tmp / "tls")
    TRUST[KAFKA_PROPERTIES] = json.dumps({"ssl.ca.location": str(ca.cert)})
    security = KafkaSecurity(ADMIN_PASSWORD, PASSWORDS)
    with KafkaCluster(tmp / "kafka", security=security, tls=ca) as kafka:
        assert kafka.protocol == "SASL_SSL"  # every role's clients, the timeline's too
        bootstrap = kafka.bootstrap_servers
        source, target = f"timeline-in-{unique}", f"timeline-out-{unique}"
        with overridden(principal("admin")):
            for topic in (cluster.marks_topic, source, target):
                StreamTopics(bootstrap).create(topic, 1, {})
        grant_tidemark_acls(
            kafka.client_config("admin"),
            cluster.marks_topic,
            writers=["writer"],
            controllers=["controller"],
            policies=["policies"],
            readers=["reader"],
            services=["service"],
            timeline=["timeline"],
            timeline_topics=[source, target],
        )
        store = ZooKeeperStore(zk, cluster.zk_root)
        with overridden(principal("controller")):  # stream create: the controller's verb
            manager = StreamManager(store, bootstrap, cluster)
            manager.create_scope("roles")
            manager.create(STREAM, StreamConfiguration())
        secured = Secured(bootstrap, zookeeper, store, cluster, source, target, tmp)
        write_events(secured, STREAM, "w0")  # every test finds them, whatever ran before it
        try:
            yield secured
        finally:
            zk.stop()
            zk.close()


def write_events(secured: Secured, stream: str, writer_id: str) -> None:
    """``EVENTS`` events and a mark on ``stream``, as the writer principal."""
    with secured.as_role("writer"):
        writer = EventWriter(
            writer_id,
            stream,
            store=secured.store,
            bootstrap_servers=secured.bootstrap,
            config=WriterConfig(cluster=secured.cluster, linger_ms=1),
        )
        try:
            for i in range(EVENTS):
                writer.write(b"e%d" % i, routing_key=f"k{i}")
            writer.note_time(1_000)
            writer.flush()
        finally:
            writer.close()


def test_the_writer_writes_events_and_marks_and_may_not_read(secured: Secured) -> None:
    write_events(secured, STREAM, "w1")
    with secured.as_role("writer"):
        read, error = consume_all(secured.bootstrap, secured.topic())
        assert read == [] and error is not None, (read, error)
        assert authorization_refused(error), error  # the topic or its group, whichever first
    with secured.as_role("admin"):
        topics = StreamTopics(secured.bootstrap)
        assert sum(topics.end_offsets(secured.topic(), [0]).values()) >= 2 * EVENTS
        assert topics.end_offsets(secured.cluster.marks_topic, [0])[0] >= 1


def test_the_controller_reads_marks_and_creates_streams_and_may_not_write_events(
    secured: Secured,
) -> None:
    with secured.as_role("controller"):
        manager = StreamManager(secured.store, secured.bootstrap, secured.cluster)
        manager.create("roles/created", StreamConfiguration())
        assert StreamTopics(secured.bootstrap).partition_count(
            secured.store.get_stream("roles/created").topic
        )
        _, error = consume_all(secured.bootstrap, secured.cluster.marks_topic)
        assert error is None, error
        assert produce_one(secured.bootstrap, secured.cluster.marks_topic, b"due", b"x") is None
        refused = produce_one(secured.bootstrap, secured.topic(), b"k", b"forged event")
        assert authorization_refused(refused), refused


def test_the_policies_principal_counts_scales_and_truncates_and_may_not_create(
    secured: Secured,
) -> None:
    scaled_stream = "roles/policed"  # scaled and truncated here: no other test reads it
    with secured.as_role("controller"):
        StreamManager(secured.store, secured.bootstrap, secured.cluster).create(
            scaled_stream, StreamConfiguration()
        )
    write_events(secured, scaled_stream, "w2")
    with secured.as_role("policies"):
        manager = StreamManager(secured.store, secured.bootstrap, secured.cluster)
        meta = secured.store.get_stream(scaled_stream)
        active = meta.active_segments()
        sizes = SegmentSizes(secured.bootstrap)
        try:
            held = sizes.measure(meta)  # the policy loop's input: it reads the segments
        finally:
            sizes.close()
        assert sum(b.total for b in held.values()) > 0, held
        scaled = manager.scale(
            scaled_stream, [active[0].id], [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)]
        )
        assert len(scaled.active_segments()) == 2
        truncated = manager.truncate(scaled_stream, {active[0].id: 1})
        assert truncated.truncation is not None
        with pytest.raises(KafkaOperationError, match="AUTHORIZATION"):
            manager.create("roles/not-yours", StreamConfiguration())
        read, error = consume_all(secured.bootstrap, secured.cluster.marks_topic)
        assert read == [] and authorization_refused(error), (read, error)


def test_the_reader_reads_and_commits_and_may_not_write(secured: Secured) -> None:
    with secured.as_role("reader"):
        group = ReaderGroup.create(
            "roles-readers", STREAM, store=secured.store, bootstrap_servers=secured.bootstrap
        )
        try:
            with group.reader("r1") as reader:
                bodies = []
                deadline = time.monotonic() + 60
                while len(bodies) < EVENTS and time.monotonic() < deadline:
                    event = reader.read_next(timeout_ms=1_000)
                    if event is not None:
                        bodies.append(event.body)
                assert len(bodies) >= EVENTS, bodies
        finally:
            group.close()
        refused = produce_one(secured.bootstrap, secured.topic(), b"k", b"reader's event")
        assert authorization_refused(refused), refused


def test_the_service_looks_up_offsets_and_may_not_read_records(secured: Secured) -> None:
    topic = secured.topic()
    with secured.as_role("service"):
        ends = StreamTopics(secured.bootstrap).end_offsets(topic, [0])
        assert sum(ends.values()) >= EVENTS
        consumer = roles.client(
            roles.READER_CONSUMER, secured.bootstrap, {"group.id": "roles-readers"}
        )
        try:
            committed = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        finally:
            consumer.close()
        assert committed[0].error is None, committed
        read, error = consume_all(secured.bootstrap, topic)
        assert read == [] and authorization_refused(error), (read, error)


def relay_all(
    secured: Secured, postgres: str, timeline: str, expect: int, delivery: str = "acked"
) -> int:
    """Run a relay of ``timeline`` to the timeline's target topic until ``expect`` went."""
    relay = timeline_relay(
        postgres,
        secured.bootstrap,
        timeline,
        RelayConfig(secured.target, delivery=delivery),
        ConsumerConfig("r"),
    )
    relayed = 0
    try:
        deadline = time.monotonic() + 60
        while relayed < expect and time.monotonic() < deadline:
            relayed += relay.run_once(timeout_ms=200)
    finally:
        relay.close()
    return relayed


def test_the_timeline_runs_ingest_and_may_not_take_a_writers_transactional_id(
    secured: Secured, postgres: str
) -> None:
    with secured.as_role("admin"):
        for i in range(5):
            assert produce_one(secured.bootstrap, secured.source, b"k%d" % i, b"v%d" % i) is None
    env = {
        **os.environ,
        **principal("timeline"),
        KAFKA_BOOTSTRAP: secured.bootstrap,
        ZK_CONNECT: secured.zk_connect,
        POSTGRES_DSN: postgres,
    }
    argv = [sys.executable, "-c", "from tidemark.cli.main import main; main()"]
    argv += ["timeline", "ingest", "--from", secured.source, "--to", secured.target]
    argv += ["--delay", "0s", "--duration-s", "20", "--format", "json"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"relayed": 5' in done.stdout, (done.stdout, done.stderr[-2000:])
    # a principal without the timeline role: its relay is refused the buffer's transactions
    with secured.as_role("reader"), pytest.raises(KafkaOperationError, match="transactional id"):
        BufferRelay(
            postgres,
            secured.bootstrap,
            BufferConfig(secured.source, secured.target, DueRule(delay_ms=0)),
        )
    # the relay, as the timeline principal: its transactional id (tidemark-relay.<name>)
    timeline = f"roles-{time.time_ns()}"
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(timeline, buckets=1))
        now = store.now_ms()
        due = [NewMessage(b"due %d" % i, now, "app", f"r{i}") for i in range(3)]
        store.create_many(timeline, due)
    with secured.as_role("timeline"):
        assert relay_all(secured, postgres, timeline, len(due)) == len(due)
    with secured.as_role("admin"):
        values, error = consume_all(secured.bootstrap, secured.target)
    assert error is None and {m.body for m in due} <= set(values), values
    with secured.as_role("reader"), pytest.raises(KafkaOperationError, match="target topic"):
        relay_all(secured, postgres, timeline, 1)
    with secured.as_role("reader"), pytest.raises(KafkaOperationError, match="transactional id"):
        relay_all(secured, postgres, timeline, 1, delivery="transactional")
    with secured.as_role("timeline"):
        refused = produce_one(secured.bootstrap, secured.topic(), b"k", b"timeline's event")
        assert authorization_refused(refused), refused
        producer = roles.client(
            roles.BUFFER_PRODUCER,
            secured.bootstrap,
            {"transactional.id": transactional_id_for(STREAM, "w1")},
        )
        with pytest.raises(KafkaException) as caught:
            producer.init_transactions(30)
        assert authorization_refused(caught.value.args[0]), caught.value
