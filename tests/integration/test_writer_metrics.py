"""Writers' Prometheus counters against a real broker."""

from __future__ import annotations

from prometheus_client import REGISTRY

from tests.integration import test_reader_group as rg
from tidemark.pipelines.writing.writer import EventWriter

manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig


def test_marks_sent_are_counted_per_stream(manager, store, kafka, wconfig, unique):
    stream = rg.make_stream(manager, unique, segments=2)
    labels = {"stream": stream}
    assert REGISTRY.get_sample_value("tidemark_writer_marks_sent_total", labels) is None
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        w.write(b"x", routing_key="k", timestamp=rg.BASE)
        w.note_time(rg.BASE)
        w.note_time(rg.BASE + 1)
        w.flush()
        assert REGISTRY.get_sample_value("tidemark_writer_marks_sent_total", labels) == 2
    # close() sends the shutdown mark
    assert REGISTRY.get_sample_value("tidemark_writer_marks_sent_total", labels) == 3
    failures = {"stream": stream, "kind": "event"}
    assert REGISTRY.get_sample_value("tidemark_writer_delivery_failures_total", failures) is None
