"""A reader and a scale whose sealed size comes late, on real Kafka + ZooKeeper.

The race (readers' exactly-once): a scale writes the new epoch, waits
``seal_drain_ms``, then records the sealed segment's end offset as its sealed
size. A writer slower than the drain still lands records on the sealed segment
after that measurement -- at or beyond the sealed size -- and re-sends them to
the successor. A reader that returned such a record while the size was not yet
known (to it) would return its re-sent copy too: a duplicate. Readers hold back
a segment that left the current epoch until its sealed size is recorded.

The scale's steps are driven in the order that opens the gap (a crash after
the epoch step, then the same request again), and the slow writer is a plain
producer writing the late records and their re-sent copies, so the sequence is
the same on every run.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from confluent_kafka import Producer

import tidemark.pipelines.reading.reader as reader_module
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.model import KeyRange, segment_id
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.pipelines.reading.group import ReaderConfig, ReaderGroup

SEALED = [0]
RANGES = [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)]
SUCCESSOR = segment_id(1, 1)  # partition 1
SLOW = ReaderConfig(rebalance_interval_ms=5_000, commit_interval_ms=0)
"""Rebalances far apart (the metadata looked at every 100 ms still): without the
hold, the reader would read the sealed segment as unsealed until a look at the
metadata found the size -- a race with the late records."""
STALE = ReaderConfig(rebalance_interval_ms=5_000, metadata_interval_ms=5_000, commit_interval_ms=0)
"""A reader that looks at the metadata less often than the scale drains."""


class Crash(Exception):
    pass


def _crash_after_epoch(operation: str, step: str) -> None:
    if (operation, step) == ("scale", "epoch"):
        raise Crash("the scale stopped after writing the new epoch")


@pytest.fixture
def store(zk_client):
    return ZooKeeperStore(zk_client, "/tidemark")


@pytest.fixture
def stream(store, kafka, unique):
    manager = StreamManager(store, kafka, seal_drain_ms=0)
    name = f"race{unique}/s"
    manager.create_scope(f"race{unique}")
    manager.create(name, StreamConfiguration(ScalingPolicy.fixed(1)))
    return name


def _produce(kafka: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": kafka, "log_level": 0})
    for partition, value in records:
        producer.produce(topic, value=value, key=b"k", partition=partition)
    assert producer.flush(30) == 0


def _scale_crashing_after_epoch(store, kafka, stream) -> None:
    with pytest.raises(Crash):
        StreamManager(store, kafka, seal_drain_ms=0, step_hook=_crash_after_epoch).scale(
            stream, SEALED, RANGES
        )
    meta = store.get_stream(stream)
    assert 0 not in {s.id for s in meta.current_epoch().segments}
    assert meta.sealed_sizes == {}  # sealed, size not recorded: the gap


def _group(store, kafka, stream, unique, tmp_path, config) -> ReaderGroup:
    return ReaderGroup(
        f"g{unique}", stream, store=store, bootstrap_servers=kafka, delta_root=str(tmp_path),
        config=config,
    )  # fmt: skip


def _late_records_and_their_copies(kafka: str, topic: str) -> None:
    """The slow writer: two records land on segment 0 after the scale measured it
    (offsets 2 and 3, past its sealed size 2), and it re-sends them to the
    successor, as EventWriter does with what a seal cut off."""
    _produce(kafka, topic, [(0, b"c"), (0, b"d"), (1, b"c"), (1, b"d")])


def _read_through_the_successor(reader, got: list[bytes]) -> None:
    """Read into ``got`` until the successor is read to its end (2 records)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        event = reader.read_next(timeout_ms=200)
        if event is not None:
            got.append(event.body)
        elif reader.position().get(SUCCESSOR) == 2 and reader.at_tail():
            break
    assert reader.position().get(SUCCESSOR) == 2, "the successor was never read to its end"


def test_a_record_beyond_a_late_sealed_size_is_returned_once(
    store, kafka, stream, unique, tmp_path
):
    topic = store.get_stream(stream).topic
    _produce(kafka, topic, [(0, b"a"), (0, b"b")])
    _scale_crashing_after_epoch(store, kafka, stream)

    group = _group(store, kafka, stream, unique, tmp_path, SLOW)
    with group, group.reader("r") as reader:
        # Takes segment 0, sealed with its size unknown: held, nothing returned.
        assert reader.read_next(timeout_ms=1_000) is None
        assert reader.position() == {0: 0}

        meta = StreamManager(store, kafka, seal_drain_ms=0).scale(stream, SEALED, RANGES)
        assert meta.sealed_sizes == {0: 2}
        _late_records_and_their_copies(kafka, topic)

        got: list[bytes] = []
        _read_through_the_successor(reader, got)
        assert got == [b"a", b"b", b"c", b"d"]


def test_a_scale_that_never_records_the_size_holds_the_segment_and_says_so(
    store, kafka, stream, unique, tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(reader_module, "SIZE_WAIT_WARN_S", 0.5)
    topic = store.get_stream(stream).topic
    _produce(kafka, topic, [(0, b"a"), (0, b"b")])
    _scale_crashing_after_epoch(store, kafka, stream)

    group = _group(store, kafka, stream, unique, tmp_path, SLOW)
    with group, group.reader("r") as reader, caplog.at_level(logging.WARNING):
        started = time.monotonic()
        assert reader.read_next(timeout_ms=1_500) is None  # held, within the call's timeout
        assert time.monotonic() - started < 5
        assert reader.read_batch(10, timeout_ms=300).events == ()
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(
            f"segment 0 of stream {stream}" in m and "sealed size is not recorded" in m
            for m in warned
        ), warned
        assert reader.position() == {0: 0}  # nothing counted read, nothing skipped

        StreamManager(store, kafka, seal_drain_ms=0).resume(stream)  # the operator completes it
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            event = reader.read_next(timeout_ms=200)
            if event is not None:
                got.append(event.body)
        assert got == [b"a", b"b"]


def test_a_reader_whose_metadata_is_older_than_the_drain_says_what_it_returned_twice(
    store, kafka, stream, unique, tmp_path, caplog
):
    """The limit of the hold: a reader that has not looked at the metadata since before
    the scale's epoch step, for longer than the scale's whole drain
    (``metadata_interval_ms`` above ``seal_drain_ms``, here 5 s against 0), still
    reads the segment as unsealed. It cannot know better; when it learns the
    size it says that it went past it (a warning naming the segment and offsets)."""
    topic = store.get_stream(stream).topic
    _produce(kafka, topic, [(0, b"a"), (0, b"b")])
    group = _group(store, kafka, stream, unique, tmp_path, STALE)
    with group, group.reader("r") as reader, caplog.at_level(logging.WARNING):
        got = []
        first = reader.read_next(timeout_ms=5_000)  # takes segment 0 while it is current
        assert first is not None
        got.append(first.body)
        StreamManager(store, kafka, seal_drain_ms=0).scale(stream, SEALED, RANGES)
        _late_records_and_their_copies(kafka, topic)
        _read_through_the_successor(reader, got)
        assert got[:4] == [b"a", b"b", b"c", b"d"], got  # nothing lost, in order
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("segment 0 was read to offset 4, past its sealed size 2" in m for m in warned), (
            warned
        )


def test_a_reader_reading_through_a_scale_and_a_slow_writer_returns_each_event_once(
    store, kafka, stream, unique, tmp_path
):
    """A whole scale (its drain longer than the readers' ``metadata_interval_ms``)
    while a reader reads on; the slow writer's records land past the sealed size
    after the scale and are re-sent to the successor: each is returned once."""
    topic = store.get_stream(stream).topic
    _produce(kafka, topic, [(0, b"a"), (0, b"b")])
    group = _group(store, kafka, stream, unique, tmp_path, SLOW)
    with group, group.reader("r") as reader:
        got = []
        first = reader.read_next(timeout_ms=5_000)  # takes segment 0 while it is current
        assert first is not None
        got.append(first.body)
        scaled = []
        scale = threading.Thread(
            target=lambda: scaled.append(
                StreamManager(store, kafka, seal_drain_ms=500).scale(stream, SEALED, RANGES)
            )
        )
        scale.start()
        while scale.is_alive():
            event = reader.read_next(timeout_ms=50)
            if event is not None:
                got.append(event.body)
        scale.join()
        assert scaled and scaled[0].sealed_sizes == {0: 2}
        _late_records_and_their_copies(kafka, topic)
        _read_through_the_successor(reader, got)
        assert got == [b"a", b"b", b"c", b"d"]
