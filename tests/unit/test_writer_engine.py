"""The parts every writer shares: the mark publisher and the stream view (no Kafka)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.metadata import StreamMetadata, new_stream_metadata
from tidemark.controller.model import Epoch, KeyRange, Segment, WriterMark, segment_id
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.states import StreamState
from tidemark.pipelines.writing.exceptions import (
    FailedRecord,
    TimeWentBackwardsError,
    WriterConfigError,
)
from tidemark.pipelines.writing.heartbeat import Heartbeat
from tidemark.pipelines.writing.marks import MarkMessage, MarkPublisher, instance_token
from tidemark.pipelines.writing.metrics import DELIVERY_FAILURES, MARKS_SENT
from tidemark.pipelines.writing.positions import DeliveryGroups
from tidemark.pipelines.writing.stream_view import StreamView, sealed_by
from tidemark.schemas.records import WriterMarkRecord


@dataclass
class _Note:
    time: int
    position: dict[int, int]
    alive: bool = True
    max_event_time: int | None = None
    failed: Any = False


@dataclass
class _Msg:
    """Enough of a ``confluent_kafka.Message`` for a failed report."""

    def topic(self) -> str:
        return "marks"

    def partition(self) -> int:
        return 2

    def key(self) -> bytes:
        return b"s/x"

    def error(self) -> str:
        return "timed out"


@dataclass
class _Sink:
    sent: list[tuple[MarkMessage, Any]] = field(default_factory=list)

    def __call__(self, msg: MarkMessage, on_delivery: Any) -> None:
        self.sent.append((msg, on_delivery))

    def marks(self) -> list[WriterMarkRecord]:
        return [WriterMarkRecord.decode(m.value) for m, _ in self.sent]


def _publisher(failures: list[FailedRecord], instance: str | None = "tok") -> tuple:
    sink = _Sink()
    return MarkPublisher(ClusterSettings(marks_topic="marks"), "w1", sink, failures, instance), sink


def test_noted_time_may_repeat_never_go_back() -> None:
    pub, _ = _publisher([])
    pub.check_not_backwards(5)  # nothing noted yet
    pub.last_noted = 10
    pub.check_not_backwards(10)
    with pytest.raises(
        TimeWentBackwardsError,
        match=r"commit timestamp 9 is below the previous noted time 10 \(stays open\)",
    ):
        pub.check_not_backwards(9, "commit timestamp", " (stays open)")


def test_ready_notes_are_published_in_order_and_a_failed_one_is_skipped() -> None:
    pub, sink = _publisher([])
    notes = [_Note(1, {0: 3}), _Note(2, {0: 4}, failed=True), _Note(3, {0: 5}, alive=False)]
    assert pub.publish_ready("s/x", notes, lambda pos: {p + 100: o for p, o in pos.items()}) == 2
    marks = sink.marks()
    assert [(m.time, m.position, m.alive) for m in marks] == [
        (1, {100: 3}, True),
        (3, {100: 5}, False),
    ]
    assert {m.instance for m in marks} == {"tok"}
    assert {m.writer_id for m in marks} == {"w1"}


def test_a_marks_delivery_is_counted_or_recorded_as_failed() -> None:
    failures: list[FailedRecord] = []
    pub, sink = _publisher(failures, instance=None)
    stream = "engine-test/counted"
    pub.publish(stream, WriterMark(7, {1: 1}), transaction_id="t1")
    msg, on_delivery = sink.sent[0]
    assert WriterMarkRecord.decode(msg.value).transaction_id == "t1"
    sent = MARKS_SENT.labels(stream)._value.get()
    on_delivery(None, _Msg())
    assert MARKS_SENT.labels(stream)._value.get() == sent + 1
    on_delivery("timed out", _Msg())
    assert failures == [FailedRecord("marks", 2, b"s/x", "timed out")]
    assert DELIVERY_FAILURES.labels(stream, "mark")._value.get() == 1


def test_the_shutdown_mark_repeats_the_last_noted_time_not_alive() -> None:
    pub, _ = _publisher([])
    pub.last_noted = 42
    assert pub.shutdown_mark({3: 9}, 50) == WriterMark(42, {3: 9}, False, 50)


def _metadata() -> StreamMetadata:
    return new_stream_metadata(
        "engine/view", StreamConfiguration(ScalingPolicy.fixed(2)), now_ms=0
    ).with_changes(state=StreamState.ACTIVE)


def _scaled(meta: StreamMetadata) -> StreamMetadata:
    """Segment 1 of epoch 0 split in two (epoch 1), its sealed size not recorded yet."""
    old = meta.current_epoch().segments
    low, high = old[1].key_range.low, old[1].key_range.high
    mid = (low + high) / 2
    new = (
        old[0],
        Segment(segment_id(1, 2), KeyRange(low, mid)),
        Segment(segment_id(1, 3), KeyRange(mid, high)),
    )
    return meta.with_changes(epochs=(*meta.epochs, Epoch(1, new)))


def test_the_view_keeps_the_newest_metadata_and_says_when_it_changed() -> None:
    meta = _metadata()
    changes: list[int] = []
    view = StreamView(MemoryStore(), meta, on_change=lambda: changes.append(1))
    view.offer(meta.with_changes())  # equal: a watch's first call
    assert view.latest is meta and changes == []
    scaled = _scaled(meta)
    view.offer(scaled)
    view.offer(meta.with_changes(state=StreamState.SCALING))  # fewer epochs: older
    assert view.latest is scaled and view.applied is meta and changes == [1]


def test_sealed_by_names_the_segments_a_scale_or_a_seal_took_away() -> None:
    meta = _metadata()
    epoch = meta.current_epoch()
    assert sealed_by(epoch, meta) == []
    assert sealed_by(epoch, _scaled(meta)) == [epoch.segments[1].id]
    sealed = meta.with_changes(state=StreamState.SEALED)
    assert sealed_by(epoch, sealed) == [s.id for s in epoch.segments]


def test_waiting_for_sealed_sizes_reads_the_store_and_times_out() -> None:
    store = MemoryStore()
    meta = _metadata()
    scaled = _scaled(meta)
    view = StreamView(store, meta)
    view.offer(scaled)
    seg = meta.current_epoch().segments[1].id
    view.store = _StoreAnswering(scaled.with_changes(sealed_sizes={seg: 17}))
    assert view.await_sealed_sizes([seg], timeout_s=5).sealed_sizes == {seg: 17}
    view = StreamView(_StoreAnswering(scaled), meta)
    with pytest.raises(TimeoutError, match="sealed sizes were not recorded"):
        view.await_sealed_sizes([seg], timeout_s=0.1)


class _StoreAnswering(MemoryStore):
    """A store whose ``get_stream`` gives one fixed value (the scale's write)."""

    def __init__(self, metadata: StreamMetadata) -> None:
        super().__init__()
        self._answer = metadata

    def get_stream(self, stream: str) -> StreamMetadata:
        return self._answer


def test_a_heartbeat_notes_no_less_than_the_last_note_or_an_event_written() -> None:
    pub, _ = _publisher([])
    assert pub.automatic_time(100, None) == 100
    pub.last_noted = 150
    assert pub.automatic_time(100, 120) == 150
    assert pub.automatic_time(100, 170) == 170


def test_a_heartbeat_ticks_until_its_tick_says_closed_and_survives_an_error() -> None:
    ticks: list[int] = []
    done = threading.Event()

    def tick() -> bool:
        ticks.append(1)
        if len(ticks) == 1:
            raise RuntimeError("a failed note")  # logged; the next interval tries again
        done.set()
        return len(ticks) < 3

    beat = Heartbeat("w1", interval_ms=1, tick=tick)
    beat.start()
    assert done.wait(5)
    beat.stop()
    assert 2 <= len(ticks) <= 3
    stopped = len(ticks)
    time.sleep(0.02)
    assert len(ticks) == stopped


def test_every_mark_carries_the_instance_token_a_new_one_unless_given() -> None:
    pub, sink = _publisher([], instance=None)
    pub.last_noted = 5
    pub.publish("s/x", WriterMark(5, {0: 1}))
    pub.publish("s/x", pub.shutdown_mark({0: 1}, None))
    (token,) = {m.instance for m in sink.marks()}
    assert token == pub.instance and len(token) == 32 and int(token, 16) >= 0
    assert _publisher([], instance=None)[0].instance != token  # one per writer object
    assert instance_token("driver-run-7") == "driver-run-7"
    for bad in ("", " ", 7):
        with pytest.raises(WriterConfigError, match="instance must be a non-empty string"):
            instance_token(bad)  # type: ignore[arg-type]


def test_the_shutdown_time_of_a_writer_noting_time_automatically_is_its_close() -> None:
    pub, _ = _publisher([])
    assert pub.closing_time(False, 1_000, 900) is None  # nothing noted: no shutdown mark
    pub.last_noted = 500
    assert pub.closing_time(False, 1_000, 900) == 500
    assert pub.closing_time(True, 1_000, 900) == 1_000  # noted once more, at the close
    assert pub.closing_time(True, 1_000, 1_200) == 1_200  # never below an event written


def test_a_note_carries_the_highest_timestamp_of_the_records_before_it() -> None:
    groups = DeliveryGroups([0])
    groups.used[0] = True
    groups.setters[0](None, "msg@4")
    groups.note(100, max_event_time=130)
    (note,) = groups.ready(idle=True, offset=lambda m: int(m[4:]))
    assert (note.time, note.position, note.max_event_time) == (100, {0: 5}, 130)
