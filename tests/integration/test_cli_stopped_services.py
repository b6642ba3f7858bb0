"""Each service really stopped, each verb run as a user runs it: exit 69 and one line
naming the service, its address and what to check -- never a traceback.

A ZooKeeper, a Kafka broker and a PostgreSQL of their own are started, used once (so
the address is known to have answered), stopped, and the verbs run against them at
once, each in its own process (``TIDEMARK_SERVICE_TIMEOUT_MS`` keeps the waits short).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tidemark.cli.service_errors import EXIT_UNAVAILABLE
from tidemark.infra.ports import unused_address

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WAIT_MS = 3000
BOUND_S = 15.0


def run_all(
    env: dict[str, str], *commands: Sequence[str], bound_s: float = BOUND_S
) -> list[tuple[int, str, str]]:
    """Run the commands side by side; (exit code, stdout, stderr) of each, in order. The
    service waits are ``WAIT_MS``: each command must be done well within ``bound_s``."""
    full = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TIDEMARK_SERVICE_TIMEOUT_MS": str(WAIT_MS),
        **env,
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tidemark.cli.main", *argv],
            env=full,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in commands
    ]
    started = time.monotonic()
    results = []
    for argv, proc in zip(commands, procs, strict=True):
        out, err = proc.communicate(timeout=120)
        took_s = time.monotonic() - started
        assert took_s < bound_s, f"{argv} took {took_s:.1f} s: {err}"
        results.append((proc.returncode, out, err))
    return results


def assert_one_line(result: tuple[int, str, str], code: int, *said: str) -> None:
    returned, _, err = result
    assert returned == code, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for part in said:
        assert part in lines[0], lines[0]


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """No `tidemark up` state and no addresses from the caller's environment."""
    return {
        "TIDEMARK_HOME": str(tmp_path / "home"),
        "TIDEMARK_TIME_SERVICE": "",
        "TIDEMARK_POSTGRES_DSN": "",
    }


def test_a_stopped_zookeeper(tmp_path: Path, home: dict[str, str], unique: str) -> None:
    from tidemark.infra.zookeeper import ZooKeeperServer

    server = ZooKeeperServer(tmp_path / "zookeeper").start()
    env = {**home, "TIDEMARK_ZK_CONNECT": server.connect_string}
    env["TIDEMARK_KAFKA_BOOTSTRAP"] = "127.0.0.1:9"  # not reached: ZooKeeper fails first
    try:
        ((created, _, err),) = run_all(env, ["scope", "create", f"s{unique}"])
        assert created == 0, err
    finally:
        server.stop()
    said = (f"ZooKeeper is unavailable: {server.connect_string}", "TIDEMARK_ZK_CONNECT")
    for result in run_all(
        env, ["scope", "list"], ["stream", "describe", f"s{unique}/a"], ["group", "list"]
    ):
        assert_one_line(result, EXIT_UNAVAILABLE, *said)


def test_a_stopped_broker(
    tmp_path: Path, home: dict[str, str], zookeeper: str, zk_client: Any, unique: str
) -> None:
    from tidemark.infra.kafka import KafkaCluster

    cluster = KafkaCluster(tmp_path / "kafka", brokers=1).start()
    stream = f"s{unique}/orders"
    env = {
        **home,
        "TIDEMARK_ZK_CONNECT": f"{zookeeper}/tidemark-test-{unique}",
        "TIDEMARK_KAFKA_BOOTSTRAP": cluster.bootstrap_servers,
    }
    try:
        for argv in (["scope", "create", f"s{unique}"], ["stream", "create", stream]):
            ((code, _, err),) = run_all(env, argv)
            assert code == 0, err
    finally:
        cluster.stop()
    said = (f"Kafka is unavailable: {cluster.bootstrap_servers}", "--bootstrap")
    for result in run_all(
        env,
        ["read", stream, "--wait-ms", "1000"],
        ["stream", "create", f"s{unique}/payments"],
    ):
        assert_one_line(result, EXIT_UNAVAILABLE, *said)


@pytest.fixture
def stopped_postgres(home: dict[str, str]) -> Iterator[tuple[Any, dict[str, str]]]:
    """A PostgreSQL that answered once (a timeline made in it), then stopped."""
    from tidemark.infra.postgres import PostgresServer

    # under the system's temporary directory: see tests/conftest.py's postgres fixture
    root = Path(tempfile.mkdtemp(prefix="tidemark-postgres-"))
    try:
        server = PostgresServer(root, durable=False).start()
        env = {**home, "TIDEMARK_POSTGRES_DSN": server.dsn}
        try:
            ((created, _, err),) = run_all(env, ["timeline", "create", "reminders"])
            assert created == 0, err
        finally:
            server.stop()
        yield server, env
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_stopped_postgresql(stopped_postgres: tuple[Any, dict[str, str]]) -> None:
    server, env = stopped_postgres
    said = (f"PostgreSQL is unavailable: 127.0.0.1:{server.port}/", "TIDEMARK_POSTGRES_DSN")
    for result in run_all(
        env,
        ["timeline", "count", "reminders"],
        ["timeline", "put", "reminders", "--group", "g", "--body", "b", "--in-ms", "10"],
    ):
        assert_one_line(result, EXIT_UNAVAILABLE, *said)


def test_a_missing_delta_table(tmp_path: Path, home: dict[str, str]) -> None:
    root = tmp_path / "no-tables"
    (result,) = run_all(home, ["laggards", "shop/orders", "--delta-root", str(root)])
    assert_one_line(result, 1, f"no watermark tables under {root}")


def test_a_stopped_object_store(tmp_path: Path, home: dict[str, str]) -> None:
    """delta-rs retries a store that does not answer (10 times, ~11 s), then one line."""
    from deltalake import DeltaTable

    from tidemark.infra.s3proxy import S3Proxy
    from tidemark.schemas.arrow import ARROW_SCHEMAS
    from tidemark.schemas.tables import TABLES, table_path

    store = S3Proxy(tmp_path / "s3").start()
    root = "s3://lake/tidemark"
    try:
        for table in TABLES:
            DeltaTable.create(
                table_path(root, table),
                schema=ARROW_SCHEMAS[table],
                storage_options=store.storage_options(),
            )
        env = {**home, **store.reader_environment()}
        ((code, out, err),) = run_all(env, ["laggards", "shop/orders", "--delta-root", root])
        assert code == 0, err
        assert "no writer holds the watermark back" in out, out
    finally:
        store.stop()
    said = (f"the object store is unavailable: {store.endpoint}", "AWS_ENDPOINT_URL")
    (result,) = run_all(env, ["laggards", "shop/orders", "--delta-root", root], bound_s=60.0)
    assert_one_line(result, EXIT_UNAVAILABLE, *said)


def test_kafka_out_of_reach_for_the_timeline(
    home: dict[str, str], postgres: str, kafka: str, unique: str
) -> None:
    """Relay and time buffer with no broker at their address: one line, exit 69, and the
    timelines keep their rows; the relay delivers them once it reaches Kafka."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tidemark.pipelines.timeline.buffer import PRODUCER_GROUP
    from tidemark.pipelines.timeline.config import BufferConfig, DueRule, TimelineConfig
    from tidemark.pipelines.timeline.record import KafkaRecord, encode_record
    from tidemark.pipelines.timeline.store import NewMessage, TimelineStore

    timeline, target = f"down-{unique}", f"down-out-{unique}"
    source, delayed = f"buf-src-{unique}", f"buf-dst-{unique}"
    buffer = BufferConfig(source, delayed, DueRule(delay_ms=0)).timeline
    with TimelineStore(postgres) as store:
        store.migrate()
        store.create_timeline(TimelineConfig(timeline, buckets=2))
        store.create_many(timeline, [NewMessage(b"due", 0, "app", f"m{i}") for i in range(3)])
        store.create_timeline(TimelineConfig(buffer, buckets=16, max_body_bytes=64 << 20))
        body = encode_record(KafkaRecord(b"k", b"v", (), 0))
        store.create_many(
            buffer, [NewMessage(body, 0, PRODUCER_GROUP, f"0:{i}@{source}") for i in range(2)]
        )
    address = unused_address()
    env = {**home, "TIDEMARK_POSTGRES_DSN": postgres, "TIDEMARK_KAFKA_BOOTSTRAP": address}
    said = (f"Kafka is unavailable: {address}", "--bootstrap")
    relay = ["timeline", "relay", timeline, "--topic", target, "--consumer", "r", "--no-purge"]
    ingest = ["timeline", "ingest", "--from", source, "--to", delayed, "--delay", "0s"]
    for result in run_all(env, relay, [*ingest, "--no-purge"]):
        assert_one_line(result, EXIT_UNAVAILABLE, *said)
    with TimelineStore(postgres) as store:
        assert (store.count(timeline).total, store.count(buffer).total) == (3, 2)

    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(target, 1, 1)])[target].result(30)
    env["TIDEMARK_KAFKA_BOOTSTRAP"] = kafka
    back = [*relay, "--max-messages", "3", "--duration-s", "20", "--format", "json"]
    ((code, out, err),) = run_all(env, back, bound_s=30.0)
    assert code == 0, err
    assert '"relayed": 3' in out, out
    with TimelineStore(postgres) as store:
        assert store.count(timeline).total == 0
