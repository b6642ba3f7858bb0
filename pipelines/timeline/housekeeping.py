"""Timeline housekeeping: deleted messages purged in batches, on a schedule.

    loop = PurgeLoop(store, interval_ms=60_000, keep_deleted_ms=3_600_000)
    loop.run_once()           # purge now: how many rows were removed
    handle = loop.start()     # every interval_ms in a daemon thread
    handle.stop()

A deleted message stays as a row (``deleted_at_ms``) so that a replayed
create of its id (ingest, retries) is recognised as a duplicate; after
``keep_deleted_ms`` it is purged, ``batch_size`` rows per statement
(:meth:`TimelineStore.purge`), so a large backlog never holds long locks.
The CLI verb is ``tidemark timeline purge`` (once, or ``--every-ms``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tidemark.controller.periodic import Periodic
from tidemark.errors import ConfigurationError
from tidemark.pipelines.timeline.metrics import PURGED
from tidemark.pipelines.timeline.store import TimelineStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PurgeSettings:
    interval_ms: int = 60_000
    keep_deleted_ms: int = 3_600_000
    batch_size: int = 1_000

    def __post_init__(self) -> None:
        for name in ("interval_ms", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"purge {name} must be >= 1, got {getattr(self, name)}")
        if self.keep_deleted_ms < 0:
            raise ConfigurationError(
                f"purge keep_deleted_ms must be >= 0, got {self.keep_deleted_ms}"
            )


class PurgeLoop:
    """Calls ``store.purge`` every ``interval_ms``; ``purged`` counts the rows removed."""

    def __init__(self, store: TimelineStore, settings: PurgeSettings | None = None) -> None:
        self.store = store
        self.settings = settings or PurgeSettings()
        self.purged = 0
        self.passes = 0
        self.periodic = Periodic(
            "tidemark-timeline-purge", self.run_once, self.settings.interval_ms
        )

    def run_once(self) -> int:
        removed = self.store.purge(self.settings.keep_deleted_ms, self.settings.batch_size)
        self.purged += removed
        PURGED.inc(removed)
        self.passes += 1
        if removed:
            log.info("timeline purge: %d deleted messages removed", removed)
        return removed

    def start(self) -> Periodic:
        return self.periodic.start()

    def stop(self) -> None:
        self.periodic.stop()


__all__ = ["PurgeLoop", "PurgeSettings"]
