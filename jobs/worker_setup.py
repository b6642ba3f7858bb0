"""Per-process setup of a Spark Python worker running the controller's processor.

    keep_zip_directories()      # idempotent; called from ControllerProcessor.init

PySpark's worker calls :func:`importlib.invalidate_caches` at the start of
every task (``worker_util.setup_spark_files``). On Python 3.11 that makes
every :class:`zipimport.zipimporter` on ``sys.path`` read its archive's whole
directory again, and a worker's path holds ``pyspark.zip``, the py4j zip and
Spark's core jar: profiled, that re-reading was about 40% of a busy worker's
time and most of a timers-only micro-batch. :func:`keep_zip_directories`
makes a zip importer re-read its archive only when the file changed (its
modification time or size), which is what invalidation is for.
"""

from __future__ import annotations

import os
import threading
import zipimport
from typing import Any

_lock = threading.Lock()
_MARK = "_tidemark_keeps_directories"


def keep_zip_directories() -> None:
    """Let ``zipimporter.invalidate_caches`` skip archives that did not change (idempotent)."""
    with _lock:
        current = zipimport.zipimporter.invalidate_caches
        if getattr(current, _MARK, False):
            return
        original = current
        stamps: dict[str, tuple[int, int]] = {}

        def invalidate_caches(self: Any) -> None:
            try:
                st = os.stat(self.archive)
                stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
            except OSError:
                stamp = None
            if stamp is not None and stamps.get(self.archive) == stamp:
                return
            original(self)
            if stamp is not None:
                stamps[self.archive] = stamp

        setattr(invalidate_caches, _MARK, True)
        zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]


__all__ = ["keep_zip_directories"]
