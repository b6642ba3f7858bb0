"""The timeline store against a real PostgreSQL: operations, states, refusals, counts."""

from __future__ import annotations

import time

import pytest

from pipelines.timeline.config import TimelineConfig
from pipelines.timeline.exceptions import (
    BodyTooLargeError,
    DuplicateIdError,
    InvalidMessageError,
    LeasedError,
    LeaseExpiredError,
    MessageNotFoundError,
    NotAvailableError,
    NotHolderError,
    NotOwnerError,
    NotWaitingError,
    StaleVersionError,
    TimeInPastError,
    TimelineConflictError,
    TimelineError,
    UnknownTimelineError,
)
from pipelines.timeline.model import Status
from pipelines.timeline.store import NewMessage, TimelineStore

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
    with pytest.raises(TimelineConflictError):
        store.create_timeline(TimelineConfig(f"t-{unique}", buckets=9))


def test_create_is_idempotent_by_id(store, tl):
    now = store.now_ms()
    first = store.create(tl, b"hello", timestamp_ms=now + HOUR, producer_group="g", id="a")
    again = store.create(tl, b"hello", timestamp_ms=now + HOUR, producer_group="g", id="a")
    assert first.new and not again.new
    assert again.message == first.message
    assert first.message.version == 1
    assert first.message.status(store.now_ms()) is Status.WAITING


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
            UnknownTimelineError,
            lambda: store.create("nope-" + tl, b"x", timestamp_ms=0, producer_group="g"),
        ),
        (
            DuplicateIdError,
            lambda: store.create(tl, b"other", timestamp_ms=now, producer_group="owner", id="m"),
        ),
        (
            DuplicateIdError,
            lambda: store.create(tl, b"body", timestamp_ms=now, producer_group="someone", id="m"),
        ),
        (
            BodyTooLargeError,
            lambda: store.create(tl, b"x" * 65, timestamp_ms=now, producer_group="g", id="big"),
        ),
        (TimeInPastError, lambda: store.lease_one(tl, "m", "c1", lease_ms=0)),
        (TimeInPastError, lambda: store.extend(tl, "m", "c1", until_ms=now - 10, token=token)),
        (
            NotHolderError,
            lambda: store.extend(tl, "m", "c2", until_ms=now + 2 * HOUR, token=token),
        ),
        (NotHolderError, lambda: store.release(tl, "m", "c2", token=token)),
        (NotHolderError, lambda: store.delete(tl, "m", consumer="c2", token=token)),
        (NotOwnerError, lambda: store.delete(tl, "m", producer_group="intruder")),
        (LeasedError, lambda: store.delete(tl, "m", producer_group="owner")),
        (NotOwnerError, lambda: store.move(tl, "m", "intruder", timestamp_ms=now)),
        (NotWaitingError, lambda: store.move(tl, "m", "owner", timestamp_ms=now)),
        (NotAvailableError, lambda: store.lease_one(tl, "m", "c2", lease_ms=HOUR)),
        (
            StaleVersionError,
            lambda: store.extend(
                tl,
                "m",
                "c1",
                until_ms=now + 2 * HOUR,
                token=token,
                version=leased.message.version - 1,
            ),
        ),
        (MessageNotFoundError, lambda: store.lease_one(tl, "ghost", "c1", lease_ms=10)),
        (InvalidMessageError, lambda: store.create(tl, b"x", timestamp_ms=-5, producer_group="g")),
        (InvalidMessageError, lambda: store.delete(tl, "m")),
    ]
    for error, call in cases:
        with pytest.raises(error) as info:
            call()
        assert isinstance(info.value, TimelineError)
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
    with pytest.raises(LeaseExpiredError):
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
    with pytest.raises(MessageNotFoundError):
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
    with pytest.raises(UnknownTimelineError):
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


def test_clock_drift_is_small_on_one_machine(store):
    drift = store.clock_drift()
    assert abs(drift.drift_ms) < 1_000 + drift.rtt_ms
