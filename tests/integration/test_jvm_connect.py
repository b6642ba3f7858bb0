"""Kafka Connect with the JVM interceptor: the guide's worker settings and a file source.

A standalone Connect worker runs the file source connector into a topic adopted as a
stream, its task producer's interceptor set by the guide's ``producer.``-prefixed worker
properties. The real controller job folds the task producer's marks: the watermarks follow
the lines the connector writes, and no seek by time skips a record (its start cut). A
complete window is not checked: the file source stamps a line when it polls it, and a note
taken before its producer sends it is complete without it (the guide says so). The worker
killed (SIGKILL: no shutdown mark) and started again is accepted under its writer id at
once: no ``impersonated`` row, and the watermark covers every record before the controller
would have forgotten the dead instance on its own (the writer timeout after its last mark).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.controller_env import Env
from tests.integration.test_dropin_producer import records
from tests.integration.test_jvm_interceptor import PARTITIONS, adopted, end_of, full, raw_marks
from tests.jvm_clients import assert_seeks_exact, parse_properties, properties, snippet
from tidemark.infra.connect import ConnectWorker
from tidemark.infra.jars import interceptor_jar
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.tables import REJECTED_MARKS, read_table, read_watermarks
from tidemark.schemas.records import WriterMarkRecord

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

WRITER_TIMEOUT_MS = 30_000
FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"


def append_lines(path: Path, first: int, count: int) -> list[bytes]:
    """Lines ``line-<first>`` ... appended to the connector's file; their bytes."""
    lines = [f"line-{i}" for i in range(first, first + count)]
    with path.open("a") as out:
        out.write("".join(f"{line}\n" for line in lines))
    return [line.encode() for line in lines]


def events_holding(kafka: str, topic: str, wanted: list[bytes], timeout_s: float = 60) -> list[Any]:
    """The topic's records once they hold every line of ``wanted`` (a restarted task may
    send some again: Connect's source offsets are committed now and then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = records(kafka, topic, PARTITIONS)
        if set(wanted) <= {v for *_, v, _ in events}:
            return events
        assert time.monotonic() < deadline, f"{len(events)} records, {len(wanted)} lines"
        time.sleep(0.2)


def watermarks_covering(
    job: ControllerJob, root: str, stream: str, events: list[Any], deadline: float
) -> list[Any]:
    """The stream's watermarks once the last one's cut covers ``events`` (until ``deadline``,
    a monotonic time) and its time is past their latest timestamp."""
    ends, top = end_of(events), max(ts for *_, ts in events)
    while True:
        job.process_all_available()
        got = read_watermarks(root, stream)
        if got and full(got[-1].stream_cut) == ends and got[-1].time >= top:
            return got
        assert time.monotonic() < deadline, (ends, [dict(w.stream_cut) for w in got[-3:]])
        time.sleep(0.2)


def no_seek_skips(stream: str, events: list[Any], got: list[Any], root: str, env: Env) -> None:
    """No start cut by time skips one of ``events``. Complete windows are not checked: the
    file source stamps a line when it polls it, before its producer sends it, and a note
    taken in between is complete without it (the guide says so)."""
    seen = [(p, off, ts) for p, off, _, _, ts in events]
    assert_seeks_exact(
        stream, seen, got, root, env.store, complete_windows=False, writer_stopped=False
    )


def test_a_connect_source_keeps_time_and_its_restarted_worker_is_heard(
    spark: Any, controller_env: Env, tmp_path: Path, unique: str
) -> None:
    env = controller_env
    stream, topic = adopted(env.kafka, env.manager, unique, "lines")
    connector = f"lines-{unique}"
    source = tmp_path / "lines.txt"
    source.touch()
    worker_settings = parse_properties(
        properties(
            snippet("connect-worker.properties"),
            producer__tidemark__stream=stream,
            producer__tidemark__zookeeper__connect=env.zk_connect,
            producer__tidemark__marks__topic=env.cluster.marks_topic,
            producer__tidemark__bucket__count=str(env.cluster.bucket_count),
            producer__tidemark__note__interval__ms="200",
        )
    )
    worker = ConnectWorker(
        tmp_path / "connect",
        env.kafka,
        {
            "name": connector,
            "connector.class": FILE_SOURCE,
            "tasks.max": 1,
            "file": source,
            "topic": topic,
        },
        worker_settings,
        extra_jars=[str(interceptor_jar())],
    )
    settings = env.settings(writer_timeout_ms=WRITER_TIMEOUT_MS)
    root = settings.delta_root
    job = ControllerJob(spark, settings, f"c-{unique}").start()
    try:
        job.wait_leading()  # it made the marks topic
        worker.start()
        lines: list[bytes] = []
        followed = []  # the watermark follows each batch of the connector's lines
        for _ in range(2):
            lines += append_lines(source, len(lines), 300)
            events = events_holding(env.kafka, topic, lines)
            got = watermarks_covering(job, root, stream, events, time.monotonic() + 60)
            followed.append(got[-1])
        assert followed[0].time < followed[1].time
        assert sum(dict(followed[0].stream_cut).values()) == 300
        assert sum(dict(followed[1].stream_cut).values()) == 600
        no_seek_skips(stream, events, got, root, env)

        first = [WriterMarkRecord.decode(v) for v in raw_marks(env.kafka, env.cluster, stream)]
        worker.kill()  # a crash: no shutdown mark
        killed = time.monotonic()
        lines += append_lines(source, len(lines), 300)  # written while the worker is down
        worker.start()
        events = events_holding(env.kafka, topic, lines)
        # heard at once: before the controller forgets the dead instance by its timeout
        got = watermarks_covering(job, root, stream, events, killed + WRITER_TIMEOUT_MS / 1000)
        rejected = read_table(root, REJECTED_MARKS)
        worker.stop()  # its producer's shutdown mark: no time is noted after it
        job.process_all_available()
        got = read_watermarks(root, stream)
    finally:
        worker.stop()
        job.stop()

    writer = f"connector-producer-{connector}-0"  # the task producer's client.id
    marks = [WriterMarkRecord.decode(v) for v in raw_marks(env.kafka, env.cluster, stream)]
    assert {m.writer_id for m in marks} == {writer}
    assert len({m.instance for m in first}) == 1 and first[-1].alive  # the kill left no close
    assert len({m.instance for m in marks}) == 2  # the restarted worker's producer: a new token
    ours = [(r["writer"], r["reason"]) for r in rejected if r["stream"] == stream]
    assert (writer, "impersonated") not in ours, ours
    assert {v for *_, v, _ in events} == set(lines)
    no_seek_skips(stream, events, got, root, env)
