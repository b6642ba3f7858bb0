"""A reader group's state as values: which segments are finished, readable, owned by whom.

    >>> from tidemark.controller.config import StreamConfiguration
    >>> from tidemark.controller.metadata import new_stream_metadata
    >>> meta = new_stream_metadata("s/x", StreamConfiguration(), now_ms=0)
    >>> view = group_view(meta, committed={}, start_cut={0: 4})
    >>> (view.cut, sorted(view.finished))
    ({0: 4}, [])
    >>> plan_ownership("r1", ["r1", "r2"], readable=[0, 1, 2], owners={0: "r2"})
    Plan(acquire=(1, 2), release=())

Pure: no Kafka, no ZooKeeper. The group's position is its committed offsets
(Kafka); a segment without one starts at the group's start cut, else at the
truncation point, else at 0. A segment is **finished** when it is wholly
before the start cut or the truncation point, or sealed and read to its
sealed size; **readable** segments are those
``tidemark.controller.navigation.readable_segments`` allows given the finished ones
(a successor only after all its predecessors are finished: per-key order).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import StreamCut
from tidemark.controller.navigation import behind_head, readable_segments, wholly_before
from tidemark.controller.states import StreamState

_CLOSING = frozenset({StreamState.SEALING, StreamState.SEALED, StreamState.DELETING})


@dataclass(frozen=True)
class GroupView:
    """``offsets``: every segment's effective next offset; ``finished``, ``readable``:
    segment ids; ``cut``: the readable segments at their offsets (the group's
    stream cut; empty once a sealed stream is read to its end)."""

    offsets: Mapping[int, int]
    finished: frozenset[int]
    readable: frozenset[int]
    behind: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    """Segments a truncation took unread events from: id -> (group's offset, head
    offset) (``tidemark.controller.navigation.behind_head``); readers refuse to go on."""

    @property
    def cut(self) -> dict[int, int]:
        return {seg: self.offsets[seg] for seg in sorted(self.readable)}


def start_offset(meta: StreamMetadata, start_cut: StreamCut, seg_id: int) -> int:
    """Where a segment with no committed offset starts: start cut, truncation, else 0."""
    if seg_id in start_cut:
        return start_cut[seg_id]
    return meta.truncation.get(seg_id, 0)


def is_finished(meta: StreamMetadata, start_cut: StreamCut, seg_id: int, offset: int) -> bool:
    segments = meta.segments()
    if start_cut and wholly_before(start_cut, segments, seg_id):
        return True
    if meta.truncation and wholly_before(meta.truncation, segments, seg_id):
        return True
    size = meta.sealed_sizes.get(seg_id)
    return size is not None and offset >= size


def sizes_pending(meta: StreamMetadata) -> frozenset[int]:
    """Segments no writer may append to any more whose sealed sizes are not recorded yet.

    A scale writes the new epoch first and records the sealed segments' sizes
    ``seal_drain_ms`` later (``tidemark.controller.streams``); a seal stops every writer
    before it measures. Meanwhile a writer slower than the drain may still
    land records on such a segment, beyond the size to come, and re-send them
    to a successor: what lies beyond is not the segment's content, and only
    the size tells where that begins. Empty once every size is recorded.

    >>> from tidemark.controller.config import StreamConfiguration
    >>> from tidemark.controller.metadata import new_stream_metadata
    >>> meta = new_stream_metadata("s/x", StreamConfiguration(), now_ms=0)
    >>> sorted(sizes_pending(meta.with_changes(state=StreamState.SEALING)))
    [0]
    >>> sorted(sizes_pending(meta.with_changes(state=StreamState.SEALED, sealed_sizes={0: 3})))
    []
    """
    sealed = set(meta.segments())
    if meta.state not in _CLOSING:
        sealed -= {s.id for s in meta.current_epoch().segments}
    return frozenset(sealed - meta.sealed_sizes.keys())


def group_view(
    meta: StreamMetadata, committed: Mapping[int, int], start_cut: StreamCut
) -> GroupView:
    """The group's view from its committed offsets (segment id -> offset; absent: none)."""
    offsets = {
        seg: committed[seg] if committed.get(seg, -1) >= 0 else start_offset(meta, start_cut, seg)
        for seg in meta.segments()
    }
    finished = frozenset(
        seg for seg, off in offsets.items() if is_finished(meta, start_cut, seg, off)
    )
    readable = frozenset(readable_segments(meta, finished))
    behind = behind_head(meta, committed, start_cut)
    return GroupView(offsets, finished, readable, behind)


def cut_commits(meta: StreamMetadata, cut: StreamCut) -> dict[int, int]:
    """The offsets to commit to put a group at ``cut``: the cut's segments at their
    offsets, and every segment after the cut at its start (truncation or 0),
    so no stale commit survives; segments wholly before the cut are left
    alone (the group's start cut marks them finished)."""
    segments = meta.segments()
    out: dict[int, int] = {}
    for seg_id in segments:
        if seg_id in cut:
            out[seg_id] = cut[seg_id]
        elif not wholly_before(cut, segments, seg_id):
            out[seg_id] = meta.truncation.get(seg_id, 0)
    return out


@dataclass(frozen=True)
class Plan:
    """Segments a reader should take, and those it should give up."""

    acquire: tuple[int, ...]
    release: tuple[int, ...]


def fair_share(readable: int, readers: int) -> int:
    return math.ceil(readable / max(1, readers))


def plan_ownership(
    reader: str, readers: Sequence[str], readable: Sequence[int], owners: Mapping[int, str]
) -> Plan:
    """Up to a fair share (``ceil(readable / readers)``) of the readable segments:
    take unowned ones (lowest id first), give up the surplus (highest first),
    and give up owned segments that are no longer readable (finished)."""
    share = fair_share(len(readable), len(readers) or 1)
    readable_set = set(readable)
    mine = sorted(seg for seg, owner in owners.items() if owner == reader)
    stale = [seg for seg in mine if seg not in readable_set]
    kept = [seg for seg in mine if seg in readable_set]
    surplus = kept[share:] if len(kept) > share else []
    room = max(0, share - len(kept))
    free = [seg for seg in sorted(readable_set) if seg not in owners][:room]
    return Plan(tuple(free), tuple(stale + surplus[::-1]))


__all__ = [
    "GroupView",
    "Plan",
    "cut_commits",
    "fair_share",
    "group_view",
    "is_finished",
    "plan_ownership",
    "sizes_pending",
    "start_offset",
]
