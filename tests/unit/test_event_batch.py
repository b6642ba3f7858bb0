"""EventBatch: a batch of Kafka records makes the same events as the eager reader path."""

from __future__ import annotations

import pytest
from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.model import TimeWindow, segment_id
from tidemark.pipelines.reading.reader import EventBatch, EventRead

SEGMENT_OF = {0: segment_id(0, 0), 1: segment_id(1, 1), 2: segment_id(2, 2)}

records = st.lists(
    st.tuples(
        st.sampled_from(sorted(SEGMENT_OF)),
        st.integers(0, 2**40),
        st.integers(0, 2**41),
        st.none() | st.binary(max_size=8),
        st.none() | st.binary(max_size=4),
        st.none()
        | st.lists(st.tuples(st.sampled_from(["a", "b"]), st.none() | st.binary(max_size=4))),
    ),
    max_size=30,
)


def _message(partition: int, offset: int, timestamp: int, value, key, headers=None) -> Message:
    return Message(
        topic="t",
        partition=partition,
        offset=offset,
        timestamp=(1, timestamp),
        value=value,
        key=key,
        headers=headers,
    )


def _window(position):
    return TimeWindow(len(position), None)


@given(records)
def test_a_batch_of_records_makes_the_events_read_next_would(rows):
    msgs = [_message(*row) for row in rows]
    batch = EventBatch._of_records(msgs, SEGMENT_OF, "s/x", {7: 1}, _window)
    expected = tuple(
        EventRead("s/x", SEGMENT_OF[p], offset, ts, value or b"", key, tuple(headers or ()))
        for p, offset, ts, value, key, headers in rows
    )
    assert len(batch) == len(rows)
    assert batch.values() == [e.body for e in expected]  # before any event is made
    assert batch.events == expected
    assert batch.events is batch.events  # made once
    assert list(batch) == list(expected)
    assert batch.values() == [e.body for e in expected]  # from the events now
    assert batch == EventBatch(expected, {7: 1}, _window)
    if rows:
        assert batch[-1] == expected[-1]


def test_batch_is_immutable_and_resolves_its_window_once():
    asked = []

    def window_at(position):
        asked.append(dict(position))
        return TimeWindow(5, 9)

    batch = EventBatch._of_records(
        [_message(0, 3, 10, b"a", None)], SEGMENT_OF, "s/x", {0: 4}, window_at
    )
    assert asked == []
    assert batch.window == TimeWindow(5, 9)
    assert batch.window == TimeWindow(5, 9)
    assert asked == [{0: 4}]
    with pytest.raises(AttributeError, match="immutable"):
        batch.position = {}  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del batch.window_at
    empty = EventBatch((), {}, window_at)
    assert len(empty) == 0 and empty.events == () and empty.values() == [] and not list(empty)


@given(records)
def test_events_made_from_records_are_no_checkpoint_places(rows):
    batch = EventBatch._of_records([_message(*row) for row in rows], SEGMENT_OF, "s/x", {}, _window)
    assert not any(e.is_checkpoint or e.checkpoint_name is not None for e in batch.events)
    assert batch.checkpoint_name is None


def test_a_checkpoint_place_holds_no_event_and_names_its_checkpoint():
    place = EventRead.checkpoint("s/x", "c1")
    assert place.is_checkpoint and place.checkpoint_name == "c1"
    assert (place.segment, place.offset, place.timestamp, place.body) == (-1, -1, -1, b"")
    assert place != EventRead("s/x", -1, -1, -1, b"")  # an event is never a place
