"""The warm interpreter Spark's one-off driver workers fork from (tidemark.python_zygote).

Each test plays the JVM's part of a simple worker's start: a socket the worker
connects back to (``PYTHON_WORKER_FACTORY_PORT``), the auth handshake, the pid the
worker reports. The worker is PySpark's real ``transform_with_state_driver_worker``.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemark.python_zygote import FORKED_MODULES, PythonZygote, write_launcher

DRIVER_WORKER = FORKED_MODULES[0]


@pytest.fixture
def zygote(tmp_path: Path) -> Iterator[PythonZygote]:
    z = PythonZygote.start(tmp_path, preload=("pandas", DRIVER_WORKER))
    try:
        assert z.ready(60), z.process.log_tail()
        yield z
    finally:
        z.stop()


class FakeJvm:
    """The JVM's end of a simple worker: accepts it, authenticates it, reads its pid."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.secret = secrets.token_hex(8)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHON_WORKER_FACTORY_PORT": str(self.server.getsockname()[1]),
            "PYTHON_WORKER_FACTORY_SECRET": self.secret,
        }

    def accept(self, timeout_s: float = 30.0) -> tuple[socket.socket, int]:
        """The worker's connection and the pid it reports."""
        self.server.settimeout(timeout_s)
        conn, _ = self.server.accept()
        conn.settimeout(timeout_s)
        stream = conn.makefile("rwb")
        (size,) = struct.unpack("!i", stream.read(4))
        assert stream.read(size).decode() == self.secret
        stream.write(struct.pack("!i", 2) + b"ok")
        stream.flush()
        (pid,) = struct.unpack("!i", stream.read(4))
        return conn, pid


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def run_worker(launcher: Path, jvm: FakeJvm) -> tuple[subprocess.Popen[bytes], socket.socket, int]:
    proc = subprocess.Popen(
        [str(launcher), "-m", DRIVER_WORKER],
        env=jvm.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    conn, pid = jvm.accept()
    return proc, conn, pid


def test_a_driver_worker_is_a_fork_of_the_zygote_and_its_exit_is_the_callers(
    zygote: PythonZygote,
) -> None:
    jvm = FakeJvm()
    proc, conn, pid = run_worker(zygote.launcher, jvm)
    assert pid != proc.pid and parent_of(pid) == zygote.process.pid
    conn.close()  # the worker fails to read its command: an error, as with its own process
    out, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and b"Traceback" in err, (proc.returncode, out, err)
    assert b"RuntimeWarning" not in err  # the module runs afresh, not over its preloaded self
    assert gone(pid)


def test_without_a_zygote_the_launcher_runs_python_itself(tmp_path: Path) -> None:
    launcher = tmp_path / "python"
    write_launcher(launcher, tmp_path / "no-such-socket", sys.executable)
    jvm = FakeJvm()
    proc, conn, pid = run_worker(launcher, jvm)
    assert pid == proc.pid  # exec'd: no fork anywhere
    conn.close()
    proc.communicate(timeout=30)
    plain = subprocess.run(
        [str(launcher), "-c", "import sys; print(sys.argv[1:])", "x"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert plain.stdout.strip() == "['x']"


def test_other_calls_never_reach_the_zygote(zygote: PythonZygote) -> None:
    out = subprocess.run(
        [str(zygote.launcher), "-c", "import os; print(os.getppid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(out.stdout) == os.getpid()


def test_a_bad_request_is_refused_and_the_zygote_keeps_serving(zygote: PythonZygote) -> None:
    for garbage in (b"\xff" * 64, struct.pack("!I", 5) + b"nojso", b""):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bad:
            bad.connect(str(zygote.socket_path))
            if garbage:
                socket.send_fds(bad, [garbage], [0, 1, 2])
            bad.shutdown(socket.SHUT_WR)
            assert bad.recv(4) == b""  # closed without a child
    jvm = FakeJvm()
    proc, conn, pid = run_worker(zygote.launcher, jvm)
    assert parent_of(pid) == zygote.process.pid
    conn.close()
    proc.communicate(timeout=30)
    assert "request refused" in zygote.process.log_tail()


def test_a_killed_caller_takes_its_child_with_it(zygote: PythonZygote) -> None:
    jvm = FakeJvm()
    proc, conn, pid = run_worker(zygote.launcher, jvm)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert gone(pid), "the forked worker outlived its caller"
    conn.close()


def test_a_work_directory_holds_one_live_zygote(tmp_path: Path) -> None:
    (tmp_path / "python-zygote").mkdir()
    (tmp_path / "python-zygote" / "sock").write_text("")  # a dead zygote's leftover
    first = PythonZygote.start(tmp_path, preload=())
    try:
        assert first.ready(60) and first.run_dir == tmp_path / "python-zygote"
        second = PythonZygote.start(tmp_path, preload=())  # the first one answers there
        try:
            assert second.ready(60) and second.run_dir != first.run_dir
        finally:
            second.stop()
        assert not second.run_dir.exists()
        jvm = FakeJvm()
        proc, conn, pid = run_worker(first.launcher, jvm)
        assert parent_of(pid) == first.process.pid
        conn.close()
        proc.communicate(timeout=30)
    finally:
        first.stop()
    assert not (tmp_path / "python-zygote").exists()
