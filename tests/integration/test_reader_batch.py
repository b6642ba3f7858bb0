"""Batch reads (``EventReader.read_batch``) on real Kafka + ZooKeeper, watermarks in Delta.

The same promises as ``read_next`` (tests/integration/test_reader_group.py):
per-key order across a scale, nothing lost or read twice, sealed sizes
respected -- plus a batch's position and time window are those at its end.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.integration import test_reader_group as reading
from tests.integration.test_reader_group import (
    BASE,
    group_kw,
    make_stream,
    read_until,
    three_rounds_group,
)
from tidemark.controller.model import KeyRange
from tidemark.pipelines.reading.exceptions import ReaderClosedError, ReaderConfigError
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.writing.writer import EventWriter

# The reader tests' fixtures, shared.
settings, store, manager, wconfig = (
    reading.settings,
    reading.store,
    reading.manager,
    reading.wconfig,
)


def read_batches(reader, max_events, idle_ms=800, first_ms=5_000):
    """Batches until one comes back empty after ``idle_ms`` (the first may wait ``first_ms``)."""
    batches = []
    while True:
        batch = reader.read_batch(max_events, idle_ms if batches else first_ms)
        if not batch.events:
            return batches
        batches.append(batch)


def check_batch(reader, batch):
    """In the order read: per segment ascending offsets; the position counts the batch."""
    last: dict[int, int] = {}
    for event in batch.events:
        assert event.offset > last.get(event.segment, -1)
        last[event.segment] = event.offset
    assert batch.position == reader.position()
    for seg_id, offset in last.items():
        # the segment is still the reader's (at offset + 1) or finished at its sealed size
        assert batch.position.get(seg_id) in (offset + 1, -1, None)


def test_batches_keep_key_order_across_a_scale_and_lose_nothing(
    manager, store, kafka, wconfig, unique, tmp_path
):
    """The stream scales while a reader holds fetched records of the segment being
    sealed: they are read up to its sealed size, then its successors', per key in order."""
    stream = make_stream(manager, unique, segments=1)
    keys = [f"k{i}" for i in range(6)]
    group = ReaderGroup.create(f"g{unique}", stream, **group_kw(store, kafka, str(tmp_path)))
    with (
        EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w,
        group,
        group.reader("r1") as r1,
    ):
        for i in range(10):
            for key in keys:
                w.write(f"{key}:{i}".encode(), routing_key=key, timestamp=BASE + i)
        w.flush()
        first = r1.read_batch(5, timeout_ms=5_000)  # the rest stays buffered
        assert 0 < len(first) <= 5
        check_batch(r1, first)
        manager.scale(stream, [0], [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)])
        for i in range(10, 20):
            for key in keys:
                w.write(f"{key}:{i}".encode(), routing_key=key, timestamp=BASE + i)
        w.flush()
        with group.reader("r2") as r2:
            rest = read_until(
                [r1, r2],
                count=len(keys) * 20 - len(first),
                take=lambda reader, wait_ms: read_batches(reader, 7, wait_ms, wait_ms),
                size=len,
            )
            batches = [first, *rest]
            for batch in batches:
                assert 0 < len(batch) <= 7
        meta = store.get_stream(stream)
        events = [e for batch in batches for e in batch.events]
        assert {e.segment for e in events} == set(meta.segments())
        assert len([e for e in events if e.segment == 0]) == meta.sealed_sizes[0] == 60
        per_key = defaultdict(list)
        for e in events:
            key, i = e.body.decode().split(":")
            per_key[key].append(int(i))
        assert dict(per_key) == {k: list(range(20)) for k in keys}
        assert group.stream_cut().keys() == {s.id for s in meta.active_segments()}


def test_batch_window_and_position_at_its_end(manager, store, kafka, wconfig, unique, tmp_path):
    root = str(tmp_path)
    group = three_rounds_group(manager, store, kafka, wconfig, unique, root)
    with group, group.reader("r") as reader:
        assert reader.read_next(timeout_ms=5_000).offset == 0  # mixed with read_next
        got = [0]
        while len(got) < 7:
            batch = reader.read_batch(7 - len(got), timeout_ms=5_000)
            got.extend(e.offset for e in batch.events)
        assert got == list(range(7))
        seven = batch
        assert seven.position == {0: 7}
        at_seven = reader.current_time_window()
        assert (at_seven.lower, at_seven.upper) == (BASE + 50, BASE + 150)
        rest = read_batches(reader, 100, idle_ms=500, first_ms=500)
        assert [e.offset for b in rest for e in b.events] == list(range(7, 15))
        end = reader.read_batch(100, timeout_ms=0)  # nothing more: empty, window at the end
        assert not end.events
        assert end.position == {0: 15}
        assert end.window == reader.current_time_window()
        # (at the last cut's offset exactly; passed or not depends on the compare rule)
        assert end.window.upper is None and end.window.lower in (BASE + 150, BASE + 250)
        # Asked for after the reader moved on: still the window at the batch's end.
        assert seven.window == at_seven
        assert rest[-1].window == end.window
        reader.commit()
        assert group.stream_cut() == {0: 15}


def test_batch_read_bad_input(manager, store, kafka, unique, tmp_path):
    stream = make_stream(manager, unique, segments=1)
    group = ReaderGroup.create(f"g{unique}", stream, **group_kw(store, kafka, str(tmp_path)))
    with group:
        reader = group.reader("r")
        for bad in (0, -3, 1.5, "10", None):
            with pytest.raises(ReaderConfigError, match="max_events"):
                reader.read_batch(bad)
        reader.close()
        with pytest.raises(ReaderClosedError):
            reader.read_batch(10)
