"""What the control-plane verbs talk to: a ZooKeeper session, the store, the stream manager.

    with control_plane() as cp:
        cp.manager.create("shop/orders", StreamConfiguration())

Services come from ``TIDEMARK_KAFKA_BOOTSTRAP`` / ``TIDEMARK_ZK_CONNECT``
(a connect string may end in a chroot), else from ``tidemark up``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.cli.output import emit
from tidemark.cli.service_errors import (
    KAFKA_SERVICE,
    quiet,
    service_timeout_s,
)
from tidemark.controller.naming import ClusterSettings
from tidemark.environment import Environment
from tidemark.infra.services import KAFKA, ZOOKEEPER, resolve_services

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from tidemark.controller.kafka.admin import StreamTopics
    from tidemark.controller.streams import StreamManager
    from tidemark.controller.zookeeper.store import ZooKeeperStore


ZK_START_TIMEOUT_S = 10.0
"""How long a verb waits for its ZooKeeper session before it reports ZooKeeper down
(``TIDEMARK_SERVICE_TIMEOUT_MS`` overrides it)."""


@dataclass(frozen=True)
class ControlPlane:
    """What a control-plane verb talks to."""

    client: KazooClient
    store: ZooKeeperStore
    settings: ClusterSettings
    kafka: str

    @functools.cached_property
    def manager(self) -> StreamManager:
        """The stream manager, made on first use (its Kafka admin client connects)."""
        from tidemark.controller.streams import StreamManager  # confluent_kafka: see control_plane

        return StreamManager(self.store, self.kafka, self.settings, topics=kafka_topics(self.kafka))


KAFKA_TIMEOUT_S = 30.0
"""How long a verb's Kafka admin request waits before it reports Kafka down
(``TIDEMARK_SERVICE_TIMEOUT_MS`` overrides it)."""


def kafka_topics(kafka: str) -> StreamTopics:
    """A Kafka admin client on ``kafka``: use it inside :func:`kafka_answers`."""
    from tidemark.controller.kafka.admin import StreamTopics  # confluent_kafka: see control_plane

    return StreamTopics(kafka, timeout_s=service_timeout_s(KAFKA_TIMEOUT_S))


@contextlib.contextmanager
def kafka_answers(kafka: str) -> Iterator[None]:
    """Within the block, Kafka not answering (a stopped broker: the admin request times
    out) is one :class:`ServiceUnavailableError` naming the address and what to check."""
    try:
        yield
    except TimeoutError:
        waited_s = service_timeout_s(KAFKA_TIMEOUT_S)
        raise KAFKA_SERVICE.unavailable(kafka, f"gave no answer within {waited_s:g} s") from None


def service_addresses(env: Environment | None = None) -> tuple[str, str]:
    """(Kafka bootstrap, ZooKeeper connect): the environment's, else ``tidemark up``'s."""
    found = resolve_services(KAFKA, ZOOKEEPER, env=env)
    assert found.kafka_bootstrap is not None and found.zk_connect is not None
    return found.kafka_bootstrap, found.zk_connect


@contextlib.contextmanager
def control_plane(settings: ClusterSettings | None = None) -> Iterator[ControlPlane]:
    """A ZooKeeper session and the metadata store on it, for one verb."""
    settings = settings or ClusterSettings()
    kafka, _ = service_addresses()
    with metadata_store(settings) as (client, store):
        yield ControlPlane(client, store, settings, kafka)


@contextlib.contextmanager
def metadata_store(
    settings: ClusterSettings | None = None,
) -> Iterator[tuple[KazooClient, ZooKeeperStore]]:
    """A ZooKeeper session and the metadata store on it -- no Kafka needed (the verbs that
    only check a stream's metadata)."""
    # kazoo (and confluent_kafka, for the manager) only when a verb runs: the parser
    # imports every verb module, and they would add ~0.1 s to every `tidemark` command.
    from tidemark.controller.zookeeper.session import zookeeper_session
    from tidemark.controller.zookeeper.store import ZooKeeperStore  # as above

    zk = resolve_services(ZOOKEEPER).zk_connect
    assert zk is not None
    waited_s = service_timeout_s(ZK_START_TIMEOUT_S)
    with contextlib.ExitStack() as stack:
        # a session not started in time: ZooKeeperUnavailableError (named by main)
        with quiet("kazoo"):
            client = stack.enter_context(zookeeper_session(zk, start_timeout_s=waited_s))
        yield client, ZooKeeperStore(client, (settings or ClusterSettings()).zk_root)


def delete_verb(
    args: argparse.Namespace, name: str, what: str, delete: Callable[[StreamManager, str], object]
) -> int:
    """A delete verb: ``delete(manager, name)`` in one control-plane session, then
    ``{"deleted": name}`` with ``--format json``, else ``deleted <what><name>``."""
    with control_plane() as cp:
        delete(cp.manager, name)
    emit(args, {"deleted": name}, f"deleted {what}{name}")
    return 0


__all__ = [
    "KAFKA_TIMEOUT_S",
    "ZK_START_TIMEOUT_S",
    "ControlPlane",
    "control_plane",
    "delete_verb",
    "kafka_answers",
    "kafka_topics",
    "metadata_store",
    "service_addresses",
]
