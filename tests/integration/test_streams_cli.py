"""``tidemark stream ...`` and ``tidemark controller status``, in-process, on real services."""

from __future__ import annotations

import json

import pytest

from tidemark.cli.main import main
from tidemark.controller.model import segment_id


@pytest.fixture
def cli(monkeypatch, kafka, zookeeper, zk_client, capsys):
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", kafka)
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", f"{zookeeper}{zk_client.chroot}")

    def run(*argv: str, expect: int = 0):
        code = main(list(argv))
        out, err = capsys.readouterr()
        assert code == expect, err
        return out, err

    return run


def test_stream_verbs(cli, unique):
    name = f"c{unique}/clicks"
    cli("scope", "create", f"c{unique}")
    out, _ = cli("stream", "create", name, "--segments", "2", "--uncapped", "--format", "json")
    created = json.loads(out)
    assert created["state"] == "active" and created["config"]["uncapped"] is True
    assert created["config"]["timestamping"] == "client-prefer"

    out, _ = cli(
        "stream", "scale", name, "--seal", "1", "--ranges", "0.5:0.75,0.75:1", "--format", "json"
    )
    assert json.loads(out)["current_epoch"] == 1

    out, _ = cli("stream", "describe", name, "--format", "json")
    described = json.loads(out)
    assert [s["id"] for s in described["segments"]] == [0, 1, segment_id(1, 2), segment_id(1, 3)]
    sealed = {s["id"]: s["sealed_size"] for s in described["segments"] if s["sealed"]}
    assert sealed == {1: 0}
    assert [s["partition"] for s in described["segments"]] == [0, 1, 2, 3]

    out, _ = cli("stream", "describe", name)
    assert "epoch 1" in out and "[0.5, 0.75)" in out

    cut = f"0=0,{segment_id(1, 2)}=0,{segment_id(1, 3)}=0"
    out, _ = cli("stream", "truncate", name, "--cut", cut, "--format", "json")
    assert json.loads(out)["truncation"] == {
        "0": 0,
        str(segment_id(1, 2)): 0,
        str(segment_id(1, 3)): 0,
    }

    out, _ = cli("stream", "list", f"c{unique}", "--format", "json")
    assert [json.loads(line) for line in out.splitlines()] == [{"stream": name, "state": "active"}]

    _, err = cli("stream", "delete", name, expect=1)
    assert "seal" in err and name in err
    _, err = cli("stream", "scale", name, "--seal", "0", "--ranges", "0:0.2,0.1:0.5", expect=1)
    assert "overlap" in err
    _, err = cli("stream", "describe", name + "x", expect=1)
    assert name + "x" in err

    out, _ = cli("stream", "seal", name, "--format", "json")
    assert json.loads(out)["state"] == "sealed"
    out, _ = cli("stream", "delete", name)
    assert f"deleted {name}" in out
    out, _ = cli("stream", "list")
    assert "no streams" in out


def test_controller_status(cli, zk_client):
    """Leader and standbys from the election, the layout and last batch the leader published."""
    import threading
    import time

    from tidemark.controller.zookeeper.driver import DriverElection

    stopping, leading = threading.Event(), threading.Event()

    def lead(lost: threading.Event) -> None:
        leader.publish("layout", {"bucket_count": 8, "slot_count": 32, "delta_root": ""})
        leader.publish("progress", {"leader": "one", "batch_id": 7, "at_ms": 1, "watermarks": 2})
        leading.set()
        lost.wait()

    leader = DriverElection(zk_client, "/tidemark", "tidemark-marks", "one")
    standby = DriverElection(zk_client, "/tidemark", "tidemark-marks", "two")
    threads = [
        threading.Thread(target=e.run, args=(lead, stopping), daemon=True)
        for e in (leader, standby)
    ]
    threads[0].start()
    assert leading.wait(15)
    threads[1].start()
    try:
        deadline = time.monotonic() + 15
        while True:
            out, _ = cli("controller", "status", "--format", "json")
            view = json.loads(out)
            if view["standbys"] == ["two"] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert (view["leader"], view["standbys"], view["bucket_count"]) == ("one", ["two"], 8)
        assert view["last_batch"]["batch_id"] == 7 and view["last_batch"]["age_ms"] > 0
        out, _ = cli("controller", "status")
        assert "leader:   one" in out and "standbys: two" in out and "last batch: 7" in out
    finally:
        stopping.set()
        leader.cancel()
        standby.cancel()
        for t in threads:
            t.join(10)
    assert not any(t.is_alive() for t in threads)


def test_scope_verbs_and_their_bad_inputs(cli, unique):
    scope, other = f"sc{unique}", f"sd{unique}"
    _, err = cli("stream", "create", f"{scope}/s", expect=1)
    assert f"unknown scope '{scope}'" in err and f"tidemark scope create {scope}" in err
    out, _ = cli("scope", "list")
    assert "no scopes" in out

    out, _ = cli("scope", "create", scope, "--format", "json")
    assert json.loads(out) == {"scope": scope, "created": True}
    out, _ = cli("scope", "create", scope)
    assert "exists already" in out
    cli("scope", "create", other)
    cli("stream", "create", f"{scope}/s")
    out, _ = cli("scope", "list", "--format", "json")
    rows = [json.loads(line) for line in out.splitlines()]  # JSON lines, as every list
    assert rows == [{"scope": scope, "streams": 1}, {"scope": other, "streams": 0}]

    _, err = cli("scope", "delete", scope, expect=1)
    assert f"scope '{scope}' holds 1 stream(s) ({scope}/s)" in err and "delete them" in err
    out, _ = cli("stream", "describe", f"{scope}/s", "--format", "json")
    assert json.loads(out)["state"] == "active"  # the refusal lost nothing

    for bad in ("", "a/b", "-lead", "x" * 101):
        _, err = cli("scope", "create", "--", bad, expect=1)
        assert "scope/name" in err
    _, err = cli("scope", "delete", f"nope{unique}", expect=1)
    assert f"unknown scope 'nope{unique}'" in err

    cli("stream", "seal", f"{scope}/s")
    cli("stream", "delete", f"{scope}/s")
    out, _ = cli("scope", "delete", scope)
    assert f"deleted scope {scope}" in out
    out, _ = cli("scope", "list", "--format", "json")
    assert [json.loads(line) for line in out.splitlines()] == [{"scope": other, "streams": 0}]


def test_retention_limits_on_the_command_line(cli, unique):
    scope = f"rl{unique}"
    cli("scope", "create", scope)
    args = ("--retention", "by-size", "--retention-limit", "1000")
    _, err = cli("stream", "create", f"{scope}/s", *args, "--retention-min", "2000", expect=1)
    assert "min_limit" in err and "2000" in err
    out, _ = cli(
        "stream", "create", f"{scope}/s", *args, "--retention-min", "400", "--format", "json"
    )
    assert json.loads(out)["config"]["retention_policy"] == {
        "type": "by-size",
        "limit": 1000,
        "min_limit": 400,
    }
