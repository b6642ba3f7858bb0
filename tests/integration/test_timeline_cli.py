"""``tidemark timeline ...`` against a real PostgreSQL (and Kafka for relay)."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from tidemark.cli import timeline as cli
from tidemark.environment import POSTGRES_DSN
from tidemark.errors import TidemarkError


def run(capsys, *argv):
    parser = argparse.ArgumentParser(prog="tidemark")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["timeline", *argv, "--format", "json"])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(autouse=True)
def _dsn(monkeypatch, postgres):
    monkeypatch.setenv(POSTGRES_DSN, postgres)


def test_cli_round_trip(capsys, unique):
    name = f"cli-{unique}"
    assert run(capsys, "create", name, "--buckets", "2")[0]["buckets"] == 2
    assert run(capsys, "put", name, "--group", "g", "--id", "a", "--body", "hi", "--in-ms", "0")[0][
        "new"
    ]
    assert not run(
        capsys, "put", name, "--group", "g", "--id", "a", "--body", "hi", "--in-ms", "0"
    )[0]["new"]
    run(capsys, "put", name, "--group", "g", "--id", "b", "--body", "later", "--in-ms", "600000")
    counts = run(capsys, "count", name)[0]
    assert (counts["available"], counts["waiting"]) == (1, 1)
    (leased,) = run(capsys, "lease", name, "--consumer", "c1", "--duration-ms", "60000")
    assert (leased["id"], leased["lock_consumer"], leased["body"]) == ("a", "c1", "hi")
    token = leased["token"]
    with pytest.raises(TidemarkError, match=r"\[lease-token\]"):
        run(capsys, "extend", name, "a", "--consumer", "c1", "--token", "guess", "--by-ms", "1")
    extended = run(
        capsys, "extend", name, "a", "--consumer", "c1", "--token", token, "--by-ms", "120000"
    )[0]
    assert extended["version"] == leased["version"] + 1
    released = run(capsys, "release", name, "a", "--consumer", "c1", "--token", token)
    assert released[0]["lock_consumer"] is None
    (again,) = run(capsys, "lease", name, "--consumer", "c2", "--id", "a")
    with pytest.raises(TidemarkError, match=r"\[lease-token\]"):
        run(capsys, "delete", name, "a", "--consumer", "c2", "--token", token)
    deleted = run(capsys, "delete", name, "a", "--consumer", "c2", "--token", again["token"])
    assert deleted[0]["deleted"]
    assert run(capsys, "delete", name, "b", "--group", "g")[0]["deleted"]
    assert run(capsys, "count", name)[0]["total"] == 0


def test_cli_refusals_are_tidemark_errors(capsys, unique):
    name = f"cli-{unique}"
    run(capsys, "create", name)
    run(capsys, "put", name, "--group", "g", "--id", "a", "--body", "x", "--in-ms", "600000")
    with pytest.raises(TidemarkError, match=r"\[not-owner\]"):
        run(capsys, "delete", name, "a", "--group", "other")
    with pytest.raises(TidemarkError, match=r"\[unknown-timeline\]"):
        run(capsys, "count", "missing-" + name)


def test_cli_relay(capsys, unique, kafka):
    from confluent_kafka.admin import AdminClient, NewTopic

    name, topic = f"cli-{unique}", f"cli-out-{unique}"
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    run(capsys, "create", name)
    for i in range(3):
        run(capsys, "put", name, "--group", "g", "--body", f"m{i}", "--in-ms", "0")
    run(capsys, "put", name, "--group", "g", "--id", "gone", "--body", "x", "--in-ms", "9999")
    run(capsys, "delete", name, "gone", "--group", "g")
    # The relay host purges deleted messages on its schedule without being asked.
    result = run(
        capsys,
        "relay",
        name,
        "--topic",
        topic,
        "--consumer",
        "r",
        "--bootstrap",
        kafka,
        "--duration-s",
        "6",  # generous: on a loaded machine the relay's start alone took over 1.5 s
        "--purge-every-ms",
        "100",
        "--keep-deleted-ms",
        "0",
    )
    assert result[0]["relayed"] == 3 and result[0]["failed"] == 0
    assert result[0]["purged"] >= 1
    from prometheus_client import REGISTRY

    from tidemark.pipelines.timeline.producer import TimelineProducer
    from tidemark.pipelines.timeline.store import TimelineStore

    with TimelineStore(os.environ[POSTGRES_DSN]) as store:
        assert store.get(name, "gone", include_deleted=True) is None
    drift = "tidemark_timeline_clock_drift_seconds"
    assert REGISTRY.get_sample_value(drift, {"timeline": name}) is not None  # the relay's
    other = f"cli-p-{unique}"
    run(capsys, "create", other)
    with TimelineProducer(os.environ[POSTGRES_DSN], other, "g"):
        assert REGISTRY.get_sample_value(drift, {"timeline": other}) is not None
    with pytest.raises(SystemExit):  # --no-purge turns it off; --metrics-port is there
        run(capsys, "relay", name, "--topic", topic, "--consumer", "r", "--no-purge", "--bad")


def test_purge_verb_once_and_on_a_schedule(capsys, unique, postgres):
    import time

    from tidemark.pipelines.timeline.housekeeping import PurgeLoop, PurgeSettings
    from tidemark.pipelines.timeline.store import TimelineStore

    name = f"cli-{unique}"
    run(capsys, "create", name)
    for i in range(5):
        run(capsys, "put", name, "--group", "g", "--id", f"p{i}", "--body", "x", "--in-ms", "0")
        run(capsys, "delete", name, f"p{i}", "--group", "g")
    # kept for the hour a replayed create must still see them
    assert run(capsys, "purge")[0]["purged"] == 0
    time.sleep(0.05)
    first = run(capsys, "purge", "--keep-deleted-ms", "0", "--batch-size", "2")[0]
    assert first["purged"] >= 5 and first["passes"] == 1
    with TimelineStore(postgres) as store:
        assert store.get(name, "p0", include_deleted=True) is None
        # the scheduled loop: new deletions are purged by a later pass, with no call
        loop = PurgeLoop(store, PurgeSettings(interval_ms=50, keep_deleted_ms=0, batch_size=2))
        handle = loop.start()
        try:
            run(capsys, "put", name, "--group", "g", "--id", "late", "--body", "x", "--in-ms", "0")
            run(capsys, "delete", name, "late", "--group", "g")
            deadline = time.monotonic() + 20
            while store.get(name, "late", include_deleted=True) is not None:
                assert time.monotonic() < deadline, "the purge loop never removed it"
                time.sleep(0.05)
        finally:
            handle.stop()
        assert loop.passes >= 1 and not handle.running
    scheduled = run(capsys, "purge", "--every-ms", "50", "--duration-s", "0.3")[0]
    assert scheduled["passes"] >= 2


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--batch-size", "0", "batch_size"),
        ("--keep-deleted-ms", "-1", "keep_deleted_ms"),
        ("--every-ms", "0", "interval_ms"),
    ],
)
def test_purge_verb_bad_inputs(capsys, flag, value, message):
    with pytest.raises(TidemarkError, match=message):
        run(capsys, "purge", flag, value)


def test_put_due_at_stream_time(capsys, unique):
    name = f"cli-st-{unique}"
    run(capsys, "create", name, "--buckets", "2")
    row = run(
        capsys,
        "put",
        name,
        "--group",
        "g",
        "--id",
        "r",
        "--body",
        "report",
        "--stream",
        "s/x",
        "--stream-time",
        "5000",
    )[0]
    assert (row["due_stream"], row["timestamp_ms"]) == ("s/x", 5000)
    counts = run(capsys, "count", name)[0]
    assert (counts["available"], counts["waiting"]) == (0, 1)  # 5000 ms is long past: still waits
    with pytest.raises(TidemarkError, match="--stream and --stream-time"):
        run(capsys, "put", name, "--group", "g", "--body", "x", "--at-ms", "1", "--stream", "s/x")
