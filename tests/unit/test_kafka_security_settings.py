"""The one settings builder's security part, and the ACL table of each role (no broker)."""

from __future__ import annotations

from confluent_kafka.admin import AclOperation, ResourceType  # type: ignore[attr-defined]

from tidemark.controller.kafka.acls import tidemark_acls
from tidemark.controller.kafka.settings import (
    SASL_MECHANISM,
    SASL_PASSWORD,
    SASL_USERNAME,
    SECURITY_PROTOCOL,
    forwarded_environment,
    spark_source_options,
)

SASL = {SECURITY_PROTOCOL: "SASL_PLAINTEXT", SASL_USERNAME: "ctl", SASL_PASSWORD: 'p"w'}


def test_the_spark_source_gets_the_same_principal_as_java_settings() -> None:
    options = spark_source_options("k:9093", SASL)
    assert options["kafka.bootstrap.servers"] == "k:9093"
    assert options["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="ctl" password="p\\"w";'
    )
    assert spark_source_options("k:9092", {}) == {"kafka.bootstrap.servers": "k:9092"}


def test_only_the_security_variables_that_are_set_are_forwarded_to_executors() -> None:
    assert forwarded_environment({**SASL, SASL_MECHANISM: " ", "OTHER": "x"}) == SASL
    assert forwarded_environment({}) == {}


def _grants(acls: list, principal: str) -> set[tuple[str, str, str]]:
    return {(a.restype.name, a.name, a.operation.name) for a in acls if a.principal == principal}


def test_each_role_gets_what_it_uses_and_no_more() -> None:
    acls = tidemark_acls(
        "marks",
        ["w"],
        ["c"],
        readers=["r"],
        services=["s"],
        timeline=["t"],
        timeline_topics=["timeline-in"],
    )
    writer, controller = _grants(acls, "User:w"), _grants(acls, "User:c")
    topic = ResourceType.TOPIC.name
    assert (topic, "marks", AclOperation.WRITE.name) in writer
    assert (topic, "marks", AclOperation.READ.name) not in writer
    assert not {g for g in writer if g[2] in ("ALTER", "DELETE", "CREATE")}
    # due records, scale (partitions) and truncate (delete records)
    for op in (AclOperation.READ, AclOperation.WRITE):
        assert (topic, "marks", op.name) in controller
    for op in (AclOperation.ALTER, AclOperation.DELETE, AclOperation.CREATE):
        assert (topic, "tidemark.", op.name) in controller
    assert _grants(acls, "User:r") >= {(topic, "tidemark.", AclOperation.READ.name)}
    assert not {g for g in _grants(acls, "User:r") if g[1] == "marks"}
    assert {g[2] for g in _grants(acls, "User:s")} == {AclOperation.DESCRIBE.name}
    assert (topic, "timeline-in", AclOperation.READ.name) in _grants(acls, "User:t")
    assert tidemark_acls("marks", [], []) == []
