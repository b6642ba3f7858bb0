"""Spark reads a stream by time (``pipelines.kafka_source_options``): the recipes of
``docs/guides/spark-by-time.md`` on real Kafka, ZooKeeper, Spark and Delta -- a batch job
reading exactly one complete hour of a stream scaled midway, a Structured Streaming query
starting at a time, and pandas reading the ``marks`` table through ``deltalake`` (no Spark,
no ZooKeeper)."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from tests.integration import test_reader_group as rg
from tidemark.controller.model import KeyRange
from tidemark.controller.naming import topic_for
from tidemark.pipelines import kafka_source_options
from tidemark.pipelines.reading.exceptions import StreamNotCompleteError
from tidemark.pipelines.writing.writer import EventWriter

HOUR = 3_600_000
Marks = rg.Marks
make_stream = rg.make_stream
# the shared fixtures
manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _write_hours(manager, store, kafka, wconfig, stream, root):
    """Four hours of events, 10 minutes apart, keys spread over the segments; the writer
    notes the end of hours 0-2 (hour 3 is not complete); segment 0 splits after hour 1.
    Returns {hour: sorted values}."""
    h0 = (int(time.time() * 1000) - 6 * HOUR) // HOUR * HOUR
    marks = Marks(stream, store, root)
    written: dict[int, list[bytes]] = {}
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for hour in range(4):
            if hour == 2:
                manager.scale(stream, [0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
            for i in range(6):
                value = f"h{hour}-e{i}".encode()
                w.write(value, routing_key=f"k{i}", timestamp=h0 + hour * HOUR + i * 600_000)
                written.setdefault(hour, []).append(value)
            w.flush()
            if hour < 3:
                marks.note(w, h0 + (hour + 1) * HOUR - 1)
                assert marks.cycle() is not None
    return h0, {h: sorted(v) for h, v in written.items()}


def _values(frame, start_ms, end_ms=None):
    ts = F.unix_millis(F.col("timestamp"))
    keep = ts >= start_ms if end_ms is None else (ts >= start_ms) & (ts < end_ms)
    return sorted(bytes(r.value) for r in frame.where(keep).select("value").collect())


def test_spark_reads_one_complete_hour_and_streams_from_a_time(
    spark, manager, store, kafka, wconfig, unique, tmp_path
):
    root = str(tmp_path / "delta")
    stream = make_stream(manager, unique)
    h0, written = _write_hours(manager, store, kafka, wconfig, stream, root)

    # A scheduled batch job: exactly hour 1 (segment 0 splits after it).
    for hour in (1, 2):
        start, end = h0 + hour * HOUR, h0 + (hour + 1) * HOUR
        options = kafka_source_options(stream, start, end, bootstrap_servers=kafka, delta_root=root)
        assert "assign" in options and "endingOffsets" in options
        frame = spark.read.format("kafka").options(**options).load()
        assert _values(frame, start, end) == written[hour]

    # Hour 3 has no watermark at its end: not complete, refused with the time named.
    with pytest.raises(StreamNotCompleteError, match=str(h0 + 4 * HOUR - 1)):
        kafka_source_options(
            stream, h0 + 3 * HOUR, h0 + 4 * HOUR, bootstrap_servers=kafka, delta_root=root
        )

    # A Structured Streaming query starting at the beginning of hour 2.
    start = h0 + 2 * HOUR
    options = kafka_source_options(stream, start, bootstrap_servers=kafka, delta_root=root)
    assert options["subscribe"] == topic_for(stream) and "endingOffsets" not in options
    query = (
        spark.readStream.format("kafka")
        .options(**options)
        .load()
        .writeStream.format("memory")
        .queryName(f"from_time_{unique}")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    streamed = spark.table(f"from_time_{unique}")
    assert _values(streamed, start) == sorted(written[2] + written[3])

    # pandas reads the marks table through deltalake: one row per watermark.
    marks = DeltaTable(f"{root}/marks").to_pandas()
    mine = marks[marks["stream"] == stream].sort_values("time")
    assert list(mine["time"]) == [h0 + (hour + 1) * HOUR - 1 for hour in range(3)]
