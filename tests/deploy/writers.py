"""The deployed-shape tests' writers: each kind built one way, as principal ``writer``
(in Kafka, and in ZooKeeper: its writer ids are registered through that principal's
session, ``Deployment.store_as``).

    writer = open_writer(deployment, "shop/orders", "w1", drop_in=True)

An ``EventWriter`` (default), a ``TransactionalWriter`` or the drop-in
``TidemarkProducer``, all with a 1 ms linger and the deployment's cluster settings,
so the deployment test's noters and the nemesis's clients write alike. The drop-in
is given ``enable.idempotence`` as the tidemark writers have it: without it a retry
after a broker's loss may store a record twice (Kafka's at-least-once), which the
nemesis counts as a broken invariant.
"""

from __future__ import annotations

from typing import Any

from tests.deploy.deployment import Deployment
from tidemark.controller.kafka.settings import client_config
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.producer import TidemarkProducer
from tidemark.pipelines.writing.transactions import TransactionalWriter
from tidemark.pipelines.writing.writer import EventWriter


def open_writer(
    d: Deployment,
    stream: str,
    writer_id: str,
    *,
    drop_in: bool = False,
    transactional: bool = False,
) -> Any:
    """A writer of ``stream`` named ``writer_id``, connected as principal ``writer``."""
    store = d.store_as("writer")
    with d.as_user("writer"):
        if drop_in:
            return TidemarkProducer(
                {**client_config(d.bootstrap), "linger.ms": 1, "enable.idempotence": True},
                writer_id=writer_id,
                store=store,
                stream=stream,
                create_marks_topic=False,
            )
        kind = TransactionalWriter if transactional else EventWriter
        return kind(
            writer_id,
            stream,
            store=store,
            bootstrap_servers=d.bootstrap,
            config=WriterConfig(cluster=d.cluster, linger_ms=1),
        )
