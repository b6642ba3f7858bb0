"""``tidemark stream observe``: note a stream's time from the brokers' offsets.

    tidemark stream observe shop/legacy --lateness 30s
    tidemark stream observe shop/legacy --lateness 2m --interval 5s --idle 1m --writer-id obs-1

For streams whose producers send no marks (see
:mod:`tidemark.pipelines.writing.observer`). Runs until Ctrl-C or SIGTERM, then
sends its shutdown mark and exits 0. A bad duration, a negative one, or an
unknown stream is an error naming it (exit 1).
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable
from typing import Any

from tidemark.cli.control_plane import control_plane
from tidemark.cli.output import emit
from tidemark.cli.signals import stopping_on
from tidemark.cli.times import add_duration_flag


def register_observe(verb: Callable[..., Any]) -> None:
    """Add ``observe`` to the ``stream`` group (``verb`` as in its ``register``)."""
    observe = verb(
        "observe", "note a stream's time from the brokers' offsets (no marks needed)", cmd_observe
    )
    add_duration_flag(
        observe,
        "--lateness",
        "how far below the largest record timestamp seen to note time, e.g. 30s",
        required=True,
    )
    add_duration_flag(observe, "--interval", "how often to look (default 1s)", default="1s")
    add_duration_flag(
        observe,
        "--idle",
        "a partition with no new record for this long stops holding time back (default 10s)",
        default="10s",
    )
    observe.add_argument("--writer-id", help="the writer id of its marks (observer:<stream>)")


def cmd_observe(args: argparse.Namespace) -> int:
    # off tidemark --help (the parser imports every verb module)
    from tidemark.pipelines.writing.observer import ObserverConfig, StreamObserver

    config = ObserverConfig(args.lateness_ms, args.interval_ms, args.idle_ms)
    with (
        stopping_on(signal.SIGINT, signal.SIGTERM) as stop,
        control_plane() as cp,
        StreamObserver(
            args.stream,
            config,
            store=cp.store,
            bootstrap_servers=cp.kafka,
            writer_id=args.writer_id,
        ) as observer,
    ):
        emit(
            args,
            {"stream": args.stream, "writer_id": observer.writer_id, "observing": True},
            f"observing {args.stream} as {observer.writer_id} "
            f"(lateness {config.lateness_ms} ms); Ctrl-C stops",
        )
        observer.run(stop)
        last = observer.last_mark
    emit(
        args,
        {"stream": args.stream, "stopped": True, "time": None if last is None else last.time},
        f"stopped; last noted time {'(none)' if last is None else last.time}",
    )
    return 0


__all__ = ["cmd_observe", "register_observe"]
