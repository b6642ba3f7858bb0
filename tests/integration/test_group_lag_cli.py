"""``tidemark group list | describe``: each group's lag in records, checked against Kafka's
own committed offsets and end offsets, and in time, against the group's time window."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry

from tests.integration import test_reader_group as rg
from tests.integration.test_reader_cli import cli_env, run
from tidemark.controller.timestamps import wall_clock_ms
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.writing.writer import EventWriter
from tidemark.service.group_metrics import GroupLagCollector

Marks = rg.Marks
make_stream = rg.make_stream
# the shared fixtures
manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig
cli_env = cli_env

pytestmark = pytest.mark.slow


def _kafka_lag(kafka, group, topic, partitions):
    """What Kafka itself says: sum over partitions of end offset - committed offset."""
    consumer = Consumer(
        {"bootstrap.servers": kafka, "group.id": group, "log_level": 0, "enable.auto.commit": False}
    )
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        lag = 0
        for tp in committed:
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            lag += high - max(tp.offset, 0)
        return lag
    finally:
        consumer.close()


def test_group_list_and_describe_give_lag_in_records_and_time(
    cli_env, capsys, manager, store, kafka, wconfig, unique
):
    root = cli_env
    stream = make_stream(manager, unique, segments=1)  # 12 read: past the first watermark
    marks = Marks(stream, store, root)
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        rg.write_rounds(
            marks,
            ((w, 0),),
            rounds=3,
            per_round=10,
            noted_ms=50,
            event=lambda _w, j, ts: (b"x", f"k{j}"),
        )
    name = f"lag{unique}"
    group = ReaderGroup.create(name, stream, **rg.group_kw(store, kafka, root))
    with group.reader("r1") as reader:
        got = [reader.read_next(timeout_ms=5_000) for _ in range(12)]
        assert all(e is not None for e in got)
        reader.commit()
        window = group.current_time_window()
        consumer_group = group.consumer_settings("probe")["group.id"]
        partitions = [s.number for s in group.segments().values()]
        topic = group.topic

        code, out, _ = run(capsys, "group", "describe", name, "--format", "json")
        assert code == 0
        row = json.loads(out)
        assert row["lag_records"] == _kafka_lag(kafka, consumer_group, topic, partitions) == 30 - 12
        assert row["time"] == window.lower == rg.BASE + 50 and row["stream"] == stream
        assert 0 <= wall_clock_ms() - row["time"] - row["lag_ms"] < 60_000
        assert row["readers"] == 1

        code, out, _ = run(capsys, "group", "list", "--format", "json")
        rows = [json.loads(line) for line in out.splitlines()]
        assert [r["group"] for r in rows if r["group"] == name] == [name]

        code, out, _ = run(capsys, "group", "describe", name)
        assert "lag: 18 record(s)" in out

        # The time service's metrics say the same (tidemark serve's /metrics).
        registry = CollectorRegistry()
        registry.register(GroupLagCollector(store, kafka, root))
        labels = {"group": name, "stream": stream}
        assert registry.get_sample_value("tidemark_reader_group_lag_records", labels) == 18
        behind = registry.get_sample_value("tidemark_reader_group_time_lag_seconds", labels)
        assert abs(behind * 1000 - (wall_clock_ms() - window.lower)) < 60_000
    group.close()
    code, _, err = run(capsys, "group", "describe", f"nope{unique}")
    assert code == 1 and f"nope{unique}" in err
