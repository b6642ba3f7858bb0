"""Waiting for stream time on real Kafka + ZooKeeper writers and real Delta tables.

Watermarks come from ``watermark_cycle`` over the writers' own positions and are
appended with deltalake (as in test_reader_group), so the Spark job is not needed.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.integration import test_reader_group as rg
from tidemark.cli.main import main
from tidemark.controller.laggards import LAGGING, laggards
from tidemark.pipelines.reading.exceptions import StreamTimeTimeoutError
from tidemark.pipelines.reading.lateness import append_laggards, read_laggards
from tidemark.pipelines.reading.stream_time import EXIT_NOT_YET, DeltaWatermarkSource, wait_for_time
from tidemark.pipelines.writing.writer import EventWriter

BASE = rg.BASE
manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig


def test_wait_wakes_on_the_watermark_and_times_out_naming_the_laggard(
    manager, store, kafka, zookeeper, wconfig, unique, tmp_path, capsys, monkeypatch
):
    root = str(tmp_path)
    # the verbs check the stream in this ZooKeeper (the store's chroot)
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", f"{zookeeper}/tidemark-test-{unique}")
    stream = rg.make_stream(manager, unique)
    marks = rg.Marks(stream, store, root)
    with (
        EventWriter("a", stream, store=store, bootstrap_servers=kafka, config=wconfig) as a,
        EventWriter("b", stream, store=store, bootstrap_servers=kafka, config=wconfig) as b,
    ):
        for w in (a, b):
            w.write(b"x", routing_key="k", timestamp=BASE)
            marks.note(w, BASE + 100)
        assert marks.cycle().time == BASE + 100

        # Reached already: returns at once, with the first watermark at or after T.
        assert wait_for_time(stream, BASE + 50, 0, delta_root=root).seq == 0

        def later():
            time.sleep(1.0)
            for w in (a, b):
                w.write(b"y", routing_key="k", timestamp=BASE + 150)
                marks.note(w, BASE + 200)
            marks.cycle()

        polls = []
        real_poll = DeltaWatermarkSource.poll

        def counted(self):
            polls.append(time.monotonic())
            return real_poll(self)

        DeltaWatermarkSource.poll = counted
        try:
            thread = threading.Thread(target=later)
            started = time.monotonic()
            thread.start()
            got = wait_for_time(stream, BASE + 200, 30_000, delta_root=root)
            waited = time.monotonic() - started
            thread.join()
        finally:
            DeltaWatermarkSource.poll = real_poll
        assert got.time >= BASE + 200 and got.seq == 1
        assert waited >= 0.9  # not before the watermark
        assert len(polls) <= 4  # woken by the table's new version, not by polling it

        # a stops noting; b moves on: a lags, nothing more is emitted.
        b.write(b"z", routing_key="k", timestamp=BASE + 250)
        marks.note(b, BASE + 400)
        assert marks.cycle() is None
        found = laggards(stream, marks.marks, marks.state, now_ms=int(time.time() * 1000))
        assert [(x.writer, x.kind, x.behind_ms) for x in found] == [("a", LAGGING, 200)]
        append_laggards(root, stream, int(time.time() * 1000), found)

        with pytest.raises(StreamTimeTimeoutError) as err:
            wait_for_time(stream, BASE + 300, 300, delta_root=root)
        assert err.value.last.time == BASE + 200
        assert err.value.holding[0].startswith("a (lagging")
        assert "200 ms behind" in str(err.value)

        code = main(
            ["wait", stream, "--time", str(BASE + 300), "--timeout-ms", "200", "--delta-root", root]
        )
        assert code == EXIT_NOT_YET == 75
        assert "a (lagging" in capsys.readouterr().err
        assert (
            main(
                [
                    "wait",
                    stream,
                    "--time",
                    str(BASE + 150),
                    "--delta-root",
                    root,
                    "--format",
                    "json",
                ]
            )
            == 0
        )
        assert json.loads(capsys.readouterr().out)["seq"] == 1

        assert main(["laggards", stream, "--delta-root", root, "--format", "json"]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [(r["writer"], r["kind"], r["behind_ms"]) for r in rows] == [("a", "lagging", 200)]
        # The same in a fresh process, as a user runs them (no pandas, no numpy).
        from tests.integration.test_reader_cli import run_fresh

        _, out, loaded = run_fresh("laggards", stream, "--delta-root", root, "--format", "json")
        assert [json.loads(line)["writer"] for line in out.splitlines()] == ["a"]
        assert loaded == "[]"
        _, out, loaded = run_fresh(
            "wait", stream, "--time", str(BASE + 150), "--delta-root", root, "--format", "json"
        )
        assert json.loads(out)["seq"] == 1 and loaded == "[]"

        # a catches up: the next snapshot is clear, and the wait succeeds.
        marks.note(a, BASE + 400)
        assert marks.cycle().time == BASE + 400
        append_laggards(root, stream, int(time.time() * 1000) + 1, [])
        assert read_laggards(root, stream) == []
        assert wait_for_time(stream, BASE + 300, 5_000, delta_root=root).time == BASE + 400


def test_a_reader_counts_late_events_per_segment(manager, store, kafka, wconfig, unique, tmp_path):
    from confluent_kafka import Producer

    from tidemark.pipelines.reading.group import ReaderGroup
    from tidemark.pipelines.reading.lateness import LateEvents

    root = str(tmp_path)
    stream = rg.make_stream(manager, unique, segments=1)
    marks = rg.Marks(stream, store, root)
    with EventWriter("a", stream, store=store, bootstrap_servers=kafka, config=wconfig) as a:
        for j in range(5):
            a.write(b"on time", routing_key="k", timestamp=BASE + j * 20)
        marks.note(a, BASE + 100)
        assert marks.cycle().time == BASE + 100
        # A producer that ignores the watermark: one event below it, one above.
        raw = Producer({"bootstrap.servers": kafka})
        topic = store.get_stream(stream).topic
        raw.produce(topic, b"late", partition=0, timestamp=BASE + 10)
        raw.produce(topic, b"fine", partition=0, timestamp=BASE + 500)
        assert raw.flush(15) == 0
        del raw  # no client left retrying once the suite stops Kafka
        a.write(b"on time", routing_key="k", timestamp=BASE + 600)
        marks.note(a, BASE + 700)
        marks.cycle()
    group = ReaderGroup.create(f"g{unique}", stream, **rg.group_kw(store, kafka, root))
    with group, group.reader("r") as reader:
        late = LateEvents(reader)
        bodies = []
        while (event := late.read_next(3_000 if not bodies else 1_500)) is not None:
            bodies.append(event.body)
    assert bodies == [b"on time"] * 5 + [b"late", b"fine", b"on time"]
    assert dict(late.counter.counts) == {0: 1} and late.counter.total == 1
    assert late.counter.seen[0] == 8
