"""Fault: the leading controller driver is ``kill -9``ed (its Python driver and
its Spark JVM together, as a crashed machine). The standby takes the query over once
ZooKeeper expires the dead instance's session, and watermarks resume from the shared
checkpoint with no gap, duplicate or regression in ``seq``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jobs.controller_job import ControllerJob
from jobs.tables import read_watermarks
from tests.faults.figures import report
from tests.integration.test_controller_job import Noter, check_sequence, make_env, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow, pytest.mark.faults]

RESUME_BOUND_S = 180


def emitted(delta_root: str, stream: str) -> int:
    try:
        return len(read_watermarks(delta_root, stream))
    except Exception:  # the tables appear when controller a has started
        return 0


def test_controller_kill_9_the_standby_takes_over(
    spark: Any, kafka: str, zookeeper: str, zk_client: Any, unique: str, tmp_path: Path
) -> None:
    env = make_env(kafka, zookeeper, zk_client, unique, tmp_path, buckets=1)
    stream = f"k{unique}/orders"
    env.create(stream, 2)
    settings = env.settings()
    log_path = tmp_path / "controller-a.log"
    argv = [
        sys.executable, "-m", "tidemark.cli.main", "controller", "run", "--instance", "a",
        "--bootstrap", kafka, "--zk", env.zk_connect, "--zk-root", env.cluster.zk_root,
        "--marks-topic", env.cluster.marks_topic, "--bucket-count", "1",
        "--delta-root", settings.delta_root, "--checkpoint-root", settings.checkpoint_root,
        "--writer-timeout-ms", str(settings.writer_timeout_ms),
    ]  # fmt: skip
    with log_path.open("wb") as out:
        a = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    noter = Noter(env.writer("w1", stream))
    noter.start()
    b: ControllerJob | None = None
    try:
        deadline = time.monotonic() + 240
        while emitted(settings.delta_root, stream) < 3:
            assert a.poll() is None, f"controller a exited; see {log_path}"
            assert time.monotonic() < deadline, f"controller a emitted nothing; see {log_path}"
            time.sleep(1)
        b = ControllerJob(spark, settings, "b").start()  # the standby
        time.sleep(5)
        assert not b.leading and b.query is None
        before = read_watermarks(settings.delta_root, stream)[-1].seq
        os.killpg(a.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        a.wait(30)
        b.wait_leading(timeout_s=RESUME_BOUND_S)
        took_over_s = time.monotonic() - killed_at
        wait_for(
            lambda: read_watermarks(settings.delta_root, stream)[-1].seq > before + 1,
            b,
            timeout_s=RESUME_BOUND_S,
        )
        resumed_s = time.monotonic() - killed_at
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
            a.wait(30)
        noter.halt.set()
        noter.join(10)
        noter.writer.close()
        if b is not None:
            b.stop()
    marks = read_watermarks(settings.delta_root, stream)
    report(
        "controller-kill-9",
        f"standby took the query over {took_over_s:.1f} s and watermarks resumed "
        f"{resumed_s:.1f} s after kill -9; {len(marks)} watermarks, seq gaps 0, regressions 0",
    )
    check_sequence(marks)
    assert noter.error is None
