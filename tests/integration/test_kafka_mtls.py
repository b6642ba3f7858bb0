"""Kafka with mutual TLS: a broker whose listeners take only clients with a certificate of
a CA made for the run (``ssl.client.auth=required``), each principal named by its
certificate (``User:CN=<name>``) and given its role's ACLs.

Tidemark's clients present their certificate through each path a user has: ``-X`` on the
command line (PEM files), ``tidemark.connect`` (``ConnectionConfig.kafka_properties``)
and the environment (a PKCS#12 keystore, read by librdkafka and, through the Java
properties tidemark derives, by Spark's Kafka source), as principals that are not super
users and act through their role's ACLs; Spark's source reads PEM files too, as their
contents. A client without a certificate is refused within the service time-out; one
whose certificate names a principal without ACLs is let in and refused each verb."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import tidemark
from tests.faults.test_kafka_security import (
    authorization_refused,
    consume_all,
    produce_one,
    wait_described,
)
from tidemark.cli.main import main
from tidemark.cli.service_errors import EXIT_UNAVAILABLE
from tidemark.controller.config import StreamConfiguration
from tidemark.controller.kafka.acls import grant_tidemark_acls
from tidemark.controller.kafka.admin import StreamTopics, ensure_marks_topic
from tidemark.controller.kafka.settings import SECURITY_PROTOCOL, spark_source_options
from tidemark.controller.naming import ClusterSettings, topic_for
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.session import zookeeper_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import (
    KAFKA_BOOTSTRAP,
    KAFKA_PROPERTIES,
    SERVICE_TIMEOUT_MS,
    ZK_CONNECT,
    overridden,
)
from tidemark.infra.kafka import KafkaCluster
from tidemark.infra.tls import PrivateCA
from tidemark.pipelines.connection import ConnectionConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVENTS = 5
KEYSTORE_PASSWORD = "reader-store-pw"


@dataclass(frozen=True)
class Mutual:
    bootstrap: str
    zk_connect: str
    ca: PrivateCA
    scope: str
    stream: str
    """A stream the admin made, with ``EVENTS`` events the writer wrote."""

    def pem(self, name: str | None) -> dict[str, str]:
        """Client properties that present ``name``'s PEM certificate (``None``: none)."""
        properties = {"security.protocol": "SSL", "ssl.ca.location": str(self.ca.cert)}
        if name is not None:
            issued = self.ca.issue_client(name)
            properties["ssl.certificate.location"] = str(issued.cert)
            properties["ssl.key.location"] = str(issued.key)
        return properties

    def x_flags(self, name: str | None) -> list[str]:
        """``pem(name)`` as ``tidemark -X`` flags."""
        return [f for k, v in self.pem(name).items() for f in ("-X", f"{k}={v}")]

    def pem_environment(self, name: str) -> dict[str, str]:
        """The environment of a process running as ``name`` with its PEM files."""
        return {SECURITY_PROTOCOL: "SSL", KAFKA_PROPERTIES: json.dumps(self.pem(name))}

    def environment(self, name: str) -> dict[str, str]:
        """The environment of a process running as ``name``: ``SSL`` and its certificate
        in a PKCS#12 keystore."""
        keystore = self.ca.client_pkcs12(name, KEYSTORE_PASSWORD)
        properties = {
            "ssl.ca.location": str(self.ca.cert),
            "ssl.keystore.location": str(keystore),
            "ssl.keystore.password": KEYSTORE_PASSWORD,
        }
        return {SECURITY_PROTOCOL: "SSL", KAFKA_PROPERTIES: json.dumps(properties)}


def as_principal(mutual: Mutual, name: str) -> Any:
    """Clients built inside the block present ``name``'s certificate (from the
    environment, as a process run as ``name`` would)."""
    return overridden(mutual.environment(name))


@pytest.fixture(scope="module")
def mutual(tmp_path_factory: pytest.TempPathFactory, zookeeper: str) -> Iterator[Mutual]:
    tmp = tmp_path_factory.mktemp("mtls")
    ca = PrivateCA.create(tmp / "tls")
    with KafkaCluster(tmp / "kafka", tls=ca, client_auth=True) as kafka:
        assert kafka.protocol == "SSL"
        bootstrap = kafka.bootstrap_servers
        cluster = ClusterSettings()
        scope = f"mtls{uuid.uuid4().hex[:10]}"
        mutual = Mutual(bootstrap, zookeeper, ca, scope, f"{scope}/events")
        with as_principal(mutual, "admin"), zookeeper_session(zookeeper) as zk:
            ensure_marks_topic(bootstrap, cluster)
            manager = StreamManager(ZooKeeperStore(zk, cluster.zk_root), bootstrap, cluster)
            manager.create_scope(scope)
            manager.create(mutual.stream, StreamConfiguration())
        grant_tidemark_acls(
            kafka.client_config("admin"),
            cluster.marks_topic,
            writers=["CN=writer"],
            controllers=[],
            readers=["CN=reader"],
        )
        for name in ("writer", "reader"):  # the ACLs reach the broker through its metadata
            with as_principal(mutual, name):
                wait_described(bootstrap, topic_for(mutual.stream))
        with (
            as_principal(mutual, "writer"),
            tidemark.connect(kafka_bootstrap=bootstrap, zk_connect=zookeeper) as tm,
            tm.writer("fixture", mutual.stream) as writer,
        ):
            for i in range(EVENTS):
                writer.write(b"event-%d" % i, routing_key="k", timestamp=1_000 + i)
            writer.note_time(1_000 + EVENTS)
        yield mutual


@pytest.fixture
def services(mutual: Mutual, monkeypatch: pytest.MonkeyPatch) -> Mutual:
    """The command line's services, and a short wait for one that does not answer."""
    monkeypatch.setenv(KAFKA_BOOTSTRAP, mutual.bootstrap)
    monkeypatch.setenv(ZK_CONNECT, mutual.zk_connect)
    monkeypatch.setenv(SERVICE_TIMEOUT_MS, "4000")
    return mutual


def end_offset(mutual: Mutual, topic: str) -> int:
    with as_principal(mutual, "admin"):
        topics = StreamTopics(mutual.bootstrap)
        partitions = list(range(topics.partition_count(topic) or 0))
        return sum(topics.end_offsets(topic, partitions).values())


def spark_values(spark: Any, options: dict[str, str], mutual: Mutual) -> set[bytes]:
    """The values of the stream's topic, read by Spark's Kafka source with ``options``."""
    frame = (
        spark.read.format("kafka")
        .options(**options)
        .option("subscribe", topic_for(mutual.stream))
        .load()
    )
    return {bytes(row.value) for row in frame.select("value").collect()}


def test_the_command_line_presents_a_client_certificate_given_with_x(
    services: Mutual, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = f"{services.scope}/cli{unique}"
    capsys.readouterr()
    assert main([*services.x_flags(None), "stream", "create", stream]) == EXIT_UNAVAILABLE
    refused = capsys.readouterr().err
    # refused within the service time-out, not a hang, naming the refused handshake
    assert "Kafka is unavailable" in refused, refused
    assert "its last error:" in refused and "bad certificate" in refused, refused

    assert main([*services.x_flags("admin"), "stream", "create", stream]) == 0
    marks = end_offset(services, ClusterSettings().marks_topic)
    writer = [*services.x_flags("writer"), "write", stream, "e1", "e2", "--note-time", "2000"]
    assert main(writer) == 0
    assert end_offset(services, topic_for(stream)) == 2
    assert end_offset(services, ClusterSettings().marks_topic) > marks


def test_the_python_config_presents_a_client_certificate(mutual: Mutual) -> None:
    topic, marks = topic_for(mutual.stream), ClusterSettings().marks_topic
    events, noted = end_offset(mutual, topic), end_offset(mutual, marks)
    config = ConnectionConfig(
        mutual.bootstrap, mutual.zk_connect, kafka_properties=mutual.pem("writer")
    )
    with tidemark.connect(config=config) as tm, tm.writer("api", mutual.stream) as writer:
        writer.write(b"from-the-api", routing_key="k", timestamp=3_000)
        writer.note_time(3_000)
    assert end_offset(mutual, topic) == events + 1
    assert end_offset(mutual, marks) > noted


def test_the_environment_s_keystore_reads_with_the_command_line_and_spark(
    services: Mutual, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with as_principal(services, "reader"):
        capsys.readouterr()
        assert main(["read", services.stream, "--count", str(EVENTS)]) == 0
        out = capsys.readouterr().out
        assert all(f"event-{i}" in out for i in range(EVENTS)), out

        options = spark_source_options(services.bootstrap)
        assert options["kafka.ssl.keystore.location"].endswith("client-reader.p12")
        values = spark_values(spark, options, services)
    assert {b"event-%d" % i for i in range(EVENTS)} <= values


def test_the_environment_s_pem_files_read_with_spark(services: Mutual, spark: Any) -> None:
    """Java reads no PEM certificate and key files: Spark's options carry their contents,
    and its Kafka source reads as the reader."""
    with overridden(services.pem_environment("reader")):
        options = spark_source_options(services.bootstrap)
        assert options["kafka.ssl.keystore.type"] == "PEM"
        assert "BEGIN CERTIFICATE" in options["kafka.ssl.keystore.certificate.chain"]
        values = spark_values(spark, options, services)
    assert {b"event-%d" % i for i in range(EVENTS)} <= values


def test_a_certificate_without_acls_is_let_in_and_refused_each_verb(
    services: Mutual, capsys: pytest.CaptureFixture[str]
) -> None:
    """A certificate of the run's CA whose principal (``CN=stranger``) has no ACLs passes
    the handshake and is refused by authorization, not by TLS: it may write neither
    events nor marks, nor read events."""
    topic, marks = topic_for(services.stream), ClusterSettings().marks_topic
    before = end_offset(services, topic), end_offset(services, marks)
    with as_principal(services, "stranger"):
        for target in (topic, marks):
            refused = produce_one(services.bootstrap, target, b"k", b"forged")
            assert authorization_refused(refused), (target, refused)
        read, error = consume_all(services.bootstrap, topic)
        assert read == [] and authorization_refused(error), (read, error)
    capsys.readouterr()
    flags = services.x_flags("stranger")
    assert main([*flags, "write", services.stream, "e1", "--note-time", "9000"]) != 0
    said = capsys.readouterr().err
    assert "bad certificate" not in said and "authoriz" in said.lower(), said
    assert (end_offset(services, topic), end_offset(services, marks)) == before
