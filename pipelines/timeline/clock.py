"""When a message is due: the database's clock, or a pluggable horizon.

    store = TimelineStore(dsn)                          # due when ts <= now()
    store = TimelineStore(dsn, due=FixedHorizon(t))     # due when ts <= t

    store = TimelineStore(dsn, due=WatermarkHorizon("shop/orders", clock))
    consumer = TimelineConsumer(dsn, "reports", config, stream_clock=clock)

By default every condition uses the database's ``now()`` (one clock for all
clients, whatever their own clocks say). A :class:`DueCondition` may instead
give an explicit **horizon** for messages that are not leased:
:class:`FixedHorizon` (a given time) or :class:`WatermarkHorizon` (the latest
watermark time of one stream: the whole timeline runs on that stream's event
time). Leases always end on the database's clock: a leased message's ``ts``
is the end of its lease, so a lapsed lease is compared with ``now()``
whatever the horizon.

Event-time messages (``put(..., due_at_stream_time=(stream, t))``) carry their
own stream: they are due once the store's ``timeline_stream_times`` says the
stream reached ``t``. A consumer given a :class:`StreamClock` feeds that
table from the watermarks (``tidemark.pipelines.reading.stream_time.LatestStreamTimes``
reads them from the controller's ``marks`` table; the timeline does not
import the reading side, any object with ``stream_time_ms`` will do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# The database's now() in integer milliseconds (PostgreSQL and CockroachDB).
NOW_MS = "floor(extract(epoch FROM now()) * 1000)::BIGINT"


class DueCondition(Protocol):
    def horizon_ms(self) -> int | None:
        """The time up to which unleased messages are due; None = the database's now()."""
        ...


@dataclass(frozen=True)
class DatabaseClock:
    """Due when the timestamp is at or before the database's ``now()``."""

    def horizon_ms(self) -> int | None:
        return None


@dataclass(frozen=True)
class FixedHorizon:
    """Due when the timestamp is at or before ``time_ms`` (an event time, a watermark)."""

    time_ms: int

    def horizon_ms(self) -> int | None:
        return self.time_ms


class StreamClock(Protocol):
    def stream_time_ms(self, stream: str) -> int | None:
        """The latest watermark time of ``stream`` (None: no watermark yet)."""
        ...


@dataclass(frozen=True)
class WatermarkHorizon:
    """Due when the timestamp is at or before ``stream``'s latest watermark time
    (nothing is due before its first watermark)."""

    stream: str
    clock: StreamClock

    def horizon_ms(self) -> int | None:
        found = self.clock.stream_time_ms(self.stream)
        return -1 if found is None else found


@dataclass(frozen=True)
class ClockDrift:
    """The database's clock minus this client's (ms), measured over one round trip.

    ``drift_ms`` > 0: the database is ahead. Error bound: ``rtt_ms / 2``.
    All conditions use the database's clock, so drift is reported, not corrected.
    """

    drift_ms: float
    rtt_ms: float
