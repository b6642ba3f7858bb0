"""Opt-in: a warm Python interpreter that Spark's one-off driver-side Python processes
fork from. Off unless ``TIDEMARK_PYTHON_ZYGOTE`` is set (``tidemark controller run``).

    zygote = PythonZygote.start(work_dir, (*PRELOAD, "my.processor"))  # listens once warm
    spark_session(SparkSettings(work_dir, python=str(zygote.launcher)))
    ...
    zygote.stop()

At every query start with ``transformWithStateInPandas`` Spark runs the processor's
``init`` in a *new* Python process on the driver (the state-schema check), which
first imports pyspark, pandas and pyarrow: about a second of a take-over. The
launcher script (Spark's Python executable) hands exactly that ``-m`` call
(:data:`FORKED_MODULES`) to :mod:`tidemark.zygote_client`, which passes its standard
streams, arguments, environment and directory over a Unix socket; the zygote forks
and the child runs the module. Everything else, and every call while no zygote
answers, execs Python as usual. Local masters only: on a cluster the executable
must exist on every machine. Figures: ``docs/benchmarks.md``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import runpy
import selectors
import shlex
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tidemark import zygote_client
from tidemark.infra.process import ManagedProcess, die_with_parent

log = logging.getLogger(__name__)

FORKED_MODULES = ("pyspark.sql.streaming.transform_with_state_driver_worker",)
"""The ``python -m`` modules run in a fork of the zygote: Spark's one-off driver-side
workers. Executors' daemons and workers keep their own processes."""

PRELOAD = ("pandas", "pyarrow", *FORKED_MODULES)
"""Imported by the zygote before it answers: what every forked driver worker needs
(callers add their stateful processor's module)."""

_MAX_REQUEST = 16 * 1024 * 1024
_MAX_SOCKET_PATH = 100


@dataclass
class PythonZygote:
    """A running zygote and the launcher script that uses it."""

    process: ManagedProcess
    socket_path: Path
    launcher: Path
    run_dir: Path

    @classmethod
    def start(cls, work_dir: Path, preload: Sequence[str] = PRELOAD) -> PythonZygote:
        """Start a zygote (its log under ``work_dir``) and write its launcher. The zygote
        imports ``preload`` in the background; until it listens, calls run as usual."""
        # Under the work directory (gone with it, even after a kill -9), unless that makes
        # the socket's path too long for a Unix socket (about 100 bytes): then in /tmp.
        run_dir = work_dir / "python-zygote"
        if len(str(run_dir / "sock")) <= _MAX_SOCKET_PATH and not _answers(run_dir / "sock"):
            run_dir.mkdir(parents=True, exist_ok=True)
            for stale in (run_dir / "sock", run_dir / "sock.new"):
                stale.unlink(missing_ok=True)  # a dead zygote's
        else:  # too long, or another process's zygote lives there
            run_dir = Path(tempfile.mkdtemp(prefix="tidemark-zygote-"))
        socket_path = run_dir / "sock"
        launcher = run_dir / "python"
        write_launcher(launcher, socket_path, sys.executable)
        repo = str(Path(__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p)
        process = ManagedProcess(
            "python-zygote",
            [sys.executable, "-m", "tidemark.python_zygote", str(socket_path), *preload],
            log_path=work_dir / "python-zygote.log",
            env={**os.environ, "PYTHONPATH": path},
        )
        process.start()
        return cls(process, socket_path, launcher, run_dir)

    def ready(self, timeout_s: float = 30.0) -> bool:
        """Wait until the zygote listens (tests, benchmarks); ``False`` if it did not."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.process.alive():
            if self.socket_path.exists():
                return True
            time.sleep(0.05)
        return self.socket_path.exists()

    def stop(self) -> None:
        self.process.stop(timeout_s=5)
        for path in (self.socket_path, self.launcher):
            path.unlink(missing_ok=True)
        try:
            self.run_dir.rmdir()
        except OSError as exc:
            log.debug("zygote directory %s left: %s", self.run_dir, exc)


def _answers(socket_path: Path) -> bool:
    """Whether a zygote listens on ``socket_path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(socket_path))
        except OSError:
            return False
    return True


def write_launcher(path: Path, socket_path: Path, python: str) -> None:
    """A ``sh`` script standing in for ``python``: ``-m`` of a forked module goes to the
    zygote (through the client, itself a bare ``python -S -I``), anything else to Python."""
    client = Path(zygote_client.__file__).resolve()
    cases = "|".join(FORKED_MODULES)
    py, sock, cl = (shlex.quote(str(p)) for p in (python, socket_path, client))
    path.write_text(
        "#!/bin/sh\n"
        "# Written by tidemark (tidemark/python_zygote.py): Spark's Python executable.\n"
        f'if [ "$1" = "-m" ] && [ -S {sock} ]; then\n'
        f'  case "$2" in {cases}) exec {py} -S -I {cl} {sock} {py} "$@";; esac\n'
        "fi\n"
        f'exec {py} "$@"\n'
    )
    path.chmod(0o755)


# --- the zygote process ----------------------------------------------------------------------


def serve(socket_path: str, preload: Sequence[str]) -> None:
    """Import ``preload``, listen on ``socket_path``, fork a child per request."""
    started = time.monotonic()
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the child imports it itself, slower
            log.warning("zygote: %s not preloaded: %s", name, exc)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path + ".new")
    os.rename(socket_path + ".new", socket_path)  # exists only once it listens
    listener.listen(64)
    log.info("zygote: ready in %.2f s (%s)", time.monotonic() - started, ", ".join(preload))
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    children: dict[int, socket.socket] = {}  # pid -> its client's connection
    try:
        while True:
            for key, _ in selector.select(timeout=5.0):
                if key.data == "accept":
                    conn, _ = listener.accept()
                    pid = _take(conn, listener, selector)
                    if pid is None:
                        conn.close()
                    else:
                        children[pid] = conn
                        selector.register(conn, selectors.EVENT_READ, pid)
                elif key.data == "wake":
                    os.read(wake_r, 4096)
                else:  # a client closed its end early (killed): stop its child
                    pid = int(key.data)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    selector.unregister(children[pid])
            _reap(children, selector)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.unlink(socket_path)


def _take(
    conn: socket.socket, listener: socket.socket, selector: selectors.BaseSelector
) -> int | None:
    """Read one request and fork its child; the child's pid (``None``: a bad request)."""
    conn.settimeout(10)
    fds: list[int] = []
    try:
        data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
        head = zygote_client.HEADER.size
        data = zygote_client.read_exactly(conn, head, data)
        if len(data) < head:
            raise ValueError("no request")
        (size,) = zygote_client.HEADER.unpack(data[:head])
        if size > _MAX_REQUEST:
            raise ValueError(f"request of {size} bytes")
        body = zygote_client.read_exactly(conn, size, data[head:])
        if len(body) < size:
            raise ValueError("request cut short")
        request = json.loads(body)
        argv, env, cwd = list(request["argv"]), dict(request["env"]), str(request["cwd"])
        if len(fds) != 3 or len(argv) < 2 or argv[0] != "-m" or argv[1] not in FORKED_MODULES:
            raise ValueError(f"not a forked module call: {argv[:2]} with {len(fds)} streams")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("zygote: request refused: %s", exc)
        for fd in fds:
            os.close(fd)
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; measured by the integration test
        selector.close()
        listener.close()
        _become(conn, fds, argv, env, cwd)
    for fd in fds:
        os.close(fd)
    conn.setblocking(True)
    return pid


def _become(
    conn: socket.socket, fds: list[int], argv: list[str], env: dict[str, str], cwd: str
) -> None:
    """In the child: take the caller's streams, environment and directory; run the module."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        conn.close()
        die_with_parent()  # the zygote
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[1:1] = extra
        sys.argv = [argv[1], *argv[2:]]
        # Run the module's code afresh as __main__ (its imports stay loaded); left in
        # sys.modules, runpy warns that it was imported before it ran.
        sys.modules.pop(argv[1], None)
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _reap(children: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    """Tell each exited child's client its status."""
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 1 << 8
        if done == 0:
            continue
        conn = children.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn)
        with contextlib.suppress(OSError):
            conn.sendall(zygote_client.STATUS.pack(code if code >= 0 else 128 - code))
        conn.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    serve(sys.argv[1], sys.argv[2:])
