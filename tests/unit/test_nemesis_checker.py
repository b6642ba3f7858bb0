"""The nemesis's checker (tests/deploy/nemesis/checker.py) on hand-made histories: a
sound one passes, and each one breaking an invariant is reported, naming the events."""

from __future__ import annotations

from tests.deploy.nemesis.checker import check
from tests.deploy.nemesis.history import History, Noted, Observed, Read, Reset, Stored, Written
from tidemark.controller.model import Watermark


def mark(seq: int, time: int, cut: dict[int, int]) -> Watermark:
    return Watermark("s/x", time, time, cut, seq)


def sound() -> History:
    """Writer w writes 0 (t=10) and 1 (t=20), notes 20, a watermark at 20 covers both;
    t's transaction 0 commits, 1 aborts; the group reads the three committed events."""
    h = History()
    h.written += [
        Written("w", 0, 10, at=1),
        Written("w", 1, 20, at=2),
        Written("t", 0, 15, at=3),
        Written("t", 1, 16, at=4, committed=False),
    ]
    h.noted += [Noted("w", 20, at=5)]
    h.observed += [
        Observed(mark(0, 5, {0: 1, 1: 0}), at=6, unseen_at=6),
        Observed(mark(1, 20, {0: 2, 1: 1}), at=7, unseen_at=7),
    ]
    h.stored += [Stored("w", 0, 0, 0), Stored("w", 1, 0, 1), Stored("t", 0, 1, 0)]
    h.ends = {0: 2, 1: 2}
    h.reads += [Read("w", 0, 0, 0, at=8), Read("t", 0, 1, 0, at=9), Read("w", 1, 0, 1, at=10)]
    return h


def invariants(h: History) -> list[str]:
    return [v.invariant for v in check(h)]


def test_a_sound_history_passes() -> None:
    assert check(sound()) == []


def test_an_acknowledged_event_missing_from_kafka_is_lost() -> None:
    h = sound()
    h.stored.remove(Stored("w", 1, 0, 1))
    found = check(h)
    assert found[0].invariant == "acknowledged event lost"
    assert "('w', 1)" in found[0].detail


def test_an_aborted_event_visible_and_an_event_stored_twice() -> None:
    h = sound()
    h.stored += [Stored("t", 1, 1, 1), Stored("w", 0, 1, 2)]
    h.ends = {0: 2, 1: 3}
    assert "aborted event visible" in invariants(h)
    assert "event stored twice" in invariants(h)


def test_seq_gaps_and_duplicates() -> None:
    h = sound()
    h.observed.append(Observed(mark(3, 30, {0: 2, 1: 1}), at=11, unseen_at=11))
    assert invariants(h) == ["seq gap or duplicate"]
    h = sound()
    h.observed.append(Observed(mark(1, 20, {0: 2, 1: 1}), at=11, unseen_at=11))
    assert "seq gap or duplicate" in invariants(h)


def test_a_cut_going_backwards() -> None:
    h = sound()
    h.observed.append(Observed(mark(2, 25, {0: 1, 1: 1}), at=11, unseen_at=11))
    found = check(h)
    assert [v.invariant for v in found] == ["cut backwards"]
    assert "{0: (2, 1)}" in found[0].detail


def test_a_cut_missing_an_event_noted_before_it() -> None:
    h = sound()
    h.observed[1] = Observed(
        mark(1, 20, {0: 1, 1: 1}), at=7, unseen_at=7
    )  # w's event 1 at offset 1
    found = check(h)
    assert [v.invariant for v in found] == ["cut misses a noted event"]
    assert "('w', 1)" in found[0].detail


def test_a_note_after_the_watermark_was_seen_binds_nothing() -> None:
    h = sound()
    h.noted[0] = Noted("w", 20, at=12)
    h.observed[1] = Observed(mark(1, 20, {0: 1, 1: 1}), at=7, unseen_at=7)
    assert check(h) == []


def test_a_watermark_seen_before_every_writer_noted_binds_nothing() -> None:
    h = sound()
    h.noted.append(Noted("t", 15, at=8))  # t noted only after the watermarks were seen
    h.observed[1] = Observed(mark(1, 20, {0: 1, 1: 1}), at=7, unseen_at=7)
    assert check(h) == []


def test_a_cut_past_committed_data() -> None:
    h = sound()
    h.observed.append(Observed(mark(2, 25, {0: 9, 1: 1}), at=11, unseen_at=11))
    assert invariants(h) == ["cut past committed data"]


def test_the_group_missing_reading_twice_or_an_aborted_event() -> None:
    h = sound()
    h.reads.pop()
    assert invariants(h) == ["group missed an event"]
    h = sound()
    h.reads.append(Read("w", 0, 0, 0, at=11))
    assert invariants(h) == ["group read an event twice"]
    h = sound()
    h.reads.append(Read("t", 1, 1, 1, at=11))
    assert invariants(h) == ["group read an aborted event"]


def test_a_reset_to_a_checkpoint_takes_back_the_reads_past_it() -> None:
    h = sound()
    h.reads += [Reset({0: 1, 1: 1}, at=11), Read("w", 1, 0, 1, at=12)]
    assert check(h) == []
    h.reads.append(Read("w", 0, 0, 0, at=13))  # before the cut: a real second read
    assert invariants(h) == ["group read an event twice"]


def test_a_note_made_after_the_last_read_without_the_watermark_is_not_held_to_it() -> None:
    """Seen late (its first read began after w's note) a watermark may have been made
    before the note: its cut is not held to cover what w acknowledged before noting."""
    h = sound()
    h.observed[1] = Observed(mark(1, 20, {0: 1, 1: 1}), at=7, unseen_at=4)
    assert invariants(h) == []
    h.observed[1] = Observed(mark(1, 20, {0: 1, 1: 1}), at=7, unseen_at=6)
    assert invariants(h) == ["cut misses a noted event"]
