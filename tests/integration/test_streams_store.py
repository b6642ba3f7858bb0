"""One contract, two metadata stores: in-memory and ZooKeeper (kazoo)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.waiting import wait_until
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.exceptions import (
    ConflictError,
    InvalidModelError,
    ScopeNotEmptyError,
    StreamExistsError,
    UnknownScopeError,
    UnknownStreamError,
)
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.metadata import PendingScale, StreamMetadata, new_stream_metadata
from tidemark.controller.model import KeyRange
from tidemark.controller.planning import plan_scale
from tidemark.controller.states import StreamState
from tidemark.controller.store import KEPT_REGISTRATIONS, MetadataStore


@pytest.fixture(params=["memory", "zookeeper"])
def empty_store(request) -> MetadataStore:
    if request.param == "memory":
        return MemoryStore()
    from tidemark.controller.zookeeper.store import ZooKeeperStore

    return ZooKeeperStore(request.getfixturevalue("zk_client"), root="/tidemark")


@pytest.fixture
def store(empty_store: MetadataStore) -> MetadataStore:
    """A store with the scope ``shop`` (streams are created only in an existing scope)."""
    assert empty_store.create_scope("shop") is True
    return empty_store


def fresh(name: str = "shop/orders", segments: int = 2) -> StreamMetadata:
    return new_stream_metadata(name, StreamConfiguration(ScalingPolicy.fixed(segments)), 10)


def scaled(meta: StreamMetadata) -> StreamMetadata:
    epoch = plan_scale(meta, [0], [KeyRange(0, 0.25), KeyRange(0.25, 0.5)], at_ms=20)
    return meta.with_changes(epochs=(*meta.epochs, epoch), sealed_sizes={0: 5})


def test_create_read_and_versions(store):
    created = store.create_stream(fresh())
    assert created.version == 0
    assert store.get_stream("shop/orders") == fresh()
    with pytest.raises(StreamExistsError, match="'shop/orders'"):
        store.create_stream(fresh())
    with pytest.raises(UnknownStreamError, match="'shop/nothing'"):
        store.get_stream("shop/nothing")


def test_compare_and_set(store):
    v0 = store.create_stream(fresh())
    active = v0.metadata.with_changes(state=StreamState.ACTIVE)
    v1 = store.replace_stream(active, v0.version)
    assert v1.version == v0.version + 1
    with pytest.raises(ConflictError, match="expected version 0, found 1"):
        store.replace_stream(active.with_changes(state=StreamState.SEALING), v0.version)
    assert store.get_stream("shop/orders").state is StreamState.ACTIVE
    with pytest.raises(UnknownStreamError):
        store.replace_stream(fresh("shop/other"), 0)


def test_epochs_are_append_only_and_round_trip(store):
    v0 = store.create_stream(fresh())
    pending = PendingScale((0,), (KeyRange(0, 0.25), KeyRange(0.25, 0.5)), 20, 1)
    grown = scaled(v0.metadata).with_changes(pending=pending, truncation={1: 3})
    v1 = store.replace_stream(grown, v0.version)
    assert store.get_stream("shop/orders") == grown
    assert store.read_stream("shop/orders").version == v1.version
    rewritten = grown.with_changes(epochs=(grown.epochs[0], fresh().epochs[0].__class__(1, ())))
    with pytest.raises(ConflictError, match="immutable"):
        store.replace_stream(rewritten, v1.version)
    with pytest.raises(ConflictError):
        store.replace_stream(v0.metadata, v1.version)  # drops epoch 1
    assert store.get_stream("shop/orders") == grown


def test_several_streams_are_read_together_as_each_alone(store):
    """A batch read (one round trip's wait for many streams) gives what single reads give;
    absent streams are left out, repeated names read once."""
    v0 = store.create_stream(fresh("shop/a"))
    store.replace_stream(scaled(v0.metadata), v0.version)  # two epochs
    store.create_stream(fresh("shop/b", segments=3))
    names = ["shop/b", "shop/absent", "shop/a", "shop/b"]
    assert store.read_streams(names) == {n: store.read_stream(n) for n in ("shop/a", "shop/b")}
    assert store.read_streams([]) == {}
    if hasattr(store, "client"):  # ZooKeeper: a store whose epoch cache is empty reads them all
        from tidemark.controller.zookeeper.store import ZooKeeperStore

        cold = ZooKeeperStore(store.client, root="/tidemark")
        assert cold.read_streams(names) == store.read_streams(names)
        assert cold.get_stream("shop/a").epochs == store.get_stream("shop/a").epochs


def test_delete_and_recreate(store):
    v0 = store.create_stream(fresh())
    v1 = store.replace_stream(scaled(v0.metadata), v0.version)
    with pytest.raises(ConflictError):
        store.delete_stream("shop/orders", v0.version)
    store.delete_stream("shop/orders", v1.version)
    with pytest.raises(UnknownStreamError):
        store.get_stream("shop/orders")
    again = fresh(segments=3)
    store.create_stream(again)
    assert store.get_stream("shop/orders") == again  # no stale epochs from the first life


def test_listing(empty_store):
    store = empty_store
    assert store.list_streams() == [] and store.list_scopes() == []
    store.create_scope("b")
    store.create_scope("a")
    for name in ("b/one", "a/two", "a/one"):
        store.create_stream(fresh(name))
    assert store.list_streams() == ["a/one", "a/two", "b/one"]
    assert store.list_streams("a") == ["a/one", "a/two"]
    assert store.list_scopes() == ["a", "b"]
    with pytest.raises(UnknownScopeError, match="'zzz'"):
        store.list_streams("zzz")


def test_watch_sees_every_settled_change(store):
    v = store.create_stream(fresh())
    seen: list[StreamMetadata] = []
    lock = threading.Lock()

    def on_change(meta: StreamMetadata) -> None:
        with lock:
            seen.append(meta)

    store.watch_stream("shop/orders", on_change)
    wait_until(lambda: len(seen) >= 1, 10, "the watch saw the change", poll_s=0.01)
    assert seen[0] == v.metadata
    active = v.metadata.with_changes(state=StreamState.ACTIVE)
    v = store.replace_stream(active, v.version)
    wait_until(lambda: seen[-1] == active, 10, "the watch saw the change", poll_s=0.01)
    grown = scaled(active)
    store.replace_stream(grown, v.version)
    wait_until(lambda: seen[-1] == grown, 10, "the watch saw the change", poll_s=0.01)
    assert seen[-1].current_epoch().number == 1
    with pytest.raises(UnknownStreamError):
        store.watch_stream("shop/nothing", on_change)


def test_scopes_are_created_listed_and_deleted_only_when_empty(empty_store):
    store = empty_store
    with pytest.raises(UnknownScopeError, match="scope create shop"):
        store.create_stream(fresh())
    assert store.list_streams() == [] and store.list_scopes() == []
    assert store.create_scope("shop") is True
    assert store.create_scope("shop") is False  # idempotent
    store.create_stream(fresh())
    with pytest.raises(ScopeNotEmptyError, match=r"'shop' holds 1 stream.*shop/orders"):
        store.delete_scope("shop")
    assert store.get_stream("shop/orders") == fresh()  # nothing lost by the refusal
    store.delete_stream("shop/orders", 0)
    store.delete_scope("shop")
    assert store.list_scopes() == []
    with pytest.raises(UnknownScopeError, match="'shop'"):
        store.delete_scope("shop")
    with pytest.raises(UnknownScopeError):
        store.create_stream(fresh())  # the deleted scope is gone for streams too


@pytest.mark.parametrize("bad", ["", "a/b", "-x", "sp ace", "x" * 101])
def test_bad_scope_names_are_refused(empty_store, bad):
    with pytest.raises(InvalidModelError, match="scope/name"):
        empty_store.create_scope(bad)
    assert empty_store.list_scopes() == []


def test_a_worker_lookup_reads_the_streams_it_is_told_of_together(zk_client, zookeeper, unique):
    """``ZooKeeperStreams.prefetch`` (a Python worker's lookup) caches what it read: the
    streams are then answered without ZooKeeper; absent ones are still looked up. A
    change of a cached stream (an update, its deletion) drops it from the cache."""
    from tidemark.controller.zookeeper.store import ZooKeeperStore
    from tidemark.jobs.lookups import ZooKeeperStreams

    store = ZooKeeperStore(zk_client, root="/tidemark")
    store.create_scope("shop")
    for name in ("shop/a", "shop/b"):
        store.create_stream(fresh(name))
    lookup = ZooKeeperStreams(f"{zookeeper}/tidemark-test-{unique}", "/tidemark")
    try:
        lookup.prefetch(["shop/a", "shop/b", "shop/absent"])
        assert lookup.stream("shop/a") == store.get_stream("shop/a")
        assert lookup.stream("shop/b") is lookup.stream("shop/b")  # the cached object
        assert lookup.stream("shop/absent") is None

        current = store.read_stream("shop/a")
        config = StreamConfiguration(ScalingPolicy.fixed(2), timestamp_aggregation_timeout_ms=5)
        store.replace_stream(current.metadata.with_changes(config=config), current.version)
        store.delete_stream("shop/b", store.read_stream("shop/b").version)
        wait_until(lambda: lookup.changes == 2, 10, "the watch saw the change", poll_s=0.01)
        assert lookup.stream("shop/a").config == config
        assert lookup.stream("shop/b") is None
        store.create_stream(fresh("shop/absent"))  # watched while absent: read anew
        assert lookup.stream("shop/absent") == fresh("shop/absent")
        current = store.read_stream("shop/a")  # watched again after the re-read
        store.replace_stream(current.metadata.with_changes(config=fresh().config), current.version)
        wait_until(lambda: lookup.changes == 3, 10, "the watch saw the change", poll_s=0.01)
        assert lookup.stream("shop/a").config == fresh().config
    finally:
        lookup.close()


@pytest.mark.parametrize("writer", ["w1", "job/3 é", ".."])
def test_writer_registrations_keep_the_latest_instances_in_order(store, writer):
    """A registration per instance, the current one last, the last ``KEPT_REGISTRATIONS``
    kept; registering the current one again adds nothing; a deleted stream takes its
    registrations with it (and a new stream of its name starts with none)."""
    store.create_stream(fresh())
    assert store.writer_registrations("shop/orders", writer) == ()
    assert store.register_writer("shop/orders", writer, "t0") is True
    assert store.register_writer("shop/orders", writer, "t0") is False
    for n in range(1, KEPT_REGISTRATIONS + 2):
        assert store.register_writer("shop/orders", writer, f"t{n}") is True
    kept = store.writer_registrations("shop/orders", writer)
    assert [r.instance for r in kept] == [f"t{n}" for n in range(2, KEPT_REGISTRATIONS + 2)]
    assert [r.since_ms for r in kept] == sorted(r.since_ms for r in kept)
    assert abs(kept[-1].since_ms - time.time() * 1000) < 60_000
    assert store.writer_registrations("shop/orders", "another") == ()
    with pytest.raises(UnknownStreamError):
        store.register_writer("shop/missing", writer, "t0")
    assert store.list_streams("shop") == ["shop/orders"]  # no znode made for the missing one
    store.delete_stream("shop/orders", store.read_stream("shop/orders").version)
    store.create_stream(fresh())
    assert store.writer_registrations("shop/orders", writer) == ()


def test_a_worker_reads_registrations_only_for_tokens_it_does_not_know(
    zk_client, zookeeper, unique
):
    """``ZooKeeperRegistrations`` (the controller's lookup): a token with a later one
    cached answers from the cache (it stays superseded); the token cached last, or an
    unknown one, is read again unless the cached read is as fresh as asked; a registration
    is no change of the stream (its watch stays quiet). Each worker process caches on its
    own: one that read the old token alone still learns of the new one."""
    from tidemark.controller.zookeeper.store import ZooKeeperStore
    from tidemark.jobs.lookups import ZooKeeperRegistrations, ZooKeeperStreams

    store = ZooKeeperStore(zk_client, root="/tidemark")
    store.create_scope("shop")
    store.create_stream(fresh())
    store.register_writer("shop/orders", "w1", "old")
    streams = ZooKeeperStreams(f"{zookeeper}/tidemark-test-{unique}", "/tidemark")
    lookup = ZooKeeperRegistrations(streams)
    other = ZooKeeperRegistrations(streams)  # another worker process's cache
    try:
        assert streams.stream("shop/orders") is not None  # watched from here on
        found = lookup.registrations("shop/orders", "w1", "old", None)
        assert [r.instance for r in found] == ["old"] and lookup.reads == 1
        assert other.registrations("shop/orders", "w1", "old", None) == found
        store.register_writer("shop/orders", "w1", "new")
        found = lookup.registrations("shop/orders", "w1", "new", None)
        assert [r.instance for r in found] == ["old", "new"] and lookup.reads == 2
        assert lookup.registrations("shop/orders", "w1", "old", None) == found
        assert lookup.reads == 2  # a later registration is cached: "old" is superseded
        asked = int(time.time() * 1000)
        for _ in range(3):  # a forged token: one read at most per freshness asked
            assert lookup.registrations("shop/orders", "w1", "forged", asked) == found
        assert lookup.reads == 3
        # the old token, cached last by the other process: read again, the new one seen
        assert other.registrations("shop/orders", "w1", "old", None) == found
        assert other.reads == 2
        assert streams.changes == 0
    finally:
        streams.close()
