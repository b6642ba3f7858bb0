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


def test_claims_name_their_owner_and_vanish_with_its_session(zookeeper, zk_client, unique) -> None:
    from controller.zookeeper.claims import Claims

    other = KazooClient(hosts=f"{zookeeper}/tidemark-test-{unique}")
    other.start(timeout=15)
    theirs = Claims(other, "/owners")
    ours = Claims(zk_client, "/owners")
    assert theirs.claim("7", "r2")
    assert not ours.claim("7", "r1")
    assert ours.claim("7", "r2")  # already the owner's: still held
    ours.release("7", "r1")  # not r1's: left alone
    assert ours.owners() == {"7": "r2"}
    assert ours.announce("r1") and not ours.announce("r1")
    other.stop()
    other.close()
    assert ours.owner("7") is None
    assert ours.claim("7", "r1")
    ours.release("7", "r1")
    assert ours.owners() == {"r1": ""}
