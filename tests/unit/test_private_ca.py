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


def test_zookeeper_sessions_verify_the_server_when_a_ca_is_given() -> None:
    assert tls_options({}) == {}
    assert tls_options({ZK_TLS_CA: "/run/ca.pem"}) == {
        "use_ssl": True,
        "ca": "/run/ca.pem",
        "verify_certs": True,
        "check_hostname": True,
    }
