"""Configuration changed while the controller runs: `stream update` reaches its workers.

The controller's Python workers cache each stream's metadata (``tidemark.jobs.lookups``); a
ZooKeeper watch drops a stream's entry when its record changes, so the next batch
that meets the stream reads the new configuration. No restart.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_controller_job import Noter, make_env, wait_for
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.tables import read_table

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def latest(delta_root: str, stream: str) -> dict[str, Any] | None:
    rows = read_table(delta_root, "marks", stream)
    return max(rows, key=lambda r: r["seq"]) if rows else None


def started_ms(iso: str) -> int:
    """A Spark progress report's ``timestamp`` (ISO 8601, UTC) in epoch ms."""
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def test_a_writer_timeout_update_applies_to_a_running_controller_within_two_intervals(
    spark: Any, kafka: str, zookeeper: str, zk_client: Any, unique: str, tmp_path: Path
) -> None:
    env = make_env(kafka, zookeeper, zk_client, unique, tmp_path, buckets=1)
    stream = f"t{unique}/orders"
    config = StreamConfiguration(
        scaling_policy=ScalingPolicy.fixed(1), timestamp_aggregation_timeout_ms=600_000
    )
    env.manager.create_scope(f"t{unique}")
    env.manager.create(stream, config)
    settings = env.settings(writer_timeout_ms=600_000)
    noters = {w: Noter(env.writer(w, stream), period_s=0.1) for w in ("w1", "w2")}
    job = ControllerJob(spark, settings, f"c-{unique}").start()
    try:
        job.wait_leading()
        for noter in noters.values():
            noter.start()
        wait_for(lambda: (latest(settings.delta_root, stream) or {}).get("seq", -1) >= 2, job)
        noters["w2"].halt.set()  # silent, not closed: it lags, and holds the stream back
        time.sleep(3 * settings.interval_ms / 1000)
        held = latest(settings.delta_root, stream)
        time.sleep(3 * settings.interval_ms / 1000)
        assert latest(settings.delta_root, stream) == held, "a 10 min timeout dropped w2"
        assert held is not None and "w2" in held["writers"]

        updated_ms = time.time_ns() // 1_000_000
        env.manager.update(
            stream, dataclasses.replace(config, timestamp_aggregation_timeout_ms=1_000)
        )
        wait_for(
            lambda: "w2" not in (latest(settings.delta_root, stream) or {}).get("writers", []),
            job,
            timeout_s=60,
        )
        applied = latest(settings.delta_root, stream)
        # a cycle is the trigger interval, or a batch's own run when it takes longer (a
        # loaded machine): the update must apply within two cycles of either kind, of the
        # batches from the one running when it was made
        since = updated_ms - settings.interval_ms
        runs = [
            p["durationMs"].get("triggerExecution", 0)
            for p in job.query.recentProgress
            if started_ms(p["timestamp"]) >= since
        ]
        cycle_ms = max([settings.interval_ms, *runs])
    finally:
        for noter in noters.values():
            noter.halt.set()
        job.stop()
    assert applied is not None and applied["writers"] == ["w1"]
    took_ms = applied["emitted_at"] - updated_ms
    print(
        f"writer timeout update applied {took_ms} ms after it (interval {settings.interval_ms}"
        f" ms, longest recent batch {cycle_ms} ms)"
    )
    # w2 has lagged far longer than the new 1 s timeout: the first batch after the
    # workers learn of the update drops it and emits.
    assert took_ms <= 2 * cycle_ms, f"update applied after {took_ms} ms (cycle {cycle_ms} ms)"
    assert all(noter.error is None for noter in noters.values())
