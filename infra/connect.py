"""A standalone Kafka Connect worker as a local process (the JVM interceptor's tests).

    with ConnectWorker(tmp_path / "connect", kafka, source, settings) as worker:
        ...                       # the connector's records flow
        worker.kill()             # as a crash would (SIGKILL), then
        worker.start()            # the same worker again: its offsets file is kept

``source`` is the connector's properties; ``settings`` are more worker
properties, as a user writes them (``producer.interceptor.classes=...``: Connect
passes ``producer.``-prefixed settings to the connectors' producers). The worker
binds its REST listener to 127.0.0.1 on a free port, keeps its offsets in its
directory, and runs from the ``connect`` jar group (``infra/maven/connect.xml``)
plus ``extra_jars`` (the interceptor's).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from tidemark.environment import Environment
from tidemark.infra import jars
from tidemark.infra.exceptions import ServiceTimeout
from tidemark.infra.java import jvm_argv
from tidemark.infra.ports import HOST, free_port
from tidemark.infra.process import ManagedProcess, Service, wait_for

MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"


def _properties(values: Mapping[str, object]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


class ConnectWorker(Service):
    """One standalone worker running one connector."""

    def __init__(
        self,
        work_dir: Path,
        bootstrap_servers: str,
        connector: Mapping[str, object],
        settings: Mapping[str, object] | None = None,
        extra_jars: Sequence[str] = (),
        env: Environment | None = None,
        heap_mb: int = 256,
    ) -> None:
        self.env = env or Environment.from_env()
        self.work_dir = work_dir
        self.connector = dict(connector)
        self.port = free_port()
        worker = {
            "bootstrap.servers": bootstrap_servers,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.storage.file.filename": work_dir / "offsets",
            "offset.flush.interval.ms": 200,
            "listeners": f"http://{HOST}:{self.port}",
            "plugin.discovery": "only_scan",
            **(settings or {}),
        }
        work_dir.mkdir(parents=True, exist_ok=True)
        (work_dir / "worker.properties").write_text(_properties(worker))
        (work_dir / "connector.properties").write_text(_properties(self.connector))
        self._extra_jars, self._heap_mb = tuple(extra_jars), heap_mb
        self.process = self._process(extra_jars, heap_mb)

    def _process(self, extra_jars: Sequence[str], heap_mb: int) -> ManagedProcess:
        argv = jvm_argv(
            self.env,
            [*jars.classpath("connect", self.env), *extra_jars],
            MAIN_CLASS,
            str(self.work_dir / "worker.properties"),
            str(self.work_dir / "connector.properties"),
            heap_mb=heap_mb,
        )
        return ManagedProcess("connect", argv, self.work_dir / "connect.log")

    def start(self, timeout_s: float = 120) -> Self:
        if self.process.pid is not None:  # again after a stop or a kill: a fresh process
            self.process = self._process(self._extra_jars, self._heap_mb)
        self.process.start()
        if not wait_for(self._running, timeout_s, 0.2, self.process):
            self.stop()
            raise ServiceTimeout(
                f"Connect worker: connector {self.connector.get('name')} not RUNNING after "
                f"{timeout_s} s (log: {self.process.log_path})"
            )
        return self

    def _running(self) -> bool:
        """Whether the connector and its tasks report RUNNING on the REST API."""
        url = f"http://{HOST}:{self.port}/connectors/{self.connector['name']}/status"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                status = json.load(answer)
        except OSError:
            return False
        states = [status["connector"]["state"], *(t["state"] for t in status.get("tasks", []))]
        return len(states) > 1 and all(s == "RUNNING" for s in states)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no producer close, no shutdown mark."""
        self.process.kill()

    def stop(self) -> None:
        self.process.stop()


__all__ = ["MAIN_CLASS", "ConnectWorker"]
