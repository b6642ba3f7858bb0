"""Stream policies acting on real Kafka + ZooKeeper, watermarks in real Delta tables.

Watermarks come from ``tidemark.controller.watermarks.watermark_cycle`` over the
writers' own positions (``test_reader_group.Marks``), so no Spark job runs.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.integration import test_reader_group as rg
from tidemark.cli.main import main
from tidemark.controller.config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from tidemark.controller.kafka.segment_sizes import SegmentSizes, record_bytes
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.navigation import head_cut
from tidemark.controller.policy_loop import PolicyLoop, PolicySettings
from tidemark.pipelines.reading.exceptions import ReaderBehindHeadError
from tidemark.pipelines.reading.group import ReaderConfig, ReaderGroup
from tidemark.pipelines.reading.seek import SeekIndex, stream_cut_at
from tidemark.pipelines.writing.writer import EventWriter

BASE = rg.BASE
Marks = rg.Marks
read_all = rg.read_all
read_along = rg.read_along
group_kw = rg.group_kw
# the shared fixtures
manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig


def policy_stream(manager, unique: str, config: StreamConfiguration) -> str:
    stream = f"p{unique}/s"
    manager.create_scope(f"p{unique}")
    manager.create(stream, config)
    return stream


def retained_stream(manager, store, unique: str, root: str, retention: RetentionPolicy):
    """A new two-segment stream kept by ``retention``, and the ``Marks`` of its watermarks."""
    config = StreamConfiguration(ScalingPolicy.fixed(2), retention_policy=retention)
    stream = policy_stream(manager, unique, config)
    return stream, Marks(stream, store, root)


def stored(kafka: str, meta: StreamMetadata) -> list[tuple[int, int, bytes, int]]:
    """Every record Kafka still holds: (partition, offset, value, bytes)."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": "policy-test",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    numbers = sorted(s.number for s in meta.segments().values())
    try:
        consumer.assign([TopicPartition(meta.topic, n, -2) for n in numbers])  # -2: beginning
        out, pending = [], set(numbers)
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                continue
            out.append((msg.partition(), msg.offset(), msg.value(), record_bytes(msg)))
        assert not pending, "could not read every partition to its end"
        return out
    finally:
        consumer.close()


def write_rounds(
    writer, marks, rounds: int, per_round: int, *, size: int = 0, first: int = 0
) -> list[int]:
    """``rounds`` rounds of events at BASE + round*100 + j*10 (bodies: their time, padded to
    ``size`` bytes), a note and a watermark after each (``rg.write_rounds``); their times."""
    emitted = len(marks.emitted)

    def event(_writer, j: int, ts: int) -> tuple[bytes, str]:
        return f"{ts}".encode().ljust(size, b"."), f"k{j % 4}"

    written = rg.write_rounds(marks, ((writer, 0),), rounds, per_round, event, 10, first=first)
    assert len(marks.emitted) == emitted + rounds  # a watermark after every round
    return [ts for ts, _ in written]


def test_retention_by_time_removes_only_what_is_older_and_readers_are_told(
    manager, store, kafka, zookeeper, zk_client, wconfig, unique, tmp_path, monkeypatch, capsys
):
    root = str(tmp_path)
    limit_ms = 60_000
    stream, marks = retained_stream(manager, store, unique, root, RetentionPolicy.by_time(limit_ms))
    with EventWriter("a", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        written = write_rounds(w, marks, rounds=10, per_round=8)
        w.write(str(BASE + 5_000).encode(), routing_key="tail", timestamp=BASE + 5_000)
        written.append(BASE + 5_000)

    # a group that read part of the stream, then stopped; and a reader still online
    group = ReaderGroup(f"g{unique}", stream, **group_kw(store, kafka, root))
    with group.reader("r1") as reader:
        for _ in range(10):
            assert reader.read_next(timeout_ms=5_000) is not None
    group.close()
    live_group = ReaderGroup(f"live{unique}", stream, **group_kw(store, kafka, root))
    live = live_group.reader("r")
    assert live.read_next(timeout_ms=5_000) is not None

    index = SeekIndex(root, refresh_interval_ms=0)
    boundary = BASE + 550  # rounds 0-4 lie before it, noted up to BASE + 499
    now = boundary + limit_ms
    cut_at = functools.partial(stream_cut_at, index=index)
    loop = PolicyLoop(manager, PolicySettings(), cut_at=cut_at, clock=lambda: now)
    actions = loop.run_once()
    expected_cut = stream_cut_at(stream, boundary, index=index)
    assert [(a.stream, a.kind, a.cut) for a in actions] == [(stream, "truncate", expected_cut)]
    meta = store.get_stream(stream)
    assert dict(meta.truncation) == expected_cut

    kept = sorted(int(v) for _, _, v, _ in stored(kafka, meta))
    removed = sorted(set(written) - set(kept))
    assert len(removed) == 5 * 8  # rounds 0-4: everything before the watermark at BASE + 499
    assert removed and all(t < boundary for t in removed)  # nothing newer than the limit
    assert [t for t in written if t >= boundary] == [t for t in kept if t >= boundary]
    assert loop.run_once() == []  # within the limit now: nothing more to do

    # the online reader had read one event: it is told at its next read, not moved on
    with pytest.raises(ReaderBehindHeadError, match=f"'live{unique}' is behind the head"):
        for _ in range(100):
            live.read_next(timeout_ms=100)
    live.close()
    live_group.close()

    # the group read 10 events; the truncation removed some it had not read yet
    group = ReaderGroup(f"g{unique}", **group_kw(store, kafka, root))
    with group.reader("r1") as reader, pytest.raises(ReaderBehindHeadError) as caught:
        reader.read_next(timeout_ms=2_000)
    assert caught.value.group == f"g{unique}" and caught.value.lost
    assert "behind the head" in str(caught.value) and "seek" in str(caught.value)
    for seg, (have, head) in caught.value.lost.items():
        assert have < head == meta.truncation[seg]
    # moved on knowingly, it reads from the head: exactly what is left
    group.seek(cut=head_cut(meta))
    with group.reader("r2") as reader:
        assert sorted(e.timestamp for e in read_all(reader)) == kept
    group.close()

    # `tidemark read --ago` further back than the head starts at the head
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", kafka)
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", f"{zookeeper}{zk_client.chroot}")
    monkeypatch.setenv("TIDEMARK_DELTA_ROOT", root)
    capsys.readouterr()
    assert main(["read", stream, "--ago", "3650d", "--format", "json", "--wait-ms", "1500"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["timestamp"] for r in rows) == kept

    # `tidemark controller policies --once` on the wall clock: every round (written an
    # hour ago) is now older than the limit; the tail written after the last note stays
    argv = ["controller", "policies", "--once", "--delta-root", root, "--format", "json"]
    assert main(argv) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    last = dict(marks.emitted[-1].stream_cut)
    assert (row["stream"], row["kind"]) == (stream, "truncate")
    assert row["cut"] == {str(k): v for k, v in last.items()}
    meta = store.get_stream(stream)
    assert sorted(int(v) for _, _, v, _ in stored(kafka, meta)) == [BASE + 5_000]


def test_retention_by_size_keeps_the_stream_under_its_limit(
    manager, store, kafka, wconfig, unique, tmp_path
):
    root = str(tmp_path)
    limit = 3_000
    stream, marks = retained_stream(manager, store, unique, root, RetentionPolicy.by_size(limit))
    index = SeekIndex(root, refresh_interval_ms=0)
    sizes = SegmentSizes(kafka, mark_every=1)  # exact counts: the cut is the tightest one
    cut_at = functools.partial(stream_cut_at, index=index)
    loop = PolicyLoop(manager, PolicySettings(), cut_at=cut_at, sizes=sizes)
    truncations = []
    with EventWriter("a", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for batch in range(4):
            # 5 rounds of 10 records of 42 bytes (40 of value, 2 of key)
            times = write_rounds(w, marks, rounds=5, per_round=10, size=40, first=batch * 5)
            assert len(times) == 50
            w.flush()
            actions = loop.run_once()
            meta = store.get_stream(stream)
            size = sum(b for _, _, _, b in stored(kafka, meta))
            assert size <= limit, f"batch {batch}: {size} bytes kept, limit {limit}"
            truncations.extend(actions)
    assert len(truncations) >= 2
    cuts = [dict(m.stream_cut) for m in marks.emitted]
    for action in truncations:
        # only at a watermark's cut, never through what a watermark promises
        assert action.kind == "truncate" and action.cut in cuts
    meta = store.get_stream(stream)
    assert dict(meta.truncation) == truncations[-1].cut
    # no more removed than needed: the watermark before the cut (one round, 10 records
    # of 42 bytes, earlier) would have kept more than the limit
    assert sum(b for _, _, _, b in stored(kafka, meta)) > limit - 420
    loop.close()


def test_autoscale_splits_a_hot_segment_and_merges_idle_ones_in_key_order(
    manager, store, kafka, wconfig, unique, tmp_path
):
    """Writers keep writing (fast, then slowly) and a reader group keeps reading while
    the loop splits the hot segment and, after the cooldown, merges the two cold ones."""
    root = str(tmp_path)
    config = StreamConfiguration(ScalingPolicy.by_event_rate(40, 2, 1))
    stream = policy_stream(manager, unique, config)
    settings_ = PolicySettings(interval_ms=200, rate_window_ms=1_000, cooldown_ms=2_000)
    loop = PolicyLoop(manager, settings_)
    keys = [f"key{i}" for i in range(16)]
    rate = {"per_s": 150.0}
    stop, written = threading.Event(), threading.Event()
    sent: dict[str, int] = defaultdict(int)

    def write() -> None:
        with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
            rg.write_along(w, keys, sent, stop, lambda: 1 / rate["per_s"])

    group = ReaderGroup(
        f"g{unique}",
        stream,
        **group_kw(store, kafka, root, ReaderConfig(rebalance_interval_ms=50)),
    )
    got: dict[str, list[int]] = defaultdict(list)
    writer = threading.Thread(target=write)
    reader = threading.Thread(target=read_along, args=(group, written, got))
    writer.start()
    reader.start()
    handle = loop.start()
    try:
        deadline = time.monotonic() + 60
        while not loop.actions:
            assert time.monotonic() < deadline, "the hot segment was not split"
            time.sleep(0.1)
        split = store.get_stream(stream)
        assert [a.kind for a in loop.actions] == ["split"]
        assert [s.number for s in split.active_segments()] == [1, 2]
        rate["per_s"] = 6.0  # both halves cold now (< 20 events/s each)
        while len(loop.actions) < 2:
            assert time.monotonic() < deadline, "the cold segments did not merge"
            time.sleep(0.1)
        merged = store.get_stream(stream)
        assert [a.kind for a in loop.actions] == ["split", "merge"]
        split_at, merge_at = (e.created_at_ms for e in merged.epochs[1:3])
        assert merge_at - split_at >= settings_.cooldown_ms
        assert [s.number for s in merged.active_segments()] == [3]
        time.sleep(0.5)  # writers keep writing to the merged segment, then close soon
        # (test_writer_close_after_scale checks closing at once after a merge)
    finally:
        handle.stop()
        stop.set()
        writer.join(30)
        written.set()  # every event is acknowledged now: the reader drains, then stops
        reader.join(60)
        group.close()
        loop.close()
    assert not writer.is_alive() and not reader.is_alive()
    # per-key order, each event once, nothing lost: across both automatic scales
    for key in keys:
        assert got[key] == list(range(sent[key])), key
