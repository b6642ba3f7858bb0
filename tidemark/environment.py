"""Every environment variable tidemark reads, in one place.

    >>> env = Environment.from_env({"TIDEMARK_KAFKA_BOOTSTRAP": "k1:9092"})
    >>> env.kafka_bootstrap
    'k1:9092'

Set one of the service variables to point tidemark (the CLI, the demo and the
test suite) at an existing service instead of starting a local process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

KAFKA_BOOTSTRAP = "TIDEMARK_KAFKA_BOOTSTRAP"
ZK_CONNECT = "TIDEMARK_ZK_CONNECT"
SPARK_MASTER = "TIDEMARK_SPARK_MASTER"
POSTGRES_DSN = "TIDEMARK_POSTGRES_DSN"
DELTA_ROOT = "TIDEMARK_DELTA_ROOT"
HOME = "TIDEMARK_HOME"
CACHE = "TIDEMARK_CACHE"
MAVEN = "TIDEMARK_MAVEN"
JAVA = "TIDEMARK_JAVA"
TIME_SERVICE = "TIDEMARK_TIME_SERVICE"
"""A running `tidemark serve` (base URL): lookups ask it first, else read Delta."""
PYTHON_ZYGOTE = "TIDEMARK_PYTHON_ZYGOTE"
"""Any value but empty or ``0``: `tidemark controller run` on a local master forks Spark's
driver-side Python processes from a warm interpreter (:mod:`tidemark.python_zygote`)."""
KAFKA_SECURITY_PROTOCOL = "TIDEMARK_KAFKA_SECURITY_PROTOCOL"
"""``PLAINTEXT`` (default), ``SASL_PLAINTEXT``, ``SASL_SSL`` or ``SSL``."""
KAFKA_SASL_MECHANISM = "TIDEMARK_KAFKA_SASL_MECHANISM"
"""``SCRAM-SHA-512`` (default with SASL), ``SCRAM-SHA-256`` or ``PLAIN``."""
KAFKA_SASL_USERNAME = "TIDEMARK_KAFKA_SASL_USERNAME"
KAFKA_SASL_PASSWORD = "TIDEMARK_KAFKA_SASL_PASSWORD"
KAFKA_PROPERTIES = "TIDEMARK_KAFKA_PROPERTIES"
"""A JSON object of further librdkafka properties (``ssl.*``, ``sasl.*``, ...) every
tidemark Kafka client gets; those tidemark owns are refused by name."""
KAFKA_JAVA_PROPERTIES = "TIDEMARK_KAFKA_JAVA_PROPERTIES"
"""A JSON object of Java Kafka client properties for Spark's Kafka source (they win over
those derived from the librdkafka settings)."""
ZK_TLS_CA = "TIDEMARK_ZK_TLS_CA"
"""A CA certificate (PEM): set, ZooKeeper sessions speak TLS and verify the server's
certificate and host name against it (give the servers' secure client ports)."""
ZK_AUTH = "TIDEMARK_ZK_AUTH"
"""``user:password``: ZooKeeper sessions authenticate with the digest scheme as that
principal, and the writer registrations they make are writable by it alone."""
SERVE_TOKEN = "TIDEMARK_SERVE_TOKEN"
"""The bearer token ``tidemark serve`` requires (else ``--token-file``; unset: none)."""
SERVICE_TIMEOUT_MS = "TIDEMARK_SERVICE_TIMEOUT_MS"
"""How long a CLI verb waits for ZooKeeper's session or Kafka's answer before it reports the
service unavailable (default 10 s for ZooKeeper, 30 s for Kafka)."""
NEMESIS_SEED = "TIDEMARK_NEMESIS_SEED"
"""The nemesis test's seed (tests/deploy/test_nemesis.py): set, it replays that schedule."""
NEMESIS_SECONDS = "TIDEMARK_NEMESIS_SECONDS"
"""How long the nemesis test injects faults (default 300)."""

ALL = (
    KAFKA_BOOTSTRAP,
    ZK_CONNECT,
    SPARK_MASTER,
    POSTGRES_DSN,
    DELTA_ROOT,
    HOME,
    CACHE,
    MAVEN,
    JAVA,
    TIME_SERVICE,
    PYTHON_ZYGOTE,
    KAFKA_SECURITY_PROTOCOL,
    KAFKA_SASL_MECHANISM,
    KAFKA_SASL_USERNAME,
    KAFKA_SASL_PASSWORD,
    KAFKA_PROPERTIES,
    KAFKA_JAVA_PROPERTIES,
    ZK_TLS_CA,
    ZK_AUTH,
    SERVE_TOKEN,
    SERVICE_TIMEOUT_MS,
)


@dataclass(frozen=True)
class Environment:
    """The values of the variables above; ``None`` where unset or empty."""

    kafka_bootstrap: str | None = None
    zk_connect: str | None = None
    spark_master: str | None = None
    postgres_dsn: str | None = None
    delta_root: str | None = None
    home: Path = Path.home() / ".tidemark"
    cache: Path = Path.home() / ".cache" / "tidemark"
    maven: str = "mvn"
    java: str = "java"
    time_service: str | None = None
    python_zygote: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Environment:
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        defaults = cls()
        return cls(
            kafka_bootstrap=get(KAFKA_BOOTSTRAP),
            zk_connect=get(ZK_CONNECT),
            spark_master=get(SPARK_MASTER),
            postgres_dsn=get(POSTGRES_DSN),
            delta_root=get(DELTA_ROOT),
            home=Path(get(HOME) or defaults.home).expanduser(),
            cache=Path(get(CACHE) or defaults.cache).expanduser(),
            maven=get(MAVEN) or defaults.maven,
            java=get(JAVA) or defaults.java,
            time_service=get(TIME_SERVICE),
            python_zygote=get(PYTHON_ZYGOTE) not in (None, "0"),
        )


@contextlib.contextmanager
def overridden(values: Mapping[str, str]) -> Iterator[None]:
    """This process's environment with ``values`` set inside the block, as it was after
    (the CLI's connection flags, a test acting as another principal)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
