"""Tracked tables: lookups from a fresh process, and what tracking idle tables costs.

- ``version_complete_at`` and ``complete_through`` of a table with ``VERSIONS`` tracked
  versions, each asked in a fresh process (``python -c``), ``RUNS`` times: the wall
  time of the process, and of the call alone inside it; the baseline is the same
  process opening the table with delta-rs (``DeltaTable(table).version()``)
  [goal: <= 2x].
- ``TABLES`` tracked tables, nothing committing, the tracker polling every second for
  ``IDLE_S`` seconds: the CPU it used, in cores [goal: <= 0.02 core].

The tables are real Delta tables written with delta-rs, each commit carrying the
``txn`` action a Delta streaming sink writes (writer id, batch); the checkpoint holds
the query's ``metadata`` and ``offsets/<batch>`` files as Spark writes them; the
watermarks are appended to ``index``/``marks``. No broker is needed.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

VERSIONS = 200
TABLES = 20
RUNS = 7
IDLE_S = 20.0
STREAM = "bench/orders"
TOPIC = "tidemark.bench.orders"

CALL = r"""
import sys, time
kind, table, root, t = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
start = time.perf_counter()
if kind == "version-at":
    from tidemark import version_complete_at
    found = version_complete_at(table, t, delta_root=root)
elif kind == "through":
    from tidemark import complete_through
    found = complete_through(table, delta_root=root)
else:
    from deltalake import DeltaTable
    found = DeltaTable(table).version()
print(found, time.perf_counter() - start)
"""


def _table(path: Path, checkpoint: Path, versions: int, query_id: str) -> None:
    """A Delta table of ``versions`` streaming-sink commits and its query's checkpoint."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": query_id}))
    for batch in range(versions):
        rows = pa.table({"body": [f"e{batch}-{i}" for i in range(10)]})
        txn = CommitProperties(app_transactions=[Transaction(query_id, batch)])
        write_deltalake(str(path), rows, mode="append", commit_properties=txn)
        offsets = {TOPIC: {"0": 10 * (batch + 1)}}
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
        (checkpoint / "offsets" / str(batch)).write_text(
            "v1\n" + json.dumps(meta) + "\n" + json.dumps(offsets)
        )


def _watermarks(root: str, count: int) -> None:
    from tidemark.controller.delta.tables import append_watermarks
    from tidemark.controller.model import Watermark, segment_id

    marks = [
        Watermark(STREAM, 1_000 * (i + 1), 1_000 * (i + 1), {segment_id(0, 0): 10 * (i + 1)}, i)
        for i in range(count)
    ]
    append_watermarks(root, marks)


def _fresh(kind: str, table: str, root: str, t: int) -> tuple[float, float]:
    """(process wall s, call s) of one fresh process."""
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", CALL, kind, table, root, str(t)],
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - start, float(out.stdout.split()[-1])


def _lookups(work: Path, root: str) -> list[str]:
    from tidemark.pipelines.reading.seek import SeekIndex
    from tidemark.pipelines.reading.tracking import Tracker

    table, checkpoint = work / "orders", work / "chk"
    _table(table, checkpoint, VERSIONS, "q-orders")
    tracker = Tracker(root, SeekIndex(root, refresh_interval_ms=0, warm_after=0))
    tracker.add(str(table), str(checkpoint))
    tracker.poll()
    t = 1_000 * (VERSIONS // 2)
    lines = []
    for kind in ("version-at", "through", "delta-rs"):
        _fresh(kind, str(table), root, t)  # once untimed: the bytecode, the page cache
    runs = {
        k: [_fresh(k, str(table), root, t) for _ in range(RUNS)]
        for k in ("version-at", "through", "delta-rs")
    }
    base_wall = statistics.median(w for w, _ in runs["delta-rs"])
    base_call = statistics.median(c for _, c in runs["delta-rs"])
    for kind in ("version-at", "through"):
        wall = statistics.median(w for w, _ in runs[kind])
        call = statistics.median(c for _, c in runs[kind])
        lines.append(
            f"{kind} ({VERSIONS} versions tracked), fresh process: p50 wall {wall * 1000:.0f} ms "
            f"({wall / base_wall:.2f}x), the call {call * 1000:.1f} ms ({call / base_call:.2f}x) "
            f"[baseline DeltaTable(table).version(): wall {base_wall * 1000:.0f} ms, "
            f"call {base_call * 1000:.1f} ms; goal <= 2x]"
        )
    return lines


def _idle(work: Path, root: str) -> list[str]:
    from tidemark.pipelines.reading.tracking import Tracker

    tracker = Tracker(root)
    for i in range(TABLES):
        table, checkpoint = work / f"idle{i}", work / f"idle-chk{i}"
        _table(table, checkpoint, 3, f"q-idle{i}")
        tracker.add(str(table), str(checkpoint))
    tracker.poll()
    stop = threading.Event()
    runner = threading.Thread(target=tracker.run, args=(stop, 1000), daemon=True)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    runner.start()
    stop.wait(IDLE_S)
    stop.set()
    runner.join()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return [
        f"tracking {TABLES} idle tables, polled every 1 s for {wall:.0f} s: "
        f"{cpu / wall:.4f} core ({cpu * 1000:.0f} ms CPU) [goal <= 0.02 core]"
    ]


def run(work_dir: Path) -> list[str]:
    work = Path(work_dir) / "tables"
    work.mkdir(parents=True, exist_ok=True)
    root = str(work / "delta")
    _watermarks(root, VERSIONS)
    return [*_lookups(work, root), *_idle(work, root)]


def main(argv: list[str]) -> int:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for line in run(Path(tmp)):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
