"""``tidemark table track|status|version-at``: Delta tables that know how complete they are.

    tidemark table track /lake/orders_enriched --checkpoint /chk/orders_enriched
    tidemark table track --follow                  # keep tracking every tracked table
    tidemark table status /lake/orders_enriched --format json
    tidemark table version-at /lake/orders_enriched --time 2026-01-01T12:00
    tidemark wait --table /lake/orders_enriched --time 2026-01-01T12:00 && spark-submit ...

``track`` registers a table written by a Structured Streaming query (its streams are
read from the query's checkpoint) and answers its versions so far; with ``--follow`` it
goes on, for every tracked table under the delta root, until interrupted -- a job of
its own, costing a ``stat`` per table and interval while nothing commits. Answers live
in the ``table_completeness`` table beside the controller's tables.

Exit codes, as ``wait``'s: 0 done; 75 (EX_TEMPFAIL) when ``version-at`` finds no
version complete through the time yet (a scheduler retries later); 1 any other error
(a table not tracked, completeness unknown); 2 bad usage.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from tidemark.cli.acting import add_delta_root, lake_of
from tidemark.cli.output import add_verb, emit
from tidemark.cli.parsing import usage_error
from tidemark.cli.times import TIME_HELP, add_duration_flag, parse_time

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    group = sub.add_parser("table", help="Delta tables written from streams: how complete")
    verbs = group.add_subparsers(dest="table_command", metavar="VERB", required=True)

    track = add_verb(
        verbs,
        "track",
        cmd_track,
        "track a table written by a streaming query",
        description="Registers TABLE (written by the Structured Streaming query whose "
        "checkpoint is --checkpoint) and answers its versions so far; --follow keeps "
        "tracking every tracked table until interrupted.",
    )
    track.add_argument("table", nargs="?", help="the Delta table's path")
    track.add_argument("--checkpoint", help="the writing query's checkpointLocation")
    track.add_argument(
        "--app-id",
        default=None,
        help="the writer id of the table's txn actions (a foreachBatch writer's txnAppId; "
        "default: the query's id, as the Delta sink writes it)",
    )
    track.add_argument("--follow", action="store_true", help="keep tracking until interrupted")
    add_duration_flag(track, "--interval", "how often --follow looks (default 1s)", default=1000)
    add_delta_root(track)

    status = add_verb(verbs, "status", cmd_status, "what a tracked table is complete through")
    status.add_argument("table", help="the Delta table's path")
    add_delta_root(status)

    at = add_verb(
        verbs,
        "version-at",
        cmd_version_at,
        "the first version complete through a time (exit 75: none yet)",
    )
    at.add_argument("table", help="the Delta table's path")
    at.add_argument("--time", required=True, metavar="TIME", help=f"the time T: {TIME_HELP}")
    add_delta_root(at)


def cmd_track(args: argparse.Namespace) -> int:
    # deltalake, pyarrow: off tidemark --help
    from tidemark.pipelines.reading.tracking import Tracker

    if args.table is None and not args.follow:
        raise usage_error("table track: give a TABLE (with --checkpoint), or --follow")
    if args.table is not None and not args.checkpoint:
        raise usage_error("table track: --checkpoint is required with a TABLE")
    tracker = Tracker(lake_of(args))
    if args.table is not None:
        tracker.add(args.table, args.checkpoint, args.app_id)
        tracker.poll()
        _print_status(args, args.table)
    if not args.follow:
        return 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    tracker.run(stop, args.interval_ms)  # (Ctrl-C: exit 130, as every verb)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    _print_status(args, args.table)
    return 0


def _print_status(args: argparse.Namespace, table: str) -> None:
    from tidemark.pipelines.reading.table_time import table_status

    found = table_status(table, delta_root=lake_of(args))
    row = found.as_row()
    if found.reason:
        text = f"{found.table}: unknown ({found.reason})"
    elif found.complete_through is None:
        text = f"{found.table}: at version {found.version}, complete through no time yet"
    else:
        behind = "" if found.behind_ms is None else f", {found.behind_ms} ms behind its streams"
        text = (
            f"{found.table}: complete through {found.complete_through} at version "
            f"{found.version}{behind}"
        )
    emit(args, row, text)


def cmd_version_at(args: argparse.Namespace) -> int:
    from tidemark.pipelines.reading.stream_time import EXIT_NOT_YET
    from tidemark.pipelines.reading.table_time import versions_of

    at = parse_time(args.time, "--time")
    found = versions_of(args.table, lake_of(args))
    version = found.first_at(at)
    row = {"table": found.table, "time": at, "version": version, "complete": version is not None}
    if version is None:
        print(
            f"tidemark: table {found.table} is not complete through {at} yet "
            f"(complete through {found.best})",
            file=sys.stderr,
        )
        if args.format == "json":
            emit(args, row, "")
        return EXIT_NOT_YET
    emit(args, row, f"{found.table}: version {version} is the first complete through {at}")
    return 0


__all__ = ["cmd_status", "cmd_track", "cmd_version_at", "register"]
