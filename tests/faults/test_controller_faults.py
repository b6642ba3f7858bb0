"""Fault: the controller's ZooKeeper session expires under load. Its query stops, it
contends again (the only driver: it leads again), and watermarks resume with no gap,
duplicate or regression in ``seq``."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.controller_env import Env
from tests.faults.figures import report
from tests.integration.test_controller_job import Noter, check_sequence, wait_for
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.tables import read_watermarks

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow, pytest.mark.faults]

RESUME_BOUND_S = 120


def expire_session(client: Any, hosts: str) -> None:
    """ZooKeeper expires a session when another connection with its id closes (kazoo's
    testing harness does the same)."""
    from kazoo.client import KazooClient

    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout=15)
    twin.stop()
    twin.close()


def test_zookeeper_session_expiry_under_load(spark: Any, controller_env: Env, unique: str) -> None:
    env = controller_env
    stream = f"z{unique}/orders"
    env.create(stream, 2)
    settings = env.settings()
    noter = Noter(env.writer("w1", stream))
    noter.start()
    instance = ControllerJob(spark, settings, "a").start()
    try:
        instance.wait_leading()
        wait_for(lambda: len(read_watermarks(settings.delta_root, stream)) >= 3, instance)
        run_before = instance.query.runId
        expired_at = time.monotonic()
        expire_session(instance._client, env.zk_connect)
        deadline = expired_at + RESUME_BOUND_S

        def restarted() -> bool:  # a new run of the query (the old one stopped)
            query = instance.query
            return query is not None and query.isActive and query.runId != run_before

        while not restarted():
            assert time.monotonic() < deadline, f"no restart {RESUME_BOUND_S} s after expiry"
            time.sleep(0.2)
        restarted_s = time.monotonic() - expired_at
        first_after = read_watermarks(settings.delta_root, stream)[-1].seq
        while read_watermarks(settings.delta_root, stream)[-1].seq <= first_after:
            assert time.monotonic() < deadline, f"no watermark {RESUME_BOUND_S} s after expiry"
            time.sleep(0.2)
        resumed_s = time.monotonic() - expired_at
    finally:
        noter.halt.set()
        noter.join(10)
        noter.writer.close()
        instance.stop()
    marks = read_watermarks(settings.delta_root, stream)
    check_sequence(marks)  # seq 0..n-1, times and cuts never go backwards
    report(
        "zk-session-expiry",
        f"query restarted {restarted_s:.1f} s and watermarks "
        f"resumed {resumed_s:.1f} s after the session expired; {len(marks)} watermarks, "
        f"seq gaps 0, regressions 0; query failures {len(instance.failures)}",
    )
    assert noter.error is None
