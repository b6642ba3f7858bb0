"""Validating and planning scale and truncate requests, as pure functions.

    >>> from tidemark.controller.config import StreamConfiguration
    >>> from tidemark.controller.metadata import new_stream_metadata
    >>> meta = new_stream_metadata("s/x", StreamConfiguration(), now_ms=0)
    >>> epoch = plan_scale(meta, [0], [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)], at_ms=5)
    >>> [(s.epoch, s.number) for s in epoch.segments]
    [(1, 1), (1, 2)]

A scale seals a set of adjacent active segments and replaces them with new
segments covering exactly the same keys. New segments get the next numbers
(= the next Kafka partitions); segments left alone keep their ids. Every
refusal is a typed error naming the offending value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

from tidemark.controller.exceptions import InvalidCutError, InvalidScaleError
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import Epoch, KeyRange, Segment, segment_id
from tidemark.controller.navigation import wholly_before


def plan_scale(
    meta: StreamMetadata, sealed: Sequence[int], new_ranges: Sequence[KeyRange], at_ms: int
) -> Epoch:
    """The epoch that follows ``meta``'s current one when ``sealed`` become ``new_ranges``."""
    current = meta.current_epoch()
    active = {s.id: s for s in current.segments}
    known = meta.segments()
    if not sealed:
        raise InvalidScaleError(f"stream {meta.name!r}: a scale must seal at least one segment")
    if not new_ranges:
        raise InvalidScaleError(f"stream {meta.name!r}: a scale must add at least one range")
    dupes = sorted({s for s in sealed if list(sealed).count(s) > 1})
    if dupes:
        raise InvalidScaleError(f"stream {meta.name!r}: segments {dupes} named twice")
    for seg_id in sealed:
        if seg_id not in known:
            raise InvalidScaleError(f"stream {meta.name!r} has no segment {seg_id}")
        if seg_id not in active:
            raise InvalidScaleError(f"segment {seg_id} of stream {meta.name!r} is already sealed")
    old = sorted((active[s].key_range for s in sealed), key=lambda r: r.low)
    for a, b in pairwise(old):
        if a.high != b.low:
            raise InvalidScaleError(
                f"stream {meta.name!r}: sealed segments are not adjacent: gap between {a} and {b}"
            )
    new = sorted(new_ranges, key=lambda r: (r.low, r.high))
    for a, b in pairwise(new):
        if a.high > b.low:
            raise InvalidScaleError(f"new ranges {a} and {b} overlap")
        if a.high < b.low:
            raise InvalidScaleError(f"new ranges leave a gap between {a} and {b}")
    span = KeyRange(old[0].low, old[-1].high)
    if new[0].low != span.low or new[-1].high != span.high:
        raise InvalidScaleError(
            f"new ranges cover [{new[0].low:g}, {new[-1].high:g}) but the sealed segments "
            f"cover {span}"
        )
    number = meta.current_epoch().number + 1
    next_number = meta.partition_count()
    kept = [s for s in current.segments if s.id not in set(sealed)]
    added = [Segment(segment_id(number, next_number + i), r) for i, r in enumerate(new)]
    segments = tuple(sorted(kept + added, key=lambda s: s.key_range.low))
    return Epoch(number, segments, created_at_ms=at_ms)


def is_done_scale(
    meta: StreamMetadata, sealed: Sequence[int], new_ranges: Sequence[KeyRange]
) -> bool:
    """True when the latest scale of ``meta`` was exactly this request (a repeated request)."""
    if len(meta.epochs) < 2:
        return False
    last, before = meta.epochs[-1], meta.epochs[-2]
    gone = {s.id for s in before.segments} - {s.id for s in last.segments}
    added = sorted(s.key_range for s in last.segments if s.epoch == last.number)
    return gone == set(sealed) and added == sorted(new_ranges)


def validate_cut(meta: StreamMetadata, cut: Mapping[int, int]) -> dict[int, int]:
    """``cut`` as a plain dict, when it is a valid truncation point for ``meta``.

    Valid: known segments, offsets >= 0 and within a sealed segment's sealed
    size, ranges tiling [0, 1) exactly, and not behind the current
    truncation point on any key. (Offsets of active segments are checked
    against Kafka by the caller.)
    """
    segs = meta.segments()
    if not cut:
        raise InvalidCutError(f"stream {meta.name!r}: a stream cut names at least one segment")
    for seg_id, offset in cut.items():
        if seg_id not in segs:
            raise InvalidCutError(f"stream {meta.name!r} has no segment {seg_id}")
        if offset < 0:
            raise InvalidCutError(f"offset {offset} of segment {seg_id} is negative")
        size = meta.sealed_sizes.get(seg_id)
        if size is not None and offset > size:
            raise InvalidCutError(
                f"offset {offset} of segment {seg_id} lies beyond its sealed size {size}"
            )
    ranges = sorted((segs[s].key_range, s) for s in cut)
    if ranges[0][0].low != 0.0 or ranges[-1][0].high != 1.0:
        raise InvalidCutError(
            f"stream cut {dict(cut)} covers [{ranges[0][0].low:g}, {ranges[-1][0].high:g}), "
            "not [0, 1)"
        )
    for (a, sa), (b, sb) in pairwise(ranges):
        if a.high > b.low:
            raise InvalidCutError(f"segments {sa} {a} and {sb} {b} of the cut overlap")
        if a.high < b.low:
            raise InvalidCutError(f"the cut leaves a gap between segment {sa} {a} and {sb} {b}")
    for old_id, old_offset in meta.truncation.items():
        for new_id, new_offset in cut.items():
            if not segs[old_id].overlaps(segs[new_id]):
                continue
            if new_id == old_id and new_offset < old_offset:
                raise InvalidCutError(
                    f"segment {new_id} at offset {new_offset} is behind the truncation point "
                    f"(offset {old_offset})"
                )
            if new_id < old_id:
                raise InvalidCutError(
                    f"segment {new_id} is behind the truncation point (segment {old_id} "
                    "replaced it)"
                )
    return {int(k): int(v) for k, v in cut.items()}


def segments_before(meta: StreamMetadata, cut: Mapping[int, int]) -> list[int]:
    """Segments wholly before ``cut``: truncation empties them."""
    segs = meta.segments()
    return sorted(s for s in segs if wholly_before(cut, segs, s))


__all__ = ["is_done_scale", "plan_scale", "segments_before", "validate_cut"]
