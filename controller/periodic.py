"""Run a step every interval until stopped, in this thread or a thread of its own.

    loop = Periodic("retention", step, interval_ms=10_000)
    handle = loop.start()       # a daemon thread; the first step runs at once
    ...
    handle.stop()               # waits for the running step to end

A step that raises is logged and the loop goes on (the next step retries);
``run(stop)`` runs in the calling thread until ``stop`` is set.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    """``step()``, then a wait of ``interval_ms``, again until stopped."""

    def __init__(self, name: str, step: Callable[[], object], interval_ms: int) -> None:
        if interval_ms < 1:
            raise ValueError(f"{name}: interval_ms must be >= 1, got {interval_ms}")
        self.name = name
        self.step = step
        self.interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self, stop: threading.Event | None = None) -> None:
        """Step until ``stop`` (or :meth:`stop`) is set."""
        stop = stop or self._stop
        while not stop.is_set():
            try:
                self.step()
            except Exception:
                log.exception("%s: a step failed; retrying in %.1f s", self.name, self.interval_s)
            if stop.wait(self.interval_s) or self._stop.is_set():
                return

    def start(self) -> Periodic:
        """Run in a daemon thread; returns self (call :meth:`stop` to end it)."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name} runs already")
        self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float | None = 60.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


__all__ = ["Periodic"]
