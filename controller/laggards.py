"""Who holds a stream's watermark back, and by how much (pure, from the workflow's state).

    >>> from tidemark.controller.model import Watermark, WriterMark
    >>> from tidemark.controller.watermarks import GenerationState
    >>> prev = Watermark("shop/orders", 500, 900, {0: 7}, 3)
    >>> marks = {"a": WriterMark(900, {0: 9}), "b": WriterMark(450, {0: 8})}
    >>> [(x.writer, x.kind, x.behind_ms, x.since_ms) for x in laggards(
    ...     "shop/orders", marks, GenerationState(prev, {"b": 1_000}), now_ms=4_000)]
    [('b', 'lagging', 450, 1000)]

Two kinds of writer keep a watermark from advancing:

- **lagging** (``watermark_cycle``'s ``lagging_since``): its noted time is at
  or below the last watermark's time; while it lags *nothing* is emitted,
  until it catches up, shuts down, or its timeout drops it. ``since_ms`` =
  the first cycle that saw it lagging. One *below* the watermark is named
  at once; one *at* it (the usual state of a writer between its notes)
  once it has lagged ``threshold_ms``.
- **slowest**: no writer lags, but this writer's time is the minimum and
  at least ``threshold_ms`` below the fastest writer's: the next watermark
  can be no later than its time. ``since_ms`` is unknown (``None``): the
  state keeps no history of who was slowest.

For both, ``behind_ms`` = the fastest writer's noted time - its own: how far
the stream's time would move if it caught up. Each laggard also says *who*
it is, from the caller's :class:`WriterSeen`: the writer
instance bound to the id (its token), when that instance's first mark was
accepted, and when its last one arrived -- so an operator tells a stalled
writer from a restarted one, or from a phantom id that appeared a moment ago.

A snapshot is what one cycle sees; :func:`changed` says whether a new
snapshot differs from the last one recorded (only then is it worth a row):
who (id and instance), of which kind, since when -- not how far behind, nor a lagging
writer's new (still lagging) time, which change with every mark and would
make a row per cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidemark.controller.model import WriterMark
from tidemark.controller.watermarks import GenerationState

LAGGING = "lagging"
SLOWEST = "slowest"
KINDS = (LAGGING, SLOWEST)


@dataclass(frozen=True)
class WriterSeen:
    """Who a writer id is now: its bound instance and when the controller saw it."""

    instance: str | None = None
    """The instance token of the writer bound to the id (``None``: a v1 writer)."""
    first_seen_ms: int | None = None
    """When this instance's first mark was accepted."""
    last_seen_ms: int | None = None
    """When its latest accepted mark reached the broker (the marks topic's append time)."""


@dataclass(frozen=True)
class Laggard:
    """One writer holding ``stream``'s watermark back, as seen at ``at_ms``."""

    stream: str
    writer: str
    kind: str
    noted_time: int
    watermark_time: int | None
    behind_ms: int
    since_ms: int | None
    at_ms: int
    instance: str | None = None
    first_seen_ms: int | None = None
    last_seen_ms: int | None = None

    def describe(self) -> str:
        since = "" if self.since_ms is None else f" since {self.since_ms}"
        instance = "" if self.instance is None else f" instance {self.instance}"
        return (
            f"{self.writer}{instance} ({self.kind}{since}: noted {self.noted_time}, "
            f"{self.behind_ms} ms behind, first seen {self.first_seen_ms}, "
            f"last seen {self.last_seen_ms})"
        )


def laggards(
    stream: str,
    marks: Mapping[str, WriterMark],
    state: GenerationState,
    now_ms: int,
    threshold_ms: int = 0,
    seen: Mapping[str, WriterSeen] | None = None,
) -> list[Laggard]:
    """The writers holding ``stream`` back after a cycle, most behind first.

    ``marks`` are the writers' latest accepted marks, ``state`` the
    generation state the cycle returned (lagging writers it dropped are no
    longer in ``lagging_since``). ``threshold_ms`` keeps the ordinary out:
    a lagging writer *at* the watermark's time (every writer is, after a
    watermark made of its time, until it notes again) is named once it has
    lagged that long, one *below* it at once; a slowest writer once it is
    that far behind the fastest (writers in step take turns being slowest).
    ``seen`` says who each writer id is (missing: unknown).
    """
    seen = seen or {}
    previous = state.previous
    wm_time = None if previous is None else previous.time

    def laggard(writer: str, kind: str, behind_ms: int, since_ms: int | None) -> Laggard:
        who = seen.get(writer, WriterSeen())
        return Laggard(
            stream,
            writer,
            kind,
            marks[writer].time,
            wm_time,
            behind_ms,
            since_ms,
            now_ms,
            who.instance,
            who.first_seen_ms,
            who.last_seen_ms,
        )

    if not marks:
        return []
    high = max(m.time for m in marks.values())
    lagging = [
        laggard(writer, LAGGING, high - marks[writer].time, since)
        for writer, since in state.lagging_since.items()
        if writer in marks
    ]
    named = [
        x
        for x in lagging
        if (wm_time is not None and x.noted_time < wm_time)
        or now_ms - (now_ms if x.since_ms is None else x.since_ms) >= threshold_ms
    ]
    if lagging:  # while a writer lags nothing is emitted: the slowest do not matter
        return sorted(named, key=lambda x: (-x.behind_ms, x.writer))
    alive = {w: m for w, m in marks.items() if m.alive}
    if len(alive) < 2:
        return []
    low = min(m.time for m in alive.values())
    high = max(m.time for m in alive.values())  # of the live writers only
    if low == high or high - low < threshold_ms:
        return []
    return [
        laggard(w, SLOWEST, high - low, None) for w, m in sorted(alive.items()) if m.time == low
    ]


def changed(before: Sequence[Laggard], after: Sequence[Laggard]) -> bool:
    """True when the set of laggards (id and instance), their kind or the start of their
    lagging differ."""

    def key(xs: Sequence[Laggard]) -> set[tuple[str, str | None, str, int | None]]:
        return {(x.writer, x.instance, x.kind, x.since_ms) for x in xs}

    return key(before) != key(after)


__all__ = ["KINDS", "LAGGING", "SLOWEST", "Laggard", "WriterSeen", "changed", "laggards"]
