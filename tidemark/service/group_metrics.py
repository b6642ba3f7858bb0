"""``tidemark_reader_group_*``: every reader group's lag, as the time service scrapes it.

- ``tidemark_reader_group_time_lag_seconds{group,stream}`` -- wall clock minus the group's
  time (the lower bound of its time window at its committed position); absent while the
  group has no time yet;
- ``tidemark_reader_group_lag_records{group,stream}`` -- records between its committed
  offsets and the ends of its unfinished segments (as ``kafka-consumer-groups`` sums LAG).

A scrape computes them at most once per ``max_age_s`` (each group: a metadata read and a
``ListOffsets``); a group that cannot be read is logged and left out of that scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tidemark.controller.delta.location import Root
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.store import MetadataStore
from tidemark.errors import TidemarkError
from tidemark.pipelines.reading.group import open_group
from tidemark.pipelines.reading.lag import GroupLag, group_lag
from tidemark.pipelines.reading.registry import registry_for

log = logging.getLogger(__name__)


class GroupLagCollector(Collector):
    """Reader groups' lag from ``store``'s groups, cached for ``max_age_s``."""

    def __init__(
        self,
        store: MetadataStore,
        bootstrap_servers: str,
        lake: Root,
        *,
        max_age_s: float = 10.0,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.store = store
        self.bootstrap_servers = bootstrap_servers
        self.lake = lake
        self.max_age_s = max_age_s
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._lags: list[GroupLag] = []
        self._at = -float("inf")
        self._topics: StreamTopics | None = None

    def lags(self) -> list[GroupLag]:
        """Every group's lag (recomputed when older than ``max_age_s``)."""
        with self._lock:
            if time.monotonic() - self._at >= self.max_age_s:
                self._lags = self._compute()
                self._at = time.monotonic()
            return list(self._lags)

    def _compute(self) -> list[GroupLag]:
        if self._topics is None:
            self._topics = StreamTopics(self.bootstrap_servers)
        out = []
        for name in registry_for(self.store).names():
            try:
                with open_group(
                    name,
                    store=self.store,
                    bootstrap_servers=self.bootstrap_servers,
                    delta_root=self.lake,
                ) as group:
                    out.append(group_lag(group, self._topics))
            except TidemarkError as exc:  # deleted meanwhile, its stream gone, ...
                log.warning("reader group %s: no lag this scrape: %s", name, exc)
        return out

    def collect(self) -> Iterable[Any]:
        time_lag = GaugeMetricFamily(
            "tidemark_reader_group_time_lag_seconds",
            "Wall clock minus the reader group's time (its window's lower bound).",
            labels=["group", "stream"],
        )
        records = GaugeMetricFamily(
            "tidemark_reader_group_lag_records",
            "Records between the group's committed offsets and its segments' ends.",
            labels=["group", "stream"],
        )
        try:
            lags = self.lags()
        except Exception as exc:  # a scrape never fails on a service being away
            log.warning("reader groups' lag unavailable: %s", exc)
            lags = []
        now = self._clock_ms()
        for lag in lags:
            records.add_metric([lag.group, lag.stream], lag.records)
            behind = lag.time_lag_ms(now)
            if behind is not None:
                time_lag.add_metric([lag.group, lag.stream], behind / 1000)
        yield time_lag
        yield records


__all__ = ["GroupLagCollector"]
