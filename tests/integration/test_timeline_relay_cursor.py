"""The relay's cursor against real PostgreSQL and Kafka: racing writers, kill -9, the
database restarted, the broker down; every message on the target exactly once
(counted with read_committed)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.test_timeline_buffer import _Reader as CommittedReader
from tidemark.pipelines.timeline.config import ConsumerConfig, RelayConfig, TimelineConfig
from tidemark.pipelines.timeline.exceptions import TimelineError
from tidemark.pipelines.timeline.model import bucket_of
from tidemark.pipelines.timeline.relay import (
    TimelineRelay,
    TransactionalTimelineRelay,
    timeline_relay,
)
from tidemark.pipelines.timeline.store import NewMessage, TimelineStore

DELIVERIES = pytest.mark.parametrize("delivery", ["acked", "transactional"])


def _topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def _due_timeline(postgres: str, kafka: str, tl: str, target: str, prefix: str, n: int) -> None:
    """The target topic and a timeline of two buckets with ``n`` messages due at once
    (ids ``<prefix>0``..., the prefix their body)."""
    _topic(kafka, target)
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(tl, buckets=2))
        body = prefix.encode()
        store.create_many(tl, [NewMessage(body, 0, "app", f"{prefix}{i}") for i in range(n)])


class _Reader(CommittedReader):
    """The buffer test's reader of committed records, with each one's due time."""

    def arrived(self) -> list[tuple[str, int]]:
        """(id, due time) of every record read so far, in order."""
        return [
            (key.decode(), int(dict(headers)["tidemark-timestamp"]))
            for key, _value, headers, _ts, _at in list(self.got)
        ]

    def wait_for(self, expected: set[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not expected <= {k for k, _ in self.arrived()} and time.monotonic() < deadline:
            time.sleep(0.1)
        # Linger: anything past the expected ones would be a duplicate.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            time.sleep(0.1)
        self.stop.set()
        self.join(10)


@DELIVERIES
def test_racing_writers_every_message_exactly_once(postgres, kafka, unique, delivery):
    """Writers create messages due now and in the past, move waiting messages behind
    the cursor, delete some before they fall due and commit late from a long
    transaction, while the relay runs: each message that was not deleted arrives
    once, a moved one at its new time; a deleted one never."""
    tl, target = f"rc-{unique}", f"rc-out-{unique}"
    _topic(kafka, target)
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(tl, buckets=4))
    errors: list[BaseException] = []
    stop, relay_stop = threading.Event(), threading.Event()
    expected: dict[str, int | None] = {}  # id -> due time it must arrive with (None: any)
    gone: set[str] = set()
    lock = threading.Lock()

    def relay_loop() -> None:
        try:
            with timeline_relay(
                postgres,
                kafka,
                tl,
                RelayConfig(target, delivery=delivery),
                ConsumerConfig("relay", batch_size=200, max_idle_ms=50),
            ) as relay:
                while not relay_stop.is_set():
                    relay.run_once(timeout_ms=100)
        except BaseException as exc:
            errors.append(exc)

    def now_writer(store: TimelineStore, k: str) -> None:
        now = store.now_ms()
        batch = [NewMessage(b"n", now if i % 3 else 0, "app", f"n{k}-{i}") for i in range(20)]
        store.create_many(tl, batch)
        with lock:
            expected.update({m.id: m.timestamp_ms for m in batch if m.id is not None})

    def mover(store: TimelineStore, k: str) -> None:
        now = store.now_ms()
        ts = now + random.randint(0, 60)
        store.create(tl, b"m", timestamp_ms=ts, producer_group="app", id=f"m{k}")
        time.sleep(random.random() * 0.06)
        target_ts = random.choice([0, now - 1_000, now + 300])  # behind the cursor, or on
        try:
            store.move(tl, f"m{k}", "app", timestamp_ms=target_ts)
        except TimelineError:
            target_ts = ts  # due already, or taken: it goes at its time
        with lock:
            expected[f"m{k}"] = target_ts

    def deleter(store: TimelineStore, k: str) -> None:
        ts = store.now_ms() + random.randint(0, 60)
        store.create(tl, b"d", timestamp_ms=ts, producer_group="app", id=f"d{k}")
        time.sleep(random.random() * 0.06)
        try:
            store.delete(tl, f"d{k}", producer_group="app")
        except TimelineError:
            with lock:
                expected[f"d{k}"] = ts  # taken before the delete: it goes
        else:
            with lock:
                gone.add(f"d{k}")

    def late_committer(store: TimelineStore, k: str) -> None:
        """A transaction that writes a due message, then stays open while batches pass."""

        def write(conn) -> None:
            conn.execute(
                "INSERT INTO timeline_messages (timeline, id, bucket, ts, body, "
                "producer_group, version, created_at_ms) VALUES (%s, %s, %s, 0, 'l', 'app', 1, 0)",
                (tl, f"l{k}", bucket_of(f"l{k}", 4)),
            )
            time.sleep(0.5)

        store.transaction(write)
        with lock:
            expected[f"l{k}"] = 0

    def writer(body, tag: str) -> None:
        try:
            with TimelineStore(postgres) as store:
                k = 0
                while not stop.is_set():
                    body(store, f"{tag}.{k}")  # ids of this writer's own
                    k += 1
        except BaseException as exc:
            errors.append(exc)

    reader = _Reader(kafka, target)
    reader.start()
    threads = [threading.Thread(target=relay_loop)] + [
        threading.Thread(target=writer, args=(body, str(i)))
        for i, body in enumerate((now_writer, mover, mover, deleter, late_committer))
    ]
    for thread in threads:
        thread.start()
    time.sleep(5)  # the race runs this long
    stop.set()
    for thread in threads[1:]:
        thread.join(30)
    reader.wait_for(set(expected), timeout_s=60)  # the relay goes on meanwhile
    relay_stop.set()
    threads[0].join(30)
    assert not errors, errors
    got = reader.arrived()
    counts = Counter(k for k, _ in got)
    assert {k for k, n in counts.items() if n > 1} == set()
    assert set(counts) == set(expected), (set(expected) - set(counts), set(counts) - set(expected))
    assert not gone & set(counts)
    moved_at = dict(got)
    for k, ts in expected.items():
        assert moved_at[k] == ts, k
    assert len(gone) > 0 and sum(1 for k in expected if k.startswith("m")) > 0


RELAY_SCRIPT = """
import logging, sys, time
from tidemark.errors import TidemarkError
from tests.integration.test_timeline_buffer import _Reader as CommittedReader
from tidemark.pipelines.timeline.config import ConsumerConfig, RelayConfig
from tidemark.pipelines.timeline.relay import timeline_relay
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
dsn, bootstrap, timeline, topic, delivery = sys.argv[1:6]
relay = None
while True:
    try:
        if relay is None:
            config = ConsumerConfig("relay", batch_size=100, max_idle_ms=100)
            relay = timeline_relay(
                dsn,
                bootstrap,
                timeline,
                RelayConfig(topic, flush_timeout_ms=3_000, delivery=delivery),
                config,
            )
        relay.run_once(timeout_ms=200)
    except (TidemarkError, TimeoutError) as exc:  # the database or the broker away: again
        logging.warning("relay: %s", exc)
        time.sleep(0.2)
"""


@pytest.mark.timeout(600)
@DELIVERIES
def test_kill_9_database_restart_and_broker_down_lose_and_repeat_nothing(
    services_dir, unique, tmp_path, delivery
):
    """A relay process killed with -9 mid-batch, the database restarted under it, the
    broker stopped for a while: every message arrives exactly once, the backlog that
    piled up meanwhile is drained after."""
    from tidemark.infra.kafka import KafkaCluster
    from tidemark.infra.postgres import PostgresServer

    tl, target, total = f"kr-{unique}", f"kr-out-{unique}", 6_000
    # Outside pytest's base directory (mode 0700): as root the server runs as a user of
    # its own, which must reach its data (as the session's server does).
    root = Path(tempfile.mkdtemp(prefix="tidemark-postgres-kr-"))
    with (
        contextlib.ExitStack() as stack,
        PostgresServer(root, durable=False) as pg,
        KafkaCluster(services_dir / f"kafka-kr-{unique}", brokers=1) as cluster,
    ):
        bootstrap = cluster.bootstrap_servers
        _topic(bootstrap, target)
        with TimelineStore(pg.dsn) as store:
            store.migrate()
            store.create_timeline(TimelineConfig(tl, buckets=4))
            start = store.now_ms() + 1_000
            # Due over ~20 s: the faults happen while they fall due.
            store.create_many(
                tl,
                [
                    NewMessage(b"k", start + i * 20_000 // total, "app", f"k{i}")
                    for i in range(total)
                ],
            )
        reader = _Reader(bootstrap, target)
        reader.start()

        log = open(tmp_path / "relay.log", "ab")  # noqa: SIM115 (the relay's, to the end)

        def spawn() -> subprocess.Popen[bytes]:
            argv = [sys.executable, "-c", RELAY_SCRIPT, pg.dsn, bootstrap, tl, target, delivery]
            return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)

        def arrived_at_least(n: int, timeout_s: float = 60) -> None:
            deadline = time.monotonic() + timeout_s
            while len(reader.got) < n and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(reader.got) >= n, (len(reader.got), n)

        relay = spawn()
        try:
            arrived_at_least(total // 6)
            os.kill(relay.pid, signal.SIGKILL)  # mid-batch: batches follow each other
            relay.wait(10)
            relay = spawn()
            arrived_at_least(total // 3)
            pg.stop()
            time.sleep(2)  # the database away this long
            # The same data and port, a server object of its own (one object starts once).
            restarted = stack.enter_context(PostgresServer(root, port=pg.port, durable=False))
            assert restarted.dsn == pg.dsn
            arrived_at_least(total // 2)
            cluster.stop_node(1)
            time.sleep(4)  # the broker away this long: a backlog piles up
            cluster.start_node(1)
            reader.wait_for({f"k{i}" for i in range(total)}, timeout_s=120)
        finally:
            relay.kill()
            relay.wait(10)
            log.close()
        counts = Counter(k for k, _ in reader.arrived())
        relay_log = (tmp_path / "relay.log").read_text(errors="replace").splitlines()
        shown = "\n".join(relay_log[-60:])  # the relay's own account, to diagnose a stall
        repeated = sorted(k for k, n in counts.items() if n > 1)
        missing = sorted({f"k{i}" for i in range(total)} - set(counts))
        if repeated or missing:  # in full: an assertion's message is cut short
            pytest.fail(
                f"{len(repeated)} repeated {repeated[:5]}, {len(missing)} missing "
                f"{missing[:5]}; reader errors {reader.errors[-5:]}; the relay's log ends:\n"
                f"{shown}",
                pytrace=False,
            )
        assert set(counts) == {f"k{i}" for i in range(total)}
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(300)
def test_a_previous_transaction_still_completing_is_a_timeline_error_then_resumes(
    postgres, services_dir, unique
):
    """A relay starting while Kafka cannot yet end its predecessor's open transaction
    (that transaction's partition is on a stopped broker) gets a :class:`TimelineError`
    naming the wait, not the client's raw exception; once the broker is back, the
    relay starts and relays."""
    from confluent_kafka import Producer

    from tidemark.infra.kafka import KafkaCluster
    from tidemark.pipelines.timeline.relay import relay_name

    tl, target = f"rw-{unique}", f"rw-out-{unique}"
    with KafkaCluster(services_dir / f"kafka-rw-{unique}", brokers=3) as cluster:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # the one replica on node 3: stopped, nothing can end a transaction there
        admin.create_topics([NewTopic(target, 1, replica_assignment=[[3]])])[target].result(30)
        with TimelineStore(postgres) as store:
            store.migrate()
            store.create_timeline(TimelineConfig(tl, buckets=2))
            store.create_many(tl, [NewMessage(b"m", 0, "app", f"m{i}") for i in range(3)])
        earlier = Producer({"bootstrap.servers": bootstrap, "transactional.id": relay_name(tl)})
        earlier.init_transactions(30)
        earlier.begin_transaction()
        earlier.produce(target, b"open", key=b"open")
        assert earlier.flush(30) == 0  # the partition is in the transaction
        cluster.stop_node(3)
        config = RelayConfig(target, flush_timeout_ms=2_000)
        consumer = ConsumerConfig("relay", max_idle_ms=50)
        with pytest.raises(TimelineError, match="CONCURRENT_TRANSACTIONS"):
            TransactionalTimelineRelay(postgres, bootstrap, tl, config, consumer)
        cluster.start_node(3)
        reader = _Reader(bootstrap, target)
        reader.start()
        deadline = time.monotonic() + 120
        while True:
            try:
                relay = TransactionalTimelineRelay(postgres, bootstrap, tl, config, consumer)
                break
            except TimelineError:  # the markers are written once the partition is back
                assert time.monotonic() < deadline, "the earlier transaction never ended"
                time.sleep(0.5)
        with relay:
            relayed = 0
            while relayed < 3 and time.monotonic() < deadline:
                relayed += relay.run_once(timeout_ms=1_000)
        reader.wait_for({"m0", "m1", "m2"}, timeout_s=60)
        assert sorted(k for k, _ in reader.arrived()) == ["m0", "m1", "m2"]  # not "open"


def test_delivered_rows_are_purged_by_range_behind_a_committed_batch(postgres, kafka, unique):
    """The purge removes what a batch Kafka is known to have committed took, one range a
    bucket; until then the ids stay taken (a replayed create creates nothing); rows
    written behind the cursor since, not yet taken, stay."""
    tl, target = f"rp-{unique}", f"rp-out-{unique}"
    _due_timeline(postgres, kafka, tl, target, "a", 5)
    with (
        TimelineStore(postgres) as store,
        TimelineRelay(
            postgres, kafka, tl, RelayConfig(target), ConsumerConfig("relay", max_idle_ms=50)
        ) as relay,
    ):
        assert relay.run_once(timeout_ms=2_000) == 5
        assert not store.create(tl, b"a", timestamp_ms=0, producer_group="app", id="a0").new
        store.create(tl, b"b", timestamp_ms=0, producer_group="app", id="b0")
        assert relay.run_once(timeout_ms=2_000) == 1  # batch 2 records batch 1 committed
        assert store.purge(keep_deleted_ms=0) >= 5  # (other timelines' too)
        store.create(tl, b"c", timestamp_ms=0, producer_group="app", id="c0")  # late

        def left(conn):
            rows = conn.execute(
                "SELECT id FROM timeline_messages WHERE timeline = %s ORDER BY id", (tl,)
            ).fetchall()
            return [r[0] for r in rows]

        assert store.transaction(left) == ["b0", "c0"]
        assert store.create(tl, b"a", timestamp_ms=0, producer_group="app", id="a0").new
        assert relay.run_once(timeout_ms=2_000) == 2  # c0 and the new a0, once each


def test_a_transactional_timeline_is_settled_then_delivered_by_acknowledgement(
    postgres, kafka, unique
):
    """A transactional relay dies with a batch produced but not committed: the
    acknowledging relay that takes the timeline over settles it as a transactional one
    would (Kafka's last commit names the last real batch), so the aborted batch goes
    once; a transactional relay then refuses to take over while acknowledged batches
    are not settled, and takes over once they are."""
    from tidemark.pipelines.timeline.exceptions import RelayStateError

    tl, target = f"rs-{unique}", f"rs-out-{unique}"
    _due_timeline(postgres, kafka, tl, target, "t", 3)
    consumer = ConsumerConfig("relay", max_idle_ms=50)
    transactional = RelayConfig(target, flush_timeout_ms=2_000, delivery="transactional")
    acked = RelayConfig(target, flush_timeout_ms=2_000)
    first = TransactionalTimelineRelay(postgres, kafka, tl, transactional, consumer)
    batch = first._take(10)
    first._producer.begin_transaction()
    first._number(batch)
    first._produce(batch.rows, [])
    assert first._producer.flush(15) == 0  # on the broker, never committed
    first.close()
    reader = _Reader(kafka, target)
    reader.start()
    with TimelineRelay(postgres, kafka, tl, acked, consumer) as relay:
        relayed = 0
        deadline = time.monotonic() + 60
        while relayed < 3 and time.monotonic() < deadline:
            relayed += relay.run_once(timeout_ms=500)
        assert relayed == 3
        with TimelineStore(postgres) as store:
            store.create(tl, b"a", timestamp_ms=0, producer_group="app", id="a0")
        pending = relay._take(10)  # taken, never produced: owed
        assert [row[2] for row in pending.rows] == ["a0"]
    with pytest.raises(RelayStateError, match="not settled"):
        TransactionalTimelineRelay(postgres, kafka, tl, transactional, consumer)
    with TimelineRelay(postgres, kafka, tl, acked, consumer) as relay:
        assert relay.relayed == 1  # the owed one, at the start
    with TransactionalTimelineRelay(postgres, kafka, tl, transactional, consumer) as relay:
        with TimelineStore(postgres) as store:
            store.create(tl, b"b", timestamp_ms=0, producer_group="app", id="b0")
        deadline = time.monotonic() + 30
        while relay.relayed < 1 and time.monotonic() < deadline:
            relay.run_once(timeout_ms=500)
    reader.wait_for({"t0", "t1", "t2", "a0", "b0"}, timeout_s=60)
    assert sorted(k for k, _ in reader.arrived()) == ["a0", "b0", "t0", "t1", "t2"]


def test_a_replaced_acknowledging_relay_sends_nothing_more(postgres, kafka, unique):
    """A relay that took a batch and stalled is replaced: its successor waits out the
    lease and sends the batch; the stalled one, resuming, may not send it (read too
    long ago) and may read no more (another relay's epoch): each message once."""
    from tidemark.pipelines.timeline.exceptions import RelayFencedError

    tl, target = f"rz-{unique}", f"rz-out-{unique}"
    _due_timeline(postgres, kafka, tl, target, "z", 4)
    config = RelayConfig(target, flush_timeout_ms=1_000)
    consumer = ConsumerConfig("relay", max_idle_ms=50)
    reader = _Reader(kafka, target)
    reader.start()
    stalled = TimelineRelay(postgres, kafka, tl, config, consumer)
    try:
        batch = stalled._take(10)
        assert len(batch.rows) == 4
        successor = TimelineRelay(postgres, kafka, tl, config, consumer)  # waits the lease
        assert successor.relayed == 4
        with pytest.raises(TimelineError, match="read more than"):
            stalled._begin(batch)  # the stalled one wakes: too late to send
        with TimelineStore(postgres) as store:
            store.create(tl, b"z", timestamp_ms=0, producer_group="app", id="z9")
        stalled._state = batch.state  # as though it went on to its next read
        with pytest.raises(RelayFencedError):
            stalled._take(10)
        deadline = time.monotonic() + 30
        while successor.relayed < 5 and time.monotonic() < deadline:
            successor.run_once(timeout_ms=500)
        successor.close()
    finally:
        stalled.close()
    reader.wait_for({f"z{i}" for i in (0, 1, 2, 3, 9)}, timeout_s=60)
    assert sorted(k for k, _ in reader.arrived()) == ["z0", "z1", "z2", "z3", "z9"]


def test_an_acknowledging_relay_resumes_its_own_work_without_the_lease(
    postgres, kafka, unique, caplog
):
    """A relay whose database session breaks with nothing in flight resumes at once: it
    knows what it delivered, and that the batch it recorded last never reached its
    producer (it sends that one without a look at the target); each message once."""
    import logging

    import psycopg

    tl, target = f"ro-{unique}", f"ro-out-{unique}"
    lease_s = 20.0  # twice flush_timeout_ms: a resume waiting it out would show
    _due_timeline(postgres, kafka, tl, target, "o", 3)
    reader = _Reader(kafka, target)
    reader.start()
    config = RelayConfig(target, flush_timeout_ms=int(lease_s * 500))
    caplog.set_level(logging.INFO, logger="tidemark.pipelines.timeline.relay_acked")
    with TimelineRelay(postgres, kafka, tl, config, ConsumerConfig("relay")) as relay:
        deadline = time.monotonic() + 30
        while relay.relayed < 3 and time.monotonic() < deadline:
            relay.run_once(timeout_ms=500)
        with TimelineStore(postgres) as store:
            store.create_many(tl, [NewMessage(b"o", 0, "app", f"p{i}") for i in range(2)])
        assert len(relay._take(10).rows) == 2  # recorded; then the session breaks
        assert relay._store is not None
        with psycopg.connect(postgres, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (relay._store._conn.info.backend_pid,))
        with TimelineStore(postgres) as store:
            store.create_many(tl, [NewMessage(b"o", 0, "app", f"q{i}") for i in range(2)])
        started = time.monotonic()
        while relay.relayed < 7 and time.monotonic() - started < lease_s:
            with contextlib.suppress(TimelineError):  # the broken session, once
                relay.run_once(timeout_ms=500)
        assert relay.relayed == 7
        assert time.monotonic() - started < lease_s / 2
    said = [r.getMessage() for r in caplog.records]
    assert any("recorded, never sent" in line for line in said), said
    assert not any("waiting" in line for line in said), said
    expected = {f"o{i}" for i in range(3)} | {"p0", "p1", "q0", "q1"}
    reader.wait_for(expected, timeout_s=60)
    assert sorted(k for k, _ in reader.arrived()) == sorted(expected)
