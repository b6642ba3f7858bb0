"""No service process outlives its owner, and `tidemark up/status/down` work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tidemark.infra.process import ManagedProcess, pid_alive

OWNER = """
import sys, time
from pathlib import Path
from tidemark.infra.process import ManagedProcess
p = ManagedProcess("sleeper", ["sleep", "300"], Path(sys.argv[1]))
p.start()
print(p.pid, flush=True)
time.sleep(300)
"""


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_child_dies_when_its_owner_is_killed(tmp_path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path / "sleeper.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    child_pid = int(owner.stdout.readline())
    assert pid_alive(child_pid)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(10)
    assert _wait_gone(child_pid), "the service process survived its owner"


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path) -> None:
    stubborn = ManagedProcess(
        "stubborn",
        [sys.executable, "-c", "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
         "print('ready', flush=True); time.sleep(300)"],
        tmp_path / "stubborn.log",
    )  # fmt: skip
    stubborn.start()
    deadline = time.monotonic() + 10
    while "ready" not in stubborn.log_tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = stubborn.pid
    assert pid is not None
    started = time.monotonic()
    stubborn.stop(timeout_s=1.0)
    assert time.monotonic() - started < 8
    assert not stubborn.alive()
    assert _wait_gone(pid)


@pytest.mark.slow
def test_cli_up_status_down(tmp_path, monkeypatch, capsys) -> None:
    from tidemark.cli.main import main

    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path / "home"))
    assert main(["up", "--format", "json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert state["kafka_bootstrap"].startswith("127.0.0.1:")
    try:
        assert main(["status", "--format", "json"]) == 0
        # a list is one JSON object per line, as every verb prints lists
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
        assert {r["name"] for r in rows} >= {"zookeeper", "kafka-1"}
        assert all(r["running"] for r in rows)
        pids = [r["pid"] for r in rows]
        # a second `up` reuses what runs
        assert main(["up", "--format", "json"]) == 0
        assert json.loads(capsys.readouterr().out) == state
    finally:
        assert main(["down"]) == 0
    assert "stopped" in capsys.readouterr().out
    assert all(_wait_gone(pid) for pid in pids)
    assert main(["status"]) == 0
    assert "no local services" in capsys.readouterr().out
