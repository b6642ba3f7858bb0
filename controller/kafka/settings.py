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

- ``TIDEMARK_KAFKA_PROPERTIES``: a JSON object of any further librdkafka property
  (``ssl.ca.location``, ``ssl.keystore.location``, ``sasl.oauthbearer.*``, ``client.rack``,
  ...), given to every client after its kind's tuning;
- ``TIDEMARK_KAFKA_JAVA_PROPERTIES``: a JSON object of Java client properties for Spark's
  Kafka source, on top of those :func:`java_properties` derives from the librdkafka ones.

A Python program can give the same properties to one cluster's clients
(:func:`attach_properties`: ``tidemark.connect(kafka_properties=...)``), ``tidemark -X``
on the command line. Wherever they come from, the properties tidemark owns
(:data:`OWNED_PROPERTIES`: the bootstrap, idempotence, transactions, isolation, offsets,
callbacks) are refused by name, with the reason.

On a cluster the Spark executors need them too (``spark.executorEnv.*``: the
controller job's ``spark-submit`` entry forwards them, :func:`forwarded_environment`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import Any

from tidemark.controller.exceptions import InvalidConfigurationError
from tidemark.environment import (
    KAFKA_BOOTSTRAP,
    KAFKA_JAVA_PROPERTIES,
    KAFKA_PROPERTIES,
    ZK_AUTH,
    ZK_TLS_CA,
)
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
"""Kafka client property -> the environment variable of its own that carries it (this
module reads all but the bootstrap); ``tidemark -X`` sets any other property in
``TIDEMARK_KAFKA_PROPERTIES``."""

OWNED_PROPERTIES: Mapping[str, str] = {
    "bootstrap.servers": "give it as --bootstrap, $TIDEMARK_KAFKA_BOOTSTRAP or kafka_bootstrap",
    "enable.idempotence": "marks count records: a retried send must never duplicate one",
    "transactional.id": "each transactional writer and the timeline name their own",
    "transaction.timeout.ms": "a transactional writer's is WriterConfig.transaction_timeout_ms",
    "isolation.level": "readers and the controller read committed records only",
    "group.id": "each consumer's group is named by tidemark or by its reader group",
    "group.instance.id": "each consumer's group membership is tidemark's",
    "enable.auto.commit": "tidemark commits a reader's position (its stream cut) itself",
    "enable.auto.offset.store": "tidemark stores a reader's offsets itself",
    "enable.partition.eof": "the end of a sealed segment hands a reader over",
    "auto.offset.reset": "a truncation past a reader is reported, never skipped",
    "on_delivery": "tidemark's delivery reports track every record",
    "dr_cb": "tidemark's delivery reports track every record",
    "dr_msg_cb": "tidemark's delivery reports track every record",
    "delivery.report.only.error": "tidemark's delivery reports track every record",
    "error_cb": "tidemark reports a client's errors itself",
    "key.serializer": "tidemark writes the records' bytes",
    "value.serializer": "tidemark writes the records' bytes",
    "key.deserializer": "tidemark reads the records' bytes",
    "value.deserializer": "tidemark reads the records' bytes",
}
"""Client properties tidemark sets itself and relies on (name -> why): refused wherever a
user adds properties (``-X``, the environment, ``kafka_properties``)."""

_lock = threading.Lock()
_attached: dict[str, tuple[dict[str, Any], int]] = {}
"""bootstrap -> (the properties its clients get in this process, how many attached them)."""

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
    """The security and property variables that are set (Kafka's, ZooKeeper's CA and
    principal), to give a cluster's executors (``spark.executorEnv.<name>``): their
    Python workers build clients too."""
    env = os.environ if environ is None else environ
    names = (
        SECURITY_PROTOCOL,
        SASL_MECHANISM,
        SASL_USERNAME,
        SASL_PASSWORD,
        KAFKA_PROPERTIES,
        KAFKA_JAVA_PROPERTIES,
        ZK_TLS_CA,
        ZK_AUTH,
    )
    return {name: env[name] for name in names if env.get(name, "").strip()}


def checked_properties(
    properties: Mapping[str, Any], what: str, owned: Mapping[str, str] = OWNED_PROPERTIES
) -> dict[str, Any]:
    """A copy of ``properties`` (client property -> value), refused when a key is not a
    property name or is ``owned`` by tidemark; ``what`` names where they came from. The
    message names keys, never values (they may be passwords)."""
    checked: dict[str, Any] = {}
    for key, value in properties.items():
        if not isinstance(key, str) or not key.strip() or key != key.strip():
            raise InvalidConfigurationError(f"{what}: {key!r} is not a client property name")
        if key in owned:
            raise InvalidConfigurationError(
                f"{what}: {key} is set by tidemark ({owned[key]}); "
                f"tidemark owns {', '.join(sorted(owned))}"
            )
        if not isinstance(value, str | int | float | bool):
            raise InvalidConfigurationError(f"{what}: {key} must be a string, number or boolean")
        checked[key] = value
    return checked


def environment_properties(
    name: str = KAFKA_PROPERTIES, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The properties of the JSON object in the variable ``name`` (unset or empty: none)."""
    env = os.environ if environ is None else environ
    text = env.get(name, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        # the value is not quoted: it may hold passwords
        raise InvalidConfigurationError(
            f'${name} must be a JSON object of client properties, e.g. {{"ssl.ca.location": '
            '"/etc/kafka/ca.pem"}'
        )
    owned = OWNED_JAVA_PROPERTIES if name == KAFKA_JAVA_PROPERTIES else OWNED_PROPERTIES
    return checked_properties(value, f"${name}", owned)


def attach_properties(bootstrap: str, properties: Mapping[str, Any]) -> None:
    """Give every client of this process connected to ``bootstrap`` ``properties`` until
    :func:`detach_properties` (a :class:`tidemark.Connection`'s ``kafka_properties``). A
    second attach with other properties for the same bootstrap is refused: one process
    speaks to one cluster one way."""
    checked = checked_properties(properties, "kafka_properties")
    with _lock:
        held, count = _attached.get(bootstrap, (checked, 0))
        if held != checked:
            raise InvalidConfigurationError(
                f"kafka_properties: the clients of {bootstrap} in this process already have "
                "other properties (another open connection): close it first"
            )
        _attached[bootstrap] = (held, count + 1)


def detach_properties(bootstrap: str) -> None:
    """Undo one :func:`attach_properties` for ``bootstrap`` (none left: nothing)."""
    with _lock:
        held, count = _attached.get(bootstrap, ({}, 0))
        if count > 1:
            _attached[bootstrap] = (held, count - 1)
        else:
            _attached.pop(bootstrap, None)


def user_properties(bootstrap: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The properties a user added for ``bootstrap``'s clients: the environment's, then
    those attached in this process (which win)."""
    with _lock:
        attached = dict(_attached.get(bootstrap, ({}, 0))[0])
    return {**environment_properties(KAFKA_PROPERTIES, environ), **attached}


def client_config(bootstrap: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``bootstrap.servers``, the security settings and the user's properties
    (:func:`user_properties`), for any confluent-kafka client."""
    return {
        "bootstrap.servers": bootstrap,
        **security_config(environ),
        **user_properties(bootstrap, environ),
    }


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


OWNED_JAVA_PROPERTIES: Mapping[str, str] = {
    **OWNED_PROPERTIES,
    "interceptor.classes": "Spark's Kafka source runs no interceptors",
}
"""Java client properties tidemark owns in a Spark Kafka source (name -> why)."""

SAME_NAME_PROPERTIES = frozenset(
    {
        "security.protocol",
        "client.id",
        "client.rack",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.cipher.suites",
        "ssl.endpoint.identification.algorithm",
        "sasl.kerberos.service.name",
        "request.timeout.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "socket.connection.setup.timeout.ms",
        "socket.connection.setup.timeout.max.ms",
        "metadata.max.age.ms",
        "retry.backoff.ms",
    }
)
"""librdkafka properties that mean the same under the same name in Java's client (a
PKCS#12 keystore is read by both)."""


def java_properties(config: Mapping[str, Any]) -> dict[str, str]:
    """The Java client properties that say what librdkafka's ``config`` says: the
    same-named ones (:data:`SAME_NAME_PROPERTIES`), the SASL principal as a JAAS line,
    a PEM CA (``ssl.ca.location`` / ``ssl.ca.pem``) as a PEM truststore, a PEM client
    certificate (``ssl.certificate.pem`` + ``ssl.key.pem``, or the files
    ``ssl.certificate.location`` + ``ssl.key.location``) as a PEM keystore. Others
    have no Java equivalent: give those in ``TIDEMARK_KAFKA_JAVA_PROPERTIES``."""
    out = {key: str(config[key]) for key in SAME_NAME_PROPERTIES if key in config}
    if str(config.get("ssl.endpoint.identification.algorithm", "")).lower() == "none":
        out["ssl.endpoint.identification.algorithm"] = ""  # Java's "no host name check"
    mechanism = config.get("sasl.mechanism", config.get("sasl.mechanisms"))
    if mechanism is not None:
        out["sasl.mechanism"] = str(mechanism).upper()
    user, password = config.get("sasl.username"), config.get("sasl.password")
    if out.get("sasl.mechanism") in _JAAS_MODULES and user is not None and password is not None:
        quoted = [str(v).replace("\\", "\\\\").replace('"', '\\"') for v in (user, password)]
        out["sasl.jaas.config"] = (
            f"{_JAAS_MODULES[out['sasl.mechanism']]} required "
            f'username="{quoted[0]}" password="{quoted[1]}";'
        )
    if "ssl.ca.location" in config:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = str(config["ssl.ca.location"])
    elif "ssl.ca.pem" in config:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.certificates"] = str(config["ssl.ca.pem"])
    if "ssl.certificate.pem" in config and "ssl.key.pem" in config:
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.certificate.chain"] = str(config["ssl.certificate.pem"])
        out["ssl.keystore.key"] = str(config["ssl.key.pem"])
    elif "ssl.certificate.location" in config or "ssl.key.location" in config:
        out.update(_pem_files_keystore(config))
    return out


_PKCS8_HEADERS = ("-----BEGIN PRIVATE KEY-----", "-----BEGIN ENCRYPTED PRIVATE KEY-----")
"""The key formats Java's PEM keystore reads (PKCS#8, plain or encrypted)."""


def _pem_files_keystore(config: Mapping[str, Any]) -> dict[str, str]:
    """A PEM client certificate given as files (``ssl.certificate.location`` +
    ``ssl.key.location``) as Java's inline PEM keystore: Java reads no such pair of
    files, and inline it travels with the options to every Spark executor. Refused by
    name when half the pair is missing, a file unreadable or the key not PKCS#8."""
    missing = [k for k in ("ssl.certificate.location", "ssl.key.location") if k not in config]
    if missing:
        raise InvalidConfigurationError(
            f"a PEM client certificate needs both ssl.certificate.location and "
            f"ssl.key.location; {missing[0]} is not set"
        )
    if "ssl.keystore.location" in config:
        raise InvalidConfigurationError(
            "give the client certificate once: ssl.keystore.location or "
            "ssl.certificate.location with ssl.key.location, not both"
        )
    texts: dict[str, str] = {}
    for key in ("ssl.certificate.location", "ssl.key.location"):
        path = str(config[key])
        try:
            with open(path, encoding="ascii") as file:
                texts[key] = file.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidConfigurationError(f"{key}: cannot read {path!r}: {exc}") from exc
    if not texts["ssl.key.location"].lstrip().startswith(_PKCS8_HEADERS):
        raise InvalidConfigurationError(
            f"ssl.key.location: {str(config['ssl.key.location'])!r} is not a PKCS#8 PEM key, "
            "the only PEM key Java's Kafka client (Spark's Kafka source) reads; convert it "
            "with `openssl pkcs8 -topk8 -nocrypt -in <key> -out <key.pk8>` or give a PKCS#12 "
            "ssl.keystore.location"
        )
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": texts["ssl.certificate.location"],
        "ssl.keystore.key": texts["ssl.key.location"],
    }


def spark_kafka_options(
    environ: Mapping[str, str] | None = None, bootstrap: str | None = None
) -> dict[str, str]:
    """The same settings as options of Spark's Kafka source (``kafka.``-prefixed Java
    client properties: :func:`java_properties` of the librdkafka ones, then
    ``TIDEMARK_KAFKA_JAVA_PROPERTIES``); ``bootstrap``: with the properties attached for it."""
    config: dict[str, Any] = {**security_config(environ)}
    config.update(
        user_properties(bootstrap, environ)
        if bootstrap is not None
        else environment_properties(KAFKA_PROPERTIES, environ)
    )
    java = {**java_properties(config), **environment_properties(KAFKA_JAVA_PROPERTIES, environ)}
    return {f"kafka.{key}": str(value) for key, value in java.items()}


def spark_source_options(
    bootstrap: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``kafka.bootstrap.servers`` and :func:`spark_kafka_options`: a Spark Kafka source's
    connection."""
    return {"kafka.bootstrap.servers": bootstrap, **spark_kafka_options(environ, bootstrap)}


__all__ = [
    "OWNED_JAVA_PROPERTIES",
    "OWNED_PROPERTIES",
    "SAME_NAME_PROPERTIES",
    "SASL_MECHANISM",
    "SASL_PASSWORD",
    "SASL_USERNAME",
    "SECURITY_PROTOCOL",
    "attach_properties",
    "checked_overrides",
    "checked_properties",
    "client_config",
    "detach_properties",
    "environment_properties",
    "forwarded_environment",
    "java_properties",
    "security_config",
    "spark_kafka_options",
    "spark_source_options",
    "user_properties",
]
