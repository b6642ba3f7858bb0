"""`tidemark serve` on an empty system, and with each service it needs stopped.

Empty: a fresh ZooKeeper chroot (no scope, no stream), a Delta root with no
tables, a PostgreSQL database without the timeline schema, no controller. Every
page and API route answers: 200, 404 for a name that does not exist, or 503
naming the service that is missing -- never a 500.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.session import zookeeper_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.infra.ports import free_port
from tidemark.infra.zookeeper import ZooKeeperServer
from tidemark.service.server import RunningService
from tidemark.service.state import TimeService

pytestmark = [pytest.mark.integration]

EMPTY_ROUTES = [
    ("/", 200),
    ("/api/streams", 200),
    ("/api/rejected", 200),
    ("/api/laggards", 200),
    ("/api/laggards?stream=no/such", 200),
    ("/api/controller", 200),
    ("/api/timelines", 200),
    ("/api/tables", 200),
    ("/metrics", 200),
    ("/api/streams/no/such", 404),
    ("/api/streams/no/such/start?t=5", 404),
    ("/api/streams/no/such/stop?t=5", 404),
    ("/api/streams/no/such/wait?t=5&timeout_ms=10", 404),
    ("/api/streams/no/such/watermarks", 404),
    ("/api/streams/no/such/history", 404),
    ("/api/groups/no-such-group/window", 404),
    ("/streams/no/such", 404),
]

STREAM_ROUTES = [
    "/",
    "/streams/{stream}",
    "/api/streams/{stream}",
    "/api/streams/{stream}/start?t=5",
    "/api/streams/{stream}/stop?t=5",
    "/api/streams/{stream}/wait?t=5&timeout_ms=10",
    "/api/streams/{stream}/watermarks",
    "/api/streams/{stream}/history",
    "/api/rejected",
    "/api/laggards?stream={stream}",
]


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def empty_database(postgres: str, unique: str) -> Iterator[str]:
    """A database of its own, without the timeline schema."""
    name = f"empty_{unique}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(postgres)
    info["dbname"] = name
    yield psycopg.conninfo.make_conninfo(**info)
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def serve(zk_client: Any, root: Path, kafka: str, dsn: str | None) -> RunningService:
    cluster = ClusterSettings(marks_topic="marks-empty")
    store = ZooKeeperStore(zk_client, cluster.zk_root)
    service = TimeService(
        store, zk_client, str(root), bootstrap_servers=kafka, cluster=cluster, postgres_dsn=dsn
    )
    return RunningService(service)


def test_every_route_answers_on_an_empty_system(zk_client, kafka, empty_database, tmp_path):
    with serve(zk_client, tmp_path / "delta", kafka, empty_database) as running:
        for path, status in EMPTY_ROUTES:
            got, body = get(running.url + path)
            assert got == status, (path, got, body[:300])
        got, body = get(running.url + "/api/timelines")
        assert json.loads(body) == []  # the schema was made by the first who needed it


def test_a_stream_without_watermarks_yet_answers(zk_client, kafka, tmp_path, unique):
    cluster = ClusterSettings(marks_topic="marks-empty")
    manager = StreamManager(ZooKeeperStore(zk_client, cluster.zk_root), kafka, cluster)
    manager.create_scope(f"e{unique}")
    stream = f"e{unique}/s"
    manager.create(stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    with serve(zk_client, tmp_path / "delta", kafka, None) as running:
        for path in STREAM_ROUTES:
            got, body = get(running.url + path.format(stream=stream))
            assert got == 200, (path, got, body[:300])


def test_a_stopped_database_is_a_503_naming_it(zk_client, kafka, tmp_path):
    dead = f"postgresql://tidemark@127.0.0.1:{free_port()}/none?connect_timeout=2"
    with serve(zk_client, tmp_path / "delta", kafka, dead) as running:
        got, body = get(running.url + "/api/timelines")
        assert got == 503
        answer = json.loads(body)
        assert answer["error"] == "service_unavailable" and answer["service"] == "postgresql"
        got, body = get(running.url + "/")
        assert got == 200 and b"postgresql" in body


def test_a_stopped_zookeeper_is_a_503_naming_it(kafka, tmp_path, environment):
    with (
        ZooKeeperServer(tmp_path / "zk", env=environment) as server,
        zookeeper_session(server.connect_string, timeout_ms=4_000) as client,
        serve(client, tmp_path / "delta", kafka, None) as running,
    ):
        assert get(running.url + "/api/controller")[0] == 200
        server.stop()
        deadline = time.monotonic() + 30
        while client.connected and time.monotonic() < deadline:
            time.sleep(0.1)  # until the client has noticed
        got, body = get(running.url + "/api/controller")
        assert got == 503, body[:300]
        assert json.loads(body)["service"] == "zookeeper"
        got, body = get(running.url + "/")
        assert got == 200 and b"zookeeper" in body
