"""``tidemark write`` against real Kafka and ZooKeeper."""

from __future__ import annotations

import json

import pytest

from tidemark.cli.main import main


def test_write_from_args_and_stdin(kafka, zookeeper, unique, monkeypatch, capsys):
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", kafka)
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", zookeeper)
    stream = f"cli{unique}/events"
    assert main(["scope", "create", f"cli{unique}"]) == 0
    assert main(["stream", "create", stream, "--segments", "2"]) == 0
    capsys.readouterr()
    args = ["write", stream, "a", "b", "--key", "k", "--note-time", "1000", "--format", "json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["events"], out["noted_time"], sum(out["position"].values())) == (2, 1000, 2)
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("k1\tx\nk2\ty\nk3\tz\n"))
    assert main(["write", stream, "--key-separator", "\\t"]) == 0
    assert "wrote 3 event(s)" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("no separator\n"))
    assert main(["write", stream, "--key-separator", "\\t"]) == 1
    assert "no key separator" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["write"])
