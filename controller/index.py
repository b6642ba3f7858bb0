"""Binary search over a stream's watermarks: where to start and where to stop reading.

    >>> find([100, 200, 300], 250), find([100, 200, 300], 50)
    (1, None)
    >>> from tidemark.controller.model import Watermark
    >>> rows = index_rows([Watermark("s/t", 100, 180, {0: 5}, 0),
    ...                    Watermark("s/t", 200, 150, {0: 9}, 1)])
    >>> [row.upper_time_max for row in rows]
    [180, 180]
    >>> start_cut(rows, 190), start_cut(rows, 180)
    ({0: 9}, None)
    >>> stop_cut(rows, 150), stop_cut(rows, 201)
    ({0: 9}, None)

Two questions, not the same one:

- **where to start** reading to get every event with time >= ``t``: the cut of
  the latest watermark whose ``upper_time_max`` (running maximum of
  ``upper_time``) is below ``t``; nothing before it can carry a time >= ``t``.
  ``None`` means the head of the stream.
- **where to stop** to have every event with time <= ``t``: the cut of the
  first watermark whose ``time`` is >= ``t``; ``None`` while none exists yet
  (the data is not complete).

Both hold when each writer's event times and noted times do not go backwards
(Pravega: "if the writer's time is well behaved"). Rows are in ``seq`` order,
so ``time`` strictly increases and ``upper_time_max`` never decreases; every
search is O(log n).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tidemark.controller.model import StreamCut, Watermark

__all__ = [
    "START",
    "STOP",
    "IndexRow",
    "Indexed",
    "Rule",
    "find",
    "index_rows",
    "running_max",
    "start_cut",
    "start_index",
    "stop_cut",
    "stop_index",
]


@dataclass(frozen=True)
class IndexRow:
    """One row of the index: a watermark with the running maximum of ``upper_time``.

    The index table stores ``(stream, seq, time, upper_time_max, stream_cut)``; a row
    written before the table had ``stream_cut`` takes it from the marks table (same
    ``seq``); empty when not joined.
    """

    stream: str
    seq: int
    time: int
    upper_time_max: int
    stream_cut: StreamCut = field(default_factory=dict)


class Indexed(Protocol):
    """What :func:`start_cut` and :func:`stop_cut` read from a row (an
    :class:`IndexRow`, or an application's own row type)."""

    @property
    def time(self) -> int: ...
    @property
    def upper_time_max(self) -> int: ...
    @property
    def stream_cut(self) -> StreamCut: ...


def find(times: Sequence[int], t: int) -> int | None:
    """Index of the latest of the sorted ``times`` at or before ``t``; ``None`` if all are after."""
    index = bisect.bisect_right(times, t) - 1
    return index if index >= 0 else None


def running_max(upper_times: Iterable[int]) -> list[int]:
    """The ``upper_time_max`` column: running maximum of ``upper_time`` in ``seq`` order."""
    out: list[int] = []
    for upper_time in upper_times:
        out.append(max(upper_time, out[-1]) if out else upper_time)
    return out


def index_rows(watermarks: Iterable[Watermark]) -> list[IndexRow]:
    """A stream's watermarks (in ``seq`` order) as index rows, ``upper_time_max`` filled in."""
    marks = list(watermarks)
    return [
        IndexRow(mark.stream, mark.seq, mark.time, upper_time_max, mark.stream_cut)
        for mark, upper_time_max in zip(
            marks, running_max(mark.upper_time for mark in marks), strict=True
        )
    ]


@dataclass(frozen=True)
class Rule:
    """One of the two questions, written once: the row it picks, by ``column`` (which
    never decreases with ``seq``). The in-memory search (:meth:`position`) and a search
    of the table's statistics (:meth:`bounds`, ``latest``) both follow it.

    - :data:`START`: the **latest** row whose ``upper_time_max`` is **below** ``t``;
    - :data:`STOP`: the **first** row whose ``time`` is **at or after** ``t``."""

    column: str
    latest: bool
    """True: the latest row within :meth:`bounds`; False: the first one."""

    def bounds(self, t: int) -> tuple[int | None, int | None]:
        """The inclusive ``(low, high)`` of ``column`` that a picked row lies within
        (``None``: open)."""
        return (None, t - 1) if self.latest else (t, None)

    def position(
        self, values: Sequence[Any], t: int, key: Callable[[Any], int] | None = None
    ) -> int | None:
        """Index of the row the rule picks in ``values`` (the sorted ``column``, or rows
        whose ``key`` is it); ``None``: no such row (the head of the stream to start; not
        complete to stop)."""
        index = bisect.bisect_left(values, t, key=key)
        if self.latest:
            return index - 1 if index > 0 else None
        return index if index < len(values) else None

    def value(self, row: object) -> int:
        """``row``'s ``column`` (an :class:`Indexed` row, or any with that attribute)."""
        return int(getattr(row, self.column))


START = Rule("upper_time_max", latest=True)
"""Where to start: the latest row whose ``upper_time_max`` is below ``t``."""
STOP = Rule("time", latest=False)
"""Where to stop: the first row whose ``time`` is >= ``t``."""


def start_index(upper_time_max: Sequence[int], t: int) -> int | None:
    """Index of the latest row whose ``upper_time_max`` is below ``t``; ``None``: the head."""
    return START.position(upper_time_max, t)


def stop_index(times: Sequence[int], t: int) -> int | None:
    """Index of the first row whose ``time`` is >= ``t``; ``None`` while there is none."""
    return STOP.position(times, t)


def start_cut(rows: Sequence[Indexed], t: int) -> StreamCut | None:
    """Where to start reading to get every event with time >= ``t``; ``None``: the head."""
    return _cut(START, rows, t)


def stop_cut(rows: Sequence[Indexed], t: int) -> StreamCut | None:
    """Where to stop to have every event with time <= ``t``; ``None`` until it is known."""
    return _cut(STOP, rows, t)


def _cut(rule: Rule, rows: Sequence[Indexed], t: int) -> StreamCut | None:
    index = rule.position(rows, t, key=rule.value)
    return None if index is None else rows[index].stream_cut
