"""Finding one's way through a stream's segments: routing, successors, head, tail.

    >>> from tidemark.controller.config import StreamConfiguration
    >>> from tidemark.controller.metadata import new_stream_metadata
    >>> meta = new_stream_metadata("s/x", StreamConfiguration(), now_ms=0)
    >>> route(meta.current_epoch(), "customer-42").number
    0
    >>> readable_segments(meta, finished=set())
    {0}

Pure: functions of the metadata (or of its epochs). Routing hashes a key with
a 64-bit blake2b prefix into [0, 1) -- stable across processes and
languages, unlike Python's ``hash``.

Per-key order across scaling: a reader may read a segment only once every
predecessor that still holds data (is not wholly before the truncation
point) has been read to its end. :func:`readable_segments` answers "which
segments may I read now, given those I have finished".
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from itertools import pairwise

from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import Epoch, Segment, StreamCut
from tidemark.controller.watermarks import upper_bound

_HASH_SPACE = float(1 << 64)


def key_hash(routing_key: str | bytes) -> float:
    """The routing key's position in [0, 1): the first 8 bytes of blake2b, big-endian."""
    data = routing_key.encode("utf-8") if isinstance(routing_key, str) else routing_key
    digest = hashlib.blake2b(data, digest_size=8).digest()
    return int.from_bytes(digest, "big") / _HASH_SPACE


def route(epoch: Epoch, routing_key: str | bytes) -> Segment:
    """The segment of ``epoch`` that owns ``routing_key``."""
    return epoch.segment_for(key_hash(routing_key))


def all_segments(epochs: Sequence[Epoch]) -> dict[int, Segment]:
    return {seg.id: seg for epoch in epochs for seg in epoch.segments}


def sealed_in(epochs: Sequence[Epoch], seg_id: int) -> int | None:
    """The number of the first epoch without the segment (the scale that sealed it), or None."""
    seen = False
    for epoch in epochs:
        present = any(s.id == seg_id for s in epoch.segments)
        if present:
            seen = True
        elif seen:
            return epoch.number
    return None


def successors(epochs: Sequence[Epoch], seg_id: int) -> tuple[Segment, ...]:
    """The segments that replaced ``seg_id`` (those of the sealing epoch overlapping it)."""
    segs = all_segments(epochs)
    sealing = sealed_in(epochs, seg_id)
    if sealing is None:
        return ()
    seg = segs[seg_id]
    return tuple(s for s in epochs[sealing].segments if s.epoch == sealing and s.overlaps(seg))


def predecessors(epochs: Sequence[Epoch], seg_id: int) -> tuple[Segment, ...]:
    """The segments ``seg_id`` replaced (those of the previous epoch overlapping it)."""
    seg = all_segments(epochs)[seg_id]
    if seg.epoch == 0:
        return ()
    return tuple(s for s in epochs[seg.epoch - 1].segments if s.overlaps(seg))


def tail_segments(meta: StreamMetadata) -> tuple[Segment, ...]:
    """The active segments: the current epoch's."""
    return meta.current_epoch().segments


def head_segments(meta: StreamMetadata) -> tuple[Segment, ...]:
    """Where reading starts: the truncation cut's segments, else epoch 0's."""
    if not meta.truncation:
        return meta.epochs[0].segments
    segs = meta.segments()
    return tuple(sorted((segs[i] for i in meta.truncation), key=lambda s: s.key_range.low))


def head_cut(meta: StreamMetadata) -> dict[int, int]:
    """The stream cut a reader starts from: the truncation record, else epoch 0 at offset 0."""
    if meta.truncation:
        return dict(meta.truncation)
    return {s.id: 0 for s in meta.epochs[0].segments}


def epoch_at(epochs: Sequence[Epoch], time_ms: int) -> Epoch:
    """The epoch active at ``time_ms``: the latest created at or before it.

    Before the stream existed, the first epoch (where reading would start).
    """
    found = epochs[0]
    for epoch in epochs:
        if epoch.created_at_ms <= time_ms:
            found = epoch
        else:
            break
    return found


def wholly_before(cut: StreamCut, segments: Mapping[int, Segment], seg_id: int) -> bool:
    """True when every key of ``seg_id`` lies before ``cut``.

    That is: the segment is not in the cut, and every cut segment overlapping
    it was created later (a successor, direct or not).
    """
    if seg_id in cut:
        return False
    seg = segments[seg_id]
    overlapping = [c for c in cut if segments[c].overlaps(seg)]
    return bool(overlapping) and all(c > seg_id for c in overlapping)


def readable_segments(meta: StreamMetadata, finished: Set[int]) -> set[int]:
    """The segments a reader may read now, given the segments it has read to their end.

    A segment is readable when it is not finished, not wholly before the
    truncation point, and either at the head or every predecessor of it is
    finished or wholly before the truncation point. Reading only these
    keeps per-key order across scaling: no event of a successor is read
    before the predecessors covering the same keys are read to their end.
    """
    segs = meta.segments()
    cut = meta.truncation
    head = {s.id for s in head_segments(meta)}

    def gone(seg_id: int) -> bool:
        return seg_id in finished or (bool(cut) and wholly_before(cut, segs, seg_id))

    readable: set[int] = set()
    for seg_id in segs:
        if gone(seg_id):
            continue
        if seg_id in head:
            readable.add(seg_id)
            continue
        preds = predecessors(meta.epochs, seg_id)
        if preds and all(gone(p.id) for p in preds):
            readable.add(seg_id)
    return readable


def covers_exactly(segments: Iterable[Segment]) -> bool:
    """True when the segments' ranges tile [0, 1) with no gap and no overlap."""
    ranges = sorted(s.key_range for s in segments)
    if not ranges or ranges[0].low != 0.0 or ranges[-1].high != 1.0:
        return False
    return all(a.high == b.low for a, b in pairwise(ranges))


def at_or_after_head(cut: StreamCut, meta: StreamMetadata) -> dict[int, int]:
    """``cut`` moved forward, per key range, to the stream's truncation point if behind it."""
    if not meta.truncation:
        return dict(cut)
    return upper_bound([dict(meta.truncation), dict(cut)], meta.segments())


def behind_head(
    meta: StreamMetadata, offsets: Mapping[int, int], start_cut: StreamCut
) -> dict[int, tuple[int, int]]:
    """Where a reader group's position lies behind the truncation point: segment id ->
    ``(its offset, the first offset still held)``; empty when nothing it still had to
    read was truncated away.

    ``offsets`` are the group's next offsets (committed, or where a reader
    got to); a segment without one starts where ``start_cut`` (the cut the
    group started at) puts it, else at 0; segments wholly before
    ``start_cut`` were never the group's to read. A segment counts when it
    is in the truncation cut at a higher offset, or wholly before the cut
    while the group had not read it to its sealed size.
    """
    cut = meta.truncation
    if not cut:
        return {}
    segments = meta.segments()
    out: dict[int, tuple[int, int]] = {}
    for seg_id in segments:
        if start_cut and wholly_before(start_cut, segments, seg_id):
            continue
        offset = offsets.get(seg_id, -1)
        if offset < 0:
            offset = start_cut.get(seg_id, 0)
        if seg_id in cut:
            if offset < cut[seg_id]:
                out[seg_id] = (offset, cut[seg_id])
        elif wholly_before(cut, segments, seg_id):
            size = meta.sealed_sizes.get(seg_id)
            if size is not None and offset < size:
                out[seg_id] = (offset, size)
    return out


def start_or_head(cut: StreamCut | None, meta: StreamMetadata) -> dict[int, int]:
    """Where reading starts from a start cut (``tidemark.controller.index``'s answer): the
    stream's head when there is none, else the cut moved up to the head."""
    return head_cut(meta) if not cut else at_or_after_head(cut, meta)


# --- from two cuts to offset ranges -------------------------------------------------------------


@dataclass(frozen=True)
class SegmentRange:
    """Read ``segment`` from ``start`` (``None``: its first record) up to ``end`` (exclusive)."""

    segment: Segment
    start: int | None
    end: int


def ranges_between(
    segments: Mapping[int, Segment],
    sealed_sizes: Mapping[int, int],
    start: StreamCut,
    stop: StreamCut,
) -> list[SegmentRange]:
    """The offset ranges holding everything between the cuts ``start`` and ``stop``.

    A segment wholly before ``start`` or wholly after ``stop`` is left out; a
    segment wholly before ``stop`` (a sealed predecessor) is read to its
    sealed size. An empty ``start`` means the head. Raises ``KeyError`` for a
    sealed segment whose size is not recorded yet (a scale still running).
    """
    out: list[SegmentRange] = []
    for seg_id in sorted(segments):
        seg = segments[seg_id]
        if start and wholly_before(start, segments, seg_id):
            continue
        if seg_id in stop:
            end = stop[seg_id]
        elif wholly_before(stop, segments, seg_id):
            end = sealed_sizes[seg_id]
        else:
            continue
        begin = start.get(seg_id)
        if end <= (0 if begin is None else begin):
            continue
        out.append(SegmentRange(seg, begin, end))
    return out


__all__ = [
    "SegmentRange",
    "all_segments",
    "at_or_after_head",
    "behind_head",
    "covers_exactly",
    "epoch_at",
    "head_cut",
    "head_segments",
    "key_hash",
    "predecessors",
    "ranges_between",
    "readable_segments",
    "route",
    "sealed_in",
    "start_or_head",
    "successors",
    "tail_segments",
    "wholly_before",
]
