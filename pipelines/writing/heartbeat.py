"""Noting time on a timer: a writer's heartbeat thread.

    beat = Heartbeat("w1", interval_ms=1_000, tick=writer_notes_now)
    beat.start()
    ...
    beat.stop()            # before the writer's shutdown mark

A writer that notes time automatically (``EventWriter(...,
automatically_note_time=True)``) calls ``tick`` every interval from a daemon
thread, so the controller keeps hearing from it while it writes nothing.
``tick`` returns ``False`` once the writer is closed; an exception in it is
logged and the next interval tries again. What time to note is the mark
protocol's rule (``MarkPublisher.automatic_time``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Heartbeat:
    """Calls ``tick`` every ``interval_ms`` on a thread of its own until stopped."""

    def __init__(self, writer_id: str | None, interval_ms: int, tick: Callable[[], bool]) -> None:
        self.writer_id = writer_id
        self._interval_s = interval_ms / 1000
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"tidemark-note-{writer_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop ticking; waits for a tick under way (unless called from one)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                if not self._tick():
                    return
            except Exception:
                log.exception("writer %s: noting time automatically failed", self.writer_id)


__all__ = ["Heartbeat"]
