"""``tidemark wait | window run | laggards``: acting when a stream's time passes T.

    tidemark wait shop/orders --time 1700000000000 --timeout-ms 60000
    tidemark wait shop/orders shop/payments --time 1700000000000   # both past T
    tidemark window run shop/orders --from 1700000000000 --to 1700000300000 \\
        --output /data/lake/orders_5m [--sql "SELECT count(*) AS n FROM window_events"]
    tidemark window run shop/orders --from 1700000000000 --every 5m --output /data/lake/o5m
    tidemark laggards shop/orders
    tidemark wait --table /lake/orders_enriched --time 1700000000000   # a tracked table

``wait`` (and ``window run``'s wait for completeness) is woken by new
watermarks: through ``tidemark serve`` when ``TIDEMARK_TIME_SERVICE`` is set
(a long poll; Delta while the service is down), else by watching the
``marks`` table (``tidemark.pipelines.reading.stream_time``). A stream the
metadata store does not hold (where ZooKeeper is known) or a delta root without
the controller's tables fails at once (exit 1) rather than wait out the timeout;
with ``--format json`` a timeout prints a row per stream short of the time
(``"reached": false``, its latest watermark, who holds it back).

Exit codes: 0 done; 75 (:data:`EXIT_NOT_YET`, sysexits' EX_TEMPFAIL) when
``wait`` timed out or ``window run``'s window is not complete yet -- a
scheduler (cron, Airflow) retries later; 1 any other error; 2 bad usage.
``window run`` is also ``window-run`` (``tidemark window GROUP`` still shows
a reader group's window; a group named ``run`` is ``tidemark window -- run``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tidemark.cli.output import add_verb, emit, emit_rows
from tidemark.cli.parsing import usage_error
from tidemark.cli.times import (
    TIME_HELP,
    add_duration_flag,
    parse_time,
)
from tidemark.controller.delta.location import TableLocation
from tidemark.environment import Environment
from tidemark.infra.services import data_root
from tidemark.jobs.window_args import add_window_arguments


def register(sub: Any) -> None:
    wait = add_verb(
        sub,
        "wait",
        cmd_wait,
        "wait until a stream's watermark reaches a time (exit 75 on timeout)",
        description="Exit 0 and print the first watermark with time >= T; exit 75 when "
        "the timeout passes first, naming the writers that hold the stream back.",
    )
    wait.add_argument("stream", nargs="*", help="scope/name (several: wait for all of them)")
    wait.add_argument(
        "--table",
        default=None,
        help="instead of streams, a tracked Delta table (tidemark table track): wait until "
        "a version of it is complete through T",
    )
    wait.add_argument(
        "--time", required=True, metavar="TIME", help=f"the stream time T: {TIME_HELP}"
    )
    add_duration_flag(wait, "--timeout", "give up after this long (default 60000)", default=60_000)
    add_delta_root(wait)

    window = add_verb(
        sub,
        "window-run",
        cmd_window_run,
        "run a complete window with Spark (also: tidemark window run ...)",
        formatted=False,
        description="Reads exactly the records between the window's two cuts and writes "
        "the result idempotently. Exit 75 while the window is not complete.",
    )
    add_window_arguments(window)

    lag = add_verb(
        sub,
        "laggards",
        cmd_laggards,
        "writers holding a stream's watermark back, and stale marks",
        on="stream",
    )
    add_delta_root(lag)


def add_delta_root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--delta-root", default=None, help="the controller's tables")


def lake_of(args: argparse.Namespace) -> TableLocation:
    """``--delta-root``, else the tables under the local data root: the one location the
    verb passes on."""
    if args.delta_root:
        return TableLocation.of(str(args.delta_root))
    return TableLocation.of(str(data_root(Environment.from_env())))


def cmd_wait(args: argparse.Namespace) -> int:
    # pyarrow, deltalake: off tidemark --help (the parser imports every verb module)
    from tidemark.cli.read import known_streams, tables_or_their_controller
    from tidemark.pipelines.reading.exceptions import StreamTimeTimeoutError
    from tidemark.pipelines.reading.stream_time import EXIT_NOT_YET, wait_for_time  # as above
    from tidemark.pipelines.reading.time_service import time_service_url  # as above

    if args.table is not None:
        return _wait_for_table(args)
    if not args.stream:
        raise usage_error("wait: give a stream (scope/name), or --table TABLE")
    streams = args.stream[0] if len(args.stream) == 1 else args.stream
    at, root = parse_time(args.time, "--time"), lake_of(args)
    if time_service_url() is None:  # (else the service names an unknown stream)
        # a misspelt stream or root would wait out the timeout and exit "not yet"
        tables_or_their_controller(root)
        known_streams(args.stream, where_known=True)
    try:
        found = wait_for_time(streams, at, args.timeout_ms, delta_root=root)
    except StreamTimeTimeoutError as exc:
        print(f"tidemark: {exc}", file=sys.stderr)
        if args.format == "json":  # text: the line above says it all
            emit_rows(args, _not_yet_rows(exc))
        return EXIT_NOT_YET
    marks = found.values() if isinstance(found, dict) else [found]
    rows = [{**_mark_row(m.stream, m), "reached": True} for m in marks]
    if len(rows) > 1:
        emit_rows(args, rows)
        return 0
    mark = rows[0]
    emit(
        args,
        mark,
        f"{mark['stream']} reached {mark['time']} (watermark {mark['seq']}, "
        f"upper {mark['upper_time']})",
    )
    return 0


def _wait_for_table(args: argparse.Namespace) -> int:
    from tidemark.pipelines.reading.exceptions import TableTimeTimeoutError
    from tidemark.pipelines.reading.stream_time import EXIT_NOT_YET  # as above
    from tidemark.pipelines.reading.table_time import wait_for_table

    if args.stream:
        raise usage_error("wait: give streams or --table, not both")
    at = parse_time(args.time, "--time")
    try:
        version = wait_for_table(args.table, at, args.timeout_ms, delta_root=lake_of(args))
    except TableTimeTimeoutError as exc:
        print(f"tidemark: {exc}", file=sys.stderr)
        if args.format == "json":
            row = {"table": exc.table, "time": at, "version": None, "reached": False}
            emit(args, {**row, "complete_through": exc.through}, "")
        return EXIT_NOT_YET
    row = {"table": args.table, "time": at, "version": version, "reached": True}
    emit(args, row, f"{args.table}: version {version} is complete through {at}")
    return 0


def _mark_row(stream: str, mark: Any) -> dict[str, Any]:
    """A stream's row in ``wait``'s answer: its watermark (``None`` fields: none yet)."""
    return {
        "stream": stream,
        "seq": None if mark is None else mark.seq,
        "time": None if mark is None else mark.time,
        "upper_time": None if mark is None else mark.upper_time,
    }


def _not_yet_rows(exc: Any) -> list[dict[str, Any]]:
    """``wait``'s answer on a timeout: a row per stream short of the time, its latest
    watermark and the writers holding it back, ``reached`` false (the rows of success)."""
    several = hasattr(exc, "behind")  # then each holder is named "stream: writer ..."
    behind = exc.behind if several else {exc.stream: exc.last}
    return [
        {
            **_mark_row(stream, last),
            "reached": False,
            "holding": [
                h.removeprefix(f"{stream}: ")
                for h in exc.holding
                if not several or h.startswith(f"{stream}: ")
            ],
        }
        for stream, last in behind.items()
    ]


def cmd_window_run(args: argparse.Namespace) -> int:
    # pyspark: only this verb runs a Spark job
    from tidemark.jobs.complete_window import run_from_args

    return run_from_args(args)


def cmd_laggards(args: argparse.Namespace) -> int:
    # pyarrow and deltalake: only this verb reads the marks table
    from tidemark.cli.read import known_streams, require_tables
    from tidemark.pipelines.reading.lateness import lateness_rows

    root = lake_of(args)
    require_tables(root)  # else a wrong root would say "no writer holds it back"
    known_streams([args.stream], where_known=True)  # else a misspelt stream would too
    rows = lateness_rows(root, args.stream)
    if not rows and args.format != "json":
        print(f"{args.stream}: no writer holds the watermark back; no stale marks")
        return 0
    emit_rows(args, rows)
    return 0


def rewrite_alias(argv: list[str]) -> list[str]:
    """``window run ...`` -> ``window-run ...`` (the verb ``window`` takes a group name)."""
    for i, word in enumerate(argv):
        if word.startswith("-"):
            continue
        if word == "window" and argv[i + 1 : i + 2] == ["run"]:
            return [*argv[:i], "window-run", *argv[i + 2 :]]
        break
    return argv


__all__ = [
    "add_delta_root",
    "cmd_laggards",
    "cmd_wait",
    "cmd_window_run",
    "lake_of",
    "register",
    "rewrite_alias",
]
