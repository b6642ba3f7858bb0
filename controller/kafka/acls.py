"""The ACLs of a secured cluster: what each tidemark role may do, and nothing more.

    grant_tidemark_acls(admin_config, "tidemark-marks", writers=["orders-app"],
                        controllers=["tidemark-controller"], readers=["reports"])

Principals are SASL user names (``User:<name>``). :data:`ROLE_GRANTS` is the
one table of what each role uses (``docs/security.md`` explains every line);
the code paths behind it:

- **writer** (``EventWriter``, ``TransactionalWriter``, ``TidemarkProducer``, a
  Spark writer job): produces events to stream topics and marks to the marks
  topic, idempotently and in transactions (``tidemark:`` transactional ids);
- **controller** (the controller job, its policy loop, and the control plane's
  stream operations): reads the marks topic, produces due records to it,
  creates it when missing and sets its timestamp type; reads stream topics
  (last stable offsets, segment sizes by reading); creates, scales (partitions),
  updates (configs), truncates (delete records) and deletes stream topics;
- **reader** (readers, reader groups): reads stream topics, keeps its group's
  offsets (any group name: groups are named by applications);
- **service** (``tidemark serve``): looks up stream topics' offsets and reader
  groups' committed offsets;
- **policies** (``tidemark controller policies``, the policy loop alone): counts
  segments' sizes (reads stream topics), scales (partitions) and truncates (delete
  records) stream topics; it creates, reconfigures and deletes none, and never
  touches the marks topic;
- **timeline** (ingest, relay): reads and writes the topics it is given, with
  its consumer groups, idempotently and in transactions (the buffer's and the
  relay's transactional ids, :data:`~tidemark.controller.naming.BUFFER_TRANSACTIONAL_PREFIX`
  and :data:`~tidemark.controller.naming.RELAY_TRANSACTIONAL_PREFIX`).

Nobody else may touch the marks topic: a principal without an ACL is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException

# confluent_kafka.admin re-exports these without __all__, which mypy --strict flags.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from tidemark.controller.exceptions import KafkaOperationError
from tidemark.controller.kafka import roles as client_roles
from tidemark.controller.kafka.outages import answer
from tidemark.controller.naming import (
    BUFFER_TRANSACTIONAL_PREFIX,
    RELAY_TRANSACTIONAL_PREFIX,
    TOPIC_PREFIX,
    WRITER_TRANSACTIONAL_PREFIX,
)

DEFAULT_TIMEOUT_S = 30.0

(
    MARKS,
    STREAMS,
    TRANSACTIONS,
    CLUSTER,
    GROUPS,
    SIZES_GROUP,
    TIMELINE,
    TIMELINE_TRANSACTIONS,
) = (
    "marks topic",
    "stream topics",
    "transactional ids",
    "cluster",
    "consumer groups",
    "segment sizes group",
    "timeline topics",
    "timeline transactional ids",
)
"""The resources a grant names (what :func:`tidemark_acls` resolves to Kafka resources)."""

_OP = AclOperation
ROLE_GRANTS: Mapping[str, tuple[tuple[str, tuple[Any, ...]], ...]] = {
    "writer": (
        (MARKS, (_OP.WRITE, _OP.DESCRIBE)),
        (STREAMS, (_OP.WRITE, _OP.DESCRIBE)),
        (CLUSTER, (_OP.IDEMPOTENT_WRITE,)),
        (TRANSACTIONS, (_OP.WRITE, _OP.DESCRIBE)),
    ),
    "controller": (
        (
            MARKS,
            (
                _OP.READ,
                _OP.WRITE,
                _OP.DESCRIBE,
                _OP.CREATE,
                _OP.DESCRIBE_CONFIGS,
                _OP.ALTER_CONFIGS,
            ),
        ),
        (
            STREAMS,
            (
                _OP.READ,
                _OP.DESCRIBE,
                _OP.DESCRIBE_CONFIGS,
                _OP.CREATE,
                _OP.ALTER,
                _OP.ALTER_CONFIGS,
                _OP.DELETE,
            ),
        ),
        (GROUPS, (_OP.READ, _OP.DESCRIBE)),
    ),
    "policies": (
        (STREAMS, (_OP.READ, _OP.DESCRIBE, _OP.ALTER, _OP.DELETE)),
        (SIZES_GROUP, (_OP.READ, _OP.DESCRIBE)),
    ),
    "reader": (
        (STREAMS, (_OP.READ, _OP.DESCRIBE)),
        (GROUPS, (_OP.READ, _OP.DESCRIBE, _OP.DELETE)),
    ),
    "service": (
        (STREAMS, (_OP.DESCRIBE,)),
        (GROUPS, (_OP.DESCRIBE,)),
    ),
    "timeline": (
        (TIMELINE, (_OP.READ, _OP.WRITE, _OP.DESCRIBE)),
        (TIMELINE_TRANSACTIONS, (_OP.WRITE, _OP.DESCRIBE)),
        (CLUSTER, (_OP.IDEMPOTENT_WRITE,)),
        (GROUPS, (_OP.READ, _OP.DESCRIBE)),
    ),
}
"""Role -> (resource, operations) granted to each of its principals."""


def tidemark_acls(
    marks_topic: str,
    writers: Iterable[str],
    controllers: Iterable[str],
    policies: Iterable[str] = (),
    readers: Iterable[str] = (),
    services: Iterable[str] = (),
    timeline: Iterable[str] = (),
    timeline_topics: Iterable[str] = (),
) -> list[AclBinding]:
    """The bindings that give each principal its role's :data:`ROLE_GRANTS`:
    ``timeline_topics`` are the timeline's ingest, destination and dead-letter topics."""
    lit, pre = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    resources: dict[str, list[tuple[Any, str, Any]]] = {
        MARKS: [(ResourceType.TOPIC, marks_topic, lit)],
        STREAMS: [(ResourceType.TOPIC, TOPIC_PREFIX, pre)],
        TRANSACTIONS: [(ResourceType.TRANSACTIONAL_ID, WRITER_TRANSACTIONAL_PREFIX, pre)],
        CLUSTER: [(ResourceType.BROKER, "kafka-cluster", lit)],
        GROUPS: [(ResourceType.GROUP, "*", lit)],
        SIZES_GROUP: [
            (ResourceType.GROUP, client_roles.SEGMENT_SIZES_CONSUMER.settings["group.id"], lit)
        ],
        TIMELINE: [(ResourceType.TOPIC, topic, lit) for topic in timeline_topics],
        TIMELINE_TRANSACTIONS: [
            (ResourceType.TRANSACTIONAL_ID, prefix, pre)
            for prefix in (BUFFER_TRANSACTIONAL_PREFIX, RELAY_TRANSACTIONAL_PREFIX)
        ],
    }
    roles = {
        "writer": writers,
        "controller": controllers,
        "policies": policies,
        "reader": readers,
        "service": services,
        "timeline": timeline,
    }
    acls: list[AclBinding] = []
    for role, principals in roles.items():
        for who in principals:
            for resource, operations in ROLE_GRANTS[role]:
                for rtype, name, pattern in resources[resource]:
                    acls.extend(
                        AclBinding(
                            rtype, name, pattern, f"User:{who}", "*", op, AclPermissionType.ALLOW
                        )
                        for op in operations
                    )
    return acls


def grant_tidemark_acls(
    admin_config: Mapping[str, Any],
    marks_topic: str,
    writers: Iterable[str],
    controllers: Iterable[str],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **roles: Iterable[str],
) -> None:
    """Create :func:`tidemark_acls` (``roles``: its other keyword arguments) with an
    admin (super user) client's settings."""
    admin = client_roles.create(client_roles.ADMIN, {**admin_config, **client_roles.ADMIN.settings})
    bindings = tidemark_acls(marks_topic, writers, controllers, **roles)
    for binding, future in admin.create_acls(bindings, request_timeout=timeout_s).items():
        try:
            answer(future, timeout_s, admin)
        except KafkaException as exc:
            raise KafkaOperationError(f"granting {binding}: {exc.args[0]}") from exc


__all__ = ["ROLE_GRANTS", "grant_tidemark_acls", "tidemark_acls"]
