"""Configuration changed while the controller runs: `stream update` reaches it.

The controller's Python workers cache each stream's metadata (``tidemark.jobs.lookups``); a
ZooKeeper watch drops a stream's entry when its record changes, so the next batch
that meets the stream reads the new configuration. A stream whose writers are all
silent has no such batch until its due time (computed under the old value): the
leading driver's own watch (``tidemark.jobs.config_changes``) then makes every slot
due at once. Either way, no restart, and within two cycles.

A stream's policies (retention, auto-scaling) are acted on by the policy loop that the
leading driver runs (``tidemark.controller.policy_loop``): a watch on the stream's
record hands it the new policies, acted on at its next pass.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.controller_env import Env
from tests.faults.figures import report
from tests.integration.test_controller_job import Noter, make_env, wait_for
from tests.integration.test_controller_wiring import run_args
from tidemark.cli.controller import policy_tasks
from tidemark.controller.config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from tidemark.controller.policy_loop import PolicyAction, PolicyLoop, PolicySwitch
from tidemark.jobs.config import ControllerSettings
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.tables import read_table
from tidemark.pipelines.reading.seek import stream_cut_at

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

FLOWING = pytest.mark.parametrize("flowing", [True, False], ids=["marks-flowing", "all-silent"])


def latest(delta_root: str, stream: str) -> dict[str, Any] | None:
    rows = read_table(delta_root, "marks", stream)
    return max(rows, key=lambda r: r["seq"]) if rows else None


def started_ms(iso: str) -> int:
    """A Spark progress report's ``timestamp`` (ISO 8601, UTC) in epoch ms."""
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def batches_since(job: ControllerJob, since_ms: int) -> list[tuple[int, int]]:
    """(start, run) in ms of the query's batches still running at ``since_ms`` or later."""
    runs = (
        (started_ms(p["timestamp"]), p["durationMs"].get("triggerExecution", 0))
        for p in job.query.recentProgress
    )
    return sorted((start, run) for start, run in runs if start + run >= since_ms)


def cycle_ms(settings: ControllerSettings, batches: list[tuple[int, int]]) -> int:
    """A cycle: the trigger interval, or on a loaded machine the longest one of
    ``batches`` (:func:`batches_since`) ran or started after the one before it began."""
    runs = [run for _, run in batches]
    spacings = [b[0] - a[0] for a, b in pairwise(batches)]
    return max([settings.interval_ms, *runs, *spacings])


def unchanged_for(job: ControllerJob, cycles: int, value: Callable[[], object]) -> object:
    """``value()`` after ``cycles`` trigger intervals in which it did not change."""
    seen = value()
    for _ in range(cycles):
        job.process_all_available()
        time.sleep(job.settings.interval_ms / 1000)
        now = value()
        assert now == seen, f"changed without a configuration change: {seen} -> {now}"
    return seen


def applies_within_two_cycles(
    env: Env,
    job: ControllerJob,
    stream: str,
    config: StreamConfiguration,
    applied: Callable[[dict[str, Any] | None], bool],
    figure: str,
) -> dict[str, Any]:
    """Update ``stream`` to ``config``; the next watermark that ``applied`` accepts comes
    within two cycles of the update. Reports the time from the update to it."""
    settings = job.settings
    updated_ms = time.time_ns() // 1_000_000
    env.manager.update(stream, config)
    wait_for(
        lambda: applied(latest(settings.delta_root, stream)),
        job,
        timeout_s=60,
        state=lambda: latest(settings.delta_root, stream),
    )
    row = latest(settings.delta_root, stream)
    assert row is not None
    batches = batches_since(job, updated_ms)
    cycle = cycle_ms(settings, batches)
    took_ms = row["emitted_at"] - updated_ms
    report(
        "live-config",
        f"{figure}: next watermark {took_ms} ms after the update (interval "
        f"{settings.interval_ms} ms, cycle {cycle} ms)",
    )
    assert took_ms <= 2 * cycle, (
        f"update applied after {took_ms} ms (cycle {cycle} ms); the batches since, "
        f"(start after the update, run) in ms: "
        f"{[(start - updated_ms, run) for start, run in batches]}"
    )
    return row


@pytest.fixture
def env(kafka: str, zookeeper: str, zk_client: Any, unique: str, tmp_path: Path) -> Env:
    return make_env(kafka, zookeeper, zk_client, unique, tmp_path, buckets=1)


def one_stream(env: Env, **config: Any) -> tuple[str, StreamConfiguration]:
    """A one-segment stream configured with ``config``: (its name, its configuration)."""
    stream = f"t{env.unique}/orders"
    made = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1), **config)
    env.manager.create_scope(f"t{env.unique}")
    env.manager.create(stream, made)
    return stream, made


def stop(noter: Noter, job: ControllerJob) -> None:
    """End ``noter`` (started or not), close its writer, stop the controller."""
    noter.halt.set()
    if noter.is_alive():
        noter.join()
    noter.writer.close()
    job.stop()


@FLOWING
def test_a_writer_timeout_update_reaches_a_running_controller_within_two_cycles(
    spark: Any, env: Env, flowing: bool
) -> None:
    stream, config = one_stream(env, timestamp_aggregation_timeout_ms=600_000)
    settings = env.settings(writer_timeout_ms=600_000)
    noters = {w: Noter(env.writer(w, stream), period_s=0.1) for w in ("w1", "w2")}
    job = ControllerJob(spark, settings, f"c-{env.unique}").start()
    try:
        job.wait_leading()
        for noter in noters.values():
            noter.start()
        wait_for(lambda: (latest(settings.delta_root, stream) or {}).get("seq", -1) >= 2, job)
        noters["w2"].halt.set()  # silent, not closed: it lags, and holds the stream back
        noters["w2"].join()
        noted = noters["w2"].noted
        wait_for(lambda: noters["w1"].noted > noted + 500, job)
        if not flowing:  # every writer silent: nothing is due for ten minutes
            noters["w1"].halt.set()
            noters["w1"].join()
        # every note w2 made is in the stream's time (its last one may be emitted a
        # cycle after the batch that read it): from here on, only a timeout moves it
        wait_for(lambda: (latest(settings.delta_root, stream) or {}).get("time", 0) >= noted, job)
        held = unchanged_for(job, 3, lambda: latest(settings.delta_root, stream))
        assert held is not None and "w2" in held["writers"], "a 10 min timeout dropped w2"

        # w2 has lagged far longer than the new 1 s timeout: the first cycle under it
        # drops w2 and emits
        row = applies_within_two_cycles(
            env,
            job,
            stream,
            dataclasses.replace(config, timestamp_aggregation_timeout_ms=1_000),
            lambda r: r is not None and "w2" not in r["writers"],
            f"writer timeout 600 s -> 1 s, {'marks flowing' if flowing else 'all silent'}",
        )
    finally:
        for noter in noters.values():
            noter.halt.set()
            noter.join()
            noter.writer.close()
        job.stop()
    assert row["writers"] == ["w1"]
    assert row["seq"] > held["seq"]  # with marks flowing, a later one may be read first
    assert all(noter.error is None for noter in noters.values())


@FLOWING
def test_a_start_up_delay_update_reaches_a_running_controller_within_two_cycles(
    spark: Any, env: Env, flowing: bool
) -> None:
    stream, config = one_stream(env, first_watermark_delay_ms=600_000)
    settings = env.settings()
    noter = Noter(env.writer("w1", stream), period_s=0.1)
    job = ControllerJob(spark, settings, f"c-{env.unique}").start()
    try:
        job.wait_leading()
        if flowing:
            noter.start()
            wait_for(lambda: noter.noted >= 2_000, job)
        else:  # one note, then silence: its first watermark is due in ten minutes
            noter.writer.write(b"e", routing_key="k")
            noter.writer.note_time(2_000)
            noter.writer.flush()
        assert unchanged_for(job, 3, lambda: latest(settings.delta_root, stream)) is None

        row = applies_within_two_cycles(
            env,
            job,
            stream,
            dataclasses.replace(config, first_watermark_delay_ms=0),
            lambda r: r is not None,
            f"start-up delay 600 s -> 0, {'marks flowing' if flowing else 'all silent'}",
        )
    finally:
        stop(noter, job)
    # the stream's first watermark is the update's (marks flowing, more may follow it
    # before the table is read again)
    first = min(read_table(settings.delta_root, "marks", stream), key=lambda r: r["seq"])
    assert first["seq"] == 0 and first["writers"] == ["w1"], row
    assert flowing or (row["seq"] == 0 and row["time"] == 2_000)
    assert noter.error is None


POLICY_INTERVAL_MS = 1_000
"""The policy loop's wait between two passes here (``--policy-interval-ms``)."""


def timed_passes(loop: PolicyLoop) -> list[float]:
    """The durations (ms) of ``loop``'s passes from now on: its step, timed (a pass's own
    run adds to the interval, as a batch's adds to the trigger's)."""
    took: list[float] = []
    step = loop.periodic.step

    def timed() -> object:
        started = time.monotonic()
        try:
            return step()
        finally:
            took.append((time.monotonic() - started) * 1000)

    loop.periodic.step = timed
    return took


class WallNoter(Noter):
    """A :class:`Noter` that notes the wall clock's time (retention measures against it)."""

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                self.writer.write(b"e", routing_key="now")
                self.writer.note_time(time.time_ns() // 1_000_000)
                self.writer.flush()
                self.noted += 1
                self.halt.wait(self.period_s)
        except BaseException as exc:  # reported by the test
            self.error = exc


@FLOWING
def test_a_retention_policy_update_reaches_a_running_controller_within_two_passes(
    spark: Any, env: Env, flowing: bool
) -> None:
    stream, config = one_stream(env)  # no policy: nothing is truncated
    settings = env.settings()
    args = run_args(env, "--policy-interval-ms", str(POLICY_INTERVAL_MS))
    job = ControllerJob(
        spark, settings, args.instance, leader_tasks=policy_tasks(args)(settings)
    ).start()
    (switch,) = job.leader_tasks
    assert isinstance(switch, PolicySwitch)
    noter = WallNoter(env.writer("w1", stream), period_s=0.1)
    limit_ms = 600_000  # the old data lies an hour back, the new within it

    def cut_now() -> dict[int, int]:
        t = time.time_ns() // 1_000_000 - limit_ms
        return stream_cut_at(stream, t, delta_root=settings.delta_root)

    def actions() -> list[PolicyAction]:
        return [] if switch.loop is None else list(switch.loop.actions)

    try:
        job.wait_leading()
        wait_for(lambda: switch.loop is not None, job, state=lambda: switch.acting)
        assert switch.loop is not None
        passes = timed_passes(switch.loop)
        old = time.time_ns() // 1_000_000 - 3_600_000
        for i in range(3):  # old data, one watermark per round
            noter.writer.write(f"old{i}".encode(), routing_key="k", timestamp=old + i)
            noter.writer.note_time(old + i)
            noter.writer.flush()
            job.process_all_available()
        if flowing:
            noter.start()
        else:  # one new note, then every writer silent: no batch meets the stream
            noter.writer.write(b"new", routing_key="k")
            noter.writer.note_time(time.time_ns() // 1_000_000)
            noter.writer.flush()
        wait_for(lambda: cut_now() != {}, job, state=lambda: latest(settings.delta_root, stream))
        assert unchanged_for(job, 3, actions) == []  # watched: and no policy to act on

        updated_ms = time.time_ns() // 1_000_000
        passes.clear()
        env.manager.update(
            stream, dataclasses.replace(config, retention_policy=RetentionPolicy.by_time(limit_ms))
        )
        wait_for(lambda: actions() != [], job, timeout_s=60, state=actions)
    finally:
        stop(noter, job)
    action = actions()[0]
    took_ms = action.at_ms - updated_ms
    cycle = POLICY_INTERVAL_MS + max(passes, default=0.0)
    report(
        "live-config",
        f"retention policy none -> by time, {'marks flowing' if flowing else 'all silent'}: "
        f"truncated {took_ms} ms after the update (policy interval {POLICY_INTERVAL_MS} ms, "
        f"longest pass since {max(passes, default=0.0):.0f} ms)",
    )
    assert took_ms <= 2 * cycle, f"update applied after {took_ms} ms (cycle {cycle:.0f} ms)"
    assert action.kind == "truncate" and action.stream == stream
    assert dict(env.manager.describe(stream).truncation) == actions()[-1].cut
    assert noter.error is None
