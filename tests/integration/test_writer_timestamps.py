"""``write()`` exposes the stored timestamp and offset; S2's opt-out refuses adjustments;
every producer (``EventWriter``, ``TransactionalWriter``, the drop-in producer in both
position modes) applies the stream's timestamping rules alike.

Real Kafka, the in-memory metadata store.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.integration.test_writer import config, make_stream, manager, read, settings, store
from tests.integration.test_writer import marks as sent_marks
from tidemark.controller.config import ScalingPolicy, StreamConfiguration, TimestampingMode
from tidemark.pipelines.writing.exceptions import MissingTimestampError, TimestampAdjustmentError
from tidemark.pipelines.writing.producer import TidemarkProducer
from tidemark.pipelines.writing.transactions import TransactionalWriter
from tidemark.pipelines.writing.writer import EventWriter, RecordAck

__all__ = ["config", "manager", "settings", "store"]  # the shared fixtures

NOW = int(time.time() * 1000)


def test_write_returns_the_stored_timestamp_and_acks_the_offset(
    manager, store, kafka, config, unique
):
    stream = make_stream(manager, unique, segments=1)
    acks: list[RecordAck] = []
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=config) as w:
        assert w.write(b"a", "k", timestamp=NOW - 1000, on_ack=acks.append) == NOW - 1000
        assert w.write(b"b", "k", timestamp=NOW - 1100, on_ack=acks.append) == NOW - 1000
        assert w.write(b"c", "k") >= NOW  # no timestamp: arrival time
        w.flush()
    assert acks == [RecordAck(0, NOW - 1000, False), RecordAck(1, NOW - 1000, True)]


def test_refuse_adjustments_refuses_900_after_1000_and_stores_only_1000(
    manager, store, kafka, config, unique
):
    stream = f"w{unique}/strict"
    manager.create_scope(f"w{unique}")
    meta = manager.create(
        stream, StreamConfiguration(ScalingPolicy.fixed(1), refuse_adjustments=True)
    )
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=config) as w:
        w.write(b"first", "k", timestamp=1000)
        with pytest.raises(TimestampAdjustmentError, match="900 would be stored as 1000"):
            w.write(b"second", "k", timestamp=900)
        with pytest.raises(TimestampAdjustmentError, match=r"timestamps\[1\]"):
            w.write_batch([b"x", b"y"], "k", timestamps=[1000, 900])  # all or nothing
        with pytest.raises(TimestampAdjustmentError, match="arrival time"):
            w.write(b"future", "k", timestamp=NOW + 3_600_000)  # capped stream
        w.flush()
        assert w.position() == {0: 1}
    got = [(m.value(), m.timestamp()[1]) for m in read(kafka, meta.topic, [0])]
    assert got == [(b"first", 1000)]


# --- every producer: the drop-in producer in both position modes, the
# transactional writer and EventWriter keep the same rules on one adopted topic --------------

PRODUCERS = ["EventWriter", "TransactionalWriter", "dropin", "dropin end_offsets"]


def adopted(manager, unique: str, name: str, **config: object) -> tuple[str, str]:
    """A new one-partition topic adopted (without tidemark routing, so both drop-in modes
    take it) as stream ``a<unique>/<name>`` configured with ``config``: (stream, topic)."""
    scope, topic = f"a{unique}", f"adopted-{unique}-{name}"
    manager.topics.create(topic, 1, {})
    manager.create_scope(scope)  # idempotent
    stream = f"{scope}/{name}"
    manager.adopt(stream, topic, config=StreamConfiguration(ScalingPolicy.fixed(1), **config))
    return stream, topic


def producer(kind: str, stream: str, store, kafka: str, config) -> tuple[Any, Any]:
    """A producer of ``kind`` writing ``stream`` under writer id ``w``, as two calls:
    ``send(value, timestamp or None)`` (returns the stamp) and ``close()``."""
    if kind == "EventWriter":
        w = EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=config)
        return (lambda v, ts: w.write(v, "k", timestamp=ts)), w.close
    if kind == "TransactionalWriter":
        tw = TransactionalWriter("w", stream, store=store, bootstrap_servers=kafka, config=config)
        txn = tw.begin()

        def commit_and_close() -> None:
            txn.commit()
            tw.close()

        return (lambda v, ts: txn.write(v, "k", timestamp=ts)), commit_and_close
    p = TidemarkProducer(
        {"bootstrap.servers": kafka, "linger.ms": 1, "enable.idempotence": True},
        stream=stream,
        writer_id="w",
        store=store,
        cluster=config.cluster,
        positions_from="end_offsets" if kind.endswith("end_offsets") else "reports",
    )
    topic = store.get_stream(stream).topic
    return (lambda v, ts: p.produce(topic, v, "k", timestamp=ts or 0)), p.close


@pytest.mark.parametrize("kind", PRODUCERS)
def test_client_require_refuses_a_record_without_timestamp_on_every_producer(
    manager, store, kafka, config, unique, kind
):
    stream, topic = adopted(
        manager, unique, "required", timestamping=TimestampingMode.CLIENT_REQUIRE
    )
    send, close = producer(kind, stream, store, kafka, config)
    try:
        send(b"timed", 1000)
        with pytest.raises(MissingTimestampError, match=f"stream {stream} .*client-require"):
            send(b"untimed", None)
        send(b"timed again", 1001)
    finally:
        close()
    got = [(m.value(), m.timestamp()[1]) for m in read(kafka, topic, [0], committed=True)]
    assert got == [(b"timed", 1000), (b"timed again", 1001)]


@pytest.mark.parametrize("kind", PRODUCERS)
def test_a_refuse_adjust_stream_refuses_900_after_1000_on_every_producer(
    manager, store, kafka, config, unique, kind
):
    stream, topic = adopted(manager, unique, "strict", refuse_adjustments=True)
    send, close = producer(kind, stream, store, kafka, config)
    try:
        assert send(b"first", 1000) in (1000, None)  # a transaction's write returns nothing
        with pytest.raises(
            TimestampAdjustmentError, match=f"900 would be stored as 1000.*{stream}"
        ):
            send(b"second", 900)
        with pytest.raises(TimestampAdjustmentError, match="arrival time"):
            send(b"future", NOW + 3_600_000)  # capped stream
    finally:
        close()
    got = [(m.value(), m.timestamp()[1]) for m in read(kafka, topic, [0], committed=True)]
    assert got == [(b"first", 1000)]


@pytest.mark.parametrize("positions_from", ["reports", "end_offsets"])
def test_the_dropin_stamps_by_the_streams_rules_and_its_marks_are_event_writers(
    manager, store, kafka, config, settings, unique, positions_from
):
    """Monotonic per segment, capped at the producer's clock, arrival time for a record
    without one; ``produce`` returns the stamp and the delivery report has it stored; every
    mark carries the producer's instance token and the highest timestamp sent."""
    stream, topic = adopted(manager, unique, "stamped")
    p = TidemarkProducer(
        {"bootstrap.servers": kafka, "linger.ms": 1, "enable.idempotence": True},
        stream=stream,
        writer_id="w",
        store=store,
        cluster=settings,
        positions_from=positions_from,
    )
    stored: list[int] = []
    report = (
        (lambda err, msg: stored.append(msg.timestamp()[1]))
        if positions_from == "reports"
        else None
    )
    stamps = [
        p.produce(topic, b"a", "k", timestamp=NOW - 1000, on_delivery=report),
        p.produce(topic, b"b", "k", timestamp=NOW - 1100, on_delivery=report),  # raised
    ]
    p.note_time(NOW - 1000)
    before = int(time.time() * 1000)
    stamps.append(p.produce(topic, b"c", "k", on_delivery=report))  # arrival time
    stamps.append(p.produce(topic, b"d", "k", timestamp=NOW + 3_600_000, on_delivery=report))
    after = int(time.time() * 1000)
    p.flush()
    p.note_time(NOW - 500)  # a note below the events that ran ahead of it
    p.close()
    assert stamps[:2] == [NOW - 1000, NOW - 1000]
    assert before <= stamps[2] <= stamps[3] <= after  # the future one capped
    got = [m.timestamp()[1] for m in read(kafka, topic, [0])]
    assert got == stamps
    if positions_from == "reports":
        assert stored == stamps  # the delivery report shows the stored (adjusted) stamp
    marks = sent_marks(kafka, settings, stream)
    assert [(m.time, m.alive) for m in marks] == [
        (NOW - 1000, True),
        (NOW - 500, True),
        (NOW - 500, False),
    ]
    assert {m.instance for m in marks} == {p.instance}
    assert [m.max_event_time for m in marks] == [NOW - 1000, stamps[3], stamps[3]]


def test_a_timestamping_update_reaches_a_running_writer_at_its_next_write(
    manager, store, kafka, config, unique
):
    """``stream update --timestamping arrival`` while a writer runs: its next record is
    stamped on arrival (its own timestamp ignored). No new writer, no restart."""
    stream = make_stream(manager, unique, segments=1)
    base = manager.describe(stream).config
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=config) as w:
        assert w.write(b"client", "k", timestamp=1_000) == 1_000
        manager.update(stream, StreamConfiguration(base.scaling_policy, timestamping="arrival"))
        before = int(time.time() * 1000)
        assert w.write(b"arrival", "k", timestamp=2_000) >= before
        w.flush()
