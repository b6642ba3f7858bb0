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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tidemark.controller.model import StreamCut, Watermark

__all__ = [
    "IndexRow",
    "Indexed",
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


def start_index(upper_time_max: Sequence[int], t: int) -> int | None:
    """Index of the latest row whose ``upper_time_max`` is below ``t``; ``None``: the head."""
    index = bisect.bisect_left(upper_time_max, t) - 1
    return index if index >= 0 else None


def stop_index(times: Sequence[int], t: int) -> int | None:
    """Index of the first row whose ``time`` is >= ``t``; ``None`` while there is none."""
    index = bisect.bisect_left(times, t)
    return index if index < len(times) else None


def start_cut(rows: Sequence[Indexed], t: int) -> StreamCut | None:
    """Where to start reading to get every event with time >= ``t``; ``None``: the head."""
    index = bisect.bisect_left(rows, t, key=_upper_time_max) - 1
    return rows[index].stream_cut if index >= 0 else None


def stop_cut(rows: Sequence[Indexed], t: int) -> StreamCut | None:
    """Where to stop to have every event with time <= ``t``; ``None`` until it is known."""
    index = bisect.bisect_left(rows, t, key=_time)
    return rows[index].stream_cut if index < len(rows) else None


def _upper_time_max(row: Indexed) -> int:
    return row.upper_time_max


def _time(row: Indexed) -> int:
    return row.time
