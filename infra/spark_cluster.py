"""A Spark standalone cluster as local processes: one master, N workers.

    with SparkCluster(tmp_path / "spark", workers=2) as cluster:
        spark-submit --master cluster.master_url ...
        cluster.kill_worker(1)          # kill -9, as a lost machine
        cluster.alive_workers()         # what the master knows

Each piece is its own JVM from pyspark's own jars, started with ``spark-class``
(``org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker``), the
way a standalone cluster runs on real machines; the executors a worker launches
are its children, in its process group, so stopping a worker stops them too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tidemark.environment import Environment
from tidemark.infra.exceptions import ServiceError, ServiceTimeout
from tidemark.infra.java import java_executable
from tidemark.infra.ports import HOST, ensure_free, free_ports, wait_listening
from tidemark.infra.process import ManagedProcess, Service, wait_for

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """pyspark's own installation: its ``bin/spark-class`` and ``jars/``."""
    import pyspark  # lazily: only a cluster or a session needs it

    return Path(pyspark.__file__).resolve().parent


@dataclass
class SparkWorker:
    number: int
    port: int
    webui_port: int
    process: ManagedProcess


class SparkCluster(Service):
    """A master and ``workers`` workers on 127.0.0.1, each offering ``cores`` and ``memory``."""

    def __init__(
        self,
        data_dir: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        env: Environment | None = None,
    ) -> None:
        self.env = env or Environment.from_env()
        self.data_dir = data_dir
        self.cores = cores
        self.memory = memory
        ports = free_ports(2 + 2 * workers)
        self.port, self.webui_port = ports[0], ports[1]
        self.master = ManagedProcess(
            "spark-master",
            self._spark_class(
                MASTER_CLASS,
                "--host",
                HOST,
                "--port",
                str(self.port),
                "--webui-port",
                str(self.webui_port),
            ),
            data_dir / "master.log",
            env=self._process_env(),
        )
        self.workers = [
            SparkWorker(
                i + 1,
                ports[2 + 2 * i],
                ports[3 + 2 * i],
                self._worker_process(i + 1, ports[2 + 2 * i], ports[3 + 2 * i]),
            )
            for i in range(workers)
        ]

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    def _process_env(self) -> dict[str, str]:
        home = spark_home()
        java = Path(java_executable(self.env)).resolve()
        return {
            **os.environ,
            "SPARK_HOME": str(home),
            "JAVA_HOME": str(java.parent.parent),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(self.data_dir / "logs"),
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_DAEMON_MEMORY": "256m",
        }

    def _spark_class(self, main_class: str, *args: str) -> list[str]:
        return [str(spark_home() / "bin" / "spark-class"), main_class, *args]

    def _worker_process(self, number: int, port: int, webui: int) -> ManagedProcess:
        work = self.data_dir / f"worker-{number}"
        work.mkdir(parents=True, exist_ok=True)
        return ManagedProcess(
            f"spark-worker-{number}",
            self._spark_class(
                WORKER_CLASS,
                self.master_url,
                "--host",
                HOST,
                "--port",
                str(port),
                "--webui-port",
                str(webui),
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(work),
            ),
            work / "worker.log",
            env=self._process_env(),
        )

    def start(self, timeout_s: float = 90.0) -> SparkCluster:
        ensure_free(self.port, "spark-master")
        self.master.start()
        for worker in self.workers:  # they retry until the master listens
            self.start_worker(worker.number, wait_s=0)
        wait_listening(self.port, timeout_s, "spark-master")
        self.wait_workers(len(self.workers), timeout_s)
        return self

    def start_worker(self, number: int, wait_s: float = 60.0) -> None:
        """Start worker ``number`` (again after :meth:`kill_worker`), on its old ports."""
        worker = self.workers[number - 1]
        if worker.process.pid is not None:
            worker.process = self._worker_process(number, worker.port, worker.webui_port)
        worker.process.start()
        if wait_s:
            self.wait_workers(len(self.alive_workers()) + 1, wait_s)

    def kill_worker(self, number: int) -> None:
        """kill -9 worker ``number`` and, as a machine lost with it, its executors."""
        worker = self.workers[number - 1]
        pid = worker.process.pid
        worker.process.kill()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    def state(self) -> dict[str, object]:
        """The master's view (its web UI's JSON): workers, applications."""
        url = f"http://{HOST}:{self.webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                found: dict[str, object] = json.load(answer)
                return found
        except OSError as exc:
            raise ServiceError(f"spark-master: {url} did not answer: {exc}") from exc

    def alive_workers(self) -> list[str]:
        workers = self.state().get("workers", [])
        assert isinstance(workers, list)
        return [str(w["id"]) for w in workers if w.get("state") == "ALIVE"]

    def wait_workers(self, count: int, timeout_s: float) -> None:

        def alive() -> bool:
            with contextlib.suppress(ServiceError):
                return len(self.alive_workers()) >= count
            return False

        if not wait_for(alive, timeout_s, 0.5, self.master):
            raise ServiceTimeout(
                f"spark-master {self.master_url}: fewer than {count} workers alive after "
                f"{timeout_s:.0f} s; see {self.data_dir}"
            )

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master."""
        for worker in self.workers:
            pid = worker.process.pid
            worker.process.stop(timeout_s=10)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        self.master.stop(timeout_s=10)


__all__ = ["SparkCluster", "spark_home"]
