"""A standalone ZooKeeper server as a local process.

with ZooKeeperServer(tmp_path / "zk") as zk:
    with zookeeper_session(zk.connect_string) as client:  # controller.zookeeper.session
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from types import TracebackType

from infra import jars
from infra.exceptions import ServiceTimeout
from infra.java import jvm_argv
from infra.ports import HOST, ensure_free, free_port
from infra.process import ManagedProcess
from tidemark.environment import Environment

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperServer:
    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        env: Environment | None = None,
        tie_to_owner: bool = True,
    ) -> None:
        self.env = env or Environment.from_env()
        self.data_dir = data_dir
        self.port = port or free_port()
        self.process = ManagedProcess(
            "zookeeper", self._argv(), data_dir / "zookeeper.log", tie_to_owner=tie_to_owner
        )

    @property
    def connect_string(self) -> str:
        return f"{HOST}:{self.port}"

    def _argv(self) -> list[str]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "zoo.cfg"
        conf.write_text(
            "\n".join(
                [
                    "tickTime=500",
                    "minSessionTimeout=1000",
                    "maxSessionTimeout=60000",
                    f"dataDir={self.data_dir / 'data'}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={HOST}",
                    "admin.enableServer=false",
                    "maxClientCnxns=0",
                    "4lw.commands.whitelist=ruok,stat,srvr",
                    "",
                ]
            )
        )
        return jvm_argv(
            self.env,
            jars.classpath("zookeeper", self.env),
            MAIN_CLASS,
            str(conf),
            heap_mb=256,
            jvm_options=("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"),
        )

    def start(self, timeout_s: float = 60.0) -> ZooKeeperServer:
        ensure_free(self.port, "zookeeper")
        self.process.start()
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        """Ready when the server answers ``ruok`` with ``imok``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.process.check_alive()
            if ruok(HOST, self.port):
                return
            time.sleep(0.2)
        raise ServiceTimeout(
            f"zookeeper on {self.connect_string} did not answer in {timeout_s:.0f} s; "
            f"see {self.process.log_path}"
        )

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def ruok(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(b"ruok")
            return sock.recv(16) == b"imok"
    except OSError:
        return False
