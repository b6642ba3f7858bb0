"""A stream's configuration: scaling, retention, timestamping.

    >>> cfg = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3), uncapped=True)
    >>> StreamConfiguration.from_dict(cfg.to_dict()) == cfg
    True
    >>> topic_configs(StreamConfiguration(timestamping=TimestampingMode.ARRIVAL))
    {'message.timestamp.type': 'LogAppendTime', 'message.timestamp.after.max.ms': None}

Pure: frozen dataclasses, no I/O. Retention is applied by the policy loop
(``tidemark.controller.policy_loop``, decisions in ``tidemark.controller.policies``) through
truncation (so the truncation record stays the truth), never by Kafka's own
``retention.ms``. The scaling policy's ``min_segments`` is the number of
segments a stream starts with and the floor of automatic merges; the same
loop scales by rate through ``StreamManager.scale``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from tidemark.controller.admission import DEFAULT_MAX_FUTURE_MS
from tidemark.controller.exceptions import InvalidConfigurationError

KAFKA_DEFAULT = None
"""In :func:`topic_configs`: leave (or reset) the setting at the broker's default."""

MAX_SEGMENTS = 1_000
"""The most segments a stream may start with: each is a Kafka partition, and a stream's
epochs live in one ZooKeeper record (at most 1 MB)."""

UNCAPPED_AFTER_MAX_MS = str(2**63 - 1)
"""``message.timestamp.after.max.ms`` of an uncapped stream: Kafka's Long.MAX_VALUE."""


_E = TypeVar("_E", bound=StrEnum)


class TimestampingMode(StrEnum):
    """Where a record's timestamp comes from (S2's modes)."""

    CLIENT_PREFER = "client-prefer"
    """The writer's timestamp when it gives one, else the arrival time."""
    CLIENT_REQUIRE = "client-require"
    """Every record must carry the writer's timestamp."""
    ARRIVAL = "arrival"
    """The broker's append time (topic ``message.timestamp.type=LogAppendTime``)."""


class ScalingType(StrEnum):
    FIXED = "fixed"
    BY_EVENT_RATE = "by-event-rate"
    BY_BYTE_RATE = "by-byte-rate"


class RetentionType(StrEnum):
    NONE = "none"
    BY_TIME = "by-time"
    BY_SIZE = "by-size"


def _choice(enum: type[_E], value: Any, what: str) -> _E:
    try:
        return enum(value)
    except ValueError:
        valid = ", ".join(e.value for e in enum)
        raise InvalidConfigurationError(f"{what} {value!r} is not one of: {valid}") from None


@dataclass(frozen=True)
class ScalingPolicy:
    """Fixed N segments, or scale by event rate / byte rate (per segment, per second)."""

    type: ScalingType = ScalingType.FIXED
    target_rate: int = 0
    scale_factor: int = 1
    min_segments: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", _choice(ScalingType, self.type, "scaling type"))
        if self.min_segments < 1:
            raise InvalidConfigurationError(f"min_segments must be >= 1, got {self.min_segments}")
        if self.min_segments > MAX_SEGMENTS:
            raise InvalidConfigurationError(
                f"min_segments must be <= {MAX_SEGMENTS}, got {self.min_segments}"
            )
        if self.type is not ScalingType.FIXED:
            if self.target_rate < 1:
                raise InvalidConfigurationError(
                    f"target_rate of a {self.type} policy must be >= 1, got {self.target_rate}"
                )
            if self.scale_factor < 2:
                raise InvalidConfigurationError(
                    f"scale_factor of a {self.type} policy must be >= 2, got {self.scale_factor}"
                )

    @classmethod
    def fixed(cls, segments: int) -> ScalingPolicy:
        return cls(ScalingType.FIXED, min_segments=segments)

    @classmethod
    def by_event_rate(
        cls, events_per_s: int, scale_factor: int, min_segments: int
    ) -> ScalingPolicy:
        return cls(ScalingType.BY_EVENT_RATE, events_per_s, scale_factor, min_segments)

    @classmethod
    def by_byte_rate(cls, bytes_per_s: int, scale_factor: int, min_segments: int) -> ScalingPolicy:
        return cls(ScalingType.BY_BYTE_RATE, bytes_per_s, scale_factor, min_segments)


@dataclass(frozen=True)
class RetentionPolicy:
    """Keep everything, or truncate what is older than ``limit`` ms / beyond ``limit`` bytes.

    ``limit`` is Pravega's maximum (keep at most), ``min_limit`` its minimum
    (keep at least; 0: no floor beyond ``limit`` itself). The policy acts
    once the stream holds more than ``limit`` and truncates down to
    ``min_limit`` when one is given (fewer, larger truncations), else just
    enough to be back within ``limit``.
    """

    type: RetentionType = RetentionType.NONE
    limit: int = 0
    min_limit: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", _choice(RetentionType, self.type, "retention type"))
        if self.type is RetentionType.NONE and (self.limit != 0 or self.min_limit != 0):
            raise InvalidConfigurationError(
                f"retention 'none' takes no limit, got {self.limit} (min {self.min_limit})"
            )
        if self.type is not RetentionType.NONE and self.limit < 1:
            raise InvalidConfigurationError(
                f"limit of a {self.type} retention must be >= 1, got {self.limit}"
            )
        if not 0 <= self.min_limit <= self.limit:
            raise InvalidConfigurationError(
                f"min_limit of a {self.type} retention must be in [0, limit={self.limit}], "
                f"got {self.min_limit}"
            )

    @classmethod
    def none(cls) -> RetentionPolicy:
        return cls()

    @classmethod
    def by_time(cls, ms: int, min_ms: int = 0) -> RetentionPolicy:
        return cls(RetentionType.BY_TIME, ms, min_ms)

    @classmethod
    def by_size(cls, size_bytes: int, min_bytes: int = 0) -> RetentionPolicy:
        return cls(RetentionType.BY_SIZE, size_bytes, min_bytes)


@dataclass(frozen=True)
class StreamConfiguration:
    """Everything a stream is configured with; see the module docstring."""

    scaling_policy: ScalingPolicy = field(default_factory=ScalingPolicy)
    retention_policy: RetentionPolicy = field(default_factory=RetentionPolicy)
    timestamp_aggregation_timeout_ms: int | None = None
    """How long the controller waits for a lagging writer before it drops it from
    the stream's watermarks (0: at once); ``None``: the controller's default."""
    timestamping: TimestampingMode = TimestampingMode.CLIENT_PREFER
    uncapped: bool = False
    first_watermark_delay_ms: int = 0
    """Pravega's start-up delay: the stream's first watermark waits this long after
    its first writer mark, so writers that start a little later are not excluded."""
    refuse_adjustments: bool = False
    """S2's opt-out: refuse a record whose client timestamp would be adjusted (capped to
    the arrival time, or raised to the segment's previous timestamp) instead of adjusting it."""
    max_future_ms: int | None = DEFAULT_MAX_FUTURE_MS
    """How far ahead of its arrival (the marks topic's broker time) a writer mark's
    time may be; a mark further ahead is rejected (``future_time``). ``None``: no
    bound, for applications whose times are not milliseconds."""
    writers: tuple[str, ...] | None = None
    """The writer ids whose marks the stream accepts; ``None``: any. A mark under
    another id is rejected (``unknown_writer``), so a stray or hostile writer id
    can neither hold the stream's watermark nor move it."""

    def __post_init__(self) -> None:
        if self.writers is not None:
            if isinstance(self.writers, str) or not all(
                isinstance(w, str) and w for w in self.writers
            ):
                raise InvalidConfigurationError(
                    f"writers must be a list of non-empty writer ids or None, got {self.writers!r}"
                )
            object.__setattr__(self, "writers", tuple(sorted(set(self.writers))))
        object.__setattr__(
            self, "timestamping", _choice(TimestampingMode, self.timestamping, "timestamping")
        )
        if self.refuse_adjustments and self.timestamping is TimestampingMode.ARRIVAL:
            raise InvalidConfigurationError(
                "refuse_adjustments needs client timestamps (client-prefer or client-require); "
                "arrival timestamping ignores them"
            )
        if self.max_future_ms is not None and (
            type(self.max_future_ms) is not int or not 0 <= self.max_future_ms < 2**63
        ):
            raise InvalidConfigurationError(
                f"max_future_ms must be an integer in [0, 2^63) or None, got {self.max_future_ms!r}"
            )
        timeout = self.timestamp_aggregation_timeout_ms
        if timeout is not None and timeout < 0:
            raise InvalidConfigurationError(
                f"timestamp_aggregation_timeout_ms must be >= 0, got {timeout}"
            )
        if self.first_watermark_delay_ms < 0:
            raise InvalidConfigurationError(
                f"first_watermark_delay_ms must be >= 0, got {self.first_watermark_delay_ms}"
            )

    @property
    def initial_segments(self) -> int:
        return self.scaling_policy.min_segments

    def to_dict(self) -> dict[str, Any]:
        return {
            "scaling_policy": {
                "type": self.scaling_policy.type.value,
                "target_rate": self.scaling_policy.target_rate,
                "scale_factor": self.scaling_policy.scale_factor,
                "min_segments": self.scaling_policy.min_segments,
            },
            "retention_policy": {
                "type": self.retention_policy.type.value,
                "limit": self.retention_policy.limit,
                "min_limit": self.retention_policy.min_limit,
            },
            "timestamp_aggregation_timeout_ms": self.timestamp_aggregation_timeout_ms,
            "timestamping": self.timestamping.value,
            "uncapped": self.uncapped,
            "first_watermark_delay_ms": self.first_watermark_delay_ms,
            "refuse_adjustments": self.refuse_adjustments,
            "max_future_ms": self.max_future_ms,
            "writers": None if self.writers is None else list(self.writers),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StreamConfiguration:
        """The inverse of :meth:`to_dict`; unknown keys are refused, naming the valid ones."""
        _known(raw, _CONFIG_KEYS, "stream configuration")
        scaling = raw.get("scaling_policy", {})
        retention = raw.get("retention_policy", {})
        _known(scaling, _SCALING_KEYS, "scaling_policy")
        _known(retention, _RETENTION_KEYS, "retention_policy")
        try:
            return cls(
                scaling_policy=ScalingPolicy(**scaling),
                retention_policy=RetentionPolicy(**retention),
                timestamp_aggregation_timeout_ms=_optional_int(
                    raw.get("timestamp_aggregation_timeout_ms")
                ),
                timestamping=raw.get("timestamping", TimestampingMode.CLIENT_PREFER),
                uncapped=bool(raw.get("uncapped", False)),
                first_watermark_delay_ms=int(raw.get("first_watermark_delay_ms", 0)),
                refuse_adjustments=bool(raw.get("refuse_adjustments", False)),
                max_future_ms=raw.get("max_future_ms", DEFAULT_MAX_FUTURE_MS),
                writers=None if raw.get("writers") is None else tuple(raw["writers"]),
            )
        except TypeError as exc:
            raise InvalidConfigurationError(f"bad stream configuration {dict(raw)!r}") from exc


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


_CONFIG_KEYS = frozenset(StreamConfiguration().to_dict())
_SCALING_KEYS = frozenset(("type", "target_rate", "scale_factor", "min_segments"))
_RETENTION_KEYS = frozenset(("type", "limit", "min_limit"))


def _known(raw: Mapping[str, Any], valid: frozenset[str], what: str) -> None:
    unknown = sorted(set(raw) - valid)
    if unknown:
        raise InvalidConfigurationError(
            f"unknown {what} keys {unknown}; valid keys: {', '.join(sorted(valid))}"
        )


def topic_configs(config: StreamConfiguration) -> dict[str, str | None]:
    """Kafka topic settings that carry ``config``; ``None`` = the broker's default.

    ``arrival`` streams stamp records with the broker's clock (LogAppendTime).
    An ``uncapped`` stream accepts client timestamps arbitrarily far in the
    future: Kafka 4 otherwise rejects one more than an hour ahead (KIP-1030).
    Kafka's own retention is off: records carry event times, which may be
    old, and tidemark's retention is truncation at a stream cut, so the
    truncation record stays the one truth of where a stream starts.
    """
    return {
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "message.timestamp.type": (
            "LogAppendTime" if config.timestamping is TimestampingMode.ARRIVAL else "CreateTime"
        ),
        "message.timestamp.after.max.ms": UNCAPPED_AFTER_MAX_MS if config.uncapped else None,
    }


__all__ = [
    "MAX_SEGMENTS",
    "RetentionPolicy",
    "RetentionType",
    "ScalingPolicy",
    "ScalingType",
    "StreamConfiguration",
    "TimestampingMode",
    "topic_configs",
]
