"""Fault: the README tour's controllers stop on a signal with their services gone, and
`tidemark down` stops the controllers running under its home.

Everything runs as a user runs it: `tidemark up` in a home of its own, `tidemark
controller run` in the background, then every service killed with SIGKILL (a crashed
machine's services, or a laptop's `tidemark down` in another terminal)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.figures import report
from tidemark.environment import Environment
from tidemark.infra.process import pid_alive
from tidemark.infra.services import LocalServices

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow, pytest.mark.faults]

STOP_TIMEOUT_S = 10


def _cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "tidemark.cli.main", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def _controller(env: dict[str, str], instance: str, log: Path, *more: str) -> subprocess.Popen:
    # --verbose: "query started" (INFO) says when it leads; lines after a signal are
    # counted at WARNING and above, what a user sees without it
    argv = [sys.executable, "-m", "tidemark.cli.main", "--verbose", "controller", "run"]
    argv += ["--instance", instance, "--stop-timeout", f"{STOP_TIMEOUT_S}s", *more]
    return subprocess.Popen(
        argv,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # no terminal's Ctrl-C reaches it but ours
    )


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"no {text!r}: " + log.read_text()[-3000:]
        time.sleep(0.2)


def _exit_time(proc: subprocess.Popen, timeout_s: float) -> float:
    started = time.monotonic()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"still running {timeout_s} s after the signal")
    return time.monotonic() - started


def test_controllers_stop_on_a_signal_and_on_down_with_their_services_gone(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    env["TIDEMARK_HOME"] = str(home)
    up = _cli(env, "up")
    assert up.returncode == 0, up.stderr
    env.update(
        line.removeprefix("export ").split("=", 1)
        for line in up.stdout.splitlines()
        if line.startswith("export ")
    )
    procs: list[subprocess.Popen] = []
    try:
        assert _cli(env, "scope", "create", "shop").returncode == 0
        assert _cli(env, "stream", "create", "shop/orders", "--segments", "2").returncode == 0
        leader_log, standby_log = tmp_path / "c1.log", tmp_path / "c2.log"
        procs.append(leader := _controller(env, "c1", leader_log))
        _wait_for_line(leader_log, "query started", leader, 300)
        procs.append(standby := _controller(env, "c2", standby_log, "--no-warm-up"))
        _wait_for_line(standby_log, "spark session", standby, 300)
        impatient_log = tmp_path / "c3.log"
        procs.append(impatient := _controller(env, "c3", impatient_log, "--no-warm-up"))
        _wait_for_line(impatient_log, "spark session", impatient, 300)
        assert {p.name for p in _noted(home)} == {"c1", "c2", "c3"}
        # both contend before the services die: their stops then wait on ZooKeeper
        _wait_standing_by(env, {"c2", "c3"}, procs, 300)

        # every service dies at once, as in a crash
        state = LocalServices(Environment.from_env({"TIDEMARK_HOME": str(home)})).read_state()
        assert state is not None
        for service in state.services:
            os.kill(service.pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while any(pid_alive(s.pid) for s in state.services):
            assert time.monotonic() < deadline
            time.sleep(0.1)

        # Ctrl-C: the leader stops within its stop timeout, in a line or two
        before = len(leader_log.read_text(errors="replace").splitlines())
        leader.send_signal(signal.SIGINT)
        took_sigint = _exit_time(leader, STOP_TIMEOUT_S + 20)
        after = leader_log.read_text(errors="replace").splitlines()[before:]
        assert "Traceback" not in "\n".join(after), "\n".join(after)
        loud = [line for line in after if line.strip() and " INFO " not in line]
        assert len(loud) <= 8, "\n".join(after)  # a few lines, not a reconnect per try

        # a second signal while the first one's stop waits on the gone services: at once
        impatient.send_signal(signal.SIGTERM)
        _wait_for_line(impatient_log, "stopping (SIGTERM)", impatient, 30)
        impatient.send_signal(signal.SIGTERM)
        took_second = _exit_time(impatient, STOP_TIMEOUT_S)
        assert impatient.returncode == 128 + signal.SIGTERM, impatient_log.read_text()[-3000:]
        impatient_out = impatient_log.read_text(errors="replace")
        assert "stopped at once" in impatient_out and "Traceback" not in impatient_out

        # `tidemark down`: SIGTERM to the standby, which stops as quickly; the dead
        # services are nothing to stop
        down = _cli(env, "down", timeout=STOP_TIMEOUT_S + 60)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "controller c2" in down.stdout and "still running" not in down.stdout
        assert standby.poll() is not None
        standby_out = standby_log.read_text(errors="replace")
        assert "Traceback" not in standby_out, standby_out[-3000:]
        assert _noted(home) == []
        for log in (leader_log, standby_log):
            text = log.read_text(errors="replace")
            # Spark's own logging went to the file the driver named, not to its output
            assert "spark.log" in text
            assert " WARN " not in text and "log4j" not in text, text[-3000:]
        report(
            "controller stop",
            f"SIGINT with the services gone: {took_sigint:.1f} s (stop timeout "
            f"{STOP_TIMEOUT_S} s); a second SIGTERM: exit {took_second:.1f} s after it; "
            "`tidemark down` stopped the standby",
        )
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        _cli(env, "down", timeout=120)


def _wait_standing_by(
    env: dict[str, str], names: set[str], procs: list[subprocess.Popen], timeout_s: float
) -> None:
    """Until ``tidemark controller status`` lists ``names`` among the standbys."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = _cli(env, "controller", "status", "--format", "json")
        if status.returncode == 0 and names <= set(json.loads(status.stdout)["standbys"]):
            return
        assert all(p.poll() is None for p in procs), "a controller exited"
        assert time.monotonic() < deadline, f"{sorted(names)} not standing by: {status.stdout}"
        time.sleep(0.5)


def _noted(home: Path):
    from tidemark.infra.services import noted_processes

    return noted_processes(home)
