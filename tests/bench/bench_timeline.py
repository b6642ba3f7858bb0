"""Timeline benchmark: due-to-delivered lag at 10 000 messages due per second, throughput.

    lines = run(dsn, bootstrap)      # bootstrap None: skip the Kafka relay figure

Figures:
- create throughput: one statement per message, and pipelined batches;
- due-to-delivered lag p50/p99/max: ``RATE`` messages per second fall due
  for ``SECONDS`` s (timestamps spread evenly), two consumers (the machine's
  cores) lease, hand over and delete them; lag = the delivery moment on this
  client's clock corrected by the measured drift, minus the due time
  (goal p99 < 100 ms; Pulsar's delayed delivery ticks once a second);
- lease throughput: one consumer leasing a backlog of its own (a timeline each) in batches
  of 100 and 1 000, never acking (each scan steps over the leases taken before it);
- relay throughput to Kafka (when ``bootstrap`` is given), batches of 1 000 read past
  the relay's cursor, one Kafka transaction a batch, after its first ``run_once``
  (the producer's start-up: its transactional id, ~0.5 s on a fresh broker), beside
  a bare idempotent produce of the same records measured the same way;
- relay due-to-delivered lag at 10 000 and 50 000 messages due per second:
  delivered = the moment the batch's transaction committed (the relay's
  ``lags``, on the database's clock), and the broker's append time (the target
  topic stamps ``LogAppendTime``; due = the ``tidemark-timestamp`` header);
- the time buffer (``tidemark timeline ingest``): ingest and transactional
  relay rates beside a bare Kafka produce of the same records, and the
  create rate beside a bare ``INSERT ... VALUES`` batch, in the same run.

Everything runs in a timeline of its own, removed at the end.
"""

from __future__ import annotations

import threading
import time
import uuid

from tidemark.pipelines.timeline.config import ConsumerConfig, RelayConfig, TimelineConfig
from tidemark.pipelines.timeline.consumer import TimelineConsumer, percentile
from tidemark.pipelines.timeline.store import NewMessage, TimelineStore

RATE = 10_000
SECONDS = 3
CONSUMERS = 2
BATCH = 1_000
LEASE_LIMITS = (100, BATCH)


def _fill(store: TimelineStore, timeline: str, stamps: list[int], prefix: str) -> float:
    """Create one message per timestamp in pipelined batches; returns messages/s."""
    started = time.perf_counter()
    for start in range(0, len(stamps), BATCH):
        chunk = stamps[start : start + BATCH]
        store.create_many(
            timeline,
            [
                NewMessage(b"x" * 64, ts, "bench", f"{prefix}{start + i}")
                for i, ts in enumerate(chunk)
            ],
        )
    return len(stamps) / (time.perf_counter() - started)


def _lag(dsn: str, timeline: str, store: TimelineStore) -> tuple[list[str], float]:
    total = RATE * SECONDS
    lead_ms = 8_000  # filling must finish before the first message falls due
    t0 = store.now_ms() + lead_ms
    stamps = [t0 + (i * 1_000) // RATE for i in range(total)]
    fill_rate = _fill(store, timeline, stamps, "lag-")
    slack = t0 - store.now_ms()
    lags: list[float] = []
    lock = threading.Lock()
    done = threading.Event()
    consumers = [
        TimelineConsumer(
            dsn,
            timeline,
            ConsumerConfig(f"bench-{i}", batch_size=500, heartbeat_ms=1_000, member_ttl_ms=5_000),
        )
        for i in range(CONSUMERS)
    ]
    time.sleep(0.2)  # let every consumer see the others, so buckets are split

    def consume(consumer: TimelineConsumer) -> None:
        drift = consumer.store.clock_drift().drift_ms
        while not done.is_set():
            leases = consumer.poll(timeout_ms=500)
            if not leases:
                continue
            at = time.time() * 1000 + drift
            with lock:
                lags.extend(at - lease.due_ms for lease in leases)
                if len(lags) >= total:
                    done.set()
            consumer.ack(leases)

    threads = [threading.Thread(target=consume, args=(c,)) for c in consumers]
    for thread in threads:
        thread.start()
    done.wait(lead_ms / 1000 + SECONDS + 30)
    done.set()
    for thread in threads:
        thread.join(10)
    for consumer in consumers:
        consumer.close()
    return [
        f"timeline create (batched {BATCH}, through COPY): {fill_rate:,.0f} msg/s"
        + ("" if slack > 0 else "  (filling overran the lead time: lag figures are inflated)"),
        f"timeline due-to-delivered lag at {RATE:,} msg/s due for {SECONDS} s, "
        f"{CONSUMERS} consumers: p50 {percentile(lags, 0.5):.1f} ms, "
        f"p99 {percentile(lags, 0.99):.1f} ms, max {max(lags, default=0.0):.1f} ms "
        f"({len(lags):,}/{total:,} delivered; goal p99 < 100 ms)",
    ], fill_rate


def _create_single(store: TimelineStore, timeline: str, n: int = 2_000) -> str:
    far = store.now_ms() + 86_400_000
    started = time.perf_counter()
    for i in range(n):
        store.create(timeline, b"x" * 64, timestamp_ms=far, producer_group="bench", id=f"one-{i}")
    rate = n / (time.perf_counter() - started)
    return f"timeline create (one statement each): {rate:,.0f} msg/s"


def _updates(store: TimelineStore) -> tuple[int, int]:
    """(updates, HOT updates) of the messages table so far (this session's flushed)."""
    with store._lock:
        conn = store._conn
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT 1")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relid = 'timeline_messages'::regclass"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _lease_throughput(
    store: TimelineStore, timeline: str, limit: int, n: int = 20_000
) -> tuple[str, float]:
    _fill(store, timeline, [0] * n, f"lease-{limit}-")
    leased = 0
    updates, hot = _updates(store)
    started = time.perf_counter()
    while batch := store.lease(timeline, f"bench-lease-{limit}", lease_ms=600_000, limit=limit):
        leased += len(batch)
    rate = leased / (time.perf_counter() - started)
    after_updates, after_hot = _updates(store)
    share = (after_hot - hot) / max(1, after_updates - updates)
    return (
        f"timeline lease (batches of {limit:,}, one consumer): {rate:,.0f} msg/s "
        f"({leased:,} leased; {share:.0%} of the updates HOT)"
    ), rate


RELAY_RECORDS = 100_000
"""The relay's and its baseline's records: a backlog the relay's batches grow to meet
(16 x the batch size after four batches), so the rate is the steady one."""


def _relay(
    dsn: str, bootstrap: str, store: TimelineStore, timeline: str, n: int = RELAY_RECORDS
) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"bench-relay-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    _fill(store, timeline, [0] * n, "relay-")
    relay_timeline = timeline
    from tidemark.pipelines.timeline.relay import TimelineRelay

    started = time.perf_counter()
    with TimelineRelay(
        dsn,
        bootstrap,
        relay_timeline,
        RelayConfig(topic),
        ConsumerConfig("bench-relay", batch_size=BATCH, lease_ms=60_000),
    ) as relay:
        # Start-up (the producer's idempotence id, the topic's metadata): its first
        # acknowledgement waits for them, ~0.5 s on a fresh broker. Not part of the rate.
        while relay.relayed == 0 and time.perf_counter() - started < 60:
            relay.run_once(timeout_ms=200)
        first, startup_s, steady = relay.relayed, time.perf_counter() - started, time.perf_counter()
        while relay.relayed < n and time.perf_counter() - started < 120:
            relay.run_once(timeout_ms=200)
        relayed = relay.relayed
    rate = (relayed - first) / (time.perf_counter() - steady)
    with_startup = relayed / (time.perf_counter() - started)
    bare, bare_startup_s = _bare_produce(bootstrap, topic, n)
    admin.delete_topics([topic])
    return (
        f"timeline relay to Kafka (batches of {BATCH:,} read past the cursor, delivered "
        f"once acknowledged; pipelined), after its first run_once: {rate:,.0f} msg/s "
        f"({relayed - first:,}; "
        f"with the start-up of {startup_s * 1000:,.0f} ms: {with_startup:,.0f} msg/s); "
        f"baseline bare Kafka produce of the same records (idempotent, acks=all), after a "
        f"first flushed record: {bare:,.0f} msg/s (its start-up {bare_startup_s * 1000:,.0f} ms)"
        f"; ratio {rate / bare:.2f}"
    )


RELAY_HEADERS: list[tuple[str, str | bytes | None]] = [
    (h, b"x" * 26) for h in ("timeline", "id", "timestamp", "group")
]
"""Headers the size of the relay's own four."""


def _bare_produce(
    bootstrap: str,
    topic: str,
    n: int,
    headers: list[tuple[str, str | bytes | None]] = RELAY_HEADERS,
    key: bytes = b"%026d",
) -> tuple[float, float]:
    """Baseline: ``n`` records like the relay's (64-byte body, by default four headers
    and 26-byte keys) produced and flushed by one idempotent producer with
    ``acks=all``; records/s, measured after a first record is acknowledged (the
    start-up, as for the relay), and that start-up (s)."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 2}
    )
    started = time.perf_counter()
    producer.produce(topic, key=b"first", value=b"x" * 64, headers=headers)
    producer.flush(60)
    startup_s = time.perf_counter() - started
    started = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, key=key % i, value=b"x" * 64, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return n / (time.perf_counter() - started), startup_s


def _relay_lag(
    dsn: str, bootstrap: str, store: TimelineStore, timeline: str, rate: int, create_rate: float
) -> str:
    """Due-to-delivered lag of one relay while ``rate`` messages a second fall due."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from tidemark.pipelines.timeline.relay import TimelineRelay

    topic = f"bench-relay-lag-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics(
        [NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})]
    )[topic].result(30)
    total = rate * SECONDS
    # Filling must finish before the first message falls due.
    lead_ms = 2_000 + int(total / max(create_rate, 1.0) * 1_500)
    t0 = store.now_ms() + lead_ms
    _fill(store, timeline, [t0 + (i * 1_000) // rate for i in range(total)], f"rl{rate}-")
    slack = t0 - store.now_ms()
    drift = store.clock_drift().drift_ms
    config = ConsumerConfig("bench-relay-lag", batch_size=BATCH, lease_ms=60_000)
    with TimelineRelay(dsn, bootstrap, timeline, RelayConfig(topic), config) as relay:
        deadline = time.perf_counter() + lead_ms / 1000 + SECONDS + 60
        while relay.relayed < total and time.perf_counter() < deadline:
            relay.run_once(timeout_ms=200)
        relayed = relay.relayed
        committed = list(relay.lags)
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    reader.subscribe([topic])
    lags: list[float] = []
    deadline = time.perf_counter() + 60
    while len(lags) < relayed and time.perf_counter() < deadline:
        for record in reader.consume(10_000, 1.0):
            if record.error() is not None:
                continue
            due = dict(record.headers() or [])["tidemark-timestamp"]
            assert isinstance(due, bytes)
            lags.append(record.timestamp()[1] + drift - int(due))
    reader.close()
    admin.delete_topics([topic])
    goal = 20 if rate <= 10_000 else 100
    return (
        f"timeline relay due-to-delivered at {rate:,} msg/s due for {SECONDS} s, one relay: "
        f"committed p50 {percentile(committed, 0.5):.1f} ms, "
        f"p99 {percentile(committed, 0.99):.1f} ms, max {max(committed, default=0.0):.1f} ms; "
        f"broker append p50 {percentile(lags, 0.5):.1f} ms, p99 {percentile(lags, 0.99):.1f} ms, "
        f"max {max(lags, default=0.0):.1f} ms ({relayed:,}/{total:,} relayed; "
        f"goal p99 < {goal} ms)"
        + ("" if slack > 0 else "  (filling overran the lead time: lag figures are inflated)")
    )


def _bare_insert(store: TimelineStore, n: int = 20_000) -> float:
    """Baseline: the same rows in plain ``INSERT ... VALUES`` batches of ``BATCH``; rows/s."""
    conn = store._conn
    with store._lock:
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS bench_bare (id TEXT, ts BIGINT, b BYTEA)")
        started = time.perf_counter()
        for start in range(0, n, BATCH):
            rows = [(f"b{i}", i, b"x" * 64) for i in range(start, start + BATCH)]
            values = ",".join(["(%s, %s, %s)"] * len(rows))
            conn.execute(f"INSERT INTO bench_bare VALUES {values}", [v for r in rows for v in r])
        rate = n / (time.perf_counter() - started)
        conn.execute("DROP TABLE bench_bare")
    return rate


def _buffer(dsn: str, bootstrap: str, store: TimelineStore, n: int = RELAY_RECORDS) -> list[str]:
    """Ingest and relay of a time buffer, beside a bare Kafka produce of the records."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from tidemark.pipelines.timeline.buffer import BufferIngest, BufferRelay
    from tidemark.pipelines.timeline.config import BufferConfig, DueRule

    tag = uuid.uuid4().hex[:8]
    source, target = f"bench-buf-in-{tag}", f"bench-buf-out-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in (source, target)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    started = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(source, key=b"k%d" % i, value=b"v" * 64, headers=[("h", b"1")])
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(60)
    bare = n / (time.perf_counter() - started)
    config = BufferConfig(source, target, DueRule(delay_ms=0), batch_size=2_000)
    ingest = BufferIngest(dsn, bootstrap, config)
    deadline = time.perf_counter() + 120
    while ingest.read == 0 and time.perf_counter() < deadline:
        ingest.run_once()  # the group join and first fetch: not part of the rate
    first, started = ingest.read, time.perf_counter()
    while ingest.read < n and time.perf_counter() < deadline:
        ingest.run_once()
    ingest_rate = (ingest.read - first) / (time.perf_counter() - started)
    ingest.close()
    relay = BufferRelay(dsn, bootstrap, config)
    started = time.perf_counter()
    while relay.relayed == 0 and time.perf_counter() - started < 60:
        relay.run_once()  # its transactions' start and first batch: not part of the rate
    first, steady = relay.relayed, time.perf_counter()
    while relay.relayed < n and time.perf_counter() - started < 120:
        relay.run_once()
    relay_rate = (relay.relayed - first) / (time.perf_counter() - steady)
    with_startup = relay.relayed / (time.perf_counter() - started)
    relay.close()
    # The relay's producer is idempotent (transactional): so is the baseline's.
    bare_idempotent, _ = _bare_produce(bootstrap, target, n, [("h", b"1")], b"k%d")
    admin.delete_topics([source, target])
    with store._lock:
        for table, column in (
            ("timeline_messages", "timeline"),
            ("timeline_relay_batches", "timeline"),
            ("timeline_relay_state", "timeline"),
            ("timeline_consumers", "timeline"),
            ("timeline_source_offsets", "timeline"),
            ("timeline_timelines", "name"),
        ):
            store._conn.execute(f"DELETE FROM {table} WHERE {column} = %s", (config.timeline,))
    return [
        f"timeline buffer ingest (records + offsets, one transaction a batch): "
        f"{ingest_rate:,.0f} rec/s; baseline bare Kafka produce {bare:,.0f} rec/s",
        f"timeline buffer relay (past the cursor, one Kafka transaction a batch), after its "
        f"first run_once: {relay_rate:,.0f} rec/s (from its start {with_startup:,.0f}); "
        f"baseline bare idempotent Kafka produce of the same records (acks=all, after "
        f"a first flushed record) {bare_idempotent:,.0f} rec/s; "
        f"ratio {relay_rate / bare_idempotent:.2f} (against the source's fill, not "
        f"idempotent: {relay_rate / bare:.2f})",
    ]


def run(dsn: str, bootstrap: str | None) -> list[str]:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    lines: list[str] = []
    with TimelineStore(dsn, notify=False) as store:
        store.migrate()
        lease_timelines = [f"lease{limit}" for limit in LEASE_LIMITS]
        for suffix in ("lag", "one", *lease_timelines, "relay", "relay10", "relay50"):
            store.create_timeline(TimelineConfig(f"{name}-{suffix}", buckets=16))
        try:
            lag_lines, create_rate = _lag(dsn, f"{name}-lag", store)
            lines += lag_lines
            lines.append(_create_single(store, f"{name}-one"))
            lease_rates: dict[int, float] = {}
            for limit in LEASE_LIMITS:
                # A timeline each: the leases one run leaves are not in the other's way.
                line, lease_rates[limit] = _lease_throughput(store, f"{name}-lease{limit}", limit)
                lines.append(line)
            bare_insert = _bare_insert(store)
            lines.append(
                f"timeline create baseline: bare INSERT ... VALUES batches of {BATCH}: "
                f"{bare_insert:,.0f} rows/s; create ratio {create_rate / bare_insert:.2f}, "
                f"lease (batches of {BATCH:,}) ratio {lease_rates[BATCH] / bare_insert:.2f}"
            )
            if bootstrap:
                lines.append(_relay(dsn, bootstrap, store, f"{name}-relay"))
                for rate, suffix in ((10_000, "relay10"), (50_000, "relay50")):
                    lines.append(
                        _relay_lag(dsn, bootstrap, store, f"{name}-{suffix}", rate, create_rate)
                    )
                lines += _buffer(dsn, bootstrap, store)
            drift = store.clock_drift()
            lines.append(
                f"timeline clock drift (database - client): {drift.drift_ms:+.1f} ms "
                f"(rtt {drift.rtt_ms:.1f} ms)"
            )
        finally:
            conn = store._conn
            with store._lock:
                conn.execute("DELETE FROM timeline_messages WHERE timeline LIKE %s", (name + "-%",))
                for table in ("timeline_relay_batches", "timeline_relay_state"):
                    conn.execute(f"DELETE FROM {table} WHERE timeline LIKE %s", (name + "-%",))
                conn.execute(
                    "DELETE FROM timeline_consumers WHERE timeline LIKE %s", (name + "-%",)
                )
                conn.execute("DELETE FROM timeline_timelines WHERE name LIKE %s", (name + "-%",))
    return lines


if __name__ == "__main__":  # pragma: no cover - manual runs
    import sys

    for line in run(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None):
        print(line)
