"""The ``foreachBatch`` sink of a bucket's query: idempotent appends to the Delta tables.

    sink = DeltaSink(delta_root, app_id="tidemark-controller/tidemark-marks/bucket-0")
    query = frame.writeStream.foreachBatch(sink).start(); sink.bind(query.id)

Each micro-batch's output (a handful of rows per stream and interval) is
collected once -- the stateful stage runs exactly once per batch -- and
appended to ``marks``, then ``index``, then ``rejected_marks``, each with
``txnAppId = <app id>/<query id>`` and ``txnVersion = <batch id>``. Delta
skips an append whose ``(txnAppId, txnVersion)`` it has already committed,
so a batch re-run after a crash (same offsets, same state, same batch
timestamp) never duplicates a row. The query id persists in the bucket's
checkpoint, so the instance that takes a bucket over continues the same
application id; a *new* checkpoint gets a new id and starts its own count.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from jobs.processor import REJECTED, WATERMARK
from jobs.tables import INDEX, MARKS, REJECTED_MARKS, TABLES, spark_schema, table_path

log = logging.getLogger(__name__)


def ensure_tables(spark: Any, delta_root: str, attempts: int = 5) -> None:
    """Create the three tables if missing (plain Delta: readable by delta-rs)."""
    from delta.tables import DeltaTable

    for table in TABLES:
        for attempt in range(attempts):
            try:
                (
                    DeltaTable.createIfNotExists(spark)
                    .location(table_path(delta_root, table))
                    .addColumns(spark_schema(table))
                    .execute()
                )
                break
            except Exception as exc:  # a concurrent creator won the race: look again
                if attempt == attempts - 1:
                    raise
                log.info("creating table %s raced (%s); retrying", table, exc)


class DeltaSink:
    """Callable for ``foreachBatch``; :meth:`bind` gives it the query id once started."""

    def __init__(self, delta_root: str, app_id: str) -> None:
        self.delta_root = delta_root
        self.app_id = app_id
        self._query_id: str | None = None
        self._bound = threading.Event()
        self.batches = 0
        self.rows_written = 0

    def bind(self, query_id: str) -> None:
        self._query_id = query_id
        self._bound.set()

    def txn_app_id(self) -> str:
        if not self._bound.wait(120):
            raise RuntimeError("the sink was never bound to its query")
        return f"{self.app_id}/{self._query_id}"

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = frame.collect()
        app = self.txn_app_id()
        spark = frame.sparkSession
        marks = sorted(
            (r for r in rows if r["kind"] == WATERMARK), key=lambda r: (r["stream"], r["seq"])
        )
        rejected = [r for r in rows if r["kind"] == REJECTED]
        if marks:
            self._append(
                spark,
                MARKS,
                [
                    (
                        r["stream"],
                        r["seq"],
                        r["time"],
                        r["upper_time"],
                        [(s, o) for s, o in zip(r["cut_segments"], r["cut_offsets"], strict=True)],
                        list(r["writers"] or ()),
                        r["emitted_at"],
                    )
                    for r in marks
                ],
                app,
                batch_id,
            )
            self._append(
                spark,
                INDEX,
                [(r["stream"], r["seq"], r["time"], r["upper_time_max"]) for r in marks],
                app,
                batch_id,
            )
        if rejected:
            self._append(
                spark,
                REJECTED_MARKS,
                [
                    (
                        r["stream"],
                        r["writer"],
                        r["reason"],
                        None if r["raw"] is None else bytes(r["raw"]),
                        r["kafka_partition"],
                        r["kafka_offset"],
                        r["at"],
                    )
                    for r in rejected
                ],
                app,
                batch_id,
            )
        self.batches += 1
        self.rows_written += len(rows)
        if rows:
            log.debug(
                "batch %d of %s: %d watermarks, %d rejected",
                batch_id,
                app,
                len(marks),
                len(rejected),
            )

    def _append(
        self, spark: Any, table: str, rows: list[tuple[Any, ...]], app: str, batch_id: int
    ) -> None:
        (
            spark.createDataFrame(rows, spark_schema(table))
            .coalesce(1)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", app)
            .option("txnVersion", batch_id)
            .save(table_path(self.delta_root, table))
        )


__all__ = ["DeltaSink", "ensure_tables"]
