"""Child processes that never outlive their owner.

    proc = ManagedProcess("zookeeper", ["java", ...], log_path=tmp / "zk.log")
    proc.start()
    ...
    proc.stop()          # terminate, wait, then kill

A process started with ``tie_to_owner=True`` (the default) gets SIGKILL from
the kernel when the Python process that started it dies, however it dies
(Linux ``PR_SET_PDEATHSIG``); every live one is also stopped at interpreter
exit. ``tidemark up`` starts services with ``tie_to_owner=False`` so they keep
running in the background, and records their pids for ``tidemark down``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Self

from tidemark.infra.exceptions import ServiceError
from tidemark.infra.java import settle_archive, writing_no_archive

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_live: set[ManagedProcess] = set()
_started: list[ManagedProcess] = []
_live_lock = threading.Lock()


def die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Have the kernel SIGKILL this process when its parent dies (Linux; else nothing)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    die_with_parent()
    os.setpgrp()


class ManagedProcess:
    """One child process with its output in a log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        tie_to_owner: bool = True,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.tie_to_owner = tie_to_owner
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        if self._proc is not None:
            raise ServiceError(f"{self.name} is already started (pid {self._proc.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            try:
                self._proc = subprocess.Popen(
                    # one that outlives its owner writes no class-data archive: nobody
                    # would settle it (infra/java.py)
                    self.argv if self.tie_to_owner else writing_no_archive(self.argv),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env,
                    cwd=self.cwd,
                    preexec_fn=_die_with_parent if self.tie_to_owner else os.setpgrp,
                )
            except FileNotFoundError as exc:
                raise ServiceError(f"{self.name}: cannot run {self.argv[0]!r}: {exc}") from exc
        with _live_lock:
            _started.append(self)
            if self.tie_to_owner:
                _live.add(self)
        log.info("started %s (pid %s), log %s", self.name, self._proc.pid, self.log_path)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def check_alive(self) -> None:
        """Raise, in one line (the log's key line and its path), when the process has exited."""
        if self._proc is not None and self._proc.poll() is not None:
            raise ServiceError(
                f"{self.name} exited with code {self._proc.returncode}: "
                f"{key_line(self.log_tail(200))} (full log: {self.log_path})"
            )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def terminate(self) -> None:
        """Send SIGTERM without waiting (``stop`` waits)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.terminate()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Terminate, wait up to ``timeout_s``, then kill. Safe to call twice."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0f s; killing it", self.name, timeout_s)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=10)
        with _live_lock:
            _live.discard(self)
        settle_archive(self.argv, proc.returncode)
        log.info("stopped %s (exit %s)", self.name, proc.returncode)

    def kill(self) -> None:
        """Stop at once, as a crash would (SIGKILL)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        with _live_lock:
            _live.discard(self)
        if proc is not None:
            settle_archive(self.argv, proc.returncode)


_KEY_MARKERS = ("Exception", "Error", "ERROR", "FATAL", "error:", "refused", "failed")


class Service(ABC):
    """A local service a ``with`` block starts and stops (ZooKeeper, Kafka, PostgreSQL,
    the S3 proxy, a Spark cluster): ``with KafkaCluster(...) as kafka:`` calls
    :meth:`start` with its default timeout on the way in, :meth:`stop` on the way out."""

    @abstractmethod
    def start(self) -> Self:
        """Start the service, wait until it answers, and return it."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the service (its processes)."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for(
    ready: Callable[[], bool], timeout_s: float, poll_s: float, *watched: ManagedProcess
) -> bool:
    """Ask ``ready`` every ``poll_s`` until it says yes (True) or ``timeout_s`` has passed
    (False: the caller says what did not come up). A ``watched`` process that exited
    raises at once (:meth:`ManagedProcess.check_alive`) instead of waiting the timeout out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process in watched:
            process.check_alive()
        if ready():
            return True
        time.sleep(poll_s)
    return False


def key_line(output: str, limit: int = 400) -> str:
    """The line of a service's output that says what went wrong, shortened to ``limit``.

    The last line carrying an error marker (a JVM's exception, a ``FATAL``), skipping
    stack frames; else the last non-empty line.

    >>> key_line("starting\\nERROR Exiting Kafka: cluster id mismatch\\n\\tat kafka.Foo\\n")
    'ERROR Exiting Kafka: cluster id mismatch'
    """
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    frames = [ln for ln in lines if not ln.startswith(("at ", "..."))]
    marked = [ln for ln in frames if any(m in ln for m in _KEY_MARKERS)]
    found = (marked or frames or ["(no output)"])[-1]
    return found if len(found) <= limit else found[: limit - 3] + "..."


def stop_pid(pid: int, timeout_s: float = 15.0) -> bool:
    """Stop a process we only know by pid (``tidemark down``). True if it was running."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    if wait_for(lambda: not pid_alive(pid), timeout_s, 0.1):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped) counts as gone.

    Only a whole zombie: a process's first thread shows as one while the others are
    still ending (or running on), and its parent cannot reap it until they have."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:  # it may have ended between two reads
        return os.path.exists(f"/proc/{pid}")


def started_processes() -> list[ManagedProcess]:
    """Every process this interpreter started, alive or not (for leak checks and logs)."""
    with _live_lock:
        return list(_started)


@atexit.register
def _stop_all() -> None:
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.stop(timeout_s=5)
