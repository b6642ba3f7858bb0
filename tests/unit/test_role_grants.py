"""The policies and timeline roles' grants: what each may touch beyond its topics."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AclOperation, ResourceType

from tidemark.controller.kafka.acls import tidemark_acls
from tidemark.controller.naming import (
    BUFFER_TRANSACTIONAL_PREFIX,
    RELAY_TRANSACTIONAL_PREFIX,
    WRITER_TRANSACTIONAL_PREFIX,
)
from tidemark.pipelines.timeline.config import BufferConfig, DueRule
from tidemark.pipelines.timeline.relay import relay_name
from tidemark.pipelines.writing.transactions import transactional_id_for

pytestmark = pytest.mark.unit


def _grants(principal: str) -> set[tuple[str, str, str]]:
    acls = tidemark_acls(
        "marks", ["w"], ["c"], policies=["p"], timeline=["t"], timeline_topics=["in", "out"]
    )
    return {(a.restype.name, a.name, a.operation.name) for a in acls if a.principal == principal}


def test_the_timeline_may_use_the_buffers_and_relays_transactional_ids_not_the_writers() -> None:
    txn = ResourceType.TRANSACTIONAL_ID.name
    timeline = _grants("User:t")
    own = {BUFFER_TRANSACTIONAL_PREFIX, RELAY_TRANSACTIONAL_PREFIX}
    for prefix in own:
        assert (txn, prefix, AclOperation.WRITE.name) in timeline
        assert (txn, prefix, AclOperation.WRITE.name) not in _grants("User:w")
    assert not {g for g in timeline if g[0] == txn and g[1] not in own}
    # the prefixes name disjoint ids
    writer_id = transactional_id_for("shop/orders", "w1")
    assert writer_id.startswith(WRITER_TRANSACTIONAL_PREFIX)
    assert not any(writer_id.startswith(prefix) for prefix in own)
    assert relay_name("orders").startswith(RELAY_TRANSACTIONAL_PREFIX)
    config = BufferConfig("in", "out", DueRule(delay_ms=0))
    assert f"{BUFFER_TRANSACTIONAL_PREFIX}{config.timeline}".startswith(BUFFER_TRANSACTIONAL_PREFIX)


def test_the_policies_role_scales_and_truncates_and_creates_nothing() -> None:
    policies = _grants("User:p")
    topic = ResourceType.TOPIC.name
    assert {g[2] for g in policies if g[0] == topic} == {"READ", "DESCRIBE", "ALTER", "DELETE"}
    assert not {g for g in policies if g[1] == "marks"}
    assert {g[1] for g in policies if g[0] == ResourceType.GROUP.name} == {"tidemark-segment-sizes"}
