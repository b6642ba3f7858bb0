"""The Delta sink of the controller's query: idempotent appends to the Delta tables.

    sink = DeltaSink(lake, app_id="tidemark-controller/tidemark-marks")
    query = ...start(); sink.bind(query.id)         # the query id names the transactions
    sink.write(rows, batch_id)                      # controller_job.Batches, per batch

Each micro-batch's output (a handful of rows per stream and interval) is
collected once to the driver -- the stateful stage runs exactly once per
batch -- and appended to ``marks``, then ``index``, then ``rejected_marks``,
then ``laggards``, each commit carrying the Delta transaction
identifier ``(appId = <app id>/<query id>, version = <batch id>)``. A batch
whose version a table already holds for that appId is skipped, so a batch
re-run after a crash (same offsets, same state, same batch timestamp) never
duplicates a row. The query id persists in the bucket's checkpoint, so the
instance that takes a bucket over continues the same application id; a
*new* checkpoint gets a new id and starts its own count.

The tables are appended through :class:`tidemark.controller.delta.appends.DeltaTables`
(delta-rs); this module picks each table's rows from the query's output rows, which
hold them already (typed, made once by :mod:`tidemark.jobs.processor` with the row
converters of :mod:`tidemark.schemas.tables`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidemark.controller.delta.appends import DeltaTables
from tidemark.controller.delta.location import Root
from tidemark.jobs.processor import LAGGARD, REJECTED, WATERMARK
from tidemark.schemas.tables import (
    INDEX,
    INDEX_COLUMNS,
    LAGGARDS,
    MARKS,
    MARKS_COLUMNS,
    REJECTED_MARKS,
    TABLES,
)

log = logging.getLogger(__name__)


def split_rows(
    rows: Sequence[Mapping[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """A batch's output rows (``tidemark.jobs.processor.COLUMNS``) -> the rows of each Delta
    table (marks and index sorted by stream, seq). Each kind's fields are its tables' rows
    already (made by :mod:`tidemark.jobs.processor`): a watermark's give ``marks`` and
    ``index`` their columns, nothing is converted here."""
    emitted = sorted(
        (r[WATERMARK] for r in rows if r["kind"] == WATERMARK),
        key=lambda w: (w["stream"], w["seq"]),
    )
    return {
        MARKS: [{c: w[c] for c in MARKS_COLUMNS} for w in emitted],
        INDEX: [{c: w[c] for c in INDEX_COLUMNS} for w in emitted],
        REJECTED_MARKS: [r[REJECTED] for r in rows if r["kind"] == REJECTED],
        LAGGARDS: [r[LAGGARD] for r in rows if r["kind"] == LAGGARD],
    }


class DeltaSink:
    """Writes the batches :class:`tidemark.jobs.controller_job.Batches` (the query's
    ``foreachBatch``)
    collects; :meth:`bind` gives it the query id once started."""

    def __init__(
        self,
        lake: Root,
        app_id: str,
        tables: DeltaTables | None = None,
    ) -> None:
        self.app_id = app_id
        self.tables = tables if tables is not None else DeltaTables(lake)
        self._query_id: str | None = None
        self._bound = threading.Event()
        self.batches = 0
        self.rows_written = 0
        # metrics hook (tidemark.jobs.metrics): called as observer(rows, batch_id, duration_s)
        self.observer: Callable[[Sequence[Mapping[str, Any]], int, float], None] | None = None

    def bind(self, query_id: str) -> None:
        """The query started: its id names the transactions. The tables are brought up
        to date first: a new leader's handles predate the old leader's last commits,
        which carry the same application id, so a blind first append would fail on
        each table and read the log anyway."""
        self._query_id = query_id
        try:
            self.tables.open_all(refresh=True)
        except Exception:  # the appends open and refresh what they need themselves
            log.exception("opening the tables under %s failed", self.tables.location.uri)
        self._bound.set()

    def txn_app_id(self) -> str:
        if not self._bound.wait(120):
            raise RuntimeError("the sink was never bound to its query")
        return f"{self.app_id}/{self._query_id}"

    def write(self, rows: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Append one batch's output rows (the processor's ``OUTPUT_SCHEMA``)."""
        app = self.txn_app_id()
        by_table = split_rows(rows)
        for table in TABLES:
            if by_table[table]:
                self.tables.append(table, by_table[table], app, batch_id)
        self.batches += 1
        self.rows_written += len(rows)
        if rows:
            log.debug(
                "batch %d of %s: %d watermarks, %d rejected, %d laggard rows",
                batch_id,
                app,
                len(by_table[MARKS]),
                len(by_table[REJECTED_MARKS]),
                len(by_table[LAGGARDS]),
            )


__all__ = ["DeltaSink", "split_rows"]
