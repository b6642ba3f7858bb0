"""Consumers against a real PostgreSQL: timely delivery, wake-ups, restarts, spreading."""

from __future__ import annotations

import threading
import time

import pytest

from tidemark.pipelines.timeline.config import ConsumerConfig, TimelineConfig
from tidemark.pipelines.timeline.consumer import TimelineConsumer
from tidemark.pipelines.timeline.producer import TimelineProducer
from tidemark.pipelines.timeline.store import TimelineStore


@pytest.fixture
def tl(postgres, unique):
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(f"cons-{unique}", buckets=8))
    return f"cons-{unique}"


def _count_calls(obj, name):
    """Count calls of a real method (instrumentation, the method still runs)."""
    calls = []
    real = getattr(obj, name)

    def counted(*args, **kwargs):
        calls.append(time.monotonic())
        return real(*args, **kwargs)

    setattr(obj, name, counted)
    return calls


def test_delivery_at_due_time_without_tight_polling(postgres, tl):
    config = ConsumerConfig(
        "c1", max_idle_ms=10_000, use_notify=False, heartbeat_ms=5_000, member_ttl_ms=15_000
    )
    with (
        TimelineProducer(postgres, tl, "g") as producer,
        TimelineConsumer(postgres, tl, config) as consumer,
    ):
        due = producer.store.now_ms() + 700
        producer.put(b"later", timestamp_ms=due, id="later")
        leases_calls = _count_calls(consumer.store, "lease")
        started = time.monotonic()
        got = consumer.poll(timeout_ms=3_000)
        waited = time.monotonic() - started
        assert [lease.message.id for lease in got] == ["later"]
        assert 0.5 < waited < 1.5
        assert len(leases_calls) <= 4  # slept until the due time, did not spin
        lag = consumer.metrics()
        assert lag.delivered == 1 and lag.lag_max_ms < 250
        assert lag.drift is not None
        assert consumer.ack(got) == ["later"]


def test_notification_wakes_a_sleeping_consumer(postgres, tl):
    config = ConsumerConfig("c1", max_idle_ms=10_000, heartbeat_ms=5_000, member_ttl_ms=15_000)
    with TimelineConsumer(postgres, tl, config) as consumer:
        result: list[float] = []

        def wait():
            got = consumer.poll(timeout_ms=8_000)
            result.append(time.monotonic())
            assert [lease.message.id for lease in got] == ["now"]

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.5)  # the consumer sleeps: nothing is due, next wake in 10 s
        with TimelineProducer(postgres, tl, "g") as producer:
            sent = time.monotonic()
            producer.put(b"x", delay_ms=0, id="now")
        waiter.join(10)
        assert result and result[0] - sent < 0.5


def test_restart_with_same_id_gets_its_leases_again_when_they_lapse(postgres, tl):
    """A name is not a capability: the earlier leases come back only when they lapse."""
    with TimelineProducer(postgres, tl, "g") as producer:
        producer.put_many([(b"x", 0, f"r{i}") for i in range(3)])
    first = TimelineConsumer(postgres, tl, ConsumerConfig("worker", lease_ms=1_000))
    got = first.poll(timeout_ms=1_000)
    assert len(got) == 3
    first.close(leave=False)  # as a crash would: no release, no ack
    config = ConsumerConfig("worker", lease_ms=60_000, use_notify=False, max_idle_ms=200)
    with TimelineConsumer(postgres, tl, config) as again:
        assert again.poll(timeout_ms=100) == []  # still leased, and not by these tokens
        regained = again.poll(timeout_ms=3_000, limit=10)
        assert sorted(lease.message.id for lease in regained) == ["r0", "r1", "r2"]
        assert again.ack(got) == []  # the crashed run's tokens are spent
        assert sorted(again.ack(regained)) == ["r0", "r1", "r2"]
        assert again.poll(timeout_ms=50) == []
    with TimelineConsumer(postgres, tl, ConsumerConfig("other")) as other:
        assert other.poll(timeout_ms=50) == []


def test_buckets_are_spread_over_consumers(postgres, tl):
    config = {"heartbeat_ms": 100, "member_ttl_ms": 2_000}
    with (
        TimelineConsumer(postgres, tl, ConsumerConfig("a", **config)) as a,
        TimelineConsumer(postgres, tl, ConsumerConfig("b", **config)) as b,
    ):
        time.sleep(0.15)
        a.poll(timeout_ms=10)
        b.poll(timeout_ms=10)
        assert sorted(a.my_buckets + b.my_buckets) == list(range(8))
        assert a.my_buckets and b.my_buckets
        with TimelineProducer(postgres, tl, "g") as producer:
            producer.put_many([(b"x", 0, f"s{i}") for i in range(40)])
        got_a = {lease.message.id for lease in a.poll(timeout_ms=500, limit=100)}
        got_b = {lease.message.id for lease in b.poll(timeout_ms=500, limit=100)}
        assert got_a and got_b and not got_a & got_b
        assert len(got_a | got_b) == 40


def test_extend_and_release_through_the_consumer(postgres, tl):
    with TimelineProducer(postgres, tl, "g") as producer:
        producer.put(b"x", delay_ms=0, id="e")
    with TimelineConsumer(postgres, tl, ConsumerConfig("c", lease_ms=1_000)) as consumer:
        (lease,) = consumer.poll(timeout_ms=500)
        longer = consumer.extend(lease, lease.until_ms + 60_000)
        assert longer.until_ms == lease.until_ms + 60_000
        assert consumer.release(longer).lock_consumer is None
        assert [x.message.id for x in consumer.poll(timeout_ms=500)] == ["e"]
