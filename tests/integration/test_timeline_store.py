"""The timeline store against a real PostgreSQL: operations, states, refusals, counts.

Leases are capabilities: without the lease's token no one
extends, releases or deletes; a message under a live lease is the holder's, so
its producer group can neither delete nor move it until the lease ends or is
given back; extensions and stream times are bounded; text PostgreSQL cannot
hold, and any other database error, is refused naming the rule, never as a
driver error.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tidemark.errors import TidemarkError
from tidemark.pipelines.timeline import exceptions as errors
from tidemark.pipelines.timeline import migrations
from tidemark.pipelines.timeline.config import TimelineConfig
from tidemark.pipelines.timeline.consumer import Waker
from tidemark.pipelines.timeline.model import MAX_LEASE_MS, MAX_STREAM_TIME_LEAD_MS, Lease, Status
from tidemark.pipelines.timeline.producer import TimelineProducer
from tidemark.pipelines.timeline.store import NewMessage, TimelineStore

HOUR = 3_600_000


@pytest.fixture
def store(postgres):
    with TimelineStore(postgres) as s:
        s.migrate()
        yield s


@pytest.fixture
def tl(store, unique):
    return store.create_timeline(TimelineConfig(f"tl-{unique}", buckets=4, max_body_bytes=64)).name


def test_migrations_are_idempotent(store):
    assert store.migrate() == []
    assert store.migrate() == []


def test_create_timeline_is_idempotent_and_conflicts_are_refused(store, unique):
    config = TimelineConfig(f"t-{unique}", buckets=8)
    assert store.create_timeline(config) == config
    assert store.create_timeline(config) == config
    with pytest.raises(errors.TimelineConflictError):
        store.create_timeline(TimelineConfig(f"t-{unique}", buckets=9))


def test_create_is_idempotent_by_id(store, tl):
    now = store.now_ms()
    first = store.create(tl, b"hello", timestamp_ms=now + HOUR, producer_group="g", id="a")
    again = store.create(tl, b"hello", timestamp_ms=now + HOUR, producer_group="g", id="a")
    assert first.new and not again.new
    assert again.message == first.message
    assert first.message.version == 1
    assert first.message.status(store.now_ms()) is Status.WAITING


def test_a_batch_create_settles_each_message_on_its_own(store, tl):
    """The batch path (COPY into a staging table on PostgreSQL): per message new,
    retry, conflict or refusal, in order; nothing of a refused message stored."""
    now = store.now_ms()
    store.create(tl, b"old", timestamp_ms=now + HOUR, producer_group="g", id="b-old")
    results = store.try_create_many(
        tl,
        [
            NewMessage(b"one", now + HOUR, "g", "b-1", headers=[("h", b"\x00v")]),
            NewMessage(b"old", now + HOUR, "g", "b-old"),
            NewMessage(b"one", now + HOUR, "g", "b-1"),
            NewMessage(b"two", now + HOUR, "g", "b-1"),
            NewMessage(b"x" * 65, now + HOUR, "g", "b-big"),
            NewMessage(b"other", now + HOUR, "g", "b-old"),
        ],
    )
    new, retry, same, clash, big, old_clash = results
    assert new.new and new.message.headers == (("h", b"\x00v"),)
    assert new.message == store.get(tl, "b-1")  # (made from what was sent: as stored)
    assert not retry.new and retry.message.body == b"old"
    assert not same.new and same.message.id == "b-1"
    assert isinstance(clash, errors.DuplicateIdError) and clash.message_id == "b-1"
    assert isinstance(big, errors.BodyTooLargeError) and big.message_id == "b-big"
    assert isinstance(old_clash, errors.DuplicateIdError)
    assert store.get(tl, "b-big") is None
    assert store.count(tl).total == 2


def test_generated_ids(store, tl):
    created = store.create(tl, b"x", timestamp_ms=0, producer_group="g")
    assert len(created.message.id) == 26
    assert store.get(tl, created.message.id) == created.message


def _snapshot(store, tl, mid):
    return store.get(tl, mid, include_deleted=True)


def test_bad_input_is_refused_naming_the_rule_and_message_unchanged(store, tl):
    now = store.now_ms()
    store.create(tl, b"body", timestamp_ms=now - 1, producer_group="owner", id="m")
    leased = store.lease_one(tl, "m", "c1", lease_ms=HOUR)
    token = leased.token
    before = _snapshot(store, tl, "m")
    cases = [
        (
            errors.UnknownTimelineError,
            lambda: store.create("nope-" + tl, b"x", timestamp_ms=0, producer_group="g"),
        ),
        (
            errors.DuplicateIdError,
            lambda: store.create(tl, b"other", timestamp_ms=now, producer_group="owner", id="m"),
        ),
        (
            errors.DuplicateIdError,
            lambda: store.create(tl, b"body", timestamp_ms=now, producer_group="someone", id="m"),
        ),
        (
            errors.BodyTooLargeError,
            lambda: store.create(tl, b"x" * 65, timestamp_ms=now, producer_group="g", id="big"),
        ),
        (errors.TimeInPastError, lambda: store.lease_one(tl, "m", "c1", lease_ms=0)),
        (
            errors.TimeInPastError,
            lambda: store.extend(tl, "m", "c1", until_ms=now - 10, token=token),
        ),
        (
            errors.NotHolderError,
            lambda: store.extend(tl, "m", "c2", until_ms=now + 2 * HOUR, token=token),
        ),
        (errors.NotHolderError, lambda: store.release(tl, "m", "c2", token=token)),
        (errors.NotHolderError, lambda: store.delete(tl, "m", consumer="c2", token=token)),
        (errors.NotOwnerError, lambda: store.delete(tl, "m", producer_group="intruder")),
        (errors.LeasedError, lambda: store.delete(tl, "m", producer_group="owner")),
        (errors.NotOwnerError, lambda: store.move(tl, "m", "intruder", timestamp_ms=now)),
        (errors.NotWaitingError, lambda: store.move(tl, "m", "owner", timestamp_ms=now)),
        (errors.NotAvailableError, lambda: store.lease_one(tl, "m", "c2", lease_ms=HOUR)),
        (
            errors.StaleVersionError,
            lambda: store.extend(
                tl,
                "m",
                "c1",
                until_ms=now + 2 * HOUR,
                token=token,
                version=leased.message.version - 1,
            ),
        ),
        (errors.MessageNotFoundError, lambda: store.lease_one(tl, "ghost", "c1", lease_ms=10)),
        (
            errors.InvalidMessageError,
            lambda: store.create(tl, b"x", timestamp_ms=-5, producer_group="g"),
        ),
        (errors.InvalidMessageError, lambda: store.delete(tl, "m")),
    ]
    for error, call in cases:
        with pytest.raises(error) as info:
            call()
        assert isinstance(info.value, errors.TimelineError)
        assert str(info.value).startswith(f"[{error.rule}]"), str(info.value)
        assert _snapshot(store, tl, "m") == before, error
    assert store.get(tl, "big") is None


def test_lease_extend_release_cycle_bumps_versions(store, tl):
    now = store.now_ms()
    store.create(tl, b"job", timestamp_ms=now - 10, producer_group="g", id="j")
    lease = store.lease_one(tl, "j", "c1", lease_ms=60_000)
    assert lease.message.lock_consumer == "c1"
    assert lease.due_ms == now - 10
    assert lease.message.timestamp_ms == lease.leased_at_ms + 60_000
    assert lease.message.version == 2
    assert lease.message.status(store.now_ms()) is Status.PROCESSING
    extended = store.extend(tl, "j", "c1", until_ms=now + HOUR, token=lease.token, version=2)
    assert (extended.timestamp_ms, extended.version) == (now + HOUR, 3)
    released = store.release(tl, "j", "c1", token=lease.token, at_ms=now + 2 * HOUR)
    assert released.lock_consumer is None and released.timestamp_ms == now + 2 * HOUR
    assert released.status(store.now_ms()) is Status.WAITING
    moved = store.move(tl, "j", "g", timestamp_ms=now - 1)
    assert moved.status(store.now_ms()) is Status.AVAILABLE
    # Release without a time: available at once.
    again = store.lease_one(tl, "j", "c2", lease_ms=60_000)
    assert again.token and again.token != lease.token
    released = store.release(tl, "j", "c2", token=again.token)
    assert released.status(store.now_ms()) is Status.AVAILABLE


def test_lost_lease_is_available_again(store, tl):
    store.create(tl, b"x", timestamp_ms=0, producer_group="g", id="x")
    lost = store.lease_one(tl, "x", "c1", lease_ms=50)
    time.sleep(0.1)
    with pytest.raises(errors.LeaseExpiredError):
        store.extend(tl, "x", "c1", until_ms=store.now_ms() + HOUR, token=lost.token)
    assert store.lease_one(tl, "x", "c2", lease_ms=HOUR).message.lock_consumer == "c2"


def test_delete_marks_and_purge_removes_in_batches(store, tl):
    now = store.now_ms()
    store.create_many(tl, [NewMessage(b"x", now + HOUR, "g", f"d{i}") for i in range(5)])
    for i in range(5):
        deleted = store.delete(tl, f"d{i}", producer_group="g")
        assert deleted.deleted
    assert store.get(tl, "d0") is None
    # A replayed create of a deleted id is a no-op; the message stays deleted.
    again = store.create(tl, b"x", timestamp_ms=now + HOUR, producer_group="g", id="d0")
    assert not again.new and again.message.deleted
    with pytest.raises(errors.MessageNotFoundError):
        store.delete(tl, "d0", producer_group="g")
    assert store.purge(keep_deleted_ms=HOUR) == 0
    time.sleep(0.01)
    assert store.purge(keep_deleted_ms=0, batch_size=2) >= 5
    assert store.get(tl, "d0", include_deleted=True) is None


def test_delete_by_holder_and_batch_ack(store, tl):
    store.create_many(tl, [NewMessage(b"x", 0, "g", f"h{i}") for i in range(3)])
    leases = sorted(store.lease(tl, "c1", lease_ms=HOUR, limit=10), key=lambda x: x.message.id)
    assert [lease.message.id for lease in leases] == ["h0", "h1", "h2"]
    assert len({lease.token for lease in leases}) == 3  # one token per lease
    store.delete(tl, "h0", consumer="c1", token=leases[0].token)
    assert store.delete_leased(tl, "c2", leases[1:2]) == []
    assert sorted(store.delete_leased(tl, "c1", leases)) == ["h1", "h2"]


def test_counts_by_time_range(store, tl):
    now = store.now_ms()
    store.create_many(
        tl,
        [NewMessage(b"x", now - 1_000, "g", f"a{i}") for i in range(3)]
        + [NewMessage(b"x", now + HOUR + i, "g", f"w{i}") for i in range(4)],
    )
    store.lease_one(tl, "a0", "c1", lease_ms=HOUR * 10)
    counts = store.count(tl)
    assert (counts.total, counts.available, counts.waiting, counts.processing) == (7, 2, 4, 1)
    assert store.count(tl, from_ms=now + HOUR, to_ms=now + HOUR + 2).waiting == 2
    assert store.count(tl, to_ms=now).total == 2
    with pytest.raises(errors.UnknownTimelineError):
        store.count("missing-" + tl)


def test_lease_takes_only_due_messages_in_due_order(store, tl):
    now = store.now_ms()
    store.create_many(
        tl,
        [NewMessage(b"x", now - 100 + i, "g", f"o{i}") for i in range(5)]
        + [NewMessage(b"x", now + HOUR, "g", "future")],
    )
    got = store.lease(tl, "c1", lease_ms=HOUR, limit=3)
    assert len(got) == 3 and [x.due_ms for x in got] == sorted(x.due_ms for x in got)
    rest = store.lease(tl, "c1", lease_ms=HOUR, limit=10)
    leased = got + rest
    assert sorted(x.message.id for x in leased) == [f"o{i}" for i in range(5)]
    assert all(x.due_ms == now - 100 + int(x.message.id[1:]) for x in leased)
    next_due, db_now = store.next_due_ms(tl, range(4))
    assert next_due is not None and next_due > db_now


def _hot_updates(store: TimelineStore) -> tuple[int, int]:
    """(updates, HOT updates) of timeline_messages so far, this session's included."""
    store._one("SELECT pg_stat_force_next_flush()", {})
    store._one("SELECT 1", {})  # a transaction ends: the session's counts are flushed
    store._one("SELECT pg_stat_clear_snapshot()", {})
    row = store._one(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
        "WHERE relid = 'timeline_messages'::regclass",
        {},
    )
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_lease_writes_no_index_entry(store, unique):
    """A lease leaves every indexed column as it was (the lease end has a column of its
    own), so PostgreSQL updates the row in place on its page: a HOT update. (Bodies of
    300 bytes: the fillfactor leaves room for a lease of every row of a page, a lease
    adding ~80 bytes a row; messages of a few bytes fill pages with more rows than that.)"""
    tl = store.create_timeline(TimelineConfig(f"hot-{unique}", buckets=4)).name
    store.create_many(tl, [NewMessage(b"x" * 300, i, "g", f"hot{i}") for i in range(200)])
    updates, hot = _hot_updates(store)
    leased = store.lease(tl, "c1", lease_ms=HOUR, limit=200)
    assert len(leased) == 200
    extended = store.extend(
        tl, "hot0", "c1", until_ms=store.now_ms() + 2 * HOUR, token=leased[0].token
    )
    assert extended.timestamp_ms > leased[0].until_ms
    after_updates, after_hot = _hot_updates(store)
    assert after_updates - updates >= 201
    assert after_hot - hot == after_updates - updates, "a lease moved a row in an index"
    # The due time is kept: the leased rows are still listed, oldest first, by due time.
    assert [x.due_ms for x in leased] == list(range(200))


def test_clock_drift_is_small_on_one_machine(store):
    drift = store.clock_drift()
    assert abs(drift.drift_ms) < 1_000 + drift.rtt_ms


def _refused(error, call):
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, errors.TimelineError)
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
            errors.LeaseTokenError,
            lambda t=token: store.extend(tl, "m", "c1", until_ms=now + 2 * HOUR, token=t),
        )
        _refused(errors.LeaseTokenError, lambda t=token: store.release(tl, "m", "c1", token=t))
        _refused(
            errors.LeaseTokenError, lambda t=token: store.delete(tl, "m", consumer="c1", token=t)
        )
        forged = Lease(lease.message, lease.due_ms, lease.leased_at_ms, token=token)
        assert store.delete_leased(tl, "c1", [forged]) == []
    # The name alone (no token) is not enough either.
    _refused(errors.InvalidMessageError, lambda: store.delete(tl, "m", consumer="c1"))
    with pytest.raises(errors.InvalidMessageError):
        store.delete_leased(tl, "c1", store.leases_of(tl, "c1"))
    assert [x.token for x in store.leases_of(tl, "c1")] == [None]
    # The right token under another name: still the holder's lease only.
    _refused(errors.NotHolderError, lambda: store.release(tl, "m", "c2", token=lease.token))
    assert store.get(tl, "m") == before
    # The holder's token works.
    assert store.delete_leased(tl, "c1", [lease]) == ["m"]


def test_a_producer_cannot_delete_or_move_a_message_under_a_live_lease(postgres, store, tl):
    """The rule for the owner, as SQS's for a message in flight: while
    a lease is live the message is the holder's -- the producer group's delete is
    refused naming the lease (holder, end), and changes nothing; the holder deletes
    with its token. Once the lease is given back or has ended, it is the group's again,
    and the old token opens nothing."""
    with TimelineProducer(postgres, tl, "owner") as producer:
        for mid in ("a", "b", "c"):
            producer.put(b"x", timestamp_ms=0, id=mid)
        held = store.lease_one(tl, "a", "c1", lease_ms=HOUR)
        with pytest.raises(errors.LeasedError, match=r"leased to 'c1' until \d+; only the holder"):
            producer.delete("a")
        _refused(errors.NotWaitingError, lambda: producer.move("a", store.now_ms() + HOUR))
        assert store.get(tl, "a") == held.message
        assert store.delete_leased(tl, "c1", [held]) == ["a"]

        given_back = store.lease_one(tl, "b", "c1", lease_ms=HOUR)
        store.release(tl, "b", "c1", token=given_back.token)
        producer.delete("b")
        assert store.get(tl, "b") is None

        lapsed = store.lease_one(tl, "c", "c1", lease_ms=50)
        time.sleep(0.1)
        producer.delete("c")
        _refused(
            errors.MessageNotFoundError,
            lambda: store.delete(tl, "c", consumer="c1", token=lapsed.token),
        )


def test_a_database_that_does_not_answer_is_a_timeline_error(postgres, tl):
    """The consumer's LISTEN connection maps driver errors as the store does."""
    with pytest.raises(errors.StoreUnavailableError, match=r"^\[store-unavailable\]"):
        Waker("postgresql://127.0.0.1:1/nowhere?connect_timeout=2", tl)
    waker = Waker(postgres, tl)
    waker.close()
    with pytest.raises(errors.TimelineError):
        waker.wait(10, None)  # on a closed connection


def test_a_new_lease_invalidates_the_old_token(store, tl):
    store.create(tl, b"x", timestamp_ms=0, producer_group="g", id="m")
    old = store.lease_one(tl, "m", "c1", lease_ms=50)
    time.sleep(0.1)  # the lease lapses; the same name leases it again
    new = store.lease_one(tl, "m", "c1", lease_ms=HOUR)
    assert new.token != old.token
    _refused(errors.LeaseTokenError, lambda: store.release(tl, "m", "c1", token=old.token))
    _refused(errors.LeaseTokenError, lambda: store.delete(tl, "m", consumer="c1", token=old.token))
    assert store.get(tl, "m").lock_consumer == "c1"
    released = store.release(tl, "m", "c1", token=new.token)
    assert released.lock_consumer is None
    # A released lease's token is spent.
    _refused(errors.NotHolderError, lambda: store.delete(tl, "m", consumer="c1", token=new.token))


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
            errors.LeaseTooLongError,
            lambda u=until: store.extend(tl, "m", "c1", until_ms=u, token=lease.token),
        )
    assert store.get(tl, "m") == before
    _refused(
        errors.LeaseTooLongError, lambda: store.lease_one(tl, "m", "c1", lease_ms=MAX_LEASE_MS + 1)
    )
    longest = store.extend(
        tl, "m", "c1", until_ms=store.now_ms() + MAX_LEASE_MS - 60_000, token=lease.token
    )
    assert longest.timestamp_ms > before.timestamp_ms


def test_stream_time_moves_only_forward_and_never_far_past_the_clock(store, unique):
    stream = f"s{unique}/orders"
    now = store.now_ms()
    _refused(errors.StreamTimeAheadError, lambda: store.advance_stream_time(stream, 2**62 - 1))
    _refused(
        errors.StreamTimeAheadError,
        lambda: store.advance_stream_time(stream, now + MAX_STREAM_TIME_LEAD_MS + HOUR),
    )
    assert store.stream_times([stream]) == {}
    assert store.advance_stream_time(stream, now - 1_000) == now - 1_000
    assert store.advance_stream_time(stream, now - 1_000) == now - 1_000  # the same: no-op
    _refused(
        errors.StreamTimeBackwardsError, lambda: store.advance_stream_time(stream, now - 2_000)
    )
    _refused(errors.StreamTimeAheadError, lambda: store.advance_stream_time(stream, 2**62 - 1))
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
        with pytest.raises(errors.InvalidMessageError) as info:
            call()
        assert isinstance(info.value, TidemarkError)
        assert str(info.value).startswith("[invalid-input]"), str(info.value)
    assert store.get(tl, "m").lock_consumer == "c1"


def test_a_value_the_database_refuses_is_a_timeline_error(store, tl):
    """What no check foresaw still reaches the caller as a TidemarkError naming a rule."""
    with pytest.raises(errors.InvalidMessageError, match=r"^\[invalid-input\] the database"):
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
            # 4: message headers, 5: buffer source offsets, 6: the group index dropped,
            # 7: the lease end in a column of its own, the consumer index dropped,
            # 8: the relay's cursor
            assert store.migrate() == [3, 4, 5, 6, 7, 8, 9]
            assert store.migrate() == []
            assert store._one(
                "SELECT count(*) FROM pg_indexes WHERE schemaname = %(s)s "
                "AND indexname IN ('timeline_messages_group', 'timeline_messages_consumer')",
                {"s": schema},
            ) == (0,)
            held = store.get("up", "held")
            assert held.headers == ()  # a message from before: none
            # The lease end kept in ts before the upgrade is still its lease end.
            assert held.timestamp_ms > store.now_ms() + HOUR // 2
            assert store.leases_of("up", "c1")[0].until_ms == held.timestamp_ms
            # A lease taken before the upgrade has no token: nobody can act on it.
            _refused(
                errors.LeaseTokenError,
                lambda: store.release("up", "held", "c1", token="x" * 32),
            )
            store.create("up", b"y", timestamp_ms=0, producer_group="g", id="new")
            (lease,) = store.lease("up", "c2", lease_ms=HOUR)
            assert store.delete_leased("up", "c2", [lease]) == ["new"]
    finally:
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
