"""Seeking never skips an event that ran ahead of its writer's noted time (real services).

Writers on real Kafka write events whose times run ahead of the time they
note next (several events ahead); the marks they really sent are read back
from the marks topic (Avro, with ``max_event_time``), folded by
``tidemark.controller.watermarks.watermark_cycle`` and stored in Delta as the
controller job does (``append_watermarks``). Then, for many timestamps
``t``, everything from ``stream_cut_at(t)`` on holds every event with time
>= ``t``; read for real by a group created ``from_time=t`` for a few.

The same marks without ``max_event_time`` (what a v1 writer sends) give
cuts that do skip such events: the test shows the difference can be seen.
The writers are ``EventWriter`` objects, or drop-in producers (their
marks carry ``max_event_time`` too).
"""

# ruff: noqa: F811  (the fixtures imported from test_reader_group are redefined as arguments)
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_reader_group import (  # noqa: F401 (fixtures)
    BASE,
    group_kw,
    make_stream,
    manager,
    read_all,
    settings,
    store,
    wconfig,
)
from tests.integration.test_writer import marks as sent_marks
from tests.integration.test_writer import read
from tidemark.controller.delta.tables import append_watermarks
from tidemark.controller.watermarks import GenerationState, watermark_cycle
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.reading.seek import SeekIndex, stream_cut_at
from tidemark.pipelines.writing.marks import to_writer_mark
from tidemark.pipelines.writing.producer import TidemarkProducer
from tidemark.pipelines.writing.writer import EventWriter

ROUNDS = 8
STEP_MS = 100


def fold(stream, store, root, rounds_of_marks, *, strip_max=False):
    """Watermarks from the marks as sent, one cycle per round, appended to Delta."""
    state, emitted = GenerationState(), []
    latest = {}
    for batch in rounds_of_marks:
        for record in batch:
            mark = to_writer_mark(record)
            if strip_max:
                mark = dataclasses.replace(mark, max_event_time=None)
            latest[record.writer_id] = mark
        meta = store.get_stream(stream)
        cycle = watermark_cycle(stream, latest, state, meta.epochs, 0, 60_000)
        state = cycle.state
        if cycle.watermark is not None:
            previous = max((w.upper_time for w in emitted), default=None)
            append_watermarks(root, [cycle.watermark], previous_upper_time_max=previous)
            emitted.append(cycle.watermark)
    return emitted


class DropIn:
    """A drop-in producer seen as an ``EventWriter``: ``write``, ``note_time``, ``flush``."""

    def __init__(self, producer: TidemarkProducer, topic: str, writer_id: str) -> None:
        self.producer, self.topic, self.writer_id = producer, topic, writer_id

    def write(self, value: bytes, routing_key: str, timestamp: int) -> None:
        self.producer.produce(self.topic, value, routing_key, timestamp=timestamp)
        self.producer.poll(0)

    def note_time(self, timestamp: int) -> None:
        self.producer.note_time(timestamp)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


@contextlib.contextmanager
def writers(kind, stream, store, kafka, settings, wconfig) -> Iterator[tuple[Any, Any]]:
    """Writers ``a`` and ``b`` of ``kind`` on ``stream``, closed on the way out."""
    with contextlib.ExitStack() as stack:
        made = []
        for wid in ("a", "b"):
            if kind == "EventWriter":
                made.append(
                    stack.enter_context(
                        EventWriter(
                            wid, stream, store=store, bootstrap_servers=kafka, config=wconfig
                        )
                    )
                )
            else:
                conf = {"bootstrap.servers": kafka, "linger.ms": 1, "enable.idempotence": True}
                p = stack.enter_context(
                    TidemarkProducer(
                        conf, stream=stream, writer_id=wid, store=store, cluster=settings
                    )
                )
                made.append(DropIn(p, store.get_stream(stream).topic, wid))
        yield made[0], made[1]


def skipped(events, cut, ts):
    """Events with time >= ts that lie before ``cut``: a reader starting there never sees them."""
    return [(seg, off, t) for seg, off, t in events if t >= ts and off < cut.get(seg, 0)]


@pytest.mark.parametrize("kind", ["EventWriter", "TidemarkProducer"])
def test_stream_cut_at_never_skips_events_that_ran_ahead(
    manager, store, kafka, settings, wconfig, unique, tmp_path, kind
):
    stream = make_stream(manager, unique)
    rounds_of_marks = []
    seen = 0
    with writers(kind, stream, store, kafka, settings, wconfig) as (a, b):
        for rnd in range(ROUNDS):
            for writer, skew in ((a, 0), (b, 30)):
                noted = BASE + rnd * STEP_MS + skew
                # From the previous noted time up to 60 ms past this one: the last
                # four events run ahead of the time noted right after them.
                for j in range(8):
                    ts = noted - STEP_MS + 20 * (j + 1)
                    key = f"{writer.writer_id}-{j % 4}"
                    writer.write(f"{key}@{ts}".encode(), routing_key=key, timestamp=ts)
                writer.note_time(noted)
                writer.flush()
            got = sent_marks(kafka, settings, stream, at_least=seen + 2)
            rounds_of_marks.append(got[seen:])
            seen = len(got)
    assert all(len(batch) == 2 for batch in rounds_of_marks)
    assert all(r.max_event_time is not None and r.max_event_time > r.time for r in got)

    meta = store.get_stream(stream)
    by_number = {s.number: s.id for s in meta.segments().values()}
    events = [
        (by_number[m.partition()], m.offset(), m.timestamp()[1])
        for m in read(kafka, meta.topic, sorted(by_number), committed=True)
    ]
    assert len(events) == ROUNDS * 2 * 8

    root, bare = str(tmp_path / "with-max"), str(tmp_path / "noted-only")
    emitted = fold(stream, store, root, rounds_of_marks)
    fold(stream, store, bare, rounds_of_marks, strip_max=True)
    assert len(emitted) >= ROUNDS - 1
    index, bare_index = (SeekIndex(r, refresh_interval_ms=0) for r in (root, bare))
    times = range(BASE - STEP_MS, BASE + (ROUNDS + 1) * STEP_MS, 7)
    lost_without = 0
    for ts in times:
        cut = stream_cut_at(stream, ts, store=store, index=index)
        assert skipped(events, cut, ts) == [], ts
        lost_without += bool(skipped(events, stream_cut_at(stream, ts, index=bare_index), ts))
    # Upper times from noted times alone lose events that ran ahead, for many t.
    assert lost_without > len(times) // 4
    print(
        f"\ntimestamps checked: {len(times)}; skipping events without max_event_time: "
        f"{lost_without}; with it: 0"
    )

    # And for real: a group from_time=t reads every event with time >= t.
    for k, ts in enumerate([BASE + 170, BASE + 430, BASE + 555]):
        group = ReaderGroup.create(
            f"g{unique}-{k}", stream, from_time=ts, index=index, **group_kw(store, kafka, root)
        )
        with group, group.reader("r") as reader:
            got_ts = sorted(e.timestamp for e in read_all(reader) if e.timestamp >= ts)
        assert got_ts == sorted(t for _, _, t in events if t >= ts), ts
