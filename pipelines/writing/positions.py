"""The drop-in producer's positions, folded from delivery reports; pure, no I/O.

A position maps each segment (here: partition) to the **next** offset (last
acknowledged + 1); a segment with nothing acknowledged is left out.
:class:`DeliveryGroups` folds the drop-in producer's reports with no Python
call per report; ``EventWriter`` and ``TransactionalWriter`` keep their
records and fold their reports in :mod:`tidemark.pipelines.writing.sent`. Both give a
note the position of exactly the records sent before it, and fail a note
when one of them was not stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_CALLBACKS_KEPT = 16
"""Reports with an application callback kept per partition (per-record lambdas are never
looked up again: past this many, the kept ones are dropped)."""


@dataclass
class GroupNote:
    """A noted time and, per partition written since the previous note, its group's bucket."""

    time: int
    alive: bool
    closed: dict[int, dict[Any, Any]]
    position: dict[int, int] = field(default_factory=dict)
    failed: list[Any] = field(default_factory=list)
    """The delivery reports (messages) of records that were not stored."""
    max_event_time: int | None = None
    """The highest timestamp among the records sent before the note (the mark's)."""


class DeliveryGroups:
    """Positions from delivery reports with no Python call per report (the drop-in producer's).

        >>> g = DeliveryGroups([0, 1])
        >>> g.used[0] = True; g.setters[0](None, "msg@4")   # sent; reported: bucket[err] = msg
        >>> note = g.note(100)
        >>> g.ready(idle=False, offset=lambda m: int(m[4:]))   # nothing later on 0 yet
        []
        >>> [(n.time, n.position) for n in g.ready(idle=True, offset=lambda m: int(m[4:]))]
        [(100, {0: 5})]

    Records are grouped per partition between notes; a record's delivery
    callback is the C-level ``__setitem__`` of its group's bucket (a dict), so
    a report stores ``bucket[None] = message`` (the group's latest stored
    record, reports of a partition arriving in send order) or, for a record
    not stored, ``bucket[error] = message``. ``note`` closes the groups and
    opens new ones; a closed group is complete when a report of a *later*
    group of its partition arrived, or when nothing is in flight (``idle``).
    The note's position is then the latest stored offset + 1 of every
    partition. A group holding an error fails its note (its position would
    hide the gap). Callers mark a partition written (``used``) when they
    send to it. Pure: no I/O.
    """

    def __init__(self, partitions: Iterable[int]) -> None:
        self._open: dict[int, dict[Any, Any]] = {}
        self.setters: dict[int, Callable[[Any, Any], None]] = {}
        self.used: dict[int, bool] = {}
        self.reports: dict[int, dict[Any, Callable[[Any, Any], None]]] = {}
        """Partition -> the application's callback -> the record's delivery callback: for
        ``None`` the open group's setter, else ``reporting_to(p, cb)`` (the producer looks
        a report up here before making one)."""
        self._chains: dict[int, list[dict[Any, Any]]] = {}
        self._next: dict[int, int] = {}
        self._pending: list[GroupNote] = []
        self.add_partitions(partitions)

    def add_partitions(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            if p not in self._open:
                self._open_group(p)

    def _open_group(self, p: int) -> None:
        bucket: dict[Any, Any] = {}
        self._open[p] = bucket
        self.setters[p] = bucket.__setitem__
        self.used[p] = False
        self.reports[p] = {None: bucket.__setitem__}
        self._chains.setdefault(p, []).append(bucket)

    def reporting_to(
        self, p: int, cb: Callable[[Any, Any], None] | None
    ) -> Callable[[Any, Any], None]:
        """A delivery callback for a record of partition ``p`` that the application also
        wants reported to ``cb``: the open group's setter, then ``cb`` (``None``: the
        setter alone). Made once per group and callback (kept in ``reports``), not per
        record."""
        made = self.reports[p]
        if cb is None:
            return self.setters[p]
        if len(made) >= _CALLBACKS_KEPT:
            made.clear()
            made[None] = self.setters[p]
        bucket = self._open[p]

        def report(err: Any, msg: Any) -> None:
            bucket[err] = msg  # the setter's store, without its call
            cb(err, msg)

        made[cb] = report
        return report

    @property
    def waiting(self) -> bool:
        return bool(self._pending)

    def position(self, offset: Callable[[Any], int]) -> dict[int, int]:
        """Partition -> next offset of every partition with a record reported stored so far."""
        out = dict(self._next)
        for p, chain in self._chains.items():
            for bucket in chain:
                msg = bucket.get(None)
                if msg is not None and offset(msg) + 1 > out.get(p, 0):
                    out[p] = offset(msg) + 1
        return out

    def note(self, time: int, alive: bool = True, max_event_time: int | None = None) -> GroupNote:
        """Close every written partition's group: the note covers what was sent so far
        (``max_event_time``: the highest timestamp among those records)."""
        closed = {p: self._open[p] for p, used in self.used.items() if used}
        for p in closed:
            self._open_group(p)
        pending = GroupNote(time, alive, closed, max_event_time=max_event_time)
        self._pending.append(pending)
        return pending

    def ready(self, idle: bool, offset: Callable[[Any], int]) -> list[GroupNote]:
        """Notes whose groups are complete, in order; ``offset(message)`` reads a report."""
        out = []
        while self._pending:
            note = self._pending[0]
            if not idle and not all(self._later_reported(p, b) for p, b in note.closed.items()):
                break
            self._pending.pop(0)
            for p, bucket in note.closed.items():
                for err, msg in bucket.items():
                    if err is None:
                        nxt = offset(msg) + 1
                        if nxt > self._next.get(p, 0):
                            self._next[p] = nxt
                    else:
                        note.failed.append(msg)
                chain = self._chains[p]
                del chain[: _index(chain, bucket) + 1]
            note.position = dict(self._next)
            out.append(note)
        return out

    def _later_reported(self, p: int, bucket: dict[Any, Any]) -> bool:
        chain = self._chains[p]
        return any(chain[_index(chain, bucket) + 1 :])


def _index(chain: list[dict[Any, Any]], bucket: dict[Any, Any]) -> int:
    """Where ``bucket`` itself is (by identity: empty buckets are all equal)."""
    return next(i for i, b in enumerate(chain) if b is bucket)


def merge(position: Mapping[int, int], other: Mapping[int, int]) -> dict[int, int]:
    """Per segment, the larger next offset of the two."""
    out = dict(position)
    for seg, off in other.items():
        if off > out.get(seg, -1):
            out[seg] = off
    return out


__all__ = ["DeliveryGroups", "GroupNote", "merge"]
