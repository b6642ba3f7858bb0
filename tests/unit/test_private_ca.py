"""The private CA a test run makes (openssl), and the TLS settings tidemark's ZooKeeper
sessions take from the environment (no service)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tidemark.controller.zookeeper.session import tls_options
from tidemark.environment import ZK_TLS_CA
from tidemark.infra.tls import PrivateCA

pytestmark = pytest.mark.unit


def test_a_server_certificate_chains_to_the_ca_and_names_the_local_host(tmp_path: Path) -> None:
    ca = PrivateCA.create(tmp_path / "tls")
    issued = ca.issue("kafka")
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca.cert), str(issued.cert)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stderr
    text = subprocess.run(
        ["openssl", "x509", "-in", str(issued.cert), "-noout", "-text"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text
    assert issued.keystore.read_text() == issued.key.read_text() + issued.cert.read_text()
    again = PrivateCA.create(tmp_path / "tls")  # one CA per run: made once
    assert again.cert.read_bytes() == ca.cert.read_bytes()
    assert again.issue("kafka") == issued


def test_a_client_certificate_names_its_principal_and_serves_clients_only(
    tmp_path: Path,
) -> None:
    ca = PrivateCA.create(tmp_path / "tls")
    client = ca.issue_client("writer")
    for purpose, verdict in (("sslclient", 0), ("sslserver", 2)):
        verified = subprocess.run(
            ["openssl", "verify", "-CAfile", str(ca.cert), "-purpose", purpose, str(client.cert)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert verified.returncode == verdict, (purpose, verified.stdout, verified.stderr)
    subject = subprocess.run(
        ["openssl", "x509", "-in", str(client.cert), "-noout", "-subject", "-nameopt", "RFC2253"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert subject.strip() == "subject=CN=writer"
    assert client != ca.issue("writer")  # a server of the same name has its own files
    assert ca.issue_client("writer") == client
    keystore = ca.client_pkcs12("writer", "store-pw")
    listed = subprocess.run(
        ["openssl", "pkcs12", "-in", str(keystore), "-nokeys", "-passin", "pass:store-pw"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert client.cert.read_text().strip() in listed.stdout


def test_zookeeper_sessions_verify_the_server_when_a_ca_is_given() -> None:
    assert tls_options({}) == {}
    assert tls_options({ZK_TLS_CA: "/run/ca.pem"}) == {
        "use_ssl": True,
        "ca": "/run/ca.pem",
        "verify_certs": True,
        "check_hostname": True,
    }
