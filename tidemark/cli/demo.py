"""``tidemark demo``: the pipeline end to end on local services, quietly.

    tidemark demo                 # steps, result tables, a chart; logs under the demo's directory
    tidemark demo --serve         # also the dashboard (its URL printed), until Ctrl-C

Everything the services, Spark's JVM and PySpark's Python workers print goes
to ``<demo dir>/logs/demo.log`` (the process's stdout and stderr are pointed
there while the demo runs, and child processes inherit them); temporary
Kafka and ZooKeeper keep their logs under ``<demo dir>/services``. The
terminal shows the steps as they run, then the result tables and where the
chart (``event-time-vs-watermark.png``) was written.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from tidemark.cli.output import add_verb
from tidemark.environment import Environment
from tidemark.infra.services import connected_services


def register(sub: Any) -> None:
    demo = add_verb(
        sub,
        "demo",
        cmd_demo,
        "writers -> Spark controller -> Delta watermarks -> readers, end to end",
    )
    demo.add_argument(
        "--dir", type=Path, default=None, help="the demo's directory (default ~/.tidemark/demo/…)"
    )
    demo.add_argument(
        "--serve",
        action="store_true",
        help="run the time service and dashboard during the demo and after it, until Ctrl-C",
    )
    demo.add_argument("--port", type=int, default=0, help="dashboard port with --serve (0: free)")


@contextlib.contextmanager
def quiet_output(log_path: Path) -> Iterator[TextIO]:
    """Point this process's stdout and stderr (fds 1 and 2, inherited by every child:
    the Spark JVM, its Python workers) at ``log_path``; yield the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        os.dup2(log_file.fileno(), 1)
        os.dup2(log_file.fileno(), 2)
        try:
            yield terminal
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            terminal.close()


class Steps:
    """One line per step with a spinner while it runs and its time once done (rich)."""

    def __init__(self, console: Any) -> None:
        # rich (the demo extra): only this verb loads it
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            SpinnerColumn(finished_text="[green]✓"),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
        )
        self._task: Any = None

    def __enter__(self) -> Steps:
        self.progress.start()
        return self

    def start(self, description: str) -> None:
        self.finish()
        self._task = self.progress.add_task(description, total=1)

    def finish(self) -> None:
        if self._task is not None:
            self.progress.update(self._task, completed=1)
            self.progress.stop_task(self._task)
            self._task = None

    def close(self) -> None:
        self.finish()
        self.progress.stop()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _default_dir() -> Path:
    return Environment.from_env().home / "demo" / time.strftime("%Y%m%d-%H%M%S")


def cmd_demo(args: argparse.Namespace) -> int:
    # rich: as in Steps
    from rich.console import Console

    from tidemark.demo import demo_cluster, new_unique, run_demo  # as above
    from tidemark.demo_chart import write_chart  # as above

    # Spark settings, kazoo, matplotlib: off tidemark --help (the parser imports every verb module)
    from tidemark.infra.spark import SparkSettings, spark_session, stop_spark

    demo_dir: Path = (args.dir or _default_dir()).expanduser().resolve()
    log_path = demo_dir / "logs" / "demo.log"
    unique = new_unique()
    with quiet_output(log_path) as terminal:
        console = Console(file=terminal, highlight=False)
        console.print(f"tidemark demo in [bold]{demo_dir}[/] (logs: {log_path})")
        with Steps(console) as steps, contextlib.ExitStack() as stack:
            steps.start("starting Kafka and ZooKeeper (or using yours)")
            services = stack.enter_context(connected_services(work_dir=demo_dir / "services"))
            assert services.kafka_bootstrap is not None and services.zk_connect is not None
            if args.serve:
                steps.start("starting the time service and dashboard")
                url = stack.enter_context(
                    _serving(services, demo_dir / "delta", args.port, demo_cluster(unique))
                )
                console.print(f"dashboard: [bold]{url}/[/]")
            steps.start("starting Spark")
            spark = spark_session(
                SparkSettings(work_dir=demo_dir / "spark", app_name="tidemark-demo")
            )
            try:
                report = run_demo(
                    services.kafka_bootstrap,
                    services.zk_connect,
                    demo_dir,
                    spark,
                    progress=steps.start,
                    unique=unique,
                )
            finally:
                steps.start("stopping Spark")
                stop_spark(spark)
                # pyspark's SIGINT handler outlives its context (it would fail on Ctrl-C)
                signal.signal(signal.SIGINT, signal.default_int_handler)
            steps.start("drawing the chart")
            chart = write_chart(report, demo_dir / "event-time-vs-watermark.png")
            steps.close()  # the step lines stay above the results
            if args.format == "json":
                payload = {**asdict(report), "chart": str(chart), "log": str(log_path)}
                terminal.write(json.dumps(payload, sort_keys=True, default=str) + "\n")
            else:
                _print_result(console, report, chart)
            if args.serve:
                console.print(f"dashboard: [bold]{url}/[/]  (Ctrl-C stops it and the services)")
                with contextlib.suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(3600)
    ok = bool(report.watermarks) and report.missed_at_or_after_seek == 0
    return 0 if ok else 1


@contextlib.contextmanager
def _serving(services: Any, tables_dir: Path, port: int, cluster: Any) -> Iterator[str]:
    # kazoo and the service's starlette/uvicorn load only for this verb (the parser
    # imports every verb module)
    from tidemark.controller.zookeeper.session import zookeeper_session
    from tidemark.controller.zookeeper.store import ZooKeeperStore  # as above
    from tidemark.service.server import RunningService  # as above
    from tidemark.service.state import TimeService  # as above

    tables_dir.mkdir(parents=True, exist_ok=True)
    with zookeeper_session(services.zk_connect, start_timeout_s=15) as client:
        service = TimeService(
            ZooKeeperStore(client, cluster.zk_root),
            client,
            str(tables_dir),
            bootstrap_servers=services.kafka_bootstrap,
            cluster=cluster,
            postgres_dsn=services.postgres_dsn,
        )
        with RunningService(service, port=port) as running:
            yield running.url


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    stamp = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return stamp.strftime("%H:%M:%S.%f")[:-3]


def _print_result(console: Any, report: Any, chart: Path) -> None:
    # rich: as in Steps
    from rich.table import Table

    console.print(
        f"\nstream [bold]{report.stream}[/]: {report.events_written} events from 3 writers, "
        f"scaled midway (segments now {report.segments_after_scale}), writer 'east' shut down; "
        f"writers noted time up to {_iso(report.noted_until)} UTC"
    )
    marks = Table(title=f"watermarks in Delta ({report.delta_root}/marks), the last 8")
    for column in ("seq", "time (UTC)", "upper time", "emitted at", "stream cut"):
        marks.add_column(column, justify="right" if column == "seq" else "left")
    for mark in report.watermarks[-8:]:
        cut = ", ".join(f"{seg}:{off}" for seg, off in sorted(mark.stream_cut.items()))
        marks.add_row(
            str(mark.seq),
            _iso(mark.time),
            _iso(mark.upper_time),
            _iso(report.emitted_at.get(mark.seq)),
            cut,
        )
    console.print(marks)
    if not report.watermarks or report.watermarks[-1].time < report.noted_until:
        console.print(
            "[bold red]the controller did not reach the last noted time within the demo's "
            "wait[/] (a busy machine?); its log is in the demo's logs/ directory"
        )
    seek = Table(title=f"reading by time: t = {_iso(report.seek_time)} UTC", show_header=False)
    seek.add_column("what")
    seek.add_column("answer")
    seek.add_row("where to start (stream_cut_at)", str(report.start_cut))
    seek.add_row("where to stop (complete_cut_at)", str(report.stop_cut))
    seek.add_row(
        "a reader group from t read",
        f"{report.events_read_from_seek} events, {report.events_at_or_after_seek} with time "
        f">= t, missed [bold]{report.missed_at_or_after_seek}[/]",
    )
    window = report.reader_window
    seek.add_row(
        "the reader's time window at the end",
        "-" if window is None else f"[{_iso(window.lower)}, {_iso(window.upper)}]",
    )
    console.print(seek)
    console.print(f"chart: [bold]{chart}[/] (event time vs watermark time)")
