"""Pravega's periodic watermarking workflow as pure functions over plain values.

    >>> from tidemark.controller.model import Epoch, KeyRange, Segment, WriterMark
    >>> epochs = [Epoch(0, (Segment(0, KeyRange(0.0, 1.0)),))]
    >>> marks = {"w1": WriterMark(100, {0: 5}), "w2": WriterMark(120, {0: 9})}
    >>> cycle = watermark_cycle("shop/orders", marks, GenerationState(), epochs, 0, 1000)
    >>> cycle.watermark
    Watermark(stream='shop/orders', time=100, upper_time=120, stream_cut={0: 9}, seq=0)
    >>> accept_mark(marks["w1"], WriterMark(90, {0: 7})).name
    'STALE_TIME'

A watermark says "everything written up to ``time`` lies before
``stream_cut``". It holds when each writer's event times and noted times do
not go backwards (Pravega: "if the writer's time is well behaved").

"Later" segment: one created in a later epoch (segment id ``epoch << 32 |
number``); two segments of different epochs whose key ranges overlap are a
predecessor and a successor. Segments are looked up by id; an id nobody
knows is an :class:`InvalidModelError` (the controller job rejects such marks
before they get here).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tidemark.controller.exceptions import InvalidModelError
from tidemark.controller.model import (
    Epoch,
    KeyRange,
    Position,
    Segment,
    StreamCut,
    Watermark,
    WriterMark,
    segment_epoch,
    segment_number,
)

__all__ = [
    "Cycle",
    "GenerationState",
    "Verdict",
    "accept_mark",
    "complete_cut",
    "upper_bound",
    "watermark_cycle",
]


class Verdict(enum.Enum):
    """What the controller does with an incoming writer mark; the value is the reason text."""

    ACCEPTED = "accepted"
    STALE_TIME = "stale_time"
    """The noted time went backwards (an equal time is accepted)."""
    REGRESSED_POSITION = "regressed_position"
    """The newest segment id or an offset of a segment both positions name went backwards."""


def accept_mark(previous: WriterMark | None, new: WriterMark) -> Verdict:
    """Check ``new`` against the writer's ``previous`` accepted mark; time is checked first.

    The newest segment (largest id) is compared only when both positions name
    at least one segment: an empty position ("nothing acknowledged yet")
    says nothing about where the writer is.
    """
    if previous is None:
        return Verdict.ACCEPTED
    if new.time < previous.time:
        return Verdict.STALE_TIME
    old, now = previous.position, new.position
    if old and now and max(now) < max(old):
        return Verdict.REGRESSED_POSITION
    if any(now[seg] < offset for seg, offset in old.items() if seg in now):
        return Verdict.REGRESSED_POSITION
    return Verdict.ACCEPTED


def upper_bound(positions: Iterable[Position], segments: Mapping[int, Segment]) -> dict[int, int]:
    """The least upper bound of writer positions (not yet a complete stream cut).

    ``segments`` maps segment id -> :class:`Segment` (for key ranges). A segment
    named by several positions keeps the largest offset; a segment is left out
    when an overlapping later segment (a successor) is named, and a named
    successor pushes out its overlapping predecessors.

    The result does not depend on the order of ``positions``: a segment that
    is skipped still pushes out its own predecessors. (Pravega's fold, one
    position at a time, can keep a predecessor of a skipped segment when a
    third, even later one caused the skip, which leaves the cut behind that
    writer; whenever that fold is right, the two agree.)
    """
    named: dict[int, int] = {}
    for position in positions:
        _fold(named, position)
    return _drop_predecessors(named, segments)


def complete_cut(
    upper: StreamCut, previous_cut: StreamCut | None, epochs: Iterable[Epoch]
) -> dict[int, int]:
    """Turn an upper bound into a complete stream cut at or beyond ``previous_cut``.

    1. Fold ``previous_cut`` in by the rule of :func:`upper_bound`, so a cut
       never goes backwards.
    2. While some key range of [0, 1) is uncovered: take the highest epoch
       present, i.e. the largest *creation* epoch (``segment id >> 32``) among
       the cut's segments, look that :class:`Epoch` up in ``epochs``, and add
       each of its segments that overlaps an uncovered range at offset 0 (not
       those already in the cut). An added segment pushes out the
       predecessors it overlaps, even where they were only partly uncovered
       (that is how Pravega does it: a successor at offset 0 is ahead of its
       predecessor at any offset), which can open new gaps; the loop fills
       those from the same epoch until [0, 1) is covered.

    With an empty cut (no positions, no previous cut) the lowest epoch in
    ``epochs`` is used: offset 0 of its segments is the head of the stream.
    ``epochs`` must list every segment the cut names (in any epoch record) and
    hold the epoch used for filling; otherwise :class:`InvalidModelError`.
    """
    by_number = {epoch.number: epoch for epoch in epochs}
    segments = {seg.id: seg for epoch in by_number.values() for seg in epoch.segments}
    merged = dict(upper)
    _fold(merged, previous_cut or {})
    cut = _drop_predecessors(merged, segments)
    while gaps := _uncovered(_segment(segments, seg).key_range for seg in cut):
        if not by_number:
            raise InvalidModelError("complete_cut needs the stream's epochs, got none")
        number = max(map(segment_epoch, cut)) if cut else min(by_number)
        if number not in by_number:
            raise InvalidModelError(f"epoch {number} is not among the epochs given")
        fillers = [
            seg
            for seg in by_number[number].segments
            if seg.id not in cut
            and any(seg.key_range.low < high and low < seg.key_range.high for low, high in gaps)
        ]
        if not fillers:
            raise InvalidModelError(
                f"epoch {number}'s segments do not cover the key ranges {gaps} left open"
            )
        for seg in fillers:
            for other in [o for o in cut if _is_later(seg, _segment(segments, o))]:
                del cut[other]
            cut[seg.id] = 0
    return dict(sorted(cut.items()))


@dataclass(frozen=True)
class GenerationState:
    """What one stream's workflow keeps between cycles.

    ``previous``: the last emitted watermark; ``lagging_since``: writer id ->
    ``now_ms`` of the first cycle that saw the writer lagging.
    """

    previous: Watermark | None = None
    lagging_since: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Cycle:
    """The outcome of one cycle: the next state, the watermark to emit (if any),
    and the writers to forget (drop their marks)."""

    state: GenerationState
    watermark: Watermark | None
    removed: frozenset[str]


def watermark_cycle(
    stream: str,
    marks: Mapping[str, WriterMark],
    state: GenerationState,
    epochs: Iterable[Epoch],
    now_ms: int,
    timeout_ms: int,
) -> Cycle:
    """One run of the periodic workflow for ``stream`` over its writers' latest marks.

    - A writer **takes part** when its time is above the previous watermark's
      time (or there is none). One that does not is **lagging**, from the
      first cycle that sees it so; it is removed when it is shut down
      (``alive=False``) or when ``now_ms - lagging_since >= timeout_ms`` (a
      timeout of 0 removes it at once). While any kept writer lags, nothing
      is emitted.
    - A **shut-down writer** (``alive=False``) takes part like any other
      while its time is above the previous watermark's: its last mark still
      bounds the watermark, so nothing it wrote is left behind. Once a
      watermark reaches its time it lags, and, being shut down, it is removed
      in that same cycle: the controller never waits for it to time out.
    - Otherwise a watermark is emitted: ``time`` = minimum time (strictly above
      the previous one by construction), ``upper_time`` = maximum over the
      writers of their noted time and the highest event time they wrote up to
      their position (``WriterMark.upper_time``: events may run ahead of the
      noted time, and a seek must not skip them),
      ``stream_cut`` = :func:`complete_cut` of the :func:`upper_bound` of the
      positions and the previous cut, ``seq`` = previous + 1, or 0.
    - No writers: nothing is emitted.

    The returned state's ``lagging_since`` holds only the kept lagging writers.
    """
    previous = state.previous
    included: dict[str, WriterMark] = {}
    lagging_since: dict[str, int] = {}
    removed: set[str] = set()
    for writer, mark in marks.items():
        if previous is None or mark.time > previous.time:
            included[writer] = mark
            continue
        since = state.lagging_since.get(writer, now_ms)
        if not mark.alive or now_ms - since >= timeout_ms:
            removed.add(writer)
        else:
            lagging_since[writer] = since
    if lagging_since or not included:
        return Cycle(GenerationState(previous, lagging_since), None, frozenset(removed))

    epochs = tuple(epochs)
    segments = {seg.id: seg for epoch in epochs for seg in epoch.segments}
    upper = upper_bound((mark.position for mark in included.values()), segments)
    watermark = Watermark(
        stream=stream,
        time=min(mark.time for mark in included.values()),
        upper_time=max(mark.upper_time for mark in included.values()),
        stream_cut=complete_cut(upper, previous.stream_cut if previous else None, epochs),
        seq=0 if previous is None else previous.seq + 1,
    )
    return Cycle(GenerationState(watermark, {}), watermark, frozenset(removed))


def _fold(into: dict[int, int], position: Mapping[int, int]) -> None:
    for seg, offset in position.items():
        into[seg] = max(offset, into.get(seg, offset))


def _is_later(seg: Segment, other: Segment) -> bool:
    """``seg`` is a successor of ``other``: created in a later epoch, key ranges overlap."""
    return seg.epoch > other.epoch and seg.overlaps(other)


def _drop_predecessors(named: Mapping[int, int], segments: Mapping[int, Segment]) -> dict[int, int]:
    """Keep the named segments that no other named segment succeeds. O(n**2), n is small."""
    known = [_segment(segments, seg) for seg in named]
    return {
        seg.id: named[seg.id] for seg in known if not any(_is_later(other, seg) for other in known)
    }


def _uncovered(ranges: Iterable[KeyRange]) -> list[tuple[float, float]]:
    """The gaps ``(low, high)`` that ``ranges`` leave in [0, 1)."""
    gaps: list[tuple[float, float]] = []
    reached = 0.0
    for key_range in sorted(ranges):
        if key_range.low > reached:
            gaps.append((reached, key_range.low))
        reached = max(reached, key_range.high)
    if reached < 1.0:
        gaps.append((reached, 1.0))
    return gaps


def _segment(segments: Mapping[int, Segment], seg: int) -> Segment:
    try:
        return segments[seg]
    except KeyError:
        raise InvalidModelError(
            f"segment {seg} (epoch {segment_epoch(seg)}, number {segment_number(seg)}) "
            "is not a known segment of the stream"
        ) from None
