"""ZooKeeper as local processes: a standalone server, or a three-node ensemble.

with ZooKeeperServer(tmp_path / "zk") as zk:
    with zookeeper_session(zk.connect_string) as client:  # tidemark.controller.zookeeper.session

with ZooKeeperEnsemble(tmp_path / "zk", size=3) as zk:   # a quorum, as deployed
    zk.restart_node(2)                                  # one node down and back
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from tidemark.environment import Environment
from tidemark.infra import jars
from tidemark.infra.exceptions import ServiceTimeout
from tidemark.infra.java import jvm_argv
from tidemark.infra.ports import HOST, ensure_free, free_port, free_ports
from tidemark.infra.process import ManagedProcess, Service, wait_for
from tidemark.infra.tls import PrivateCA

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


@dataclass(frozen=True)
class QuorumPeer:
    """One ensemble member's id and ports: clients, followers, leader election."""

    server_id: int
    client_port: int
    peer_port: int
    election_port: int

    def line(self) -> str:
        return (
            f"server.{self.server_id}={HOST}:{self.peer_port}:{self.election_port};"
            f"{HOST}:{self.client_port}"
        )


class ZooKeeperServer(Service):
    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        env: Environment | None = None,
        tie_to_owner: bool = True,
        quorum: tuple[QuorumPeer, ...] = (),
        server_id: int = 0,
        tls: PrivateCA | None = None,
        secure_port: int | None = None,
    ) -> None:
        """``quorum`` (with this server's ``server_id`` among them): an ensemble member.
        ``tls``: clients connect over TLS on ``secure_port`` with a certificate of that CA
        (:attr:`connect_string` names it; the clear port answers the health probes)."""
        self.env = env or Environment.from_env()
        self.tls = tls
        self.secure_port = (secure_port or free_port()) if tls else None
        self.data_dir = data_dir
        self.quorum = quorum
        self.server_id = server_id
        self.port = port or free_port()
        self.tie_to_owner = tie_to_owner
        self.process = self._process()

    def _process(self) -> ManagedProcess:
        name = f"zookeeper-{self.server_id}" if self.quorum else "zookeeper"
        return ManagedProcess(
            name, self._argv(), self.data_dir / "zookeeper.log", tie_to_owner=self.tie_to_owner
        )

    @property
    def connect_string(self) -> str:
        return f"{HOST}:{self.secure_port or self.port}"

    def _tls_lines(self) -> list[str]:
        if self.tls is None:
            return []
        server = self.tls.issue("zookeeper")
        return [
            f"secureClientPort={self.secure_port}",
            f"secureClientPortAddress={HOST}",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={server.keystore}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={self.tls.cert}",
            "ssl.trustStore.type=PEM",
            "ssl.clientAuth=none",  # clients prove who they are by other means
        ]

    def _argv(self) -> list[str]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "zoo.cfg"
        ensemble: list[str] = []
        if self.quorum:
            (self.data_dir / "data").mkdir(exist_ok=True)
            (self.data_dir / "data" / "myid").write_text(f"{self.server_id}\n")
            ensemble = [
                "initLimit=20",
                "syncLimit=10",
                "standaloneEnabled=false",
                *(peer.line() for peer in self.quorum),
            ]
        conf.write_text(
            "\n".join(
                [
                    *ensemble,
                    *self._tls_lines(),
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
            QUORUM_MAIN_CLASS if self.quorum else MAIN_CLASS,
            str(conf),
            heap_mb=256,
            jvm_options=("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"),
        )

    def start(self, timeout_s: float = 60.0) -> ZooKeeperServer:
        """Start (again after :meth:`stop`, over the same data); ``timeout_s=0``: no wait."""
        ensure_free(self.port, "zookeeper")
        if self.secure_port is not None:
            ensure_free(self.secure_port, "zookeeper (TLS)")
        if self.process.pid is not None:
            self.process = self._process()
        self.process.start()
        if timeout_s:
            self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        """Ready when the server answers ``ruok`` with ``imok`` (an ensemble member: when
        ``srvr`` names its mode, leader or follower, i.e. it serves in a quorum)."""
        probe = serving if self.quorum else ruok
        if not wait_for(lambda: probe(HOST, self.port), timeout_s, 0.2, self.process):
            raise ServiceTimeout(
                f"zookeeper on {self.connect_string} did not answer in {timeout_s:.0f} s; "
                f"see {self.process.log_path}"
            )

    def stop(self) -> None:
        self.process.stop()


def serving(host: str, port: int) -> bool:
    """True when the server at ``host:port`` serves clients as part of a quorum."""
    return mode(host, port) is not None


def mode(host: str, port: int) -> str | None:
    """The ensemble role ``srvr`` names for the server at ``host:port`` (``leader``,
    ``follower``); ``None`` while it answers none (not in a quorum, or not up)."""
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(b"srvr")
            answer = sock.recv(4096).decode(errors="replace")
    except OSError:
        return None
    found = re.search(r"^Mode: (\S+)", answer, re.MULTILINE)
    return None if found is None else found.group(1)


def ruok(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(b"ruok")
            return sock.recv(16) == b"imok"
    except OSError:
        return False


class ZooKeeperEnsemble(Service):
    """``size`` servers in one quorum on 127.0.0.1 (three: one may be down)."""

    def __init__(
        self,
        data_dir: Path,
        size: int = 3,
        env: Environment | None = None,
        tls: PrivateCA | None = None,
    ) -> None:
        """``tls``: every member takes clients over TLS (see :class:`ZooKeeperServer`)."""
        if size < 3 or size % 2 == 0:
            raise ValueError(f"an ensemble has an odd size of 3 or more, got {size}")
        ports = free_ports((4 if tls else 3) * size)
        peers = tuple(
            QuorumPeer(i + 1, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]) for i in range(size)
        )
        self.servers = [
            ZooKeeperServer(
                data_dir / f"node-{p.server_id}",
                port=p.client_port,
                env=env,
                quorum=peers,
                server_id=p.server_id,
                tls=tls,
                secure_port=ports[3 * size + p.server_id - 1] if tls else None,
            )
            for p in peers
        ]

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers)

    def start(self, timeout_s: float = 90.0) -> ZooKeeperEnsemble:
        """Start every member at once (none serves before a quorum is up), then wait."""
        for server in self.servers:
            server.start(timeout_s=0)
        for server in self.servers:
            server.wait_ready(timeout_s)
        return self

    def restart_node(self, server_id: int, down_s: float = 0.0, timeout_s: float = 60.0) -> None:
        """Stop member ``server_id``, leave it down ``down_s``, start it and wait for it."""
        server = self.servers[server_id - 1]
        server.stop()
        time.sleep(down_s)
        server.start(timeout_s)

    def stop(self) -> None:
        for server in self.servers:
            server.process.terminate()
        for server in self.servers:
            server.stop()
