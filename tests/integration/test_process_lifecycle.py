"""No service process outlives its owner, and `tidemark up/status/down` work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


def test_a_service_jvm_writes_its_class_archive_once_then_starts_from_it(tmp_path) -> None:
    """The first start of a classpath and main class writes a class-data archive at its
    exit, put in place by its owner; the next starts from it. A partial archive (a JVM
    killed while writing it) is never put in place: a JVM that maps one crashes."""
    import dataclasses

    from tidemark.environment import Environment
    from tidemark.infra import jars
    from tidemark.infra.java import archive_options, jvm_argv, settle_archive
    from tidemark.infra.kafka import STORAGE_TOOL

    suite = Environment.from_env()
    env = dataclasses.replace(suite, cache=tmp_path / "cache")
    classpath = jars.classpath("kafka", suite)

    def run(argv: list[str]) -> ManagedProcess:
        proc = ManagedProcess("storage-tool", argv, tmp_path / "tool.log")
        proc.start()
        assert proc._proc is not None and proc._proc.wait(60) == 0, proc.log_tail()
        proc.stop()  # settles its archive
        return proc

    first = jvm_argv(env, classpath, STORAGE_TOOL, "random-uuid")
    assert any(a.startswith("-XX:ArchiveClassesAtExit=") for a in first)
    run(first)
    (archive,) = (tmp_path / "cache" / "class-archives").glob("*.jsa")
    assert list(archive.parent.glob("*.pending")) == []
    second = jvm_argv(env, classpath, STORAGE_TOOL, "random-uuid")
    assert f"-XX:SharedArchiveFile={archive}" in second
    run(second)
    uuids = (tmp_path / "tool.log").read_text().split()
    assert len(uuids) == 2 and uuids[0] != uuids[1]
    assert "warning" not in (tmp_path / "tool.log").read_text()

    # a partial archive, as a JVM killed while writing it leaves, is removed, not used
    whole = archive.read_bytes()
    archive.unlink()
    (option, *_) = archive_options(env, first[0], classpath, STORAGE_TOOL)
    pending = Path(option.split("=", 1)[1])
    pending.write_bytes(whole[: len(whole) // 3])
    settle_archive([first[0], option, "-cp", ":".join(classpath)], 0)
    assert not archive.exists() and not pending.exists()
    pending.write_bytes(whole)
    settle_archive([first[0], option, "-cp", ":".join(classpath)], -9)  # killed: not trusted
    assert not archive.exists() and not pending.exists()


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
