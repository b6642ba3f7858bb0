"""The JVM interceptor with real Java clients: the guide's producer, compiled and run.

A plain Java program (``OrdersProducer``, the guide's snippet, with the
guide's properties) writes a topic adopted as a stream, with
``interceptor.classes`` set to tidemark's interceptor. Its marks, read back
from the marks topic and decoded by ``tidemark.schemas``, are the protocol's
bytes; folded as the controller folds them (and stored in Delta) they make
watermarks whose seeks are exact and whose complete windows miss nothing.
The mark-protocol conformance cases run against the real controller job: the
interceptor's marks are accepted, a restart under the same writer id is heard
(after a close, and after ``kill -9`` at once, by the instance's registration),
a forged mark under that id is refused as ``impersonated``. With ZooKeeper digest
credentials its writer id belongs to that principal, as a Python writer's does.
"""

# ruff: noqa: F811  (the fixtures imported from test_dropin_producer are redefined as arguments)
from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.controller_env import Env
from tests.faults.figures import report
from tests.integration.test_controller_job import wait_for
from tests.integration.test_dropin_producer import (  # noqa: F401 (fixtures)
    cluster,
    make_topic,
    manager,
    records,
    store,
)
from tests.integration.test_seek_ahead import fold
from tests.integration.test_writer_principals import (  # noqa: F401 (fixtures)
    ROOT,
    S,
    connect,
    sessions,
)
from tests.jvm_clients import (
    assert_seeks_exact,
    client_classpath,
    compile_java,
    properties,
    run_java,
    snippet,
)
from tidemark.controller.exceptions import WriterIdOwnedError
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.naming import ClusterSettings, bucket_of, writer_node_name
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import KAFKA_PROPERTIES, ZK_AUTH
from tidemark.infra.kafka import SCRAM, KafkaCluster, KafkaSecurity
from tidemark.infra.tls import PrivateCA
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.tables import REJECTED_MARKS, Reason, read_table, read_watermarks
from tidemark.pipelines.writing.partitioners import kafka_partition
from tidemark.schemas.records import WriterMarkRecord

pytestmark = [pytest.mark.integration]

PARTITIONS = 3
V2_HEADER = bytes.fromhex("c301066b40372471b44f")


@pytest.fixture(scope="module")
def orders_producer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guide's Java producer, compiled against kafka-clients and the interceptor."""
    return compile_java(tmp_path_factory.mktemp("java"), snippet("OrdersProducer.java"))


def producer_settings(
    path: Path,
    kafka: str,
    zk_connect: str,
    stream: str,
    cluster: ClusterSettings,
    writer: str = "orders-1",
    **more: str,
) -> Path:
    """The guide's properties, pointed at the test's services."""
    text = properties(
        snippet("producer.properties"),
        bootstrap__servers=kafka,
        client__id=writer,
        tidemark__stream=stream,
        tidemark__zookeeper__connect=zk_connect,
        tidemark__marks__topic=cluster.marks_topic,
        tidemark__bucket__count=str(cluster.bucket_count),
        tidemark__note__interval__ms="100",
        **more,
    )
    path.write_text(text)
    return path


def adopted(
    kafka: str, manager: StreamManager, unique: str, name: str = "orders"
) -> tuple[str, str]:
    scope, topic = f"j{unique}", f"legacy-{name}-{unique}"
    make_topic(kafka, topic, PARTITIONS)
    manager.create_scope(scope)
    stream = f"{scope}/{name}"
    manager.adopt(stream, topic)
    return stream, topic


def end_of(events: list[tuple[int, int, Any, Any, int]]) -> dict[int, int]:
    """Each partition's next offset after the events (0 for one without any)."""
    ends = dict.fromkeys(range(PARTITIONS), 0)
    for p, off, *_ in events:
        ends[p] = max(ends[p], off + 1)
    return ends


def full(cut: Any) -> dict[int, int]:
    """A cut (or position) over every partition (0 where it names none)."""
    return {p: dict(cut).get(p, 0) for p in range(PARTITIONS)}


def raw_marks(kafka: str, cluster: ClusterSettings, stream: str) -> list[bytes]:
    """The values keyed by ``stream`` on its bucket of the marks topic, in offset order (the
    controller job's own records there have keys of their own)."""
    part = bucket_of(stream, cluster.bucket_count)
    return [
        value
        for p, _, key, value, _ in records(kafka, cluster.marks_topic, cluster.bucket_count)
        if p == part and key == stream.encode()
    ]


def test_a_java_producer_with_the_interceptor_gets_exact_watermarks(
    kafka: str,
    zookeeper: str,
    manager: StreamManager,
    store: Any,
    cluster: ClusterSettings,
    unique: str,
    tmp_path: Path,
    orders_producer: Path,
) -> None:
    stream, topic = adopted(kafka, manager, unique)
    props = producer_settings(
        tmp_path / "producer.properties",
        kafka,
        f"{zookeeper}/tidemark-test-{unique}",
        stream,
        cluster,
    )
    count = 1_000
    run_java(orders_producer, "OrdersProducer", str(props), topic, str(count))

    events = records(kafka, topic, PARTITIONS)
    assert sorted(v for *_, v, _ in events) == sorted(f"event-{i}".encode() for i in range(count))
    for p, _, key, _, _ in events:  # where Kafka's default partitioner puts them
        assert p == kafka_partition("murmur2", key, PARTITIONS), key
    for p in range(PARTITIONS):  # the stream's monotonic rule, per segment
        stamps = [ts for q, _, _, _, ts in events if q == p]
        assert stamps == sorted(stamps)

    raws = raw_marks(kafka, cluster, stream)
    marks = [WriterMarkRecord.decode(raw) for raw in raws]
    assert all(raw[:10] == V2_HEADER for raw in raws)
    assert [m.encode() for m in marks] == raws  # tidemark's own encoding, byte for byte
    assert len(marks) >= 3
    assert {m.writer_id for m in marks} == {"orders-1"}
    (instance,) = {m.instance for m in marks}
    assert instance is not None and re.fullmatch("[0-9a-f]{32}", instance)
    assert [m.time for m in marks] == sorted(m.time for m in marks)
    assert [m.alive for m in marks] == [True] * (len(marks) - 1) + [False]
    top = max(ts for *_, ts in events)
    assert marks[-1].max_event_time == top and marks[-1].time >= top
    ends = end_of(events)
    assert full(marks[-1].position) == ends and 0 not in dict(marks[-1].position).values()

    root = str(tmp_path / "delta")
    watermarks = fold(stream, store, root, [[m] for m in marks])
    assert len(watermarks) >= 2
    assert full(watermarks[-1].stream_cut) == ends  # every event lies before the last cut
    assert_seeks_exact(
        stream, [(p, off, ts) for p, off, _, _, ts in events], watermarks, root, store
    )


def test_the_interceptor_refuses_streams_it_cannot_write(
    kafka: str,
    zookeeper: str,
    manager: StreamManager,
    cluster: ClusterSettings,
    unique: str,
    tmp_path: Path,
    orders_producer: Path,
) -> None:
    """An unknown stream, and a stream tidemark routes (it can scale): the producer is not
    made, and the error says why and what to do."""
    _, topic = adopted(kafka, manager, unique)
    routed = f"j{unique}/routed"
    make_topic(kafka, f"routed-{unique}", PARTITIONS)
    manager.adopt(routed, f"routed-{unique}", tidemark_routing=True)
    zk_connect = f"{zookeeper}/tidemark-test-{unique}"
    for name, why in (
        (f"j{unique}/missing", "no such stream in tidemark's metadata"),
        (routed, "tidemark routes this stream"),
    ):
        props = producer_settings(tmp_path / "p.properties", kafka, zk_connect, name, cluster)
        done = run_java(orders_producer, "OrdersProducer", str(props), topic, "1", fails=True)
        assert why in done.stderr, done.stderr
        assert "create or adopt it first" in done.stderr or "adopt a topic" in done.stderr
    assert records(kafka, topic, PARTITIONS) == []


LOG4J_LEVEL = "org.apache.logging.log4j.level"
"""The level of log4j's default configuration (the client classpath's logger; ERROR unset)."""


def test_the_interceptor_s_writer_id_belongs_to_its_zookeeper_principal(
    kafka: str,
    connect: str,
    sessions: Any,
    manager: StreamManager,
    cluster: ClusterSettings,
    unique: str,
    tmp_path: Path,
    orders_producer: Path,
) -> None:
    """ZooKeeper digest credentials from ``tidemark.zookeeper.auth``, then (a restart) from
    ``$TIDEMARK_ZK_AUTH``: the writer id's znode and registrations have the ACL a Python
    writer of that principal gives its own; another principal can neither register under
    the id (Python: ``WriterIdOwnedError``; the interceptor: refused, naming the id); an
    anonymous session (the controller's) reads the registrations, holding the tokens the
    interceptor's marks carry. No password is in the producers' output, logged at INFO."""
    topic = f"legacy-orders-{unique}"
    make_topic(kafka, topic, PARTITIONS)
    manager.create_scope(S.split("/")[0])
    manager.adopt(S, topic)
    alice, bob, anyone = (ZooKeeperStore(sessions[u], ROOT) for u in ("alice", "bob", None))
    passwords = ("alice-secret", "bob-secret")
    owned = producer_settings(
        tmp_path / "owned.properties", kafka, connect, S, cluster,
        tidemark__zookeeper__auth="alice:alice-secret",
    )  # fmt: skip
    plain = producer_settings(tmp_path / "plain.properties", kafka, connect, S, cluster)
    logged = {**os.environ, "JAVA_TOOL_OPTIONS": f"-D{LOG4J_LEVEL}=INFO"}
    runs = [
        run_java(orders_producer, "OrdersProducer", str(owned), topic, "200", env=logged),
        run_java(
            orders_producer, "OrdersProducer", str(plain), topic, "200",
            env={**logged, ZK_AUTH: "alice:alice-secret"},
        ),
    ]  # fmt: skip
    assert all("registered as ZooKeeper principal alice" in r.stdout for r in runs)

    # the ACLs: as alice's Python writer makes them (all rights for alice, reading for anyone)
    assert alice.register_writer(S, "python-1", "p1")
    java_node, python_node = (
        f"{ROOT}/streams/{S}/writers/{writer_node_name(w)}" for w in ("orders-1", "python-1")
    )
    zk = sessions[None]
    (python_acl,) = {
        tuple(zk.get_acls(f"{python_node}/{r}")[0]) for r in zk.get_children(python_node)
    }
    assert tuple(zk.get_acls(python_node)[0]) == python_acl and len(python_acl) == 2
    registrations = zk.get_children(java_node)
    assert len(registrations) == 2
    for node in (java_node, *(f"{java_node}/{r}" for r in registrations)):
        assert tuple(zk.get_acls(node)[0]) == python_acl, node

    # bob: refused in Python and in the interceptor
    with pytest.raises(WriterIdOwnedError, match="'orders-1' of stream 'shop/orders'"):
        bob.register_writer(S, "orders-1", "b1")
    bobs = producer_settings(
        tmp_path / "bob.properties", kafka, connect, S, cluster,
        tidemark__zookeeper__auth="bob:bob-secret",
    )  # fmt: skip
    refused = run_java(
        orders_producer, "OrdersProducer", str(bobs), topic, "1", env=logged, fails=True
    )
    assert "writer id 'orders-1' of stream 'shop/orders' is registered by another" in (
        refused.stderr
    )
    for done in (*runs, refused):
        assert not [p for p in passwords if p in done.stdout + done.stderr]

    # the controller's lookup (anonymous) reads both runs' registrations: the tokens its
    # marks carry
    tokens = list(
        dict.fromkeys(
            m.instance for m in map(WriterMarkRecord.decode, raw_marks(kafka, cluster, S))
        )
    )
    assert [r.instance for r in anyone.writer_registrations(S, "orders-1")] == tokens


@pytest.mark.spark
@pytest.mark.slow
def test_the_controller_hears_a_restarted_java_producer_and_refuses_a_forgery(
    spark: Any, controller_env: Env, tmp_path: Path, orders_producer: Path, unique: str
) -> None:
    """The conformance cases of ``test_mark_protocol`` with the interceptor as the writer: its
    marks make watermarks in the real controller; a second run under the same writer id
    (after the first one's shutdown mark) is heard at once; a mark forged under that id while
    the second run lives, with another token, is refused as ``impersonated``, raw bytes kept."""
    env = controller_env
    stream, topic = adopted(env.kafka, env.manager, unique)
    props = producer_settings(
        tmp_path / "p.properties", env.kafka, env.zk_connect, stream, env.cluster
    )
    settings = env.settings()
    job = ControllerJob(spark, settings, f"c-{unique}").start()
    forged = b""
    try:
        job.wait_leading()  # it made the marks topic
        run_java(orders_producer, "OrdersProducer", str(props), topic, "300")
        (first,) = {
            m.instance
            for m in map(WriterMarkRecord.decode, raw_marks(env.kafka, env.cluster, stream))
        }
        second = subprocess.Popen(java_argv(orders_producer, str(props), topic, "3000"))
        try:
            deadline = time.monotonic() + 60
            while True:  # the second run's first mark: it holds the id now
                heard = [
                    m
                    for m in map(WriterMarkRecord.decode, raw_marks(env.kafka, env.cluster, stream))
                    if m.instance != first
                ]
                if heard:
                    break
                assert time.monotonic() < deadline and second.poll() is None
                time.sleep(0.05)
            forged = WriterMarkRecord(
                stream, "orders-1", heard[-1].time, {}, True, instance=secrets.token_hex(16)
            ).encode()
            marks_producer = Producer({"bootstrap.servers": env.kafka})
            marks_producer.produce(
                env.cluster.marks_topic,
                forged,
                stream.encode(),
                partition=bucket_of(stream, env.cluster.bucket_count),
            )
            assert marks_producer.flush(30) == 0
            assert second.wait(120) == 0
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
        events = records(env.kafka, topic, PARTITIONS)
        ends = end_of(events)
        deadline = time.monotonic() + 90
        while True:
            job.process_all_available()
            got = read_watermarks(settings.delta_root, stream)
            if got and full(got[-1].stream_cut) == ends:
                break
            assert time.monotonic() < deadline, [dict(w.stream_cut) for w in got]
            time.sleep(0.3)
    finally:
        job.stop()
    assert len(events) == 3_300
    rejected = read_table(settings.delta_root, REJECTED_MARKS)
    assert [(r["stream"], r["writer"], r["reason"]) for r in rejected] == [
        (stream, "orders-1", "impersonated")
    ]
    assert bytes(rejected[0]["raw"]) == forged
    assert [w.time for w in got] == sorted(w.time for w in got)


@pytest.mark.spark
@pytest.mark.slow
def test_a_java_producer_killed_and_restarted_under_its_id_is_heard_at_once(
    spark: Any, controller_env: Env, tmp_path: Path, orders_producer: Path, unique: str
) -> None:
    """``kill -9`` (no shutdown mark) and a new run under the same writer id, with a writer
    timeout of ten minutes: the new run registered its instance, so the stream's next
    watermark comes within seconds and no mark is refused. Both runs' registrations are
    read back as the controller reads them, with the tokens their marks carry."""
    env = controller_env
    stream, topic = adopted(env.kafka, env.manager, unique)
    props = producer_settings(
        tmp_path / "p.properties", env.kafka, env.zk_connect, stream, env.cluster
    )
    settings = env.settings(writer_timeout_ms=600_000)
    job = ControllerJob(spark, settings, f"c-{unique}").start()
    runs: list[subprocess.Popen[bytes]] = []
    try:
        job.wait_leading()
        runs.append(subprocess.Popen(java_argv(orders_producer, str(props), topic, "10000000")))
        wait_for(lambda: len(read_watermarks(settings.delta_root, stream)) >= 3, job, 120)
        runs[0].kill()  # SIGKILL
        runs[0].wait()
        job.process_all_available()
        before = len(read_watermarks(settings.delta_root, stream))
        restarted_at = time.monotonic()
        runs.append(subprocess.Popen(java_argv(orders_producer, str(props), topic, "10000000")))
        wait_for(lambda: len(read_watermarks(settings.delta_root, stream)) > before, job, 120)
        heard_s = time.monotonic() - restarted_at
        report(
            "java-producer-restart",
            f"kill -9, restart (JVM start included) -> next watermark {heard_s:.1f} s "
            "(writer timeout 600 s)",
        )
        assert heard_s < 60, heard_s
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
            run.wait()
        job.stop()
    rejected = read_table(settings.delta_root, REJECTED_MARKS)
    assert [r for r in rejected if r["reason"] in (Reason.IMPERSONATED, Reason.SUPERSEDED)] == []
    tokens = []
    for m in map(WriterMarkRecord.decode, raw_marks(env.kafka, env.cluster, stream)):
        if m.instance not in tokens:
            tokens.append(m.instance)
    registered = env.store.writer_registrations(stream, "orders-1")
    assert [r.instance for r in registered] == tokens and len(tokens) == 2


def java_argv(classes: Path, *args: str) -> list[str]:
    return [
        "java",
        "-Xmx256m",
        "-cp",
        ":".join([str(classes), *client_classpath()]),
        "OrdersProducer",
        *args,
    ]


@pytest.mark.slow
def test_the_java_producer_against_secured_brokers(
    zookeeper: str,
    zk_client: Any,
    unique: str,
    tmp_path: Path,
    orders_producer: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SASL/SCRAM over TLS (a CA made for the run), as deployed: the interceptor's marks
    producer (and its marks-topic and previous-instance clients) connect with the
    application producer's own settings, its CA as a PEM truststore."""
    cluster = ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=2)
    ca = PrivateCA.create(tmp_path / "tls")
    with KafkaCluster(tmp_path / "kafka", security=KafkaSecurity("admin-pw"), tls=ca) as kafka:
        admin = kafka.client_config("admin")
        for key, value in admin.items():  # tidemark's own clients, as an operator sets them
            if key not in ("bootstrap.servers", "ssl.ca.location"):
                monkeypatch.setenv("TIDEMARK_KAFKA_" + key.upper().replace(".", "_"), value)
        monkeypatch.setenv(KAFKA_PROPERTIES, json.dumps({"ssl.ca.location": str(ca.cert)}))
        store = ZooKeeperStore(zk_client, "/tidemark")
        manager = StreamManager(store, kafka.bootstrap_servers, cluster)
        scope, topic = f"s{unique}", f"secured-{unique}"
        StreamTopics(kafka.bootstrap_servers).create(topic, PARTITIONS, {})
        manager.create_scope(scope)
        stream = f"{scope}/orders"
        manager.adopt(stream, topic)
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="admin" password="admin-pw";'
        )
        props = producer_settings(
            tmp_path / "producer.properties",
            kafka.bootstrap_servers,
            f"{zookeeper}/tidemark-test-{unique}",
            stream,
            cluster,
            security__protocol=kafka.protocol,
            sasl__mechanism=SCRAM,
            sasl__jaas__config=jaas,
            ssl__truststore__type="PEM",
            ssl__truststore__location=str(ca.cert),
        )
        run_java(orders_producer, "OrdersProducer", str(props), topic, "200")
        events = records(admin, topic, PARTITIONS)
        marks = [
            WriterMarkRecord.decode(v)
            for p, _, k, v, _ in records(admin, cluster.marks_topic, cluster.bucket_count)
            if p == bucket_of(stream, cluster.bucket_count) and k == stream.encode()
        ]
    assert len(events) == 200
    assert marks and marks[-1].alive is False
    assert full(marks[-1].position) == end_of(events)
