"""Waiting in tests on a condition, not for a fixed time.

    took_s = wait_until(lambda: leader() == "a", 60, "driver a leads", driver)

Polls ``condition`` until it is true and returns the seconds that took; fails naming
what it waited for when ``timeout_s`` passes first, or at once when one of the processes
it watches has exited (waiting on a dead driver would only run out the time).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from tidemark.infra.process import ManagedProcess, wait_for

POLL_S = 0.3
"""How often the condition is asked again, by default: a condition that reads a table or
asks a service costs the services under test their share of two cores."""


def wait_until(
    condition: Callable[[], object],
    timeout_s: float,
    what: str,
    *alive: ManagedProcess | subprocess.Popen[bytes] | subprocess.Popen[str],
    poll_s: float = POLL_S,
) -> float:
    """Poll ``condition`` every ``poll_s`` until true (:func:`tidemark.infra.process.wait_for`,
    the services' own wait); the seconds it took. Fails when ``timeout_s`` passes or a
    process of ``alive`` exits."""

    def ready() -> bool:
        if condition():
            return True
        for proc in alive:
            if isinstance(proc, ManagedProcess):
                proc.check_alive()
            elif proc.poll() is not None:
                raise AssertionError(f"{what}: process {proc.pid} exited ({proc.returncode})")
        return False

    started = time.monotonic()
    if not wait_for(ready, timeout_s, poll_s):
        raise AssertionError(f"{what}: not within {timeout_s:g} s")
    return time.monotonic() - started
