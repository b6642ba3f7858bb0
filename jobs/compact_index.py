"""Manual maintenance of the controller's tables: compact, checkpoint, vacuum -- now.

    python -m tidemark.jobs.compact_index --delta-root /data/delta
    python -m tidemark.jobs.compact_index --delta-root s3://lake/tidemark --table index --no-vacuum

The controller's leader runs the same maintenance by itself
(:class:`tidemark.controller.delta.maintenance.Maintainer`, driven by file counts and sizes);
this tool runs one forced pass of it, for an operator, a table written by
something else, or after the controller was stopped. Same code, same
settings: small files are bin-packed in commit order into files of up to
``--target-mb`` with row groups of ``--row-group-rows`` rows, a checkpoint
is written, and data files removed more than ``--time-travel-hours`` ago
are deleted (``--no-vacuum`` keeps them). Every step is a delta-rs commit
that a running controller's appends do not conflict with, and it needs
no Spark (``spark-submit jobs/compact_index.py ...`` works too: it simply
does not use the session).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tidemark.controller.delta.maintenance import (
    DEFAULT_ROW_GROUP_ROWS,
    DEFAULT_TARGET_FILE_BYTES,
    DEFAULT_TIME_TRAVEL_HOURS,
    MIB,
    Maintainer,
    MaintenanceSettings,
    PassReport,
)
from tidemark.schemas.tables import TABLES

log = logging.getLogger(__name__)


def compact(settings: MaintenanceSettings, *, vacuum: bool = True) -> list[PassReport]:
    """One forced maintenance pass over ``settings.tables`` (missing tables are skipped)."""
    reports = Maintainer(settings).run_once(force=True, vacuum=vacuum)
    for report in reports:
        log.info("%s", report)
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compact_index", description=__doc__.split("\n")[0])
    parser.add_argument("--delta-root", required=True)
    parser.add_argument("--table", action="append", choices=TABLES, default=None)
    parser.add_argument(
        "--target-mb",
        type=float,
        default=DEFAULT_TARGET_FILE_BYTES / MIB,
        help="file size",
    )
    parser.add_argument("--row-group-rows", type=int, default=DEFAULT_ROW_GROUP_ROWS)
    parser.add_argument(
        "--time-travel-hours",
        "--vacuum-hours",
        type=int,
        default=DEFAULT_TIME_TRAVEL_HOURS,
        help="keep files removed less than this long ago (default: 168 = 7 days)",
    )
    parser.add_argument("--no-vacuum", action="store_true", help="compact and checkpoint only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    settings = MaintenanceSettings(
        args.delta_root,
        tables=tuple(args.table or TABLES),
        target_file_bytes=int(args.target_mb * MIB),
        row_group_rows=args.row_group_rows,
        time_travel_hours=args.time_travel_hours,
    )
    reports = compact(settings, vacuum=not args.no_vacuum)
    for report in reports:
        print(
            f"{report.table}: {report.files_before} -> {report.files_after} files"
            f" (compacted {report.files_removed} into {report.files_added},"
            f" vacuumed {report.vacuumed})" + (f" ERROR {report.error}" if report.error else "")
        )
    return 1 if any(r.error for r in reports) else 0


def launched_by_spark_submit() -> bool:
    """spark-submit starts the Python driver from its JVM and names the gateway port
    (used by ``tidemark.jobs.complete_window``)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


if __name__ == "__main__":
    sys.exit(main())
