"""Scheduled batch job: compact the controller's ``index`` and ``marks`` tables.

    python -m jobs.compact_index --delta-root /data/delta            # OPTIMIZE both
    python -m jobs.compact_index --delta-root s3a://lake/tidemark --zorder
    spark-submit --packages io.delta:delta-spark_2.13:4.0.0 jobs/compact_index.py \\
        --delta-root s3a://lake/tidemark --zorder

The controller appends a small file per table per micro-batch (one per
interval and bucket), so readers of a long-lived stream open many files.
``OPTIMIZE`` bin-packs them; with ``--zorder`` the rows are also clustered by
``(stream, seq)``, so a reader's ``stream = ...`` filter skips most files and
the rows come back nearly in ``seq`` order. It only rewrites files (a
``dataChange=false`` commit): readers at an older version keep working, the
controller's appends run concurrently without conflict, and deltalake
readers see the same rows. ``--vacuum-hours`` removes files no version
younger than that needs (keep it above the longest reader's life; the
default 168 h is Delta's).

Schedule it outside the streaming job, e.g. hourly from cron::

    17 * * * *  cd /opt/tidemark && .venv/bin/python -m jobs.compact_index \\
                    --delta-root /data/delta --zorder >> /var/log/tidemark-compact.log 2>&1

or as a periodic ``spark-submit`` from Airflow / a Kubernetes CronJob.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import Any

from jobs.tables import INDEX, MARKS, table_path

log = logging.getLogger(__name__)

ZORDER_COLUMNS = ("stream", "seq")


@dataclass(frozen=True)
class CompactSettings:
    delta_root: str
    tables: tuple[str, ...] = (INDEX, MARKS)
    zorder: bool = False
    vacuum_hours: float | None = None


@dataclass(frozen=True)
class CompactResult:
    table: str
    files_removed: int
    files_added: int


def compact(spark: Any, settings: CompactSettings) -> list[CompactResult]:
    """OPTIMIZE (and optionally Z-ORDER and VACUUM) each table; skips missing tables."""
    from delta.tables import DeltaTable

    results = []
    for table in settings.tables:
        path = table_path(settings.delta_root, table)
        if not DeltaTable.isDeltaTable(spark, path):
            log.info("no table at %s; skipped", path)
            continue
        dt = DeltaTable.forPath(spark, path)
        builder = dt.optimize()
        metrics = (
            builder.executeZOrderBy(*ZORDER_COLUMNS)
            if settings.zorder
            else builder.executeCompaction()
        ).collect()[0]["metrics"]
        results.append(
            CompactResult(table, int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"]))
        )
        if settings.vacuum_hours is not None:
            dt.vacuum(settings.vacuum_hours)
        log.info("%s: %s", table, results[-1])
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compact_index", description=__doc__.split("\n")[0])
    parser.add_argument("--delta-root", required=True)
    parser.add_argument("--zorder", action="store_true", help="cluster rows by (stream, seq)")
    parser.add_argument("--vacuum-hours", type=float, default=None)
    parser.add_argument("--table", action="append", choices=(INDEX, MARKS), default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    settings = CompactSettings(
        args.delta_root, tuple(args.table or (INDEX, MARKS)), args.zorder, args.vacuum_hours
    )
    if launched_by_spark_submit():
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName("tidemark-compact-index").getOrCreate()
        for r in compact(spark, settings):
            log.info("compacted %s", r)
        return 0
    from pathlib import Path
    from tempfile import mkdtemp

    from infra.spark import SparkSettings, spark_session, stop_spark

    local = spark_session(
        SparkSettings(work_dir=Path(mkdtemp(prefix="tidemark-compact-")), app_name="compact")
    )
    try:
        for r in compact(local, settings):
            log.info("compacted %s", r)
    finally:
        stop_spark(local)
    return 0


def launched_by_spark_submit() -> bool:
    """spark-submit starts the Python driver from its JVM and names the gateway port."""
    import os

    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


if __name__ == "__main__":
    sys.exit(main())
