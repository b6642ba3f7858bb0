"""tidemark.jobs.slots without Spark: many streams in one state value behave as one state per
stream."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_jobs_workflow import Registered
from tidemark.controller.config import StreamConfiguration
from tidemark.controller.metadata import StreamMetadata, new_stream_metadata
from tidemark.jobs.config import CycleTrigger, WorkflowSettings
from tidemark.jobs.slot_keys import (
    REEVALUATE,
    due_key,
    is_due_key,
    is_reevaluation,
    slot_expression,
)
from tidemark.jobs.slots import SlotState, run_slot
from tidemark.jobs.workflow import Emitted, MarkInput, StreamState, StreamWorkflow
from tidemark.schemas.records import WriterMarkRecord

A, B, C = "shop/a", "shop/b", "shop/c"


class Streams:
    def __init__(self, *names: str) -> None:
        self.metas = {n: new_stream_metadata(n, StreamConfiguration(), 0) for n in names}
        self.looked_up: list[str] = []
        self.prefetched: list[list[str]] = []

    def stream(self, stream: str, refresh: bool = False) -> StreamMetadata | None:
        self.looked_up.append(stream)
        return self.metas.get(stream)

    def prefetch(self, streams: Sequence[str]) -> None:
        self.prefetched.append(list(streams))


class Committed:
    def __init__(self) -> None:
        self.expected: list[tuple[str, list[int]]] = []

    def expect(self, topic: str, partitions: Sequence[int]) -> None:
        self.expected.append((topic, list(partitions)))

    def last_stable(
        self, topic: str, needed: Mapping[int, int], fresh_since_ms: int | None = None
    ) -> Mapping[int, int]:
        return dict.fromkeys(needed, 10**12)


def wf(trigger: CycleTrigger = CycleTrigger.TIMERS) -> StreamWorkflow:
    return StreamWorkflow(
        WorkflowSettings(interval_ms=1000, writer_timeout_ms=2_000, trigger=trigger),
        Streams(A, B, C),
        Committed(),
        Registered(),
    )


def rec(stream: str, writer: str, t: int, offset: int) -> MarkInput:
    return MarkInput(WriterMarkRecord(stream, writer, t, {}, instance=writer).encode(), 0, offset)


def lagging_slot(w: StreamWorkflow) -> SlotState:
    """A and B each with two writers; in A writer "v" stops noting (lags from 5 100 on)."""
    slot = SlotState()
    run_slot(w, slot, {A: [rec(A, "w", 10, 0), rec(A, "v", 10, 1)], B: [rec(B, "w", 20, 2)]}, 5_000)
    run_slot(w, slot, {A: [rec(A, "w", 30, 3)]}, 5_100)
    return slot


def test_only_a_stream_with_a_lagging_writer_is_due_and_at_its_timeout() -> None:
    w = wf()
    slot = lagging_slot(w)
    assert slot.due(w) == 5_100 + 2_000
    assert slot.due_streams(w, 7_099) == set()
    out = run_slot(w, slot, {}, 7_100)  # the due record came: A drops "v" and emits
    assert [(o.watermark.stream, o.watermark.time) for o in out if isinstance(o, Emitted)] == [
        (A, 30)
    ]
    assert slot.due(w) is None


def test_a_reevaluation_cycles_a_pending_stream_under_its_configuration_of_now() -> None:
    """A timeout lowered after A's due time was set: a sweep's due record runs A's cycle
    at once (it drops "v" and emits), without waiting out the old due time; B, in step,
    has no due time and is not touched."""
    streams = Streams(A, B, C)
    w = StreamWorkflow(
        WorkflowSettings(interval_ms=1000, writer_timeout_ms=600_000),
        streams,
        Committed(),
        Registered(),
    )
    slot = lagging_slot(w)
    assert slot.due(w) == 5_100 + 600_000
    raw_b = slot.streams[B]
    assert run_slot(w, slot, {}, 7_100) == []  # a plain due record: nothing is due
    streams.metas[A] = new_stream_metadata(
        A, StreamConfiguration(timestamp_aggregation_timeout_ms=1_000), 0
    )
    assert run_slot(w, slot, {}, 7_100) == []  # the old due time still stands
    out = run_slot(w, slot, {}, 7_200, reevaluate=True)
    assert [(o.watermark.stream, o.watermark.time) for o in out if isinstance(o, Emitted)] == [
        (A, 30)
    ]
    assert slot.streams[B] is raw_b and slot.due(w) is None


def test_a_sweeps_due_record_says_it_reevaluates() -> None:
    assert is_reevaluation(REEVALUATE)
    assert not is_reevaluation(b"1700000000000") and not is_reevaluation(None)


def test_a_call_announces_its_streams_partitions_before_any_cut_is_checked() -> None:
    """So a worker meeting many streams at once asks Kafka once between them."""
    committed = Committed()
    w = StreamWorkflow(WorkflowSettings(), Streams(A, B, C), committed, Registered())
    run_slot(w, SlotState(), {B: [rec(B, "w", 20, 0)], A: [rec(A, "w", 10, 1)]}, 5_000)
    assert committed.expected == [(f"tidemark.{name.replace('/', '.')}", [0]) for name in (A, B)]


def test_a_call_reads_its_streams_metadata_together_before_looking_any_up() -> None:
    """So a worker new to many streams reads them in one batch, not one by one."""
    streams = Streams(A, B, C)
    w = StreamWorkflow(WorkflowSettings(), streams, Committed(), Registered())
    run_slot(w, SlotState(), {B: [rec(B, "w", 20, 0)], A: [rec(A, "w", 10, 1)]}, 5_000)
    assert streams.prefetched == [[A, B]]
    assert streams.looked_up[:2] == [A, B]  # the announcement's lookups come after it


def test_a_stream_that_is_not_due_is_not_decoded() -> None:
    w = wf()
    slot = lagging_slot(w)
    raw_b = slot.streams[B]
    run_slot(w, slot, {}, 7_100)
    run_slot(w, slot, {A: [rec(A, "w", 40, 4)]}, 7_200)
    assert slot.streams[B] is raw_b


def test_json_round_trip_and_bad_versions() -> None:
    w, slot = wf(), SlotState()
    run_slot(w, slot, {A: [rec(A, "w", 10, 0)]}, 5_000)
    again = SlotState.from_json(slot.to_json())
    assert again == slot and again.to_json() == slot.to_json()
    assert SlotState.from_json(None) == SlotState()
    with pytest.raises(ValueError, match="version"):
        SlotState.from_json('{"v": 99, "streams": {}}')


def test_ticks_never_want_a_due_record_and_never_cycle_without_a_tick() -> None:
    w, slot = wf(CycleTrigger.TICKS), SlotState()
    assert run_slot(w, slot, {A: [rec(A, "w", 10, 0)]}, 5_000) == []
    assert slot.due(w) is None
    assert run_slot(w, slot, {}, 99_000) == []


def test_due_records_have_their_own_keys_and_slots() -> None:
    assert is_due_key(due_key(7)) and not is_due_key(A)
    assert "#" not in slot_expression(8).split("LIKE")[0]


batches = st.lists(
    st.tuples(
        st.integers(0, 2_500),  # ms since the previous batch
        st.lists(st.tuples(st.sampled_from([A, B, C]), st.sampled_from("xyz"), st.integers(0, 50))),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(batches)
def test_a_slot_yields_what_one_state_per_stream_yields(
    plan: list[tuple[int, list[tuple[str, str, int]]]],
) -> None:
    """Grouping streams into a slot changes nothing: same outputs, in stream order."""
    w = wf()
    slot = SlotState()
    alone = {s: StreamState() for s in (A, B, C)}
    now, offset, time_of = 10_000, 0, dict.fromkeys([(s, x) for s in (A, B, C) for x in "xyz"], 0)
    for gap, marks in plan:
        now += gap
        records: dict[str, list[MarkInput]] = {}
        for stream, writer, step in marks:
            time_of[(stream, writer)] += step
            records.setdefault(stream, []).append(
                rec(stream, writer, time_of[(stream, writer)], offset)
            )
            offset += 1
        expected = []
        for s in sorted(alone):
            if s in records:
                expected += w.on_records(s, alone[s], records[s], now)
            else:
                expected += w.on_due(s, alone[s], now)
        assert run_slot(w, slot, records, now) == expected
        slot = SlotState.from_json(slot.to_json())  # as the state store would keep it
