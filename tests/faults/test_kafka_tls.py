"""Kafka over SASL_SSL with a private CA made for the run, configured through each path a
user has: ``-X`` on the command line, ``tidemark.connect(kafka_properties=...)`` and the
environment. Without the CA the broker's certificate is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tidemark
from tidemark.cli.main import main
from tidemark.cli.service_errors import EXIT_UNAVAILABLE
from tidemark.environment import (
    KAFKA_BOOTSTRAP,
    KAFKA_PROPERTIES,
    KAFKA_SASL_PASSWORD,
    KAFKA_SASL_USERNAME,
    KAFKA_SECURITY_PROTOCOL,
    SERVICE_TIMEOUT_MS,
    ZK_CONNECT,
)
from tidemark.infra.kafka import KafkaCluster, KafkaSecurity
from tidemark.infra.tls import PrivateCA

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

PRINCIPAL = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.username=admin"]


def test_sasl_ssl_with_a_private_ca_from_every_configuration_path(
    tmp_path: Path,
    zookeeper: str,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ca = PrivateCA.create(tmp_path / "tls")
    with KafkaCluster(tmp_path / "kafka", security=KafkaSecurity("admin-pw"), tls=ca) as kafka:
        assert kafka.protocol == "SASL_SSL"
        monkeypatch.setenv(KAFKA_BOOTSTRAP, kafka.bootstrap_servers)
        monkeypatch.setenv(ZK_CONNECT, zookeeper)
        monkeypatch.setenv(SERVICE_TIMEOUT_MS, "4000")
        principal = [*PRINCIPAL, "-X", "sasl.password=admin-pw"]
        scope, stream = f"tls{unique}", f"tls{unique}/events"
        assert main(["scope", "create", scope]) == 0
        capsys.readouterr()

        # the command line: without the CA the handshake fails, with it the stream is made
        assert main([*principal, "stream", "create", stream]) == EXIT_UNAVAILABLE
        assert "Kafka is unavailable" in capsys.readouterr().err
        trusted = [*principal, "-X", f"ssl.ca.location={ca.cert}"]
        assert main([*trusted, "stream", "create", stream]) == 0

        # the Python config: a writer's clients (its producer, its admin) over TLS
        monkeypatch.setenv(KAFKA_SECURITY_PROTOCOL, "SASL_SSL")
        monkeypatch.setenv(KAFKA_SASL_USERNAME, "admin")
        monkeypatch.setenv(KAFKA_SASL_PASSWORD, "admin-pw")
        tls = {"ssl.ca.location": str(ca.cert)}
        with tidemark.connect(kafka_properties=tls) as tm, tm.writer("w1", stream) as writer:
            writer.write(b"over-tls", routing_key="k", timestamp=1_000)
            writer.note_time(1_000)

        # the environment: a reader reads it back
        monkeypatch.setenv(KAFKA_PROPERTIES, json.dumps({"ssl.ca.location": str(ca.cert)}))
        capsys.readouterr()
        assert main(["read", stream, "--count", "1"]) == 0
        assert "over-tls" in capsys.readouterr().out
