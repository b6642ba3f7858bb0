"""Apache Kafka in KRaft mode as local processes: one broker, or three.

    with KafkaCluster(tmp_path / "kafka", brokers=3) as kafka:
        Producer({"bootstrap.servers": kafka.bootstrap_servers})

Every node runs as broker and controller (combined mode) with a static
controller quorum.

A deployment option, ``security=KafkaSecurity(admin_password, users)``: clients
must authenticate with SASL/SCRAM-SHA-512 (``SASL_PLAINTEXT``), the brokers run
Kafka's ``StandardAuthorizer`` (a principal without an ACL may do nothing), and
``admin`` is the one super user (brokers talk to each other as ``admin``; the
controller listener takes SASL/PLAIN with the same credentials). The users'
SCRAM credentials are written when the storage is formatted; ACLs are granted
afterwards (``tidemark.controller.kafka.admin.grant_tidemark_acls``).

Another, ``tls=PrivateCA(...)`` (:mod:`tidemark.infra.tls`): the broker listener speaks
TLS with a certificate of that CA (``SSL``, or ``SASL_SSL`` with ``security``), and
clients trust the CA (``ssl.ca.location``).

With ``tls`` and ``client_auth=True`` instead of ``security`` (mutual TLS): every
listener, the controllers' too, takes only clients with a certificate of that CA
(``ssl.client.auth=required``); a client's principal is its certificate's subject,
``User:CN=<name>`` (:meth:`PrivateCA.issue_client`). The brokers run the
``StandardAuthorizer`` with two super users, the brokers themselves (``User:CN=kafka``,
their server certificate) and ``User:CN=admin``; any other principal may do only what
ACLs grant it.

With three nodes, topics default to replication factor 3 with
``min.insync.replicas=2``; the transaction state log and the offsets topic are
sized to the broker count, so transactions work on either size.
"""

from __future__ import annotations

import base64
import dataclasses
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidemark.environment import Environment
from tidemark.infra import jars
from tidemark.infra.exceptions import ServiceError, ServiceTimeout
from tidemark.infra.java import argfile_argv, jvm_argv, settle_archive
from tidemark.infra.ports import HOST, ensure_free, free_ports
from tidemark.infra.process import ManagedProcess, Service, key_line, wait_for
from tidemark.infra.tls import PrivateCA

MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
LOG4J_CONF = Path(__file__).resolve().parent / "conf" / "kafka-log4j2.properties"


SCRAM = "SCRAM-SHA-512"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
BROKER_PRINCIPAL = "User:CN=kafka"
"""The brokers' principal under ``client_auth``: their server certificate's subject."""
ADMIN_PRINCIPAL = "User:CN=admin"
"""The super user a client certificate for ``admin`` is, under ``client_auth``."""
_UNSAFE = '\\"=,]'
"""Characters a password may not hold: they would break the JAAS and --add-scram syntax."""


@dataclass(frozen=True)
class KafkaSecurity:
    """SASL/SCRAM users of a local cluster (name -> password), ``admin`` the super user."""

    admin_password: str
    users: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, password in {"admin": self.admin_password, **self.users}.items():
            if not name.isidentifier() or not password or any(c in password for c in _UNSAFE):
                raise ValueError(f"SCRAM user {name!r}: a plain name, a password without {_UNSAFE}")

    def scram_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments that create every user's credentials."""
        out: list[str] = []
        for name, password in {"admin": self.admin_password, **self.users}.items():
            out += ["--add-scram", f"{SCRAM}=[name={name},password={password}]"]
        return out


@dataclass(frozen=True)
class KafkaNode:
    node_id: int
    broker_port: int
    controller_port: int
    data_dir: Path
    process: ManagedProcess

    @property
    def address(self) -> str:
        return f"{HOST}:{self.broker_port}"


def new_cluster_id() -> str:
    """A KRaft cluster id (22 url-safe base64 characters) that cannot read as a flag."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def existing_cluster_id(data_dir: Path) -> str | None:
    """The cluster id the nodes under ``data_dir`` were formatted with (``None``: new).

    A restart over the same data must reuse it: Kafka refuses a log directory
    formatted for another cluster.
    """
    for meta in sorted(data_dir.glob("node-*/logs/meta.properties")):
        for line in meta.read_text(errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "cluster.id" and value.strip():
                return value.strip()
    return None


class KafkaCluster(Service):
    def __init__(
        self,
        data_dir: Path,
        brokers: int = 1,
        env: Environment | None = None,
        tie_to_owner: bool = True,
        heap_mb: int = 512,
        ports: list[int] | None = None,
        security: KafkaSecurity | None = None,
        tls: PrivateCA | None = None,
        client_auth: bool = False,
    ) -> None:
        if brokers not in (1, 3):
            raise ValueError(f"brokers must be 1 or 3, got {brokers}")
        if client_auth and (tls is None or security is not None):
            raise ValueError("client_auth: client certificates need tls, and replace security")
        self.env = env or Environment.from_env()
        self.data_dir = data_dir
        self.size = brokers
        self.heap_mb = heap_mb
        self.security = security
        self.tls = tls
        self.client_auth = client_auth
        """Whether every listener requires a client certificate (the principal's name)."""
        self.protocol = ("SASL_" if security else "") + ("SSL" if tls else "PLAINTEXT")
        """The brokers' listener: ``SASL_SSL``, ``SSL``, ``SASL_PLAINTEXT`` or ``PLAINTEXT``."""
        self.cluster_id = existing_cluster_id(data_dir) or new_cluster_id()
        picked = ports or free_ports(2 * brokers)
        self.nodes = [
            KafkaNode(
                node_id=i + 1,
                broker_port=picked[2 * i],
                controller_port=picked[2 * i + 1],
                data_dir=data_dir / f"node-{i + 1}",
                process=ManagedProcess(
                    f"kafka-{i + 1}",
                    [],
                    data_dir / f"node-{i + 1}" / "kafka.log",
                    tie_to_owner=tie_to_owner,
                ),
            )
            for i in range(brokers)
        ]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def _properties(self, node: KafkaNode) -> str:
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in self.nodes)
        replicas = self.size
        min_isr = 2 if self.size >= 3 else 1
        props = {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{HOST}:{node.broker_port},"
            f"CONTROLLER://{HOST}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{node.broker_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": node.data_dir / "logs",
            "num.partitions": 1,
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": 10,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": "false",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            # Keep every record whatever its time: tests and examples write event times
            # near 1970, which the default seven days would delete within a check.
            # A topic's own retention.ms still applies.
            "log.retention.ms": -1,
            "log.retention.check.interval.ms": 5000,
        }
        if self.tls is not None:
            props.update(self._tls_properties(node))
        if self.client_auth:
            props.update(self._client_auth_properties(node))
        if self.security is not None:
            props.update(self._secure_properties(node))
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _listeners(self, node: KafkaNode, controller: str) -> dict[str, object]:
        """The broker listener on :attr:`protocol`, the controller's on ``controller``."""
        name = self.protocol
        return {
            "listeners": f"{name}://{HOST}:{node.broker_port},"
            f"CONTROLLER://{HOST}:{node.controller_port}",
            "advertised.listeners": f"{name}://{HOST}:{node.broker_port}",
            "inter.broker.listener.name": name,
            "listener.security.protocol.map": f"{name}:{name},CONTROLLER:{controller}",
        }

    def _tls_properties(self, node: KafkaNode) -> dict[str, object]:
        """The broker listener over TLS with a certificate of the private CA (the brokers
        trust it too, as each other's clients)."""
        assert self.tls is not None
        server = self.tls.issue("kafka")
        return {
            **self._listeners(node, "PLAINTEXT"),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": server.keystore,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": self.tls.cert,
        }

    def _client_auth_properties(self, node: KafkaNode) -> dict[str, object]:
        """Every listener over TLS asking for a certificate of the private CA: the
        brokers and controllers know each other by their server certificate's subject."""
        return {
            **self._listeners(node, "SSL"),
            "ssl.client.auth": "required",
            "authorizer.class.name": AUTHORIZER,
            "super.users": f"{BROKER_PRINCIPAL};{ADMIN_PRINCIPAL}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def _secure_properties(self, node: KafkaNode) -> dict[str, object]:
        assert self.security is not None
        pw = self.security.admin_password
        return {
            **self._listeners(node, "SASL_PLAINTEXT"),
            "sasl.enabled.mechanisms": SCRAM,
            "sasl.mechanism.inter.broker.protocol": SCRAM,
            f"listener.name.{self.protocol.lower()}.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="admin" password="{pw}";'
            ),
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="admin" password="{pw}" user_admin="{pw}";'
            ),
            "authorizer.class.name": AUTHORIZER,
            "super.users": "User:admin",
            "allow.everyone.if.no.acl.found": "false",
        }

    def client_config(self, user: str = "admin") -> dict[str, str]:
        """librdkafka settings to connect as ``user`` (``bootstrap.servers`` included;
        under ``client_auth``, ``user``'s client certificate)."""
        config = {"bootstrap.servers": self.bootstrap_servers}
        if self.tls is not None:
            config.update(
                {"security.protocol": self.protocol, "ssl.ca.location": str(self.tls.cert)}
            )
        if self.tls is not None and self.client_auth:
            issued = self.tls.issue_client(user)
            config.update(
                {"ssl.certificate.location": str(issued.cert), "ssl.key.location": str(issued.key)}
            )
        if self.security is not None:
            passwords = {"admin": self.security.admin_password, **self.security.users}
            config.update(
                {
                    "security.protocol": self.protocol,
                    "sasl.mechanism": SCRAM,
                    "sasl.username": user,
                    "sasl.password": passwords[user],
                }
            )
        return config

    def _argv(self, node: KafkaNode, main: str, *args: str) -> list[str]:
        return jvm_argv(
            self.env,
            jars.classpath("kafka", self.env),
            main,
            *args,
            heap_mb=self.heap_mb,
            # C1 alone: a local broker's JIT work is mostly its start, on two cores
            jvm_options=(
                f"-Dlog4j2.configurationFile={LOG4J_CONF}",
                "-XX:+UseG1GC",
                "-XX:TieredStopAtLevel=1",
            ),
        )

    def _format_all(self, configs: list[Path]) -> None:
        """Format every node's storage at once (a JVM start each, so in parallel)."""
        running = []
        for node, config in zip(self.nodes, configs, strict=True):
            argv = self._argv(
                node,
                STORAGE_TOOL,
                "format",
                "--cluster-id",
                self.cluster_id,
                "--config",
                str(config),
                "--ignore-formatted",
                *(self.security.scram_arguments() if self.security else ()),
            )
            proc = subprocess.Popen(
                # the SCRAM passwords in a file, not on the process list
                argfile_argv(argv, node.data_dir / "format.args"),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            running.append((node, argv, proc))
        for node, argv, proc in running:
            out, _ = proc.communicate(timeout=120)
            (node.data_dir / "format.args").unlink(missing_ok=True)
            settle_archive(argv, proc.returncode)
            if proc.returncode != 0:
                log_path = node.data_dir / "format.log"
                log_path.write_text(out)
                raise ServiceError(
                    f"kafka-{node.node_id}: formatting {node.data_dir} failed: "
                    f"{key_line(out)} (full output: {log_path})"
                )

    def start(self, timeout_s: float = 90.0) -> KafkaCluster:
        for node in self.nodes:
            ensure_free(node.broker_port, f"kafka-{node.node_id}")
            ensure_free(node.controller_port, f"kafka-{node.node_id} controller")
        configs = []
        for node in self.nodes:
            node.data_dir.mkdir(parents=True, exist_ok=True)
            config = node.data_dir / "server.properties"
            config.write_text(self._properties(node))
            configs.append(config)
            node.process.argv = self._argv(node, MAIN_CLASS, str(config))
        self._format_all(configs)
        for node in self.nodes:
            node.process.start()
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        """Ready when the metadata lists every broker."""
        # confluent_kafka: off the path of tidemark --help, which loads this module
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.client_config(), "log_level": 0})

        def listed() -> bool:
            try:
                return len(admin.list_topics(timeout=2).brokers) == self.size
            except Exception:
                return False

        if not wait_for(listed, timeout_s, 0.3, *(n.process for n in self.nodes)):
            raise ServiceTimeout(
                f"kafka ({self.bootstrap_servers}) did not list {self.size} brokers in "
                f"{timeout_s:.0f} s; see {', '.join(str(n.process.log_path) for n in self.nodes)}"
            )

    def stop_node(self, node_id: int) -> None:
        self.nodes[node_id - 1].process.stop()

    def start_node(self, node_id: int, timeout_s: float = 90.0) -> None:
        """Start node ``node_id`` again after :meth:`stop_node` (same ports, same data) and
        wait until the metadata lists every broker."""
        node = self.nodes[node_id - 1]
        old = node.process
        argv = self._argv(node, MAIN_CLASS, str(node.data_dir / "server.properties"))
        process = ManagedProcess(old.name, argv, old.log_path, tie_to_owner=old.tie_to_owner)
        self.nodes[node_id - 1] = dataclasses.replace(node, process=process)
        process.start()
        self.wait_ready(timeout_s)

    def stop(self) -> None:
        """Stop every node at once: one by one, the last would wait for a lost quorum."""
        for node in self.nodes:
            node.process.terminate()
        for node in self.nodes:
            node.process.stop(timeout_s=10)
