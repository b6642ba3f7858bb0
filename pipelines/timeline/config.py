"""Typed, frozen settings of timelines, consumers, the ingester and the relay.

    TimelineConfig("reminders", buckets=16, max_body_bytes=65_536)
    ConsumerConfig("worker-1", lease_ms=30_000, batch_size=100)

Each checks its values when built and raises
:class:`tidemark.errors.ConfigurationError` naming the setting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipelines.timeline.exceptions import ConfigurationError
from pipelines.timeline.model import MAX_LEASE_MS, MAX_NAME_CHARS

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _positive(name: str, value: int, upper: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    if upper is not None and value > upper:
        raise ConfigurationError(f"{name} must be at most {upper}, got {value!r}")


def _name(name: str, value: str) -> None:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise ConfigurationError(f"{name} must be 1..{MAX_NAME_CHARS} characters, got {value!r}")


@dataclass(frozen=True)
class TimelineConfig:
    """A timeline: ``buckets`` partition it among consumers; bodies are capped."""

    name: str
    buckets: int = 16
    max_body_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        _name("timeline name", self.name)
        _positive("buckets", self.buckets, 4096)
        _positive("max_body_bytes", self.max_body_bytes, 64 << 20)


@dataclass(frozen=True)
class ConsumerConfig:
    """A consumer: its id (stable across restarts to regain its leases) and pacing.

    ``max_idle_ms`` bounds a sleep when nothing is due: the fallback that
    catches messages created for an earlier time while asleep where no
    notification arrives (CockroachDB has no LISTEN/NOTIFY).
    """

    consumer_id: str
    lease_ms: int = 30_000
    batch_size: int = 100
    max_idle_ms: int = 1_000
    heartbeat_ms: int = 1_000
    member_ttl_ms: int = 5_000
    use_notify: bool = True

    def __post_init__(self) -> None:
        _name("consumer_id", self.consumer_id)
        _positive("lease_ms", self.lease_ms, MAX_LEASE_MS)
        _positive("batch_size", self.batch_size, 10_000)
        _positive("max_idle_ms", self.max_idle_ms)
        _positive("heartbeat_ms", self.heartbeat_ms)
        _positive("member_ttl_ms", self.member_ttl_ms)
        if self.member_ttl_ms <= self.heartbeat_ms:
            raise ConfigurationError(
                f"member_ttl_ms ({self.member_ttl_ms}) must exceed heartbeat_ms "
                f"({self.heartbeat_ms}), or healthy consumers would look dead"
            )


@dataclass(frozen=True)
class IngestConfig:
    """Reading scheduled messages from a Kafka topic into the store."""

    topic: str
    group_id: str
    batch_size: int = 500
    poll_timeout_ms: int = 200

    def __post_init__(self) -> None:
        _name("topic", self.topic)
        _name("group_id", self.group_id)
        _positive("batch_size", self.batch_size, 100_000)
        _positive("poll_timeout_ms", self.poll_timeout_ms)


@dataclass(frozen=True)
class RelayConfig:
    """Producing due messages to ``target_topic``, then deleting them."""

    target_topic: str
    flush_timeout_ms: int = 10_000

    def __post_init__(self) -> None:
        _name("target_topic", self.target_topic)
        if not _TOPIC.match(self.target_topic) or self.target_topic in (".", ".."):
            raise ConfigurationError(
                f"target_topic {self.target_topic!r} is not a Kafka topic name: "
                "1-249 of [A-Za-z0-9._-], not '.' or '..'"
            )
        _positive("flush_timeout_ms", self.flush_timeout_ms)
