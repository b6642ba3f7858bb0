"""What a tracked Delta table is complete through, and its first version complete through T.

    complete_through("/lake/orders_enriched", delta_root="/data/delta")      # 1700000000000
    version_complete_at("/lake/orders_enriched", t, delta_root="/data/delta")  # 42, or None
    frame = read_complete(spark, "/lake/orders_enriched", t, delta_root="/data/delta")
    wait_for_table("/lake/orders_enriched", t, timeout_ms=600_000, delta_root="/data/delta")

Answered from ``table_completeness`` alone (what the tracking,
:mod:`tidemark.pipelines.reading.tracking`, appended): a lookup never replays the
table's log. A version complete through T holds every event of the streams it is made
from with time <= T (as far as the writers' times are well behaved, as everywhere in
tidemark); what a version was found complete through stays true whatever happens to
the writing query later. The table's latest answer can be unknown (its query's
checkpoint is gone, say): :func:`complete_through` then raises
:class:`TableCompletenessUnknownError` with the reason, while
:func:`version_complete_at` still names the versions found complete before.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from tidemark.controller.delta.location import Root, TableLocation
from tidemark.controller.delta.tracked import (
    completeness_table,
    latest_rows,
    read_answers,
    table_id,
)
from tidemark.controller.delta.writer_log import latest_version, next_commit
from tidemark.controller.timestamps import check_timestamp as check_time
from tidemark.controller.timestamps import wall_clock_ms
from tidemark.pipelines.reading.exceptions import (
    TableCompletenessUnknownError,
    TableNotCompleteError,
    TableNotTrackedError,
    TableTimeTimeoutError,
    WaitCancelledError,
)

if TYPE_CHECKING:  # the index is read by table_status only: the lookups stay light
    from tidemark.pipelines.reading.seek import SeekIndex


class Where(TypedDict, total=False):
    """Where the lookups look (keywords, all optional): the delta root of the tracking's
    ``table_completeness`` (a root or a ``TableLocation``; default
    ``$TIDEMARK_DELTA_ROOT``) and its ``storage_options``."""

    delta_root: Root
    storage_options: Mapping[str, str] | None


def _lake(where: Where) -> TableLocation:
    return TableLocation.of(where.get("delta_root"), where.get("storage_options"))


@dataclass(frozen=True)
class Versions:
    """A tracked table's answers: per version (in order) the best time it was found
    complete through (``None``: none), and its latest row (the table's state now)."""

    table: str
    through: list[tuple[int, int | None]]
    latest: Mapping[str, Any]

    def first_at(self, t: int) -> int | None:
        """The first version complete through ``t``."""
        for version, through in self.through:
            if through is not None and through >= t:
                return version
        return None

    @property
    def best(self) -> int | None:
        """The latest time any version was found complete through (never lowered)."""
        return max((t for _, t in self.through if t is not None), default=None)


def versions_of(table: str, lake: Root) -> Versions:
    """The answers for ``table`` (:class:`TableNotTrackedError` when there are none)."""
    name = table_id(table)
    rows = read_answers(lake, name)
    if not rows:
        raise TableNotTrackedError(str(table))
    return _versions(name, rows)


def _versions(name: str, rows: list[dict[str, Any]]) -> Versions:
    """:class:`Versions` of the table ``name`` from its rows (at least one)."""
    best: dict[int, int | None] = {}
    for row in rows:
        t, kept = row["complete_through"], best.get(row["version"])
        best[row["version"]] = t if kept is None else kept if t is None else max(t, kept)
    latest = latest_rows(rows)
    last = max(latest.values(), key=lambda r: (r["recorded_at"], r["version"]))
    return Versions(name, sorted(best.items()), last)


def complete_through(table: str, **where: Unpack[Where]) -> int | None:
    """The latest time the table is complete through (``None``: none yet).

    :class:`TableNotTrackedError` for a table never tracked,
    :class:`TableCompletenessUnknownError` (with the reason) when it cannot be told now."""
    found = versions_of(table, _lake(where))
    if found.latest.get("reason"):
        raise TableCompletenessUnknownError(found.table, str(found.latest["reason"]))
    return found.best


def version_complete_at(table: str, t: object, **where: Unpack[Where]) -> int | None:
    """The first version of the table complete through ``t`` (``None``: none yet)."""
    at = check_time(t, parse=True)
    return versions_of(table, _lake(where)).first_at(at)


def read_complete(spark: Any, table: str, t: object, **where: Unpack[Where]) -> Any:
    """The table as Spark reads it at its first version complete through ``t``
    (``versionAsOf``); :class:`TableNotCompleteError` while no version is."""
    at = check_time(t, parse=True)
    found = versions_of(table, _lake(where))
    version = found.first_at(at)
    if version is None:
        raise TableNotCompleteError(found.table, at, found.best)
    return spark.read.format("delta").option("versionAsOf", version).load(str(table))


@dataclass(frozen=True)
class TableStatus:
    """A tracked table now: the time it is complete through at which version, or why
    that is unknown; each stream's latest watermark time and how far the table is behind
    the slowest of them (``behind_ms``)."""

    table: str
    version: int | None
    complete_through: int | None
    reason: str | None
    checkpoint: str | None
    streams: Mapping[str, int | None]
    behind_ms: int | None

    def as_row(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "complete_through": self.complete_through,
            "status": "unknown" if self.reason else "known",
            "reason": self.reason,
            "checkpoint": self.checkpoint,
            "streams": dict(self.streams),
            "behind_ms": self.behind_ms,
        }


def table_status(
    table: str, *, index: SeekIndex | None = None, **where: Unpack[Where]
) -> TableStatus:
    """:class:`TableStatus` of a tracked table."""
    from tidemark.pipelines.reading.seek import shared_index  # as above

    lake = _lake(where)
    return _status(versions_of(table, lake), index or shared_index(lake))


def tables_status(*, index: SeekIndex | None = None, **where: Unpack[Where]) -> list[TableStatus]:
    """:class:`TableStatus` of every table tracked under the delta root, by name (one
    read of ``table_completeness``; empty when nothing is tracked)."""
    from tidemark.pipelines.reading.seek import shared_index  # as above

    lake = _lake(where)
    by_table: dict[str, list[dict[str, Any]]] = {}
    for row in read_answers(lake):
        by_table.setdefault(str(row["table"]), []).append(row)
    idx = index or shared_index(lake)
    return [_status(_versions(name, by_table[name]), idx) for name in sorted(by_table)]


def _status(found: Versions, index: SeekIndex) -> TableStatus:
    """A table's status from its answers and its streams' latest watermarks."""
    streams = sorted(json.loads(found.latest.get("consumed") or "{}")) or []
    latest: dict[str, int | None] = {}
    for stream in streams:
        _, times, _ = index.columns(stream)
        latest[stream] = times[-1] if times else None
    through = None if found.latest.get("reason") else found.best
    heads = [t for t in latest.values() if t is not None]
    behind = None if through is None or not heads else max(0, min(heads) - through)
    return TableStatus(
        found.table,
        int(found.latest["version"]) if found.latest["version"] >= 0 else None,
        through,
        found.latest.get("reason"),
        found.latest.get("checkpoint"),
        latest,
        behind,
    )


def wait_for_table(
    table: str,
    t: object,
    timeout_ms: int,
    *,
    stop: threading.Event | None = None,
    poll_ms: int = 200,
    **where: Unpack[Where],
) -> int:
    """The first version of the table complete through ``t``, once there is one.

    Looks again each time ``table_completeness`` commits (a ``stat`` every ``poll_ms``
    in between); :class:`TableTimeTimeoutError` after ``timeout_ms``,
    :class:`WaitCancelledError` when ``stop`` is set first."""
    at = check_time(t, parse=True)
    lake = _lake(where)
    answers = completeness_table(lake).uri
    deadline = wall_clock_ms() + max(0, timeout_ms)
    stop = stop or threading.Event()
    while True:
        seen = latest_version(answers)  # (before the rows: a commit after it wakes the wait)
        found = versions_of(table, lake)
        version = found.first_at(at)
        if version is not None:
            return version
        while not next_commit(answers, -1 if seen is None else seen):
            if wall_clock_ms() >= deadline:
                raise TableTimeTimeoutError(found.table, at, found.best)
            if stop.wait(poll_ms / 1000):
                raise WaitCancelledError(f"the wait for table {found.table} was cancelled")


__all__ = [
    "TableStatus",
    "Versions",
    "Where",
    "complete_through",
    "read_complete",
    "table_status",
    "tables_status",
    "version_complete_at",
    "versions_of",
    "wait_for_table",
]
