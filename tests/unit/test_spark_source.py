"""Spark's Kafka source by time: which partitions a read touches, and from/to which offset."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tidemark.controller.model import segment_id
from tidemark.pipelines.reading.spark_source import (
    EARLIEST,
    LATEST,
    PartitionRange,
    partition_ranges,
    spark_offsets,
)


@st.composite
def scaled_stream(draw: st.DrawFn) -> list[list[int]]:
    """The active partitions of each epoch: a scale seals some and appends new ones."""
    active = list(range(draw(st.integers(1, 4))))
    epochs = [list(active)]
    top = len(active)
    for _ in range(draw(st.integers(0, 5))):
        sealed = draw(
            st.lists(st.sampled_from(active), min_size=1, max_size=len(active), unique=True)
        )
        added = draw(st.integers(1, 3))
        active = [p for p in active if p not in sealed] + list(range(top, top + added))
        top += added
        epochs.append(list(active))
    return epochs


def _cut(epoch: int, partitions: list[int]) -> dict[int, int]:
    return {segment_id(epoch, p): 10 * epoch + p + 1 for p in partitions}


@given(scaled_stream(), st.data())
def test_a_window_reads_exactly_the_partitions_active_between_its_cuts(epochs, data):
    s = data.draw(st.integers(0, len(epochs) - 1))
    e = data.draw(st.integers(s, len(epochs) - 1))
    start, end = _cut(s, epochs[s]), _cut(e, epochs[e])
    total = max(max(ps) for ps in epochs) + 1
    got = {r.partition: r for r in partition_ranges(total, start, end)}
    touched = {p for ps in epochs[s : e + 1] for p in ps}
    assert set(got) == touched
    for p, r in got.items():
        assert r.starting == (start[segment_id(s, p)] if p in epochs[s] else EARLIEST)
        assert r.ending == (end[segment_id(e, p)] if p in epochs[e] else LATEST)


@given(scaled_stream(), st.data())
def test_a_streaming_read_names_every_partition_and_skips_the_sealed(epochs, data):
    s = data.draw(st.integers(0, len(epochs) - 1))
    total = max(max(ps) for ps in epochs) + 1
    start = _cut(s, epochs[s])
    got = partition_ranges(total, start)
    assert [r.partition for r in got] == list(range(total))
    before = {p for ps in epochs[: s + 1] for p in ps}
    for r in got:
        assert r.ending is None
        if r.partition in epochs[s]:
            assert r.starting == start[segment_id(s, r.partition)]
        elif r.partition in before:
            assert r.starting == LATEST  # sealed before the start
        else:
            assert r.starting == EARLIEST  # created after it


def test_from_the_head_every_partition_starts_at_its_earliest_offset():
    assert partition_ranges(3, {}) == [PartitionRange(p, EARLIEST, None) for p in range(3)]


def test_offsets_are_spark_json_by_topic_and_partition():
    ranges = [PartitionRange(0, 5, 9), PartitionRange(2, EARLIEST, LATEST)]
    options = spark_offsets("t", ranges)
    assert json.loads(options["startingOffsets"]) == {"t": {"0": 5, "2": -2}}
    assert json.loads(options["endingOffsets"]) == {"t": {"0": 9, "2": -1}}
    assert "endingOffsets" not in spark_offsets("t", [PartitionRange(0, 5, None)])
