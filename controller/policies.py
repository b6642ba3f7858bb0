"""Stream policies as decisions: where retention truncates, which segments scale.

    >>> from tidemark.controller.config import StreamConfiguration
    >>> from tidemark.controller.metadata import new_stream_metadata
    >>> meta = new_stream_metadata("s/x", StreamConfiguration(), now_ms=0)
    >>> beyond_head(meta, {0: 7}), beyond_head(meta, {0: 0})
    ({0: 7}, None)
    >>> plan_autoscale(meta.with_changes(config=StreamConfiguration(
    ...     scaling_policy=ScalingPolicy.by_event_rate(100, 2, 1))),
    ...     rates={0: 250.0}, now_ms=60_000, cooldown_ms=10_000)
    Split(segment=0, ranges=(KeyRange(low=0.0, high=0.5), KeyRange(low=0.5, high=1.0)))

Pure: functions of values; the policy loop (``tidemark.controller.policy_loop``)
measures, asks the index, and calls ``StreamManager.truncate`` / ``scale``.

Retention (``RetentionPolicy``: ``limit`` = keep at most, ``min_limit`` =
keep at least, as Pravega's max and min):

- **by time**: act once ``stream_cut_at(now - limit)`` lies beyond the head
  (the stream holds data older than ``limit``); truncate at
  ``stream_cut_at(now - min_limit)`` when a minimum is set, else at that
  same cut. A start cut for time ``t`` has nothing with a time >= ``t``
  before it (the watermark's guarantee), so nothing newer than the limit is
  ever removed.
- **by size**: act once the stream holds more than ``limit`` bytes; the cut
  is a watermark's (never inside what a watermark promises), found by
  :func:`earliest` / :func:`latest` over time: the earliest cut leaving at
  most ``limit`` bytes, or with a minimum, the latest leaving at least
  ``min_limit``. Keeping at least the minimum wins when both cannot hold.

Auto-scaling (``ScalingPolicy`` by event or byte rate, per segment and
second, measured over a window): a segment above ``target_rate`` is
**hot** and is split into ``scale_factor`` equal key ranges (the hottest
first); two adjacent segments both below half the target are **cold** and
merge (the coldest pair first), never below ``min_segments``. One scale per
decision, and none within ``cooldown_ms`` of the stream's latest epoch.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import pairwise

from tidemark.controller.config import RetentionPolicy, RetentionType, ScalingPolicy, ScalingType
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import KeyRange, StreamCut
from tidemark.controller.navigation import at_or_after_head, head_cut, wholly_before

COLD_FRACTION = 0.5
"""A segment is cold below this fraction of the policy's target rate."""


# --- retention -------------------------------------------------------------------------------


def beyond_head(meta: StreamMetadata, cut: StreamCut | None) -> dict[int, int] | None:
    """``cut`` moved up to the head, when it then lies beyond it; else ``None``.

    ``None`` or an empty cut stands for the head (what ``stream_cut_at``
    gives when no watermark is old enough).
    """
    if not cut:
        return None
    moved = at_or_after_head(cut, meta)
    return None if moved == head_cut(meta) else moved


def time_bounds(policy: RetentionPolicy, now_ms: int) -> tuple[int, int]:
    """``(trigger, target)`` times of a by-time policy: act when the cut at
    ``trigger`` lies beyond the head, truncate at the cut at ``target``."""
    if policy.type is not RetentionType.BY_TIME:
        raise ValueError(f"not a by-time retention: {policy}")
    return now_ms - policy.limit, now_ms - (policy.min_limit or policy.limit)


def time_retention_cut(
    meta: StreamMetadata, trigger_cut: StreamCut | None, target_cut: StreamCut | None
) -> dict[int, int] | None:
    """Where a by-time policy truncates now (``None``: nothing to do); the cuts
    are ``stream_cut_at`` of the two :func:`time_bounds`."""
    if beyond_head(meta, trigger_cut) is None:
        return None
    return beyond_head(meta, target_cut)


@dataclass(frozen=True)
class SegmentBytes:
    """Bytes held by one segment: running byte counts at some offsets.

    ``marks`` are ``(offset, bytes counted before offset)`` pairs in offset
    order, the first at the segment's first retained record (its count is
    what was counted before and is gone); ``end`` is the next offset and
    ``total`` the count before it. Offsets between marks are counted as at
    the mark below (more bytes, never fewer: a size is an upper bound, so
    "under the limit" holds).
    """

    marks: tuple[tuple[int, int], ...]
    end: int
    total: int

    def before(self, offset: int) -> int:
        """The count before ``offset`` (at most; the first mark's before it)."""
        if offset >= self.end:
            return self.total
        if not self.marks:
            return self.total
        i = bisect.bisect_right(self.marks, offset, key=lambda m: m[0]) - 1
        return self.marks[max(i, 0)][1]

    def from_offset(self, offset: int) -> int:
        """Bytes held at ``offset`` and after."""
        return self.total - self.before(offset)


def bytes_after(meta: StreamMetadata, cut: StreamCut, sizes: Mapping[int, SegmentBytes]) -> int:
    """Bytes the stream keeps when truncated at ``cut`` (segments not measured count 0)."""
    segments = meta.segments()
    total = 0
    for seg_id, seg_bytes in sizes.items():
        if seg_id not in segments or wholly_before(cut, segments, seg_id):
            continue
        total += seg_bytes.from_offset(cut.get(seg_id, 0))
    return total


def earliest(low: int, high: int, ok: Callable[[int], bool]) -> int | None:
    """The least ``t`` in ``[low, high]`` with ``ok(t)``, for ``ok`` false then true."""
    if low > high or not ok(high):
        return None
    while low < high:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid + 1
    return low


def latest(low: int, high: int, ok: Callable[[int], bool]) -> int | None:
    """The greatest ``t`` in ``[low, high]`` with ``ok(t)``, for ``ok`` true then false."""
    if low > high or not ok(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if ok(mid):
            low = mid
        else:
            high = mid - 1
    return low


def size_retention_time(
    policy: RetentionPolicy, size_now: int, kept_at: Callable[[int], int], low: int, high: int
) -> int | None:
    """The time whose start cut a by-size policy truncates at (``None``: nothing to do).

    ``kept_at(t)``: the bytes kept when truncated at the start cut for ``t``
    (never increasing in ``t``); the search runs over ``[low, high]``.
    """
    if policy.type is not RetentionType.BY_SIZE:
        raise ValueError(f"not a by-size retention: {policy}")
    if size_now <= policy.limit:
        return None
    if policy.min_limit:
        return latest(low, high, lambda t: kept_at(t) >= policy.min_limit)
    found = earliest(low, high, lambda t: kept_at(t) <= policy.limit)
    if found is None:  # no watermark cut gets under the limit yet: take the furthest one
        found = high
    return found


# --- auto-scaling ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """Seal ``segment``; its keys go to ``ranges`` (equal parts)."""

    segment: int
    ranges: tuple[KeyRange, ...]


@dataclass(frozen=True)
class Merge:
    """Seal two adjacent ``segments``; their keys go to one ``range``."""

    segments: tuple[int, int]
    range: KeyRange


ScaleAction = Split | Merge


@dataclass(frozen=True)
class Sample:
    """A measurement at ``at_ms``: per segment id, a running count (next offset, or bytes)."""

    at_ms: int
    counts: Mapping[int, int]


def segment_rates(before: Sample, after: Sample) -> dict[int, float]:
    """Per second between two samples, for segments in both (counts that went
    down -- a truncation -- are left out)."""
    seconds = (after.at_ms - before.at_ms) / 1000
    if seconds <= 0:
        return {}
    return {
        seg: (after.counts[seg] - before.counts[seg]) / seconds
        for seg in after.counts
        if seg in before.counts and after.counts[seg] >= before.counts[seg]
    }


def split_ranges(key_range: KeyRange, parts: int) -> tuple[KeyRange, ...]:
    """``parts`` equal ranges covering ``key_range`` exactly."""
    width = key_range.high - key_range.low
    bounds = [key_range.low + width * i / parts for i in range(parts)] + [key_range.high]
    return tuple(KeyRange(a, b) for a, b in pairwise(bounds))


def plan_autoscale(
    meta: StreamMetadata, rates: Mapping[int, float], now_ms: int, cooldown_ms: int
) -> ScaleAction | None:
    """The scale the stream's policy asks for now, or ``None``.

    ``rates`` are per active segment, in the policy's unit (events or bytes
    per second); nothing is decided unless every active segment is measured.
    """
    policy: ScalingPolicy = meta.config.scaling_policy
    if policy.type is ScalingType.FIXED:
        return None
    if now_ms - meta.current_epoch().created_at_ms < cooldown_ms:
        return None
    active = meta.active_segments()
    if any(s.id not in rates for s in active):
        return None
    hot = [s for s in active if rates[s.id] > policy.target_rate]
    if hot:
        hottest = max(hot, key=lambda s: (rates[s.id], -s.id))
        return Split(hottest.id, split_ranges(hottest.key_range, policy.scale_factor))
    if len(active) <= policy.min_segments:
        return None
    cold = policy.target_rate * COLD_FRACTION
    pairs = [
        (a, b)
        for a, b in pairwise(sorted(active, key=lambda s: s.key_range.low))
        if rates[a.id] < cold and rates[b.id] < cold and a.key_range.high == b.key_range.low
    ]
    if not pairs:
        return None
    a, b = min(pairs, key=lambda p: (rates[p[0].id] + rates[p[1].id], p[0].key_range.low))
    return Merge((a.id, b.id), KeyRange(a.key_range.low, b.key_range.high))


def scale_request(action: ScaleAction) -> tuple[list[int], list[KeyRange]]:
    """``(sealed, new_ranges)`` for ``StreamManager.scale``."""
    if isinstance(action, Split):
        return [action.segment], list(action.ranges)
    return list(action.segments), [action.range]


__all__ = [
    "COLD_FRACTION",
    "Merge",
    "Sample",
    "ScaleAction",
    "SegmentBytes",
    "Split",
    "beyond_head",
    "bytes_after",
    "earliest",
    "latest",
    "plan_autoscale",
    "scale_request",
    "segment_rates",
    "size_retention_time",
    "split_ranges",
    "time_bounds",
    "time_retention_cut",
]
