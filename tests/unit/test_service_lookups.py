"""The seek's hot path through ``tidemark serve``: the start/stop routes and the client.

``GET`` and ``HEAD`` of ``.../start|stop`` must agree on status and headers for
every request, good or bad. The service runs on uvicorn over an in-memory
store and Delta tables under ``tmp_path``: no broker, no ZooKeeper.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request

import pytest

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.delta.tables import append_watermarks
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.metadata import new_stream_metadata
from tidemark.controller.model import Watermark
from tidemark.pipelines.reading.exceptions import InvalidTimestampError
from tidemark.pipelines.reading.seek import SeekIndex
from tidemark.pipelines.reading.time_service import (
    ServiceIndex,
    ServiceUnavailableError,
    TimeServiceClient,
    stream_path,
)
from tidemark.service.server import RunningService
from tidemark.service.state import TimeService

S = "sc/st"
BASE = 1_700_000_000_000


@pytest.fixture
def served(tmp_path):
    store = MemoryStore()
    store.create_scope("sc")
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2))
    store.create_stream(new_stream_metadata(S, config, now_ms=0))
    marks = [
        Watermark(S, BASE + i * 1_000, BASE + i * 1_000 + 400, {0: 10 * i, 1: 10 * i + 1}, i)
        for i in range(20)
    ]
    append_watermarks(str(tmp_path), marks)
    service = TimeService(store, None, str(tmp_path), bootstrap_servers="127.0.0.1:9")
    with RunningService(service) as running:
        yield running


def request(url, path, method="GET"):
    req = urllib.request.Request(url + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        (f"/api/streams/{S}/start?t={BASE + 5_500}", 200, None),
        (f"/api/streams/{S}/stop?t={BASE + 5_500}", 200, None),
        (f"/api/streams/{S}/start?t=0", 200, None),
        (f"/api/streams/{S}/stop?t={BASE + 99_000}", 200, None),
        (f"/api/streams/{S}/start?t=1&t={BASE}&x=y", 200, None),  # the last t, as Starlette
        ("/api/streams/sc/nope/start?t=5", 404, "unknown_stream"),
        ("/api/streams/sc/nope/stop?t=5", 404, "unknown_stream"),
        (f"/api/streams/{S}/start?t=-5", 400, "invalid_timestamp"),
        (f"/api/streams/{S}/stop?t=12.5", 400, "invalid_timestamp"),
        (f"/api/streams/{S}/start?t=", 400, "invalid_timestamp"),
        (f"/api/streams/{S}/start", 400, "invalid_timestamp"),
        (f"/api/streams/{S}/start?t={BASE}&t=x", 400, "invalid_timestamp"),
    ],
)
def test_get_and_head_answer_alike(served, path, status, error):
    got, headers, body = request(served.url, path)
    assert got == status
    answer = json.loads(body)
    assert answer.get("error") == error
    head_status, head_headers, head_body = request(served.url, path, method="HEAD")
    assert (head_status, head_body) == (status, b"")
    for name in ("content-type", "content-length"):
        assert headers[name] == head_headers[name]


HUGE = "9" * 5_000


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        (f"/api/streams/{S}/start?t={HUGE}", "t"),
        (f"/api/streams/{S}/stop?t={HUGE}", "t"),
        (f"/api/streams/{S}/wait?t={HUGE}&timeout_ms=10", "t"),
        (f"/api/streams/{S}/start?t={2**63}", "t"),
        (f"/api/streams/{S}/watermarks?version=99999999999999999999", "version"),
        (f"/api/streams/{S}/watermarks?version=18446744073709551615", "version"),
        (f"/api/streams/{S}/watermarks?version={HUGE}", "version"),
        (f"/api/streams/{S}/watermarks?limit=-1", "limit"),
        (f"/api/streams/{S}/watermarks?since={HUGE}", "since"),
    ],
)
def test_hostile_numbers_are_a_400_naming_the_parameter(served, path, parameter):
    got, _, body = request(served.url, path)
    assert got == 400, body[:300]
    detail = json.loads(body)["detail"]
    assert detail.startswith(parameter) and len(detail) < 200


def test_the_routes_answers_are_the_local_lookups(served, tmp_path):
    local = SeekIndex(str(tmp_path))
    for t in (0, BASE - 1, BASE + 400, BASE + 5_401, BASE + 19_000, BASE + 19_001):
        _, _, body = request(served.url, f"/api/streams/{S}/start?t={t}")
        start = json.loads(body)
        found = local.start(S, t)
        assert start["timestamp"] == t
        assert (start["found"] and start["found"]["seq"]) == (found and found.seq)
        _, _, body = request(served.url, f"/api/streams/{S}/stop?t={t}")
        stop = json.loads(body)
        found = local.stop(S, t)
        assert (stop["found"] and stop["found"]["seq"]) == (found and found.seq)
        expected = None if found is None else {str(s): o for s, o in found.stream_cut.items()}
        assert stop["stream_cut"] == expected


def lookups_counted(url):
    _, _, body = request(url, "/metrics")
    counts = re.findall(
        rb'^tidemark_serve_request_duration_seconds_count\{route="(start|stop)"\} (\S+)$',
        body,
        re.M,
    )
    return {route.decode(): float(n) for route, n in counts}


def test_every_lookup_is_observed_and_the_rest_is_routed(served):
    before = lookups_counted(served.url)
    request(served.url, f"/api/streams/{S}/start?t={BASE}")
    request(served.url, f"/api/streams/{S}/start?t=-1")  # refused: counted too
    request(served.url, f"/api/streams/{S}/stop?t={BASE}")
    after = lookups_counted(served.url)
    assert after["start"] - before["start"] == 2
    assert after["stop"] - before["stop"] == 1
    # Not a lookup: a POST (405), a longer path, an empty segment.
    assert request(served.url, f"/api/streams/{S}/start?t=5", method="POST")[0] == 405
    assert request(served.url, f"/api/streams/{S}/start/more?t=5")[0] == 404
    assert request(served.url, "/api/streams//st/start?t=5")[0] == 404
    assert request(served.url, f"/api/streams/{S}")[0] == 200


def test_the_client_keeps_its_connection_and_reconnects_once(served):
    client = TimeServiceClient(served.url)
    path = f"{stream_path(S)}/start"
    first = client.get(path, t=BASE + 5_500)
    sock = client._local.conn.sock
    assert client.get(path, t=BASE + 5_500) == first
    assert client._local.conn.sock is sock  # kept alive: one connection for both
    sock.shutdown(socket.SHUT_RDWR)  # as a server dropping an idle connection
    assert client.get(path, t=BASE + 5_500) == first
    assert client._local.conn.sock is not sock
    with pytest.raises(InvalidTimestampError):
        client.get(path, t=-1)
    client.close()


def test_the_client_says_unavailable_for_what_is_not_the_api(served):
    client = TimeServiceClient(served.url)
    with pytest.raises(ServiceUnavailableError, match="HTTP 404"):
        client.get("/api/no-such-thing")
    with pytest.raises(ServiceUnavailableError, match="not JSON"):
        client.get("/")  # the dashboard's HTML
    client.close()


def test_a_service_index_answers_as_the_local_index(served, tmp_path):
    remote = ServiceIndex(served.url, str(tmp_path))
    local = SeekIndex(str(tmp_path))
    for t in range(BASE - 500, BASE + 21_000, 700):
        assert remote.start(S, t) == local.start(S, t)
        assert remote.stop(S, t) == local.stop(S, t)
    assert remote._down_until == 0.0  # every answer came from the service


def test_the_client_refuses_a_url_it_cannot_speak_and_says_unavailable_when_down():
    with pytest.raises(ValueError, match="expected http://HOST:PORT"):
        TimeServiceClient("ftp://127.0.0.1:9")
    for url in ("http://127.0.0.1:9", "https://127.0.0.1:9"):  # nothing listens there
        client = TimeServiceClient(url)
        assert (client._tls is not None) == url.startswith("https")
        with pytest.raises(ServiceUnavailableError, match=r"127\.0\.0\.1:9"):
            client.get(f"{stream_path(S)}/start", t=5)
