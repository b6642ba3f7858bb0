"""Position tracking (transactional writer, drop-in producer), marks and writer config (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.model import WriterMark
from controller.naming import ClusterSettings, bucket_of
from pipelines.writing.config import WriterConfig
from pipelines.writing.exceptions import WriterConfigError
from pipelines.writing.marks import mark_message, to_writer_mark
from pipelines.writing.positions import PositionTracker, merge
from schemas.records import WriterMarkRecord


def test_segments_with_nothing_acknowledged_are_left_out() -> None:
    t = PositionTracker()
    t.sent(1)
    t.sent(2)
    t.delivered(1, 10)
    t.failed(2)
    assert t.position() == {1: 11}


def test_note_with_nothing_in_flight_is_ready_at_once() -> None:
    t = PositionTracker()
    t.sent(1)
    t.delivered(1, 4)
    t.note(50)
    [note] = t.ready()
    assert (note.time, note.position, note.alive) == (50, {1: 5}, True)


def test_note_excludes_records_sent_after_it() -> None:
    t = PositionTracker()
    t.sent(1)
    t.note(50)
    t.sent(1)  # after the note
    t.delivered(1, 7)
    t.delivered(1, 8)
    [note] = t.ready()
    assert note.position == {1: 8}
    assert t.position() == {1: 9}


def test_notes_come_out_in_order() -> None:
    t = PositionTracker()
    t.sent(1)
    t.note(10)
    t.sent(2)
    t.note(20)
    t.delivered(2, 0)
    assert t.ready() == []  # the first note still waits for segment 1
    t.delivered(1, 3)
    assert [(n.time, n.position) for n in t.ready()] == [(10, {1: 4}), (20, {1: 4, 2: 1})]


def test_a_failed_record_before_the_note_marks_it() -> None:
    t = PositionTracker()
    t.sent(1)
    t.sent(1)
    t.note(10)
    t.delivered(1, 3)
    t.failed(1)
    [note] = t.ready()
    assert note.failed
    assert note.position == {1: 4}


def test_in_flight_counts() -> None:
    t = PositionTracker()
    t.sent(1)
    t.sent(2)
    t.delivered(2, 0)
    assert t.in_flight() == 1
    assert t.in_flight([2]) == 0


def test_merge_takes_the_larger_offset() -> None:
    assert merge({1: 5, 2: 3}, {2: 7, 3: 1}) == {1: 5, 2: 7, 3: 1}


# A random run: sends to 3 segments, notes, deliveries in per-segment order.
ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 2)),
        st.tuples(st.just("deliver"), st.integers(0, 2)),
        st.tuples(st.just("note"), st.just(0)),
    ),
    max_size=60,
)


@given(ops=ops)
def test_each_note_has_exactly_the_records_sent_before_it(ops: list[tuple[str, int]]) -> None:
    t = PositionTracker()
    queued: dict[int, list[int]] = {0: [], 1: [], 2: []}  # offsets waiting for delivery
    next_offset = {0: 0, 1: 0, 2: 0}
    sent_before: list[dict[int, int]] = []  # per note: last offset + 1 of each segment
    last_sent: dict[int, int] = {}
    delivered: list = []
    for op, seg in ops:
        if op == "send":
            t.sent(seg)
            queued[seg].append(next_offset[seg])
            last_sent[seg] = next_offset[seg] + 1
            next_offset[seg] += 2  # offsets need not be contiguous
        elif op == "deliver" and queued[seg]:
            t.delivered(seg, queued[seg].pop(0))
        elif op == "note":
            t.note(len(sent_before))
            sent_before.append(dict(last_sent))
        delivered.extend(t.ready())
    for seg in queued:
        while queued[seg]:
            t.delivered(seg, queued[seg].pop(0))
    delivered.extend(t.ready())
    assert [n.time for n in delivered] == list(range(len(sent_before)))
    for note in delivered:
        assert note.position == sent_before[note.time]


# --- marks and config ---------------------------------------------------------------------------


def test_mark_message_goes_to_the_streams_bucket() -> None:
    settings = ClusterSettings(marks_topic="m", bucket_count=5)
    msg = mark_message(settings, "s/x", "w1", WriterMark(10, {1: 2}, alive=False), "t1")
    assert (msg.topic, msg.partition, msg.key) == ("m", bucket_of("s/x", 5), b"s/x")
    rec = WriterMarkRecord.decode(msg.value)
    assert rec == WriterMarkRecord("s/x", "w1", 10, {1: 2}, False, "t1")
    assert to_writer_mark(rec) == WriterMark(10, {1: 2}, alive=False)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"producer_overrides": {"enable.idempotence": False}}, "may not set"),
        ({"producer_overrides": {"transactional.id": "x"}}, "may not set"),
        ({"note_time_interval_ms": 0}, "note_time_interval_ms"),
        ({"delivery_timeout_ms": 1.5}, "delivery_timeout_ms"),
        ({"transaction_timeout_ms": 500}, "Kafka's minimum"),
        ({"linger_ms": -1}, "linger_ms"),
        ({"replay_window_ms": 0}, "replay_window_ms"),
    ],
)
def test_bad_writer_config(kwargs: dict, text: str) -> None:
    with pytest.raises(WriterConfigError, match=text):
        WriterConfig(**kwargs)


def test_producer_settings() -> None:
    cfg = WriterConfig(producer_overrides={"compression.type": "lz4"})
    s = cfg.producer_settings("b:1", "c", transactional_id="t")
    assert s["enable.idempotence"] is True
    assert s["transactional.id"] == "t"
    assert s["compression.type"] == "lz4"
    assert "transactional.id" not in cfg.producer_settings("b:1", "c")


# --- DeliveryGroups (the drop-in producer's positions) ------------------------------------


def _off(msg: str) -> int:
    return int(msg.split("@")[1])


def test_groups_wait_for_a_later_report_or_idle_and_exclude_later_records() -> None:
    from pipelines.writing.positions import DeliveryGroups

    g = DeliveryGroups([0, 1])
    for off in (10, 11):
        g.used[0] = True
        g.setters[0](None, f"m@{off}")
    g.used[1] = True  # sent, not reported yet
    note = g.note(100)
    g.used[0] = True
    g.setters[0](None, "m@12")  # after the note: completes partition 0's group
    assert g.ready(idle=False, offset=_off) == []  # partition 1 still in flight
    g.setters[0](None, "m@13")
    g.note(200)  # a second note queues behind the first
    assert g.ready(idle=False, offset=_off) == []
    assert g.position(_off) == {0: 14}
    # partition 1's record was stored at offset 3: reported into the closed group
    note.closed[1][None] = "m@3"
    ready = g.ready(idle=True, offset=_off)
    assert [(n.time, n.position) for n in ready] == [(100, {0: 12, 1: 4}), (200, {0: 14, 1: 4})]
    assert not g.waiting


def test_a_group_with_a_failed_record_fails_its_note_only() -> None:
    from pipelines.writing.positions import DeliveryGroups

    g = DeliveryGroups([0])
    g.used[0] = True
    g.setters[0](None, "m@5")
    g.setters[0](RuntimeError("timed out"), "m@-1")
    first = g.note(100)
    g.used[0] = True
    g.setters[0](None, "m@7")
    second = g.note(200)
    assert g.ready(idle=True, offset=_off) == [first, second]
    assert first.failed == ["m@-1"] and second.failed == []
    assert second.position == {0: 8}
