"""Soak: the controller's sink for hours of commits while maintenance runs (``make soak``).

    python -m tests.bench bench_soak
    TIDEMARK_SOAK_COMMITS=300 python -m tests.bench bench_soak      # a quick check

Drives the real sink (:class:`tidemark.jobs.sink.DeltaSink`, the controller's
``foreachBatch`` writer, delta-rs) with ``TIDEMARK_SOAK_COMMITS`` batches
(default 10 000, ≈ 2¾ h of a 1 s controller) of one watermark for each of
``TIDEMARK_SOAK_STREAMS`` streams (default 100) and a rejected mark every
tenth batch, while :class:`tidemark.controller.delta.maintenance.Maintainer` runs with the
controller's default settings in a thread of the same process, as on the
controller's leader -- except its check interval (0.25 s instead of 5 s:
the soak commits some 20 times faster than a 1 s controller) and its log
retention (``TIDEMARK_SOAK_LOG_RETENTION_S``, default 32 s instead of
15 min, so that the log holds about as many commits as a 1 s controller's
900: the soak commits ~28 times a second on a quiet 2-core machine; the
figures print how many it held at the end). After 100 commits and at
the end, in fresh processes (``tests.bench.soak_probe``,
``TIDEMARK_SOAK_PROBES`` each, default 11):

- cold ``stream_cut_at`` p50 / max (a random stream and time each);
- ``WatermarkFeed.since`` (what ``tidemark watermarks STREAM --since`` runs)
  for the last tenth of the run, and the wall time of the CLI command itself;
- files per table, live and on-disk size, append latency (p50 of a batch's
  marks + index (+ rejected) commits) over the first and the last 200
  batches, the most files a table held at any sample;
- Kafka ``offsets_for_times`` over 16 partitions on the same machine.

Goals: cold ``stream_cut_at`` p50 <= 50 ms and <= 1.5x its value after 100
commits; append latency within 1.5x; files bounded by the policy
(``compact_min_files`` + the commits of one check interval + size / target).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.bench.percentile import percentile

SECOND = 1_000
BASE_TS = 1_700_000_000_000
SEGMENTS = 4
WINDOW = 200


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


def _batch(commit: int, streams: list[str]) -> list[dict[str, Any]]:
    from tidemark.controller.model import Watermark
    from tidemark.jobs.processor import output_row
    from tidemark.jobs.workflow import Emitted, Rejected

    t = BASE_TS + commit * SECOND
    cut = {p: commit * 50 + p for p in range(SEGMENTS)}
    rows = [
        output_row(Emitted(Watermark(s, t, t + 400, cut, commit), ("w-1", "w-2"), t + 400, t + 5))
        for s in streams
    ]
    if commit % 10 == 0:
        stream = streams[commit % len(streams)]
        rows.append(output_row(Rejected(stream, "w-9", "stale_time", b"\x00" * 40, 0, commit, t)))
    return rows


def _probe(kind: str, root: Path, stream: str, t: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.soak_probe", kind, str(root), stream, str(t)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return found


def _cold_cuts(root: Path, streams: list[str], commits: int, probes: int) -> list[float]:
    rng = random.Random(commits)
    samples = []
    for _ in range(probes):
        stream = rng.choice(streams)
        commit = rng.randrange(1, commits)
        found = _probe("cut", root, stream, BASE_TS + commit * SECOND + 400)
        expected = {str(p): (commit - 1) * 50 + p for p in range(SEGMENTS)}
        assert found["result"] == expected, (stream, commit, found)
        samples.append(float(found["ms"]))
    return samples


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _tables(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """table -> (live files, live bytes, bytes on disk incl. time travel and log,
    commits in ``_delta_log``)."""
    from tidemark.controller.delta.maintenance import table_files
    from tidemark.schemas.tables import TABLES, table_path

    out = {}
    for table in TABLES:
        files, size = table_files(str(root), table)
        path = Path(table_path(str(root), table))
        commits = len(list((path / "_delta_log").glob("*.json")))
        out[table] = (files, size, _dir_bytes(path), commits)
    return out


def _cli_watermarks(root: Path, services: Any, stream: str, since: int) -> tuple[float, int]:
    """Wall time of ``tidemark watermarks STREAM --since`` (a new process, imports included)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "TIDEMARK_DELTA_ROOT": str(root),
        "TIDEMARK_KAFKA_BOOTSTRAP": services.bootstrap,
        "TIDEMARK_ZK_CONNECT": services.zk_connect,
    }
    cli = [sys.executable, "-m", "tidemark.cli.main"]
    scope = stream.split("/")[0]
    subprocess.run([*cli, "scope", "create", scope], check=False, capture_output=True, env=env)
    subprocess.run(
        [*cli, "stream", "create", stream, "--segments", str(SEGMENTS)],
        check=True,
        capture_output=True,
        env=env,
    )
    started = time.perf_counter()
    out = subprocess.run(
        [*cli, "watermarks", stream, "--since", str(since), "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    wall = time.perf_counter() - started
    text = out.strip()
    rows = json.loads(text) if text.startswith("[") else [json.loads(x) for x in text.splitlines()]
    return wall, len(rows)


def run(services: Any) -> list[str]:
    from tests.bench.kafka_baseline import PARTITIONS, timed_topic
    from tidemark.controller.delta.appends import ensure_tables
    from tidemark.controller.delta.maintenance import Maintainer, MaintenanceSettings
    from tidemark.jobs.sink import DeltaSink

    commits = _env_int("TIDEMARK_SOAK_COMMITS", 10_000)
    stream_count = _env_int("TIDEMARK_SOAK_STREAMS", 100)
    probes = _env_int("TIDEMARK_SOAK_PROBES", 11)
    log_retention_s = _env_int("TIDEMARK_SOAK_LOG_RETENTION_S", 32)
    root = Path(services.work_dir) / "soak-delta"
    ensure_tables(str(root), log_retention_s=log_retention_s)
    streams = [f"soak/s{i:03d}" for i in range(stream_count)]
    sink = DeltaSink(str(root), "tidemark-soak")
    sink.bind("query-1")
    # The soak appends ~10-20 batches a second, not one: the check interval shrinks in
    # proportion so that a pass sees as many new files as it would behind a 1 s controller.
    settings = MaintenanceSettings(
        str(root), check_interval_s=0.25, log_retention_s=log_retention_s
    )
    maintainer = Maintainer(settings).start()
    latencies: list[float] = []
    most_files: dict[str, int] = {}
    early: list[float] = []
    started = time.perf_counter()
    try:
        for commit in range(commits):
            rows = _batch(commit, streams)
            a = time.perf_counter()
            sink.write(rows, commit)
            latencies.append((time.perf_counter() - a) * 1000)
            if commit + 1 == min(100, commits):
                early = _cold_cuts(root, streams, commit + 1, probes)
            if commit % 100 == 99:
                for table, (files, _, _, _) in _tables(root).items():
                    most_files[table] = max(most_files.get(table, 0), files)
    finally:
        maintainer.stop()
    written = time.perf_counter() - started
    late = _cold_cuts(root, streams, commits, probes)
    since = BASE_TS + (commits - commits // 10) * SECOND
    feed = [
        float(_probe("since", root, random.Random(i).choice(streams), since)["ms"])
        for i in range(3)
    ]
    cli_wall, cli_rows = _cli_watermarks(root, services, streams[7], since)
    with timed_topic(services.bootstrap) as topic:
        kafka = topic.lookups(max(probes, 20))
    tables = _tables(root)
    head, tail = latencies[:WINDOW], latencies[-WINDOW:]
    p50_early, p50_late = statistics.median(early), statistics.median(late)
    append_ratio = statistics.median(tail) / statistics.median(head)
    lines = [
        f"{commits:,} sink batches x {stream_count} streams in {written:.0f} s, maintenance on"
        f" ({maintainer.passes} passes; compact at {settings.compact_min_files} small files,"
        f" checkpoint every {settings.checkpoint_every} commits,"
        f" time travel {settings.time_travel_hours} h, log {settings.log_retention:.0f} s)",
        f"  maintenance busy {maintainer.busy_s:.0f} s, longest pass"
        f" {maintainer.longest_pass_s * 1000:.0f} ms",
        f"  cold stream_cut_at (fresh process) after 100 commits: p50 {p50_early:.1f} ms"
        f"  max {max(early):.1f} ms",
        f"  cold stream_cut_at (fresh process) after {commits:,}: p50 {p50_late:.1f} ms"
        f"  max {max(late):.1f} ms  ratio {p50_late / p50_early:.2f}x"
        "  [goal p50 <= 50 ms, <= 1.5x]",
        f"  WatermarkFeed.since(last tenth) (fresh process): p50 {statistics.median(feed):.1f} ms"
        f"  max {max(feed):.1f} ms",
        f"  tidemark watermarks STREAM --since (wall, new process): {cli_wall * 1000:.0f} ms,"
        f" {cli_rows} watermarks",
        f"  Kafka offsets_for_times, {PARTITIONS} partitions: p50 {statistics.median(kafka):.1f} ms"
        f"  max {max(kafka):.1f} ms",
        f"  append (marks+index[+rejected]) p50 first {WINDOW}: {statistics.median(head):.1f} ms,"
        f" last {WINDOW}: {statistics.median(tail):.1f} ms (p99 {percentile(tail, 0.99):.1f} ms),"
        f" ratio {append_ratio:.2f}x  [goal <= 1.5x]",
    ]
    for table, (files, live, disk, log_commits) in tables.items():
        lines.append(
            f"  {table:<15} {files:>4} files (most seen {most_files.get(table, files)}),"
            f" live {live / 1e6:.2f} MB, on disk {disk / 1e6:.2f} MB,"
            f" {log_commits} commits in the log"
        )
    return lines
