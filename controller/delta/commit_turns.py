"""One Delta commit at a time per table in this process.

    with commit_turn(table_uri):
        write_deltalake(dt, rows, mode="append")

delta-rs takes a table version by writing ``_delta_log/<version>.json`` only if it is
absent. On a local file system that is one atomic step; on S3 without a lock service
(``AWS_S3_ALLOW_UNSAFE_RENAME``) it is a look and then a write, so two commits racing
for one version may both "win" and one of them is lost without an error. The leading
driver is the only process that writes the controller's tables, but in it the sink's
appends and the maintainer's compactions, property changes and vacuums run on two
threads: they take turns here. (CI, 2026-11-27: without it a deployed controller's
watermarks 99 and 198 were missing from ``marks``.)
"""

from __future__ import annotations

import threading

_TURNS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()


def commit_turn(table_uri: str) -> threading.Lock:
    """The lock every commit to the table at ``table_uri`` holds in this process."""
    key = str(table_uri).rstrip("/")
    with _GUARD:
        return _TURNS.setdefault(key, threading.Lock())


__all__ = ["commit_turn"]
