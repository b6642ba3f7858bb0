"""Configuration changes reach a running controller whether or not marks flow.

    changes = ConfigChanges(store, on_change=scheduler.sweep).start()   # while leading
    changes.stop()

A stream's writers may all be silent, its next cycle due at a time computed
under the old configuration (a writer timeout of 10 minutes lowered to 1 s
would wait the 10 minutes). The leading driver therefore watches every
stream's record in ZooKeeper, and when one changes (``stream update``, a
scale, a new stream) makes every slot due at once (one re-evaluating due
record per slot, :meth:`tidemark.jobs.due.DueScheduler.sweep`): the next
micro-batch runs the cycle of every stream with a due time, under the values
its workers now read, and sets its due time anew. Changes that arrive together
cost one sweep.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tidemark.controller.zookeeper.store import ZooKeeperStore

log = logging.getLogger(__name__)

LIST_EVERY_S = 10.0
"""How often the streams are listed again (new streams get their watch)."""
SETTLE_S = 0.05
"""Changes within this long of each other are answered by one sweep."""


class ConfigChanges:
    """The leading driver's watch on every stream's record, sweeping on a change."""

    def __init__(
        self,
        store: ZooKeeperStore,
        on_change: Callable[[], None],
        list_every_s: float = LIST_EVERY_S,
    ) -> None:
        self.store = store
        self.on_change = on_change
        self.list_every_s = list_every_s
        self.sweeps = 0
        """How many sweeps changes caused (tests, logs)."""
        self._changed: set[str] = set()
        self._watched: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ConfigChanges:
        self._thread = threading.Thread(target=self._run, name="config-changes", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _fired(self, stream: str) -> None:
        with self._lock:
            self._changed.add(stream)
            self._watched.discard(stream)  # a watch fires once: set again below
        self._wake.set()

    def _arm(self) -> None:
        """A watch on every stream not watched (a failure: the next round tries again)."""
        try:
            streams = set(self.store.list_streams())
        except Exception as exc:  # ZooKeeper away: the next round
            log.debug("streams not listed for their configuration watches: %s", exc)
            return
        with self._lock:
            new = sorted(streams - self._watched)
            self._watched.update(new)
        if new:
            self.store.watch_once(new, self._fired)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._arm()
            self._wake.wait(self.list_every_s)
            if self._stopping.is_set():
                return
            self._wake.clear()
            self._stopping.wait(SETTLE_S)  # let a burst of changes arrive
            with self._lock:
                changed, self._changed = sorted(self._changed), set()
            if not changed:
                continue
            log.info("configuration of %s changed: every slot is due now", ", ".join(changed))
            try:
                self.on_change()
                self.sweeps += 1
            except Exception:  # the due records' own retries, or the next change
                log.exception("slots not made due after a configuration change")


__all__ = ["ConfigChanges"]
