"""``tidemark serve`` answering for several streams at once: /api/start, /stop and /wait.

Two streams on real ZooKeeper and Kafka, their watermarks appended to real Delta
tables (``test_time_service.append_marks``); B's run 5 s ahead of A's.
"""

from __future__ import annotations

import threading
import time

from tests.integration import test_reader_group as rg
from tests.integration import test_time_service as ts
from tidemark.pipelines.reading.seek import SeekIndex, complete_cut_at, stream_cut_at

manager, settings, store, served = rg.manager, rg.settings, rg.store, ts.served
append_marks, get_json, history = ts.append_marks, ts.get_json, ts.history


def cuts_of(answer):
    return {
        s: None if a["stream_cut"] is None else {int(k): v for k, v in a["stream_cut"].items()}
        for s, a in answer["streams"].items()
    }


def test_joint_cuts_and_waits_over_http(served, store, manager, unique, tmp_path):
    root = str(tmp_path)
    a = rg.make_stream(manager, f"{unique}a", segments=1)
    b = rg.make_stream(manager, f"{unique}b", segments=2)
    base = int(time.time() * 1000) - 60_000
    top_a = append_marks(root, a, history(a, 10, base, segments=(0,)))
    append_marks(root, b, history(b, 10, base + 5_000))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(
        len(served.service.index.columns(s)[0]) >= 10 for s in (a, b)
    ):
        time.sleep(0.05)
    url, both, local = served.url, f"stream={a}&stream={b}", SeekIndex(root)

    for t in (base - 1, base + 4_500, base + 9_500):
        status, body = get_json(url, f"/api/start?{both}&t={t}")
        assert status == 200 and list(body["streams"]) == [a, b]
        assert cuts_of(body) == stream_cut_at([a, b], t, store=store, index=local)
    status, body = get_json(url, f"/api/stop?{both}&t={base + 9_000}")
    assert body["complete"] and body["incomplete"] == []
    assert cuts_of(body) == complete_cut_at([a, b], base + 9_000, index=local)
    status, body = get_json(url, f"/api/stop?{both}&t={base + 12_000}")  # B is, A is not
    assert not body["complete"] and body["incomplete"] == [a]
    assert cuts_of(body) == {a: None, b: None} and body["streams"][b]["found"] is not None

    # A wait over both answers only once the slower stream (A) passes t.
    t = base + 12_000
    status, body = get_json(url, f"/api/wait?{both}&t={t}&timeout_ms=300")
    assert status == 200 and body["reached"] is False and list(body["behind"]) == [a]
    assert body["streams"][a]["latest"]["seq"] == 9 and body["streams"][b]["reached"]

    def later():
        time.sleep(0.5)
        append_marks(root, a, history(a, 14, base, segments=(0,))[10:], top=top_a)

    thread = threading.Thread(target=later)
    started = time.monotonic()
    thread.start()
    status, body = get_json(url, f"/api/wait?{both}&t={t}&timeout_ms=20000")
    waited = time.monotonic() - started
    thread.join()
    assert body["reached"] is True and body["behind"] == {} and waited >= 0.45
    assert body["streams"][a]["watermark"]["time"] == t  # A's first at or past t

    for path, code, error in [
        (f"/api/start?t={t}", 400, "ReaderConfigError"),
        (f"/api/stop?stream={a}&stream={a}&t={t}", 400, "ReaderConfigError"),
        (f"/api/start?{both}", 400, "invalid_timestamp"),
        (f"/api/wait?{both}&t={t}&timeout_ms=9999999", 400, "http"),
        (f"/api/wait?stream={a}&stream=nope/missing&t={t}", 404, "unknown_stream"),
    ]:
        status, body = get_json(url, path)
        assert (status, body["error"]) == (code, error), path
