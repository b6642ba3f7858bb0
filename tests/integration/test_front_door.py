"""The one way in: the README's first example, as printed there, against the real
services, and the connection's lookups and the one time syntax on the command line and
over HTTP."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import tidemark
from tests.integration.test_writer import marks, read
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.naming import ClusterSettings, topic_for
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import DELTA_ROOT, KAFKA_BOOTSTRAP, POSTGRES_DSN, ZK_CONNECT

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def first_python_example() -> str:
    found = re.search(r"```python\n(.*?)```", README.read_text("utf-8"), re.S)
    assert found is not None, "README.md has a Python example"
    return found.group(1)


def test_the_first_example_imports_only_the_front_door() -> None:
    imports = re.findall(r"^(?:import|from) (\S+)", first_python_example(), re.M)
    assert "tidemark" in imports
    assert all(name == "tidemark" or "." not in name for name in imports), imports


@pytest.fixture
def shop(kafka: str, zookeeper: str, zk_client: Any, unique: str, monkeypatch: Any) -> str:
    """A stream like the README's ``shop/orders``, in this test's ZooKeeper chroot, and the
    environment ``tidemark up`` prints, pointing there."""
    stream = f"shop{unique}/orders"
    manager = StreamManager(ZooKeeperStore(zk_client, "/tidemark"), kafka, ClusterSettings())
    manager.create_scope(f"shop{unique}")
    manager.create(stream, StreamConfiguration(ScalingPolicy.fixed(2)))
    monkeypatch.setenv(KAFKA_BOOTSTRAP, kafka)
    monkeypatch.setenv(ZK_CONNECT, f"{zookeeper}/tidemark-test-{unique}")
    monkeypatch.delenv(DELTA_ROOT, raising=False)
    return stream


def test_the_readmes_first_example_writes_and_notes_time(kafka: str, shop: str) -> None:
    code = first_python_example().replace('"shop/orders"', repr(shop))
    namespace: dict[str, Any] = {}
    exec(compile(code, str(README), "exec"), namespace)
    event_ms = namespace["event_ms"]

    records = read(kafka, topic_for(shop), [0, 1])
    assert [(r.value(), r.timestamp()[1]) for r in records] == [(b'{"v": 1}', event_ms)]
    noted = marks(kafka, ClusterSettings(), shop)
    mine = [m for m in noted if m.writer_id == "sensor-7"]
    assert max(m.time for m in mine if m.alive) == event_ms  # note_time's mark
    assert not mine[-1].alive  # close() sent the shutdown mark


def test_a_connection_without_delta_refuses_lookups_naming_the_variable(shop: str) -> None:
    with tidemark.connect() as tm:
        with pytest.raises(tidemark.TidemarkError, match=DELTA_ROOT):
            tm.stream_cut_at(shop, "-5m")
        assert tm.store.get_stream(shop).name == shop
    with pytest.raises(tidemark.TidemarkError, match="closed"):
        _ = tm.store


def test_a_connection_names_the_missing_service(monkeypatch: Any) -> None:
    monkeypatch.delenv(KAFKA_BOOTSTRAP, raising=False)
    with pytest.raises(tidemark.TidemarkError, match=KAFKA_BOOTSTRAP):
        tidemark.connect(zk_connect="127.0.0.1:1")


# --- the one time syntax on the command line and over HTTP, against PostgreSQL -----------------


def _cli(capsys: Any, *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    from tidemark.cli.main import main

    try:
        code = main([*argv, "--format", "json"])
    except SystemExit as usage:  # argparse refused a flag's value
        code = int(usage.code or 0)
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.strip().splitlines()], err


def test_timeline_verbs_take_the_one_syntax(
    capsys: Any, postgres: str, unique: str, monkeypatch: Any
) -> None:
    monkeypatch.setenv(POSTGRES_DSN, postgres)
    name = f"syntax-{unique}"
    assert _cli(capsys, "timeline", "create", name)[0] == 0
    for when in (["--in", "10m"], ["--at", "2100-01-01T00:00:00Z"], ["--in-ms", "7200000"]):
        code, _, err = _cli(capsys, "timeline", "put", name, "--group", "g", "--body", "b", *when)
        assert code == 0, err
    # due in 10 min and in 2 h; the year 2100 is outside both ranges
    code, (within,), _ = _cli(capsys, "timeline", "count", name, "--from", "-1h", "--to", "+1h")
    assert (code, within["total"], within["waiting"]) == (0, 1, 1)
    code, (aliases,), _ = _cli(
        capsys, "timeline", "count", name, "--from-ms", "0", "--to", "2099-12-31T00:00Z"
    )
    assert (code, aliases["total"]) == (0, 2)
    code, _, err = _cli(capsys, "timeline", "count", name, "--from", "soon")
    assert code == 2 and "--from 'soon' is no timestamp: use epoch ms" in err


def test_the_services_time_parameters_take_the_one_syntax(
    capsys: Any, postgres: str, unique: str, monkeypatch: Any, tmp_path: Path
) -> None:
    from urllib.parse import quote

    from tidemark.controller.memory_store import MemoryStore
    from tidemark.service.server import RunningService
    from tidemark.service.state import TimeService

    monkeypatch.setenv(POSTGRES_DSN, postgres)
    name = f"http-{unique}"
    _cli(capsys, "timeline", "create", name)
    _cli(capsys, "timeline", "put", name, "--group", "g", "--body", "b", "--in", "10m")
    service = TimeService(
        MemoryStore(), None, str(tmp_path), bootstrap_servers="127.0.0.1:9", postgres_dsn=postgres
    )
    with RunningService(service) as running:

        def counts(query: str) -> tuple[int, Any]:
            try:
                with urllib.request.urlopen(f"{running.url}/api/timelines?{query}") as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as refused:
                return refused.code, json.loads(refused.read())

        status, rows = counts(f"from_ms=-1h&to_ms={quote('+1h')}")
        assert status == 200
        assert [r["total"] for r in rows if r["timeline"] == name] == [1]
        status, rows = counts("from_ms=now&to_ms=2026-01-01T00:00:00Z")  # an empty range
        assert [r["total"] for r in rows if r["timeline"] == name] == [0]
        status, body = counts("from_ms=yesterday")
        assert (status, body["error"]) == (400, "invalid_timestamp")
        assert body["detail"].startswith("from_ms 'yesterday' is no timestamp")
