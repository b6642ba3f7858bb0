"""Kafka-fronted timeline against real Kafka and PostgreSQL: ingest by id, relay exactly once."""

from __future__ import annotations

import contextlib
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidemark.pipelines.timeline.config import (
    ConsumerConfig,
    IngestConfig,
    RelayConfig,
    TimelineConfig,
)
from tidemark.pipelines.timeline.ingest import TimelineIngester
from tidemark.pipelines.timeline.producer import KafkaTimelineProducer
from tidemark.pipelines.timeline.relay import (
    TimelineRelay,
    TransactionalTimelineRelay,
    timeline_relay,
)
from tidemark.pipelines.timeline.store import NewMessage, TimelineStore


def _topics(bootstrap, *names, partitions=2):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for future in futures.values():
        future.result(30)


def _read_all(bootstrap, topic, expect, timeout_s=20.0):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expect and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    # Linger briefly: anything beyond ``expect`` would be a duplicate.
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            got.append(msg)
    consumer.close()
    return got


def _relay(postgres, kafka, tl, target, consumer, expect, timeout_s=20.0):
    """Relay until ``expect`` messages went (or ``timeout_s`` passed); how many went."""
    relay = TimelineRelay(
        postgres, kafka, tl, RelayConfig(target, flush_timeout_ms=10_000), consumer
    )
    relayed = 0
    deadline = time.monotonic() + timeout_s
    while relayed < expect and time.monotonic() < deadline:
        relayed += relay.run_once(timeout_ms=200)
    relay.close()
    return relayed


@pytest.fixture
def tl(postgres, unique):
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(f"kt-{unique}", buckets=4, max_body_bytes=100))
    return f"kt-{unique}"


def test_ingest_is_idempotent_by_id_and_refusals_go_to_dead_letters(postgres, kafka, tl, unique):
    source, dead = f"tl-in-{unique}", f"tl-dead-{unique}"
    _topics(kafka, source, dead)
    with KafkaTimelineProducer(kafka, source, tl, "app") as producer:
        for i in range(20):
            producer.put(f"m{i}".encode(), timestamp_ms=10_000 + i, id=f"id-{i}")
        # Replays: the same id and body again (a producer retry, a re-published batch).
        for i in range(5):
            producer.put(f"m{i}".encode(), timestamp_ms=10_000 + i, id=f"id-{i}")
        producer.put(b"changed", timestamp_ms=1, id="id-0")  # id reused, other body
        producer.put(b"x" * 101, timestamp_ms=1, id="too-big")
    raw = Producer({"bootstrap.servers": kafka})
    raw.produce(source, value=b"not avro", key=b"junk")
    raw.flush(10)

    ingester = TimelineIngester(
        postgres, kafka, IngestConfig(source, f"ingest-{unique}"), dead_letter_topic=dead
    )
    totals = [0, 0, 0, 0]
    deadline = time.monotonic() + 30
    while totals[0] < 28 and time.monotonic() < deadline:
        stats = ingester.run_once(timeout_ms=500)
        totals = [
            a + b
            for a, b in zip(
                totals, (stats.read, stats.created, stats.repeated, stats.rejected), strict=True
            )
        ]
    ingester.close()
    assert totals == [28, 20, 5, 3]
    with TimelineStore(postgres) as store:
        assert store.count(tl).total == 20
        assert store.get(tl, "id-0").body == b"m0"
    reasons = [dict(m.headers())["tidemark-reason"].decode() for m in _read_all(kafka, dead, 3)]
    kinds = sorted(r.split(":")[0].split(" ")[0] for r in reasons)
    assert kinds == ["[body-too-large]", "[duplicate-id]", "undecodable"], reasons

    # A second ingester in the same group replays nothing: offsets were committed.
    again = TimelineIngester(postgres, kafka, IngestConfig(source, f"ingest-{unique}"))
    assert again.run_once(timeout_ms=1_500).read == 0
    again.close()


def test_relay_produces_due_messages_once(postgres, kafka, tl, unique):
    target = f"tl-out-{unique}"
    _topics(kafka, target)
    with TimelineStore(postgres) as store:
        now = store.now_ms()
        store.create_many(
            tl,
            [NewMessage(f"due{i}".encode(), now - 10, "app", f"d{i}") for i in range(30)]
            + [NewMessage(b"later", now + 3_600_000, "app", "later")],
        )
    consumer = ConsumerConfig(f"relay-{unique}", lease_ms=20_000, batch_size=8)
    assert _relay(postgres, kafka, tl, target, consumer, 30) == 30
    out = _read_all(kafka, target, 30)
    assert sorted(m.key().decode() for m in out) == sorted(f"d{i}" for i in range(30))
    first = next(m for m in out if m.key() == b"d0")
    headers = dict(first.headers())
    assert first.value() == b"due0" and headers["tidemark-id"] == b"d0"
    assert int(headers["tidemark-timestamp"]) == now - 10
    with TimelineStore(postgres) as store:
        counts = store.count(tl)
        assert (counts.total, counts.waiting) == (1, 1)


@pytest.mark.parametrize("reached_kafka", [True, False])
def test_an_acknowledging_relay_dying_mid_batch_is_resumed_exactly_once(
    postgres, kafka, tl, unique, reached_kafka
):
    """Exactly once by acknowledgement: a batch taken, its record produced (or not) and
    the relay dead before it knew: the next relay waits out the lease, finds the record
    on the target and sends nothing, or finds none and sends it."""
    target = f"tl-ack-{unique}"
    _topics(kafka, target, partitions=2)
    with TimelineStore(postgres) as store:
        store.create(tl, b"once", timestamp_ms=0, producer_group="app", id="dup")
        store.create(tl, b"two", timestamp_ms=1, producer_group="app", id="dup2")
    relay_config = RelayConfig(target, flush_timeout_ms=2_000)
    relay = TimelineRelay(postgres, kafka, tl, relay_config, ConsumerConfig(f"relay-{unique}"))
    batch = relay._take(10)
    assert sorted(row[2] for row in batch.rows) == ["dup", "dup2"]
    if reached_kafka:
        relay._produce(batch.rows, [])
        assert relay._producer.flush(15) == 0  # on the broker, the relay not told...
    relay.close()  # ...and the relay dies
    second = TimelineRelay(postgres, kafka, tl, relay_config, ConsumerConfig(f"r2-{unique}"))
    assert second.relayed == (0 if reached_kafka else 2)  # sent at its start
    assert second.run_once(timeout_ms=300) == 0
    second.close()
    out = _read_all(kafka, target, 3, timeout_s=5.0)  # a third: one sent twice
    assert sorted(m.key() for m in out) == [b"dup", b"dup2"]
    with TimelineStore(postgres) as store:
        assert store.get(tl, "dup", include_deleted=True).deleted


def test_a_relay_dying_mid_batch_is_resumed_exactly_once(postgres, kafka, tl, unique):
    """Exactly once: a batch produced but not committed (the relay dies) is aborted by
    the next relay's start, which sends it again in a transaction of its own; a reader
    with read_committed sees it once."""
    target = f"tl-dup-{unique}"
    _topics(kafka, target, partitions=1)
    with TimelineStore(postgres) as store:
        store.create(tl, b"once", timestamp_ms=0, producer_group="app", id="dup")
    config = ConsumerConfig(f"relay-{unique}")
    relay_config = RelayConfig(target, flush_timeout_ms=15_000, delivery="transactional")
    relay = TransactionalTimelineRelay(postgres, kafka, tl, relay_config, config)
    batch = relay._take(10)
    assert [row[2] for row in batch.rows] == ["dup"]
    with TimelineStore(postgres) as store:
        assert store.get(tl, "dup") is None  # taken: the owner can no longer act on it
    relay._producer.begin_transaction()
    relay._produce(batch.rows, [])
    assert relay._producer.flush(15) == 0  # on the broker, not committed...
    relay.close()  # ...and the relay dies
    again = ConsumerConfig(f"relay2-{unique}")
    second = TransactionalTimelineRelay(postgres, kafka, tl, relay_config, again)
    assert second.run_once(timeout_ms=5_000) == 1
    assert second.run_once(timeout_ms=300) == 0
    second.close()
    out = _read_all(kafka, target, 2)
    assert [m.key() for m in out] == [b"dup"]
    with TimelineStore(postgres) as store:
        assert store.count(tl).total == 0
        assert store.get(tl, "dup", include_deleted=True).deleted


def test_a_message_the_target_refuses_waits_lease_ms_and_others_go(postgres, kafka, unique):
    """The broker refuses a message (larger than the topic takes): it is moved
    ``lease_ms`` later, not sent again in a loop, and later messages go meanwhile;
    then it is due again."""
    target, timeline = f"tl-small-{unique}", f"kb-{unique}"
    admin = AdminClient({"bootstrap.servers": kafka})
    topic = NewTopic(target, 1, 1, config={"max.message.bytes": "1024"})
    admin.create_topics([topic])[target].result(30)
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(timeline, buckets=2, max_body_bytes=10_000))
        store.create(timeline, b"x" * 4_000, timestamp_ms=0, producer_group="app", id="big")
    config = ConsumerConfig(f"relay-{unique}", lease_ms=2_000)
    with (
        TimelineRelay(
            postgres, kafka, timeline, RelayConfig(target, flush_timeout_ms=15_000), config
        ) as relay,
        TimelineStore(postgres) as store,
    ):
        assert relay.run_once(timeout_ms=2_000) == 0
        assert relay.failed == 1
        big = store.get(timeline, "big")
        assert big.timestamp_ms > store.now_ms() and not big.deleted  # moved later
        # (alone: a refused record takes the others of its produce request down with it)
        store.create_many(timeline, [NewMessage(b"ok", 0, "app", f"ok{i}") for i in range(3)])
        assert relay.run_once(timeout_ms=2_000) == 3  # the others go; "big" is not retried
        assert relay.failed == 1
        assert store.count(timeline).total == 1
        time.sleep(2.1)
        assert relay.run_once(timeout_ms=2_000) == 0  # due again: refused again
        assert relay.failed == 2
    assert sorted(m.key() for m in _read_all(kafka, target, 3)) == [b"ok0", b"ok1", b"ok2"]


def test_the_relay_delivers_a_messages_own_headers_byte_identical(postgres, kafka, tl, unique):
    """Headers given to either producer (through Kafka and the ingester, or straight to
    the store) come out of the relay as given, before the relay's own."""
    from tidemark.pipelines.timeline.exceptions import InvalidMessageError
    from tidemark.pipelines.timeline.producer import TimelineProducer

    source, target = f"th-in-{unique}", f"th-out-{unique}"
    _topics(kafka, source, target)
    given = [("trace-id", b"4bf92f35"), ("hop", b"a"), ("hop", b""), ("bin", b"\xff\x00\xc3")]
    with TimelineStore(postgres) as store:
        due = store.now_ms() - 10
    with KafkaTimelineProducer(kafka, source, tl, "app") as producer:
        producer.put(b"via-kafka", timestamp_ms=due, id="k1", headers=given)
        producer.put(b"none", timestamp_ms=due, id="k2")
        with pytest.raises(InvalidMessageError, match="'tidemark-id'"):
            producer.put(b"x", timestamp_ms=due, headers=[("tidemark-id", b"forged")])
    ingester = TimelineIngester(postgres, kafka, IngestConfig(source, f"ingest-{unique}"))
    deadline = time.monotonic() + 30
    stored = 0
    while stored < 2 and time.monotonic() < deadline:
        stored += ingester.run_once(timeout_ms=500).created
    ingester.close()
    with TimelineProducer(postgres, tl, "app") as direct:
        direct.put(b"direct", timestamp_ms=due, id="s1", headers=dict(given[:2]))
        with pytest.raises(InvalidMessageError, match=r"header 0 \('k'\): value must be bytes"):
            direct.put(b"x", timestamp_ms=due, headers=[("k", "text")])
    with TimelineStore(postgres) as store:
        assert store.get(tl, "k1").headers == tuple(given)
    assert _relay(postgres, kafka, tl, target, ConsumerConfig(f"relay-{unique}"), 3) == 3
    out = {m.key(): m.headers() for m in _read_all(kafka, target, 3)}
    own = {k: [h for h in v if not h[0].startswith("tidemark-")] for k, v in out.items()}
    assert own == {b"k1": given, b"k2": [], b"s1": given[:2]}
    assert [h[0] for h in out[b"k1"][len(given) :]] == [
        "tidemark-timeline",
        "tidemark-id",
        "tidemark-timestamp",
        "tidemark-producer-group",
    ]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("delivery", ["acked", "transactional"])
def test_a_broker_stopping_under_relay_and_ingest_is_kafka_unavailable(
    postgres, services_dir, unique, delivery
):
    """The broker stops under a running relay and ingester: each raises
    KafkaUnavailableError naming the bootstrap servers; the relay's rows stay (not
    taken, or owed by the batch that took them), and go once the broker is back."""
    from tidemark.controller.exceptions import KafkaUnavailableError
    from tidemark.infra.kafka import KafkaCluster

    tl, source, target = f"stop-{unique}", f"stop-in-{unique}", f"stop-out-{unique}"
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(tl, buckets=2))
    with KafkaCluster(services_dir / f"kafka-stop-{unique}", brokers=1) as cluster:
        bootstrap = cluster.bootstrap_servers
        _topics(bootstrap, source, target, partitions=1)
        relay = timeline_relay(
            postgres,
            bootstrap,
            tl,
            RelayConfig(target, flush_timeout_ms=2_000, delivery=delivery),
            ConsumerConfig(f"relay-{unique}"),
        )
        transactional = delivery == "transactional"
        config = IngestConfig(source, f"ingest-{unique}", kafka_timeout_ms=2_000)
        ingester = TimelineIngester(postgres, bootstrap, config)
        try:
            cluster.stop_node(1)
            with TimelineStore(postgres) as store:
                store.create_many(tl, [NewMessage(b"due", 0, "app", f"m{i}") for i in range(3)])
            with pytest.raises(KafkaUnavailableError) as raised:
                relay.run_once(timeout_ms=1_000)
            assert raised.value.address == bootstrap
            with TimelineStore(postgres) as store:
                # transactional: not taken, due again at once; acked: taken, owed
                assert store.count(tl).total == (3 if transactional else 0)
            # A new producer's fencing gets no answer: that producer stays, asked again
            # (a second one could get the older epoch and be fenced by the first's).
            for _ in range(2):
                with pytest.raises(KafkaUnavailableError):
                    relay.run_once(timeout_ms=200)
            waiting = relay._producer
            assert (waiting is not None) == transactional
            with pytest.raises(KafkaUnavailableError):
                relay.run_once(timeout_ms=200)
            assert relay._producer is waiting
            deadline = time.monotonic() + 60
            with pytest.raises(KafkaUnavailableError) as raised:
                while time.monotonic() < deadline:
                    ingester.run_once(timeout_ms=200)
            assert raised.value.address == bootstrap
            cluster.start_node(1)
            deadline = time.monotonic() + 60
            while relay.relayed < 3 and time.monotonic() < deadline:
                with contextlib.suppress(KafkaUnavailableError):  # the broker coming back
                    relay.run_once(timeout_ms=500)
            assert relay.relayed == 3
            if transactional:  # its fencing answered once the broker was back
                assert relay._producer is waiting
        finally:
            relay.close()
            ingester.close()
        got = _read_all(bootstrap, target, 4, timeout_s=5.0)  # a fourth: one sent twice
        assert sorted(m.key() for m in got) == [b"m0", b"m1", b"m2"]
    with TimelineStore(postgres) as store:
        assert store.count(tl).total == 0
