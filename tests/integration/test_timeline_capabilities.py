"""Leases as capabilities, bounded extensions and stream times, clean refusals (issue 31.5).

Against the real PostgreSQL the suite starts: every refusal is a TimelineError
naming its rule, and leaves the message (or the stream time) as it was.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pipelines.timeline import migrations
from pipelines.timeline.config import TimelineConfig
from pipelines.timeline.exceptions import (
    InvalidMessageError,
    LeaseTokenError,
    LeaseTooLongError,
    NotHolderError,
    StreamTimeAheadError,
    StreamTimeBackwardsError,
    TimelineError,
)
from pipelines.timeline.model import MAX_LEASE_MS, MAX_STREAM_TIME_LEAD_MS, Lease
from pipelines.timeline.store import TimelineStore
from tidemark.errors import TidemarkError

HOUR = 3_600_000


@pytest.fixture
def store(postgres):
    with TimelineStore(postgres) as s:
        s.migrate()
        yield s


@pytest.fixture
def tl(store, unique):
    return store.create_timeline(TimelineConfig(f"cap-{unique}", buckets=2)).name


def _refused(error, call):
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, TimelineError)
    assert str(info.value).startswith(f"[{error.rule}]"), str(info.value)


def test_a_consumer_without_the_lease_token_cannot_extend_release_or_delete(store, tl):
    store.create(tl, b"x", timestamp_ms=0, producer_group="g", id="m")
    (lease,) = store.lease(tl, "c1", lease_ms=HOUR)
    assert lease.token
    before = store.get(tl, "m")
    now = store.now_ms()
    guessed = "A" * len(lease.token)
    # The holder's name with a wrong token: refused, whoever calls.
    for token in (guessed, lease.token[:-1]):
        _refused(
            LeaseTokenError,
            lambda t=token: store.extend(tl, "m", "c1", until_ms=now + 2 * HOUR, token=t),
        )
        _refused(LeaseTokenError, lambda t=token: store.release(tl, "m", "c1", token=t))
        _refused(LeaseTokenError, lambda t=token: store.delete(tl, "m", consumer="c1", token=t))
        forged = Lease(lease.message, lease.due_ms, lease.leased_at_ms, token=token)
        assert store.delete_leased(tl, "c1", [forged]) == []
    # The name alone (no token) is not enough either.
    _refused(InvalidMessageError, lambda: store.delete(tl, "m", consumer="c1"))
    with pytest.raises(InvalidMessageError):
        store.delete_leased(tl, "c1", store.leases_of(tl, "c1"))
    assert [x.token for x in store.leases_of(tl, "c1")] == [None]
    # The right token under another name: still the holder's lease only.
    _refused(NotHolderError, lambda: store.release(tl, "m", "c2", token=lease.token))
    assert store.get(tl, "m") == before
    # The holder's token works.
    assert store.delete_leased(tl, "c1", [lease]) == ["m"]


def test_a_new_lease_invalidates_the_old_token(store, tl):
    store.create(tl, b"x", timestamp_ms=0, producer_group="g", id="m")
    old = store.lease_one(tl, "m", "c1", lease_ms=50)
    time.sleep(0.1)  # the lease lapses; the same name leases it again
    new = store.lease_one(tl, "m", "c1", lease_ms=HOUR)
    assert new.token != old.token
    _refused(LeaseTokenError, lambda: store.release(tl, "m", "c1", token=old.token))
    _refused(LeaseTokenError, lambda: store.delete(tl, "m", consumer="c1", token=old.token))
    assert store.get(tl, "m").lock_consumer == "c1"
    released = store.release(tl, "m", "c1", token=new.token)
    assert released.lock_consumer is None
    # A released lease's token is spent.
    _refused(NotHolderError, lambda: store.delete(tl, "m", consumer="c1", token=new.token))


def test_batch_leases_carry_one_token_each(store, tl):
    store.create_many(tl, [])
    for i in range(5):
        store.create(tl, b"x", timestamp_ms=i, producer_group="g", id=f"b{i}")
    leases = store.lease(tl, "c1", lease_ms=HOUR, limit=3) + store.lease(tl, "c1", lease_ms=HOUR)
    assert len(leases) == 5 and len({x.token for x in leases}) == 5
    # Each token opens its own message only.
    swapped = [
        Lease(a.message, a.due_ms, a.leased_at_ms, token=b.token)
        for a, b in zip(leases, leases[1:] + leases[:1], strict=True)
    ]
    assert store.delete_leased(tl, "c1", swapped) == []
    assert sorted(store.delete_leased(tl, "c1", leases)) == [f"b{i}" for i in range(5)]


def test_extend_has_the_bound_of_a_lease(store, tl):
    store.create(tl, b"x", timestamp_ms=0, producer_group="g", id="m")
    lease = store.lease_one(tl, "m", "c1", lease_ms=HOUR)
    before = store.get(tl, "m")
    for until in (2**62 - 1, store.now_ms() + MAX_LEASE_MS + HOUR):
        _refused(
            LeaseTooLongError,
            lambda u=until: store.extend(tl, "m", "c1", until_ms=u, token=lease.token),
        )
    assert store.get(tl, "m") == before
    _refused(LeaseTooLongError, lambda: store.lease_one(tl, "m", "c1", lease_ms=MAX_LEASE_MS + 1))
    longest = store.extend(
        tl, "m", "c1", until_ms=store.now_ms() + MAX_LEASE_MS - 60_000, token=lease.token
    )
    assert longest.timestamp_ms > before.timestamp_ms


def test_stream_time_moves_only_forward_and_never_far_past_the_clock(store, unique):
    stream = f"s{unique}/orders"
    now = store.now_ms()
    _refused(StreamTimeAheadError, lambda: store.advance_stream_time(stream, 2**62 - 1))
    _refused(
        StreamTimeAheadError,
        lambda: store.advance_stream_time(stream, now + MAX_STREAM_TIME_LEAD_MS + HOUR),
    )
    assert store.stream_times([stream]) == {}
    assert store.advance_stream_time(stream, now - 1_000) == now - 1_000
    assert store.advance_stream_time(stream, now - 1_000) == now - 1_000  # the same: no-op
    _refused(StreamTimeBackwardsError, lambda: store.advance_stream_time(stream, now - 2_000))
    _refused(StreamTimeAheadError, lambda: store.advance_stream_time(stream, 2**62 - 1))
    assert store.stream_times([stream]) == {stream: now - 1_000}
    assert store.advance_stream_time(stream, now) == now


@pytest.mark.parametrize("bad", ["nul\x00name", "lone\ud800surrogate"])
def test_text_postgresql_cannot_hold_is_refused_naming_the_rule(store, tl, bad):
    store.create(tl, b"x", timestamp_ms=0, producer_group="g", id="m")
    lease = store.lease_one(tl, "m", "c1", lease_ms=HOUR)
    now = store.now_ms()
    calls = [
        lambda: store.get(bad, "m"),
        lambda: store.get(tl, bad),
        lambda: store.create(bad, b"x", timestamp_ms=0, producer_group="g"),
        lambda: store.create(tl, b"x", timestamp_ms=0, producer_group="g", id=bad),
        lambda: store.create(tl, b"x", timestamp_ms=0, producer_group=bad),
        lambda: store.lease(bad, "c1", lease_ms=HOUR),
        lambda: store.lease_one(tl, bad, "c1", lease_ms=HOUR),
        lambda: store.extend(bad, "m", "c1", until_ms=now + HOUR, token=lease.token),
        lambda: store.extend(tl, "m", "c1", until_ms=now + HOUR, token=bad),
        lambda: store.release(tl, bad, "c1", token=lease.token),
        lambda: store.delete(tl, "m", consumer=bad, token=lease.token),
        lambda: store.delete(tl, bad, producer_group="g"),
        lambda: store.move(tl, "m", bad, timestamp_ms=now),
        lambda: store.leases_of(tl, bad),
        lambda: store.count(bad),
        lambda: store.advance_stream_time(bad, 1),
        lambda: store.stream_times([bad]),
        lambda: store.heartbeat(bad, "c1", 1_000),
    ]
    for call in calls:
        with pytest.raises(InvalidMessageError) as info:
            call()
        assert isinstance(info.value, TidemarkError)
        assert str(info.value).startswith("[invalid-input]"), str(info.value)
    assert store.get(tl, "m").lock_consumer == "c1"


def test_a_value_the_database_refuses_is_a_timeline_error(store, tl):
    """What no check foresaw still reaches the caller as a TidemarkError naming a rule."""
    with pytest.raises(InvalidMessageError, match=r"^\[invalid-input\] the database"):
        store.count(tl, from_ms=2**70)


def test_migration_3_upgrades_an_existing_schema(postgres, unique, monkeypatch):
    schema = f"upgrade_{unique}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        dsn = make_conninfo(postgres, options=f"-csearch_path={schema}")
        with monkeypatch.context() as patch:  # the code of before migration 3
            patch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:2])
            with TimelineStore(dsn) as old:
                assert old.migrate() == [1, 2]
                old.create_timeline(TimelineConfig("up", buckets=1))
                old._exec(
                    "INSERT INTO timeline_messages (timeline, id, bucket, ts, body, "
                    "producer_group, lock_consumer, version, created_at_ms) "
                    "VALUES ('up', 'held', 0, %(until)s, 'x', 'g', 'c1', 2, 0)",
                    {"until": old.now_ms() + HOUR},
                )
        with TimelineStore(dsn) as store:
            assert store.migrate() == [3]
            assert store.migrate() == []
            # A lease taken before the upgrade has no token: nobody can act on it.
            _refused(
                LeaseTokenError,
                lambda: store.release("up", "held", "c1", token="x" * 32),
            )
            store.create("up", b"y", timestamp_ms=0, producer_group="g", id="new")
            (lease,) = store.lease("up", "c2", lease_ms=HOUR)
            assert store.delete_leased("up", "c2", [lease]) == ["new"]
    finally:
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
