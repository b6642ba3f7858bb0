"""The event writer's sent records: reports, notes, position, failures, replay (pure)."""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tidemark.pipelines.writing.sent import Report, SentRecords

FAIL = "boom"  # a failed report: {FAIL: message}


def _log(window_ms: int = 1_000) -> SentRecords:
    return SentRecords(window_ms, offset=lambda msg: msg)  # a stored report's message = offset


class Sent:
    """A record sent: ``ok(offset)`` / ``fail()`` report it (reports come in send order)."""

    def __init__(self, report: Report) -> None:
        self._report = report

    def ok(self, offset: int) -> None:
        self._report(None, offset)

    def fail(self, msg: Any = "msg") -> None:
        self._report(FAIL, msg)


def _send(log: SentRecords, seg: int, value: bytes, now_ms: int = 0) -> Sent:
    add, report = log.appenders(seg)
    add((b"k", value, 100, now_ms, None))
    return Sent(report)


def test_nothing_is_read_until_harvested_and_then_only_the_reported_prefix() -> None:
    log = _log()
    a, b, c = (_send(log, 7, v) for v in (b"a", b"b", b"c"))
    a.ok(40)
    b.ok(41)
    assert log.position() == {}
    assert log.harvest(0) == []
    assert log.position() == {7: 42}
    assert log.in_flight() == 1
    c.ok(45)
    log.harvest(0)
    assert log.position() == {7: 46} and log.in_flight() == 0


def test_failures_are_returned_once_and_not_counted_in_the_position() -> None:
    log = _log()
    a, b = _send(log, 1, b"a"), _send(log, 1, b"b")
    a.ok(3)
    b.fail("msg-b")
    assert log.harvest(0) == [(FAIL, "msg-b")]
    assert log.harvest(0) == []
    assert log.position() == {1: 4}
    assert [r.value for r in log.cut_off(1, 0)] == [b"a"]  # the failed one is not re-sent


def test_a_segment_with_nothing_stored_is_left_out() -> None:
    log = _log()
    _send(log, 2, b"a").fail("m")
    log.harvest(0)
    assert log.position() == {}


def test_note_waits_for_the_records_sent_before_it_and_excludes_later_ones() -> None:
    log = _log()
    a = _send(log, 1, b"a")
    note = log.note(50)
    b = _send(log, 1, b"b")  # after the note
    assert log.ready() == [] and log.waiting
    a.ok(7)
    b.ok(8)
    log.harvest(0)
    assert log.ready() == [note]
    assert note.position == {1: 8} and not note.failed
    assert log.position() == {1: 9} and not log.waiting


def test_note_with_everything_harvested_is_ready_at_once_with_the_position() -> None:
    log = _log()
    _send(log, 1, b"a").ok(4)
    log.harvest(0)
    log.note(50, alive=False, max_event_time=9)
    [note] = log.ready()
    assert (note.time, note.position, note.alive, note.max_event_time) == (50, {1: 5}, False, 9)


def test_notes_come_out_in_order() -> None:
    log = _log()
    a = _send(log, 1, b"a")
    log.note(10)
    b = _send(log, 2, b"b")
    log.note(20)
    b.ok(0)
    log.harvest(0)
    assert log.ready() == []  # the first note still waits for segment 1
    a.ok(3)
    log.harvest(0)
    assert [(n.time, n.position) for n in log.ready()] == [(10, {1: 4}), (20, {1: 4, 2: 1})]


def test_a_failed_record_reported_after_the_note_fails_it_only() -> None:
    log = _log()
    a, b = _send(log, 1, b"a"), _send(log, 1, b"b")
    first = log.note(10)
    a.ok(3)
    b.fail("m")
    assert log.harvest(0) == [(FAIL, "m")]  # the writer raises it; the note is not published
    c = _send(log, 1, b"c")
    second = log.note(20)
    c.ok(5)
    log.harvest(0)
    assert log.ready() == [first, second]
    assert first.failed and not second.failed
    assert second.position == {1: 6}


def test_old_harvested_records_are_forgotten_and_detected_as_lost() -> None:
    log = _log(window_ms=100)
    _send(log, 1, b"a", now_ms=0).ok(5)
    _send(log, 1, b"b", now_ms=50).ok(6)
    log.harvest(now_ms=120)  # a is older than the window
    assert log.retained(1) == 1
    assert log.lost(1, 5) and not log.lost(1, 6)
    assert [r.offset for r in log.cut_off(1, 0)] == [6]


def test_unharvested_records_are_kept_however_old() -> None:
    log = _log(window_ms=10)
    a = _send(log, 1, b"a", now_ms=0)
    _send(log, 1, b"b", now_ms=0)
    a.ok(3)
    log.harvest(now_ms=1_000)  # a goes, b (not reported) stays
    assert log.retained(1) == 1
    log.forget(1)
    assert log.retained(1) == 1  # forget drops harvested records only
    assert log.position() == {1: 4}


def test_cut_off_gives_the_records_at_or_beyond_the_sealed_size_in_order() -> None:
    log = _log()
    for off in (10, 12, 13, 20):
        _send(log, 7, b"v%d" % off).ok(off)
    log.harvest(0)
    assert [r.value for r in log.cut_off(7, 12)] == [b"v12", b"v13", b"v20"]
    assert [r.offset for r in log.cut_off(7, 21)] == []
    log.forget(7)
    assert log.cut_off(7, 0) == [] and log.position() == {7: 21}


def test_kept_records_with_headers_leave_the_garbage_collector_and_replay_as_lists() -> None:
    """Records are kept for a replay window (hundreds of thousands at full speed): with
    their headers as a tuple they stop being tracked by the collector, and a replay gets
    the list ``Producer.produce`` takes."""
    log = _log()
    add, report = log.appenders(7)
    name = "-".join(["trace", "id"])  # made at run time, as a caller's are
    headers = ((name, b"ab"), ("v", b"2"))
    record = (b"k", b"value", 100, 0, headers)
    add(record)
    report(None, 5)
    gc.collect()  # inner tuples first, then the ones holding them
    gc.collect()
    assert not gc.is_tracked(record)
    assert log.harvest(0) == []
    assert [r.headers for r in log.cut_off(7, 0)] == [[("trace-id", b"ab"), ("v", b"2")]]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 2)),
        st.tuples(st.just("deliver"), st.integers(0, 2)),
        st.tuples(st.just("fail"), st.integers(0, 2)),
        st.tuples(st.just("harvest"), st.integers(0, 2)),
        st.tuples(st.just("note"), st.just(0)),
    ),
    max_size=80,
)


@given(ops=ops)
def test_each_note_has_exactly_the_records_sent_before_it(ops: list[tuple[str, int]]) -> None:
    log = _log(window_ms=5)
    queued: dict[int, list[tuple[Sent, int]]] = {0: [], 1: [], 2: []}
    next_offset = {0: 0, 1: 0, 2: 0}
    stored: dict[int, int] = {}  # per segment: the offset after the last stored record
    failed_seqs: dict[int, list[int]] = {0: [], 1: [], 2: []}
    sent = {0: 0, 1: 0, 2: 0}
    pending_expect: list[dict[int, int]] = []  # per note: segment -> records sent before
    ready: list[Any] = []
    now = 0

    def report(seg: int, ok: bool) -> None:
        rep, off = queued[seg].pop(0)
        if ok:
            rep.ok(off)
            stored[seg] = off + 1
        else:
            rep.fail(off)
            failed_seqs[seg].append(off)

    for op, seg in ops:
        now += 1
        if op == "send":
            offset = next_offset[seg]
            next_offset[seg] += 2  # offsets need not be contiguous
            queued[seg].append((_send(log, seg, b"x", now_ms=now), offset))
            sent[seg] += 1
        elif op in ("deliver", "fail") and queued[seg]:
            report(seg, op == "deliver")
        elif op == "harvest":
            log.harvest(now)
        elif op == "note":
            log.harvest(now)
            log.note(len(pending_expect))
            pending_expect.append(dict(sent))
        ready.extend(log.ready())
    for seg in queued:
        while queued[seg]:
            report(seg, True)
    log.harvest(now)
    ready.extend(log.ready())
    assert [n.time for n in ready] == list(range(len(pending_expect)))
    # A note's position is, per segment, the offset after the last record stored among
    # those sent before it; a failed note (not published) had a failure among them.
    for note in ready:
        before = pending_expect[note.time]
        position = {}
        for seg, count in before.items():
            stored_before = [2 * i for i in range(count) if 2 * i not in failed_seqs[seg]]
            if stored_before:
                position[seg] = stored_before[-1] + 1
        if note.failed:
            assert any(o < 2 * before[s] for s, offs in failed_seqs.items() for o in offs)
        else:
            assert note.position == position
    assert log.position() == stored
