"""How readers of a group behave (``ReaderConfig``).

config = ReaderConfig(commit_interval_ms=500, window_refresh_interval_ms=0)
group = ReaderGroup.create("billing", "shop/orders", ..., config=config)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.controller.durations import check_durations_ms
from tidemark.controller.kafka.settings import checked_overrides
from tidemark.pipelines.reading.exceptions import ReaderConfigError

RESERVED_CONSUMER_KEYS = frozenset(
    {
        "bootstrap.servers",
        "group.id",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "isolation.level",
        "enable.partition.eof",
    }
)


@dataclass(frozen=True)
class ReaderConfig:
    """How readers of a group behave.

    - ``rebalance_interval_ms``: how often a reader looks again at the group
      (finished segments, successors now readable, readers joined or left).
    - ``metadata_interval_ms``: how often a reader reads the stream's metadata
      (epochs, sealed sizes) between rebalances. Keep it below the scales'
      ``seal_drain_ms`` (``tidemark.controller.streams``; default 200): a reader that
      has not seen a scale's new epoch for longer than the drain may return
      a record a slow writer landed past the sealed size, and its re-sent copy.
    - ``commit_interval_ms``: how often ``read_next`` commits the position of
      the events returned before it (``auto_commit``; else only
      ``commit()``, giving up a segment and ``close()`` commit).
    - ``window_refresh_interval_ms``: how stale the watermarks behind a time
      window may be (0: look at the marks table on every window).
    - ``kafka_timeout_ms``: how long a call to Kafka may take.
    - ``consumer_overrides``: further librdkafka settings (not the ones
      tidemark relies on, listed in ``RESERVED_CONSUMER_KEYS``).
    - ``balance``: how segments are shared among readers: ``"even"`` (a fair
      share each) or ``"time"`` (a reader more than ``lag_ms`` of event time
      behind the one furthest ahead hands segments to readers ahead;
      ``tidemark.pipelines.reading.balance``).
    - ``max_drift_ms``: alignment; a reader pauses its segments whose time
      runs more than this ahead of the group's lower bound (``None``: off).
    """

    rebalance_interval_ms: int = 200
    metadata_interval_ms: int = 100
    commit_interval_ms: int = 1_000
    auto_commit: bool = True
    window_refresh_interval_ms: int = 100
    kafka_timeout_ms: int = 10_000
    consumer_overrides: Mapping[str, Any] = field(default_factory=dict)
    balance: str = "even"
    lag_ms: int = 1_000
    max_drift_ms: int | None = None

    def __post_init__(self) -> None:
        if self.balance not in ("even", "time"):
            raise ReaderConfigError(f"balance must be 'even' or 'time', got {self.balance!r}")
        check_durations_ms(
            self,
            (
                "lag_ms",
                "rebalance_interval_ms",
                "metadata_interval_ms",
                "commit_interval_ms",
                "window_refresh_interval_ms",
            ),
            minimum=0,
            error=ReaderConfigError,
        )
        if self.max_drift_ms is not None and (
            type(self.max_drift_ms) is not int or self.max_drift_ms < 0
        ):
            raise ReaderConfigError(
                f"max_drift_ms must be None or an int >= 0 (ms), got {self.max_drift_ms!r}"
            )
        if type(self.kafka_timeout_ms) is not int or self.kafka_timeout_ms < 1:
            raise ReaderConfigError(
                f"kafka_timeout_ms must be an int >= 1, got {self.kafka_timeout_ms!r}"
            )
        overrides = checked_overrides(
            self.consumer_overrides,
            RESERVED_CONSUMER_KEYS,
            what="consumer_overrides",
            error=ReaderConfigError,
        )
        object.__setattr__(self, "consumer_overrides", overrides)


__all__ = ["RESERVED_CONSUMER_KEYS", "ReaderConfig"]
