"""``tidemark timeline ...``: scheduled messages with leases.

    tidemark timeline create reminders --buckets 16
    tidemark timeline put reminders --group app --in-ms 60000 --body "hello" --id hello-1
    tidemark timeline put reports --group app --stream shop/orders --stream-time 1700000000000 \
        --body "close the books"
    tidemark timeline lease reminders --consumer me --duration-ms 30000   # prints each token
    tidemark timeline extend reminders hello-1 --consumer me --token TOKEN --by-ms 60000
    tidemark timeline delete reminders hello-1 --consumer me --token TOKEN
    tidemark timeline count reminders --format json
    tidemark timeline relay reminders --consumer relay-1 --topic due-reminders
    tidemark timeline ingest --from orders --to orders-delayed --delay 2h   # a time buffer
    tidemark timeline purge --keep-deleted-ms 3600000 --every-ms 60000

The store is TIDEMARK_POSTGRES_DSN, else the PostgreSQL that ``tidemark up``
started. The schema is created or upgraded on first use. A lease's token is
its capability: extend, release and delete as holder need ``--token``.
Event-time messages (``--stream-time``) fall due for ``lease``, ``relay`` and
``ingest`` once the stream's watermark in TIDEMARK_DELTA_ROOT's ``marks``
table passes their time.
"""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from tidemark.cli.output import add_verb, emit, emit_rows
from tidemark.cli.service_errors import service_timeout_s
from tidemark.cli.times import (
    DURATION_HELP,
    add_duration_flag,
    add_time_flag,
    duration_argument,
    seconds_argument,
    time_argument,
)
from tidemark.environment import Environment
from tidemark.errors import ConfigurationError
from tidemark.infra.services import KAFKA, POSTGRES, resolve_services


def _dsn() -> str:
    """The timeline store's DSN: environment, else ``tidemark up``'s PostgreSQL."""
    return str(resolve_services(POSTGRES).postgres_dsn)


def _bootstrap(given: str | None) -> str:
    return str(resolve_services(KAFKA, kafka=given).kafka_bootstrap)


KAFKA_WAIT_S = 10.0
"""How long relay and ingest wait for the brokers' answer before they report Kafka
unavailable (``TIDEMARK_SERVICE_TIMEOUT_MS`` overrides it)."""


def _kafka_wait_ms() -> int:
    return int(service_timeout_s(KAFKA_WAIT_S) * 1000)


@contextmanager
def _store() -> Iterator[Any]:
    # the timeline package loads psycopg: only its verbs pay for it, not --help
    from tidemark.pipelines.timeline.store import TimelineStore

    with TimelineStore(_dsn()) as store:
        store.migrate()
        yield store


def _stream_clock() -> Any:
    """Stream times for event-time messages: the ``marks`` table under TIDEMARK_DELTA_ROOT
    (None when it is not set: such messages wait)."""
    if not Environment.from_env().delta_root:
        return None
    # the reading side loads deltalake: only the verbs that lease pay for it
    from tidemark.pipelines.reading.stream_time import LatestStreamTimes

    return LatestStreamTimes()


def _add_host_options(p: argparse.ArgumentParser, purge: bool = True) -> None:
    """A long-running timeline process: its metrics port and, by default, the purge."""
    p.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    if purge:
        p.add_argument("--no-purge", action="store_true", help="do not purge deleted messages here")
        add_duration_flag(p, "--purge-every", "purge deleted messages this often", default=60_000)
        add_duration_flag(
            p, "--keep-deleted", "keep a deleted message this long first", default=3_600_000
        )


def _add_relay_options(p: argparse.ArgumentParser) -> None:
    """A verb that produces to Kafka until stopped (relay, ingest): where Kafka is, how
    long to run, and the host options."""
    p.add_argument("--bootstrap", help="Kafka bootstrap servers")
    p.add_argument(
        "--duration-s",
        type=seconds_argument("--duration-s"),
        help="stop after this long: seconds, or 90s, 2m, 1h (default: Ctrl-C)",
    )
    _add_host_options(p)


@contextmanager
def _host(args: argparse.Namespace, dsn: str) -> Iterator[Any]:
    """Serve ``--metrics-port``; run the purge of deleted messages on its schedule unless
    ``--no-purge`` (yields the purge loop, or None)."""
    if args.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port)
    if getattr(args, "no_purge", True):
        yield None
        return
    # the timeline package loads psycopg: only its verbs pay for it, not --help
    from tidemark.pipelines.timeline.housekeeping import PurgeLoop, PurgeSettings
    from tidemark.pipelines.timeline.store import TimelineStore

    with TimelineStore(dsn) as store:
        loop = PurgeLoop(
            store, PurgeSettings(args.purge_every_ms, keep_deleted_ms=args.keep_deleted_ms)
        )
        loop.start()
        try:
            yield loop
        finally:
            loop.stop()


@contextmanager
def _until_stopped(duration_s: float | None) -> Iterator[threading.Event]:
    """An event set by SIGTERM, or after ``duration_s`` when given."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    timer = None if duration_s is None else threading.Timer(duration_s, stop.set)
    if timer is not None:
        timer.start()
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)
        if timer is not None:
            timer.cancel()


def _message_row(message: Any) -> dict[str, Any]:
    row = asdict(message)
    row["body"] = message.body.decode("utf-8", errors="replace")
    return row


def _show_changed(args: argparse.Namespace, message: Any, text: str) -> int:
    """Print the message a verb changed (its row, or ``text``); the verb's exit code."""
    emit(args, _message_row(message), text)
    return 0


def _add_expected_version(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--expected-version",
        type=int,
        help="change the message only at this version (as printed), else fail",
    )


def _add_holder_arguments(p: argparse.ArgumentParser) -> None:
    """The lease holder's change to one message: its id, the holder, the lease's token."""
    p.add_argument("id", help="the message's id")
    p.add_argument("--consumer", required=True, help="the lease holder's id")
    p.add_argument("--token", required=True, help="the lease's token (printed by lease)")


def register(sub: Any) -> None:
    timeline = sub.add_parser("timeline", help="scheduled messages with leases (PostgreSQL)")
    verbs = timeline.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, help: str, func: Any) -> argparse.ArgumentParser:
        return add_verb(verbs, name, func, help, on="timeline")

    p = verb("create", "create a timeline (again with the same settings: no-op)", cmd_create)
    p.add_argument(
        "--buckets", type=int, default=16, help="buckets its messages spread over (default 16)"
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=1 << 20,
        help="the largest message body it takes, in bytes (default 1 MiB)",
    )

    p = verb("put", "create a scheduled message", cmd_put)
    p.add_argument("--group", required=True, help="producer group (owner)")
    p.add_argument("--id", help="natural id (default: generated, time-sortable)")
    p.add_argument("--body", required=True, help="message body (UTF-8 text)")
    when = p.add_mutually_exclusive_group(required=True)
    add_time_flag(when, "--at", "due time")
    add_duration_flag(when, "--in", "due this long from now")
    when.add_argument(
        "--stream-time",
        type=time_argument("--stream-time"),
        metavar="TIME",
        help="due once --stream's watermark reaches this event time",
    )
    p.add_argument("--stream", help="with --stream-time: the stream (scope/name)")

    p = verb("lease", "lease available messages (or one by --id)", cmd_lease)
    p.add_argument("--consumer", required=True, help="the lease holder's id")
    p.add_argument("--id", help="lease this message only")
    add_duration_flag(p, "--duration", "lease them for this long", default=30_000)
    p.add_argument("--limit", type=int, default=10, help="lease at most this many (default 10)")
    _add_expected_version(p)

    p = verb("extend", "extend a live lease", cmd_extend)
    _add_holder_arguments(p)
    until = p.add_mutually_exclusive_group(required=True)
    add_time_flag(until, "--until", "new end of the lease")
    add_duration_flag(until, "--by", "new end = database now + this")
    _add_expected_version(p)

    p = verb("release", "give a lease back (due again now, or at --at-ms)", cmd_release)
    _add_holder_arguments(p)
    add_time_flag(p, "--at", "due again then")
    _add_expected_version(p)

    p = verb("delete", "delete as owner (--group) or as lease holder (--consumer)", cmd_delete)
    p.add_argument("id", help="the message's id")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--group", help="as the owner: its producer group")
    who.add_argument("--consumer", help="as the lease holder: its id (with --token)")
    p.add_argument("--token", help="with --consumer: the lease's token (printed by lease)")
    _add_expected_version(p)

    p = verb("count", "count messages by status, optionally in [--from-ms, --to-ms)", cmd_count)
    add_time_flag(p, "--from", "messages due at or after this time")
    add_time_flag(p, "--to", "messages due before this time")

    p = verb("relay", "produce due messages to a Kafka topic, exactly once", cmd_relay)
    p.add_argument("--topic", required=True, help="target Kafka topic")
    p.add_argument("--consumer", required=True, help="relay's consumer id")
    add_duration_flag(
        p,
        "--lease",
        "how long a message the broker refused waits before it is sent again",
        default=60_000,
    )
    p.add_argument("--max-messages", type=int, help="stop after relaying this many")
    p.add_argument(
        "--delivery",
        # RelayConfig's DELIVERIES, spelled here: importing it loads psycopg for --help
        choices=("acked", "transactional"),
        default="acked",
        help="a batch delivered once Kafka acknowledged its records (acked), or in one "
        "Kafka transaction (transactional: read the target read_committed)",
    )
    _add_relay_options(p)

    p = add_verb(
        verbs,
        "ingest",
        cmd_ingest,
        "a time buffer: hold any records of one topic, produce them to another when due",
    )
    p.add_argument("--from", dest="source", required=True, help="source Kafka topic")
    p.add_argument("--to", dest="target", required=True, help="target Kafka topic")
    due = p.add_mutually_exclusive_group(required=True)
    due.add_argument(
        "--delay",
        metavar="DURATION",
        type=duration_argument("--delay"),
        help=f"due this long after it is stored: {DURATION_HELP}",
    )
    due.add_argument("--at-header", metavar="NAME", help="due at the UTC ms in this header")
    due.add_argument(
        "--until-stream-time",
        metavar="STREAM",
        help="due once this stream's watermark reaches the record's timestamp",
    )
    p.add_argument("--timeline", help="the timeline holding them (default buffer.FROM.TO)")
    p.add_argument("--consumer", default="buffer", help="relay name: one process per name")
    p.add_argument(
        "--batch-size", type=int, default=1_000, help="records stored per batch (default 1000)"
    )
    _add_relay_options(p)

    p = add_verb(
        verbs,
        "purge",
        cmd_purge,
        "remove deleted messages (of every timeline) in batches, once or every N ms",
    )
    add_duration_flag(
        p, "--keep-deleted", "purge messages deleted this long ago", default=3_600_000
    )
    p.add_argument(
        "--batch-size", type=int, default=1_000, help="messages removed per batch (default 1000)"
    )
    add_duration_flag(p, "--every", "purge on this schedule until Ctrl-C / SIGTERM")
    p.add_argument(
        "--duration-s",
        type=seconds_argument("--duration-s"),
        help="with --every: stop after this long: seconds, or 90s, 2m, 1h",
    )
    _add_host_options(p, purge=False)


def cmd_create(args: argparse.Namespace) -> int:
    # the timeline package loads psycopg: only its verbs pay for it, not --help
    from tidemark.pipelines.timeline.config import TimelineConfig

    with _store() as store:
        config = store.create_timeline(
            TimelineConfig(args.timeline, args.buckets, args.max_body_bytes)
        )
    emit(args, asdict(config), f"timeline {config.name}: {config.buckets} buckets")
    return 0


def cmd_put(args: argparse.Namespace) -> int:
    if (args.stream is None) != (args.stream_time is None):
        raise ConfigurationError("--stream and --stream-time go together")
    with _store() as store:
        if args.stream_time is not None:
            at_ms = args.stream_time
        else:
            at_ms = args.at_ms if args.at_ms is not None else store.now_ms() + args.in_ms
        created = store.create(
            args.timeline,
            args.body.encode(),
            timestamp_ms=at_ms,
            producer_group=args.group,
            id=args.id,
            due_stream=args.stream,
        )
    m = created.message
    emit(
        args,
        {**_message_row(m), "new": created.new},
        f"{m.id} at {m.timestamp_ms} ({'created' if created.new else 'already there'})",
    )
    return 0


def cmd_lease(args: argparse.Namespace) -> int:
    with _store() as store:
        clock = _stream_clock()
        if clock is not None:
            # the timeline package loads psycopg: only its verbs pay for it, not --help
            from tidemark.pipelines.timeline.consumer import feed_stream_times

            feed_stream_times(store, args.timeline, clock, args.consumer)
        if args.id:
            leases = [
                store.lease_one(
                    args.timeline,
                    args.id,
                    args.consumer,
                    lease_ms=args.duration_ms,
                    version=args.expected_version,
                )
            ]
        else:
            leases = store.lease(
                args.timeline, args.consumer, lease_ms=args.duration_ms, limit=args.limit
            )
    emit_rows(
        args,
        [
            {
                **_message_row(lease.message),
                "due_ms": lease.due_ms,
                "until_ms": lease.until_ms,
                "token": lease.token,
            }
            for lease in leases
        ],
    )
    return 0


def cmd_extend(args: argparse.Namespace) -> int:
    with _store() as store:
        until = args.until_ms if args.until_ms is not None else store.now_ms() + args.by_ms
        m = store.extend(
            args.timeline,
            args.id,
            args.consumer,
            until_ms=until,
            token=args.token,
            version=args.expected_version,
        )
    return _show_changed(args, m, f"{m.id} leased to {m.lock_consumer} until {m.timestamp_ms}")


def cmd_release(args: argparse.Namespace) -> int:
    with _store() as store:
        m = store.release(
            args.timeline,
            args.id,
            args.consumer,
            token=args.token,
            at_ms=args.at_ms,
            version=args.expected_version,
        )
    return _show_changed(args, m, f"{m.id} back on the timeline at {m.timestamp_ms}")


def cmd_delete(args: argparse.Namespace) -> int:
    if (args.consumer is None) != (args.token is None):
        raise ConfigurationError("--consumer and --token go together (the holder's delete)")
    with _store() as store:
        m = store.delete(
            args.timeline,
            args.id,
            producer_group=args.group,
            consumer=args.consumer,
            token=args.token,
            version=args.expected_version,
        )
    return _show_changed(args, m, f"{m.id} deleted")


def cmd_count(args: argparse.Namespace) -> int:
    with _store() as store:
        counts = store.count(args.timeline, args.from_ms, args.to_ms)
    emit(
        args,
        asdict(counts),
        f"total {counts.total}  available {counts.available}  waiting {counts.waiting}  "
        f"processing {counts.processing}",
    )
    return 0


def cmd_relay(args: argparse.Namespace) -> int:
    # the timeline package loads psycopg: only its verbs pay for it, not --help
    from tidemark.pipelines.timeline.config import ConsumerConfig, RelayConfig
    from tidemark.pipelines.timeline.relay import timeline_relay

    dsn = _dsn()
    with _store():
        pass  # migrate
    with (
        _until_stopped(args.duration_s) as stop,
        _host(args, dsn) as purge,
        timeline_relay(
            dsn,
            _bootstrap(args.bootstrap),
            args.timeline,
            RelayConfig(args.topic, flush_timeout_ms=_kafka_wait_ms(), delivery=args.delivery),
            ConsumerConfig(args.consumer, lease_ms=args.lease_ms),
            stream_clock=_stream_clock(),
        ) as relay,
    ):
        while not stop.is_set():
            if args.max_messages is not None and relay.relayed >= args.max_messages:
                break
            relay.run_once(timeout_ms=500)
        relayed, failed = relay.relayed, relay.failed
        purged = None if purge is None else purge.purged
    emit(
        args,
        {"relayed": relayed, "failed": failed, "purged": purged},
        f"relayed {relayed} messages to {args.topic}"
        + (f"; {failed} refused by Kafka (see the log)" if failed else ""),
    )
    return 1 if failed and not relayed else 0


def cmd_ingest(args: argparse.Namespace) -> int:
    # the timeline package loads psycopg: only its verbs pay for it, not --help
    from tidemark.pipelines.timeline.buffer import BufferIngest, BufferRelay, TimelineBuffer
    from tidemark.pipelines.timeline.config import BufferConfig, DueRule

    config = BufferConfig(
        args.source,
        args.target,
        DueRule(
            delay_ms=args.delay,
            at_header=args.at_header,
            until_stream_time=args.until_stream_time,
        ),
        timeline=args.timeline or "",
        consumer_id=args.consumer,
        batch_size=args.batch_size,
        flush_timeout_ms=_kafka_wait_ms(),
    )
    dsn, bootstrap = _dsn(), _bootstrap(args.bootstrap)
    with (
        _until_stopped(args.duration_s) as stop,
        _host(args, dsn) as purge,
        TimelineBuffer(
            BufferIngest(dsn, bootstrap, config),
            BufferRelay(dsn, bootstrap, config, _stream_clock()),
        ) as buffer,
    ):
        try:
            buffer.run(stop)
        except KeyboardInterrupt:
            stop.set()
        read, relayed = buffer.ingest.read, buffer.relay.relayed
        purged = None if purge is None else purge.purged
    emit(
        args,
        {"timeline": config.timeline, "read": read, "relayed": relayed, "purged": purged},
        f"buffer {config.timeline}: read {read} records from {args.source}, "
        f"relayed {relayed} to {args.target}",
    )
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    # the timeline package loads psycopg: only its verbs pay for it, not --help
    from tidemark.pipelines.timeline.housekeeping import PurgeLoop, PurgeSettings

    settings = PurgeSettings(
        interval_ms=PurgeSettings.interval_ms if args.every_ms is None else args.every_ms,
        keep_deleted_ms=args.keep_deleted_ms,
        batch_size=args.batch_size,
    )
    with _host(args, _dsn()), _store() as store:
        loop = PurgeLoop(store, settings)
        if args.every_ms is None:
            loop.run_once()
        else:
            with _until_stopped(args.duration_s) as stop:
                loop.periodic.run(stop)
    emit(
        args,
        {"purged": loop.purged, "passes": loop.passes},
        f"purged {loop.purged} deleted messages in {loop.passes} pass(es)",
    )
    return 0
