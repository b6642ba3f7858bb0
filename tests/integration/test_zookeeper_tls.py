"""ZooKeeper's secure client port with a certificate of a CA made for the run: tidemark's
sessions (``$TIDEMARK_ZK_TLS_CA``) verify it and work; a session in clear on that port,
or one trusting another CA, is never established."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.cli.main import main
from tidemark.controller.exceptions import ZooKeeperUnavailableError
from tidemark.controller.zookeeper.session import zookeeper_session
from tidemark.environment import ZK_TLS_CA
from tidemark.infra.tls import PrivateCA
from tidemark.infra.zookeeper import ZooKeeperServer


def test_sessions_verify_the_secure_port_s_certificate(
    tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, other = PrivateCA.create(tmp_path / "tls"), PrivateCA.create(tmp_path / "other")
    with ZooKeeperServer(tmp_path / "zk", tls=ca) as zk:
        assert zk.connect_string.endswith(f":{zk.secure_port}")
        monkeypatch.setenv(ZK_TLS_CA, str(ca.cert))
        with zookeeper_session(zk.connect_string) as client:
            client.create(f"/tls-{unique}", b"over-tls", makepath=True)
            assert client.get(f"/tls-{unique}")[0] == b"over-tls"
        assert main(["--zk", zk.connect_string, "--bootstrap", "127.0.0.1:1", "scope", "list"]) == 0

        for trusted in (None, other.cert):  # in clear, or trusting another CA
            if trusted is None:
                monkeypatch.delenv(ZK_TLS_CA)
            else:
                monkeypatch.setenv(ZK_TLS_CA, str(trusted))
            with (
                pytest.raises(ZooKeeperUnavailableError),
                zookeeper_session(zk.connect_string, start_timeout_s=4),
            ):
                pass
