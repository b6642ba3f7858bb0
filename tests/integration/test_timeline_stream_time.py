"""Event-time timeline messages on a real PostgreSQL, stream time from a real Delta table."""

from __future__ import annotations

import pytest

from tidemark.controller.delta.tables import append_watermarks
from tidemark.controller.model import Watermark
from tidemark.pipelines.reading.stream_time import LatestStreamTimes
from tidemark.pipelines.timeline.clock import WatermarkHorizon
from tidemark.pipelines.timeline.config import ConsumerConfig, TimelineConfig
from tidemark.pipelines.timeline.consumer import TimelineConsumer
from tidemark.pipelines.timeline.exceptions import (
    InvalidMessageError,
    NotAvailableError,
    StreamTimeBackwardsError,
)
from tidemark.pipelines.timeline.model import Status
from tidemark.pipelines.timeline.producer import TimelineProducer
from tidemark.pipelines.timeline.store import TimelineStore

T = 1_000_000  # an event time far in the wall clock's past: due by the clock long ago


@pytest.fixture
def tl(postgres, unique):
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(f"evt-{unique}", buckets=4))
    return f"evt-{unique}"


def config(name):
    return ConsumerConfig(name, lease_ms=60_000, use_notify=False, max_idle_ms=200)


def test_leased_only_after_the_watermark_passes(postgres, tl, unique, tmp_path):
    root, stream = str(tmp_path), f"s{unique}/orders"
    seq = iter(range(100))

    def watermark(time_ms):
        append_watermarks(root, [Watermark(stream, time_ms, time_ms, {0: 1}, next(seq))])

    clock = LatestStreamTimes(root)
    with (
        TimelineProducer(postgres, tl, "g") as producer,
        TimelineConsumer(postgres, tl, config("c1"), stream_clock=clock) as consumer,
        TimelineConsumer(postgres, tl, config("c2"), stream_clock=clock) as other,
    ):
        made = producer.put(b"report", due_at_stream_time=(stream, T), id="report")
        assert made.message.due_stream == stream and made.message.timestamp_ms == T
        producer.put(b"plain", timestamp_ms=producer.store.now_ms(), id="plain")  # due now
        assert [x.message.id for x in consumer.poll(timeout_ms=300)] == ["plain"]
        assert producer.store.count(tl).waiting == 1

        # No watermark yet, then one below T: never leased, by poll or by id.
        assert consumer.poll(timeout_ms=400) == []
        watermark(T - 1)
        assert consumer.poll(timeout_ms=600) == []
        assert producer.store.stream_times([stream]) == {stream: T - 1}
        with pytest.raises(NotAvailableError, match=f"waits for stream '{stream}'"):
            other.store.lease_one(tl, "report", "c2", lease_ms=1_000)
        message = producer.store.get(tl, "report")
        assert message.status(now_ms=10**13, stream_time_ms=T - 1) is Status.WAITING

        # The watermark reaches T: leased once, under the usual lease rules.
        watermark(T)
        got = consumer.poll(timeout_ms=3_000)
        assert [x.message.id for x in got] == ["report"]
        assert got[0].due_ms == T and got[0].due_stream == stream
        assert got[0].message.due_stream is None and got[0].message.lock_consumer == "c1"
        with pytest.raises(NotAvailableError, match="leased to 'c1'"):
            other.store.lease_one(tl, "report", "c2", lease_ms=1_000)
        # Released, it is due again on the clock (its stream condition was met once).
        consumer.release(got[0])
        again = other.store.lease_one(tl, "report", "c2", lease_ms=1_000)
        assert again.message.lock_consumer == "c2" and again.due_stream is None
        assert other.ack([again]) == ["report"]
        assert consumer.metrics().lag_max_ms < 60_000  # event-time leases add no lag

        # Stream time never goes back, and saying so is an error, not a no-op.
        with pytest.raises(StreamTimeBackwardsError, match=r"\[stream-time-backwards\]"):
            producer.store.advance_stream_time(stream, T - 500)
        assert producer.store.stream_times([stream]) == {stream: T}


def test_a_whole_timeline_on_one_stream_s_time(postgres, tl, unique, tmp_path):
    root, stream = str(tmp_path), f"h{unique}/orders"
    clock = LatestStreamTimes(root)
    with TimelineProducer(postgres, tl, "g") as producer:
        producer.put(b"x", timestamp_ms=T, id="x")
        with TimelineStore(postgres, due=WatermarkHorizon(stream, clock)) as store:
            assert store.lease(tl, "c", lease_ms=1_000) == []  # no watermark: nothing due
            append_watermarks(root, [Watermark(stream, T, T, {0: 1}, 0)])
            assert [x.message.id for x in store.lease(tl, "c", lease_ms=1_000)] == ["x"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"due_at_stream_time": ("s/x", 5), "timestamp_ms": 5},
        {"due_at_stream_time": ("s/x",)},
        {"due_at_stream_time": ("", 5)},
        {"due_at_stream_time": ("s/x", -1)},
    ],
)
def test_bad_stream_times_are_refused(postgres, tl, kwargs):
    with TimelineProducer(postgres, tl, "g") as producer:
        with pytest.raises(InvalidMessageError):
            producer.put(b"x", **kwargs)
        assert producer.store.count(tl).total == 0


def test_event_time_messages_fall_due_in_the_relay_and_for_cli_lease(
    postgres, kafka, tl, unique, tmp_path, monkeypatch, capsys
):
    """From the shell and the relay, an event-time message is handed out once the
    stream's watermark (the Delta ``marks`` table) passes its time, not before."""
    import argparse
    import json

    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tidemark.cli import timeline as cli
    from tidemark.environment import DELTA_ROOT, POSTGRES_DSN
    from tidemark.pipelines.timeline.config import RelayConfig
    from tidemark.pipelines.timeline.relay import TimelineRelay

    root, stream = str(tmp_path), f"r{unique}/orders"
    monkeypatch.setenv(DELTA_ROOT, root)
    monkeypatch.setenv(POSTGRES_DSN, postgres)
    target = f"evt-out-{unique}"
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(target, 1, 1)])[target].result(30)
    with TimelineProducer(postgres, tl, "g") as producer:
        producer.put(b"relayed", due_at_stream_time=(stream, T), id="relayed")
        producer.put(b"leased", due_at_stream_time=(stream, T + 1), id="leased")

    def lease_from_the_shell():
        parser = argparse.ArgumentParser(prog="tidemark")
        cli.register(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(["timeline", "lease", tl, "--consumer", "sh", "--format", "json"])
        assert args.func(args) == 0
        return [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines() if line]

    relay = TimelineRelay(
        postgres,
        kafka,
        tl,
        RelayConfig(target),
        ConsumerConfig("relay", lease_ms=60_000, max_idle_ms=100),
        stream_clock=cli._stream_clock(),
    )
    try:
        assert relay.run_once(timeout_ms=300) == 0  # no watermark yet
        append_watermarks(root, [Watermark(stream, T - 1, T - 1, {0: 1}, 0)])
        assert relay.run_once(timeout_ms=300) == 0
        assert lease_from_the_shell() == []
        append_watermarks(root, [Watermark(stream, T, T, {0: 2}, 1)])
        assert relay.run_once(timeout_ms=3_000) == 1  # T reached: "relayed", not "leased"
        append_watermarks(root, [Watermark(stream, T + 1, T + 1, {0: 3}, 2)])
        assert lease_from_the_shell() == ["leased"]
    finally:
        relay.close()
    reader = Consumer(
        {"bootstrap.servers": kafka, "group.id": f"c-{unique}", "auto.offset.reset": "earliest"}
    )
    reader.subscribe([target])
    got = [m for m in reader.consume(10, 10) if m.error() is None]
    reader.close()
    assert [m.value() for m in got] == [b"relayed"]
