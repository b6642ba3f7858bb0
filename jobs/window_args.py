"""The options of one ``window run`` (``tidemark window run``, ``spark-submit
jobs/complete_window.py``), without Spark or table readers, so the CLI lists its verbs fast.

    run = window_run_from_args(parser.parse_args([...]))
    list(run.windows(resume_after=None))   # [(start, end), ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass

from tidemark.controller.timestamps import (
    DURATION_FORMS,
    TIME_FORMS,
    parse_duration,
    parse_time,
    wall_clock_ms,
)
from tidemark.jobs.exceptions import JobConfigurationError


@dataclass(frozen=True)
class WindowRun:
    """One ``window run``: windows [from, to) or, with ``every_ms``, consecutive windows
    of that size from ``start_ms`` (up to ``end_ms`` when given)."""

    stream: str
    start_ms: int
    end_ms: int | None
    every_ms: int | None
    output: str
    sql: str | None
    wait_ms: int | None
    """How long to wait for a window to be complete; None: forever; 0: not at all."""
    also: tuple[str, ...] = ()
    """More streams: each window runs once it is complete on every one of them."""

    @property
    def streams(self) -> tuple[str, ...]:
        return (self.stream, *self.also)

    def __post_init__(self) -> None:
        if len(set(self.streams)) < len(self.streams):
            raise JobConfigurationError(f"each stream may be named once, got {self.streams}")
        if self.every_ms is None and self.end_ms is None:
            raise JobConfigurationError("give --to T2 (one window) or --every SIZE (a loop)")
        if self.every_ms is not None and self.every_ms < 1:
            raise JobConfigurationError(f"--every must be at least 1 ms, got {self.every_ms}")
        if self.end_ms is not None and self.end_ms <= self.start_ms:
            raise JobConfigurationError(
                f"a window needs --from < --to, got [{self.start_ms}, {self.end_ms})"
            )
        if self.wait_ms is not None and self.wait_ms < 0:
            raise JobConfigurationError(f"--wait-ms must be >= 0, got {self.wait_ms}")

    def windows(self, resume_after: int | None) -> Iterator[tuple[int, int]]:
        """The windows to run, after the one starting at ``resume_after`` (if any)."""
        if self.every_ms is None:
            assert self.end_ms is not None
            yield self.start_ms, self.end_ms
            return
        start = self.start_ms
        if resume_after is not None and resume_after >= start:
            start += ((resume_after - start) // self.every_ms + 1) * self.every_ms
        while self.end_ms is None or start + self.every_ms <= self.end_ms:
            yield start, start + self.every_ms
            start += self.every_ms


def add_window_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "stream", nargs="+", help="scope/name (several: each window once complete on all)"
    )
    parser.add_argument(
        "--from", dest="start", required=True, help=f"window start T1: {TIME_FORMS}"
    )
    parser.add_argument(
        "--to", dest="end", default=None, help=f"window end T2 (exclusive): {TIME_FORMS}"
    )
    parser.add_argument("--output", required=True, help="the result's Delta table (path or URI)")
    parser.add_argument("--sql", default=None, help="a query over the view window_events")
    parser.add_argument(
        "--every", default=None, help=f"run consecutive windows of this size: {DURATION_FORMS}"
    )
    parser.add_argument(
        "--wait",
        "--wait-ms",
        dest="wait_ms",
        default=None,
        help="wait this long for a window to be complete (default: 0 for one window, "
        f"forever with --every): {DURATION_FORMS}",
    )
    parser.add_argument("--delta-root", default=None, help="the controller's tables")
    parser.add_argument("--bootstrap", default=None, help="Kafka bootstrap servers")
    parser.add_argument("--zk", default=None, help="ZooKeeper connect string")
    parser.add_argument("--zk-root", default=None, help="metadata root in ZooKeeper")


def window_run_from_args(args: argparse.Namespace) -> WindowRun:
    every = None if args.every is None else parse_duration(args.every, "--every")
    wait = None if args.wait_ms is None else parse_duration(args.wait_ms, "--wait")
    if wait is None and every is None:
        wait = 0
    first, *more = [args.stream] if isinstance(args.stream, str) else args.stream
    now = wall_clock_ms()  # one now for both ends: "--from -1h --to now" is one hour
    return WindowRun(
        stream=first,
        also=tuple(more),
        start_ms=parse_time(args.start, "--from", now_ms=now),
        end_ms=None if args.end is None else parse_time(args.end, "--to", now_ms=now),
        every_ms=every,
        output=args.output,
        sql=args.sql,
        wait_ms=wait,
    )


__all__ = ["WindowRun", "add_window_arguments", "window_run_from_args"]
