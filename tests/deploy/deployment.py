"""The deployment-shaped environment the ``deploy`` tests run on, from local processes.

    with Deployment.start(tmp) as d:
        d.submit_controller("a")          # spark-submit, as docs/deploying.md shows
        with d.as_user("writer"): EventWriter(...)

Three ZooKeeper nodes in one ensemble (clients on their TLS ports; each writer
principal a ZooKeeper digest principal too, ``ZK_PASSWORDS``), three Kafka
brokers with SASL/SCRAM over TLS (``SASL_SSL``), both with certificates of a CA made
for the run (``tls``), and ACLs (one principal per role, plus ``mallory`` with none),
s3proxy as the
object store holding the Delta tables (the controller's checkpoint on a local
directory both drivers reach, see ``checkpoint_root``), and a Spark standalone
master with two workers. Everything binds 127.0.0.1 on free
ports, keeps its data under ``tmp`` and is stopped when the block ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tidemark.controller.kafka.admin import ensure_marks_topic, grant_tidemark_acls
from tidemark.controller.kafka.settings import SASL_PASSWORD, SASL_USERNAME, SECURITY_PROTOCOL
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.zookeeper.session import close_session, open_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import (
    DELTA_ROOT,
    KAFKA_BOOTSTRAP,
    KAFKA_PROPERTIES,
    ZK_AUTH,
    ZK_CONNECT,
    ZK_TLS_CA,
    overridden,
)
from tidemark.infra import jars
from tidemark.infra.kafka import KafkaCluster, KafkaSecurity
from tidemark.infra.process import ManagedProcess
from tidemark.infra.s3proxy import S3Proxy, bucket_path
from tidemark.infra.spark_cluster import SparkCluster, spark_home
from tidemark.infra.tls import PrivateCA
from tidemark.infra.zookeeper import ZooKeeperEnsemble

ROOT = Path(__file__).resolve().parents[2]
USERS = {
    "writer": "writer-pw",
    "controller": "controller-pw",
    "reader": "reader-pw",
    "mallory": "mallory-pw",
    "sparkjob": "sparkjob-pw",  # a Spark writer job's principal (writer role)
}
ADMIN_PASSWORD = "admin-pw"
ZK_PASSWORDS = {"writer": "writer-zk-pw", "sparkjob": "sparkjob-zk-pw"}
"""The writer principals' ZooKeeper digest passwords (``$TIDEMARK_ZK_AUTH``): each one's
writer ids are registered under an ACL only it may change. The other principals (the
controller's among them) are anonymous in ZooKeeper: registrations are world-readable."""
BUCKET = "lake"

SUBMIT_CONF = {
    # What docs/deploying.md passes to spark-submit besides the jars and the store.
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    # Small, for a 2-core machine running the whole deployment.
    "spark.driver.memory": "1g",
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    # Each application takes two cores of the workers' six, as teams sharing a cluster
    # cap theirs: the leader, its standby and a Spark writer job each get executors.
    "spark.cores.max": "2",
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


@dataclass
class Deployment:
    tmp: Path
    zookeeper: ZooKeeperEnsemble
    kafka: KafkaCluster
    s3: S3Proxy
    spark: SparkCluster
    tls: PrivateCA
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    drivers: dict[str, ManagedProcess] = field(default_factory=dict)
    stores: dict[str, ZooKeeperStore] = field(default_factory=dict)

    @classmethod
    def start(cls, tmp: Path) -> Deployment:
        """Start every service (in parallel where they do not depend on each other)."""
        tls = PrivateCA.create(tmp / "tls")
        zookeeper = ZooKeeperEnsemble(tmp / "zookeeper", tls=tls)
        kafka = KafkaCluster(
            tmp / "kafka",
            brokers=3,
            heap_mb=384,
            security=KafkaSecurity(ADMIN_PASSWORD, USERS),
            tls=tls,
        )
        s3 = S3Proxy(tmp / "s3", buckets=(BUCKET,), tls=tls)
        spark = SparkCluster(tmp / "spark", workers=2, cores=3, memory="2g")
        deployment = cls(tmp, zookeeper, kafka, s3, spark, tls)
        with contextlib.ExitStack() as stack:
            stack.callback(deployment.stop)
            zookeeper.start()
            s3.start()
            kafka.start()
            spark.start()
            deployment._grant()
            stack.pop_all()
        return deployment

    def _grant(self) -> None:
        with self.as_user("admin"):
            ensure_marks_topic(self.bootstrap, self.cluster, create=True)
            grant_tidemark_acls(
                self.kafka.client_config(),
                self.cluster.marks_topic,
                writers=["writer", "sparkjob"],
                controllers=["controller"],
                readers=["reader"],
            )

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap_servers

    @property
    def delta_root(self) -> str:
        return bucket_path(BUCKET, "tidemark")

    @property
    def checkpoint_root(self) -> str:
        """A file system every driver reaches (one machine here; HDFS or NFS on many).

        Not the object store: Spark's checkpoint lists a directory right after making
        it, and s3proxy's listings leave out the empty "directory" markers that S3A
        makes, so S3A reports the new directory missing (docs/deploying.md)."""
        return str(self.tmp / "checkpoints")

    def principal_env(self, user: str) -> dict[str, str]:
        """What an operator sets for a tidemark process running as ``user``."""
        passwords = {"admin": ADMIN_PASSWORD, **USERS}
        zookeeper = {ZK_AUTH: f"{user}:{ZK_PASSWORDS[user]}"} if user in ZK_PASSWORDS else {}
        return {
            SECURITY_PROTOCOL: self.kafka.protocol,
            SASL_USERNAME: user,
            SASL_PASSWORD: passwords[user],
            **zookeeper,
            **self.tls_environment(),
        }

    def tls_environment(self) -> dict[str, str]:
        """What makes a tidemark process trust the run's CA: Kafka's clients (librdkafka
        reads the PEM, Spark's source gets it as a PEM truststore) and ZooKeeper sessions."""
        return {
            KAFKA_PROPERTIES: json.dumps({"ssl.ca.location": str(self.tls.cert)}),
            ZK_TLS_CA: str(self.tls.cert),
        }

    def process_env(self, user: str) -> dict[str, str]:
        """A tidemark process's environment: services, principal, the store's credentials."""
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            KAFKA_BOOTSTRAP: self.bootstrap,
            ZK_CONNECT: self.zookeeper.connect_string,
            DELTA_ROOT: self.delta_root,
            **self.principal_env(user),
            **self.s3.reader_environment(),
        }

    def as_user(self, user: str) -> contextlib.AbstractContextManager[None]:
        """Clients built inside the block (in this process) connect as ``user``."""
        return overridden(self.principal_env(user))

    def store_as(self, user: str) -> ZooKeeperStore:
        """The metadata store through a ZooKeeper session of ``user``'s (its digest
        principal, if it has one), one per principal, as one process of that principal
        holds: the writers' registrations are made through it. Closed by :meth:`stop`."""
        if user not in self.stores:
            with self.as_user(user):
                client = open_session(self.zookeeper.connect_string)
            self.stores[user] = ZooKeeperStore(client, self.cluster.zk_root)
        return self.stores[user]

    def spark_submit_argv(self, user: str, script: Path, *args: str) -> list[str]:
        """``spark-submit <script> <args>`` to the standalone cluster as ``user``: the jars,
        the store's settings, and the principal handed to the executors' Python workers."""
        conf = {
            **SUBMIT_CONF,
            **self.s3.hadoop_conf(),
            **self.s3.spark_trust(),  # S3A over HTTPS: the JVMs trust the run's CA
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": str(ROOT),
            # The executors' Python workers are Kafka clients too (tidemark.jobs.lookups, the
            # tasks of a Spark writer job).
            **{f"spark.executorEnv.{k}": v for k, v in self.principal_env(user).items()},
        }
        return [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            self.spark.master_url,
            "--jars",
            ",".join(jars.spark_extra_jars(groups=("spark", "s3a"))),
            # in a file only its owner reads, not on the command line: passwords among them
            "--properties-file",
            str(self._properties_file(user, conf)),
            str(script),
            *args,
        ]

    def _properties_file(self, user: str, conf: dict[str, str]) -> Path:
        path = self.tmp / "submit" / f"{user}.properties"
        path.parent.mkdir(exist_ok=True)
        escaped = {key: value.replace("\\", "\\\\") for key, value in conf.items()}
        text = "".join(f"{key}={value}\n" for key, value in escaped.items())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        return path

    def submit_env(self, user: str) -> dict[str, str]:
        """A spark-submit driver's environment (client mode: the driver runs here)."""
        return {
            **self.process_env(user),
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }

    def submit_argv(self, instance: str, *options: str) -> list[str]:
        """``spark-submit jobs/controller_job.py`` as docs/deploying.md shows it."""
        return self.spark_submit_argv(
            "controller",
            ROOT / "jobs" / "controller_job.py",
            "--instance",
            instance,
            "--bootstrap",
            self.bootstrap,
            "--zk",
            self.zookeeper.connect_string,
            "--interval-ms",
            "1000",
            "--zk-session-timeout-ms",
            "4000",
            "--delta-root",
            self.delta_root,
            "--checkpoint-root",
            self.checkpoint_root,
            *options,
        )

    def submit_controller(self, instance: str, *options: str) -> ManagedProcess:
        """A controller driver (client mode: the driver runs here, executors on the workers)."""
        proc = ManagedProcess(
            f"driver-{instance}",
            self.submit_argv(instance, *options),
            self.tmp / f"driver-{instance}.log",
            env=self.submit_env("controller"),
            cwd=ROOT,
        )
        proc.start()
        self.drivers[instance] = proc
        return proc

    def kill_driver(self, instance: str) -> None:
        """kill -9 of a driver and its JVM (its process group): a crashed machine."""
        proc = self.drivers[instance]
        pid = proc.pid
        proc.kill()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, 9)

    def stop(self) -> None:
        for proc in self.drivers.values():
            proc.terminate()
        for instance, proc in self.drivers.items():
            proc.stop(timeout_s=30)
            self.kill_driver(instance)
        for store in self.stores.values():
            with contextlib.suppress(Exception):
                close_session(store.client)
        self.stores.clear()
        for service in (self.spark, self.kafka, self.s3, self.zookeeper):
            with contextlib.suppress(Exception):
                service.stop()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
