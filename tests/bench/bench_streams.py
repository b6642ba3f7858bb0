"""Time across streams: the event-time merge and joint cuts, against one stream at a time.

``run(services)``: ``STREAMS`` one-segment streams of ``EVENTS`` records each
(timestamps 1 ms apart, the streams' times interleaved), a watermark every
``MARK_EVERY`` records in a Delta ``marks``/``index`` table. Every read reads the
same records; its readers (a private group per stream) are opened before the clock
starts and closed after it stops, for the merge and the baseline alike. Best of
``ROUNDS`` (each read and its baseline interleaved, so a busy moment weighs on both):

- the merged read of 2 and of 8 streams (``TimeMerge.read_batch``: every record
  released in time order), bodies only (``batch.values()``) vs reading the same
  streams one after the other with ``read_batch``, bodies only [goal >= 0.7]; and
  the merge making each record's ``EventRead`` (``batch.events``, its order checked)
  vs the same one-after-another read making them;
- a warm joint ``stream_cut_at`` of 8 streams vs one stream's [goal <= 8x].
"""

from __future__ import annotations

import time
import uuid
from itertools import islice
from operator import attrgetter, le
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.delta.tables import append_watermarks
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.model import Watermark, segment_id
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.reading.merge import TimeMerge
from tidemark.pipelines.reading.seek import SeekIndex, stream_cut_at

STREAMS = 8
EVENTS = 100_000
MARK_EVERY = 1_000
ROUNDS = 3
BASE = 1_700_000_000_000
LOOKUPS = 2_000

_time_of = attrgetter("timestamp")


def _write(bootstrap: str, topics: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    payload = b"x" * 100
    for i in range(EVENTS):
        for n, topic in enumerate(topics):
            ts = BASE + i * len(topics) + n
            while True:
                try:
                    producer.produce(topic, payload, b"k", partition=0, timestamp=ts)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)


def _marks(root: str, streams: list[str]) -> None:
    seg = segment_id(0, 0)
    for n, stream in enumerate(streams):
        marks = []
        for seq, end in enumerate(range(MARK_EVERY, EVENTS + 1, MARK_EVERY)):
            at = BASE + (end - 1) * len(streams) + n
            marks.append(Watermark(stream, at, at, {seg: end}, seq))
        append_watermarks(root, marks)


def _groups(store: Any, bootstrap: str, root: str, streams: list[str]) -> list[ReaderGroup]:
    return [
        ReaderGroup.ephemeral_group(
            s, None, store=store, bootstrap_servers=bootstrap, delta_root=root
        )
        for s in streams
    ]


def one_after_another(
    store: Any, bootstrap: str, root: str, streams: list[str], *, events: bool = False
) -> float:
    """Records/s of reading ``streams`` one after the other; ``events``: making each
    record's ``EventRead``."""
    groups = _groups(store, bootstrap, root, streams)
    readers = [g.reader("r") for g in groups]
    try:
        total = 0
        started = time.perf_counter()
        for reader in readers:
            got = 0
            while got < EVENTS:
                batch = reader.read_batch(timeout_ms=1_000)
                got += len(batch.events) if events else len(batch.values())
            total += got
        return total / (time.perf_counter() - started)
    finally:
        _close(readers, groups)


def merged(
    store: Any, bootstrap: str, root: str, streams: list[str], *, events: bool = False
) -> float:
    """Records/s of the merged read of ``streams``: bodies only, or (``events``) each
    record's ``EventRead``, checked to come in time order."""
    groups = _groups(store, bootstrap, root, streams)
    readers = [g.reader("r") for g in groups]
    try:
        merge = TimeMerge(readers, bodies_only=not events)
        want, got, last = EVENTS * len(streams), 0, -1
        started = time.perf_counter()
        while got < want:
            # Everything read: flush what is held (records above the slowest stream's
            # last watermark) at once, not after a poll waiting for more.
            if merge.held + got >= want:
                batch = merge.flush_batch()
            else:
                batch = merge.read_batch(timeout_ms=100)
            if not len(batch):
                continue
            if events:  # in order, checked at C speed (a loop here cost ~0.5 us a record)
                times = [last, *map(_time_of, batch.events)]
                assert all(map(le, times, islice(times, 1, None))), "out of order"
                last = times[-1]
                got += len(batch.events)
            else:
                got += len(batch.values())
        assert merge.late == 0 and got == want
        return got / (time.perf_counter() - started)
    finally:
        _close(readers, groups)


def _close(readers: list[Any], groups: list[ReaderGroup]) -> None:
    for reader in readers:
        reader.close()
    for group in groups:
        group.close()


def cuts(root: str, streams: list[str]) -> tuple[float, float]:
    """Microseconds per warm lookup: one stream, all of them jointly."""
    index = SeekIndex(root, warm_after=0)
    t = BASE + EVENTS * len(streams) // 2
    stream_cut_at(streams, t, index=index)  # warm: columns loaded, cuts cached
    started = time.perf_counter()
    for _ in range(LOOKUPS):
        stream_cut_at(streams[0], t, index=index)
    one = (time.perf_counter() - started) / LOOKUPS * 1e6
    started = time.perf_counter()
    for _ in range(LOOKUPS):
        stream_cut_at(streams, t, index=index)
    joint = (time.perf_counter() - started) / LOOKUPS * 1e6
    return one, joint


def run(services: Any) -> list[str]:
    bootstrap = services.bootstrap
    unique = uuid.uuid4().hex[:8]
    root = str(Path(services.work_dir) / f"bench-streams-{unique}")
    store = MemoryStore()
    store.create_scope(f"bench{unique}")
    manager = StreamManager(store, bootstrap, ClusterSettings(marks_topic=f"m-{unique}"))
    lines = [f"{EVENTS:,} records a stream, a watermark every {MARK_EVERY:,}, best of {ROUNDS}"]
    for count in (2, STREAMS):
        streams = [f"bench{unique}/s{count}x{n}" for n in range(count)]
        topics = [
            manager.create(s, StreamConfiguration(ScalingPolicy.fixed(1))).topic for s in streams
        ]
        _write(bootstrap, topics)
        _marks(root, streams)
        rates: dict[tuple[str, bool], list[float]] = {}
        for _ in range(ROUNDS):  # interleaved, so a busy moment weighs on both sides
            for events in (False, True):
                for name, read in (("base", one_after_another), ("merge", merged)):
                    rate = read(store, bootstrap, root, streams, events=events)
                    rates.setdefault((name, events), []).append(rate)
        base, ours = max(rates["base", False]), max(rates["merge", False])
        made, ours_made = max(rates["base", True]), max(rates["merge", True])
        lines.append(
            f"  {count} streams, bodies: merged {ours:,.0f}/s vs read_batch one after another"
            f" {base:,.0f}/s: {ours / base:.2f}  [goal >= 0.7]; each EventRead: merged"
            f" {ours_made:,.0f}/s vs the same one after another {made:,.0f}/s:"
            f" {ours_made / made:.2f}"
        )
        if count == STREAMS:
            one, joint = cuts(root, streams)
            lines.append(
                f"  warm stream_cut_at: 1 stream {one:.1f} us, {count} streams {joint:.1f} us:"
                f" {joint / one:.1f}x  [goal <= {count}x]"
            )
    return lines
