"""Readers kept together in time: rebalancing by time, and alignment (pausing).

    config = ReaderConfig(balance="time", lag_ms=1_000, max_drift_ms=5_000)
    group = ReaderGroup.create("billing", "shop/orders", ..., config=config)

Two policies beside the default even split (``view.plan_ownership``):

- **Rebalancing by time** (``balance="time"``, the next step Pravega's
  watermarking proposal names): every reader reports its time (the lowest
  lower bound among its segments) at each rebalance tick. A reader more than
  ``lag_ms`` behind the reader furthest ahead *lags*: it keeps
  ``max(1, share - 1)`` segments and gives up the ones furthest behind in
  time; the readers ahead take them (their share grows to absorb them). The
  group's lower bound is the time of its slowest segment, so moving that
  segment to a reader that keeps up moves the bound. A reader that took a
  segment does not shed any for ten rebalance intervals of wall-clock time
  (it is catching up on it), and a
  reader ahead gives surplus back only when some reader has none or it holds
  two more than its share, so the ownership does not swing back and forth.
- **Alignment** (``max_drift_ms``, as Flink's watermark alignment): a reader
  pauses each of its segments whose time is more than ``max_drift_ms`` ahead
  of the group's lower bound (the lowest time any reader reports) and
  resumes it once the group has caught up. Pausing only stops fetching; the
  position stays where the returned events put it, so nothing is lost or
  read twice. The group's lower bound is known once every reader holding
  segments has passed a watermark; until then nothing is paused.

A segment's time is the lower bound of the window at a position holding only
that segment (``controller.timewindow``; other segments of a cut do not
overlap it, so they do not count): the time of the latest watermark whose
cut it has passed. Pure planning (:func:`plan_by_time`, :func:`drifting`)
is separate from the reader-side state (:class:`TimePolicy`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from controller.exceptions import InvalidModelError
from controller.model import Segment
from controller.timewindow import WindowTracker
from pipelines.reading.config import ReaderConfig
from pipelines.reading.exceptions import WatermarksUnavailableError
from pipelines.reading.registry import GroupRegistry
from pipelines.reading.view import Plan, fair_share, plan_ownership
from pipelines.reading.windows import WatermarkFeed

log = logging.getLogger(__name__)

EVEN = "even"
TIME = "time"
POLICIES = (EVEN, TIME)
SHED_COOLDOWN_INTERVALS = 10
"""Rebalance intervals after taking a segment during which a reader sheds none for lagging."""


@dataclass(frozen=True)
class ReaderReport:
    """What a reader reports at each rebalance: its time and how many segments it holds."""

    time: int | None
    segments: int

    def to_bytes(self) -> bytes:
        return json.dumps({"time": self.time, "segments": self.segments}).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> ReaderReport | None:
        """None for an empty or unreadable report (a reader that has not reported yet)."""
        try:
            raw = json.loads(data.decode("utf-8"))
            found = raw["time"]
            return cls(None if found is None else int(found), int(raw["segments"]))
        except (ValueError, KeyError, TypeError):
            return None


def reader_time(segment_times: Mapping[int, int | None]) -> int | None:
    """The lowest of a reader's segment times; None when one is unknown or it holds none."""
    if not segment_times or any(t is None for t in segment_times.values()):
        return None
    return min(t for t in segment_times.values() if t is not None)


def lagging(reports: Mapping[str, ReaderReport], lag_ms: int) -> frozenset[str]:
    """Readers holding segments whose time is more than ``lag_ms`` behind the one
    furthest ahead (unknown time: behind every known one)."""
    holding = {r: rep for r, rep in reports.items() if rep.segments > 0}
    known = [rep.time for rep in holding.values() if rep.time is not None]
    if not known:
        return frozenset()
    lead = max(known)
    return frozenset(
        r for r, rep in holding.items() if rep.time is None or lead - rep.time > lag_ms
    )


def group_lower(reports: Mapping[str, ReaderReport]) -> int | None:
    """The lowest time among readers holding segments; None when any of them is unknown."""
    times = [rep.time for rep in reports.values() if rep.segments > 0]
    if not times or any(t is None for t in times):
        return None
    return min(t for t in times if t is not None)


def plan_by_time(
    reader: str,
    readers: Sequence[str],
    readable: Sequence[int],
    owners: Mapping[int, str],
    reports: Mapping[str, ReaderReport],
    segment_times: Mapping[int, int | None],
    *,
    lag_ms: int,
    may_shed: bool = True,
) -> Plan:
    """Ownership by time (see the module docstring): fair shares when no one lags,
    except that a reader keeps one segment above its share until another
    reader has none (so ownership does not swing back after a laggard recovers).

    ``segment_times``: this reader's own segments' times (it sheds the ones
    furthest behind first); ``may_shed``: False right after it took a segment.
    """
    if reader not in readers:
        return plan_ownership(reader, readers, readable, owners)
    behind = lagging({r: rep for r, rep in reports.items() if r in readers}, lag_ms)
    if len(behind) == len(readers):
        behind = frozenset()
    share = fair_share(len(readable), len(readers))
    low_share = max(1, share - 1)
    high_share = (
        math.ceil((len(readable) - low_share * len(behind)) / (len(readers) - len(behind)))
        if behind
        else share
    )
    readable_set = set(readable)
    mine = [seg for seg, owner in owners.items() if owner == reader]
    stale = sorted(seg for seg in mine if seg not in readable_set)
    kept = [seg for seg in mine if seg in readable_set]
    release: list[int] = []
    if reader in behind:
        target = low_share
        if may_shed and len(kept) > target:

            def rank(seg: int) -> tuple[float, int]:
                found = segment_times.get(seg)
                return (-math.inf if found is None else found, seg)

            release = sorted(kept, key=rank)[: len(kept) - target]
    else:
        target = high_share
        counts = {r: 0 for r in readers}
        for owner in owners.values():
            if owner in counts:
                counts[owner] += 1
        starving = any(n == 0 for n in counts.values())
        if len(kept) > target and (starving or len(kept) > target + 1):
            release = sorted(kept)[target:][::-1]
    room = max(0, target - (len(kept) - len(release)))
    free = [seg for seg in sorted(readable_set) if seg not in owners][:room]
    return Plan(tuple(free), tuple(stale + release))


def drifting(
    segment_times: Mapping[int, int | None], lower: int | None, max_drift_ms: int
) -> frozenset[int]:
    """Segments whose time runs more than ``max_drift_ms`` ahead of ``lower``."""
    if lower is None:
        return frozenset()
    return frozenset(
        seg for seg, t in segment_times.items() if t is not None and t - lower > max_drift_ms
    )


class SegmentClocks:
    """Each owned segment's time, advanced incrementally along the watermarks."""

    def __init__(
        self, feed: Callable[[], WatermarkFeed], segments: Callable[[], Mapping[int, Segment]]
    ) -> None:
        self._feed = feed
        self._segments = segments
        self._trackers: dict[int, tuple[WindowTracker, int]] = {}

    def times(self, offsets: Mapping[int, int]) -> dict[int, int | None]:
        """Segment id -> time (None: no watermark passed yet) for ``offsets``' segments."""
        for seg in [s for s in self._trackers if s not in offsets]:
            del self._trackers[seg]
        try:
            feed = self._feed()
            feed.refresh()
        except WatermarksUnavailableError:
            return dict.fromkeys(offsets)
        out: dict[int, int | None] = {}
        for seg, offset in offsets.items():
            found = self._trackers.get(seg)
            if found is None or offset < found[1]:
                found = (WindowTracker(feed.iterator(), self._segments()), offset)
            tracker = found[0]
            try:
                window = tracker.advance_to({seg: offset})
            except InvalidModelError:  # a cut names a segment of a newer epoch: look again
                tracker = WindowTracker(feed.iterator(), self._segments())
                window = tracker.advance_to({seg: offset})
            self._trackers[seg] = (tracker, offset)
            out[seg] = window.lower
        return out


class TimePolicy:
    """A reader's side of both policies: report, plan ownership, choose segments to pause."""

    def __init__(
        self,
        config: ReaderConfig,
        registry: GroupRegistry,
        group: str,
        reader: str,
        clocks: SegmentClocks,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._registry = registry
        self._group = group
        self._reader = reader
        self._clocks = clocks
        self._monotonic = monotonic
        self._took_at = -math.inf
        self.reports: dict[str, ReaderReport] = {}
        self.segment_times: dict[int, int | None] = {}

    @property
    def active(self) -> bool:
        return self.config.balance == TIME or self.config.max_drift_ms is not None

    def observe(self, offsets: Mapping[int, int]) -> None:
        """Compute this reader's segment times, report them, read everyone's reports."""
        if not self.active:
            return
        self.segment_times = self._clocks.times(offsets)
        mine = ReaderReport(reader_time(self.segment_times), len(offsets))
        self._registry.report(self._group, self._reader, mine.to_bytes())
        reports = {}
        for name, data in self._registry.reports(self._group).items():
            found = mine if name == self._reader else ReaderReport.from_bytes(data)
            if found is not None:
                reports[name] = found
        self.reports = reports

    def plan(
        self, readers: Sequence[str], readable: Sequence[int], owners: Mapping[int, str]
    ) -> Plan:
        if self.config.balance != TIME:
            return plan_ownership(self._reader, readers, readable, owners)
        cooldown_s = SHED_COOLDOWN_INTERVALS * self.config.rebalance_interval_ms / 1000
        may_shed = self._monotonic() - self._took_at >= cooldown_s
        return plan_by_time(
            self._reader,
            readers,
            readable,
            owners,
            self.reports,
            self.segment_times,
            lag_ms=self.config.lag_ms,
            may_shed=may_shed,
        )

    def took(self) -> None:
        """This reader took segments just now."""
        self._took_at = self._monotonic()

    def to_pause(self) -> frozenset[int]:
        """Owned segments to hold back (alignment); empty when alignment is off."""
        if self.config.max_drift_ms is None:
            return frozenset()
        return drifting(self.segment_times, group_lower(self.reports), self.config.max_drift_ms)


__all__ = [
    "EVEN",
    "POLICIES",
    "TIME",
    "ReaderReport",
    "SegmentClocks",
    "TimePolicy",
    "drifting",
    "group_lower",
    "lagging",
    "plan_by_time",
    "reader_time",
]
