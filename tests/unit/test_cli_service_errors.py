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
    assert f"ZooKeeper is unavailable: {address} gave no session" in err
    assert "TIDEMARK_ZK_CONNECT" in err


def test_topic_offsets_name_partitions_not_segment_ids() -> None:
    """A successor segment (epoch 1, number 0) is partition 0 of the stream's topic."""
    from controller.model import segment_id
    from tidemark.service.app import topic_offsets

    cut = {segment_id(1, 1): 7, segment_id(1, 0): 5}
    assert topic_offsets("t", cut) == {"t": {"0": 5, "1": 7}}
