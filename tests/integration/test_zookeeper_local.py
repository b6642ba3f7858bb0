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
    from tidemark.controller.zookeeper.claims import Claims

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


def test_a_session_from_the_factory_honours_its_chroot_and_ends_its_ephemerals(
    zookeeper, zk_client, unique
) -> None:
    from tidemark.controller.zookeeper.session import zookeeper_session

    with zookeeper_session(zookeeper, chroot=f"/tidemark-test-{unique}", timeout_ms=4_000) as c:
        assert c.connected
        c.create("/mine", b"x", ephemeral=True)
        assert zk_client.exists("/mine") is not None  # the same chroot as the fixture's
    assert not c.connected
    assert zk_client.exists("/mine") is None


def test_leadership_passes_to_the_next_contender_when_the_leader_cancels(
    zookeeper, zk_client, unique
) -> None:
    import threading
    import time

    from tidemark.controller.zookeeper.leadership import Leadership, contenders
    from tidemark.controller.zookeeper.session import zookeeper_session

    led: list[str] = []
    leading = {name: threading.Event() for name in ("a", "b")}

    def lead_as(name: str):
        def lead(lost: threading.Event) -> None:
            led.append(name)
            leading[name].set()
            assert lost.wait(30), f"{name} was never told to stop"

        return lead

    chroot = f"/tidemark-test-{unique}"
    with (
        zookeeper_session(zookeeper, chroot=chroot) as one,
        zookeeper_session(zookeeper, chroot=chroot) as two,
    ):
        a, b = Leadership(one, "/election", "a"), Leadership(two, "/election", "b")
        first = threading.Thread(target=a.contend, args=(lead_as("a"),), daemon=True)
        first.start()
        assert leading["a"].wait(15)
        second = threading.Thread(target=b.contend, args=(lead_as("b"),), daemon=True)
        second.start()
        deadline = time.monotonic() + 15
        while contenders(zk_client, "/election") != ["a", "b"]:
            assert time.monotonic() < deadline and second.is_alive()
            time.sleep(0.05)
        assert a.leading and not b.leading and led == ["a"]
        a.cancel()  # a's function sees ``lost``, returns, and a leaves the election
        first.join(15)
        assert not first.is_alive() and not a.leading
        assert leading["b"].wait(15) and b.leading
        assert contenders(zk_client, "/election") == ["b"]
        b.cancel()
        second.join(15)
        assert not second.is_alive()
        a.contend(lead_as("a"))  # cancelled: returns at once, never elected again
    assert led == ["a", "b"]
    assert contenders(zk_client, "/election") == []
