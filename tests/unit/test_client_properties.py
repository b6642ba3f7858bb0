"""Any Kafka client property on every configuration path (``-X``, the environment, the
Python config, Spark's options), and the ones tidemark owns refused by name (no broker)."""

from __future__ import annotations

import argparse
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.cli.connection import connection_environment, connection_settings
from tidemark.cli.main import main
from tidemark.controller.kafka import roles
from tidemark.controller.kafka.settings import (
    OWNED_PROPERTIES,
    SASL_PASSWORD,
    SASL_USERNAME,
    SECURITY_PROTOCOL,
    client_config,
    environment_properties,
    forwarded_environment,
    java_properties,
    spark_source_options,
)
from tidemark.environment import KAFKA_JAVA_PROPERTIES, KAFKA_PROPERTIES
from tidemark.errors import ConfigurationError
from tidemark.pipelines.connection import ConnectionConfig, connect
from tidemark.pipelines.writing.config import WriterConfig

pytestmark = pytest.mark.unit

TLS = {"ssl.ca.location": "/run/ca.pem", "ssl.endpoint.identification.algorithm": "https"}


def flags(*properties: str) -> argparse.Namespace:
    return argparse.Namespace(
        client_properties=list(properties), connect_bootstrap=None, connect_zk=None
    )


def test_any_property_given_with_x_reaches_every_client_while_the_verb_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KAFKA_PROPERTIES, json.dumps({"client.rack": "r1"}))
    args = flags("ssl.ca.location=/run/ca.pem", "security.protocol=SSL", "socket.timeout.ms=9")
    with connection_environment(args):
        config = client_config("k:9093")
        assert config["ssl.ca.location"] == "/run/ca.pem"
        assert config["socket.timeout.ms"] == "9"
        assert config["client.rack"] == "r1"  # -X adds to the environment's own
        assert config["security.protocol"] == "SSL"
        writer = WriterConfig().producer_settings("k:9093", client_id="w")
        assert writer["ssl.ca.location"] == "/run/ca.pem"
        assert writer["enable.idempotence"] is True
    assert "ssl.ca.location" not in client_config("k:9093")
    assert json.loads(os.environ[KAFKA_PROPERTIES]) == {"client.rack": "r1"}


# bootstrap.servers: the one owned property -X sets, as --bootstrap does
@pytest.mark.parametrize("key", sorted(set(OWNED_PROPERTIES) - {"bootstrap.servers"}))
def test_a_property_tidemark_owns_is_refused_by_name_on_the_command_line(
    key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-X", f"{key}=secret-value", "scope", "list"]) == 1
    err = capsys.readouterr().err
    assert f"{key} is set by tidemark" in err
    assert "secret-value" not in err


def test_x_without_a_value_names_the_key_and_never_a_value() -> None:
    with pytest.raises(ConfigurationError, match="give KEY=VALUE"):
        connection_settings(flags("ssl.key.password="))
    with pytest.raises(ConfigurationError, match=r"'security\.protocol': give KEY=VALUE"):
        connection_settings(flags("security.protocol"))


def test_the_environment_s_properties_are_checked_without_quoting_them() -> None:
    assert environment_properties(environ={}) == {}
    assert environment_properties(environ={KAFKA_PROPERTIES: json.dumps(TLS)}) == TLS
    with pytest.raises(ConfigurationError, match="JSON object") as bad:
        environment_properties(environ={KAFKA_PROPERTIES: "ssl.key.password=hunter2"})
    assert "hunter2" not in str(bad.value)
    with pytest.raises(ConfigurationError, match=r"isolation\.level is set by tidemark"):
        environment_properties(environ={KAFKA_PROPERTIES: '{"isolation.level": "x"}'})
    with pytest.raises(ConfigurationError, match="string, number or boolean"):
        environment_properties(environ={KAFKA_PROPERTIES: '{"ssl.ca.location": [1]}'})


def test_a_user_property_wins_over_a_role_s_tuning_and_a_site_s_setting_over_both() -> None:
    env = {KAFKA_PROPERTIES: json.dumps({"linger.ms": 50, "fetch.wait.max.ms": 7})}
    config = roles.READER_CONSUMER.config("k:1", {"fetch.wait.max.ms": 3}, env)
    assert config["fetch.wait.max.ms"] == 3
    assert roles.OBSERVER_PRODUCER.config("k:1", None, env)["linger.ms"] == 50
    assert config["isolation.level"] == "read_committed"


def test_the_python_config_s_properties_reach_its_clients_until_it_closes() -> None:
    with pytest.raises(ConfigurationError, match=r"transactional\.id is set by tidemark"):
        ConnectionConfig("k:2", "z:1", kafka_properties={"transactional.id": "t"})
    with connect(kafka_bootstrap="k:2", zk_connect="z:1", kafka_properties=TLS) as tm:
        assert tm.config.kafka_properties == TLS
        assert client_config("k:2")["ssl.ca.location"] == "/run/ca.pem"
        assert "ssl.ca.location" not in client_config("k:3")  # another cluster's clients
        admin = roles.ADMIN.config("k:2")
        assert admin["ssl.endpoint.identification.algorithm"] == "https"
        spark = spark_source_options("k:2")
        assert spark["kafka.ssl.truststore.location"] == "/run/ca.pem"
        with connect(kafka_bootstrap="k:2", zk_connect="z:1", kafka_properties=TLS):
            pass  # the same properties again: shared, and still there after it closes
        assert client_config("k:2")["ssl.ca.location"] == "/run/ca.pem"
        with pytest.raises(ConfigurationError, match="already have other properties"):
            connect(kafka_bootstrap="k:2", zk_connect="z:1", kafka_properties={"a.b": "c"})
    assert "ssl.ca.location" not in client_config("k:2")


def test_spark_options_say_in_java_what_the_librdkafka_properties_say() -> None:
    env = {
        SECURITY_PROTOCOL: "SASL_SSL",
        SASL_USERNAME: "ctl",
        SASL_PASSWORD: "pw",
        KAFKA_PROPERTIES: json.dumps(
            {**TLS, "ssl.endpoint.identification.algorithm": "none", "statistics.interval.ms": 5}
        ),
        KAFKA_JAVA_PROPERTIES: json.dumps({"ssl.truststore.type": "PKCS12", "x.y": "z"}),
    }
    options = spark_source_options("k:9094", env)
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.jaas.config"].endswith('username="ctl" password="pw";')
    assert options["kafka.ssl.truststore.location"] == "/run/ca.pem"
    assert options["kafka.ssl.truststore.type"] == "PKCS12"  # the Java properties win
    assert options["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert options["kafka.x.y"] == "z"
    assert "kafka.statistics.interval.ms" not in options  # no Java equivalent
    with pytest.raises(ConfigurationError, match=r"interceptor\.classes is set by tidemark"):
        spark_source_options("k:1", {KAFKA_JAVA_PROPERTIES: '{"interceptor.classes": "X"}'})
    assert set(forwarded_environment(env)) == set(env)


def test_a_pem_client_certificate_becomes_a_pem_keystore() -> None:
    java = java_properties({"ssl.certificate.pem": "C", "ssl.key.pem": "K", "ssl.ca.pem": "A"})
    assert java == {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": "C",
        "ssl.keystore.key": "K",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": "A",
    }


PKCS8 = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nMIID\n-----END CERTIFICATE-----\n"


def test_a_pem_client_certificate_in_files_becomes_an_inline_pem_keystore(tmp_path) -> None:
    """Java reads no PEM certificate and key files: their contents go inline, which
    reach every Spark executor with the options."""
    (tmp_path / "c.pem").write_text(CERT)
    (tmp_path / "k.pem").write_text(PKCS8)
    pair = {
        "ssl.certificate.location": str(tmp_path / "c.pem"),
        "ssl.key.location": str(tmp_path / "k.pem"),
    }
    assert java_properties(pair) == {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": CERT,
        "ssl.keystore.key": PKCS8,
    }


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"ssl.certificate.location": "c"}, r"ssl\.key\.location is not set"),
        ({"ssl.key.location": "k"}, r"ssl\.certificate\.location is not set"),
        (
            {
                "ssl.certificate.location": "c",
                "ssl.key.location": "k",
                "ssl.keystore.location": "s",
            },
            r"ssl\.keystore\.location or ssl\.certificate\.location",
        ),
        (
            {"ssl.certificate.location": "c", "ssl.key.location": "gone"},
            r"ssl\.key\.location: cannot read",
        ),
        (
            {"ssl.certificate.location": "c", "ssl.key.location": "rsa"},
            r"not a PKCS#8 PEM key.*pkcs8 -topk8",
        ),
    ],
)
def test_a_pem_pair_java_cannot_read_is_refused_by_name(tmp_path, given, named) -> None:
    (tmp_path / "c").write_text(CERT)
    (tmp_path / "rsa").write_text(PKCS8.replace("PRIVATE KEY", "RSA PRIVATE KEY"))
    paths = {k: str(tmp_path / v) for k, v in given.items()}
    with pytest.raises(ConfigurationError, match=named):
        java_properties(paths)


@given(
    st.dictionaries(
        st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,8}){0,3}", fullmatch=True),
        st.text(min_size=1).filter(lambda v: v == v.strip()),
        max_size=5,
    )
)
def test_every_property_not_owned_passes_through_unchanged(properties: dict[str, str]) -> None:
    free = {k: v for k, v in properties.items() if k not in OWNED_PROPERTIES}
    config = client_config("k:4", {KAFKA_PROPERTIES: json.dumps(free)})
    assert {k: config[k] for k in free} == free
