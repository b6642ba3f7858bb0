"""Start-up: the README tour's steps, timed from `tidemark controller run` to the first
watermark, on an empty system (no driver to take over from: the first leads at once,
without the warm-up a standby runs).

The issue's goal, 20 s on this machine, is reported, not asserted: on two cores shared
with other suites the same run took 21-22 s (86 s before, with the warm-up). What is
asserted is what would bring the warm-up's delay back: the first driver warms up, or
the first watermark takes more than twice the goal."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.figures import report
from tests.integration.test_controller_job import TAKE_OVER_LINES, driver, make_env, stop_drivers

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

FIRST_WATERMARK_S = 20.0
"""The start-up goal on the development machine (2 cores)."""
START_UP_LINES = ("spark session", "no driver leads", *TAKE_OVER_LINES)
"""The driver log's lines that time a start-up."""


def tidemark_wait(stream: str, time_ms: int, delta_root: str) -> subprocess.CompletedProcess[str]:
    """The tour's `tidemark wait STREAM --time T` step (exit 0: a watermark reached T)."""
    argv = [sys.executable, "-m", "tidemark.cli.main", "wait", stream, "--time", str(time_ms)]
    argv += ["--timeout-ms", "120000", "--delta-root", delta_root]
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, check=False)


@pytest.mark.alone  # asserts the start-up figure: no neighbour's load in it
def test_a_first_controller_leads_at_once_and_the_tour_waits_for_its_first_watermark(
    kafka: str, zookeeper: str, zk_client: Any, unique: str, tmp_path: Path
) -> None:
    env = make_env(kafka, zookeeper, zk_client, unique, tmp_path, buckets=2)
    stream = f"t{unique}/orders"
    env.create(stream, 2)
    settings = env.settings(writer_timeout_ms=10_000)
    started = time.monotonic()
    print(f"controller run started at {time.strftime('%H:%M:%S')}")
    process = driver(env, "c1", settings)  # `controller run`, warm-up on (its default)
    try:
        with env.writer("w1", stream) as writer:
            writer.write(b"one", routing_key="a")
            writer.write(b"two", routing_key="b")
            noted = time.time_ns() // 1_000_000
            writer.note_time(noted)
        waited = tidemark_wait(stream, noted, settings.delta_root)
        took_s = time.monotonic() - started
        assert waited.returncode == 0, (waited.stdout, waited.stderr)
        assert f"{stream} reached {noted}" in waited.stdout
        assert process.poll() is None, "the driver exited"
    finally:
        stop_drivers([process])
    log = (env.work / "driver-c1.log").read_text(errors="replace").splitlines()
    lines = [line for line in log if any(k in line for k in START_UP_LINES)]
    print(*lines, sep="\n")
    print(f"controller run to first watermark: {took_s:.1f} s")
    report(
        "controller-start-up",
        f"`controller run` to the first watermark {took_s:.1f} s (goal {FIRST_WATERMARK_S:.0f} s)",
    )
    assert not any("warmed up" in line for line in lines), "the first driver warmed up"
    assert took_s <= 2 * FIRST_WATERMARK_S, f"first watermark after {took_s:.1f} s"
