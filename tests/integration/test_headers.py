"""Kafka headers end to end on real Kafka + ZooKeeper (and Spark): every producer writes
them, every reader gives them back byte for byte.

Producers: ``EventWriter.write``, a ``TransactionalWriter`` transaction, the drop-in
``TidemarkProducer`` and (Spark) ``tidemark.jobs.stream_writer``'s ``headers`` column. Readers:
``read_next``, ``read_batch``, ``tidemark read --format json`` and (Spark) a batch read
of the stream's topic with ``includeHeaders``.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from tests.integration import test_reader_group as reading
from tests.integration.test_reader_batch import read_batches
from tests.integration.test_reader_cli import cli_env, run
from tests.integration.test_reader_group import BASE, group_kw, make_stream, read_all
from tidemark.jobs.stream_writer import StreamTarget, write_to_stream
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.writing.exceptions import InvalidHeaderError
from tidemark.pipelines.writing.producer import TidemarkProducer
from tidemark.pipelines.writing.transactions import TransactionalWriter
from tidemark.pipelines.writing.writer import EventWriter

settings, store, manager, wconfig = (
    reading.settings,
    reading.store,
    reading.manager,
    reading.wconfig,
)
__all__ = ["cli_env", "manager", "settings", "store", "wconfig"]  # fixtures, shared

Headers = tuple[tuple[str, bytes], ...]

# Repeated names, an empty value, bytes that are not UTF-8, non-ASCII text.
RICH: Headers = (
    ("trace-id", b"4bf92f3577b34da6"),
    ("hop", b"a"),
    ("hop", b"b"),
    ("empty", b""),
    ("bin", bytes(range(250, 256)) + b"\x00\xc3"),
    ("text", "café".encode()),
)


def _headers_of(i: int) -> Headers:
    return (*RICH, ("n", str(i).encode()))


def dropin(stream: str, store: Any, kafka: str, wconfig: Any) -> TidemarkProducer:
    return TidemarkProducer(
        {"bootstrap.servers": kafka},
        stream=stream,
        writer_id="p",
        store=store,
        cluster=wconfig.cluster,
    )


def write_with_every_python_producer(stream: str, store: Any, kafka: str, wconfig: Any) -> dict:
    """Body -> headers written: EventWriter (pairs and mapping), a transaction, the drop-in."""
    written: dict[bytes, Headers] = {}
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for i in range(6):
            body = f"writer-{i}".encode()
            written[body] = _headers_of(i)
            w.write(body, f"k{i}", timestamp=BASE + i, headers=list(written[body]))
        w.write(b"writer-map", "k", timestamp=BASE + 6, headers={"content-type": b"text/plain"})
        written[b"writer-map"] = (("content-type", b"text/plain"),)
        w.write(b"writer-none", "k", timestamp=BASE + 7)
        written[b"writer-none"] = ()
    with TransactionalWriter(
        "t", stream, store=store, bootstrap_servers=kafka, config=wconfig
    ) as tw:
        txn = tw.begin()
        for i in range(4):
            body = f"txn-{i}".encode()
            written[body] = _headers_of(i)
            txn.write(body, f"k{i}", timestamp=BASE + 10 + i, headers=list(written[body]))
        txn.commit(BASE + 20)
    topic = store.get_stream(stream).topic
    producer = dropin(stream, store, kafka, wconfig)
    for i in range(4):
        body = f"dropin-{i}".encode()
        written[body] = _headers_of(i)
        producer.produce(
            topic, body, f"k{i}".encode(), timestamp=BASE + 30 + i, headers=list(written[body])
        )
    producer.note_time(BASE + 40)
    producer.close()
    return written


def test_headers_from_every_producer_read_back_byte_identical(
    cli_env, capsys, manager, store, kafka, wconfig, unique, tmp_path
):
    stream = make_stream(manager, unique, segments=2)
    written = write_with_every_python_producer(stream, store, kafka, wconfig)

    group = ReaderGroup.create(f"g{unique}", stream, **group_kw(store, kafka, str(tmp_path)))
    with group, group.reader("r") as reader:
        events = read_all(reader)
    assert {e.body: e.headers for e in events} == written

    batched = ReaderGroup.create(f"b{unique}", stream, **group_kw(store, kafka, str(tmp_path)))
    with batched, batched.reader("r") as reader:
        batches = read_batches(reader, 5)
    assert {e.body: e.headers for b in batches for e in b.events} == written

    code, out, err = run(capsys, "read", stream, "--format", "json", "--wait-ms", "3000")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert {row["body"].encode(): _decoded(row["headers"]) for row in rows} == written
    by_body = {row["body"]: row["headers"] for row in rows}
    assert by_body["writer-0"][4] == {
        "name": "bin",
        "value": base64.b64encode(RICH[4][1]).decode(),
        "value_encoding": "base64",
    }
    assert by_body["writer-0"][5] == {"name": "text", "value": "café"}
    assert by_body["writer-none"] == []


def _decoded(headers: list[dict[str, Any]]) -> Headers:
    return tuple(
        (
            h["name"],
            base64.b64decode(h["value"])
            if h.get("value_encoding") == "base64"
            else h["value"].encode(),
        )
        for h in headers
    )


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ([("ok", b"1"), (7, b"x")], "header 1 (7): name must be str"),
        ([("trace-id", "text")], "header 0 ('trace-id'): value must be bytes, got str"),
        ({"n": 5}, "header 0 ('n'): value must be bytes, got int"),
        ([("only-a-name",)], "header 0: must be a (name, value) pair"),
        ("trace-id=1", "headers must be a list of (name, value) pairs"),
    ],
)
def test_bad_headers_are_named_and_nothing_is_sent(
    manager, store, kafka, wconfig, unique, headers, named
):
    stream = make_stream(manager, unique, segments=1)
    topic = store.get_stream(stream).topic
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        with pytest.raises(InvalidHeaderError, match=_literal(named)):
            w.write(b"x", "k", headers=headers)
        w.flush()
        assert w.position() == {}
    with TransactionalWriter(
        "t", stream, store=store, bootstrap_servers=kafka, config=wconfig
    ) as tw:
        txn = tw.begin()
        with pytest.raises(InvalidHeaderError, match=_literal(named)):
            txn.write(b"x", "k", headers=headers)
        txn.commit()
        assert tw.committed_position == {}
    producer = dropin(stream, store, kafka, wconfig)
    if "value must be bytes, got str" not in named:  # Producer takes text values
        with pytest.raises(InvalidHeaderError, match=_literal(named.split(": value")[0])):
            producer.produce(topic, b"x", b"k", headers=headers)
    assert producer.flush(10) == 0 and len(producer) == 0
    assert producer.position(stream) == {}
    producer.close()


def test_headers_changed_in_place_are_checked_again(
    manager, store, kafka, wconfig, unique, tmp_path
):
    """EventWriter.write reuses its checked copy of headers equal to the last ones: a list
    given again after a change in place is checked again, and a record keeps its own."""
    stream = make_stream(manager, unique, segments=1)
    headers: list[Any] = [("trace-id", b"1")]
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        w.write(b"a", "k", headers=headers)
        headers[0] = ("trace-id", "text")
        with pytest.raises(InvalidHeaderError, match=_literal("value must be bytes, got str")):
            w.write(b"x", "k", headers=headers)
        headers[0] = ("trace-id", b"2")
        w.write(b"b", "k", headers=headers)
        w.flush()
    group = ReaderGroup.create(f"g{unique}", stream, **group_kw(store, kafka, str(tmp_path)))
    with group, group.reader("r") as reader:
        events = read_all(reader)
    assert [(e.body, e.headers) for e in events] == [
        (b"a", (("trace-id", b"1"),)),
        (b"b", (("trace-id", b"2"),)),
    ]


def _literal(text: str) -> str:
    return re.escape(text)


@pytest.mark.spark
def test_spark_writer_headers_column_and_a_spark_batch_read(
    spark, kafka, zookeeper, manager, store, wconfig, unique
):
    """The Spark writer takes Spark's Kafka-sink headers column; a Spark batch read of
    the topic (``includeHeaders``) gives every producer's headers back byte for byte."""
    stream = make_stream(manager, unique, segments=2)
    written = write_with_every_python_producer(stream, store, kafka, wconfig)
    rows = [
        (f"k{i}", f"spark-{i}", BASE + 50 + i, [{"key": k, "value": v} for k, v in _headers_of(i)])
        for i in range(6)
    ] + [("k", "spark-none", BASE + 60, None)]
    df = spark.createDataFrame(
        rows,
        "key string, value string, event_time long, "
        "headers array<struct<key: string, value: binary>>",
    ).repartition(2)
    target = StreamTarget(stream, kafka, f"{zookeeper}/tidemark-test-{unique}", wconfig.cluster)
    reports = write_to_stream(df, target, job_id="h", batch_id=1)
    assert sum(r.events for r in reports) == len(rows)
    written.update({f"spark-{i}".encode(): _headers_of(i) for i in range(6)})
    written[b"spark-none"] = ()

    read = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka)
        .option("subscribe", store.get_stream(stream).topic)
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select("value", "headers")
        .collect()
    )
    got = {
        bytes(r["value"]): tuple((h["key"], bytes(h["value"])) for h in r["headers"] or ())
        for r in read
    }
    assert got == written

    bad = spark.createDataFrame(
        [("k", "v", BASE, [{"key": "h", "value": None}])],
        "key string, value string, event_time long, "
        "headers array<struct<key: string, value: binary>>",
    )
    # The task's JobConfigurationError, as Spark re-raises it on the driver: named.
    with pytest.raises(Exception, match="column 'headers"):
        write_to_stream(bad, target, job_id="bad", batch_id=1, register=False)
