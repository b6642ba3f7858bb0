"""``tidemark write STREAM [EVENT ...]``: write events (arguments, else stdin lines).

    tidemark write shop/orders "order 1" "order 2" --key customer-7 --note-time now
    printf 'c1\\torder 1\\nc2\\torder 2\\n' | tidemark write shop/orders --key-separator '\\t'

Each event is written as its UTF-8 bytes. ``--key-separator`` splits each
line into routing key and event. ``--note-time`` notes a time after the
events (``now`` = the wall clock), and closing the writer sends its
shutdown mark. Services: as for ``tidemark stream``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import Any

from tidemark.cli.control_plane import KAFKA_TIMEOUT_S, control_plane, service_addresses
from tidemark.cli.output import add_verb, emit
from tidemark.cli.service_errors import quiet, service_timeout_s
from tidemark.cli.times import TIME_HELP, parse_time
from tidemark.controller.exceptions import InvalidTimestampError
from tidemark.errors import ConfigurationError


def register(sub: Any) -> None:
    write = add_verb(
        sub, "write", cmd_write, "write events to a stream (arguments or stdin lines)", on="stream"
    )
    write.add_argument("events", nargs="*", help="events; none: read lines from stdin")
    write.add_argument("--key", default=None, help="routing key of every event")
    write.add_argument(
        "--key-separator", default=None, help="split each line into KEY<SEP>EVENT (e.g. '\\t')"
    )
    write.add_argument(
        "--timestamp", default=None, metavar="TIME", help=f"of every event: {TIME_HELP}"
    )
    write.add_argument("--writer-id", default=None, help="writer id (default cli-<pid>)")
    write.add_argument(
        "--note-time", default=None, metavar="TIME", help=f"note this time at the end: {TIME_HELP}"
    )


def _events(args: argparse.Namespace) -> Iterator[tuple[str | None, bytes]]:
    lines: Any = args.events or (line.rstrip("\n") for line in sys.stdin)
    sep = args.key_separator
    if sep is not None:
        sep = sep.encode("utf-8").decode("unicode_escape")
    for line in lines:
        if sep is not None:
            key, found, event = line.partition(sep)
            if not found:
                raise ConfigurationError(f"line {line!r} has no key separator {sep!r}")
            yield key, event.encode("utf-8")
        else:
            yield args.key, line.encode("utf-8")


def cmd_write(args: argparse.Namespace) -> int:
    # confluent_kafka, fastavro: off tidemark --help (the parser imports every verb module)
    from tidemark.pipelines.writing.config import WriterConfig
    from tidemark.pipelines.writing.writer import EventWriter, wall_clock_ms  # as above

    note: int | None = None
    if args.note_time is not None:
        if args.note_time == "now":
            note = -1
        else:
            try:  # checked before anything is written
                note = parse_time(args.note_time, "--note-time")
            except InvalidTimestampError as exc:
                raise ConfigurationError(str(exc)) from None
    timestamp = None if args.timestamp is None else parse_time(args.timestamp, "--timestamp")
    kafka, _ = service_addresses()
    wait_ms = int(service_timeout_s(KAFKA_TIMEOUT_S) * 1000)
    writer_id = args.writer_id or f"cli-{os.getpid()}"
    count = 0
    # librdkafka's retries (a broker not answering yet) stay off stderr; -v shows them
    with control_plane() as plane, quiet("tidemark.pipelines.kafka"):
        writer = EventWriter(
            writer_id,
            args.stream,
            store=plane.store,
            bootstrap_servers=kafka,
            # acknowledged within the CLI's Kafka wait, else Kafka is reported unavailable
            config=WriterConfig(
                cluster=plane.settings, delivery_timeout_ms=wait_ms, close_timeout_ms=wait_ms
            ),
        )
        try:
            for key, event in _events(args):
                writer.write(event, key, timestamp=timestamp)
                count += 1
            if note is not None:
                writer.note_time(wall_clock_ms() if note == -1 else note)
            writer.flush()
            position = writer.position()
        finally:
            writer.close()
    emit(
        args,
        {
            "stream": args.stream,
            "writer_id": writer_id,
            "events": count,
            "position": {str(k): v for k, v in position.items()},
            "noted_time": writer.last_noted_time,
        },
        [
            f"wrote {count} event(s) to {args.stream} as writer {writer_id}",
            "position: "
            + (", ".join(f"segment {s}: next offset {o}" for s, o in sorted(position.items()))),
        ]
        + ([f"noted time {writer.last_noted_time}"] if writer.last_noted_time is not None else []),
    )
    return 0
