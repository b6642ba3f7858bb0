"""Invariants of the stream model over random scale sequences (hypothesis)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.metadata import (
    StreamMetadata,
    decode_metadata,
    encode_metadata,
    new_stream_metadata,
)
from tidemark.controller.model import KeyRange
from tidemark.controller.navigation import (
    covers_exactly,
    key_hash,
    predecessors,
    readable_segments,
    successors,
)
from tidemark.controller.planning import plan_scale
from tidemark.controller.states import StreamState


@st.composite
def histories(draw: st.DrawFn) -> tuple[StreamMetadata, list[tuple[list[int], list[int]]]]:
    """A stream after random splits and merges, and each scale's (sealed, added) ids."""
    count = draw(st.integers(1, 4))
    meta = new_stream_metadata("p/q", StreamConfiguration(ScalingPolicy.fixed(count)), 0)
    meta = meta.with_changes(state=StreamState.ACTIVE)
    scales = []
    for step in range(draw(st.integers(0, 8))):
        active = meta.current_epoch().segments
        start = draw(st.integers(0, len(active) - 1))
        length = draw(st.integers(1, min(3, len(active) - start)))
        run = active[start : start + length]
        low, high = run[0].key_range.low, run[-1].key_range.high
        fractions = draw(st.lists(st.floats(0.01, 0.99), max_size=3, unique=True))
        cuts = sorted({low + (high - low) * f for f in fractions} - {low, high})
        bounds = [low, *cuts, high]
        ranges = [KeyRange(a, b) for a, b in itertools.pairwise(bounds) if a < b]
        epoch = plan_scale(meta, [s.id for s in run], ranges, at_ms=step + 1)
        meta = meta.with_changes(epochs=(*meta.epochs, epoch))
        added = [s.id for s in epoch.segments if s.epoch == epoch.number]
        scales.append(([s.id for s in run], added))
    return meta, scales


@settings(max_examples=150, deadline=None)
@given(histories())
def test_every_epoch_covers_the_key_space_exactly(history):
    meta, _ = history
    for epoch in meta.epochs:
        assert covers_exactly(epoch.segments)
        ranges = sorted(s.key_range for s in epoch.segments)
        assert all(not a.overlaps(b) for a, b in itertools.pairwise(ranges))


@settings(max_examples=150, deadline=None)
@given(histories())
def test_successors_of_a_sealed_set_cover_exactly_its_ranges(history):
    meta, scales = history
    for sealed, added in scales:
        succ = {s.id for seg in sealed for s in successors(meta.epochs, seg)}
        assert succ == set(added)
        segs = meta.segments()
        old = sorted(segs[s].key_range for s in sealed)
        new = sorted(segs[s].key_range for s in added)
        assert (old[0].low, old[-1].high) == (new[0].low, new[-1].high)
        assert all(a.high == b.low for a, b in itertools.pairwise(new))
        for seg in added:
            assert {p.id for p in predecessors(meta.epochs, seg)} <= set(sealed)


@settings(max_examples=150, deadline=None)
@given(histories())
def test_segment_ids_never_repeat_and_numbers_are_partitions(history):
    meta, _ = history
    ids = [s.id for e in meta.epochs for s in e.segments if s.epoch == e.number]
    assert len(ids) == len(set(ids))
    assert sorted(meta.segment(i).number for i in ids) == list(range(len(ids)))
    assert decode_metadata(encode_metadata(meta)) == meta


@settings(max_examples=100, deadline=None)
@given(histories(), st.randoms(use_true_random=False), st.lists(st.text(max_size=5), max_size=5))
def test_readers_keep_per_key_order(history, rnd, keys):
    """Finishing readable segments in any order reads every segment once, and each
    key's segments in epoch order."""
    meta, _ = history
    active = {s.id for s in meta.current_epoch().segments}
    finished: set[int] = set()
    order: list[int] = []
    while True:
        readable = readable_segments(meta, finished) - active
        if not readable:
            break
        seg = rnd.choice(sorted(readable))
        order.append(seg)
        finished.add(seg)
    assert set(order) == set(meta.segments()) - active
    assert readable_segments(meta, finished) == active
    segs = meta.segments()
    for key in keys:
        point = key_hash(key)
        seen = [s for s in order if segs[s].key_range.contains(point)]
        assert seen == sorted(seen)
