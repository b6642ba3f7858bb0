"""Waiting for stream time through ``tidemark serve``, the parts that need no service:
the per-stream wake-ups, the kept history's answer, and a service that is down."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tidemark.controller.model import Watermark
from tidemark.pipelines.reading.exceptions import StreamTimeTimeoutError
from tidemark.pipelines.reading.stream_time import (
    DeltaWatermarkSource,
    ServiceWatermarkSource,
    wait_for_time,
    watermark_source,
)
from tidemark.pipelines.reading.time_service import TIME_SERVICE_ENV
from tidemark.service.state import StreamWaits, _History

S = "sc/st"


def rows(*seqs):
    """``marks`` rows: time 1000 * seq, upper + 400, offset 10 * (seq + 1)."""
    return [
        {
            "seq": q,
            "time": 1_000 * q,
            "upper_time": 1_000 * q + 400,
            "emitted_at": 5,
            "stream_cut": [{"segment": 0, "offset": 10 * (q + 1)}],
        }
        for q in seqs
    ]


def test_the_history_answers_with_the_first_watermark_reaching_t(tmp_path):
    history = _History(str(tmp_path), S, limit=3)
    assert history.first_reaching(S, 0) is None and history.latest(S) is None
    history._keep(rows(0, 1, 2))
    assert history.first_reaching(S, 1_500) == Watermark(S, 2_000, 2_400, {0: 30}, 2)
    assert history.first_reaching(S, 1_000).seq == 1
    assert history.first_reaching(S, 0).seq == 0  # nothing was dropped: it is the first
    assert history.first_reaching(S, 2_001) is None
    history._keep(rows(3, 4))  # 0 and 1 dropped (limit 3)
    assert history.first_reaching(S, 3_000).seq == 3
    # Older than what is kept: only Delta can say which is first (its seq to read).
    assert history.first_reaching(S, 500) == 2
    assert history.latest(S) == Watermark(S, 4_000, 4_400, {0: 50}, 4)


def test_a_change_wakes_the_streams_waiters_from_another_thread():
    waits = StreamWaits()
    waits.changed(S)  # no loop bound yet: nobody waits, nothing happens

    async def main():
        event = waits.event(S)
        other = waits.event("sc/other")
        assert waits.event(S) is event
        started = time.monotonic()
        threading.Timer(0.2, waits.changed, [S]).start()
        await asyncio.wait_for(event.wait(), 5)
        assert time.monotonic() - started >= 0.15
        assert not other.is_set()
        assert waits.event(S) is not event  # a woken event is replaced

    asyncio.run(main())
    waits.changed(S)  # the loop is closed now: ignored


def test_a_wait_with_the_service_down_reads_delta(tmp_path, monkeypatch):
    monkeypatch.setenv(TIME_SERVICE_ENV, "http://127.0.0.1:9")  # nothing listens there
    source = watermark_source(S, 10, lake=str(tmp_path))
    assert isinstance(source, ServiceWatermarkSource)
    started = time.monotonic()
    with pytest.raises(StreamTimeTimeoutError) as err:
        wait_for_time(S, 10, 300, source=source)
    assert time.monotonic() - started >= 0.29
    assert err.value.last is None
    assert isinstance(source._fallback, DeltaWatermarkSource)  # it watched Delta instead
    monkeypatch.delenv(TIME_SERVICE_ENV)
    assert isinstance(watermark_source(S, 10, lake=str(tmp_path)), DeltaWatermarkSource)
