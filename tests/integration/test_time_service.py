"""``tidemark serve``: the JSON API, /metrics and the dashboard against real services.

Watermarks are appended to real Delta tables the way the controller's sink
writes them (with ``emitted_at``), on a real stream in ZooKeeper and Kafka.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.integration import test_reader_group as rg
from tidemark.controller.model import KeyRange
from tidemark.controller.naming import topic_for
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.reading.seek import SeekIndex, complete_cut_at, stream_cut_at
from tidemark.pipelines.reading.time_service import TIME_SERVICE_ENV, ServiceIndex, default_index
from tidemark.schemas.arrow import INDEX_ARROW, MARKS_ARROW
from tidemark.schemas.tables import INDEX, MARKS, OBSERVATION_COLUMNS, table_path
from tidemark.service.server import RunningService
from tidemark.service.state import TimeService

manager, settings, store = rg.manager, rg.settings, rg.store
make_stream = rg.make_stream


def append_marks(root, stream, marks, emitted_step_ms=1_000, top=None):
    """``marks``: (seq, time, upper_time, cut) rows; emitted_at a second apart, ending now."""
    now = int(time.time() * 1000)
    emitted = [now - (len(marks) - i - 1) * emitted_step_ms for i in range(len(marks))]
    maxima = []
    for _, _, upper, _ in marks:
        top = upper if top is None else max(top, upper)
        maxima.append(top)
    keys = {  # the columns both tables key their rows by
        "stream": [stream] * len(marks),
        "seq": [m[0] for m in marks],
        "time": [m[1] for m in marks],
    }
    write_deltalake(
        table_path(root, MARKS),
        pa.table(
            {
                **keys,
                "upper_time": [m[2] for m in marks],
                "stream_cut": [
                    [{"segment": s, "offset": o} for s, o in sorted(m[3].items())] for m in marks
                ],
                "writers": [["w1", "w2"]] * len(marks),
                "vouchers": [None] * len(marks),  # (who vouched: not known for these)
                "emitted_at": emitted,
                **{column: [None] * len(marks) for column in OBSERVATION_COLUMNS},  # noted
            },
            schema=MARKS_ARROW,
        ),
        mode="append",
    )
    write_deltalake(
        table_path(root, INDEX),
        pa.table(
            {
                **keys,
                "upper_time_max": maxima,
                "stream_cut": [
                    [{"segment": s, "offset": o} for s, o in sorted(m[3].items())] for m in marks
                ],
            },
            schema=INDEX_ARROW,
        ),
        mode="append",
    )
    return top


def history(stream, count, base_ms, step_ms=1_000, segments=(0, 1)):
    """``count`` watermarks one step apart, lagging ~2 s, offsets growing by 10."""
    return [
        (
            seq,
            base_ms + seq * step_ms,
            base_ms + seq * step_ms + 400,
            {s: 10 * (seq + 1) for s in segments},
        )
        for seq in range(count)
    ]


def get(url, path):
    try:
        with urllib.request.urlopen(url + path, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def get_json(url, path):
    status, body = get(url, path)
    return status, json.loads(body)


def serving(store, zk_client, root, kafka, settings, **options):
    """The time service over the tables under ``root``, to run in a ``with`` block;
    ``options`` go to :class:`TimeService` (``refresh_ms`` 50 unless given)."""
    options.setdefault("refresh_ms", 50)
    service = TimeService(
        store, zk_client, root, bootstrap_servers=kafka, cluster=settings, **options
    )
    return RunningService(service)


@pytest.fixture
def served(store, zk_client, kafka, tmp_path, settings):
    with serving(store, zk_client, str(tmp_path), kafka, settings) as running:
        yield running


def test_api_answers_like_the_local_lookups(served, store, manager, unique, tmp_path):
    root = str(tmp_path)
    stream = make_stream(manager, unique, segments=2)
    now = int(time.time() * 1000)
    base = now - 60_000
    append_marks(root, stream, history(stream, 20, base))
    url = served.url
    deadline = time.monotonic() + 10

    def caught_up() -> bool:
        """The service read both tables' appends: its history (``marks``) and its seek
        index (``index``, appended after ``marks``) are tailed on their own."""
        return (
            served.service.watermark_count(stream) >= 20
            and len(served.service.index.columns(stream)[0]) >= 20
        )

    while not caught_up() and time.monotonic() < deadline:
        time.sleep(0.05)

    local = SeekIndex(root)
    for t in (0, base - 1, base + 500, base + 5_400, base + 19_000, base + 19_001, now):
        status, body = get_json(url, f"/api/streams/{stream}/start?t={t}")
        assert status == 200
        assert {int(s): o for s, o in body["stream_cut"].items()} == stream_cut_at(
            stream, t, delta_root=root, store=store, index=local
        )
        # the same cut as Spark's startingOffsets: {topic: {partition: offset}}
        assert body["offsets"] == {topic_for(stream): body["stream_cut"]}
        status, body = get_json(url, f"/api/streams/{stream}/stop?t={t}")
        expected = complete_cut_at(stream, t, delta_root=root, index=local)
        got = body["stream_cut"]
        assert (None if got is None else {int(s): o for s, o in got.items()}) == expected
        assert body["offsets"] == (None if got is None else {topic_for(stream): got})

    status, streams = get_json(url, "/api/streams")
    mine = next(s for s in streams if s["stream"] == stream)
    assert [seg["id"] for seg in mine["epochs"][0]["segments"]] == [0, 1]
    assert mine["watermark"]["seq"] == 19
    assert mine["watermark"]["lag_ms"] >= now - (base + 19_000)

    status, chart = get_json(url, f"/api/streams/{stream}/history?minutes=60")
    assert len(chart["emitted_at_ms"]) == 20  # milliseconds, as every time the API answers
    assert chart["time_ms"][-1] == base + 19_000
    assert chart["watermark_lag_ms"][-1] == chart["emitted_at_ms"][-1] - (base + 19_000)

    status, body = get(url, "/metrics")
    text = body.decode()
    assert f'tidemark_stream_watermark_lag_seconds{{stream="{stream}"}}' in text
    assert f'tidemark_stream_active_segments{{stream="{stream}"}} 2.0' in text
    assert "tidemark_serve_request_duration_seconds_count" in text
    assert text.count("# TYPE tidemark_build_info gauge") == 1

    status, html = get(url, "/")
    assert status == 200 and stream.encode() in html
    status, html = get(url, f"/streams/{stream}")
    assert status == 200 and b"lag-chart" in html


def test_time_travel_by_version_and_time(served, manager, unique, tmp_path):
    root = str(tmp_path)
    stream = make_stream(manager, unique, segments=1)
    base = int(time.time() * 1000) - 60_000
    marks = history(stream, 6, base, segments=(0,))
    top = append_marks(root, stream, marks[:3])
    status, first = get_json(served.url, f"/api/streams/{stream}/watermarks")
    version = first["table_version"]
    time.sleep(0.05)
    between = int(time.time() * 1000)
    time.sleep(0.05)
    append_marks(root, stream, marks[3:], top=top)

    status, latest = get_json(served.url, f"/api/streams/{stream}/watermarks")
    assert [w["seq"] for w in latest["watermarks"]] == [0, 1, 2, 3, 4, 5]
    status, old = get_json(served.url, f"/api/streams/{stream}/watermarks?version={version}")
    assert [w["seq"] for w in old["watermarks"]] == [0, 1, 2]
    status, old = get_json(served.url, f"/api/streams/{stream}/watermarks?as_of={between}")
    assert [w["seq"] for w in old["watermarks"]] == [0, 1, 2]
    status, since = get_json(served.url, f"/api/streams/{stream}/watermarks?since={base + 4_000}")
    assert status == 200
    assert [w["seq"] for w in since["watermarks"]] == [4, 5]


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("/api/streams/nope/missing/start?t=5", 404, "unknown_stream"),
        ("/api/streams/{stream}/start?t=-5", 400, "invalid_timestamp"),
        ("/api/streams/{stream}/start?t=12.5", 400, "invalid_timestamp"),
        ("/api/streams/{stream}/start", 400, "invalid_timestamp"),
        ("/api/streams/{stream}/watermarks?version=x", 400, "http"),
        ("/api/streams/{stream}/watermarks?version=1&as_of=5", 400, "ConfigurationError"),
        ("/api/groups/no-such-group/window", 404, "unknown_reader_group"),
    ],
)
def test_bad_requests_are_clear_json_errors(served, manager, unique, path, status, error):
    stream = make_stream(manager, unique, segments=1)
    got, body = get_json(served.url, path.format(stream=stream))
    assert (got, body["error"]) == (status, error)


def test_reader_group_asks_the_service_and_falls_back_to_delta(
    served, store, manager, kafka, unique, tmp_path, monkeypatch
):
    root = str(tmp_path)
    stream = make_stream(manager, unique, segments=2)
    base = int(time.time() * 1000) - 60_000
    append_marks(root, stream, history(stream, 5, base))
    served.service.refresh_all()

    monkeypatch.setenv(TIME_SERVICE_ENV, served.url)
    index = default_index(root)
    assert isinstance(index, ServiceIndex)
    asked = served.service.start_lookup
    calls = []

    def counting(s, t):
        calls.append((s, t))
        return asked(s, t)

    monkeypatch.setattr(served.service, "start_lookup", counting)
    group = ReaderGroup.create(
        f"g{unique}",
        stream,
        store=store,
        bootstrap_servers=kafka,
        delta_root=root,
        from_time=base + 2_500,
    )
    try:
        assert calls == [(stream, base + 2_500)]
        assert group.stream_cut() == {0: 30, 1: 30}  # watermark 2: upper max 2400 < 2500
    finally:
        group.close()

    down = ServiceIndex("http://127.0.0.1:9", root)  # nothing listens on the discard port
    found = down.start(stream, base + 2_500)
    assert found is not None and found.seq == 2  # answered from Delta


def test_a_scaled_stream_shows_its_epochs(served, manager, unique):
    stream = make_stream(manager, unique, segments=2)
    manager.scale(stream, [0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
    served.service.refresh_all()
    status, body = get_json(served.url, f"/api/streams/{stream}")
    assert status == 200
    assert [e["number"] for e in body["epochs"]] == [0, 1]
    assert body["current_epoch"] == 1
    active = [s["id"] for s in body["epochs"][1]["segments"] if s["active"]]
    assert len(active) == 3 and 0 not in active and 1 in active


def test_tidemark_serve_command(manager, unique, kafka, zookeeper, zk_client, tmp_path):
    """`tidemark serve` as a user runs it: answers, then stops on Ctrl-C (SIGINT: uvicorn
    shuts down, then re-raises the signal; the CLI's exit status for it is 130)."""
    import os
    import signal
    import subprocess
    import sys

    from tidemark.infra.ports import free_port

    stream = make_stream(manager, unique, segments=1)
    port = free_port()
    env = dict(
        os.environ,
        TIDEMARK_KAFKA_BOOTSTRAP=kafka,
        TIDEMARK_ZK_CONNECT=f"{zookeeper}/tidemark-test-{unique}",
        TIDEMARK_DELTA_ROOT=str(tmp_path),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidemark.cli.main", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                status, streams = get_json(url, "/api/streams")
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "tidemark serve did not answer in 60 s"
                time.sleep(0.2)
        assert status == 200
        assert [s["stream"] for s in streams] == [stream]
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert f"dashboard on http://127.0.0.1:{port}/" in out


# --- waiting for stream time through the service --------------------------------------------


def _wait_in_thread(stream, t, timeout_ms, root):
    """``wait_for_time`` on a thread; (result holder, thread, start time)."""
    import threading

    from tidemark.pipelines.reading.stream_time import wait_for_time

    out = {}

    def run():
        try:
            out["watermark"] = wait_for_time(stream, t, timeout_ms, delta_root=root)
        except Exception as exc:  # reported by the test
            out["error"] = exc
        out["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    return out, thread, started


def test_wait_for_time_is_woken_by_the_service(
    served, manager, unique, tmp_path, monkeypatch, capsys
):
    """A wait through ``GET .../wait`` returns once the service's refresh sees the
    watermark, asking the service a few times a second at most and never Delta."""
    from tidemark.cli.main import main
    from tidemark.pipelines.reading import stream_time
    from tidemark.pipelines.reading.stream_time import ServiceWatermarkSource, wait_for_time

    root = str(tmp_path)
    stream = make_stream(manager, unique, segments=2)
    base = int(time.time() * 1000) - 60_000
    marks = history(stream, 8, base)
    top = append_marks(root, stream, marks[:3])
    served.service.refresh_all()
    monkeypatch.setenv(TIME_SERVICE_ENV, served.url)

    asks, deltas = [], []
    real_ask, real_delta = ServiceWatermarkSource._ask, ServiceWatermarkSource._delta

    def counted_ask(self, timeout_ms):
        asks.append(timeout_ms)
        return real_ask(self, timeout_ms)

    def counted_delta(self):
        deltas.append(1)
        return real_delta(self)

    monkeypatch.setattr(ServiceWatermarkSource, "_ask", counted_ask)
    monkeypatch.setattr(ServiceWatermarkSource, "_delta", counted_delta)

    # Reached already: the first watermark at or after T, at once.
    got = wait_for_time(stream, base + 1_500, 0, delta_root=root)
    assert (got.seq, got.time, got.upper_time) == (2, base + 2_000, base + 2_400)
    assert got.stream_cut == {0: 30, 1: 30}

    asks.clear()
    out, thread, started = _wait_in_thread(stream, base + 4_500, 30_000, root)
    time.sleep(1.5)
    assert thread.is_alive()
    append_marks(root, stream, marks[3:], top=top)
    thread.join(15)
    assert "error" not in out, out.get("error")
    got = out["watermark"]
    assert (got.seq, got.time) == (5, base + 5_000)  # the first reaching T, not the latest
    assert got.stream_cut == {0: 60, 1: 60}
    assert out["at"] - started >= 1.4  # not before the watermark was there
    # Long polls of at most 1 s each while nothing came (plus the first look).
    assert len(asks) <= 5, asks
    assert deltas == []
    assert stream_time.watermark_source(stream, 1).__class__ is ServiceWatermarkSource

    # The CLI goes through the service too.
    assert main(["wait", stream, "--time", str(base + 6_500), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq"] == 7
    assert deltas == []


def test_a_wait_is_woken_by_the_tail_not_the_refresh(
    store, zk_client, kafka, settings, manager, unique, tmp_path
):
    """With the refresh a minute away, a long poll still returns as soon as the
    watermark's commit lands: the service's tail thread watches the next commit file
    of a stream someone waits on and reads it at once."""
    root = str(tmp_path)
    stream = make_stream(manager, unique, segments=2)
    base = int(time.time() * 1000) - 60_000
    marks = history(stream, 4, base)
    top = append_marks(root, stream, marks[:2])
    with serving(store, zk_client, root, kafka, settings, refresh_ms=60_000) as running:
        assert running.service.waits.waited() == []
        answered = {}

        def wait() -> None:
            path = f"/api/streams/{stream}/wait?t={base + 3_000}&timeout_ms=20000"
            answered["body"] = get_json(running.url, path)[1]
            answered["at"] = time.monotonic()

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        deadline = time.monotonic() + 10
        while stream not in running.service.waits.waited():  # the request is held
            assert time.monotonic() < deadline, "the wait never reached the service"
            time.sleep(0.01)
        assert waiter.is_alive()
        appended = time.monotonic()
        append_marks(root, stream, marks[2:], top=top)
        waiter.join(15)
        body = answered["body"]
        assert body["reached"] and body["watermark"]["seq"] == 3
        assert answered["at"] - appended < 5  # the refresh would take a minute
        assert running.service.refreshes == 1  # only the start's: the tail read it


def test_wait_times_out_cleanly_through_the_service(served, manager, unique, tmp_path, monkeypatch):
    from tidemark.pipelines.reading.exceptions import StreamTimeTimeoutError
    from tidemark.pipelines.reading.stream_time import wait_for_time

    root = str(tmp_path)
    stream = make_stream(manager, unique, segments=1)
    base = int(time.time() * 1000) - 60_000
    append_marks(root, stream, history(stream, 3, base, segments=(0,)))
    served.service.refresh_all()

    started = time.monotonic()
    path = f"/api/streams/{stream}/wait?t={base + 9_000}&timeout_ms=300"
    status, body = get_json(served.url, path)
    took = time.monotonic() - started
    assert status == 200 and body["reached"] is False and body["watermark"] is None
    assert body["latest"]["seq"] == 2
    assert 0.29 <= took < 5

    monkeypatch.setenv(TIME_SERVICE_ENV, served.url)
    started = time.monotonic()
    with pytest.raises(StreamTimeTimeoutError) as err:
        wait_for_time(stream, base + 9_000, 400, delta_root=root)
    assert time.monotonic() - started >= 0.39
    assert err.value.last is not None and err.value.last.seq == 2

    # What the service refuses is a clear error.
    for path, code, error in [
        (f"/api/streams/{stream}/wait", 400, "invalid_timestamp"),
        (f"/api/streams/{stream}/wait?t=5&timeout_ms=9999999", 400, "http"),
        (f"/api/streams/{stream}/wait?t=5&timeout_ms=-1", 400, "http"),
        ("/api/streams/nope/missing/wait?t=5", 404, "unknown_stream"),
    ]:
        status, body = get_json(served.url, path)
        assert (status, body["error"]) == (code, error), path


def test_wait_reads_delta_when_the_service_is_down(manager, unique, tmp_path, monkeypatch):
    from tidemark.pipelines.reading.stream_time import ServiceWatermarkSource

    root = str(tmp_path)
    stream = make_stream(manager, unique, segments=2)
    base = int(time.time() * 1000) - 60_000
    marks = history(stream, 6, base)
    top = append_marks(root, stream, marks[:2])
    monkeypatch.setenv(TIME_SERVICE_ENV, "http://127.0.0.1:9")  # nothing listens there
    deltas = []
    real_delta = ServiceWatermarkSource._delta

    def counted_delta(self):
        deltas.append(1)
        return real_delta(self)

    monkeypatch.setattr(ServiceWatermarkSource, "_delta", counted_delta)
    out, thread, started = _wait_in_thread(stream, base + 3_500, 30_000, root)
    time.sleep(1.0)
    append_marks(root, stream, marks[2:], top=top)
    thread.join(15)
    assert "error" not in out, out.get("error")
    assert out["watermark"].seq == 4
    assert out["at"] - started >= 0.9
    assert deltas  # answered from Delta


def test_wait_for_a_time_older_than_the_kept_history(
    store, zk_client, kafka, settings, manager, unique, tmp_path
):
    """The service keeps the last ``history_limit`` watermarks; a wait for an older time
    is answered from Delta, still the first watermark reaching it."""
    root = str(tmp_path)
    stream = make_stream(manager, unique, segments=1)
    base = int(time.time() * 1000) - 60_000
    append_marks(root, stream, history(stream, 10, base, segments=(0,)))
    with serving(store, zk_client, root, kafka, settings, history_limit=3) as running:
        status, body = get_json(running.url, f"/api/streams/{stream}/wait?t={base + 1_500}")
        assert status == 200 and body["reached"] is True
        assert body["watermark"]["seq"] == 2
        assert body["watermark"]["stream_cut"] == {"0": 30}
        assert body["latest"]["seq"] == 9
        status, body = get_json(running.url, f"/api/streams/{stream}/wait?t={base + 8_500}")
        assert body["watermark"]["seq"] == 9

        # A wait still held when the server stops is answered (not reached), not dropped.
        import threading

        held = {}
        path = f"/api/streams/{stream}/wait?t={base + 99_000}&timeout_ms=60000"
        holder = threading.Thread(target=lambda: held.update(answer=get_json(running.url, path)))
        holder.start()
        time.sleep(0.5)
        assert holder.is_alive()
        stopping = time.monotonic()
    holder.join(30)
    assert time.monotonic() - stopping < 5
    status, body = held["answer"]
    assert status == 200 and body["reached"] is False and body["latest"]["seq"] == 9
