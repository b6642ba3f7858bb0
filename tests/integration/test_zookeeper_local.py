"""The local ZooKeeper through kazoo: versioned sets and ephemeral nodes."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError


def test_versioned_set_that_loses_a_race_raises(zk_client) -> None:
    zk_client.create("/race", b"0")
    _, stat = zk_client.get("/race")
    zk_client.set("/race", b"winner", version=stat.version)
    with pytest.raises(BadVersionError):
        zk_client.set("/race", b"loser", version=stat.version)
    assert zk_client.get("/race")[0] == b"winner"


def test_ephemeral_node_disappears_when_its_session_closes(zookeeper, zk_client, unique) -> None:
    other = KazooClient(hosts=f"{zookeeper}/tidemark-test-{unique}")
    other.start(timeout=15)
    other.create("/owner", b"me", ephemeral=True)
    assert zk_client.exists("/owner") is not None
    other.stop()
    other.close()
    assert zk_client.exists("/owner") is None
