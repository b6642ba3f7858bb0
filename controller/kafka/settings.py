"""How every tidemark Kafka client connects: bootstrap servers plus the security settings.

    Producer({**client_config("kafka:9093"), "acks": "all"})
    spark.readStream.format("kafka").options(**spark_source_options("kafka:9093")) ...

Every Kafka client tidemark creates gets its connection settings here (the
architecture test, ``tests/unit/test_architecture.py``, refuses them anywhere else).

The security settings come from the environment (names in :mod:`tidemark.environment`),
read here and nowhere else,
so every client of one process (writers, readers, the control plane, the
controller job and its Spark workers, the timeline) authenticates the same way:

- ``TIDEMARK_KAFKA_SECURITY_PROTOCOL``: ``PLAINTEXT`` (default), ``SASL_PLAINTEXT``,
  ``SASL_SSL`` or ``SSL``;
- ``TIDEMARK_KAFKA_SASL_MECHANISM``: ``SCRAM-SHA-512`` (default with SASL),
  ``SCRAM-SHA-256`` or ``PLAIN``;
- ``TIDEMARK_KAFKA_SASL_USERNAME`` / ``TIDEMARK_KAFKA_SASL_PASSWORD``: the principal.

On a cluster the Spark executors need them too (``spark.executorEnv.*``: the
controller job's ``spark-submit`` entry forwards them, :func:`forwarded_environment`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tidemark.controller.exceptions import InvalidConfigurationError
from tidemark.environment import KAFKA_BOOTSTRAP
from tidemark.environment import KAFKA_SASL_MECHANISM as SASL_MECHANISM
from tidemark.environment import KAFKA_SASL_PASSWORD as SASL_PASSWORD
from tidemark.environment import KAFKA_SASL_USERNAME as SASL_USERNAME
from tidemark.environment import KAFKA_SECURITY_PROTOCOL as SECURITY_PROTOCOL
from tidemark.errors import ConfigurationError

PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")

CLIENT_PROPERTY_VARIABLES = {
    "bootstrap.servers": KAFKA_BOOTSTRAP,
    "security.protocol": SECURITY_PROTOCOL,
    "sasl.mechanism": SASL_MECHANISM,
    "sasl.mechanisms": SASL_MECHANISM,
    "sasl.username": SASL_USERNAME,
    "sasl.password": SASL_PASSWORD,
}
"""Kafka client property -> the environment variable that carries it (this module reads
all but the bootstrap): what ``tidemark -X key=value`` may set."""

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def security_config(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """librdkafka security settings from the environment (empty: plaintext)."""
    env = os.environ if environ is None else environ
    protocol = env.get(SECURITY_PROTOCOL, "").strip().upper() or "PLAINTEXT"
    if protocol not in PROTOCOLS:
        raise InvalidConfigurationError(
            f"{SECURITY_PROTOCOL}={protocol!r} is not one of: {', '.join(PROTOCOLS)}"
        )
    if protocol == "PLAINTEXT":
        return {}
    config = {"security.protocol": protocol}
    if protocol.startswith("SASL"):
        mechanism = env.get(SASL_MECHANISM, "").strip().upper() or MECHANISMS[0]
        if mechanism not in MECHANISMS:
            raise InvalidConfigurationError(
                f"{SASL_MECHANISM}={mechanism!r} is not one of: {', '.join(MECHANISMS)}"
            )
        user, password = env.get(SASL_USERNAME, ""), env.get(SASL_PASSWORD, "")
        if not user or not password:
            raise InvalidConfigurationError(
                f"{SECURITY_PROTOCOL}={protocol} needs {SASL_USERNAME} and {SASL_PASSWORD}"
            )
        config.update(
            {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
        )
    return config


def forwarded_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The security variables that are set, to give a cluster's executors
    (``spark.executorEnv.<name>``): their Python workers build clients here too."""
    env = os.environ if environ is None else environ
    names = (SECURITY_PROTOCOL, SASL_MECHANISM, SASL_USERNAME, SASL_PASSWORD)
    return {name: env[name] for name in names if env.get(name, "").strip()}


def client_config(bootstrap: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``bootstrap.servers`` and the security settings, for any confluent-kafka client."""
    return {"bootstrap.servers": bootstrap, **security_config(environ)}


def checked_overrides(
    overrides: Mapping[str, Any],
    reserved: frozenset[str],
    *,
    what: str,
    error: type[ConfigurationError],
    hint: str = "",
) -> dict[str, Any]:
    """A copy of a client's ``overrides`` (librdkafka settings a user adds), refused with
    ``error`` when they set a key of ``reserved``: one tidemark sets itself and relies on.
    ``what`` names the option in the message, ``hint`` is added at its end."""
    taken = sorted(reserved & set(overrides))
    if taken:
        raise error(
            f"{what} may not set {taken}; tidemark sets {', '.join(sorted(reserved))} itself{hint}"
        )
    return dict(overrides)


def spark_kafka_options(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The same settings as options of Spark's Kafka source (``kafka.``-prefixed, Java JAAS)."""
    config = security_config(environ)
    if not config:
        return {}
    options = {"kafka.security.protocol": config["security.protocol"]}
    if "sasl.mechanism" in config:
        user = config["sasl.username"].replace("\\", "\\\\").replace('"', '\\"')
        password = config["sasl.password"].replace("\\", "\\\\").replace('"', '\\"')
        options["kafka.sasl.mechanism"] = config["sasl.mechanism"]
        options["kafka.sasl.jaas.config"] = (
            f"{_JAAS_MODULES[config['sasl.mechanism']]} required "
            f'username="{user}" password="{password}";'
        )
    return options


def spark_source_options(
    bootstrap: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``kafka.bootstrap.servers`` and :func:`spark_kafka_options`: a Spark Kafka source's
    connection."""
    return {"kafka.bootstrap.servers": bootstrap, **spark_kafka_options(environ)}


__all__ = [
    "SASL_MECHANISM",
    "SASL_PASSWORD",
    "SASL_USERNAME",
    "SECURITY_PROTOCOL",
    "checked_overrides",
    "client_config",
    "forwarded_environment",
    "security_config",
    "spark_kafka_options",
    "spark_source_options",
]
