"""A service that does not answer is one line on stderr naming the service, its address
and what to check (exit 1, no traceback) -- here a stopped ZooKeeper: a port nothing
listens on."""

from __future__ import annotations

import socket

import pytest

import tidemark.cli.control_plane as control_plane_module
from tidemark.cli.main import main

pytestmark = pytest.mark.unit


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_stopped_zookeeper_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", address)
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", f"127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(control_plane_module, "ZK_START_TIMEOUT_S", 1.0)
    assert main(["scope", "list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"ZooKeeper at {address} does not answer" in err
    assert "TIDEMARK_ZK_CONNECT" in err
