"""When a message is due: the database's clock, or a pluggable horizon.

    store = TimelineStore(dsn)                          # due when ts <= now()
    store = TimelineStore(dsn, due=FixedHorizon(t))     # due when ts <= t

By default every condition uses the database's ``now()`` (one clock for all
clients, whatever their own clocks say). A :class:`DueCondition` may instead
give an explicit **horizon** for messages that are not leased: that is the
hook for event-time timers ("due when the stream's watermark passes the
message's timestamp"), where the horizon would be the latest watermark time
of a stream read from the controller's ``marks`` table. That source is not
written yet (the table does not exist); :class:`FixedHorizon` is the simple
implementation. Leases always end on the database's clock: a leased
message's ``ts`` is the end of its lease, so a lapsed lease is compared with
``now()`` whatever the horizon.
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


@dataclass(frozen=True)
class ClockDrift:
    """The database's clock minus this client's (ms), measured over one round trip.

    ``drift_ms`` > 0: the database is ahead. Error bound: ``rtt_ms / 2``.
    All conditions use the database's clock, so drift is reported, not corrected.
    """

    drift_ms: float
    rtt_ms: float
