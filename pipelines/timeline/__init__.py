"""The timeline: scheduled messages handed to consumers under leases once due.

    from tidemark.pipelines.timeline import TimelineStore, TimelineConfig, TimelineProducer

    with TimelineStore(dsn) as store:
        store.migrate()
        store.create_timeline(TimelineConfig("reminders"))
    with TimelineProducer(dsn, "reminders", "signup") as producer:
        producer.put(b"hello", delay_ms=60_000, id="hello-42")
    with TimelineConsumer(dsn, "reminders", ConsumerConfig("worker-1")) as consumer:
        for lease in consumer.poll(timeout_ms=90_000):
            consumer.ack([lease])

Stored in SQL on the PostgreSQL protocol: PostgreSQL locally, CockroachDB at
scale, with no code change (the SQL is their common subset; LISTEN/NOTIFY is
only a wake-up optimisation on PostgreSQL). Every condition is checked
atomically in the database with the database's clock.

Modules: :mod:`.model` (values, statuses, rules; no I/O), :mod:`.store` (the
SQL), :mod:`.migrations`, :mod:`.producer`, :mod:`.consumer`, :mod:`.ingest`
(Kafka topic → store), :mod:`.relay` (store → Kafka topic), :mod:`.wire`
(the Avro record on Kafka), :mod:`.clock` (due condition, drift),
:mod:`.config`, :mod:`.exceptions`.
"""

from tidemark.pipelines.timeline.clock import (
    ClockDrift,
    DatabaseClock,
    DueCondition,
    FixedHorizon,
    StreamClock,
    WatermarkHorizon,
)
from tidemark.pipelines.timeline.config import (
    ConsumerConfig,
    IngestConfig,
    RelayConfig,
    TimelineConfig,
)
from tidemark.pipelines.timeline.consumer import ConsumerMetrics, TimelineConsumer
from tidemark.pipelines.timeline.exceptions import TimelineError
from tidemark.pipelines.timeline.ingest import IngestStats, TimelineIngester
from tidemark.pipelines.timeline.model import Counts, Lease, Message, Status, new_id
from tidemark.pipelines.timeline.producer import KafkaTimelineProducer, TimelineProducer
from tidemark.pipelines.timeline.relay import TimelineRelay
from tidemark.pipelines.timeline.store import Created, NewMessage, TimelineStore
from tidemark.pipelines.timeline.wire import ScheduledMessage, decode_scheduled, encode_scheduled

__all__ = [
    "ClockDrift",
    "ConsumerConfig",
    "ConsumerMetrics",
    "Counts",
    "Created",
    "DatabaseClock",
    "DueCondition",
    "FixedHorizon",
    "IngestConfig",
    "IngestStats",
    "KafkaTimelineProducer",
    "Lease",
    "Message",
    "NewMessage",
    "RelayConfig",
    "ScheduledMessage",
    "Status",
    "StreamClock",
    "TimelineConfig",
    "TimelineConsumer",
    "TimelineError",
    "TimelineIngester",
    "TimelineProducer",
    "TimelineRelay",
    "TimelineStore",
    "WatermarkHorizon",
    "decode_scheduled",
    "encode_scheduled",
    "new_id",
]
