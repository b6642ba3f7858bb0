"""The reader's fetch paths without a broker: ``read_batch``'s fast path (a fetch
returned as it is, end-of-partition notices handled after it) gives the same
events, positions and tail state as the record-by-record path ``read_next``
takes, for any interleaving of records, notices and errors a consumer can hand
out."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemark.controller.kafka.roles as roles_module
import tidemark.pipelines.reading.reader as reader_module
from tidemark.controller.model import TimeWindow, segment_id
from tidemark.pipelines.reading.config import ReaderConfig
from tidemark.pipelines.reading.exceptions import ReaderError
from tidemark.pipelines.reading.reader import EventBatch, EventRead, EventReader, _notices_last
from tidemark.pipelines.reading.registry import MemoryGroupRegistry

PARTITIONS = (0, 1, 2)
SEGMENTS = {p: segment_id(p, p) for p in PARTITIONS}


def _record(partition: int, offset: int) -> Message:
    return Message(
        topic="t",
        partition=partition,
        offset=offset,
        timestamp=(1, 1000 + offset),
        value=b"v%d-%d" % (partition, offset),
        key=b"k",
    )


def _notice(partition: int, offset: int) -> Message:
    return Message(
        topic="t", partition=partition, offset=offset, error=KafkaError(KafkaError._PARTITION_EOF)
    )


def _transport_error() -> Message:
    return Message(error=KafkaError(KafkaError._TRANSPORT))


class FakeConsumer:
    """Hands out scripted fetches: ``consume(n, 0)`` up to ``n`` messages of the
    current fetch (what the consumer holds), ``poll`` the next one alone."""

    def __init__(self, fetches: Iterable[list[Message]]) -> None:
        self.fetches = deque(deque(f) for f in fetches if f)
        self.assigned: set[int] = set()

    def consume(self, n: int, timeout: float) -> list[Message]:
        if not self.fetches:
            return []
        fetch = self.fetches[0]
        out = [fetch.popleft() for _ in range(min(n, len(fetch)))]
        if not fetch:
            self.fetches.popleft()
        return out

    def poll(self, timeout: float) -> Message | None:
        got = self.consume(1, 0)
        return got[0] if got else None

    def incremental_assign(self, tps: list[Any]) -> None:
        self.assigned |= {tp.partition for tp in tps}

    def incremental_unassign(self, tps: list[Any]) -> None:
        self.assigned -= {tp.partition for tp in tps}

    def list_topics(self, topic: str, timeout: float) -> None:
        pass  # (the reader asks for its topic's metadata at its first assignment)

    def close(self) -> None:
        pass


class Host:
    """What a reader needs of its group, for unsealed segments read from offset 0
    (no rebalance happens: the reader is set up as if it had taken them)."""

    name = "g"
    stream = "s/x"
    topic = "t"
    peers = ()

    def __init__(self) -> None:
        self.config = ReaderConfig()
        self.registry = MemoryGroupRegistry()
        self.metadata_error: Exception | None = None
        self.sizes: dict[int, int] = {}
        self.pending: set[int] = set()

    def consumer_settings(self, client_id: str) -> dict[str, Any]:
        return {}

    def commit_offsets(self, offsets: Mapping[int, int], consumer: Any = None) -> None:
        pass

    def sealed_size(self, seg_id: int) -> int | None:
        if self.metadata_error is not None:
            raise self.metadata_error
        return self.sizes.get(seg_id)

    def sealing(self) -> tuple[dict[int, int], set[int]]:
        return self.sizes, self.pending

    def refresh(self) -> None:
        pass

    def segments(self) -> dict[int, Any]:
        return {}

    def watermark_feed(self) -> Any:
        raise AssertionError("no window asked for")

    def attach(self, reader: EventReader) -> None:
        pass

    def detach(self, reader: EventReader) -> None:
        pass


def _reader(
    monkeypatch: pytest.MonkeyPatch, fetches: list[list[Message]], host: Host | None = None
) -> EventReader:
    """A reader owning SEGMENTS (unsealed, unless ``host`` says otherwise) from offset 0."""
    consumer = FakeConsumer(fetches)
    monkeypatch.setattr(roles_module, "create", lambda role, settings: consumer)  # the builder
    host = host or Host()
    reader = EventReader(host, "r")  # type: ignore[arg-type]
    for seg_id in SEGMENTS.values():
        assert host.registry.acquire(host.name, seg_id, "r")
        reader._offsets[seg_id] = reader._committed[seg_id] = 0
    reader._start_fetching(SEGMENTS.values())
    reader._due = reader._next_rebalance = reader._next_metadata = float("inf")  # no housekeeping
    return reader


def _drained(reader: EventReader) -> bool:
    consumer = reader._consumer
    assert isinstance(consumer, FakeConsumer)
    return not consumer.fetches and reader._next >= len(reader._buffer)


# A fetch: records (increasing offsets per partition), end-of-partition notices at
# the partition's next offset, now and then a consumer error, in any order.
steps = st.lists(
    st.lists(
        st.one_of(
            st.tuples(st.just("record"), st.sampled_from(PARTITIONS)),
            st.tuples(st.just("notice"), st.sampled_from(PARTITIONS)),
            st.tuples(st.just("error"), st.just(0)),
        ),
        min_size=1,
        max_size=12,
    ),
    max_size=8,
)


def _script(plan: list[list[tuple[str, int]]]) -> list[list[Message]]:
    next_offset = dict.fromkeys(PARTITIONS, 0)
    fetches = []
    for step in plan:
        fetch = []
        for kind, partition in step:
            if kind == "record":
                fetch.append(_record(partition, next_offset[partition]))
                next_offset[partition] += 1
            elif kind == "notice":
                fetch.append(_notice(partition, next_offset[partition]))
            else:
                fetch.append(_transport_error())
        fetches.append(fetch)
    return fetches


@settings(max_examples=150, deadline=None)
@given(steps, st.integers(1, 16))
def test_read_batch_gives_what_read_next_gives(plan, max_events):
    with pytest.MonkeyPatch.context() as monkeypatch:
        _same_as_read_next(monkeypatch, plan, max_events)


def _same_as_read_next(
    monkeypatch: pytest.MonkeyPatch, plan: list[list[tuple[str, int]]], max_events: int
) -> None:
    one_by_one = _reader(monkeypatch, _script(plan))
    by_next = []
    while not _drained(one_by_one):
        event = one_by_one.read_next(timeout_ms=0)
        if event is not None:
            by_next.append(event)

    batched = _reader(monkeypatch, _script(plan))
    by_batch: list[EventRead] = []
    while not _drained(batched):
        batch = batched.read_batch(max_events, timeout_ms=0)
        assert len(batch) <= max_events
        assert batch.position == batched.position()
        assert batch.values() == [e.body for e in batch.events]
        by_batch.extend(batch.events)

    written = [m for f in _script(plan) for m in f if m.error() is None]
    assert len(by_batch) == len(written)  # nothing lost, nothing twice
    for seg_id in SEGMENTS.values():  # per segment in offset order
        offsets = [e.offset for e in by_batch if e.segment == seg_id]
        assert offsets == list(range(len(offsets)))
    assert by_batch == by_next
    assert batched.position() == one_by_one.position()
    assert batched._eof == one_by_one._eof
    assert batched.at_tail() == one_by_one.at_tail()
    one_by_one.close()
    batched.close()


def test_a_fetch_ending_in_notices_is_one_batch_and_marks_the_tail(monkeypatch):
    fetch = [_record(0, 0), _record(1, 0), _record(0, 1), _notice(0, 2), _record(2, 0)]
    fetch += [_notice(1, 1), _notice(2, 1)]
    reader = _reader(monkeypatch, [fetch])
    batch = reader.read_batch(16, timeout_ms=0)
    assert len(batch) == 4 and not hasattr(batch, "_events")  # the fetch, no event made
    assert batch.position == {SEGMENTS[0]: 2, SEGMENTS[1]: 1, SEGMENTS[2]: 1}
    assert reader.at_tail()
    assert [(e.segment, e.offset) for e in batch] == [
        (SEGMENTS[0], 0),
        (SEGMENTS[1], 0),
        (SEGMENTS[0], 1),
        (SEGMENTS[2], 0),
    ]


def test_a_record_after_its_partitions_notice_clears_the_tail(monkeypatch):
    reader = _reader(monkeypatch, [[_record(0, 0), _notice(0, 1), _record(0, 1)]])
    batch = reader.read_batch(16, timeout_ms=0)
    assert [e.offset for e in batch.events] == [0, 1]
    assert SEGMENTS[0] not in reader._eof
    assert reader.position()[SEGMENTS[0]] == 2


def test_notices_last():
    r0, r1, n0, n1 = _record(0, 0), _record(1, 0), _notice(0, 1), _notice(1, 1)
    assert _notices_last([r0, n0, r1, n1]) == ([r0, r1], [n0, n1])
    assert _notices_last([n1, r0]) == ([r0], [n1])  # a record of another partition
    assert _notices_last([n0]) == ([], [n0])
    assert _notices_last([n0, _record(0, 1)]) is None  # its own partition: in order
    assert _notices_last([r0, _transport_error()]) is None  # another error


def test_a_batch_position_with_finished_segments_is_worked_out_once(monkeypatch):
    from tidemark.pipelines.reading import windows

    calls = []

    def reader_position(offsets, finished, segments):
        calls.append((dict(offsets), set(finished)))
        return {**offsets, **dict.fromkeys(finished, -1)}

    monkeypatch.setattr(reader_module, "reader_position", reader_position)
    assert windows.reader_position is not reader_position

    def window_at(position):
        return TimeWindow(sum(position.values()), None)

    batch = EventBatch._of_records([_record(0, 4)], SEGMENTS, "s/x", {7: 5}, window_at)
    batch = batch._with_finished({7: 5}, frozenset({3}), {})
    assert calls == []
    assert batch.position == {7: 5, 3: -1}
    assert batch.window == TimeWindow(4, None)
    assert batch.position == {7: 5, 3: -1}
    assert calls == [({7: 5}, {3})]
    with pytest.raises(AttributeError, match="immutable"):
        batch._position = {}  # type: ignore[misc]
    eager = EventBatch((EventRead("s/x", 0, 1, 2, b"b"),), {0: 2}, window_at)
    assert eager.values() == [b"b"] and eager.position == {0: 2}


def test_a_notice_that_fails_after_a_batch_is_raised_by_the_next_read(monkeypatch):
    """A notice is checked against the segment's sealed size; when that fails, the
    batch before it is still returned and the error comes with the next read
    (no event counted read without being returned)."""
    fetch = [_record(0, 0), _record(0, 1), _notice(1, 0)]
    reader = _reader(monkeypatch, [fetch])
    reader.group.metadata_error = ReaderError("no metadata")  # type: ignore[attr-defined]
    batch = reader.read_batch(16, timeout_ms=0)
    assert [(e.segment, e.offset) for e in batch.events] == [(SEGMENTS[0], 0), (SEGMENTS[0], 1)]
    assert batch.position[SEGMENTS[0]] == 2
    with pytest.raises(ReaderError, match="no metadata"):
        reader.read_batch(16, timeout_ms=0)


def test_a_segment_sealed_without_a_size_is_held_until_its_size_comes(monkeypatch):
    """Sealed (left the current epoch) with no sealed size yet: not fetched, nothing of
    it returned, its position kept; once a look at the metadata finds the size,
    fetched again from the position and read up to the size only."""
    held = SEGMENTS[1]
    host = Host()
    host.pending = {held}
    fetches = [[_record(0, 0)], [_record(1, 0), _record(1, 1), _record(0, 1)]]
    reader = _reader(monkeypatch, fetches, host)
    consumer = reader._consumer
    assert isinstance(consumer, FakeConsumer)
    assert consumer.assigned == {0, 2}
    assert [(e.segment, e.offset) for e in reader.read_batch(16, timeout_ms=0)] == [
        (SEGMENTS[0], 0)
    ]
    assert reader.position()[held] == 0 and not reader.at_tail()

    host.pending, host.sizes = set(), {held: 1}  # the scale recorded the size: 1
    reader._look_at_metadata()
    assert consumer.assigned == {0, 1, 2}
    got = []
    while not _drained(reader):
        got.extend((e.segment, e.offset) for e in reader.read_batch(16, timeout_ms=0))
    assert got == [(held, 0), (SEGMENTS[0], 1)]  # offset 1 lies past the sealed size
