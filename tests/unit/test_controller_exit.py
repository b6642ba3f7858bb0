"""`run_until_signalled` reports a query that failed for good in its exit status."""

from __future__ import annotations

import os
import signal

import pytest

from tidemark.jobs.config import ControllerSettings
from tidemark.jobs.controller_job import ControllerJob


@pytest.mark.parametrize(("failures", "status"), [([], 0), (["bucket 0: boom"], 1)])
def test_exit_status(monkeypatch: pytest.MonkeyPatch, failures: list[str], status: int) -> None:
    settings = ControllerSettings("k:1", "z:2", "/d", "/c")
    instance = ControllerJob(None, settings, "c1")

    def start() -> ControllerJob:
        instance.failures.extend(failures)
        os.kill(os.getpid(), signal.SIGTERM)
        return instance

    monkeypatch.setattr(instance, "start", start)
    monkeypatch.setattr(instance, "stop", lambda: None)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert instance.run_until_signalled() == status
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
