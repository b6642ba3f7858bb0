"""``write()`` exposes the stored timestamp and offset; S2's opt-out refuses adjustments.

Real Kafka, the in-memory metadata store.
"""

from __future__ import annotations

import time

import pytest

from controller.config import ScalingPolicy, StreamConfiguration
from pipelines.writing.exceptions import TimestampAdjustmentError
from pipelines.writing.writer import EventWriter, RecordAck
from tests.integration.test_writer import config, make_stream, manager, read, settings, store

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
