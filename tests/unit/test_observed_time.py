"""The observer's rule (``tidemark.controller.observed``) and how the controller labels what
observed marks bound (``tidemark.jobs.workflow.Observation``), without a broker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.exceptions import InvalidConfigurationError
from tidemark.controller.model import WriterMark
from tidemark.controller.observed import ObservedTime, PartitionSeen
from tidemark.jobs.workflow import Observation
from tidemark.schemas.mark_body import read_writer_mark
from tidemark.schemas.records import WriterMarkRecord

pytestmark = pytest.mark.unit

L = 1_000

LOOKS = st.lists(
    st.dictionaries(
        st.integers(0, 3),
        st.tuples(st.integers(0, 50), st.none() | st.integers(0, 10**6)),
        min_size=1,
    ),
    min_size=1,
    max_size=20,
)
"""Looks of up to four partitions: per partition, how many records arrived since the last
look and the largest timestamp (``None``: none yet)."""


def test_the_time_is_the_smallest_partition_maximum_minus_the_lateness() -> None:
    rule = ObservedTime(lateness_ms=L, idle_ms=60_000)
    note = rule.observe(
        {0: PartitionSeen(5, (3, 10_000)), 1: PartitionSeen(8, (7, 12_000))}, now_ms=20_000
    )
    assert note is not None
    assert (note.time, dict(note.position), note.max_event_time) == (9_000, {0: 5, 1: 8}, 12_000)


def test_an_empty_partition_holds_the_time_until_it_is_idle() -> None:
    rule = ObservedTime(lateness_ms=L, idle_ms=5_000)
    seen = {0: PartitionSeen(5, (3, 10_000)), 1: PartitionSeen(0, None)}
    assert rule.observe(seen, now_ms=20_000) is None
    seen[0] = PartitionSeen(6, (5, 10_500))
    assert rule.observe(seen, now_ms=24_999) is None
    note = rule.observe(seen, now_ms=25_000)  # partition 1 idle: it counts the clock
    assert note is not None
    assert note.time == 9_500
    assert dict(note.position) == {0: 6}, "a partition with nothing is left out of the position"


def test_a_quiet_partition_stops_holding_the_time_and_the_time_never_goes_back() -> None:
    rule = ObservedTime(lateness_ms=L, idle_ms=5_000)
    first = rule.observe(
        {0: PartitionSeen(5, (3, 10_000)), 1: PartitionSeen(2, (1, 4_000))}, now_ms=11_000
    )
    assert first is not None and first.time == 3_000  # partition 1 holds it
    # partition 0 moves on, partition 1 stays quiet: after idle_ms the clock counts for it
    moving = {0: PartitionSeen(9, (8, 30_000)), 1: PartitionSeen(2, (1, 4_000))}
    held = rule.observe(moving, now_ms=15_999)
    assert held is not None and held.time == 3_000
    free = rule.observe(moving, now_ms=17_000)  # partition 1 idle since 11 000
    assert free is not None and free.time == 16_000, "the clock minus the lateness"
    # a record on the quiet partition makes it hold again, but the time stays
    back = rule.observe(
        {0: PartitionSeen(9, (8, 30_000)), 1: PartitionSeen(3, (1, 4_000))}, now_ms=18_000
    )
    assert back is not None and back.time == 16_000
    assert back.possibly_late == 1, "its record left the partition's maximum in place"
    # everything idle: the clock minus the lateness
    late = rule.observe(
        {0: PartitionSeen(9, (8, 30_000)), 1: PartitionSeen(3, (1, 4_000))}, now_ms=40_000
    )
    assert late is not None and late.time == 39_000


def test_records_that_left_the_maximum_in_place_are_counted_as_possibly_late() -> None:
    rule = ObservedTime(lateness_ms=L, idle_ms=60_000)
    rule.observe({0: PartitionSeen(5, (4, 10_000))}, now_ms=11_000)
    # three records arrive, none above 10 000: the maximum's record is still offset 4
    note = rule.observe({0: PartitionSeen(8, (4, 10_000))}, now_ms=12_000)
    assert note is not None and note.possibly_late == 3
    # two more, one of them a new maximum: not counted (the rule sees only the maximum)
    note = rule.observe({0: PartitionSeen(10, (9, 11_000))}, now_ms=13_000)
    assert note is not None and note.possibly_late == 3


def test_a_kept_answer_keeps_its_maximum_and_the_idle_rule_still_applies() -> None:
    """An observer hands a partition's last answer again while its high-water mark stands
    still (it does not ask for its maximum): the rule keeps that maximum and lets the
    partition go once idle, as for a fresh answer."""
    rule = ObservedTime(lateness_ms=L, idle_ms=5_000)
    quiet = PartitionSeen(4, (3, 8_000))
    first = rule.observe({0: PartitionSeen(5, (4, 10_000)), 1: quiet}, now_ms=11_000)
    assert first is not None and first.time == 7_000  # partition 1 holds it
    held = rule.observe({0: PartitionSeen(9, (8, 30_000)), 1: quiet}, now_ms=15_999)
    assert held is not None and (held.time, held.max_event_time) == (7_000, 30_000)
    assert dict(held.position) == {0: 9, 1: 4}
    free = rule.observe({0: PartitionSeen(10, (9, 31_000)), 1: quiet}, now_ms=16_000)
    assert free is not None and free.time == 15_000, "idle since 11 000: the clock counts"
    assert free.possibly_late == 0


@given(LOOKS)
def test_a_kept_answer_notes_what_an_equal_fresh_one_notes(
    looks: list[dict[int, tuple[int, int | None]]],
) -> None:
    """Handing the same answer object again (the observer's partitions that did not move)
    gives the notes equal copies of it give."""
    kept, fresh = ObservedTime(lateness_ms=100, idle_ms=3), ObservedTime(lateness_ms=100, idle_ms=3)
    answers: dict[int, PartitionSeen] = {}
    high: dict[int, int] = {}
    for now, look in enumerate(looks):
        for p, (grow, top) in look.items():
            if grow or p not in answers:  # a partition that did not grow keeps its answer
                high[p] = high.get(p, 0) + grow
                answers[p] = PartitionSeen(high[p], None if top is None else (high[p] - 1, top))
        seen = {p: answers[p] for p in look}
        copies = {p: PartitionSeen(a.high_water, a.max_record) for p, a in seen.items()}
        assert kept.observe(seen, now_ms=1_000 + now) == fresh.observe(copies, now_ms=1_000 + now)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "30s"])
def test_bad_settings_are_refused(bad: object) -> None:
    with pytest.raises(InvalidConfigurationError, match="lateness_ms"):
        ObservedTime(lateness_ms=bad, idle_ms=0)  # type: ignore[arg-type]


@given(LOOKS)
def test_time_and_position_never_go_back(looks: list[dict[int, tuple[int, int | None]]]) -> None:
    rule = ObservedTime(lateness_ms=100, idle_ms=3)
    last_time, last_position = -1, {}
    high: dict[int, int] = {}
    for now, look in enumerate(looks):
        seen = {}
        for p, (grow, top) in look.items():
            high[p] = high.get(p, 0) + grow
            seen[p] = PartitionSeen(high[p], None if top is None else (high[p] - 1, top))
        note = rule.observe(seen, now_ms=1_000 + now)
        if note is None:
            continue
        assert note.time >= last_time
        assert all(note.position.get(p, 0) >= o for p, o in last_position.items() if p in seen)
        last_time, last_position = note.time, dict(note.position)


def test_observed_marks_are_v3_and_noted_marks_keep_their_v2_bytes() -> None:
    noted = WriterMarkRecord("a/b", "w", 5, {0: 1}, instance="i", max_event_time=7)
    observed = WriterMarkRecord("a/b", "o", 5, {0: 1}, True, None, "i", 7, 30_000, 4)
    assert noted.version == "writer_mark.v2"
    assert observed.version == "writer_mark"
    for record in (noted, observed):
        assert (
            read_writer_mark(record.encode()) == record == WriterMarkRecord.decode(record.encode())
        )


def test_a_watermark_names_its_observers_their_largest_lateness_and_their_counts() -> None:
    marks = {
        "w1": WriterMark(10, {0: 1}),
        "o1": WriterMark(10, {0: 1}, observed_lateness_ms=5_000, possibly_late=2),
        "o2": WriterMark(10, {1: 1}, observed_lateness_ms=30_000, possibly_late=3),
    }
    assert Observation.of(marks) == Observation(("o1", "o2"), 30_000, 5)
    assert Observation.of({"w1": marks["w1"]}) is None


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--lateness=-5s"], "must not be negative"),
        (["--lateness", "5 parsecs"], "no duration"),
        (["--lateness", "1s", "--interval", "0s"], "interval_ms must be an int >= 1"),
    ],
)
def test_the_job_refuses_bad_durations_before_reaching_any_service(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tidemark.jobs.observe_stream import main

    assert main(["--stream", "a/b", *flags]) == 1
    assert says in capsys.readouterr().err


def test_an_observed_watermark_reaches_its_marks_row_and_a_noted_one_leaves_it_null() -> None:
    from tidemark.controller.model import Watermark
    from tidemark.jobs.processor import output_row
    from tidemark.jobs.sink import split_rows
    from tidemark.jobs.workflow import Emitted

    observed = Emitted(
        Watermark("a/b", 5, 7, {0: 3}, 0), ("o", "w"), 7, 100, None, Observation(("o",), 900, 2)
    )
    noted = Emitted(Watermark("a/b", 6, 7, {0: 4}, 1), ("w",), 7, 101)
    rows = split_rows([output_row(e) for e in (observed, noted)])["marks"]
    seen = [(r["observed"], r["observed_lateness_ms"], r["possibly_late"]) for r in rows]
    assert seen == [(["o"], 900, 2), (None, None, None)]
