"""tidemark run the way a team deploys it, end to end (docs/deploying.md).

The controller is submitted with ``spark-submit`` to a Spark standalone cluster
(two workers), its Delta tables and checkpoint on an S3 store (``s3a://``); Kafka
has three brokers with SASL/SCRAM over TLS (a CA made for the run) and ACLs, each
client its own principal; the
metadata lives in a three-node ZooKeeper ensemble. Two drivers stand in
active/standby. The tests run in file order on one running system; then, on the same
system, the nemesis (test_nemesis.py) does each kind of fault (a Spark worker, the
object store, a ZooKeeper node, a broker, the leading driver), then seeded ones, and
checks that nothing was lost or went backwards.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.deploy.deployment import (
    ADMIN_PASSWORD,
    ROOT,
    USERS,
    ZK_PASSWORDS,
    Deployment,
)
from tests.deploy.writers import open_writer
from tests.faults.figures import report
from tests.waiting import wait_until
from tidemark.controller.config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from tidemark.controller.delta.location import TableLocation
from tidemark.controller.delta.tables import read_table, read_watermarks
from tidemark.controller.exceptions import KafkaOperationError, WriterIdOwnedError
from tidemark.controller.kafka.admin import StreamTopics
from tidemark.controller.kafka.settings import client_config
from tidemark.controller.metadata import cut_from_json
from tidemark.controller.model import Watermark, WriterMark
from tidemark.controller.naming import topic_for
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.driver import controller_view
from tidemark.controller.zookeeper.session import zookeeper_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import SERVICE_TIMEOUT_MS
from tidemark.infra.ports import free_port
from tidemark.infra.process import ManagedProcess
from tidemark.pipelines.reading.seek import stream_cut_at
from tidemark.pipelines.writing.marks import mark_message
from tidemark.schemas.tables import MARKS, REJECTED_MARKS, Reason

STREAM = "deploy/orders"
START_S = 240  # a driver's first watermark: spark-submit, executors, Python workers, on 2 cores
RECOVERY_S = 120
TIDEMARK = (sys.executable, "-m", "tidemark.cli.main")


@dataclass
class Running:
    """The system under test: a leading driver, a standby, writers noting time."""

    deployment: Deployment
    client: Any  # kazoo, as admin sees ZooKeeper
    noters: list[Any]

    @property
    def store(self) -> ZooKeeperStore:
        return ZooKeeperStore(self.client, self.deployment.cluster.zk_root)

    def watermarks(self, stream: str = STREAM) -> list[Watermark]:
        try:
            return read_watermarks(
                self.deployment.delta_root, stream, self.deployment.s3.storage_options()
            )
        except Exception:  # no table yet, or the store is down
            return []

    def leader(self) -> str | None:
        view = controller_view(
            self.client, self.deployment.cluster.zk_root, self.deployment.cluster.marks_topic
        )
        return view.leader

    def drivers_alive(self) -> list[ManagedProcess]:
        return [p for p in self.deployment.drivers.values() if p.alive()]


class Noter:
    """A writer (principal ``writer``) that writes ``per_round`` events and notes time every
    0.2 s: an ``EventWriter``, or with ``drop_in`` the drop-in ``TidemarkProducer``."""

    def __init__(
        self,
        deployment: Deployment,
        writer_id: str,
        drop_in: bool = False,
        stream: str = STREAM,
        per_round: int = 1,
    ) -> None:
        self.writer = open_writer(deployment, stream, writer_id, drop_in=drop_in)
        self.drop_in = drop_in
        self.stream = stream
        self.per_round = per_round
        self.noted = -1  # the last time noted
        self.halt = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.halt.is_set():
                now = time.time_ns() // 1_000_000
                for i in range(self.per_round):
                    key = f"k{now}-{i}"
                    if self.drop_in:
                        self.writer.produce(
                            topic_for(self.stream), b"e", key.encode(), timestamp=now
                        )
                    else:
                        self.writer.write(b"e", routing_key=key, timestamp=now)
                self.writer.flush()
                self.writer.note_time(now)
                self.noted = now
                self.halt.wait(0.2)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def silence(self) -> None:
        """Stop writing and noting, without closing: a writer that hangs."""
        self.halt.set()
        self.thread.join(30)

    def stop(self) -> None:
        self.silence()
        self.writer.close()


@pytest.fixture(scope="module")
def running(deployment: Deployment) -> Iterator[Running]:
    with deployment.as_user("admin"), zookeeper_session(deployment.zookeeper.connect_string) as zk:
        store = ZooKeeperStore(zk, deployment.cluster.zk_root)
        manager = StreamManager(store, deployment.bootstrap, deployment.cluster)
        manager.create_scope(STREAM.split("/")[0])
        manager.create(STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
        submitted = time.monotonic()
        deployment.submit_controller("a", "--no-warm-up")
        state = Running(deployment, zk, [])
        wait_until(lambda: state.leader() == "a", START_S, "driver a leads", *state.drivers_alive())
        state.noters = [
            Noter(deployment, "event-writer"),
            Noter(deployment, "drop-in", drop_in=True),
        ]
        wait_until(
            lambda: len(state.watermarks()) >= 3,
            START_S,
            "watermarks in Delta on the object store",
            *state.drivers_alive(),
        )
        report(
            "deploy-start",
            f"spark-submit to 3 watermarks in s3a Delta: {time.monotonic() - submitted:.1f} s",
        )
        deployment.submit_controller("b", "--no-warm-up")
        try:
            yield state
        finally:
            for noter in state.noters:
                noter.stop()
            for name, proc in deployment.drivers.items():
                print(f"--- driver {name}", proc.log_tail(40), sep="\n")


def check_sequence(marks: list[Watermark]) -> None:
    """``seq`` 0..n-1 (no gap, no duplicate); times and cuts never go backwards."""
    assert [m.seq for m in marks] == list(range(len(marks))), "seq gaps or duplicates"
    for prev, new in itertools.pairwise(marks):
        assert new.time > prev.time, (prev, new)
        back = {s: o for s, o in prev.stream_cut.items() if new.stream_cut.get(s, o) < o}
        assert not back, f"cut went backwards on {back}: {prev} -> {new}"


def test_watermarks_reach_delta_on_the_object_store(running: Running) -> None:
    d = running.deployment
    marks = running.watermarks()
    check_sequence(marks)
    lake = d.s3.data_dir / "buckets" / "lake" / "tidemark"
    assert (lake / "marks" / "_delta_log").is_dir(), "the marks table is not on the store"
    assert (lake / "index" / "_delta_log").is_dir(), "the index table is not on the store"
    assert running.leader() == "a"


def test_readers_answer_from_the_object_store(running: Running) -> None:
    """``stream_cut_at``, ``tidemark read --ago`` and ``tidemark serve``'s seek, each from
    the tables on s3, each as the ``reader`` principal."""
    d = running.deployment
    marks = running.watermarks()
    at = marks[len(marks) // 2].time
    cut = stream_cut_at(STREAM, at, delta_root=d.delta_root, storage_options=d.s3.storage_options())
    assert cut, "no start cut from the index on s3"
    env = d.process_env("reader")
    read = subprocess.run(
        [*TIDEMARK, "read", STREAM, "--ago", "1h", "--count", "3", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert read.returncode == 0, read.stderr[-2000:]
    assert len(read.stdout.splitlines()) == 3, read.stdout
    port = free_port()
    serve = ManagedProcess(
        "serve",
        [*TIDEMARK, "serve", "--port", str(port)],
        d.tmp / "serve.log",
        env=env,
        cwd=ROOT,
    )
    serve.start()
    try:
        url = f"http://127.0.0.1:{port}/api/streams/{STREAM}/start?t={at}"

        def answered() -> Any:
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    return json.load(answer)
            except urllib.error.HTTPError as exc:
                raise AssertionError(f"{url}: {exc.code} {exc.read()[:500]!r}") from exc
            except OSError:  # not listening yet
                return None

        wait_until(lambda: answered() is not None, 60, "tidemark serve answers", serve)
        found = answered()
        assert found["found"] is not None, found
        assert cut_from_json(found["stream_cut"]) == cut, (found, cut)
    finally:
        serve.stop()


def produce_mark(
    config: dict[str, Any], mark: Any, flush_s: float, extra: dict[str, Any] | None = None
) -> list[Any]:
    """Produce ``mark`` (a :func:`mark_message`) with a bare client of ``config`` (a
    principal's connection) and ``extra``: its delivery errors (``None``: stored)."""
    producer = Producer({**config, **(extra or {})})
    delivered: list[Any] = []
    producer.produce(
        mark.topic,
        value=mark.value,
        key=mark.key,
        partition=mark.partition,
        on_delivery=lambda e, m: delivered.append(e),
    )
    producer.flush(flush_s)
    return delivered


def test_a_principal_without_acls_cannot_write_or_read_marks(running: Running) -> None:
    d = running.deployment
    topic = d.cluster.marks_topic
    with d.as_user("mallory"):
        config = client_config(d.bootstrap)
    mark = mark_message(d.cluster, STREAM, "w-mallory", WriterMark(2**40, {0: 10**9}))
    delivered = produce_mark(config, mark, 15, {"log_level": 0, "message.timeout.ms": 8_000})
    assert delivered and delivered[0] is not None, "mallory wrote a mark"
    assert delivered[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, delivered[0]
    consumer = Consumer({**config, "group.id": "mallory", "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        error = None
        deadline = time.monotonic() + 15
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is not None, "mallory read a mark"
                error = msg.error()
        assert error is not None and error.code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.GROUP_AUTHORIZATION_FAILED,
        ), error
    finally:
        consumer.close()


def test_kafka_speaks_tls_with_the_run_s_own_ca_and_nothing_else(running: Running) -> None:
    """Every tidemark client above reached the brokers over SASL_SSL (their one listener);
    a client that trusts another CA, or sends in clear, is not answered."""
    d = running.deployment
    assert d.kafka.protocol == "SASL_SSL"
    trusting = ssl.create_default_context(cafile=str(d.tls.cert))
    for node in d.kafka.nodes:
        with (
            socket.create_connection(("127.0.0.1", node.broker_port), timeout=10) as raw,
            trusting.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.version() in ("TLSv1.2", "TLSv1.3"), tls.version()
    with d.as_user("writer"):
        config = client_config(d.bootstrap)
    untrusted = {k: v for k, v in config.items() if k != "ssl.ca.location"}
    in_clear = {**config, "security.protocol": "SASL_PLAINTEXT"}
    for refused in (untrusted, in_clear):
        admin = AdminClient({**refused, "log_level": 0, "socket.timeout.ms": 3_000})
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=5)


def stream_records(d: Deployment, stream: str) -> list[tuple[int, int, bytes, int]]:
    """Every record of ``stream``'s topic, read as ``admin``: (partition, offset, key, time)."""
    with d.as_user("admin"):
        config = client_config(d.bootstrap)
    topic = topic_for(stream)
    consumer = Consumer({**config, "group.id": "deploy-check", "log_level": 0})
    out: list[tuple[int, int, bytes, int]] = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        for p in sorted(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high == low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            last = low - 1
            while last < high - 1:
                msg = consumer.poll(5)
                assert msg is not None, f"{topic}[{p}] ended before offset {high - 1}"
                if msg.error():
                    continue
                offset = msg.offset()
                assert offset is not None
                out.append((p, offset, msg.key() or b"", msg.timestamp()[1]))
                last = offset
    finally:
        consumer.close()
    return out


def admin_cli(d: Deployment, *argv: str, timeout_s: float = 120) -> str:
    """``tidemark <argv>`` as ``admin``; its stdout (fails on a non-zero exit)."""
    done = subprocess.run(
        [*TIDEMARK, *argv],
        env=d.process_env("admin"),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
    )
    assert done.returncode == 0, f"tidemark {' '.join(argv)}: {done.stderr[-3000:]}"
    return done.stdout


def test_a_spark_writer_job_notes_time_and_watermarks_cover_its_events(running: Running) -> None:
    """``tidemark.jobs.stream_writer`` submitted to the cluster as its own principal: each task
    registers, writes, notes its time and closes; every watermark at or past the job's
    largest time covers each of its events. The job's principal (in Kafka and in ZooKeeper)
    cannot take the running writer's id: its registration under it is refused, its mark
    with a token of its own is refused as ``impersonated``, and the watermarks past the
    job are vouched for by the owner's instance."""
    d = running.deployment
    owner = running.noters[0].writer
    squatted = claim_writer_id(d, owner.writer_id)
    argv = d.spark_submit_argv(
        "sparkjob",
        ROOT / "tests" / "deploy" / "spark_writer_job.py",
        STREAM,
        "--bootstrap",
        d.bootstrap,
        "--zk",
        d.zookeeper.connect_string,
        "--job-id",
        "nightly",
        "--rows",
        "200",
    )
    started = time.monotonic()
    job = subprocess.run(
        argv, env=d.submit_env("sparkjob"), capture_output=True, text=True, timeout=300
    )
    assert job.returncode == 0, job.stderr[-3000:]
    took_s = time.monotonic() - started
    reports = json.loads(job.stdout.splitlines()[-1])
    assert sorted(r["writer_id"] for r in reports) == ["nightly/1/0", "nightly/1/1"], reports
    assert sum(r["events"] for r in reports) == 200
    job_max = max(r["max_time"] for r in reports)
    wait_until(
        lambda: max((m.time for m in running.watermarks()), default=-1) >= job_max,
        RECOVERY_S,
        "a watermark past the job's events",
    )
    written = [(p, o) for p, o, key, _ in stream_records(d, STREAM) if key.startswith(b"nightly-")]
    assert len(written) == 200, "the job's events in Kafka"
    marks = running.watermarks()
    check_sequence(marks)
    for mark in (m for m in marks if m.time >= job_max):
        missed = [(p, o) for p, o in written if mark.stream_cut.get(p, 0) <= o]
        assert not missed, f"watermark {mark.seq} at {mark.time} misses job events {missed[:5]}"
    report("deploy-spark-writer", f"200 events, 2 tasks, submitted to covered in {took_s:.0f} s")

    lake = TableLocation.of(d.delta_root, d.s3.storage_options())

    def refused() -> list[tuple[str, bytes]]:
        try:
            rows = read_table(lake, REJECTED_MARKS, STREAM)
        except Exception:  # no mark refused yet: no table
            return []
        return [(r["reason"], bytes(r["raw"])) for r in rows if r["writer"] == owner.writer_id]

    wait_until(refused, RECOVERY_S, "the squatter's mark refused")
    assert refused() == [(Reason.IMPERSONATED, squatted)]
    vouched = [r["vouchers"] for r in read_table(lake, MARKS, STREAM) if r["time"] >= job_max]
    owner_voucher = {"writer": owner.writer_id, "instance": owner.instance}
    assert vouched and all(owner_voucher in v for v in vouched), vouched


def claim_writer_id(d: Deployment, writer_id: str) -> bytes:
    """As principal ``sparkjob`` (its own ZooKeeper digest credentials and a writer's Kafka
    grants), try to take ``writer_id`` of the stream: the registration must be refused;
    then send a mark under the id with a token of its own anyway. The mark's bytes."""
    with pytest.raises(WriterIdOwnedError, match=f"{writer_id!r} of stream {STREAM!r}"):
        d.store_as("sparkjob").register_writer(STREAM, writer_id, "squatter")
    with d.as_user("sparkjob"):
        config = client_config(d.bootstrap)
    now = time.time_ns() // 1_000_000
    mark = mark_message(d.cluster, STREAM, writer_id, WriterMark(now, {}), instance="squatter")
    delivered = produce_mark(config, mark, 30)
    assert delivered == [None], f"the squatter's mark was not stored: {delivered}"
    return mark.value


def test_window_run_answers_from_the_object_store(running: Running, tmp_path: Path) -> None:
    """``tidemark window run`` over a complete window: exactly the stream's records
    whose time lies in it, counted from Kafka."""
    d = running.deployment
    marks = running.watermarks()
    start, end = marks[0].time, marks[-2].time
    out = admin_cli(
        d,
        "window",
        "run",
        STREAM,
        "--from",
        str(start),
        "--to",
        str(end),
        "--output",
        str(tmp_path / "window"),
        timeout_s=300,
    )
    result = json.loads(out.splitlines()[-1])
    inside = [t for *_, t in stream_records(d, STREAM) if start <= t < end]
    assert (result["window_start"], result["events"]) == (start, len(inside)), result


POLICY_STREAM = "deploy/policies"


def test_retention_and_autoscaling_act_as_the_controller_not_as_a_writer(
    running: Running,
) -> None:
    """``tidemark controller policies`` as the controller's principal splits a hot
    stream and truncates what its retention lets go; a writer's principal may do
    neither."""
    d = running.deployment
    store = running.store
    manager = StreamManager(store, d.bootstrap, d.cluster)
    config = StreamConfiguration(
        ScalingPolicy.by_event_rate(40, 2, 1), retention_policy=RetentionPolicy.by_time(8_000)
    )
    with d.as_user("admin"):
        manager.create(POLICY_STREAM, config)
    noter = Noter(d, "policy-writer", stream=POLICY_STREAM, per_round=20)
    policies = ManagedProcess(
        "policies",
        [
            *TIDEMARK,
            "controller",
            "policies",
            "--instance",
            "deployed",
            "--policy-interval-ms",
            "1000",
            "--rate-window-ms",
            "2000",
            # The first split comes a cooldown after the stream's creation, the next a
            # cooldown after that: the test has seen the first and stopped the loop by
            # then (a scale cut short by stopping the loop blocks writers).
            "--scale-cooldown-ms",
            "20000",
            "--delta-root",
            d.delta_root,
        ],
        d.tmp / "policies.log",
        env=d.process_env("controller"),
        cwd=ROOT,
    )
    policies.start()
    try:
        wait_until(
            lambda: (
                len(store.get_stream(POLICY_STREAM).epochs) > 1
                and store.get_stream(POLICY_STREAM).truncation is not None
            ),
            RECOVERY_S,
            "the policy loop split and truncated the stream",
            policies,
        )
    finally:
        noter.stop()  # before the loop stops: a writer closing waits for a scale to finish
        policies.stop()
        print("--- policies", policies.log_tail(20), sep="\n")
    assert noter.error is None, noter.error
    meta = store.get_stream(POLICY_STREAM)
    truncation = dict(meta.truncation or {})
    assert any(truncation.values()), truncation
    with d.as_user("admin"):  # a client keeps the principal it was first used as
        starts = StreamTopics(d.bootstrap).start_offsets(meta.topic, list(truncation))
    assert all(starts[s] >= o for s, o in truncation.items()), (starts, truncation)
    with d.as_user("writer"):
        topics = StreamTopics(d.bootstrap, timeout_s=10)
        with pytest.raises(KafkaOperationError, match="AUTHORIZATION"):
            topics.ensure_partitions(meta.topic, 16)
        with pytest.raises(KafkaOperationError, match="AUTHORIZATION"):
            topics.delete_records(meta.topic, {0: max(truncation.values())})
    check_sequence(running.watermarks(POLICY_STREAM))
    report(
        "deploy-policies",
        f"policy loop as controller: {len(meta.epochs) - 1} scale(s), truncated to "
        f"{truncation}; a writer could do neither",
    )


LIVE_STREAM = "deploy/live"


def test_a_writer_timeout_update_applies_without_restart(running: Running) -> None:
    """A silent writer holds the stream under a 10 min timeout; ``tidemark stream update``
    to 1 s drops it in the running controller (no restart): the watermark moves on."""
    d = running.deployment
    store = running.store
    config = StreamConfiguration(ScalingPolicy.fixed(1), timestamp_aggregation_timeout_ms=600_000)
    with d.as_user("admin"):
        StreamManager(store, d.bootstrap, d.cluster).create(LIVE_STREAM, config)
    noters = [Noter(d, w, stream=LIVE_STREAM) for w in ("live-1", "live-2")]
    try:
        wait_until(lambda: len(running.watermarks(LIVE_STREAM)) >= 2, RECOVERY_S, "watermarks")
        noters[1].silence()
        silent_at = noters[1].noted
        time.sleep(5)  # five intervals: under a 10 min timeout the silent writer holds
        held = running.watermarks(LIVE_STREAM)
        assert max(m.time for m in held) <= silent_at, "a 10 min timeout dropped the writer"
        admin_cli(d, "stream", "update", LIVE_STREAM, "--aggregation-timeout-ms", "1000")
        updated = time.monotonic()
        took_s = wait_until(
            lambda: max(m.time for m in running.watermarks(LIVE_STREAM)) > silent_at,
            60,
            "the watermark passes the silent writer after the update",
            *running.drivers_alive(),
        )
        print(f"timeout update applied {time.monotonic() - updated:.1f} s after it")
    finally:
        for noter in noters:
            noter.stop()
    assert all(n.error is None for n in noters), [n.error for n in noters]
    check_sequence(running.watermarks(LIVE_STREAM))
    report("deploy-live-timeout", f"stream update of the timeout applied in {took_s:.1f} s")


def test_no_password_in_a_log_an_argv_an_answer_or_an_error(running: Running) -> None:
    """With every principal's password known, none is in a log file of the deployment, the
    command line of a process it started, ``tidemark status``, ``tidemark serve``'s pages
    or a refused command's error."""
    d = running.deployment
    secrets = {ADMIN_PASSWORD, *USERS.values(), *ZK_PASSWORDS.values(), d.s3.secret_key}
    seen: dict[str, str] = {}
    env = {**d.process_env("mallory"), SERVICE_TIMEOUT_MS: "8000"}
    commands = (
        ([*TIDEMARK, "read", STREAM, "--count", "1"], env),  # authenticated, no ACL
        (  # a wrong password
            [*TIDEMARK, "-X", "sasl.password=mallory-pw-wrong", "read", STREAM, "--count", "1"],
            env,
        ),
        ([*TIDEMARK, "status"], d.process_env("admin")),
    )
    for n, (argv, who) in enumerate(commands):
        done = subprocess.run(argv, env=who, capture_output=True, text=True, timeout=120, cwd=ROOT)
        seen[f"command {n}: tidemark {argv[-4:]}"] = done.stdout + done.stderr
    secrets.add("mallory-pw-wrong")
    port = free_port()
    serve = ManagedProcess(
        "serve-secrets", [*TIDEMARK, "serve", "--port", str(port)], d.tmp / "serve-2.log",
        env=d.process_env("reader"), cwd=ROOT,
    )  # fmt: skip
    serve.start()
    try:
        for path in ("/", "/metrics", f"/api/streams/{STREAM}/start?t=0", "/api/nowhere"):
            seen[path] = ""

            def fetched(path: str = path) -> bool:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                        seen[path] = r.read().decode(errors="replace")
                except urllib.error.HTTPError as exc:
                    seen[path] = exc.read().decode(errors="replace")
                except OSError:
                    return False
                return True

            wait_until(fetched, 60, f"tidemark serve answers {path}", serve)
    finally:
        serve.stop()
    for path in d.tmp.rglob("*"):
        if path.is_file() and (path.suffix == ".log" or path.name in ("stdout", "stderr")):
            seen[str(path)] = path.read_text(errors="replace")
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            seen[f"argv of {proc.pid}"] = " ".join(proc.cmdline())
    leaks = sorted({(where, s) for where, text in seen.items() for s in secrets if s in text})
    assert leaks == [], leaks
    report("deploy-secrets", f"no password in {len(seen)} logs, argvs, answers and errors")
