"""Typed, frozen settings of timelines, consumers, the ingester and the relay.

    TimelineConfig("reminders", buckets=16, max_body_bytes=65_536)
    ConsumerConfig("worker-1", lease_ms=30_000, batch_size=100)

Each checks its values when built and raises
:class:`tidemark.errors.ConfigurationError` naming the setting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tidemark.pipelines.timeline.exceptions import ConfigurationError
from tidemark.pipelines.timeline.model import MAX_LEASE_MS, MAX_NAME_CHARS

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
    kafka_timeout_ms: int = 10_000
    """How long the brokers are waited for before Kafka is reported unavailable."""

    def __post_init__(self) -> None:
        _name("topic", self.topic)
        _name("group_id", self.group_id)
        _positive("batch_size", self.batch_size, 100_000)
        _positive("poll_timeout_ms", self.poll_timeout_ms)
        _positive("kafka_timeout_ms", self.kafka_timeout_ms)


DELIVERIES = ("acked", "transactional")
"""A relay's deliveries (:class:`RelayConfig`), the default first."""


@dataclass(frozen=True)
class RelayConfig:
    """Producing due messages to ``target_topic``, then deleting them."""

    target_topic: str
    flush_timeout_ms: int = 10_000
    """How long Kafka has to answer; for acknowledged delivery also the relay's lease."""
    delivery: str = "acked"
    """``acked``: a batch is delivered once Kafka acknowledged its records;
    ``transactional``: one Kafka transaction a batch (:mod:`.relay`)."""

    def __post_init__(self) -> None:
        _name("target_topic", self.target_topic)
        if self.delivery not in DELIVERIES:
            raise ConfigurationError(
                f"delivery {self.delivery!r} is not a relay's delivery: 'acked' or 'transactional'"
            )
        if not _TOPIC.match(self.target_topic) or self.target_topic in (".", ".."):
            raise ConfigurationError(
                f"target_topic {self.target_topic!r} is not a Kafka topic name: "
                "1-249 of [A-Za-z0-9._-], not '.' or '..'"
            )
        _positive("flush_timeout_ms", self.flush_timeout_ms)


@dataclass(frozen=True)
class DueRule:
    """When a buffered record falls due: exactly one of

    - ``delay_ms``: that long after it is stored (the database's now() + delay);
    - ``at_header``: at the time (UTC ms, decimal ASCII) in this header of the record;
    - ``until_stream_time``: once this stream's watermark reaches the record's timestamp.
    """

    delay_ms: int | None = None
    at_header: str | None = None
    until_stream_time: str | None = None

    def __post_init__(self) -> None:
        given = [
            name
            for name in ("delay_ms", "at_header", "until_stream_time")
            if getattr(self, name) is not None
        ]
        if len(given) != 1:
            raise ConfigurationError(
                "a buffer needs exactly one of delay, at-header and until-stream-time, "
                f"got {given or 'none'}"
            )
        if self.delay_ms is not None and (
            isinstance(self.delay_ms, bool)
            or not isinstance(self.delay_ms, int)
            or self.delay_ms < 0
        ):
            raise ConfigurationError(f"delay_ms must be an integer >= 0, got {self.delay_ms!r}")
        if self.at_header is not None:
            _name("at_header", self.at_header)
        if self.until_stream_time is not None:
            _name("until_stream_time", self.until_stream_time)


def _topic(name: str, value: str) -> None:
    _name(name, value)
    if not _TOPIC.match(value) or value in (".", ".."):
        raise ConfigurationError(
            f"{name} {value!r} is not a Kafka topic name: 1-249 of [A-Za-z0-9._-], not '.' or '..'"
        )


@dataclass(frozen=True)
class BufferConfig:
    """A time buffer between two topics (:mod:`tidemark.pipelines.timeline.buffer`).

    ``timeline`` defaults to ``buffer.<source>.<target>``; ``consumer_id``
    names the relay (and its Kafka transactional id): run one process per id.
    """

    source_topic: str
    target_topic: str
    due: DueRule
    timeline: str = ""
    consumer_id: str = "buffer"
    batch_size: int = 1_000
    lease_ms: int = 60_000
    flush_timeout_ms: int = 10_000
    buckets: int = 16
    partitions_refresh_ms: int = 10_000
    """How often the ingest looks for new source partitions (and reads them from
    their start)."""

    def __post_init__(self) -> None:
        _topic("source topic", self.source_topic)
        _topic("target topic", self.target_topic)
        if self.source_topic == self.target_topic:
            raise ConfigurationError(
                f"source and target are both {self.source_topic!r}: a buffer would feed itself"
            )
        if not self.timeline:
            object.__setattr__(
                self, "timeline", f"buffer.{self.source_topic}.{self.target_topic}"[:MAX_NAME_CHARS]
            )
        _name("timeline", self.timeline)
        _name("consumer_id", self.consumer_id)
        _positive("batch_size", self.batch_size, 10_000)
        _positive("lease_ms", self.lease_ms, MAX_LEASE_MS)
        _positive("flush_timeout_ms", self.flush_timeout_ms)
        _positive("buckets", self.buckets, 4096)
        _positive("partitions_refresh_ms", self.partitions_refresh_ms)
        if self.lease_ms <= self.flush_timeout_ms:
            raise ConfigurationError(
                f"lease_ms ({self.lease_ms}) must exceed flush_timeout_ms "
                f"({self.flush_timeout_ms}), or leases lapse while the relay waits for acks"
            )
