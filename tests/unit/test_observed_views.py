"""Where a watermark resting on observation is shown: ``tidemark watermarks``, the HTTP API
and the dashboard's stream page. Delta tables under ``tmp_path`` written with the
controller's row mapping, the service on uvicorn over an in-memory store: no broker."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from tidemark.cli.read import observations
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.metadata import new_stream_metadata
from tidemark.controller.model import Watermark
from tidemark.schemas.arrow import INDEX_ARROW, MARKS_ARROW
from tidemark.schemas.tables import INDEX, MARKS, index_row, marks_row, table_path
from tidemark.service.server import RunningService
from tidemark.service.state import TimeService

S = "sc/legacy"
BASE = 1_700_000_000_000
SEEN = {"observed": ["observer:sc/legacy"], "observed_lateness_ms": 30_000, "possibly_late": 2}


def _tables(root: str) -> None:
    noted = Watermark(S, BASE, BASE + 5, {0: 3}, 0)
    observed = Watermark(S, BASE + 1_000, BASE + 1_500, {0: 7}, 1)
    marks = [
        marks_row(noted, ["w1"], BASE + 10),
        marks_row(observed, ["w1", "o"], BASE + 1_010, SEEN),
    ]
    index = [index_row(noted, BASE + 5), index_row(observed, BASE + 1_500)]
    write_deltalake(table_path(root, MARKS), pa.Table.from_pylist(marks, schema=MARKS_ARROW))
    write_deltalake(table_path(root, INDEX), pa.Table.from_pylist(index, schema=INDEX_ARROW))


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read()


def test_the_watermarks_verb_the_api_and_the_stream_page_say_observed(tmp_path: Path) -> None:
    root = str(tmp_path)
    _tables(root)
    expected: dict[str, Any] = {
        "writers": ["observer:sc/legacy"],
        "lateness_ms": 30_000,
        "possibly_late": 2,
    }
    assert observations(root, S) == {1: expected}, "the noted watermark is left out"

    store = MemoryStore()
    store.create_scope("sc")
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1))
    store.create_stream(new_stream_metadata(S, config, now_ms=0))
    service = TimeService(store, None, root, bootstrap_servers="127.0.0.1:9")
    with RunningService(service) as running:
        status, body = _get(f"{running.url}/api/streams/{S}/watermarks")
        assert status == 200
        rows = json.loads(body)["watermarks"]
        assert [r["observed"] for r in rows] == [None, expected]
        status, page = _get(f"{running.url}/streams/{S}")
        assert status == 200
        text = page.decode()
        assert "rests on <b>observation</b> by observer:sc/legacy" in text
        assert "2 possibly late" in text
