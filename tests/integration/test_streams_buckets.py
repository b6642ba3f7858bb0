"""Controller instances share the buckets; a dead instance's buckets move to survivors."""

from __future__ import annotations

import threading
import time

from kazoo.client import KazooClient

from controller.buckets import BucketOwner, OwnerState, bucket_ownership

BUCKETS = 8


def wait_for(predicate, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def expire_session(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session: another client takes it over, then closes it."""
    session_id, password = client.client_id
    thief = KazooClient(hosts=hosts, client_id=(session_id, password))
    thief.start(timeout=15)
    thief.stop()
    thief.close()


def test_two_instances_split_buckets_and_survivor_takes_all(zk_client, zookeeper):
    hosts = f"{zookeeper}{zk_client.chroot}"
    client_a = KazooClient(hosts=hosts, timeout=6.0)
    client_a.start(timeout=15)
    a = BucketOwner(client_a, "a", BUCKETS, recheck_s=0.2).start()
    b = BucketOwner(zk_client, "b", BUCKETS, recheck_s=0.2).start()
    violations: list[str] = []
    samples = 0
    stop = threading.Event()

    def watch_exclusive() -> None:
        nonlocal samples
        while not stop.is_set():
            both = a.owned() & b.owned()
            if both:
                violations.append(f"buckets {sorted(both)} owned by a and b at once")
            samples += 1
            time.sleep(0.001)

    checker = threading.Thread(target=watch_exclusive, daemon=True)
    checker.start()
    try:
        wait_for(lambda: len(a.owned()) == 4 and len(b.owned()) == 4)
        assert a.owned() | b.owned() == set(range(BUCKETS))
        view = bucket_ownership(zk_client, BUCKETS)
        assert view.members == ("a", "b")
        assert {bk for bk, o in view.owners.items() if o == "a"} == a.owned()

        expire_session(client_a, hosts)
        wait_for(lambda: a.state is OwnerState.LOST)
        assert a.owned() == frozenset()
        wait_for(lambda: b.owned() == set(range(BUCKETS)))
        view = bucket_ownership(zk_client, BUCKETS)
        assert view.members == ("b",)
        assert set(view.owners.values()) == {"b"}
    finally:
        stop.set()
        checker.join()
        a.stop()
        b.stop()
        client_a.stop()
        client_a.close()
    assert samples > 100
    assert violations == []
    assert set(bucket_ownership(zk_client, BUCKETS).owners.values()) == {None}


def test_a_stopped_instance_hands_its_buckets_over(zk_client):
    a = BucketOwner(zk_client, "a", 4, recheck_s=0.2).start()
    wait_for(lambda: a.owned() == set(range(4)))
    b = BucketOwner(zk_client, "b", 4, recheck_s=0.2).start()
    wait_for(lambda: a.owned() == {0, 2} and b.owned() == {1, 3})
    a.stop()
    wait_for(lambda: b.owned() == set(range(4)))
    b.stop()
