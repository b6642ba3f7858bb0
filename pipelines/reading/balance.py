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
  segment to a reader that keeps up moves the bound. A segment a reader
  just took *settles*: it neither counts in the reader's reported time nor is
  shed while the reader catches up on it -- for twenty rebalance intervals of
  wall-clock time, and beyond them until its time is within ``lag_ms`` of the
  reader furthest ahead (a taker slow to start fetching would else lag behind
  the laggard it relieved, and give the segments back), at most two hundred
  intervals (a taker that never catches up counts in the end). A reader ahead
  gives surplus back only when some reader has none or it holds two more than
  its share, so the ownership does not swing back and forth.
- **Alignment** (``max_drift_ms``, as Flink's watermark alignment): a reader
  pauses each of its segments whose time is more than ``max_drift_ms`` ahead
  of the group's lower bound (the lowest time any reader reports) and
  resumes it once the group has caught up. In a group over several streams
  (``tidemark.pipelines.reading.streams_group``) the lower bound is taken over the
  readers of every stream's member group (``peers``), so a stream running
  ahead of the slowest one pauses. Pausing only stops fetching; the
  position stays where the returned events put it, so nothing is lost or
  read twice. A reader behind every watermark counts as being at the first
  one. Pausing is decided at rebalance ticks, so a reader may run ahead by
  what it reads in one ``rebalance_interval_ms`` beyond the limit.

A segment's time is the time of the latest watermark that a position holding
only that segment is not behind (``tidemark.controller.timewindow.compare`` >= 0;
other segments of a cut do not overlap it, so they do not count; see
:class:`SegmentClocks` for why "not behind" rather than "passed"). Pure
planning (:func:`plan_by_time`, :func:`drifting`) is separate from the
reader-side state (:class:`TimePolicy`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tidemark.controller.delta.exceptions import DeltaUnavailableError
from tidemark.controller.exceptions import InvalidModelError
from tidemark.controller.model import Segment
from tidemark.controller.timewindow import compare
from tidemark.pipelines.reading.config import ReaderConfig
from tidemark.pipelines.reading.registry import GroupRegistry
from tidemark.pipelines.reading.view import Plan, fair_share, plan_ownership
from tidemark.pipelines.reading.windows import WatermarkFeed

log = logging.getLogger(__name__)

EVEN = "even"
TIME = "time"
POLICIES = (EVEN, TIME)
SETTLE_INTERVALS = 20
"""Rebalance intervals a taken segment settles for at least: until then it is not counted
in the reader's reported time, and not shed for lagging (the reader is catching up on it)."""
CATCH_UP_INTERVALS = 200
"""Rebalance intervals a taken segment settles for at most, while it has not caught up
with the reader furthest ahead."""


@dataclass(frozen=True)
class ReaderReport:
    """What a reader reports at each rebalance.

    ``time``/``segments``: over its *settled* segments (balance by time);
    ``lowest``/``owned``: over every segment it holds (alignment); ``floor``:
    its stream's first watermark time, where a reader behind every watermark
    counts (readers of other streams compare against it).
    """

    time: int | None
    segments: int
    lowest: int | None = None
    owned: int = 0
    floor: int | None = None

    def to_bytes(self) -> bytes:
        raw = {"time": self.time, "segments": self.segments}
        raw.update(lowest=self.lowest, owned=self.owned, floor=self.floor)
        return json.dumps(raw).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> ReaderReport | None:
        """None for an empty or unreadable report (a reader that has not reported yet)."""
        try:
            raw = json.loads(data.decode("utf-8"))
            return cls(
                _opt_int(raw["time"]),
                int(raw["segments"]),
                _opt_int(raw.get("lowest")),
                int(raw.get("owned", 0)),
                _opt_int(raw.get("floor")),
            )
        except (ValueError, KeyError, TypeError):
            return None


def _opt_int(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int | str):
        raise TypeError(value)
    return int(value)


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


def group_lower(reports: Mapping[str, ReaderReport], floor: int | None = None) -> int | None:
    """The lowest time among readers holding segments (``lowest``, every segment held).

    A reader behind every watermark counts as the first watermark's time (it
    is somewhere before it): its report's own ``floor``, else ``floor``; with
    neither the bound is unknown."""
    times = [
        rep.lowest if rep.lowest is not None else rep.floor if rep.floor is not None else floor
        for rep in reports.values()
        if rep.owned
    ]
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
) -> Plan:
    """Ownership by time (see the module docstring): fair shares when no one lags,
    except that a reader keeps one segment above its share until another
    reader has none (so ownership does not swing back after a laggard recovers).

    ``segment_times``: the times of this reader's segments it may shed (not
    those it took just now); a lagging reader sheds the ones furthest behind
    first.
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
        sheddable = [seg for seg in kept if seg in segment_times]
        if len(kept) > target and sheddable:

            def rank(seg: int) -> tuple[float, int]:
                found = segment_times.get(seg)
                return (-math.inf if found is None else found, seg)

            release = sorted(sheddable, key=rank)[: len(kept) - target]
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
    """Each owned segment's time, advanced incrementally along the watermarks: the
    time of the latest watermark the segment's position is not behind.

    Not behind (``tidemark.controller.timewindow.compare`` >= 0): a segment holding
    nothing sits at offset 0 in every cut, and a segment read to its end sits
    at the last cut's offset; both have read everything those watermarks
    vouch for on that segment, so for balancing neither must look behind.
    """

    def __init__(
        self, feed: Callable[[], WatermarkFeed], segments: Callable[[], Mapping[int, Segment]]
    ) -> None:
        self._feed = feed
        self._segments = segments
        self._state: dict[int, tuple[int, int, int | None]] = {}
        """segment -> (offset, index of the next watermark to look at, time)."""

    def first_time(self) -> int | None:
        """The first watermark's time (None: none yet, or no watermarks to read)."""
        try:
            watermarks = self._feed().watermarks
        except DeltaUnavailableError:
            return None
        return watermarks[0].time if watermarks else None

    def times(self, offsets: Mapping[int, int]) -> dict[int, int | None]:
        """Segment id -> time (None: behind every watermark) for ``offsets``' segments."""
        for seg in [s for s in self._state if s not in offsets]:
            del self._state[seg]
        try:
            feed = self._feed()
            feed.refresh()
        except DeltaUnavailableError:
            return dict.fromkeys(offsets)
        watermarks = feed.watermarks
        segments = self._segments()
        out: dict[int, int | None] = {}
        for seg, offset in offsets.items():
            last, index, found = self._state.get(seg, (offset, 0, None))
            if offset < last:
                index, found = 0, None
            position = {seg: offset}
            while index < len(watermarks):
                try:
                    if compare(position, watermarks[index].stream_cut, segments) < 0:
                        break
                except InvalidModelError:  # a cut names a segment of a newer epoch
                    segments = self._segments()
                    if compare(position, watermarks[index].stream_cut, segments) < 0:
                        break
                found = watermarks[index].time
                index += 1
            self._state[seg] = (offset, index, found)
            out[seg] = found
        return out


@dataclass
class TimePolicy:
    """A reader's side of both policies: report, plan ownership, choose segments to pause."""

    config: ReaderConfig
    registry: GroupRegistry
    group: str
    reader: str
    clocks: SegmentClocks
    monotonic: Callable[[], float] = time.monotonic
    peers: Sequence[str] = ()
    """Other groups whose readers count in the lower bound alignment pauses by (the
    member groups of the other streams of a group over several streams)."""
    reports: dict[str, ReaderReport] = field(default_factory=dict, init=False)
    segment_times: dict[int, int | None] = field(default_factory=dict, init=False)
    """Every owned segment's time (alignment pauses by these)."""
    settled_times: dict[int, int | None] = field(default_factory=dict, init=False)
    """Those of segments held longer than the settling time (balance by these)."""
    _taken_at: dict[int, float] = field(default_factory=dict, init=False)

    @property
    def active(self) -> bool:
        return self.config.balance == TIME or self.config.max_drift_ms is not None

    def observe(self, offsets: Mapping[int, int]) -> None:
        """Compute this reader's segment times, report them, read everyone's reports."""
        if not self.active:
            return
        self.segment_times = self.clocks.times(offsets)
        for seg in [s for s in self._taken_at if s not in offsets]:
            del self._taken_at[seg]
        self.settled_times = self._settled(self.segment_times)
        mine = ReaderReport(
            reader_time(self.settled_times),
            len(self.settled_times),
            reader_time(self.segment_times),
            len(self.segment_times),
            self.clocks.first_time() if self.peers else None,
        )
        self.registry.report(self.group, self.reader, mine.to_bytes())
        reports = {}
        for name, data in self.registry.reports(self.group).items():
            found = mine if name == self.reader else ReaderReport.from_bytes(data)
            if found is not None:
                reports[name] = found
        self.reports = reports

    def _settled(self, segment_times: Mapping[int, int | None]) -> dict[int, int | None]:
        """The times of the segments that settled (see the module docstring): held for
        the settling time, and caught up with the lead or held for the longest one."""
        now = self.monotonic()
        interval_s = self.config.rebalance_interval_ms / 1000
        # the lead: the other readers' reported times and this one's settled segments'
        times = [rep.time for r, rep in self.reports.items() if r != self.reader]
        times += [t for seg, t in segment_times.items() if seg not in self._taken_at]
        lead = max((t for t in times if t is not None), default=None)

        def settled(seg: int, t: int | None) -> bool:
            held_s = now - self._taken_at.get(seg, -math.inf)
            if held_s < SETTLE_INTERVALS * interval_s:
                return False
            caught_up = lead is None or (t is not None and lead - t <= self.config.lag_ms)
            if caught_up or held_s >= CATCH_UP_INTERVALS * interval_s:
                self._taken_at.pop(seg, None)  # settled for good
                return True
            return False

        return {seg: t for seg, t in segment_times.items() if settled(seg, t)}

    def plan(
        self, readers: Sequence[str], readable: Sequence[int], owners: Mapping[int, str]
    ) -> Plan:
        if self.config.balance != TIME:
            return plan_ownership(self.reader, readers, readable, owners)
        return plan_by_time(
            self.reader,
            readers,
            readable,
            owners,
            self.reports,
            self.settled_times,
            lag_ms=self.config.lag_ms,
        )

    def took(self, segments: Iterable[int]) -> None:
        """This reader took ``segments`` just now (they settle before they count)."""
        now = self.monotonic()
        for seg in segments:
            self._taken_at[seg] = now

    def to_pause(self) -> frozenset[int]:
        """Owned segments to hold back (alignment); empty when alignment is off."""
        if self.config.max_drift_ms is None:
            return frozenset()
        lower = group_lower(self.reports, self.clocks.first_time())
        for peer in self.peers:
            found = [ReaderReport.from_bytes(d) for d in self.registry.reports(peer).values()]
            peer_lower = group_lower({str(i): r for i, r in enumerate(found) if r is not None})
            if lower is not None and peer_lower is not None:
                lower = min(lower, peer_lower)
        return drifting(self.segment_times, lower, self.config.max_drift_ms)


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
