"""Reader groups on real Kafka + ZooKeeper, watermarks in real Delta tables (no mocks).

Watermarks are computed with ``tidemark.controller.watermarks.watermark_cycle`` from the
writers' own positions and appended with deltalake, so these tests do not
depend on the Spark controller job.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, TopicPartition

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.delta.tables import append_watermarks
from tidemark.controller.model import KeyRange, WriterMark
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.watermarks import GenerationState, watermark_cycle
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.pipelines.reading.exceptions import (
    InvalidTimestampError,
    ReaderGroupActiveError,
    ReaderGroupExistsError,
    StreamDeletedError,
    UnknownReaderGroupError,
    UnknownStreamError,
)
from tidemark.pipelines.reading.group import ReaderConfig, ReaderGroup
from tidemark.pipelines.reading.seek import SeekIndex, complete_cut_at, stream_cut_at
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.writer import EventWriter

BASE = int(time.time() * 1000) - 3_600_000  # an hour ago: never capped to "now"
FAST = ReaderConfig(rebalance_interval_ms=50, commit_interval_ms=0, window_refresh_interval_ms=0)


@pytest.fixture
def settings(unique):
    return ClusterSettings(marks_topic=f"marks-{unique}", bucket_count=2)


@pytest.fixture
def store(zk_client):
    return ZooKeeperStore(zk_client, "/tidemark")


@pytest.fixture
def manager(store, kafka, settings):
    return StreamManager(store, kafka, settings, seal_drain_ms=100)


@pytest.fixture
def wconfig(settings):
    return WriterConfig(cluster=settings, linger_ms=1, delivery_timeout_ms=15_000)


def make_stream(manager, unique, segments=2):
    stream = f"r{unique}/s"
    manager.create_scope(f"r{unique}")
    manager.create(stream, StreamConfiguration(ScalingPolicy.fixed(segments)))
    return stream


class Marks:
    """Runs watermark cycles over writers' notes and appends them to Delta."""

    def __init__(self, stream, store, root):
        self.stream, self.store, self.root = stream, store, root
        self.state = GenerationState()
        self.marks: dict[str, WriterMark] = {}
        self.emitted = []

    def note(self, writer, time_ms):
        writer.note_time(time_ms)
        writer.flush()
        self.marks[writer.writer_id] = WriterMark(time_ms, writer.position())

    def cycle(self):
        meta = self.store.get_stream(self.stream)
        cycle = watermark_cycle(self.stream, self.marks, self.state, meta.epochs, 0, 60_000)
        self.state = cycle.state
        if cycle.watermark is not None:
            previous = max((w.upper_time for w in self.emitted), default=None)
            append_watermarks(self.root, [cycle.watermark], previous_upper_time_max=previous)
            self.emitted.append(cycle.watermark)
        return cycle.watermark


def write_rounds(marks, skews, rounds, per_round, event=None, step_ms=1, noted_ms=99, first=0):
    """``rounds`` rounds 100 ms apart, from round ``first``: each writer of ``skews``
    ((writer, skew ms) pairs) writes ``per_round`` events ``step_ms`` apart from
    ``BASE + round * 100 + skew``, then each notes that start + ``noted_ms`` and a watermark
    cycle runs. ``event(writer, j, ts)`` gives an event's (body, routing key), ``(b"x", "k")``
    if not given. Returns the events' (ts, j), in the order written."""
    written = []
    for rnd in range(first, first + rounds):
        for writer, skew in skews:
            for j in range(per_round):
                ts = BASE + rnd * 100 + skew + j * step_ms
                body, key = (b"x", "k") if event is None else event(writer, j, ts)
                writer.write(body, routing_key=key, timestamp=ts)
                written.append((ts, j))
        for writer, skew in skews:
            marks.note(writer, BASE + rnd * 100 + skew + noted_ms)
        marks.cycle()
    return written


def three_rounds_group(manager, store, kafka, wconfig, unique, root):
    """A new group on a new one-segment stream holding three rounds of five events, each
    round noted at its start + 50 ms and followed by a watermark (the window tests' data)."""
    stream = make_stream(manager, unique, segments=1)
    marks = Marks(stream, store, root)
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        write_rounds(marks, ((w, 0),), rounds=3, per_round=5, noted_ms=50)
    return ReaderGroup.create(f"g{unique}", stream, **group_kw(store, kafka, root))


def read_all(reader, idle_ms=800, first_ms=5_000):
    """Events until ``idle_ms`` pass without one; the first read may wait ``first_ms``
    (a new reader's consumer fetches metadata and its first batch, slow on busy cores)."""
    out = []
    while True:
        event = reader.read_next(timeout_ms=idle_ms if out else first_ms)
        if event is None:
            return out
        out.append(event)


def read_until(readers, count, take=None, size=lambda item: 1, deadline_s=60.0):
    """What ``readers`` read in turn (``take(reader, wait_ms)``: a list, by default
    :func:`read_all`) until ``count`` events came (``size(item)``: the events in an
    item a take returned), then one more take each, to show that nothing is left over."""
    take = take or (lambda reader, wait_ms: read_all(reader, idle_ms=wait_ms, first_ms=wait_ms))
    got: list = []
    deadline = time.monotonic() + deadline_s
    while sum(map(size, got)) < count and time.monotonic() < deadline:
        for reader in readers:
            got.extend(take(reader, 200))
    for reader in readers:
        got.extend(take(reader, 500))
    return got


def read_along(
    group: ReaderGroup,
    written: threading.Event,
    got: dict[str, list[int]],
    errors: list[BaseException] | None = None,
) -> None:
    """A reader thread: reads ``key:n`` events into ``got`` until ``written`` is set, then
    until 1 s passes without one (the drain); an error goes to ``errors`` when given."""
    try:
        with group.reader("r") as reader:
            while not written.is_set():
                event = reader.read_next(timeout_ms=200)
                if event is not None:
                    key, n = event.body.decode().split(":")
                    got[key].append(int(n))
            for event in read_all(reader, idle_ms=1_000):
                key, n = event.body.decode().split(":")
                got[key].append(int(n))
    except BaseException as exc:
        if errors is None:
            raise
        errors.append(exc)


def write_along(writer, keys, sent, stop, pause_s, each=None):
    """A writer thread's loop, ``read_along``'s counterpart: ``key:n`` events round robin
    over ``keys`` (``n`` counted per key in ``sent``, the i-th at ``BASE + i``) until
    ``stop`` is set, ``pause_s()`` seconds apart; ``each(i)`` runs after the i-th event.
    Returns how many were written."""
    i = 0
    while not stop.is_set():
        key = keys[i % len(keys)]
        writer.write(f"{key}:{sent[key]}".encode(), routing_key=key, timestamp=BASE + i)
        sent[key] += 1
        i += 1
        if each is not None:
            each(i)
        time.sleep(pause_s())
    return i


def group_kw(store, kafka, root, config=FAST):
    return {"store": store, "bootstrap_servers": kafka, "delta_root": root, "config": config}


def offsets_for_times(kafka, topic, partitions, ts):
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "koft", "log_level": 0})
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, ts) for p in partitions], timeout=10
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def test_from_time_loses_nothing_with_writers_ahead(
    manager, store, kafka, wconfig, unique, tmp_path
):
    """Writer B runs 700 ms ahead of A, and both write events beyond the time they
    last noted; every event with time >= ts is read from ``stream_cut_at(ts)``;
    Kafka's offsets_for_times agrees per partition but is never earlier."""
    root = str(tmp_path)
    stream = make_stream(manager, unique)
    marks = Marks(stream, store, root)

    def event(writer, j, ts):
        key = f"{writer.writer_id}-{j % 3}"
        return f"{key}@{ts}".encode(), key

    with (
        EventWriter("a", stream, store=store, bootstrap_servers=kafka, config=wconfig) as a,
        EventWriter("b", stream, store=store, bootstrap_servers=kafka, config=wconfig) as b,
    ):
        # each noted time >= every event written so far; the next round runs ahead of it
        rounds = write_rounds(marks, ((a, 0), (b, 700)), 8, 6, event, step_ms=15)
        written = [ts for ts, _ in rounds]
        for writer, skew in ((a, 0), (b, 700)):  # ahead of the last note, after every mark
            writer.write(b"tail", routing_key="tail", timestamp=BASE + 900 + skew)
            written.append(BASE + 900 + skew)
    assert len(marks.emitted) >= 6
    index = SeekIndex(root, refresh_interval_ms=0)
    meta = store.get_stream(stream)
    topic = meta.topic
    for k, ts in enumerate(
        [BASE - 1, BASE + 150, BASE + 430, BASE + 790, BASE + 1300, BASE + 5000]
    ):
        cut = stream_cut_at(stream, ts, store=store, index=index)
        group = ReaderGroup.create(
            f"g{unique}-{k}", stream, from_time=ts, index=index, **group_kw(store, kafka, root)
        )
        assert group.stream_cut() == cut  # one cut, committed before any reader
        with group, group.reader("r") as reader:
            got = [e.timestamp for e in read_all(reader)]
        wanted = sorted(t for t in written if t >= ts)
        assert sorted(t for t in got if t >= ts) == wanted, ts
        # Kafka's own answer, per partition: never before ours, and it loses nothing either.
        koft = offsets_for_times(kafka, topic, [s.number for s in meta.segments().values()], ts)
        for seg_id, offset in cut.items():
            kafka_offset = koft[meta.segments()[seg_id].number]
            assert kafka_offset < 0 or offset <= kafka_offset
    # complete_cut_at: None until a watermark reaches the time
    assert complete_cut_at(stream, BASE + 100_000, index=index) is None
    assert complete_cut_at(stream, BASE + 150, index=index) is not None


def test_readers_follow_scaling_in_key_order(manager, store, kafka, wconfig, unique, tmp_path):
    stream = make_stream(manager, unique, segments=1)
    keys = [f"k{i}" for i in range(6)]
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for i in range(10):
            for key in keys:
                w.write(f"{key}:{i}".encode(), routing_key=key, timestamp=BASE + i)
        w.flush()
        manager.scale(stream, [0], [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)])
        for i in range(10, 20):
            for key in keys:
                w.write(f"{key}:{i}".encode(), routing_key=key, timestamp=BASE + i)
        w.flush()
    group = ReaderGroup(f"g{unique}", stream, **group_kw(store, kafka, str(tmp_path)))
    with group, group.reader("r1") as r1, group.reader("r2") as r2:
        events = read_until([r1, r2], count=len(keys) * 20)
        assert {e.segment for e in events} == set(store.get_stream(stream).segments())
        per_key = defaultdict(list)
        for e in events:
            key, i = e.body.decode().split(":")
            per_key[key].append(int(i))
        assert {k: v for k, v in per_key.items()} == {k: list(range(20)) for k in keys}
        assert group.stream_cut().keys() == {
            s.id for s in store.get_stream(stream).active_segments()
        }


def test_group_and_reader_windows(manager, store, kafka, wconfig, unique, tmp_path):
    root = str(tmp_path)
    group = three_rounds_group(manager, store, kafka, wconfig, unique, root)
    with group:
        window = group.current_time_window()
        assert (window.lower, window.upper) == (None, BASE + 50)
        with group.reader("r") as reader:
            for _ in range(7):
                assert reader.read_next(timeout_ms=5000) is not None
            w1 = reader.current_time_window()
            assert (w1.lower, w1.upper) == (BASE + 50, BASE + 150)
            reader.commit()
            assert group.current_time_window() == w1
            read_all(reader, idle_ms=500)
            w2 = reader.current_time_window()
            # Exactly at the last cut: passed (Pravega's rule, time advances).
            assert (w2.lower, w2.upper) == (BASE + 250, None)


def test_bad_input_and_position_never_moved_by_a_failure(
    manager, store, kafka, wconfig, unique, tmp_path
):
    root = str(tmp_path)
    stream = make_stream(manager, unique, segments=1)
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for j in range(5):
            w.write(b"x", routing_key="k", timestamp=BASE + j)
    kw = group_kw(store, kafka, root)
    with pytest.raises(UnknownStreamError):
        ReaderGroup.create(f"g{unique}", f"r{unique}/missing", **kw)
    with pytest.raises(UnknownReaderGroupError):
        ReaderGroup(f"nope{unique}", **kw)
    group = ReaderGroup.create(f"g{unique}", stream, **kw)
    with pytest.raises(ReaderGroupExistsError):
        ReaderGroup.create(f"g{unique}", stream, **kw)
    with group.reader("r") as reader:
        for _ in range(3):
            reader.read_next(timeout_ms=5000)
        reader.commit()
        before = group.stream_cut()
        with pytest.raises(ReaderGroupActiveError):
            group.seek(BASE)
    for bad in (-1, "soon", 1.5):
        with pytest.raises(InvalidTimestampError):
            group.seek(bad)
    assert group.stream_cut() == before == {0: 3}
    assert group.seek(BASE + 10_000) == {0: 0}  # no watermark yet: the head
    group.close()
    manager.seal(stream)
    manager.delete(stream)
    with pytest.raises(StreamDeletedError):
        ReaderGroup(f"g{unique}", **kw)
    with pytest.raises(UnknownStreamError):
        stream_cut_at(stream, BASE, store=store, delta_root=root)
