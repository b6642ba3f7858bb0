"""How far a derived table is complete: from what its writer had consumed to a time.

    >>> from tidemark.controller.model import segment_id
    >>> consumed = {"s/a": {0: 10, 1: 4}}
    >>> cut_within({segment_id(0, 0): 10, segment_id(0, 1): 3}, consumed["s/a"])
    True
    >>> series = {"s/a": Series([100, 200], [{0: 5}, {0: 12}])}
    >>> through_of(consumed, series)
    100
    >>> first = answer(None, 0, consumed, through_of(consumed, series), batch=0)
    >>> answer(first, 1, None, None).complete_through    # OPTIMIZE: keeps its predecessor's
    100

A table written by a streaming query holds, at each version, every record the query had
consumed when it committed that version (what its offset log says the batch ended at). A
stream's watermark says "everything written up to time T lies before its cut", so the
table at that version is **complete through T** for the stream when the watermark's cut
lies within what was consumed: on every segment of the cut, the consumed offset of that
segment's partition (segment number = partition, as everywhere a segment meets Kafka)
is at or past the cut's offset. The stream's time is that of the latest such watermark;
several streams: the minimum. Cuts never go backwards, so "within" holds for a prefix of
a stream's watermarks and the latest one is found by binary search.

An answer never lowers what an earlier version said: a version adding none of the
writer's data (OPTIMIZE, VACUUM, a metadata change, a batch the sink skipped) keeps its
predecessor's time and consumed offsets, and a version's time is raised, never lowered,
when a later watermark turns out to lie within what it consumed. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tidemark.controller.model import StreamCut, segment_number

Consumed = Mapping[int, int]
"""What a writer had consumed of one stream: Kafka partition -> next offset."""


def cut_within(cut: StreamCut, consumed: Consumed) -> bool:
    """Whether every segment of ``cut`` was consumed up to the cut's offset (a partition
    not consumed at all counts as consumed to offset 0)."""
    return all(consumed.get(segment_number(seg), 0) >= offset for seg, offset in cut.items())


@dataclass(frozen=True)
class Series:
    """One stream's watermarks in ``seq`` order: their times and a way to their cuts.

    ``cuts`` is a sequence (or a callable: position -> cut, read only where the search
    looks)."""

    times: Sequence[int]
    cuts: Sequence[StreamCut] | Callable[[int], StreamCut]

    def cut(self, position: int) -> StreamCut:
        return self.cuts(position) if callable(self.cuts) else self.cuts[position]


def latest_within(series: Series, consumed: Consumed) -> int | None:
    """Position of the latest watermark whose cut lies within ``consumed``; ``None``: none."""
    lo, hi = 0, len(series.times)  # invariant: every position < lo is within, >= hi is not
    while lo < hi:
        mid = (lo + hi) // 2
        if cut_within(series.cut(mid), consumed):
            lo = mid + 1
        else:
            hi = mid
    return lo - 1 if lo else None


def stream_through(series: Series, consumed: Consumed) -> int | None:
    """The time a table holding ``consumed`` of the stream is complete through (``None``:
    no watermark lies within it yet)."""
    at = latest_within(series, consumed)
    return None if at is None else series.times[at]


def through_of(consumed: Mapping[str, Consumed], series: Mapping[str, Series]) -> int | None:
    """The minimum over the streams of :func:`stream_through` (``None`` while any stream
    has none, or for no stream at all)."""
    times = [stream_through(series[s], c) for s, c in consumed.items()]
    if not times or any(t is None for t in times):
        return None
    return min(t for t in times if t is not None)


def merged(
    before: Mapping[str, Consumed], new: Mapping[str, Consumed]
) -> dict[str, dict[int, int]]:
    """Per stream and partition, the larger offset: what a table holding both holds."""
    out = {s: dict(c) for s, c in before.items()}
    for stream, consumed in new.items():
        mine = out.setdefault(stream, {})
        for partition, offset in consumed.items():
            mine[partition] = max(offset, mine.get(partition, offset))
    return out


def _higher(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass(frozen=True)
class Answer:
    """What is known of one table version: the time it is complete through (``None``:
    none yet, or unknown), what its writer had consumed per stream, the writer's batch
    that committed it (``None``: the version added none of the writer's data) and, when
    it cannot be told, why (``reason``)."""

    version: int
    complete_through: int | None
    consumed: Mapping[str, Consumed] = field(default_factory=dict)
    batch: int | None = None
    reason: str | None = None

    @property
    def known(self) -> bool:
        return self.reason is None


def answer(
    previous: Answer | None,
    version: int,
    consumed: Mapping[str, Consumed] | None,
    through: int | None,
    *,
    batch: int | None = None,
) -> Answer:
    """The answer for ``version``, which follows ``previous`` (``None``: the first one).

    ``consumed`` is what the writer's batch committed in it had consumed and ``through``
    :func:`through_of` that; ``consumed`` ``None``: the version adds none of the writer's
    data and keeps its predecessor's. Never below ``previous``'s time."""
    before = previous if previous is not None and previous.known else None
    if consumed is None:
        if before is None:
            return Answer(version, None, {}, None, None if previous is None else previous.reason)
        return Answer(version, before.complete_through, before.consumed)
    held = merged({} if before is None else before.consumed, consumed)
    return Answer(
        version,
        _higher(None if before is None else before.complete_through, through),
        held,
        batch,
    )


def unknown(version: int, reason: str) -> Answer:
    """A version whose completeness cannot be told, and why."""
    return Answer(version, None, {}, None, reason)


def raised(found: Answer, series: Mapping[str, Series]) -> Answer:
    """``found`` again with the watermarks known now: its time raised when a newer
    watermark lies within what it consumed, never lowered."""
    if not found.known or not found.consumed:
        return found
    now = _higher(found.complete_through, through_of(found.consumed, series))
    return found if now == found.complete_through else replace(found, complete_through=now)


def could_rise(found: Answer, series: Mapping[str, Series]) -> bool:
    """Whether a watermark newer than those in ``series`` could still raise ``found``:
    every stream at or below its time has all its known watermarks within what it
    consumed (a newer one may be too). A stream with one outside never rises again:
    cuts only grow."""
    if not found.known or not found.consumed:
        return False
    for stream, consumed in found.consumed.items():
        known = series.get(stream, Series([], []))
        at = latest_within(known, consumed)
        through = None if at is None else known.times[at]
        low = through is None or (
            found.complete_through is not None and through <= found.complete_through
        )
        if low and (-1 if at is None else at) != len(known.times) - 1:
            return False
    return True


def first_complete(answers: Sequence[Answer], t: int) -> int | None:
    """The first version (of ``answers``, in version order) complete through ``t``."""
    for found in answers:
        if found.complete_through is not None and found.complete_through >= t:
            return found.version
    return None


__all__ = [
    "Answer",
    "Consumed",
    "Series",
    "answer",
    "could_rise",
    "cut_within",
    "first_complete",
    "latest_within",
    "merged",
    "raised",
    "stream_through",
    "through_of",
    "unknown",
]
